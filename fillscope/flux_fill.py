"""FLUX.1 Fill [dev]: fill-condition assembly and the flow-matching sampler.

Follows diffusers' FluxFillPipeline step for step (same packing, schedule, noise draw, guidance embedding and
Euler update), with these deliberate differences, each one an option:
- the masked image is encoded by the latent distribution's mean (deterministic), not a sample;
- the source image is encoded only when denoise < 1 (diffusers encodes it on every call);
- an empty mask skips sampling and returns the source unchanged;
- sizes that are not multiples of 16 are padded or cropped (masks.py) instead of resized.

Shapes below are for 1024x1024, batch 1 (N = 4096 tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import vae as vae_ops
from .errors import FillScopeInputError
from .latents import decode_to_image  # noqa: F401  (re-exported: the FLUX path end to end)
from .latents import (
    ConditionSource,
    SampledLatent,
    observer_or_noop,
    require_finite_first_step,
    require_finite_result,
    starting_point,
)
from .masks import PreparedInput
from .sampling import check_steps_and_denoise, euler_step, flux_dynamic_mu, flux_sigmas
from .specs import flux_image_ids, flux_scheduler_config, pack_latents, unpack_latents
from .text import FluxTextCondition
from .weights import Component, load_component


def load_flux_fill_transformer(source, *, dtype="bf16", device="auto", seed=0) -> Component:
    return load_component("flux_fill_transformer", source, dtype=dtype, device=device, seed=seed, input_name="transformer source")


def pack_mask(mask, vae_scale: int = 8):
    """Pixel mask [B,1,H,W] -> [B, N, 256]: each 8x8 pixel block becomes 64 channels on the latent grid
    [B,64,H/8,W/8], then 2x2 latent patches are packed like the latents (64*4 = 256)."""
    b, _, h, w = mask.shape
    lh, lw = h // vae_scale, w // vae_scale
    m = mask[:, 0].reshape(b, lh, vae_scale, lw, vae_scale).permute(0, 2, 4, 1, 3)
    return pack_latents(m.reshape(b, vae_scale * vae_scale, lh, lw))


@dataclass(kw_only=True)
class FillCondition(ConditionSource):
    """The Fill model's extra input: packed masked-image latents ++ packed mask."""

    condition: object  # [B, N, 320] = masked latents [B,N,64] ++ mask [B,N,256]
    masked_latents: object  # [B, 16, H/8, W/8] scaled latents of the masked image
    latent_height: int
    latent_width: int

    @property
    def tokens(self) -> int:
        return self.condition.shape[1]


def build_fill_condition(vae: Component, prepared: PreparedInput, observe=None) -> FillCondition:
    """`observe(name, tensor)` sees every boundary tensor (the shape records use it)."""
    import torch

    observe = observer_or_noop(observe)

    if vae.config.get("latent_channels", 16) != 16:
        raise FillScopeInputError("vae", "FLUX Fill needs the 16-channel FLUX VAE.", "connect the FLUX VAE loader.")
    # masked pixels -> 0 (mid grey in [-1,1]), exactly diffusers' init_image * (1 - mask)
    masked = prepared.image * (1.0 - prepared.mask)  # [B,3,H,W]
    masked_latents = vae_ops.encode(vae, masked)  # [B,16,H/8,W/8]
    mask = prepared.mask.to(device=masked_latents.device, dtype=masked_latents.dtype)
    packed_latents = pack_latents(masked_latents)  # [B,N,64]
    packed_mask = pack_mask(mask)  # [B,N,256]
    condition = torch.cat([packed_latents, packed_mask], dim=-1)  # [B,N,320]
    observe("masked_image", masked)
    observe("masked_image_latents", masked_latents)
    observe("masked_image_latents.packed", packed_latents)
    observe("mask.packed", packed_mask)
    observe("fill_condition", condition)
    _, _, lh, lw = masked_latents.shape
    return FillCondition(prepared=prepared, vae=vae, condition=condition, masked_latents=masked_latents,
                         latent_height=lh, latent_width=lw)


