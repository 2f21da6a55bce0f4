"""VAE encode/decode with a latent format's scale and shift.

Encode is deterministic: the latent distribution's mean (diffusers samples from it; FillScope's tests switch
diffusers to its `argmax` mode, which is the same mean, to compare).
"""

from __future__ import annotations

from .errors import FillScopeInputError
from .specs import COMPONENTS, FLUX2_LATENT, FLUX_LATENT, SD3_LATENT, LatentFormat, model_config, vae_scale_factor
from .weights import Component, load_component


VAE_KINDS = ("flux", "sd3", "flux2")


def load_vae(source, *, kind="flux", dtype="bf16", device="auto", seed=0) -> Component:
    """kind: 'flux' (scale 0.3611, shift 0.1159), 'sd3' (1.5305, 0.0609) or 'flux2' (32 channels, BatchNorm-
    normalised 2x2 patches); a folder's config must agree."""
    if kind not in VAE_KINDS:
        raise FillScopeInputError("kind", f"unknown VAE kind {kind!r}.", f"use one of {', '.join(VAE_KINDS)}.")
    return load_component(f"{kind}_vae", source, dtype=dtype, device=device, seed=seed, input_name="vae source")


def flux2_patch(comp: Component) -> int:
    """The side of the FLUX.2 VAE's latent patches, from its config's patch_size (2 for the published VAE; its
    BatchNorm runs on latent_channels x patch^2 channels). A non-square patch is refused."""
    ph, pw = (int(p) for p in model_config(comp)["patch_size"])
    if ph != pw:
        raise FillScopeInputError("vae", f"this FLUX.2 VAE's patch_size is {ph}x{pw}; FillScope packs square "
                                  "patches only (the published VAE: 2x2).", "load the published FLUX.2 VAE.")
    return ph


def latent_format(comp: Component) -> LatentFormat:
    """The VAE's latent format: channels and downscale from the loaded model's config (model_config); scale and
    shift from the component's config, else the published VAE's. FLUX.2: latent_channels x patch^2 channels at
    scale x patch (published: 32 x 2x2 = 128 at /16)."""
    cfg = model_config(comp)
    scale = vae_scale_factor(cfg)
    if comp.kind == "flux2_vae":
        patch = flux2_patch(comp)
        return LatentFormat(FLUX2_LATENT.name, int(cfg["latent_channels"]) * patch * patch, FLUX2_LATENT.scale,
                            FLUX2_LATENT.shift, downscale=scale * patch)
    default = FLUX_LATENT if comp.kind == "flux_vae" else SD3_LATENT
    return LatentFormat(
        default.name,
        int(cfg["latent_channels"]),
        comp.config.get("scaling_factor", default.scale),
        comp.config.get("shift_factor", default.shift),
        downscale=scale,
    )


def describe_widths(comp: Component) -> str:
    """A VAE's widths for an error message, e.g. "latent_channels 16 at 1/8" or, FLUX.2, "latent_channels 32 x 2x2
    patches = 128 at 1/16"."""
    cfg = model_config(comp)
    fmt = latent_format(comp)
    if comp.kind == "flux2_vae":
        patch = flux2_patch(comp)
        return (f"latent_channels {cfg['latent_channels']} x {patch}x{patch} patches = {fmt.channels} at "
                f"1/{fmt.downscale}")
    return f"latent_channels {fmt.channels} at 1/{fmt.downscale}"


def describe(comp: Component | None) -> str:
    """"the FLUX VAE (latent_channels 16 at 1/8)": a VAE and its widths, for an error message."""
    return f"the {COMPONENTS[comp.kind].title} ({describe_widths(comp)})" if comp is not None else "the condition's VAE"


def check_denoiser_widths(denoiser: Component, vae: Component | None, reads: int, gives: str, returns: int,
                          fix: str) -> None:
    """The denoiser's in_channels and out_channels (diffusers: out None = in) against what the condition's VAE gives
    it (`reads` channels, told as `gives`) and decodes (`returns`), before anything is placed or sampled: a mismatch
    is refused naming both and their widths."""
    cfg = model_config(denoiser)
    width = cfg.get("in_channels")
    out = cfg.get("out_channels") or width
    if width != reads:
        raise FillScopeInputError("transformer", f"takes in_channels {width} but {describe(vae)} gives {gives}.", fix)
    if out != returns:
        raise FillScopeInputError("transformer", f"returns out_channels {out} but {describe(vae)} decodes "
                                  f"{returns}-channel latents.", fix)


