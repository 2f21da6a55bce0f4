"""Flow-matching schedules and the Euler step, shared by the FLUX Fill and SD3 samplers.

The schedule reproduces diffusers' FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=linspace, mu=...)
in the same float32 arithmetic, so the same steps give the same sigmas.
"""

from __future__ import annotations

import math


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


def check_steps_and_denoise(steps: int, denoise: float) -> None:
    from .errors import FillScopeInputError

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