def sample_flux_fill(
    transformer: Component,
    text: FluxTextCondition,
    cond: FillCondition,
    *,
    steps: int = 28,
    guidance: float = 30.0,
    seed: int = 0,
    denoise: float = 1.0,
    callback=None,
    noise=None,
    observe=None,
) -> SampledLatent:
    """Flow-matching Euler over FLUX Fill. `callback(step, total)` runs after every step (ComfyUI's progress
    bar raises from it on interrupt). `noise` overrides the seeded initial noise [B,16,h,w]."""
    import torch

    observe = observer_or_noop(observe)
    check_steps_and_denoise(steps, denoise)
    model = transformer.model
    cfg = transformer.config
    if cfg.get("in_channels") != 64 + cond.condition.shape[-1]:
        raise FillScopeInputError(
            "transformer",
            f"takes {cfg.get('in_channels')} input channels but noisy 64 + condition {cond.condition.shape[-1]} "
            f"= {64 + cond.condition.shape[-1]}.",
            "connect the FLUX.1 Fill transformer.",
        )
    device, dtype = transformer.device, model.dtype
    b = cond.condition.shape[0]
    lh, lw = cond.latent_height, cond.latent_width
    n_tokens = cond.tokens
    if text.t5_hidden.shape[0] not in (1, b):
        raise FillScopeInputError("text", f"batch {text.t5_hidden.shape[0]} for {b} images.", "encode one prompt.")

    if cond.is_empty:
        return SampledLatent(cond.masked_latents, cond.prepared, "flux", unchanged=True, info={"skipped": "empty mask"})

    sched = flux_scheduler_config()
    mu = flux_dynamic_mu(
        n_tokens, sched["base_image_seq_len"], sched["max_image_seq_len"], sched["base_shift"], sched["max_shift"]
    )
    sigmas, noise, latents = starting_point(cond, flux_sigmas(steps, mu), steps, denoise, (b, 16, lh, lw), seed,
                                            device, dtype, noise)  # noise, latents: [B,16,h,w]
    run_steps = len(sigmas) - 1
    x = pack_latents(latents)  # [B,N,64]

    condition = cond.condition.to(device=device, dtype=dtype)  # [B,N,320]
    hidden_text = text.t5_hidden.to(device=device, dtype=dtype).expand(b, -1, -1)  # [B,512,4096]
    pooled = text.pooled.to(device=device, dtype=dtype).expand(b, -1)  # [B,768]
    txt_ids = text.txt_ids.to(device=device, dtype=dtype)  # [512,3]
    img_ids = flux_image_ids(lh, lw, device=device, dtype=dtype)  # [N,3]
    guidance_vec = torch.full([b], guidance, device=device, dtype=torch.float32) if cfg.get("guidance_embeds") else None

    observe("initial_noise", noise)
    observe("noisy_latents.packed", x)
    observe("txt_ids", txt_ids)
    observe("img_ids", img_ids)
    on_device = sigmas.to(device)  # once: no host<->device copy per step
    with torch.inference_mode():
        for i in range(run_steps):
            t = on_device[i] * 1000.0
            timestep = t.expand(b).to(dtype)
            model_input = torch.cat([x, condition], dim=2)  # [B,N,384]
            velocity = model(
                hidden_states=model_input,
                timestep=timestep / 1000,
                guidance=guidance_vec,
                pooled_projections=pooled,
                encoder_hidden_states=hidden_text,
                txt_ids=txt_ids,
                img_ids=img_ids,
                return_dict=False,
            )[0]  # [B,N,64]
            if i == 0:
                observe("transformer.input", model_input)
                observe("transformer.output", velocity)
                require_finite_first_step("transformer", velocity, (
                    ("flux_text", [hidden_text, pooled], "the T5 / CLIP-L text encoder"),
                    ("condition", condition, "the VAE (masked-image latents)"),
                    ("condition", x, "the VAE (source latents, denoise < 1)"),
                ))
            x = euler_step(x, velocity, on_device[i], on_device[i + 1])
            if callback is not None:
                callback(i + 1, run_steps)
    require_finite_result("transformer", x)
    out = unpack_latents(x, lh, lw)  # [B,16,h,w]
    observe("latent.unpacked", out)
    info = {"steps_run": run_steps, "mu": mu, "sigma_start": float(sigmas[0]), "tokens": n_tokens}
    return SampledLatent(out, cond.prepared, "flux", info=info)
