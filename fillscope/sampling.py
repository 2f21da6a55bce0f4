"""What every family's sampler shares: flow-matching schedules, the starting point (seeded noise, or the
source noised for denoise < 1), the Euler step, the NaN/inf guards after the first and the last step, and soft
masks by differential diffusion (`soft_mask_to_latent`, `differential_mask`, `blend_with_source`).

The schedule reproduces diffusers' FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=linspace, mu=...)
in the same float32 arithmetic, so the same steps give the same sigmas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import FillScopeInputError
from .fp8 import nonfinite_count
from .lora import DOWN, UP
from .pixels import require_finite

if TYPE_CHECKING:  # annotations only: condition imports vae, which the schedules do not need
    from .condition import ConditionSource


@dataclass(frozen=True)
class ExternalDenoiser:
    """A denoiser the engine did not load, passed to a sampler in place of its transformer Component (FLUX Fill:
    ComfyUI's own MODEL, wrapped by nodes/native_model.py): the sampler keeps its schedule, noise, guidance, soft
    mask and paste-back and calls `call(...) -> velocity` where its transformer call was. The arguments are the
    family's transformer inputs, documented by each sampler (FLUX Fill, sample_flux_fill: `call(tokens, t, guidance,
    text, grid)`, tokens [B,N,384] = noisy 64 ++ condition 320, t [B] the sigma in [0, 1], guidance [B] or None,
    text = (T5 sequence [B,L,D], pooled [B,P]), grid = (h, w) the latent grid; velocity [B,N,64]).
    klein (sample_klein): `call(tokens, t, guidance, text, grid, references, reference_ids, part)`, velocity [B,N,C]
    (nodes/native_klein.py); SD3 ControlNet inpaint (sample_sd3_controlnet_inpaint): `call(x, sigma, context, pooled,
    control, cond_or_uncond) -> velocity` (nodes/native_sd3.py).

    `config`: its widths in diffusers' names (in_channels, out_channels, joint_attention_dim, pooled_projection_dim,
    guidance_embeds), read by the sampler's own width checks; `device`, `dtype`: where and in which dtype the sampler
    keeps its latents; `input_name`: the node input it came from."""

    call: Callable
    config: dict
    device: object
    dtype: object
    input_name: str = "model"
    schedule: Callable | None = None  # called once with the run's sigmas [steps + 1] before the first step


def tell_schedule(denoiser, sigmas) -> None:
    """An ExternalDenoiser's `schedule` gets the run's sigmas before the first step (ComfyUI's
    transformer_options["sample_sigmas"]: what a MODEL's wrappers read for a call's position in the schedule)."""
    if isinstance(denoiser, ExternalDenoiser) and denoiser.schedule is not None:
        denoiser.schedule(sigmas)


def check_external_options(input_name: str, step_cache: str = "off", parallel: int = 1) -> None:
    """An ExternalDenoiser runs one process without a step cache (both are diffusers' and work on FillScope's own
    transformer): refused naming the option, before anything is placed."""
    if step_cache == "off" and parallel == 1:
        return
    name, value = ("step_cache", repr(step_cache)) if step_cache != "off" else ("parallel", str(parallel))
    raise FillScopeInputError(name, f"is {value} with a native '{input_name}': step caches and context parallelism "
                                    "are diffusers' and run on FillScope's own transformer only.",
                              "set step_cache to off (parallel 1), or load the transformer with FillScope's loader.")


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


def require_noise_shape(noise, shape) -> None:
    """A given `noise` must have the shape the loaded transformer samples (its latent channels and the grid)."""
    if tuple(noise.shape) != tuple(shape):
        raise FillScopeInputError("noise", f"has shape {list(noise.shape)}; this transformer and condition sample "
                                  f"{list(shape)} [B,C,h,w].", "give noise of that shape, or none (seeded noise).")


def starting_point(cond: ConditionSource, sigmas, steps: int, denoise: float, shape, seed: int, device, dtype,
                   noise=None):
    """(the sigmas this denoise runs, the initial noise of `shape` [B,C,h,w] (C = the transformer's latent channels,
    16 for FLUX.1 / SD3), the latents the first step starts from): pure noise at denoise 1, else the source noised to
    the first kept sigma, as diffusers' img2img scale_noise. A `noise` of another shape is refused."""
    sigmas = truncate_for_denoise(sigmas, steps, denoise)
    if len(sigmas) < 2:
        raise FillScopeInputError("denoise", f"{denoise} leaves no step out of {steps}.", "raise denoise or steps.")
    if noise is None:
        noise = initial_noise(shape, seed, device, dtype)
    require_noise_shape(noise, shape)
    noise = noise.to(device=device, dtype=dtype)
    if denoise == 1.0:
        return sigmas, noise, noise
    s0 = sigmas[0].to(device)
    latents = (s0 * noise + (1.0 - s0) * cond.source_latents().to(device=device, dtype=dtype)).to(dtype)
    return sigmas, noise, latents


def _all_finite(tensors) -> bool:
    import torch

    return all(t.device.type == "meta" or bool(torch.isfinite(t).all()) for t in tensors)


def require_finite_first_step(model_name: str, output, inputs=(), component=None) -> None:
    """After the first denoiser call: NaN/inf there would run on silently and decode to a black image. One check
    (one device sync) per run; the inputs are only looked at when the output is bad, to name where it came from.
    `inputs` = (input name, tensor or tensors, what produced them) in the order they feed the model. `component`
    (the denoiser's Component) lets a bad output be told apart: its weights are scanned then (only then), and the
    LoRAs attached to it (lora.py `with_loras`' `lora_stack`) are named, so the weights are blamed only when a
    weight holds NaN/inf."""
    if _all_finite([output]):
        return
    for name, tensors, producer in inputs:
        if not _all_finite(tensors if isinstance(tensors, (list, tuple)) else [tensors]):
            raise FillScopeInputError(
                name,
                f"holds NaN/inf before the first step: {producer}'s weights contain NaN/inf, or fp16 overflowed.",
                f"check {producer}'s weights file (download it again if it is corrupt) or load it with dtype bf16.",
            )
    if component is None:  # nothing to tell the parts apart by
        raise FillScopeInputError(
            model_name,
            f"the {model_name} produced NaN/inf at step 1: its weights contain NaN/inf, or fp16 overflowed.",
            "check the weights file (download it again if it is corrupt) or load it with dtype bf16.",
        )
    raise _first_step_error(model_name, output, component)


def _first_nonfinite(tensors):
    """(name, NaN/inf count, size) of the first tensor holding NaN/inf (meta tensors skipped), or None."""
    for name, t in tensors:
        bad = 0 if t.device.type == "meta" else nonfinite_count(t)
        if bad:
            return name, bad, t.numel()
    return None


def _first_step_error(model_name: str, output, component) -> FillScopeInputError:
    """What made a finite input give a NaN/inf first step: a weight (scanned now), the LoRA factors, one of the
    attached LoRAs, or overflow in the compute dtype."""
    model = component.model
    stack = list(component.extras.get("lora_stack", ()))
    dtype = str(output.dtype).replace("torch.", "")
    fp16 = dtype == "float16" or component.dtype == "fp16"
    lora_buffers = (DOWN, UP)
    bad = _first_nonfinite((n, t) for n, t in list(model.named_parameters()) + list(model.named_buffers())
                           if n.rsplit(".", 1)[-1] not in lora_buffers)
    if bad is not None:
        name, count, total = bad
        range_note = (" (or values beyond fp16's range, 65504, became inf when the weights were loaded as fp16)"
                      if fp16 else "")
        return FillScopeInputError(
            model_name,
            f"the {model_name} produced NaN/inf at step 1: its weights contain NaN/inf (tensor '{name}' holds "
            f"{count:,} of {total:,} values){range_note}; its inputs are finite.",
            ("load it with dtype bf16; if the NaN/inf stays, the weights file is broken: download it again."
             if fp16 else "the weights file is broken (a failed conversion, merge or download): download it again, "
             "or use another copy of the model."),
        )
    attached = ", ".join(f"{lora.name} (strength {strength:g})" for lora, strength in stack)
    if stack:
        factors = _first_nonfinite((n, t) for n, t in model.named_buffers() if n.rsplit(".", 1)[-1] in lora_buffers)
        if factors is not None:
            return FillScopeInputError(
                model_name,
                f"the {model_name} with LoRAs {attached} produced NaN/inf at step 1: the LoRA factors on layer "
                f"'{factors[0].rsplit('.', 1)[0]}' overflowed {dtype} once scaled by strength x alpha/rank (the LoRA "
                "files hold finite values: they were checked when loaded; the weights and inputs are finite).",
                "lower the LoRAs' strengths, or load the transformer with dtype bf16.",
            )
        return FillScopeInputError(
            model_name,
            f"the {model_name} with LoRAs {attached} produced NaN/inf at step 1, although its weights, the LoRA "
            f"files and its inputs are finite: one of those LoRAs (too strong, or made for another model) or "
            f"{dtype} overflow is at fault.",
            "detach the LoRAs (or set a LoRA's strength to 0) one at a time to find which, then lower its strength "
            "or leave it out; or load the transformer with dtype bf16.",
        )
    return FillScopeInputError(
        model_name,
        f"the {model_name} produced NaN/inf at step 1 although its weights and inputs are finite: the computation "
        f"overflowed {dtype}.",
        "load the models with dtype bf16 (or fp32)." if fp16 else
        "load the transformer with dtype fp32, and check the sampler's settings for extreme values.",
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


# --- soft masks: differential diffusion (the formula: differential_mask's docstring) ------------------------------

def soft_mask_to_latent(soft_mask, geometry, batch: int, height: int, width: int, *, name: str = "soft_mask"):
    """A ComfyUI MASK ([B,H,W], [H,W] or [B,H,W,1]; 1 = repaint) at the condition's input size (geometry.height x
    geometry.width) or at its model grid (grid_height x grid_width) -> [batch, 1, height, width] float32 on the latent
    grid. Through the geometry first: pad -> the mask's edge values replicated into the padding (the border latent
    cells average real pixels only), crop -> the same crop; then an area average over each latent cell (8x8 px for
    FLUX / SD3, 16x16 px for klein's token grid), so a cell's value is its pixels' mean (ComfyUI resizes bilinearly,
    which samples the cell's centre: the same on a smooth mask). Values are clamped to [0, 1]. On the meta device
    only the shape exists: no value is read."""
    import torch
    import torch.nn.functional as F

    fix_size = ("give a soft mask of the image's size: the mask wired to the condition node, or one made from it "
                "(e.g. a blurred or feathered copy), or disconnect soft_mask.")
    if not isinstance(soft_mask, torch.Tensor):
        raise FillScopeInputError(name, f"is {type(soft_mask).__name__}, not a MASK tensor.", "connect a ComfyUI MASK.")
    m = soft_mask
    if m.dim() == 2:
        m = m.unsqueeze(0)
    if m.dim() == 4 and m.shape[-1] == 1:
        m = m[..., 0]
    elif m.dim() == 4 and m.shape[1] == 1:
        m = m[:, 0]
    if m.dim() != 3:
        raise FillScopeInputError(name, f"expected a MASK [B,H,W], got shape {list(soft_mask.shape)}.",
                                  "connect a ComfyUI MASK.")
    size = tuple(m.shape[-2:])
    source_size, grid_size = (geometry.height, geometry.width), (geometry.grid_height, geometry.grid_width)
    if size not in (source_size, grid_size):
        grid = f" (its model grid {grid_size[1]}x{grid_size[0]})" if grid_size != source_size else ""
        raise FillScopeInputError(
            name, f"is {size[1]}x{size[0]} but the condition's image is {source_size[1]}x{source_size[0]}{grid}.",
            fix_size)
    if m.shape[0] not in (1, batch):
        raise FillScopeInputError(name, f"batch of {m.shape[0]} masks for {batch} images.",
                                  "give one soft mask, or one per image.")
    require_finite(name, m, "from 0 (keep) to 1 (repaint)")
    m = m.float().clamp(0.0, 1.0).unsqueeze(1)  # [b,1,H,W]
    if size == source_size and source_size != grid_size:
        if geometry.mode == "crop":
            m = m[:, :, geometry.top: geometry.top + geometry.grid_height,
                  geometry.left: geometry.left + geometry.grid_width]
        else:  # pad: bottom/right, as the image
            m = F.pad(m, (0, geometry.grid_width - geometry.width, 0, geometry.grid_height - geometry.height),
                      mode="replicate")
    m = F.adaptive_avg_pool2d(m, (height, width))  # an exact area average: the grid is a multiple of the latent grid
    return m.expand(batch, 1, height, width).contiguous()


def describe_soft_mask(latent_mask) -> str:
    """The node's fact for a soft mask on the latent grid [B,1,h,w] (no value read on the meta device)."""
    h, w = latent_mask.shape[-2:]
    rule = "a position is free from the step where the schedule's position (1 -> 0) falls to its value"
    if latent_mask.device.type == "meta":
        return f"differential diffusion: soft mask on the {w}x{h} latent grid (meta: shapes only); {rule}"
    m = latent_mask.float()
    return (f"differential diffusion: soft mask {float((m > 0).float().mean()):.0%} > 0, "
            f"{float((m >= 1).float().mean()):.0%} = 1, mean {float(m.mean()):.2f} on the {w}x{h} latent grid; {rule}")


def flux_sigma_min(mu: float, timesteps: int = 10000) -> float:
    """ComfyUI's ModelSamplingFlux(shift=mu).sigma_min: the shifted sigma at its smallest training time 1/10000."""
    return math.exp(mu) / (math.exp(mu) + (timesteps - 1.0))


def static_shift_sigma_min(shift: float, num_train_timesteps: int = 1000) -> float:
    """ComfyUI's ModelSamplingDiscreteFlow(shift).sigma_min (SD3): the shifted sigma at training time 1/1000."""
    t = 1.0 / num_train_timesteps
    return shift * t / (1.0 + (shift - 1.0) * t)


def differential_range(sigmas, sigma_min: float) -> tuple[float, float]:
    """(sigma_first, sigma_end) of this run's sigmas [steps + 1] (CPU), as ComfyUI's node takes them: the first sigma,
    and the larger of the model sampling's sigma_min and the last sigma. A run that starts at or below sigma_min
    (a tiny denoise) is normalised to its last sigma instead, so the first threshold is still 1."""
    first, last = float(sigmas[0]), float(sigmas[-1])
    end = max(sigma_min, last)
    return first, (end if first > end else last)


def differential_threshold(sigma: float, sigma_first: float, sigma_last: float) -> float:
    """The schedule's position at `sigma`: 1 at sigma_first, 0 at sigma_last (python floats: exactly 1 at the
    first step)."""
    return (float(sigma) - sigma_last) / (sigma_first - sigma_last)


def differential_mask(soft_mask_latent, sigma: float, sigma_first: float, sigma_last: float):
    """The positions free at `sigma` (bool, the soft mask's shape) under differential diffusion, as ComfyUI's
    DifferentialDiffusion node (comfy_extras/nodes_differential_diffusion.py, `forward`, strength 1) inside its
    KSampler's inpaint blend (comfy/samplers.py KSamplerX0Inpaint). A soft value v in [0, 1] (1 = repaint fully,
    0 = keep) is compared at each step i with the schedule's position:

        threshold_i = (sigma_i - sigma_last) / (sigma_first - sigma_last)
        free_i      = v >= threshold_i          (free: the model's result; else the source)

    sigma_first = the first sigma of this run (after denoise / strength truncate the schedule); sigma_last =
    max(sigma_min, the run's last sigma (0)) with sigma_min the model sampling's smallest training sigma
    (`differential_range`). ComfyUI's ts_from / ts_to / current_ts are timestep(sigma), linear in sigma for flow
    models (SD3: sigma * 1000, FLUX: sigma), so the ratio is the same in sigma units. The first step's threshold is
    exactly 1 (only v = 1 is free), it falls with the schedule and stays above 0 at the last step: v = 1 is free all
    the way, v = 0 is always the source, v = 0.5 keeps the source's structure for the first half of the schedule.

    After the Euler step i (sigma_i -> sigma_{i+1}), `blend_with_source`:

        x_{i+1} = where(free_i, x_{i+1}, sigma_{i+1} * noise + (1 - sigma_{i+1}) * source)   (the source at sigma 0)

    with the run's initial noise. ComfyUI blends the model's input at step i (kept positions -> the source noised to
    sigma_i) and its x0 prediction (kept -> the source), so its Euler step lands the kept positions on the source
    noised to sigma_{i+1}: the same as the blend above, because the free set only grows from step to step and the
    starting point is the source noised to sigma_first (pure noise at denoise 1), where only v = 1 is free. The blend
    is a selection (torch.where), not arithmetic: v = 1 everywhere gives bitwise the result without a soft mask.
    ComfyUI's `strength` < 1 (the binary mask blended with the soft one) is not offered."""
    return soft_mask_latent >= differential_threshold(sigma, sigma_first, sigma_last)


def blend_with_source(x, source, noise, free, sigma_next):
    """After a step to `sigma_next`: the free positions keep the model's result, the others become the source
    noised to sigma_next with the run's initial noise (the clean source at sigma 0). `free` broadcasts against x;
    `sigma_next` is a 0-dim tensor on x's device or a float."""
    import torch

    if isinstance(sigma_next, (int, float)) and sigma_next == 0.0:
        kept = source
    else:
        kept = sigma_next * noise + (1.0 - sigma_next) * source
    return torch.where(free, x, kept.to(x.dtype))
