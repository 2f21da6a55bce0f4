"""Test-only ComfyUI nodes for tests/test_server_native_model.py (FillScope's FLUX Fill sampler on ComfyUI's own
MODEL), loaded from this folder as an extra custom_nodes path; never part of the pack.

- NativeFillTestTinyFluxFill: ComfyUI's own FluxInpaint model (comfy.supported_models.FluxInpaint -> comfy.model_base.
  Flux with comfy.ldm.flux.model.Flux inside, in a comfy.model_patcher.ModelPatcher on ComfyUI's load and offload
  devices), at the tiny config of a diffusers FLUX Fill folder under models/diffusers, with that folder's transformer
  weights converted to ComfyUI's keys by ComfyUI's own map (comfy.model_detection.convert_diffusers_mmdit, which
  uses comfy.utils.flux_to_diffusers). context_in_dim > 0 builds a model of another text width instead (seeded
  random weights): what the width check must refuse. (UNETLoader cannot load a tiny FLUX file: model_detection
  fixes 24 heads of 128.)
- NativeFillTestSaveFSLatent: a FillScope FS_LATENT's latents [B,16,h,w] to <output>/fillscope_native_fill/<name>.
  safetensors.
"""

from __future__ import annotations

import json
import os

CATEGORY = "FillScope tests"


def comfy_unet_config(diffusers_config: dict) -> dict:
    """A diffusers FluxTransformer2DModel config -> ComfyUI's Flux unet_config (patch 2: the per-pixel widths)."""
    c = diffusers_config
    return {"image_model": "flux", "in_channels": c["in_channels"] // 4, "out_channels": c["out_channels"] // 4,
            "vec_in_dim": c["pooled_projection_dim"], "context_in_dim": c["joint_attention_dim"],
            "hidden_size": c["num_attention_heads"] * c["attention_head_dim"], "mlp_ratio": 4.0,
            "num_heads": c["num_attention_heads"], "depth": c["num_layers"],
            "depth_single_blocks": c["num_single_layers"], "axes_dim": list(c["axes_dims_rope"]), "theta": 10000,
            "patch_size": 2, "qkv_bias": True, "guidance_embed": bool(c["guidance_embeds"])}


class TinyFluxFill:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "FLUX.1-Fill-dev"}),
                             "context_in_dim": ("INT", {"default": 0, "min": 0, "max": 8192})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, folder, context_in_dim):
        import comfy.model_detection
        import comfy.model_management as mm
        import comfy.model_patcher
        import comfy.supported_models
        import folder_paths
        import torch
        from safetensors.torch import load_file

        root = next(os.path.join(p, folder) for p in folder_paths.get_folder_paths("diffusers")
                    if os.path.isdir(os.path.join(p, folder)))
        with open(os.path.join(root, "transformer", "config.json"), encoding="utf-8") as f:
            unet = comfy_unet_config(json.load(f))
        if context_in_dim:
            unet["context_in_dim"] = context_in_dim
        config = comfy.supported_models.FluxInpaint(unet)
        config.set_inference_dtype(torch.float32, None)
        offload = mm.unet_offload_device()
        model = config.get_model({}, "").to(offload)
        if context_in_dim:
            g = torch.Generator().manual_seed(0)
            sd = {k: torch.randn(v.shape, generator=g) * 0.05 for k, v in model.diffusion_model.state_dict().items()}
        else:
            sd = comfy.model_detection.convert_diffusers_mmdit(
                load_file(os.path.join(root, "transformer", "diffusion_pytorch_model.safetensors")), "")
        model.diffusion_model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
        return (comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=offload),)


class SaveFSLatent:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"latent": ("FS_LATENT",), "name": ("STRING", {"default": "latent"})}}

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    def save(self, latent, name):
        import folder_paths
        from safetensors.torch import save_file

        value = getattr(latent, "value", latent)  # FillScope's sockets carry Traced(value, records)
        folder = os.path.join(folder_paths.get_output_directory(), "fillscope_native_fill")
        os.makedirs(folder, exist_ok=True)
        save_file({"samples": value.latents.detach().float().cpu().contiguous()},
                  os.path.join(folder, f"{name}.safetensors"))
        return {}


NODE_CLASS_MAPPINGS = {
    "NativeFillTestTinyFluxFill": TinyFluxFill,
    "NativeFillTestSaveFSLatent": SaveFSLatent,
}
