"""Module-level shape tracing: forward hooks on every submodule, one row per distinct shape signature.

`ModuleTracer({"name": model, ...})` is a context manager. On enter it registers, on every module that
`model.named_modules()` yields (the root included, each module object once per component), a forward
pre-hook and a forward hook, both `with_kwargs=True`, so blocks called with keyword arguments (diffusers'
transformer blocks, T5's layers) show their inputs. On exit every handle is removed, also when the traced code
raised.

Definition (what a row and a hit are)
-------------------------------------
* row key = (component, qualified module name, class name, input signature, output signature);
* hit = one completed call of a module through `Module.__call__` (a call that raised is not counted);
* input signature = the shapes of the tensors in `args` then `kwargs` (keyword names kept), walked
  recursively through tuples, lists, dicts and ModelOutput (a dict), read in the pre-hook (before the
  forward can change anything); output signature = the same walk over the returned value;
* a tensor writes as its shape, `[1,4096,384]` (dtype and device are NOT part of the key); `None` writes as
  `None`; any other value writes as its type name (`int`, `float`, `bool`, `str`, ...), never its value, so a
  changing timestep scalar does not split rows;
* only calls through `__call__` are seen: a method that is not `forward` (`AutoencoderKL.encode` / `.decode`,
  which call `self.encoder` / `self.decoder`) adds no hit for the module that owns it, and a module whose
  `forward` is called directly is not seen either.

Measured with this definition (meta device, production configs, 1024x1024, batch 1; tests/test_tracers.py
pins the FLUX figures, bench/bench_tracing.py prints both):

* FLUX.1 Fill, one denoiser step: models traced = {clip_l: the CLIP text transformer FLUX computes with
  (`text.clip_text_model(...)`, i.e. without the clip_l file's `text_projection`, which FLUX never uses),
  t5, transformer, vae}; run = CLIP-L encode, T5 encode (512), VAE encode of the masked image
  (`flux_fill.build_fill_condition`), ONE transformer forward (`sample_flux_fill(steps=1)`), VAE decode.
  Result: CLIP-L 150/150, T5 438/439, VAE encode (encoder.*) 97/105, transformer 1,220/1,221, VAE decode
  (decoder.*) 125/137; total 2,030 rows / 2,052 hits. Every component equals the seed's breakdown
  (REFERENCE.md section 4), whose sum is 2,030/2,052; the seed's stated total 2,029/2,051 is one less than its
  own components (+0.05% here). Rows < hits where a module runs twice with the same shapes: T5's
  `encoder.dropout` (after the embedding and after the final norm), the transformer's `time_proj` (timestep
  and guidance), and each VAE resnet's shared `nonlinearity` (8 in the encoder, 12 in the decoder).
* SD3-medium + alimama ControlNet, one step with CFG: models = {clip_l, clip_g (both with their
  projections, which SD3's pooled vector uses), t5, transformer, controlnet, vae}; run = prompt and negative
  through CLIP-L, CLIP-G and T5 (256), VAE encode, ControlNet + transformer once each (batch 2), VAE decode.
  Result: CLIP-L 151/302, CLIP-G 391/782, T5 438/878, ControlNet 752/752, transformer 756/756, VAE 222/242
  (encode 97/105, decode 125/137); total 2,710 rows / 3,712 hits (the negative prompt repeats the positive's
  shapes: hits double, rows do not).

Counting choices and what they do to the FLUX figure (measured): tracing the clip_l model as loaded
(CLIPTextModelWithProjection, whose `text_projection` `text.encode_clip` calls) adds 1 row / 1 hit (2,031 /
2,053); leaving out the roots' own rows removes 3/3 (the CLIP text transformer's, T5's and the FLUX
transformer's roots are called; the VAE's root never is, because the engine calls `AutoencoderKL.encode` /
`.decode`, not its forward; counting those two methods as calls would add 2/2); hooks without `with_kwargs`
give the same counts but 130 modules (the 57 blocks among them) then show no inputs at all.

`wall_s` per row is inclusive (children included), from `time.perf_counter()` in the pre-hook to the forward
hook; with `sync_cuda=True` CUDA is synchronised at both ends (otherwise asynchronous kernels make it launch
time). On the meta device the times are Python overhead only. Measured on an H200 (placeholder bf16
weights, 1024x1024): one FLUX Fill transformer forward 0.186 s untraced, 0.207 s under the tracer (1.11x, hooks
on 1,220 modules registered and removed inside the timing), 0.357 s with `sync_cuda=True`; SD3 + ControlNet
CFG step 0.119 s untraced, 0.157 s traced. On CPU the tiny FLUX engine run is within noise of untraced.
"""

from __future__ import annotations

import time
from collections import defaultdict

__all__ = ["ModuleTracer", "shape_signature"]


def _structure(obj, depth: int = 0):
    """A hashable, cheap-to-build form of a value's shape signature (formatted to text only when read):
    tensors -> torch.Size, containers -> a tuple led by a marker string, anything else -> its type name."""
    if isinstance(obj, _Tensor):
        return obj.shape
    if obj is None:
        return None
    if depth > 8:
        return "..."
    if isinstance(obj, tuple):
        return ("(",) + tuple(_structure(x, depth + 1) for x in obj)
    if isinstance(obj, list):
        return ("<",) + tuple(_structure(x, depth + 1) for x in obj)
    if isinstance(obj, dict):  # ModelOutput is an OrderedDict subclass: its set fields
        return ("{",) + tuple((k, _structure(v, depth + 1)) for k, v in obj.items())
    return type(obj).__name__


