"""What every family's sampler shares: flow-matching schedules, the starting point (seeded noise, or the
source noised for denoise < 1), the Euler step, and the NaN/inf guards after the first and the last step.

The schedule reproduces diffusers' FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=linspace, mu=...)
in the same float32 arithmetic, so the same steps give the same sigmas.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .errors import FillScopeInputError

if TYPE_CHECKING:  # annotations only: condition imports vae, which the schedules do not need
    from .condition import ConditionSource


def flux_dynamic_mu(image_tokens: int, base_seq_len=256, max_seq_len=4096, base_shift=0.5, max_shift=1.15) -> float:
    """FLUX's resolution-dependent shift: mu grows linearly with the number of image tokens."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return image_tokens * m + (base_shift - m * base_seq_len)


def flux_sigmas(steps: int, mu: float):
    """[steps + 1] float32 sigmas from 1 down to 0: linspace(1, 1/steps), exponential time shift by mu,
    terminal 0 appended."""
    import numpy as np
    import torch

    base = np.linspace(1.0, 1.0 / steps, steps).astype(np.float32)
    shifted = math.exp(mu) / (math.exp(mu) + (1.0 / base - 1.0) ** 1.0)
    sigmas = torch.from_numpy(np.asarray(shifted)).to(torch.float32)
    return torch.cat([sigmas, torch.zeros(1)])


def static_shift_sigmas(steps: int, shift: float, num_train_timesteps: int = 1000):
    """SD3's schedule, as FlowMatchEulerDiscreteScheduler(shift=s).set_timesteps(steps) computes it: the
    scheduler's own range [sigma_max, sigma_min] (already shifted once at construction: 1.0 .. ~0.003 for s=3),
    spaced linearly, shifted again by s*x / (1 + (s-1)*x), terminal 0 appended."""
    import numpy as np
    import torch

    n = num_train_timesteps
    train = torch.from_numpy(np.linspace(1, n, n, dtype=np.float32)[::-1].copy()) / n
    train = shift * train / (1 + (shift - 1) * train)
    sigma_max, sigma_min = train[0].item(), train[-1].item()
    base = np.linspace(sigma_max * n, sigma_min * n, steps) / n
    shifted = shift * base / (1 + (shift - 1) * base)
    return torch.cat([torch.from_numpy(shifted).to(torch.float32), torch.zeros(1)])


def check_finite_settings(*settings) -> None:
    """(name, value, the range to set it in) of a sampler's scalar settings: a NaN or inf one is the user's input
    at fault (it would otherwise reach the model and be blamed on its weights). None means unset."""
    for name, value, wanted in settings:
        if value is not None and not math.isfinite(value):
            raise FillScopeInputError(name, f"is {value!r}; it must be a finite number.", f"set {name} to {wanted}.")


def check_steps_and_denoise(steps: int, denoise: float) -> None:
    if steps < 1:
        raise FillScopeInputError("steps", "must be at least 1.", "set steps to 1 or more.")
    if not 0.0 < denoise <= 1.0:
        raise FillScopeInputError("denoise", f"is {denoise}; it must be in (0, 1].", "set denoise between 0.01 and 1.")


def truncate_for_denoise(sigmas, steps: int, denoise: float):
    """Keep the last round(steps*denoise) steps, as diffusers' img2img get_timesteps does."""
    init = min(steps * denoise, steps)
    start = int(max(steps - init, 0))
    return sigmas[start:]


def initial_noise(shape, seed: int, device, dtype):
    """The same draw as diffusers' randn_tensor with a CPU torch.Generator: randn of `shape` on the CPU in
    `dtype`, then moved. On the meta device only the shape exists."""
    import torch

    if str(device) == "meta":
        return torch.empty(shape, device="meta", dtype=dtype)
    gen = torch.Generator("cpu").manual_seed(int(seed))
    return torch.randn(shape, generator=gen, device="cpu", dtype=dtype).to(device)


def euler_step(sample, velocity, sigma, sigma_next):
    """x_{next} = x + (sigma_next - sigma) * v, in float32 like diffusers' scheduler, cast back."""
    out = sample.float() + (sigma_next - sigma) * velocity.float()
    return out.to(velocity.dtype)


def starting_point(cond: ConditionSource, sigmas, steps: int, denoise: float, shape, seed: int, device, dtype,
                   noise=None):
    """(the sigmas this denoise runs, the initial noise [B,16,h,w], the latents the first step starts from): pure
    noise at denoise 1, else the source noised to the first kept sigma, as diffusers' img2img scale_noise."""
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
