"""VAE encode/decode with a latent format's scale and shift.

Encode is deterministic: the latent distribution's mean (diffusers samples from it; FillScope's tests switch
diffusers to its `argmax` mode, which is the same mean, to compare).
"""

from __future__ import annotations

from .errors import FillScopeInputError
from .specs import FLUX_LATENT, SD3_LATENT, LatentFormat
from .weights import Component, load_component


VAE_KINDS = ("flux", "sd3")


def load_vae(source, *, kind="flux", dtype="bf16", device="auto", seed=0) -> Component:
    """kind: 'flux' (scale 0.3611, shift 0.1159) or 'sd3' (1.5305, 0.0609); a folder's config must agree."""
    if kind not in VAE_KINDS:
        raise FillScopeInputError("kind", f"unknown VAE kind {kind!r}.", f"use one of {', '.join(VAE_KINDS)}.")
    return load_component(f"{kind}_vae", source, dtype=dtype, device=device, seed=seed, input_name="vae source")


def latent_format(comp: Component) -> LatentFormat:
    """The VAE's latent format, from its config (the shipped one for meta/placeholder)."""
    default = FLUX_LATENT if comp.kind == "flux_vae" else SD3_LATENT
    cfg = comp.config
    return LatentFormat(
        default.name,
        cfg.get("latent_channels", default.channels),
        cfg.get("scaling_factor", default.scale),
        cfg.get("shift_factor", default.shift),
    )


def encode(comp: Component, image_pm1):
    """[B,3,H,W] in [-1,1] -> model latents [B,16,H/8,W/8] = (mean - shift) * scale."""
    import torch

    fmt = latent_format(comp)
    vae = comp.model
    with torch.inference_mode():
        x = image_pm1.to(device=comp.device, dtype=vae.dtype)
        z = vae.encode(x).latent_dist.mode()
    return (z - fmt.shift) * fmt.scale


def decode(comp: Component, latents):
    """Model latents [B,16,h,w] -> the decoder's output [B,3,8h,8w] in [-1,1], in the VAE's dtype."""
    import torch

    fmt = latent_format(comp)
    vae = comp.model
    with torch.inference_mode():
        z = latents.to(device=comp.device, dtype=vae.dtype) / fmt.scale + fmt.shift
        return vae.decode(z, return_dict=False)[0]


def to_unit_range(decoded):
    """Decoder output in [-1,1] -> float32 [0,1], as diffusers' postprocess does."""
    return (decoded.float() / 2 + 0.5).clamp(0, 1)
