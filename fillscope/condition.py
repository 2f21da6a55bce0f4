"""What every family's inpaint condition keeps of its input, besides the model-specific tensors."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import vae as vae_ops
from .masks import PreparedInput


@dataclass
class ConditionSource:
    """The prepared image/mask and the VAE, to start from the noised source (denoise < 1) or to skip an empty
    mask. The source is encoded on first use only."""

    prepared: PreparedInput
    vae: object
    _source_latents: object = field(default=None, repr=False)

    @property
    def is_empty(self) -> bool:
        return self.prepared.coverage == 0.0

    def source_latents(self):
        """Scaled latents of the unmasked source [B,C,H/s,W/s] (FLUX.1 / SD3 published: [B,16,H/8,W/8])."""
        if self._source_latents is None:
            self._source_latents = vae_ops.encode(self.vae, self.prepared.image)
        return self._source_latents