def _format(struct) -> str:
    if struct is None:
        return "None"
    if isinstance(struct, str):
        return struct
    if isinstance(struct, _Size):
        return "[" + ",".join(str(d) for d in struct) + "]"
    kind, items = struct[0], struct[1:]
    if kind == "(":
        return "(" + ",".join(_format(x) for x in items) + ")"
    if kind == "<":
        return "<" + ",".join(_format(x) for x in items) + ">"
    if kind == "{":
        return "{" + ",".join(f"{k}:{_format(v)}" for k, v in items) + "}"
    if kind == "call":  # (args, kwargs) of a module call
        args, kwargs = items
        return "(" + ",".join([_format(a) for a in args] + [f"{k}={_format(v)}" for k, v in kwargs]) + ")"
    raise ValueError(f"not a signature structure: {struct!r}")


def _bind_torch():
    global _Tensor, _Size
    import torch

    _Tensor, _Size = torch.Tensor, torch.Size


_Tensor = _Size = ()  # bound to torch.Tensor / torch.Size on first use (torch is imported lazily)


def shape_signature(obj) -> str:
    """Compact shapes-only signature of a (nested) value: tensors as `[d0,d1]`, None as `None`, tuples as
    `(...)`, lists as `<...>`, dicts as `{k:...}`, every other value as its type name."""
    _bind_torch()
    return _format(_structure(obj))


def call_signature(args, kwargs) -> str:
    """`(a0,a1,k=...)`: the positional then keyword arguments of a call."""
    _bind_torch()
    return _format(_call_structure(args, kwargs))


def _call_structure(args, kwargs):
    return ("call", tuple(_structure(a, 1) for a in args), tuple((k, _structure(v, 1)) for k, v in kwargs.items()))


class ModuleTracer:
    """Forward-hook tracer over named models. See the module docstring for the row/hit definition."""

    def __init__(self, models: dict, *, sync_cuda: bool = False):
        self.models = dict(models)
        self.sync_cuda = sync_cuda
        self._handles: list = []
        self._pending: dict[int, list] = defaultdict(list)  # id(module) -> stack of (input sig, t0)
        self._rows: dict[tuple, list] = {}  # key -> [hits, wall_s]
        self._names: dict[int, tuple[str, str, str]] = {}  # id(module) -> (component, qualified name, class)
        self._active = False
        self._text: dict = {}  # signature structure -> its text
        self._sync_fn = None

    # -- context manager -------------------------------------------------------------------------------
    def __enter__(self):
        if self._active:
            raise RuntimeError("ModuleTracer is already active")
        _bind_torch()
        import torch

        self._sync_fn = torch.cuda.synchronize if self.sync_cuda and torch.cuda.is_available() else None
        self._active = True
        hooked: set[int] = set()
        try:
            for comp, model in self.models.items():
                for qual, module in model.named_modules():  # each module object once, root first (name "")
                    if id(module) in hooked:  # shared with an earlier component: traced there
                        continue
                    hooked.add(id(module))
                    self._names[id(module)] = (comp, qual, type(module).__name__)
                    self._handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
                    self._handles.append(module.register_forward_hook(self._post, with_kwargs=True))
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self._remove()
        return False

    def _remove(self):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._pending.clear()
        self._active = False

    # -- hooks -----------------------------------------------------------------------------------------
    def _sync(self):
        if self._sync_fn is not None:
            self._sync_fn()

    def _pre(self, module, args, kwargs):
        sig = _call_structure(args, kwargs)
        self._sync()
        self._pending[id(module)].append((sig, time.perf_counter()))

    def _post(self, module, args, kwargs, output):
        self._sync()
        t1 = time.perf_counter()
        stack = self._pending.get(id(module))
        if not stack:  # hooks registered mid-call: no matching pre-hook
            return
        sig_in, t0 = stack.pop()
        key = (*self._names[id(module)], sig_in, _structure(output))
        row = self._rows.get(key)
        if row is None:
            self._rows[key] = [1, t1 - t0]
        else:
            row[0] += 1
            row[1] += t1 - t0

    # -- results ---------------------------------------------------------------------------------------
    @property
    def rows(self) -> list[dict]:
        """One dict per row (component, module, class, inputs, outputs, hits, wall_s), in the order their first
        call completed (children before their parents). Entering the same tracer again adds to them."""
        fmt = self._formatted
        return [
            {"component": c, "module": m, "class": k, "inputs": fmt(i), "outputs": fmt(o), "hits": h, "wall_s": w}
            for (c, m, k, i, o), (h, w) in self._rows.items()
        ]

    def _formatted(self, struct) -> str:
        try:
            return self._text[struct]
        except KeyError:
            text = self._text[struct] = _format(struct)
            return text

    @property
    def hits(self) -> int:
        return sum(h for h, _ in self._rows.values())

    def per_component(self) -> dict[str, dict]:
        out = {name: {"rows": 0, "hits": 0} for name in self.models}
        for (c, *_), (h, _) in self._rows.items():
            out[c]["rows"] += 1
            out[c]["hits"] += h
        return out

    def calls_of(self, component: str, module: str) -> list[dict]:
        """The rows of one module (qualified name, "" for the root) of one component."""
        return [r for r in self.rows if r["component"] == component and r["module"] == module]

    def summary(self) -> dict:
        return {"rows": len(self._rows), "hits": self.hits, "per_component": self.per_component()}
