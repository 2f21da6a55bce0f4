"""FillScope components under ComfyUI's model management.

Each non-meta component gets a ModelPatcher (around a plain container module: ModelPatcher sets `.device` on
the module it holds, which diffusers' ModelMixin does not allow) whose load and unload move the component
whole, through fillscope.placement. ComfyUI then counts FillScope's weights when it frees memory for another
model, and "Unload models" / POST /free offload them; a node that needs a component asks ComfyUI to load it
(`use`), and the policy the loader chose says what happens after.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache

from ..fillscope import placement
from ..fillscope.specs import COMPONENTS


@lru_cache(maxsize=None)
def _classes():
    """Defined on first use, so importing the pack does not import ComfyUI's model management."""
    import torch
    from comfy.model_patcher import ModelPatcher

    class FillScopeModel(torch.nn.Module):  # ComfyUI logs "Requested to load FillScopeModel"
        def __init__(self, model):
            super().__init__()
            self.inner = model

    return FillScopeModel, type("FillScopePatcher", (_PatcherMixin, ModelPatcher), {})


class _PatcherMixin:
    """A ModelPatcher that loads and unloads one component whole (its layers are diffusers/transformers modules, not ComfyUI's
    cast-weight ops, so partial loading does not apply)."""

    def __init__(self, component, load_device, offload_device):
        holder = _classes()[0]
        super().__init__(holder(component.model), load_device, offload_device,
                         size=placement.weight_bytes(component.model))
        self.component = component
        self.model.model_loaded_weight_memory = self.size if self._on(load_device) else 0
        self.model.device = load_device if self._on(load_device) else offload_device

    def _on(self, device) -> bool:
        import torch

        return torch.device(self.component.device).type == torch.device(device).type

    def model_patches_to(self, device):
        pass

    def model_dtype(self):
        return self.component.model.dtype

    def partially_load(self, device_to, extra_memory=0, force_patch_weights=False):
        if self.model.model_loaded_weight_memory:
            return 0
        placement.move(self.component, device_to)
        self.model.device = device_to
        self.model.model_loaded_weight_memory = self.size
        return self.size

    def partially_unload(self, device_to, memory_to_free=0, force_patch_weights=False):
        freed = self.model.model_loaded_weight_memory
        self.detach()
        return freed

    def detach(self, unpatch_all=True):
        placement.send_back(self.component, self.offload_device)
        self.model.device = self.offload_device
        self.model.model_loaded_weight_memory = 0
        return self.model


def patcher(component):
    """The component's ComfyUI patcher (created once); None for meta components, which hold no memory."""
    import comfy.model_management as mm

    if component.device == "meta":
        return None
    p = component.extras.get("comfy_patcher")
    if p is None:
        import torch

        # ComfyUI matches devices exactly (cuda:0 is not cuda) when it frees memory: use its own device object
        compute = torch.device(component.extras.get("compute_device") or mm.get_torch_device())
        load_device = mm.get_torch_device() if compute.type == mm.get_torch_device().type else compute
        p = _classes()[1](component, load_device, mm.unet_offload_device())
        component.extras["comfy_patcher"] = p
    return p


@contextmanager
def use(*components, rec=None):
    """Have ComfyUI load the components for one node's work, then apply each component's policy (extras["memory"],
    set by its loader; default auto). Before loading, `auto` components another use left resident go back to CPU
    memory as far as FillScope's budget needs (fillscope.placement.Residency); ComfyUI may free more under pressure.
    With `rec` (the node's ShapeRecorder), what moved is recorded on the node."""
    import comfy.model_management as mm

    def policy(c):
        return placement.resolve_policy(c.extras.get("memory", "auto"))

    live = [c for c in components if c.device != "meta"]
    whole = [c for c in live if policy(c) != "sequential"]
    cuda = next((patcher(c).load_device for c in live if patcher(c).load_device.type == "cuda"), None)
    if cuda is not None and rec is not None:
        import torch

        torch.cuda.reset_peak_memory_stats(cuda)
    arriving = [c for c in whole if not placement.RESIDENCY.is_resident(c)]
    evicted = placement.RESIDENCY.admit(whole, {id(c): policy(c) for c in whole})
    for other in evicted:
        p = other.extras.get("comfy_patcher")
        if p is not None:
            _unload(p)
        else:
            placement.send_back(other, mm.unet_offload_device())
    if whole:
        try:
            mm.load_models_gpu([patcher(c) for c in whole])
        except BaseException:  # out of memory, interrupted: nothing stays counted as loaded
            placement.RESIDENCY.release(whole)
            for c in arriving:
                if not c.extras["comfy_patcher"].model.model_loaded_weight_memory:
                    placement.RESIDENCY.left(c)
            raise
    if rec is not None and live:
        _record_moves(rec, arriving, evicted, whole)
    sequential = []
    for c in live:
        if policy(c) == "sequential":  # streamed block by block: never loaded whole
            ctx = placement.in_use(c, patcher(c).load_device, "sequential", mm.unet_offload_device())
            ctx.__enter__()
            sequential.append(ctx)
    try:
        yield
    finally:
        for ctx in sequential:
            ctx.__exit__(None, None, None)
        if cuda is not None and rec is not None:
            import torch

            rec.fact("memory: CUDA peak while this node ran (measured, whole process)",
                     _gib(torch.cuda.max_memory_allocated(cuda)))
        placement.RESIDENCY.release(whole)
        for c in whole:
            p = c.extras.get("comfy_patcher")
            if p is not None and policy(c) == "offload":
                _unload(p)


def _gib(nbytes: int) -> str:
    """GiB, or MiB below one GiB (so small models' figures do not all read 0.00)."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.2f} MiB"


def _record_moves(rec, arriving, evicted, whole) -> None:
    def name(c):
        kind = COMPONENTS.get(c.kind)
        return kind.title if kind else c.kind

    residency = placement.RESIDENCY
    rec.fact("memory: loaded for this node",
             ", ".join(f"{name(c)} ({_gib(residency.nbytes(c))})" for c in arriving) or "nothing (already resident)")
    if evicted:
        rec.fact("memory: sent back to make room", ", ".join(f"{name(c)} ({_gib(residency.nbytes(c))})" for c in evicted))
    needed = sum(residency.nbytes(c) for c in whole)
    rec.fact("memory: FillScope resident / budget", f"{_gib(residency.resident_bytes())} / {_gib(residency.budget(needed))}")


def _unload(p) -> None:
    import comfy.model_management as mm

    for loaded in list(mm.current_loaded_models):
        if loaded.model is p:
            loaded.model_unload()
            mm.current_loaded_models.remove(loaded)
            return
    p.detach()
