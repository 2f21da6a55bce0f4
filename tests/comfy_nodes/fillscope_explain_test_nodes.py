"""Test-only ComfyUI nodes for tests/test_server_explain.py (shape failures explained, issue 34): tiny builds of
ComfyUI's own classes for the families a user mixes up, seeded, no files; loaded from this folder as an extra
custom_nodes path, never part of the pack.

- ExplainTestTinyModel: ComfyUI's SD1.5 or SDXL model (comfy.supported_models.SD15 / SDXL -> comfy.model_base with
  ComfyUI's UNetModel inside, in a ModelPatcher), two levels; text widths those of ExplainTestTinyTextEncoder of the
  same family: SD1.5 cross-attention 32 (CLIP-L), SDXL 80 (CLIP-L 32 ++ CLIP-G 48) and its adm 48 + 6 x 256 (the
  pooled CLIP-G vector and the size embeddings comfy.model_base.SDXL.encode_adm appends). Family flux_dev: ComfyUI's
  FLUX.1 dev (comfy.supported_models.Flux: 16 input channels, no inpaint condition) at the text widths of the tiny
  FLUX folder's CLIP (NativeTestTinyCLIP).
- ExplainTestTinyTextEncoder: ComfyUI's SD1.5 CLIP (SD1ClipModel, SD1Tokenizer) or SDXL CLIP (SDXLClipModel,
  SDXLTokenizer) in comfy.sd.CLIP, CLIP-L 32 wide, CLIP-G 48 wide, seeded.
- ExplainTestTinyControlNet: ComfyUI's ControlNet (comfy.controlnet.ControlNet over comfy.cldm.cldm.ControlNet, as
  ControlNetLoader builds it) at the tiny UNet's config of that family.
- ExplainTestTinyCLIPVision: ComfyUI's ClipVisionModel (a CLIP ViT) of a given width, seeded.
- ExplainTestTinyRedux: ComfyUI's StyleModel over its Redux encoder (comfy.ldm.flux.redux.ReduxImageEncoder), taking
  image features of a given width and giving text tokens of another.
(CheckpointLoaderSimple, ControlNetLoader, CLIPVisionLoader and StyleModelLoader read ComfyUI's published sizes from
the files: they cannot build these.)
"""

from __future__ import annotations

import json
import os
import tempfile
import types

CATEGORY = "FillScope tests"
CLIP_L, CLIP_G = 32, 48  # the tiny text encoders' widths
SIZE_EMBEDDING = 6 * 256  # comfy.model_base.SDXL.encode_adm: height, width, crop h / w, target h / w, 256 each
UNETS = {
    "sd15": ("SD15", {"in_channels": 4, "out_channels": 4, "model_channels": 32, "context_dim": CLIP_L,
                      "adm_in_channels": None}),
    "sdxl": ("SDXL", {"in_channels": 4, "out_channels": 4, "model_channels": 64, "context_dim": CLIP_L + CLIP_G,
                      "adm_in_channels": CLIP_G + SIZE_EMBEDDING, "num_classes": "sequential"}),
}
FLUX_DEV = {"image_model": "flux", "in_channels": 16, "out_channels": 16, "vec_in_dim": 32, "context_in_dim": 32,
            "hidden_size": 64, "mlp_ratio": 4.0, "num_heads": 2, "depth": 1, "depth_single_blocks": 1,
            "axes_dim": [8, 12, 12], "theta": 10000, "patch_size": 2, "qkv_bias": True, "guidance_embed": True}
TWO_LEVELS = {"use_checkpoint": False, "image_size": 32, "use_spatial_transformer": True, "legacy": False,
              "num_res_blocks": [1, 1], "channel_mult": [1, 2], "transformer_depth": [1, 1],
              "transformer_depth_output": [1, 1, 1, 1], "transformer_depth_middle": 1,
              "use_linear_in_transformer": False, "use_temporal_attention": False, "use_temporal_resblock": False}


def _seeded(module, seed: int) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    sd = {k: (torch.randn(v.shape, generator=g) * 0.05 if v.is_floating_point() else v)
          for k, v in module.state_dict().items()}
    module.load_state_dict(sd, strict=True)


