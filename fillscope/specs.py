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
    """One loadable component: which class builds it, its shipped production config, and the diffusers
    repo sub-folder it lives in."""

    key: str
    title: str
    library: str  # "diffusers" or "transformers"
    class_name: str
    config_file: str
    subfolder: str


COMPONENTS: dict[str, ComponentKind] = {
    kind.key: kind
    for kind in (
        ComponentKind("clip_l", "CLIP-L", "transformers", "CLIPTextModelWithProjection", "clip_l.json", "text_encoder"),
        ComponentKind("t5_xxl", "T5-XXL", "transformers", "T5EncoderModel", "t5_xxl.json", "text_encoder_2"),
        ComponentKind(
            "flux_fill_transformer",
            "FLUX.1 Fill transformer",
            "diffusers",
            "FluxTransformer2DModel",
            "flux_fill_transformer.json",
            "transformer",
        ),
        ComponentKind("flux_vae", "FLUX VAE", "diffusers", "AutoencoderKL", "flux_vae.json", "vae"),
    )
}


@lru_cache(maxsize=None)
def _read_config(name: str) -> str:
    return (CONFIG_DIR / name).read_text()


def shipped_config(kind: str) -> dict:
    """The production config of a component as shipped with the pack (keys starting with '_' removed)."""
    raw = json.loads(_read_config(COMPONENTS[kind].config_file))
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def flux_scheduler_config() -> dict:
    raw = json.loads(_read_config("flux_scheduler.json"))
    return {k: v for k, v in raw.items() if not k.startswith("_note")}


@dataclass(frozen=True)
class LatentFormat:
    """How a VAE's raw latent maps to the denoiser's latent: z_model = (z_vae - shift) * scale."""

    name: str
    channels: int
    scale: float
    shift: float
    downscale: int = 8


FLUX_LATENT = LatentFormat("flux", 16, 0.3611, 0.1159)
SD3_LATENT = LatentFormat("sd3", 16, 1.5305, 0.0609)

# Fill-model pixel grid: VAE 8x, then 2x2 token patches, so image sides must be multiples of 16.
FLUX_PIXELS_PER_TOKEN = 16


def flux_token_count(height: int, width: int) -> int:
    return (height // FLUX_PIXELS_PER_TOKEN) * (width // FLUX_PIXELS_PER_TOKEN)


def pack_latents(latents):
    """[B, C, H, W] -> [B, (H/2)*(W/2), C*4]: FLUX's 2x2 patch tokens, channel-major inside a patch."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(tokens, latent_height: int, latent_width: int):
    """[B, (H/2)*(W/2), C*4] -> [B, C, H, W]; the inverse of pack_latents."""
    b, _, c4 = tokens.shape
    x = tokens.view(b, latent_height // 2, latent_width // 2, c4 // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c4 // 4, latent_height, latent_width)


def flux_image_ids(latent_height: int, latent_width: int, device=None, dtype=None):
    """Positional ids [(H/2)*(W/2), 3] of FLUX image tokens: (0, row, col)."""
    import torch

    h, w = latent_height // 2, latent_width // 2
    ids = torch.zeros(h, w, 3)
    ids[..., 1] = torch.arange(h)[:, None]
    ids[..., 2] = torch.arange(w)[None, :]
    return ids.reshape(h * w, 3).to(device=device, dtype=dtype)
