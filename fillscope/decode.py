"""A sampler's result and the way back to the user's image, shared by every model family."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import vae as vae_ops
from .errors import FillScopeInputError
from .masks import PreparedInput, restore_geometry
from .observe import observer_or_noop
from .specs import FLUX2_LATENT, FLUX_LATENT, SD3_LATENT


@dataclass
class SampledLatent:
    """Model-space latents [B,C,h,w] (FLUX.1 / SD3: C = 16; klein: 128) and how to get back to the user's image."""

    latents: object
    prepared: PreparedInput
    family: str  # latent format name ("flux", "sd3"): the VAE that decodes it must match
    unchanged: bool = False  # empty mask: decode returns the source as is
    info: dict = field(default_factory=dict)


def decode_to_image(vae, latent: SampledLatent, observe=None, *, decode=None):
    """[B,C,h,w] -> IMAGE [B,H,W,3] at the user's input size; C must be the VAE's (vae.latent_format). An empty-mask
    result is the source itself. `decode(vae, latents)`: the VAE decode (None: vae.decode, one whole-image call; the
    tiled modes give vae_tiles.decode_tiled, same shapes).
    On the meta device there are no pixel values: the IMAGE is zeros of the right size (the node says so)."""

    observe = observer_or_noop(observe)
    fmt = vae_ops.latent_format(vae)
    if fmt.name != latent.family:
        raise FillScopeInputError(
            "vae",
            f"this is the {fmt.name.upper()} VAE but the latent comes from a {latent.family.upper()} sampler.",
            f"connect the {latent.family.upper()} VAE (VAE loader kind = {latent.family}).",
        )
    prepared = latent.prepared
    if latent.unchanged:
        return prepared.source.clone()
    if latent.latents.shape[1] != fmt.channels:
        raise FillScopeInputError(
            "vae", f"this {fmt.name.upper()} VAE decodes {fmt.channels}-channel latents "
                   f"({vae_ops.describe_widths(vae)}) but the latent has {latent.latents.shape[1]} channels.",
            "connect the VAE that encoded the sampler's condition (the same VAE loader as the condition node).")
    grid = _decode_grid(vae, latent.latents, observe, decode)  # [B,H,W,3] on the model's grid
    return restore_geometry(grid, prepared.geometry, prepared.source)


def _decode_grid(vae, latents, observe, decode=None):
    """Model-space latents [B,C,h,w] -> IMAGE [B,s*h,s*w,3] on the CPU, 0..1 (zeros on meta: no values there);
    `decode(vae, latents)` -> [B,3,H,W] in [-1,1] (None: vae.decode)."""
    import torch

    decoded = (decode or vae_ops.decode)(vae, latents)  # [B,3,H,W]
    observe("decoded_image", decoded)
    grid = vae_ops.to_unit_range(decoded).permute(0, 2, 3, 1)  # [B,H,W,3]
    if grid.device.type == "meta":
        grid = torch.zeros(grid.shape, dtype=torch.float32)
    return grid.cpu()


# ---- ComfyUI's LATENT (the nodes' native latent output and input) ------------------------------------------------
# ComfyUI's LATENT holds the VAE's raw first-stage latent; the model applies its latent format's process_in
# ((z - shift) * scale for FLUX.1 / SD3) itself. FillScope's latents are the model's, so the border undoes that:
#   FLUX.1 / SD3: z_comfy = z_fs / scale + shift,  z_fs = (z_comfy - shift) * scale
#   FLUX.2 [klein]: identity (both are the VAE's BatchNorm-normalised 2x2 patches [B,128,H/16,W/16]; ComfyUI's
#   Flux2 latent format's process_in/out are identities)
# The scale and shift are ComfyUI's (comfy/latent_formats.py Flux, SD3), which are the published VAEs' (specs).
COMFY_LATENT_FORMATS = {f.name: f for f in (FLUX_LATENT, SD3_LATENT, FLUX2_LATENT)}


def to_comfy_samples(latents, family: str):
    """FillScope's model latents [B,C,h,w] -> ComfyUI's LATENT samples (float32, on the CPU as VAEEncode gives them)."""
    fmt = COMFY_LATENT_FORMATS[family]
    z = latents.detach().float()
    if z.device.type != "meta":
        z = z.cpu()
    return z / fmt.scale + fmt.shift if (fmt.scale, fmt.shift) != (1.0, 0.0) else z.clone()


def from_comfy_samples(samples, family: str):
    """ComfyUI's LATENT samples -> FillScope's model latents of `family` (the inverse of to_comfy_samples)."""
    fmt = COMFY_LATENT_FORMATS[family]
    z = samples.float()
    return (z - fmt.shift) * fmt.scale if (fmt.scale, fmt.shift) != (1.0, 0.0) else z


def to_comfy_latent(latent: SampledLatent, source_latents=None) -> dict:
    """A sampler's result as ComfyUI's LATENT: {"samples": [B,C,h,w] in ComfyUI's space (FLUX.1 / SD3: 16 channels at
    /8; klein: 128 at /16), "noise_mask": [B,1,H,W] the repaint mask on the model grid (the pixel-resolution mask
    ComfyUI's SetLatentNoiseMask / InpaintModelConditioning store; its samplers resize it to the latent), where the
    condition had a mask}. With `source_latents` (the source's model latents, [B,C,h,w]) the samples are blended with
    them by that mask resized to the latent as ComfyUI's samplers resize it (bilinear): outside the mask the source's
    latent, as ComfyUI's KSampler with a noise_mask leaves it."""
    out = {"samples": to_comfy_samples(latent.latents, latent.family)}
    mask = getattr(latent.prepared, "mask", None)
    if mask is not None and getattr(mask, "dim", lambda: 0)() == 4:
        m = mask.detach().float()
        out["noise_mask"] = m if m.device.type == "meta" else m.cpu()
        if source_latents is not None and tuple(source_latents.shape) == tuple(latent.latents.shape):
            import torch.nn.functional as F

            small = F.interpolate(out["noise_mask"], size=tuple(out["samples"].shape[-2:]), mode="bilinear")
            source = to_comfy_samples(source_latents, latent.family)
            out["samples"] = out["samples"] * small + source * (1.0 - small)
    return out


def decode_comfy_latent(vae, samples, observe=None):
    """ComfyUI's LATENT samples [B,C,h,w] -> IMAGE [B,s*h,s*w,3] by FillScope's VAE (as ComfyUI's VAEDecode: no
    geometry to restore); the family is the VAE's."""

    observe = observer_or_noop(observe)
    fmt = vae_ops.latent_format(vae)
    if samples.dim() != 4 or samples.shape[1] != fmt.channels:
        raise FillScopeInputError(
            "native_latent", f"this {fmt.name.upper()} VAE decodes {fmt.channels}-channel latents "
                             f"({vae_ops.describe_widths(vae)}) but the LATENT's samples are {list(samples.shape)}.",
            f"connect a LATENT of the {fmt.name.upper()} family (e.g. VAEEncode with that VAE, or a FillScope "
            f"{fmt.name.upper()} sampler's LATENT output), or the VAE that made it.")
    return _decode_grid(vae, from_comfy_samples(samples, fmt.name), observe)
