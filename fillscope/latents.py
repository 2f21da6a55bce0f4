"""A sampler's result and the way back to the user's image, shared by every model family."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import vae as vae_ops
from .errors import FillScopeInputError
from .masks import PreparedInput, restore_geometry


@dataclass
class SampledLatent:
    """Model-space latents [B,16,h,w] and how to get back to the user's image."""

    latents: object
    prepared: PreparedInput
    family: str  # latent format name ("flux", "sd3"): the VAE that decodes it must match
    unchanged: bool = False  # empty mask: decode returns the source as is
    info: dict = field(default_factory=dict)


@dataclass
class ConditionSource:
    """What every inpaint condition keeps of its input: the prepared image/mask and the VAE, to start from the
    noised source (denoise < 1) or to skip an empty mask. The source is encoded on first use only."""

    prepared: PreparedInput
    vae: object
    _source_latents: object = field(default=None, repr=False)

    @property
    def is_empty(self) -> bool:
        return self.prepared.coverage == 0.0

    def source_latents(self):
        """Scaled latents of the unmasked source [B,16,H/8,W/8]."""
        if self._source_latents is None:
            self._source_latents = vae_ops.encode(self.vae, self.prepared.image)
        return self._source_latents


def starting_point(cond: ConditionSource, sigmas, steps: int, denoise: float, shape, seed: int, device, dtype,
                   noise=None):
    """(the sigmas this denoise runs, the initial noise [B,16,h,w], the latents the first step starts from): pure
    noise at denoise 1, else the source noised to the first kept sigma, as diffusers' img2img scale_noise."""
    from .sampling import initial_noise, truncate_for_denoise

    sigmas = truncate_for_denoise(sigmas, steps, denoise)
    if len(sigmas) < 2:
        raise FillScopeInputError("denoise", f"{denoise} leaves no step out of {steps}.", "raise denoise or steps.")
    if noise is None:
        noise = initial_noise(shape, seed, device, dtype)
    noise = noise.to(device=device, dtype=dtype)
    if denoise == 1.0:
        return sigmas, noise, noise
    s0 = sigmas[0].to(device)
    latents = (s0 * noise + (1.0 - s0) * cond.source_latents().to(device=device, dtype=dtype)).to(dtype)
    return sigmas, noise, latents


def observer_or_noop(observe):
    return observe if observe is not None else (lambda name, tensor: None)


def _all_finite(tensors) -> bool:
    import torch

    return all(t.device.type == "meta" or bool(torch.isfinite(t).all()) for t in tensors)


def require_finite_first_step(model_name: str, output, inputs=()) -> None:
    """After the first denoiser call: NaN/inf there would run on silently and decode to a black image. One check
    (one device sync) per run; the inputs are only looked at when the output is bad, to name where it came from.
    `inputs` = (input name, tensor or tensors, what produced them) in the order they feed the model."""
    if _all_finite([output]):
        return
    for name, tensors, producer in inputs:
        if not _all_finite(tensors if isinstance(tensors, (list, tuple)) else [tensors]):
            raise FillScopeInputError(
                name,
                f"holds NaN/inf before the first step: {producer}'s weights contain NaN/inf, or fp16 overflowed.",
                f"check {producer}'s weights file (download it again if it is corrupt) or load it with dtype bf16.",
            )
    raise FillScopeInputError(
        model_name,
        f"the {model_name} produced NaN/inf at step 1: its weights contain NaN/inf, or fp16 overflowed.",
        "check the weights file (download it again if it is corrupt) or load it with dtype bf16.",
    )


def require_finite_result(model_name: str, latents) -> None:
    """After the last step (one more sync): a later step that overflowed must not decode to a black image."""
    if not _all_finite([latents]):
        raise FillScopeInputError(
            model_name,
            f"the sampled latent holds NaN/inf although the first step of the {model_name} was finite: "
            "fp16 probably overflowed in a later step.",
            "load the models with dtype bf16 (or fp32).",
        )


def decode_to_image(vae, latent: SampledLatent, observe=None):
    """[B,16,h,w] -> IMAGE [B,H,W,3] at the user's input size. An empty-mask result is the source itself.
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
    decoded = vae_ops.decode(vae, latent.latents)  # [B,3,H,W]
    observe("decoded_image", decoded)
    grid = vae_ops.to_unit_range(decoded).permute(0, 2, 3, 1)  # [B,H,W,3]
    if grid.device.type == "meta":
        grid = torch.zeros(grid.shape, dtype=torch.float32)
    return restore_geometry(grid.cpu(), prepared.geometry, prepared.source)