def flux2_patchify(latents, patch: int):
    """[B,C,h,w] -> [B,C*p*p,h/p,w/p] (published: [B,32,h,w] -> [B,128,h/2,w/2], p = the VAE's patch_size 2): each
    p x p latent patch becomes p^2 x the channels, channel-major (diffusers' Flux2 _patchify_latents, p = 2)."""
    p = patch
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // p, p, w // p, p).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(b, c * p * p, h // p, w // p)


def flux2_unpatchify(latents, patch: int):
    """[B,C*p*p,h,w] -> [B,C,p*h,p*w] (published: [B,128,h,w] -> [B,32,2h,2w]); the inverse of flux2_patchify."""
    p = patch
    b, cp, h, w = latents.shape
    x = latents.reshape(b, cp // (p * p), p, p, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(b, cp // (p * p), h * p, w * p)


def _flux2_bn_stats(comp: Component, like):
    """(mean, std) [1,C,1,1] (published C = 128) of the FLUX.2 VAE's BatchNorm running statistics, as `like`'s
    device and dtype."""
    import torch

    bn = comp.model.bn
    eps = comp.config.get("batch_norm_eps", 1e-4)
    mean = bn.running_mean.view(1, -1, 1, 1).to(like.device, like.dtype)
    std = torch.sqrt(bn.running_var.view(1, -1, 1, 1) + eps).to(like.device, like.dtype)
    return mean, std


def normalises_patches(comp: Component) -> bool:
    """A FLUX.2 VAE model whose own encode gives the normalised patches [B,C*p*p,H/s,W/s] and whose decode takes
    them (its `normalised_patches` is True: ComfyUI's FLUX.2 VAE, wrapped by the nodes, does both inside its model):
    encode and decode then use it as it is, without patchify or BatchNorm here."""
    return bool(getattr(comp.model, "normalised_patches", False))


def encode(comp: Component, image_pm1):
    """[B,3,H,W] in [-1,1] -> model latents [B,C,H/s,W/s] (latent_format: C and s from the VAE's config):
    (mean - shift) * scale for FLUX.1/SD3 (published [B,16,H/8,W/8]); for FLUX.2 (patchify(mean) - bn_mean) / bn_std
    (published [B,128,H/16,W/16])."""
    import torch

    if comp.kind == "flux2_vae":
        with torch.inference_mode():
            z = comp.model.encode(image_pm1.to(device=comp.device, dtype=comp.model.dtype)).latent_dist.mode()
            if normalises_patches(comp):
                return z
            patches = flux2_patchify(z, flux2_patch(comp))
            mean, std = _flux2_bn_stats(comp, patches)
            return (patches - mean) / std
    fmt = latent_format(comp)
    vae = comp.model
    with torch.inference_mode():
        x = image_pm1.to(device=comp.device, dtype=vae.dtype)
        z = vae.encode(x).latent_dist.mode()
    return (z - fmt.shift) * fmt.scale


def decode(comp: Component, latents):
    """Model latents [B,C,h,w] -> the decoder's output [B,3,s*h,s*w] in [-1,1], in the VAE's dtype (published FLUX.1
    / SD3: [B,16,h,w] -> [B,3,8h,8w]; FLUX.2: [B,128,h,w] -> [B,3,16h,16w])."""
    import torch

    fmt = latent_format(comp)
    vae = comp.model
    if comp.kind == "flux2_vae":
        with torch.inference_mode():
            x = latents.to(device=comp.device, dtype=vae.dtype)
            if normalises_patches(comp):
                return vae.decode(x, return_dict=False)[0]
            mean, std = _flux2_bn_stats(comp, x)
            return vae.decode(flux2_unpatchify(x * std + mean, flux2_patch(comp)), return_dict=False)[0]
    with torch.inference_mode():
        z = latents.to(device=comp.device, dtype=vae.dtype) / fmt.scale + fmt.shift
        return vae.decode(z, return_dict=False)[0]


def to_unit_range(decoded):
    """Decoder output in [-1,1] -> float32 [0,1], as diffusers' postprocess does."""
    return (decoded.float() / 2 + 0.5).clamp(0, 1)
