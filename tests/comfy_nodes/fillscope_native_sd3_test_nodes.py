"""Test-only ComfyUI nodes for tests/test_server_native_sd3.py (FillScope's SD3 ControlNet inpaint sampler on ComfyUI's
own MODEL), loaded from this folder as an extra custom_nodes path; never part of the pack.

- NativeSD3TestTinySD3: ComfyUI's own SD3 model built from the transformer of a diffusers SD3 folder under
  models/diffusers, every step ComfyUI's: the diffusers weights converted to MMDiT keys by
  comfy.model_detection.convert_diffusers_mmdit (comfy.utils.mmdit_to_diffusers' map), the unet_config detected from
  them (comfy.model_detection.detect_unet_config) and the model class chosen by it
  (model_config_from_unet_config -> comfy.supported_models.SD3 -> comfy.model_base.SD3 with the MMDiT inside), fp32,
  in a comfy.model_patcher.ModelPatcher on ComfyUI's load and offload devices. (CheckpointLoaderSimple / UNETLoader
  take a single file; this is the same detection on the same keys.)
- NativeSD3TestTinyFlux: ComfyUI's own FLUX.1 model (comfy.supported_models.Flux -> comfy.model_base.Flux) at a tiny
  config with seeded random weights: a MODEL of another family, which the sampler must refuse.

The latents are saved by NativeFillTestSaveFSLatent (fillscope_native_fill_test_nodes.py, same folder).
"""

from __future__ import annotations

import os

CATEGORY = "FillScope tests"


def _patcher(model):
    import comfy.model_management as mm
    import comfy.model_patcher

    return comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=mm.unet_offload_device())


class TinySD3:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "stable-diffusion-3-medium-diffusers"})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, folder):
        import comfy.model_detection
        import comfy.model_management as mm
        import folder_paths
        import torch
        from safetensors.torch import load_file

        root = next(os.path.join(p, folder) for p in folder_paths.get_folder_paths("diffusers")
                    if os.path.isdir(os.path.join(p, folder)))
        diffusers_sd = load_file(os.path.join(root, "transformer", "diffusion_pytorch_model.safetensors"))
        sd = comfy.model_detection.convert_diffusers_mmdit(diffusers_sd, "")
        unet = comfy.model_detection.detect_unet_config(sd, "")
        config = comfy.model_detection.model_config_from_unet_config(unet, sd)
        config.set_inference_dtype(torch.float32, None)
        model = config.get_model({}, "").to(mm.unet_offload_device())
        model.diffusion_model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
        return (_patcher(model),)


class TinyFlux:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self):
        import comfy.model_management as mm
        import comfy.supported_models
        import torch

        unet = {"image_model": "flux", "in_channels": 16, "out_channels": 16, "vec_in_dim": 32, "context_in_dim": 32,
                "hidden_size": 32, "mlp_ratio": 4.0, "num_heads": 2, "depth": 1, "depth_single_blocks": 1,
                "axes_dim": [4, 6, 6], "theta": 10000, "patch_size": 2, "qkv_bias": True, "guidance_embed": True}
        config = comfy.supported_models.Flux(unet)
        config.set_inference_dtype(torch.float32, None)
        model = config.get_model({}, "").to(mm.unet_offload_device())
        g = torch.Generator().manual_seed(0)
        model.diffusion_model.load_state_dict(
            {k: torch.randn(v.shape, generator=g) * 0.05 for k, v in model.diffusion_model.state_dict().items()})
        return (_patcher(model),)


NODE_CLASS_MAPPINGS = {
    "NativeSD3TestTinySD3": TinySD3,
    "NativeSD3TestTinyFlux": TinyFlux,
}
