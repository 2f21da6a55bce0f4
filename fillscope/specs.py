"""Model kinds, the configs that ship with the pack, latent formats and FLUX token packing.

Everything here is cheap to import (json and dataclasses only); torch is imported inside the functions
that need it so the ComfyUI start-up import of the pack stays fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class ComponentKind:
    """One loadable component: which class builds it and its shipped production configs (one per variant,
    the first is the default)."""

    key: str
    title: str
    library: str  # "diffusers" or "transformers"
    class_name: str
    variants: dict  # variant name -> shipped config file

    @property
    def default_variant(self) -> str:
        return next(iter(self.variants))


COMPONENTS: dict[str, ComponentKind] = {
    kind.key: kind
    for kind in (
        ComponentKind("clip_l", "CLIP-L", "transformers", "CLIPTextModelWithProjection", {"clip-l": "clip_l.json"}),
        ComponentKind("clip_g", "CLIP-G (OpenCLIP bigG)", "transformers", "CLIPTextModelWithProjection", {"clip-g": "clip_g.json"}),
        ComponentKind("t5_xxl", "T5-XXL", "transformers", "T5EncoderModel", {"t5-xxl": "t5_xxl.json"}),
        ComponentKind(
            "flux_fill_transformer", "FLUX.1 Fill transformer", "diffusers", "FluxTransformer2DModel",
            {"flux.1-fill-dev": "flux_fill_transformer.json"},
        ),
        ComponentKind("flux_vae", "FLUX VAE", "diffusers", "AutoencoderKL", {"flux": "flux_vae.json"}),
        ComponentKind("sd3_vae", "SD3 VAE", "diffusers", "AutoencoderKL", {"sd3": "sd3_vae.json"}),
        ComponentKind(
            "sd3_transformer", "SD3 transformer", "diffusers", "SD3Transformer2DModel",
            {"sd3-medium": "sd3_medium_transformer.json", "sd3.5-medium": "sd35_medium_transformer.json",
             "sd3.5-large": "sd35_large_transformer.json"},
        ),
        ComponentKind(
            "sd3_controlnet", "SD3 inpainting ControlNet", "diffusers", "SD3ControlNetModel",
            {"alimama-sd3-inpainting": "sd3_controlnet_inpaint.json"},
        ),
        # FLUX.2 [klein]: the encoder is built as Qwen3Model with the layers the condition reads and no LM head
        # (the published folders hold Qwen3ForCausalLM); see qwen3_kept_config
        ComponentKind("qwen3", "Qwen3 text encoder", "transformers", "Qwen3Model",
                      {"qwen3-4b": "qwen3_4b.json", "qwen3-8b": "qwen3_8b.json"}),
        ComponentKind("klein_transformer", "FLUX.2 [klein] transformer", "diffusers", "Flux2Transformer2DModel",
                      {"klein-4b": "klein_4b_transformer.json", "klein-9b": "klein_9b_transformer.json"}),
        ComponentKind("flux2_vae", "FLUX.2 VAE", "diffusers", "AutoencoderKLFlux2", {"flux2": "flux2_vae.json"}),
    )
}

# FLUX.2 [klein] conditions on these hidden states of Qwen3 (hidden_states[0] is the embedding output, [k] the
# output of layer k), stacked along the channels: [B,512,3*hidden].
KLEIN_TEXT_LAYERS = (9, 18, 27)


def qwen3_kept_config(config: dict, layers=KLEIN_TEXT_LAYERS) -> dict:
    """The Qwen3 config FillScope builds: layers 0..max(layers) only. One layer more than the deepest state read,
    because transformers applies the final RMSNorm to the last hidden state: with exactly 27 layers
    hidden_states[27] would come out normalised and differ. Layers 28-35 and the LM head never influence the
    states read, so they are neither built nor loaded (22% less encoder compute and memory for Qwen3-4B)."""
    keep = max(layers) + 1
    return {**config, "num_hidden_layers": min(int(config.get("num_hidden_layers", keep)), keep)}


# Where each component lives in a diffusers repository, per pipeline class: kind -> (model folder, tokenizer folder).
_FLUX_LAYOUT = {"clip_l": ("text_encoder", "tokenizer"), "t5_xxl": ("text_encoder_2", "tokenizer_2"), "flux_vae": ("vae", None)}
_SD3_LAYOUT = {
    "clip_l": ("text_encoder", "tokenizer"),
    "clip_g": ("text_encoder_2", "tokenizer_2"),
    "t5_xxl": ("text_encoder_3", "tokenizer_3"),
    "sd3_transformer": ("transformer", None),
    "sd3_vae": ("vae", None),
}
_KLEIN_LAYOUT = {"qwen3": ("text_encoder", "tokenizer"), "klein_transformer": ("transformer", None),
                 "flux2_vae": ("vae", None)}
PIPELINE_LAYOUTS: dict[str, dict] = {
    "FluxFillPipeline": {**_FLUX_LAYOUT, "flux_fill_transformer": ("transformer", None)},
    "FluxPipeline": _FLUX_LAYOUT,
    "FluxKontextPipeline": _FLUX_LAYOUT,
    "StableDiffusion3Pipeline": _SD3_LAYOUT,
    "StableDiffusion3Img2ImgPipeline": _SD3_LAYOUT,
    "StableDiffusion3InpaintPipeline": _SD3_LAYOUT,
    "StableDiffusion3ControlNetPipeline": {**_SD3_LAYOUT, "sd3_controlnet": ("controlnet", None)},
    "StableDiffusion3ControlNetInpaintingPipeline": {**_SD3_LAYOUT, "sd3_controlnet": ("controlnet", None)},
    "Flux2KleinPipeline": _KLEIN_LAYOUT,
    "Flux2KleinInpaintPipeline": _KLEIN_LAYOUT,
}


@lru_cache(maxsize=None)
def _read_config(name: str) -> str:
    return (CONFIG_DIR / name).read_text()


def shipped_config(kind: str, variant: str | None = None) -> dict:
    """The production config of a component as shipped with the pack (keys starting with '_' removed)."""
    spec = COMPONENTS[kind]
    name = spec.variants[variant or spec.default_variant]
    raw = json.loads(_read_config(name))
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def shipped_variant(kind: str, config) -> str | None:
    """The shipped variant whose topology `config` (a dict or a diffusers FrozenDict) has, or None (a config of
    its own, e.g. a tiny test model)."""
    keys = ("num_layers", "num_attention_heads", "attention_head_dim", "patch_size", "pos_embed_max_size",
            "joint_attention_dim", "caption_projection_dim", "in_channels")
    for variant in COMPONENTS[kind].variants:
        shipped = shipped_config(kind, variant)
        if all(config.get(k) == shipped.get(k) for k in keys if k in shipped):
            return variant
    return None


# --- the sizes a family takes --------------------------------------------------------------------------------

# Every published model: the VAE's 8x downscale, then 2x2 patches (tokens) on the latent grid: image sides are
# multiples of 16 px, and 16 px (one patch) is the smallest side. The grid masks.prepare_image_and_mask makes before
# any model is loaded; the condition builders check it against the loaded VAE's own token size (masks.require_grid).
MIN_SIDE = 16


@dataclass(frozen=True)
class SideLimit:
    """The largest image side a learned position-embedding grid allows: pos_embed_max_size patches a side x the
    patch size x the VAE's downscale, in pixels (diffusers' PatchEmbed refuses more patches than that)."""

    pixels: int
    pos_embed_max_size: int
    patch_size: int
    vae_scale: int
    model: str  # what sets it, e.g. "sd3-medium"

    def explain(self) -> str:
        return (f"{self.pixels}x{self.pixels} px for {self.model}: pos_embed_max_size {self.pos_embed_max_size} "
                f"x patch {self.patch_size} x {self.vae_scale}")


def pos_embed_side_limit(config, model: str, vae_scale: int | None = None) -> SideLimit | None:
    """The side limit of an SD3-style PatchEmbed built from `config`, or None where it has none (no position
    embedding, or one interpolated to any size: pos_embed_max_size unset). `vae_scale`: the VAE's downscale (None:
    the shipped SD3 VAE's)."""
    size = config.get("pos_embed_max_size")
    if not size or not config.get("use_pos_embed", True) or config.get("pos_embed_type", "sincos") is None:
        return None
    if vae_scale is None:
        vae_scale = vae_scale_factor(shipped_config("sd3_vae"))
    patch = int(config.get("patch_size") or 1)
    return SideLimit(int(size) * patch * vae_scale, int(size), patch, vae_scale, model)


