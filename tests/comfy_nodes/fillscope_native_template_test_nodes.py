"""Test-only ComfyUI nodes for tests/test_server_native_templates.py (the native_sd3_inspect template on tiny weights),
loaded from this folder as an extra custom_nodes path; never part of the pack.

- NativeTemplateTestTinySD3: ComfyUI's own SD3 model (comfy.supported_models.SD3 -> comfy.model_base.SD3 with
  comfy.ldm.modules.diffusionmodules.mmdit.MMDiT inside, in a ModelPatcher), 2 blocks (hidden 128, 2 heads of 64, as
  ComfyUI's MMDiT ties them to the depth), seeded weights, at the text widths NativeTemplateTestTinySD3CLIP gives:
  context 4096 (ComfyUI's SD3 CLIP pads CLIP-L ++ CLIP-G to 4096 whatever their widths) and pooled CLIP-L ++ CLIP-G
  of the tiny SD3 folder. (CheckpointLoaderSimple cannot load a tiny SD3: the VAE of a checkpoint is always built at
  full size, ch 128.)
- NativeTemplateTestTinySD3CLIP: ComfyUI's own SD3 CLIP (comfy.sd.CLIP over ComfyUI's SD3ClipModel and SD3Tokenizer)
  with the tiny SD3 folder's CLIP-L and CLIP-G and no T5 (TripleCLIPLoader builds the full-size configs; a tiny T5
  would have to be 4096 wide to join ComfyUI's padded CLIP states, 130 M parameters for its embedding alone). Without
  T5 ComfyUI's SD3 CLIP gives the CLIP part only: context [1, 77, 4096], pooled [1, L + G].
"""

from __future__ import annotations

import json
import os
import types

CATEGORY = "FillScope tests"
CONTEXT = 4096  # comfy/text_encoders/sd3_clip.py pads CLIP-L ++ CLIP-G to this width
DEPTH = 2  # ComfyUI's MMDiT: hidden = 64 * depth, heads = depth


def _folder(name: str) -> str:
    import folder_paths

    for base in folder_paths.get_folder_paths("diffusers"):
        if os.path.isdir(os.path.join(base, name)):
            return os.path.join(base, name)
    raise FileNotFoundError(f"no diffusers folder {name}")


def _config(root: str, sub: str) -> dict:
    with open(os.path.join(root, sub, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def pooled_width(root: str) -> int:
    """CLIP-L ++ CLIP-G pooled width of a diffusers SD3 folder (ComfyUI's SD3 CLIP concatenates the two)."""
    return _config(root, "text_encoder")["hidden_size"] + _config(root, "text_encoder_2")["hidden_size"]


def sd3_unet_config(pooled: int) -> dict:
    return {"in_channels": 16, "out_channels": 16, "patch_size": 2, "depth": DEPTH, "input_size": None,
            "adm_in_channels": pooled,
            "context_embedder_config": {"target": "torch.nn.Linear",
                                        "params": {"in_features": CONTEXT, "out_features": 64 * DEPTH}},
            "num_patches": 1024, "pos_embed_max_size": 32, "pos_embed_scaling_factor": None,
            "x_block_self_attn_layers": []}


class TinySD3:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "stable-diffusion-3-medium-diffusers"}),
                             "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, folder, seed):
        import comfy.model_management as mm
        import comfy.model_patcher
        import comfy.supported_models
        import torch

        config = comfy.supported_models.SD3(sd3_unet_config(pooled_width(_folder(folder))))
        config.set_inference_dtype(torch.float32, None)
        offload = mm.unet_offload_device()
        model = config.get_model({}, "").to(offload)
        g = torch.Generator().manual_seed(seed)
        sd = {k: (torch.randn(v.shape, generator=g) * 0.05 if v.is_floating_point() else v)
              for k, v in model.diffusion_model.state_dict().items()}
        model.diffusion_model.load_state_dict(sd, strict=True)
        return (comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=offload),)


def _clip_config(hf: dict) -> dict:
    keys = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "hidden_act",
            "max_position_embeddings", "eos_token_id")
    return {k: hf[k] for k in keys}


class TinySD3CLIP:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "stable-diffusion-3-medium-diffusers"})}}

    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    def load(self, folder):
        import comfy.sd
        import comfy.utils
        import torch
        from comfy.text_encoders import sd3_clip

        root = _folder(folder)
        options, weights = {"dtype": torch.float32}, {}
        for name, sub in (("clip_l", "text_encoder"), ("clip_g", "text_encoder_2")):
            hf = _config(root, sub)
            options[f"{name}_model_config"] = _clip_config(hf)
            sd = comfy.utils.load_torch_file(os.path.join(root, sub, "model.safetensors"))
            # transformers 5 saves CLIP without the text_model. prefix ComfyUI's keys have
            weights[name] = {k if k.startswith("text_") else "text_model." + k: v for k, v in sd.items()}
        target = types.SimpleNamespace(clip=sd3_clip.sd3_clip(clip_l=True, clip_g=True, t5=False),
                                       tokenizer=sd3_clip.SD3Tokenizer, params={})
        clip = comfy.sd.CLIP(target, model_options=options)
        for name, sd in weights.items():
            missing, _ = getattr(clip.cond_stage_model, name).load_sd(sd)
            if missing:
                raise RuntimeError(f"{name}: weights missing for ComfyUI's model: {missing[:5]}")
        return (clip,)


NODE_CLASS_MAPPINGS = {
    "NativeTemplateTestTinySD3": TinySD3,
    "NativeTemplateTestTinySD3CLIP": TinySD3CLIP,
}
