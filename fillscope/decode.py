"""A sampler's result and the way back to the user's image, shared by every model family."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import vae as vae_ops
from .errors import FillScopeInputError
from .masks import PreparedInput, restore_geometry
from .observe import observer_or_noop


@dataclass
class SampledLatent:
    """Model-space latents [B,C,h,w] (FLUX.1 / SD3: C = 16; klein: 128) and how to get back to the user's image."""

    latents: object
    prepared: PreparedInput
    family: str  # latent format name ("flux", "sd3"): the VAE that decodes it must match
    unchanged: bool = False  # empty mask: decode returns the source as is
    info: dict = field(default_factory=dict)


def decode_to_image(vae, latent: SampledLatent, observe=None):
    """[B,C,h,w] -> IMAGE [B,H,W,3] at the user's input size; C must be the VAE's (vae.latent_format). An empty-mask
    result is the source itself.
    On the meta device there are no pixel values: the IMAGE is zeros of the right size (the node says so)."""
    import torch

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
    decoded = vae_ops.decode(vae, latent.latents)  # [B,3,H,W]
    observe("decoded_image", decoded)
    grid = vae_ops.to_unit_range(decoded).permute(0, 2, 3, 1)  # [B,H,W,3]
    if grid.device.type == "meta":
        grid = torch.zeros(grid.shape, dtype=torch.float32)
    return restore_geometry(grid.cpu(), prepared.geometry, prepared.source)
