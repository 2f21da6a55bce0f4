"""VAE encode/decode with a latent format's scale and shift.

Encode is deterministic: the latent distribution's mean (diffusers samples from it; FillScope's tests switch
diffusers to its `argmax` mode, which is the same mean, to compare).
"""

from __future__ import annotations

from .errors import FillScopeInputError
from .specs import FLUX2_LATENT, FLUX_LATENT, SD3_LATENT, LatentFormat
from .weights import Component, load_component


VAE_KINDS = ("flux", "sd3", "flux2")


def load_vae(source, *, kind="flux", dtype="bf16", device="auto", seed=0) -> Component:
    """kind: 'flux' (scale 0.3611, shift 0.1159), 'sd3' (1.5305, 0.0609) or 'flux2' (32 channels, BatchNorm-
    normalised 2x2 patches); a folder's config must agree."""
    if kind not in VAE_KINDS:
        raise FillScopeInputError("kind", f"unknown VAE kind {kind!r}.", f"use one of {', '.join(VAE_KINDS)}.")
    return load_component(f"{kind}_vae", source, dtype=dtype, device=device, seed=seed, input_name="vae source")


def latent_format(comp: Component) -> LatentFormat:
    """The VAE's latent format, from its config (the shipped one for meta/placeholder)."""
    if comp.kind == "flux2_vae":
        return FLUX2_LATENT
    default = FLUX_LATENT if comp.kind == "flux_vae" else SD3_LATENT
    cfg = comp.config
    return LatentFormat(
        default.name,
        cfg.get("latent_channels", default.channels),
        cfg.get("scaling_factor", default.scale),
        cfg.get("shift_factor", default.shift),
    )


def flux2_patchify(latents):
    """[B,32,h,w] -> [B,128,h/2,w/2]: each 2x2 latent patch becomes 4x the channels, channel-major (diffusers'
    Flux2 _patchify_latents)."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(b, c * 4, h // 2, w // 2)


def flux2_unpatchify(latents):
    """[B,128,h,w] -> [B,32,2h,2w]; the inverse of flux2_patchify."""
    b, c4, h, w = latents.shape
    x = latents.reshape(b, c4 // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(b, c4 // 4, h * 2, w * 2)


def _flux2_bn_stats(comp: Component, like):
    """(mean, std) [1,128,1,1] of the FLUX.2 VAE's BatchNorm running statistics, as `like`'s device and dtype."""
    import torch

    bn = comp.model.bn
    eps = comp.config.get("batch_norm_eps", 1e-4)
    mean = bn.running_mean.view(1, -1, 1, 1).to(like.device, like.dtype)
    std = torch.sqrt(bn.running_var.view(1, -1, 1, 1) + eps).to(like.device, like.dtype)
    return mean, std


def encode(comp: Component, image_pm1):
    """[B,3,H,W] in [-1,1] -> model latents: [B,16,H/8,W/8] = (mean - shift) * scale for FLUX.1/SD3; for FLUX.2
    [B,128,H/16,W/16] = (patchify(mean) - bn_mean) / bn_std."""
    import torch

    if comp.kind == "flux2_vae":
        with torch.inference_mode():
            z = comp.model.encode(image_pm1.to(device=comp.device, dtype=comp.model.dtype)).latent_dist.mode()
            patches = flux2_patchify(z)
            mean, std = _flux2_bn_stats(comp, patches)
            return (patches - mean) / std
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
    if comp.kind == "flux2_vae":
        with torch.inference_mode():
            x = latents.to(device=comp.device, dtype=vae.dtype)
            mean, std = _flux2_bn_stats(comp, x)
            return vae.decode(flux2_unpatchify(x * std + mean), return_dict=False)[0]
    with torch.inference_mode():
        z = latents.to(device=comp.device, dtype=vae.dtype) / fmt.scale + fmt.shift
        return vae.decode(z, return_dict=False)[0]


def to_unit_range(decoded):
    """Decoder output in [-1,1] -> float32 [0,1], as diffusers' postprocess does."""
    return (decoded.float() / 2 + 0.5).clamp(0, 1)
