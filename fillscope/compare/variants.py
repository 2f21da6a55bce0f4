"""A run's variant of loaded components: another dtype, fp8 storage, another attention backend, without touching
the components the graph (or the other run) holds.

stack_variant copies only the components it must change: a dtype other than a component's own gives a copy cast to
it, fp8 storage a copy whose block weights are stored in float8 (fp8.store_blocks_in_fp8). A copy costs that
component's memory again while the run lasts; a component that needs no change is shared. attention_backend sets a
diffusers attention backend on the transformer for one run and puts every processor's own back afterwards.
"""

from __future__ import annotations

import copy
import dataclasses
from contextlib import contextmanager

from ..errors import FillScopeInputError

DTYPES = ("as loaded", "fp32", "bf16", "fp16")
STORAGES = ("as loaded", "fp8_e4m3fn")  # fp8_e4m3fn: block weights kept in float8 (fp8.store_blocks_in_fp8)
FP8_COMPONENTS = ("transformer", "t5", "qwen3")  # the big ones the loaders offer fp8 storage for


def _copy(comp):
    return dataclasses.replace(comp, model=copy.deepcopy(comp.model), extras=copy.deepcopy(comp.extras))


def stack_variant(stack: dict, *, dtype: str = "as loaded", storage: str = "as loaded") -> tuple[dict, dict]:
    """(the stack for this run, facts: what was copied or cast)."""
    from ..models import torch_dtype

    if dtype not in DTYPES:
        raise FillScopeInputError("dtype", f"is {dtype!r}.", f"choose one of {', '.join(DTYPES)}.")
    if storage not in STORAGES:
        raise FillScopeInputError("storage", f"is {storage!r}.", f"choose one of {', '.join(STORAGES)}.")
    out, facts = dict(stack), {}
    for name, comp in stack.items():
        if comp.is_meta:
            continue
        if dtype != "as loaded" and comp.dtype != dtype:
            cast = _copy(comp)
            cast.model.to(torch_dtype(dtype))
            out[name] = dataclasses.replace(cast, dtype=dtype)
            facts[f"{name} dtype"] = f"{comp.dtype} -> {dtype} (a copy)"
        if storage == "fp8_e4m3fn" and name in FP8_COMPONENTS:
            from ..fp8 import store_blocks_in_fp8

            target = out[name] if out[name] is not comp else _copy(comp)
            facts[f"{name} storage"] = store_blocks_in_fp8(target)
            out[name] = target
    return out, facts


@contextmanager
def attention_backend(comp, backend: str | None):
    """The transformer's attention processors on diffusers backend `backend` for the block; None: as they are."""
    if not backend or backend == "as loaded":
        yield
        return
    model = comp.model
    if not hasattr(model, "set_attention_backend"):
        raise FillScopeInputError("attention", f"{type(model).__name__} offers no attention backends here.",
                                  "leave attention as loaded.")
    processors = [m.processor for m in model.modules() if hasattr(m, "processor")]
    before = [getattr(p, "_attention_backend", None) for p in processors]
    try:
        model.set_attention_backend(backend)
    except (ValueError, ImportError, RuntimeError) as e:
        raise FillScopeInputError("attention", f"is {backend!r}: diffusers refused it ({e}).",
                                  "choose a backend this machine runs, e.g. native or _native_math.") from None
    try:
        yield
    finally:
        for p, b in zip(processors, before):
            p._attention_backend = b