def sd3_side_limit() -> SideLimit:
    """The SD3 family's limit known before any weights load: the smallest over every shipped SD3 transformer
    variant and the inpainting ControlNet (which runs with every variant), naming the models that set it."""
    limits = [pos_embed_side_limit(shipped_config("sd3_transformer", v), v) for v in COMPONENTS["sd3_transformer"].variants]
    limits.append(pos_embed_side_limit(shipped_config("sd3_controlnet"), "the SD3 inpainting ControlNet"))
    limits = [limit for limit in limits if limit is not None]
    least = min(limit.pixels for limit in limits)
    names = [limit.model for limit in limits if limit.pixels == least]
    first = next(limit for limit in limits if limit.pixels == least)
    model = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return SideLimit(first.pixels, first.pos_embed_max_size, first.patch_size, first.vae_scale, model)


def scheduler_config(name: str) -> dict:
    raw = json.loads(_read_config(f"{name}_scheduler.json"))
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def flux_scheduler_config() -> dict:
    return scheduler_config("flux")


@dataclass(frozen=True)
class LatentFormat:
    """How a VAE's raw latent maps to the denoiser's latent: z_model = (z_vae - shift) * scale; `channels` and
    `downscale` are the model latent's (vae.latent_format computes them from the loaded VAE's config)."""

    name: str
    channels: int
    scale: float
    shift: float
    downscale: int = 8


