"""Where a component's weights live while it is used: the memory policies.

- keep: moved to the compute device when first needed, left there.
- offload: moved to the compute device for each use, back to the offload device (CPU) right after, so
  only the component in use is resident (FLUX Fill's sampler then holds the transformer alone).
- sequential: the weights stay on the offload device; each module's own parameters are moved to the compute
  device just before its forward and back right after (slow, for cards smaller than the model).
- auto: offload for text encoders and the VAE, keep for the denoisers (transformer, ControlNet).

The engine works on `Component.device` (where inputs go); this module keeps it true. ComfyUI's memory
management drives the same moves through nodes/memory.py.
"""

from __future__ import annotations

from contextlib import contextmanager

POLICIES = ("auto", "keep", "offload", "sequential")
DENOISERS = ("flux_fill_transformer", "sd3_transformer", "sd3_controlnet")


def resolve_policy(policy: str, kind: str) -> str:
    if policy not in POLICIES:
        from .errors import FillScopeInputError

        raise FillScopeInputError("memory", f"unknown policy {policy!r}.", f"use one of {', '.join(POLICIES)}.")
    if policy == "auto":
        return "keep" if kind in DENOISERS else "offload"
    return policy


def weight_bytes(model) -> int:
    """Bytes of a model's parameters and buffers (each storage once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def move(comp, device) -> None:
    """Move a component's weights whole and keep `comp.device` true. Meta components never move."""
    if comp.device == "meta":
        return
    import torch

    device = torch.device(device)
    comp.model.to(device)
    comp.device = device.type if device.index is None or device.type == "cpu" else f"{device.type}:{device.index}"


def _stream_hooks(model, compute_device):
    """Hooks that bring each module's own parameters to `compute_device` for its forward only."""
    handles = []

    def pre(module, args):
        for p in module.parameters(recurse=False):
            p.data = p.data.to(compute_device, non_blocking=True)
        for name, b in module.named_buffers(recurse=False):
            module._buffers[name] = b.to(compute_device, non_blocking=True)

    def post(module, args, output):
        for p in module.parameters(recurse=False):
            p.data = p.data.to("cpu", non_blocking=True)
        for name, b in module.named_buffers(recurse=False):
            module._buffers[name] = b.to("cpu", non_blocking=True)

    for module in model.modules():
        if any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False)):
            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))
    return handles


@contextmanager
def in_use(comp, compute_device, policy: str = "auto", offload_device="cpu"):
    """Place a component for one use under a policy, and put it back afterwards as the policy says."""
    if comp.device == "meta":
        yield comp
        return
    policy = resolve_policy(policy, comp.kind)
    if policy == "sequential":
        move(comp, offload_device)
        handles = _stream_hooks(comp.model, compute_device)
        saved = comp.device
        comp.device = str(compute_device)  # inputs go where the computation happens
        try:
            yield comp
        finally:
            for h in handles:
                h.remove()
            comp.device = saved
        return
    move(comp, compute_device)
    try:
        yield comp
    finally:
        if policy == "offload":
            move(comp, offload_device)
