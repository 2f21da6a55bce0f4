"""Faster runs on meta weights: a functional aten op on plain meta tensors answered from a cache of its outputs'
metadata, the op itself run once per distinct call.

Why: torch >= 2.x registers Python meta kernels (torch/_meta_registrations.py, decompositions through
torch/_refs) over the C++ ones, ~0.2 ms for a meta add and 0.6-0.8 ms for a linear, so a full-size forward on meta
costs seconds whatever the image size, although its repeated blocks ask the same ops on the same shapes again and
again. The cache's key is the op and, for every argument, a tensor's (shape, stride, dtype, storage offset) or the
value itself (ints, floats, bools, strings, None, dtypes, devices, layouts, memory formats, and lists / tuples of
these), plus torch's default dtype; a hit gives new meta tensors of the recorded shapes, strides and dtypes, what the
op's meta kernel gives. Measured (FLUX Fill production topology on meta at 1024x1024, one step, torch 2.14, one
CPU thread): 3.06 s of CPU for the plain run, 0.53 s for a first run under the cache, 0.39 s for a second.

Exact by construction, else the plain op:
- only ops whose schema mutates nothing and aliases nothing (no in-place, out= or view ops), with Tensor returns,
  and neither random nor of a value-dependent output shape;
- only arguments of the kinds above (a generator, a SymInt, a tensor subclass or a tensor not on meta: the op runs);
- an output is recorded only if it is a fresh, plain meta tensor: not sharing a storage with an input or another
  output, storage offset 0 and a storage of exactly the bytes its shape and strides need (what a hit makes);
- the cache is only switched on where no other TorchDispatchMode is active (the trace's FLOP counter and memory
  estimator, trace/cost.py, see every op as before), and any error while building a key runs the op plainly;
- environment FILLSCOPE_META_OP_CACHE=0 switches it off.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from typing import ClassVar

# torch is imported when a cache is first switched on (the pipelines import this module; the pack imports nothing
# torch-heavy at ComfyUI's start-up)
_MAX_ENTRIES = 50_000  # a full FLUX Fill run at one size records ~250


class _Uncacheable(Exception):
    pass


def _functional(func) -> bool:
    import torch

    schema = func._schema
    if torch.Tag.nondeterministic_seeded in func.tags or torch.Tag.dynamic_output_shape in func.tags:
        return False  # a random op may draw from a generator; an output shape may depend on values
    return (not schema.is_mutable and len(schema.returns) > 0
            and all(a.alias_info is None for a in schema.arguments)
            and all(r.alias_info is None and str(r.type) == "Tensor" for r in schema.returns))


def _key_of(x, parts: list) -> None:
    import torch

    if isinstance(x, torch.Tensor):
        if (type(x) not in (torch.Tensor, torch.nn.Parameter) or not x.is_meta or x.layout != torch.strided
                or x.is_neg() or x.is_conj()):
            raise _Uncacheable
        parts.append((tuple(x.shape), x.stride(), x.dtype, x.storage_offset()))
    elif isinstance(x, (list, tuple)):
        parts.append((type(x), len(x)))
        for y in x:
            _key_of(y, parts)
    elif type(x) in _simple_types():
        parts.append((type(x), x))
    else:
        raise _Uncacheable


@functools.lru_cache(maxsize=1)
def _simple_types() -> tuple:
    import torch

    return (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _storage_id(t) -> int:
    return t.untyped_storage()._cdata


def _record(out, inputs) -> tuple | None:
    """(shape, stride, dtype) of each output if every one is a fresh, plain meta tensor, else None."""
    import torch

    seq = out if isinstance(out, tuple) else (out,)
    seen = {_storage_id(t) for t in inputs}
    meta = []
    for t in seq:
        if type(t) is not torch.Tensor or not t.is_meta or t.layout != torch.strided or t.storage_offset() != 0:
            return None
        sid = _storage_id(t)
        if sid in seen:
            return None
        seen.add(sid)
        fresh = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        if t.untyped_storage().nbytes() != fresh.untyped_storage().nbytes() or t.is_neg() or t.is_conj():
            return None
        meta.append((tuple(t.shape), t.stride(), t.dtype))
    return tuple(meta)


def _tensor_args(tree) -> list:
    import torch

    out = []
    for x in tree:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(_tensor_args(x))
    return out


@functools.lru_cache(maxsize=1)
def _mode_class():
    """The cache's TorchDispatchMode class, made at its first use (torch imported then)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _MetaOpCache(TorchDispatchMode):
        functional: ClassVar[dict] = {}  # op -> whether its schema allows caching
        entries: ClassVar[dict] = {}  # key -> (shape, stride, dtype) per output; None: not cacheable
        hits = 0
        misses = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            cls = type(self)
            ok = cls.functional.get(func)
            if ok is None:
                try:
                    ok = _functional(func)
                except Exception:  # noqa: BLE001 (anything unusual: the plain op)
                    ok = False
                cls.functional[func] = ok
            if not ok:
                return func(*args, **kwargs)
            try:
                parts = [func, torch.get_default_dtype()]
                _key_of(args, parts)
                _key_of(tuple(sorted(kwargs.items())), parts)
                key = tuple(parts)
                hash(key)
            except Exception:  # noqa: BLE001 (anything unusual: the plain op)
                return func(*args, **kwargs)
            meta = cls.entries.get(key, False)
            if meta:
                cls.hits += 1
                outs = tuple(torch.empty_strided(shape, stride, dtype=dtype, device="meta") for shape, stride, dtype in meta)
                return outs if len(func._schema.returns) > 1 else outs[0]
            out = func(*args, **kwargs)
            if meta is False:
                cls.misses += 1
                if len(cls.entries) >= _MAX_ENTRIES:
                    cls.entries.clear()
                try:
                    cls.entries[key] = _record(out, _tensor_args((args, tuple(kwargs.values()))))
                except Exception:  # noqa: BLE001 (anything unusual: the plain op)
                    cls.entries[key] = None
            return out

    return _MetaOpCache


@contextmanager
def meta_op_cache(enabled: bool = True):
    """The cache around a block of work on meta weights; nothing where `enabled` is false or another
    TorchDispatchMode is active (its ops must reach it: trace/cost.py's FLOP counter and memory estimator)."""
    if not enabled or os.environ.get("FILLSCOPE_META_OP_CACHE", "1") == "0":
        yield
        return
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    if _get_current_dispatch_mode_stack():
        yield
        return
    with _mode_class()():
        yield


def _is_meta(component) -> bool:
    return getattr(component, "device", None) == "meta"


def cached_on_meta(component_of):
    """A decorator: the function runs under meta_op_cache when `component_of(args, kwargs)` (the component that
    decides) is on the meta device."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                on_meta = _is_meta(component_of(args, kwargs))
            except Exception:  # noqa: BLE001 (anything unusual: the plain op)
                on_meta = False
            with meta_op_cache(on_meta):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


def first_argument(args, kwargs):
    """The transformer of a sampler (its first argument)."""
    return args[0] if args else kwargs.get("transformer")


def stack_transformer(args, kwargs):
    """A pipeline run's transformer: the stack's (its first argument)."""
    stack = args[0] if args else kwargs.get("stack")
    return stack.get("transformer") if isinstance(stack, dict) else None