# The published VAEs' formats; vae.latent_format takes the widths from the loaded VAE's config and uses these for
# the name and (where the config has none) the scale and shift.
FLUX_LATENT = LatentFormat("flux", 16, 0.3611, 0.1159)
SD3_LATENT = LatentFormat("sd3", 16, 1.5305, 0.0609)
# FLUX.2: 32 channels at /8, 2x2-patchified to 128 at /16 and normalised by the VAE's BatchNorm running statistics
# (vae.encode / vae.decode apply them): no scale or shift factor
FLUX2_LATENT = LatentFormat("flux2", 128, 1.0, 0.0, downscale=16)

# FLUX.1 and FLUX.2 pack 2x2 latent patches into one token. No config holds this for FLUX.1 (its transformer's
# patch_size is 1: the pipeline packs before the model) and diffusers hard-codes it in FluxFillPipeline._pack_latents
# and the klein pipelines' _patchify_latents; the FLUX.2 VAE's config says it too (patch_size [2, 2], which
# vae.flux2_patch reads for klein).
FLUX_PATCH = 2

# The published Fill-model pixel grid: VAE 8x, then 2x2 token patches, so image sides are multiples of 16
# (the mu facts of the published schedule; the sampler counts the loaded models' own tokens).
FLUX_PIXELS_PER_TOKEN = 16


def model_config(comp):
    """The loaded model's own config: diffusers' `model.config` (every constructor argument, defaults included, so
    a config.json that leaves a width out still says what was built), else the component's config dict."""
    cfg = getattr(getattr(comp, "model", None), "config", None)
    return cfg if hasattr(cfg, "get") else comp.config


def vae_scale_factor(config) -> int:
    """A VAE's spatial downscale from its config, as diffusers' pipelines compute it: 2 ** (levels - 1) with one
    level per entry of block_out_channels (8 for every published VAE FillScope loads)."""
    return 2 ** (len(config["block_out_channels"]) - 1)


def flux_token_count(height: int, width: int) -> int:
    return (height // FLUX_PIXELS_PER_TOKEN) * (width // FLUX_PIXELS_PER_TOKEN)


def pack_latents(latents):
    """[B, C, H, W] -> [B, (H/2)*(W/2), C*4]: FLUX's 2x2 patch tokens (FLUX_PATCH), channel-major inside a patch;
    C is the latents' own (16 for the FLUX VAE)."""
    p = FLUX_PATCH
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


def unpack_latents(tokens, latent_height: int, latent_width: int):
    """[B, (H/2)*(W/2), C*4] -> [B, C, H, W]; the inverse of pack_latents."""
    p = FLUX_PATCH
    b, _, cp = tokens.shape
    x = tokens.view(b, latent_height // p, latent_width // p, cp // (p * p), p, p).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, cp // (p * p), latent_height, latent_width)


def flux_image_ids(latent_height: int, latent_width: int, device=None, dtype=None):
    """Positional ids [(H/2)*(W/2), 3] of FLUX image tokens: (0, row, col) (3 RoPE axes: FLUX.1's id layout)."""
    import torch

    h, w = latent_height // FLUX_PATCH, latent_width // FLUX_PATCH
    ids = torch.zeros(h, w, 3)
    ids[..., 1] = torch.arange(h)[:, None]
    ids[..., 2] = torch.arange(w)[None, :]
    return ids.reshape(h * w, 3).to(device=device, dtype=dtype)
