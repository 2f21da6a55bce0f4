"""Test-only ComfyUI nodes for tests/test_server_native_klein.py (FillScope's klein sampler on ComfyUI's own MODEL),
loaded from this folder as an extra custom_nodes path; never part of the pack.

- NativeKleinTestTinyKlein: ComfyUI's own FLUX.2 model (comfy.supported_models.Flux2 -> comfy.model_base.Flux2 with
  comfy.ldm.flux.model.Flux in its flux2 mode inside, in a comfy.model_patcher.ModelPatcher on ComfyUI's load and
  offload devices), at the tiny config of a diffusers klein folder under models/diffusers (its transformer/config.json,
  with the values ComfyUI's model_detection sets for every FLUX.2 file: global modulation, SiLU-gated MLP, no biases,
  the "index" reference method at scale 10), loaded strictly from a BFL-key file in models/diffusion_models (the
  test writes it: the folder's weights under ComfyUI's keys). ComfyUI 0.3.75's UNETLoader cannot load a tiny (or any)
  klein file: model_detection fixes FLUX.2 [dev]'s 48 heads.
  kind "flux1": ComfyUI's own FLUX.1 model at a tiny config (seeded random weights): what the klein sampler must refuse.
  kind "klein4b_48_heads": ComfyUI's Flux2 at klein 4B's sizes on the meta device, with 48 heads x 64 and RoPE axes
  (16, 16, 16, 16): the head split ComfyUI 0.3.75 detects for klein 4B, with the axes made to fit so that ComfyUI's
  Flux builds at all. What the sampler must refuse, naming the version issue.
  kind "klein_ref_index_scale_1": the tiny klein with ref_index_scale 1 (FluxParams' default, FLUX.1 Kontext's
  spacing) instead of model_detection's 10: references at other positions than klein's, refused.
The latents are saved by NativeFillTestSaveFSLatent (fillscope_native_fill_test_nodes.py, same folder).
"""

from __future__ import annotations

import json
import os

CATEGORY = "FillScope tests"
KINDS = ["klein", "flux1", "klein4b_48_heads", "klein_ref_index_scale_1"]
# what comfy/model_detection.py's flux2 branch sets for every FLUX.2 file, whatever its weights
FLUX2_DETECTED = {"image_model": "flux2", "vec_in_dim": None, "patch_size": 1, "qkv_bias": False,
                  "global_modulation": True, "mlp_silu_act": True, "ops_bias": False, "default_ref_method": "index",
                  "ref_index_scale": 10.0, "theta": 2000, "mlp_ratio": 3.0}
# klein 4B's published transformer (fillscope/configs/klein_4b_transformer.json) as ComfyUI 0.3.75's model_detection
# reads it from the weights' shapes, except the head split it fixes (48) and the axes that would have to go with it
KLEIN_4B_48_HEADS = {**FLUX2_DETECTED, "in_channels": 128, "out_channels": 128, "context_in_dim": 7680,
                     "hidden_size": 3072, "num_heads": 48, "depth": 5, "depth_single_blocks": 20,
                     "axes_dim": [16, 16, 16, 16], "guidance_embed": False}


def comfy_flux2_unet_config(diffusers_config: dict) -> dict:
    """A diffusers Flux2Transformer2DModel config -> ComfyUI's Flux2 unet_config: the sizes from the config, the rest
    as model_detection sets them."""
    c = diffusers_config
    heads = c["num_attention_heads"]
    return {**FLUX2_DETECTED, "in_channels": c["in_channels"],
            "out_channels": c.get("out_channels") or c["in_channels"], "context_in_dim": c["joint_attention_dim"],
            "hidden_size": heads * c["attention_head_dim"], "mlp_ratio": c["mlp_ratio"], "num_heads": heads,
            "depth": c["num_layers"], "depth_single_blocks": c["num_single_layers"], "theta": c["rope_theta"],
            "axes_dim": list(c["axes_dims_rope"]), "guidance_embed": bool(c["guidance_embeds"])}


def tiny_flux1_unet_config() -> dict:
    return {"image_model": "flux", "in_channels": 16, "out_channels": 16, "vec_in_dim": 32, "context_in_dim": 96,
            "hidden_size": 32, "mlp_ratio": 4.0, "num_heads": 2, "depth": 1, "depth_single_blocks": 1,
            "axes_dim": [4, 6, 6], "theta": 10000, "patch_size": 2, "qkv_bias": True, "guidance_embed": True}


class TinyKlein:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "FLUX.2-klein-4B"}),
                             "weights": ("STRING", {"default": "native_klein_test.safetensors"}),
                             "kind": (KINDS, {"default": "klein"})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, folder, weights, kind):
        import comfy.model_management as mm
        import comfy.model_patcher
        import comfy.supported_models
        import folder_paths
        import torch
        from safetensors.torch import load_file

        offload = mm.unet_offload_device()
        if kind == "klein4b_48_heads":
            config = comfy.supported_models.Flux2(dict(KLEIN_4B_48_HEADS))
            config.set_inference_dtype(torch.bfloat16, None)
            model = config.get_model({}, "", device=torch.device("meta"))  # shapes only: refused before placing
            return (comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=offload),)
        if kind == "flux1":
            config = comfy.supported_models.Flux(tiny_flux1_unet_config())
            config.set_inference_dtype(torch.float32, None)
            model = config.get_model({}, "").to(offload)
            g = torch.Generator().manual_seed(0)
            model.diffusion_model.load_state_dict(
                {k: torch.randn(v.shape, generator=g) * 0.05 for k, v in model.diffusion_model.state_dict().items()})
            return (comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=offload),)
        root = next(os.path.join(p, folder) for p in folder_paths.get_folder_paths("diffusers")
                    if os.path.isdir(os.path.join(p, folder)))
        with open(os.path.join(root, "transformer", "config.json"), encoding="utf-8") as f:
            unet = comfy_flux2_unet_config(json.load(f))
        if kind == "klein_ref_index_scale_1":
            unet["ref_index_scale"] = 1.0
        config = comfy.supported_models.Flux2(unet)
        config.set_inference_dtype(torch.float32, None)
        model = config.get_model({}, "").to(offload)
        state = load_file(folder_paths.get_full_path_or_raise("diffusion_models", weights))
        model.diffusion_model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
        return (comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=offload),)


NODE_CLASS_MAPPINGS = {
    "NativeKleinTestTinyKlein": TinyKlein,
}
