"""Test-only ComfyUI nodes for tests/test_server_inspect_model.py (FillScope Inspect Model on ComfyUI's own MODEL),
loaded from this folder as an extra custom_nodes path; never part of the pack.

- NativeTestTinyModel: ComfyUI's own model classes at tiny sizes, built as ComfyUI's loaders build them
  (comfy.sd.load_diffusion_model_state_dict): the supported model's config object (comfy.supported_models.Flux /
  FluxInpaint / SD3) with a small unet_config, set_inference_dtype, get_model() -> comfy.model_base.Flux / SD3 with
  comfy.ldm.flux.model.Flux / MMDiT inside, seeded random weights, comfy.model_patcher.ModelPatcher on ComfyUI's load
  and offload devices. (UNETLoader cannot load a tiny FLUX file: model_detection fixes 24 heads of 128.)
- NativeTestTinyTAESD: ComfyUI's VAE object (comfy.sd.VAE) over its own TAESD class with 16 latent channels and seeded
  random weights: a VAE small enough for InpaintModelConditioning and VAEDecode on the CPU.
- NativeTestSaveNativeLatent: a LATENT's samples to <output>/fillscope_native/<name>.safetensors.
- NativeTestInterruptAtCall: a clone of a MODEL that asks ComfyUI to interrupt (comfy.model_management.
  interrupt_current_processing, what POST /interrupt calls) right after its n-th model call of a sampling run; the
  sampler's next progress update raises ComfyUI's InterruptProcessingException, as a user's Cancel does.
- NativeTestModelHooks: what is attached to a MODEL's modules and options after the graph ran (forward hooks and
  pre-hooks on every module of its model, wrapper keys of the patcher and of its model_options), written to
  <output>/fillscope_native/<name>.json; takes a LATENT so that it runs after the sampler that made it.
"""

from __future__ import annotations

import json
import os

CATEGORY = "FillScope tests"

FLUX = {"image_model": "flux", "in_channels": 16, "out_channels": 16, "vec_in_dim": 16, "context_in_dim": 32,
        "hidden_size": 64, "mlp_ratio": 4.0, "num_heads": 2, "depth": 2, "depth_single_blocks": 2,
        "axes_dim": [8, 12, 12], "theta": 10000, "patch_size": 2, "qkv_bias": True, "guidance_embed": True}
FLUX_FILL = {**FLUX, "in_channels": 96}  # 16 latent + 16 masked-image latent + 64 (the 8x8-packed mask)
# MMDiT: hidden 64 * depth, heads = depth (head 64)
SD3 = {"in_channels": 16, "out_channels": 16, "patch_size": 2, "depth": 2, "input_size": None,
       "adm_in_channels": 24, "context_embedder_config": {"target": "torch.nn.Linear",
                                                          "params": {"in_features": 48, "out_features": 128}},
       "num_patches": 1024, "pos_embed_max_size": 32, "pos_embed_scaling_factor": None, "x_block_self_attn_layers": []}
CONFIGS = {"flux": ("Flux", FLUX), "flux_fill": ("FluxInpaint", FLUX_FILL), "sd3": ("SD3", SD3)}


def _seeded(module, seed: int) -> None:
    """Every parameter and buffer of `module` from one generator, in state-dict order (small normal values; norm
    scales near 1)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, t in module.state_dict().items():
        if not t.is_floating_point():
            sd[name] = t
            continue
        v = torch.randn(t.shape, generator=g, dtype=torch.float32) * 0.05
        if name.endswith(".scale"):  # RMSNorm scales
            v = v + 1.0
        sd[name] = v.to(t.dtype)
    module.load_state_dict(sd, strict=True)


class TinyModel:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"family": (list(CONFIGS),), "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, family, seed):
        import comfy.model_management as mm
        import comfy.model_patcher
        import comfy.supported_models
        import torch

        name, unet = CONFIGS[family]
        config = getattr(comfy.supported_models, name)(unet)
        config.set_inference_dtype(torch.float32, None)
        offload = mm.unet_offload_device()
        model = config.get_model({}, "").to(offload)
        _seeded(model.diffusion_model, seed)
        return (comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=offload),)


class TinyTAESD:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": 0, "min": 0, "max": 2**31}),
                             "latent_channels": ("INT", {"default": 16, "min": 1, "max": 64})}}

    RETURN_TYPES = ("VAE",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, seed, latent_channels):
        import comfy.sd
        import comfy.taesd.taesd
        import torch

        shapes = comfy.taesd.taesd.TAESD(latent_channels=latent_channels).state_dict()
        g = torch.Generator().manual_seed(seed)
        sd = {k: (torch.randn(v.shape, generator=g) * 0.05 if k not in ("vae_scale", "vae_shift") else v)
              for k, v in shapes.items()}
        return (comfy.sd.VAE(sd=sd),)


def _out(name: str, ext: str) -> str:
    import folder_paths

    folder = os.path.join(folder_paths.get_output_directory(), "fillscope_native")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{name}.{ext}")


class SaveNativeLatent:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",), "name": ("STRING", {"default": "latent"})}}

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    def save(self, samples, name):
        from safetensors.torch import save_file

        save_file({"samples": samples["samples"].detach().cpu().contiguous()}, _out(name, "safetensors"))
        return {}


def _wire_recorders(hook) -> bool:
    """FillScope's wire recorder (nodes/wire_calls.py) watches the networks of every node's inputs while that node
    runs, this one's included, and removes its hooks when the node returns (tests/test_wires.py): not counted here."""
    owner = getattr(hook, "__self__", None)
    return type(owner).__module__.endswith("wire_calls")


class ModelHooks:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "after": ("LATENT",), "name": ("STRING", {"default": "hooks"})}}

    RETURN_TYPES = ()
    FUNCTION = "count"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    def count(self, model, after, name):
        modules = list(model.model.named_modules())
        hooked = {n or "(root)": len(hooks) for n, m in modules
                  if (hooks := [h for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())
                                if not _wire_recorders(h)])}
        options = model.model_options.get("transformer_options", {}).get("wrappers", {})
        report = {"modules": len(modules), "hooked_modules": hooked,
                  "patcher_wrappers": {k: sorted(str(key) for key in v) for k, v in model.wrappers.items() if v},
                  "option_wrappers": {k: sorted(str(key) for key in v) for k, v in options.items() if v}}
        with open(_out(name, "json"), "w", encoding="utf-8") as f:
            json.dump(report, f)
        return {}


class InterruptAtCall:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "call": ("INT", {"default": 2, "min": 1, "max": 1000})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = CATEGORY

    def patch(self, model, call):
        import comfy.model_management as mm
        import comfy.patcher_extension as pe

        clone, calls = model.clone(), [0]

        def outer(executor, *args, **kwargs):
            calls[0] = 0
            return executor(*args, **kwargs)

        def apply(executor, *args, **kwargs):
            out = executor(*args, **kwargs)
            calls[0] += 1
            if calls[0] == call:
                mm.interrupt_current_processing(True)
            return out

        clone.add_wrapper_with_key(pe.WrappersMP.OUTER_SAMPLE, "fillscope_test_interrupt", outer)
        clone.add_wrapper_with_key(pe.WrappersMP.APPLY_MODEL, "fillscope_test_interrupt", apply)
        return (clone,)


NODE_CLASS_MAPPINGS = {
    "NativeTestTinyModel": TinyModel,
    "NativeTestTinyTAESD": TinyTAESD,
    "NativeTestSaveNativeLatent": SaveNativeLatent,
    "NativeTestModelHooks": ModelHooks,
    "NativeTestInterruptAtCall": InterruptAtCall,
}