def unet_config(family: str) -> tuple[str, dict]:
    if family == "flux_dev":
        return "Flux", dict(FLUX_DEV)
    name, widths = UNETS[family]
    return name, {**TWO_LEVELS, **widths}


class TinyModel:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"family": ([*UNETS, "flux_dev"],), "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, family, seed):
        import comfy.model_management as mm
        import comfy.model_patcher
        import comfy.supported_models
        import torch

        name, unet = unet_config(family)
        config = getattr(comfy.supported_models, name)(unet)
        config.set_inference_dtype(torch.float32, None)
        offload = mm.unet_offload_device()
        model = config.get_model({}, "").to(offload)
        _seeded(model.diffusion_model, seed)
        return (comfy.model_patcher.ModelPatcher(model, load_device=mm.get_torch_device(), offload_device=offload),)


def _text_config(width: int) -> dict:
    return {"num_hidden_layers": 3, "hidden_size": width, "num_attention_heads": 2, "intermediate_size": 2 * width,
            "projection_dim": width}


class TinyTextEncoder:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"family": (list(UNETS),), "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    def load(self, family, seed):
        import comfy.sd
        import torch
        from comfy import sd1_clip, sdxl_clip

        options = {"dtype": torch.float32, "clip_l_model_config": _text_config(CLIP_L),
                   "clip_g_model_config": _text_config(CLIP_G)}
        if family == "sd15":
            target = types.SimpleNamespace(clip=sd1_clip.SD1ClipModel, tokenizer=sd1_clip.SD1Tokenizer, params={})
        else:
            target = types.SimpleNamespace(clip=sdxl_clip.SDXLClipModel, tokenizer=sdxl_clip.SDXLTokenizer,
                                           params={})
        clip = comfy.sd.CLIP(target, model_options=options)
        _seeded(clip.cond_stage_model, seed)
        return (clip,)


class TinyControlNet:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"family": (list(UNETS),), "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("CONTROL_NET",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, family, seed):
        import comfy.cldm.cldm
        import comfy.controlnet
        import comfy.model_management as mm
        import comfy.ops
        import comfy.supported_models
        import torch

        name, unet = unet_config(family)
        config = dict(getattr(comfy.supported_models, name)(unet).unet_config)  # with the family's head settings
        config.pop("out_channels")
        control = comfy.cldm.cldm.ControlNet(hint_channels=3, dtype=torch.float32, operations=comfy.ops.manual_cast,
                                             device=mm.unet_offload_device(), **config)
        _seeded(control, seed)
        return (comfy.controlnet.ControlNet(control, load_device=mm.get_torch_device(), manual_cast_dtype=None),)


class TinyCLIPVision:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"width": ("INT", {"default": 48, "min": 8, "max": 4096}),
                             "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("CLIP_VISION",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, width, seed):
        import comfy.clip_vision

        config = {"hidden_act": "quick_gelu", "hidden_size": width, "image_size": 32, "intermediate_size": 2 * width,
                  "layer_norm_eps": 1e-05, "model_type": "clip_vision_model", "num_attention_heads": 2,
                  "num_channels": 3, "num_hidden_layers": 2, "patch_size": 8, "projection_dim": width}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:  # ClipVisionModel reads a file
            json.dump(config, f)
        try:
            vision = comfy.clip_vision.ClipVisionModel(f.name)
        finally:
            os.unlink(f.name)
        _seeded(vision.model, seed)
        return (vision,)


class TinyRedux:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image_width": ("INT", {"default": 32, "min": 8, "max": 4096}),
                             "text_width": ("INT", {"default": 32, "min": 8, "max": 8192}),
                             "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("STYLE_MODEL",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, image_width, text_width, seed):
        import comfy.ldm.flux.redux
        import comfy.sd

        encoder = comfy.ldm.flux.redux.ReduxImageEncoder(redux_dim=image_width, txt_in_features=text_width)
        _seeded(encoder, seed)
        return (comfy.sd.StyleModel(encoder),)


NODE_CLASS_MAPPINGS = {"ExplainTestTinyModel": TinyModel, "ExplainTestTinyTextEncoder": TinyTextEncoder,
                       "ExplainTestTinyControlNet": TinyControlNet,
                       "ExplainTestTinyCLIPVision": TinyCLIPVision,
                       "ExplainTestTinyRedux": TinyRedux}
