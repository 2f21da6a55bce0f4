"""fp8 storage, higher-precision compute: weights stay in float8 in memory and are upcast one layer at a time.

A forward pre-hook on each module that owns fp8 weights swaps in an upcast copy (times the file's per-tensor
scale for ComfyUI's "scaled fp8" files) for the duration of that module's forward, and a forward hook puts the
fp8 tensor back. So at most one layer's weights exist in the compute dtype at a time, and the state dict keeps
its names and fp8 tensors.

Some modules read a child's weight dtype before calling it (transformers' T5 feed-forward casts its input to
`wo.weight.dtype`): those are hooked as a group, so the check sees the compute dtype and not fp8.
"""

from __future__ import annotations

from .models import torch_dtype
from .placement import forget_host_copy

FP8_NAMES = ("float8_e4m3fn", "float8_e5m2")

# Modules whose forward inspects a child's weight dtype: upcast their whole subtree together.
GROUP_CLASSES = ("T5DenseGatedActDense", "T5DenseActDense")


def fp8_dtypes() -> tuple:
    import torch

    return tuple(getattr(torch, n) for n in FP8_NAMES if hasattr(torch, n))


def is_fp8(dtype) -> bool:
    return dtype in fp8_dtypes()


def nonfinite_count(tensor) -> int:
    """Number of NaN/inf entries (fp8 included: upcast to fp16, which holds every e4m3fn and e5m2 value)."""
    import torch

    if not (tensor.is_floating_point() or is_fp8(tensor.dtype)):
        return 0
    t = tensor.to(torch.float16) if is_fp8(tensor.dtype) else tensor
    return int((~torch.isfinite(t)).sum())


class _Upcast:
    """The pre/post hook pair of one module: entries are (parameter, compute dtype, scale or None)."""

    def __init__(self, entries):
        self.entries = entries
        self.saved = None

    def pre(self, module, args):
        import torch

        self.saved = []
        for param, dtype, scale in self.entries:
            # the new data must match the parameter's inference-ness (a parameter loaded inside ComfyUI's
            # inference_mode is an inference tensor; one loaded outside refuses inference data on meta)
            with torch.inference_mode(param.is_inference()):
                self.saved.append(param.data)
                w = param.data.to(dtype)
                if scale is not None:
                    w = w * scale.to(device=w.device, dtype=dtype)
                param.data = w

    def post(self, module, args, output):
        if self.saved is not None:
            for (param, _, _), data in zip(self.entries, self.saved):
                param.data = data
            self.saved = None


def enable_fp8_compute(model, compute_dtypes: dict, scales: dict | None = None) -> dict:
    """Hook every module that holds fp8 parameters. `compute_dtypes`: parameter name -> dtype to compute in (the
    dtype the model would have had without fp8: the loader's dtype, fp32 for modules kept in fp32); `scales`:
    parameter name -> scale tensor (ComfyUI scaled fp8). Returns {"tensors", "bytes", "modules"} counts."""
    scales = scales or {}
    fp8 = fp8_dtypes()
    names = {id(p): n for n, p in model.named_parameters()}  # a tied parameter under its first name
    stats = {"tensors": 0, "bytes": 0, "modules": 0}
    seen = set()
    grouped = set()

    def hook(module, params):
        entries = []
        for p in params:
            if id(p) in seen:
                continue
            seen.add(id(p))
            name = names[id(p)]
            entries.append((p, compute_dtypes[name], scales.get(name)))
            stats["tensors"] += 1
            stats["bytes"] += p.numel() * p.element_size()
        if entries:
            up = _Upcast(entries)
            module.register_forward_pre_hook(up.pre)
            module.register_forward_hook(up.post, always_call=True)
            module._fillscope_fp8 = up
            stats["modules"] += 1

    for name, module in model.named_modules():
        if any(name == g or name.startswith(g + ".") for g in grouped):
            continue
        if type(module).__name__ in GROUP_CLASSES:
            params = [p for p in module.parameters() if p.dtype in fp8]
            if params:
                grouped.add(name)
                hook(module, params)
            continue
        params = [p for p in module.parameters(recurse=False) if p.dtype in fp8]
        if params:
            hook(module, params)
    # Tied parameters owned by several modules (T5's shared / encoder.embed_tokens): every owner needs the hook.
    for name, module in model.named_modules(remove_duplicate=False):
        if getattr(module, "_fillscope_fp8", None) is not None or any(name.startswith(g + ".") for g in grouped):
            continue
        params = [p for p in module.parameters(recurse=False) if p.dtype in fp8 and id(p) in seen]
        if params:
            entries = [(p, compute_dtypes[names[id(p)]], scales.get(names[id(p)])) for p in params]
            up = _Upcast(entries)
            module.register_forward_pre_hook(up.pre)
            module.register_forward_hook(up.post, always_call=True)
            module._fillscope_fp8 = up
    return stats


def report_compute_dtype(model, dtype) -> None:
    """diffusers' ModelMixin.dtype and transformers' PreTrainedModel.dtype return the first floating parameter's
    dtype, which for fp8 storage would make pipelines cast their inputs to fp8. Give this instance a subclass
    whose `dtype` is the compute dtype (same class name, isinstance unchanged)."""
    cls = type(model)
    sub = type(cls.__name__, (cls,), {"dtype": property(lambda self: dtype), "__module__": cls.__module__,
                                      "__qualname__": cls.__qualname__})
    model.__class__ = sub


# Linear layers of the repeated blocks: FLUX's double/single blocks, SD3's joint blocks and its ControlNet's,
# T5's encoder blocks, klein's double/single blocks and Qwen3's decoder layers. They hold >90% of each model's
# parameters; embedders, norms and output layers stay as loaded.
_BLOCK_LINEAR = r"(^|\.)(transformer_blocks|single_transformer_blocks|block|layers)\.\d+\."
E4M3_MAX = 448.0


def store_blocks_in_fp8(comp) -> str:
    """Store a loaded component's block Linear weights in float8_e4m3fn (cast after clamping to its +-448 range,
    as ComfyUI's fp8_e4m3fn weight dtype does; no scales) and compute them in the component's dtype one layer at
    a time. Halves the bytes of a bf16 model's blocks; a component loaded from an fp8 file is left as it is.
    Returns the fact to show on the loader."""
    import re

    import torch

    model = comp.model
    if any(getattr(m, "_fillscope_fp8", None) is not None for m in model.modules()):
        return "already stored in fp8 by its file"
    forget_host_copy(comp)
    pattern = re.compile(_BLOCK_LINEAR)
    compute = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and pattern.search(name + ".") and not is_fp8(module.weight.dtype):
            compute[f"{name}.weight"] = module.weight.dtype
            module.weight.data = module.weight.data.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    stats = enable_fp8_compute(model, compute)
    report_compute_dtype(model, torch_dtype(comp.dtype))
    return (f"{stats['tensors']} block weight tensors ({stats['bytes'] / 2**30:.2f} GiB) stored in fp8_e4m3fn, "
            f"upcast to {comp.dtype} one layer at a time ({stats['modules']} hooked modules)")
