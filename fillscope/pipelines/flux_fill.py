"""FLUX.1 Fill [dev]: the whole pipeline, one named function a stage.

    1. encode_prompt         CLIP-L pooled [B,768] (modulation) + T5 sequence [B,512,4096] (joint attention)
    2. build_fill_condition  masked image -> VAE mean -> packed [B,N,64] ++ packed 8x8-block mask [B,N,256]
    3. sample_flux_fill      Euler over the transformer: noisy [B,N,64] ++ condition [B,N,320] = 384 channels
    4. decode_to_image       [B,16,H/8,W/8] -> IMAGE [B,H,W,3] at the input's size

The widths are the published models' (VAE: 16 latent channels at 1/8; 2x2 token patches); the code takes them
from the loaded VAE's and transformer's configs: C latent channels at 1/s give noisy [B,N,4C] ++ condition
[B,N,4C + 4s^2] and a transformer with in_channels 8C + 4s^2, out_channels 4C.

`run` calls them in this order; each node calls one of them; the trace driver runs `run` under its tracers.

Follows diffusers' FluxFillPipeline step for step (same packing, schedule, noise draw, guidance embedding and
Euler update), with these deliberate differences, each one an option:
- the masked image is encoded by the latent distribution's mean (deterministic), not a sample;
- the source image is encoded only when denoise < 1 (diffusers encodes it on every call);
- an empty mask skips sampling and returns the source unchanged;
- sizes that are not multiples of 16 are padded or cropped (masks.py) instead of resized;
- `soft_mask` (optional, none in diffusers): differential diffusion as ComfyUI's node does it (sampling.py): after
  each Euler step the positions whose soft value is below the schedule's position are set back to the source
  noised to the next sigma.

Shapes below are for 1024x1024, batch 1 (N = 4096 tokens), with the published widths.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import speed
from .. import text as text_ops
from .. import vae as vae_ops
from ..condition import ConditionSource
from ..decode import SampledLatent, decode_to_image
from ..errors import FillScopeInputError
from ..masks import PreparedInput, require_grid
from ..observe import observe_step, observer_or_noop, stage
from ..parallel.context import check_parallel, context_parallel, rank_shapes
from ..sampling import (
    ExternalDenoiser,
    blend_with_source,
    check_external_options,
    tell_schedule,
    check_finite_settings,
    check_steps_and_denoise,
    describe_soft_mask,
    differential_mask,
    differential_range,
    euler_step,
    flux_dynamic_mu,
    flux_sigma_min,
    flux_sigmas,
    require_finite_first_step,
    require_finite_result,
    soft_mask_to_latent,
    starting_point,
)
from ..specs import (
    FLUX_PATCH,
    flux_image_ids,
    flux_scheduler_config,
    pack_latents,
    unpack_latents,
)
from ..text import FluxTextCondition
from ..meta_cache import cached_on_meta, first_argument, stack_transformer
from ..weights import Component, load_component

FAMILY = "flux-fill"
TITLE = "FLUX.1 Fill [dev]"
COMPONENTS = ("clip_l", "t5", "transformer", "vae")  # the stack `run` takes, by these names
TAKES_NEGATIVE_PROMPT = False
T5_MAX_LENGTH = 512


def load_flux_fill_transformer(source, *, dtype="bf16", device="auto", seed=0) -> Component:
    return load_component("flux_fill_transformer", source, dtype=dtype, device=device, seed=seed, input_name="transformer source")


def load_stack(source, *, tokenizer_folders, dtype="bf16", device="auto", seed=0) -> dict[str, Component]:
    """Every component from one weight source (meta, placeholder or a diffusers repository folder).
    `tokenizer_folders` = (CLIP, T5) tokenizer folders for weights that carry none."""
    clip_dir, t5_dir = tokenizer_folders
    kw = dict(dtype=dtype, device=device, seed=seed)
    return {
        "clip_l": text_ops.load_clip_l(source, tokenizer_fallback=clip_dir, **kw),
        "t5": text_ops.load_t5(source, tokenizer_fallback=t5_dir, **kw),
        "transformer": load_flux_fill_transformer(source, **kw),
        "vae": vae_ops.load_vae(source, kind="flux", **kw),
    }


def encode_prompt(clip_l: Component, t5: Component, prompt: str, *, max_length: int = T5_MAX_LENGTH,
                  observe=None) -> FluxTextCondition:
    """Step 1. CLIP-L's pooled output (no projection: FLUX never uses it) and T5's last hidden state. Several
    prompts (text.split_prompts: separated by lines ---) are encoded one by one and stacked along the batch
    [n,...]: prompt k for image k of the batch (crop k of Crop For Inpaint with regions)."""
    observe = observer_or_noop(observe)
    prompts = text_ops.split_prompts(prompt)
    clip = text_ops.concat_batch([text_ops.encode_clip(clip_l, p, project=False) for p in prompts])
    t5_out = text_ops.concat_batch([text_ops.encode_t5(t5, p, max_length) for p in prompts])
    observe("clip_l.input_ids", clip.input_ids)  # [B,77]
    observe("t5.input_ids", t5_out.input_ids)  # [B,512]
    observe("clip_l.pooled", clip.pooled)  # [B,768]
    observe("t5.hidden", t5_out.hidden)  # [B,512,4096]
    return text_ops.flux_text_condition(t5_out, clip)


def pack_mask(mask, vae_scale: int):
    """Pixel mask [B,1,H,W] -> [B, N, 4s^2] (s = the VAE's downscale; published s = 8: [B,N,256]): each s x s pixel
    block becomes s^2 channels on the latent grid [B,s^2,H/s,W/s], then 2x2 latent patches are packed like the
    latents (64*4 = 256), as diffusers' FluxFillPipeline.prepare_mask_latents with its vae_scale_factor."""
    b, _, h, w = mask.shape
    lh, lw = h // vae_scale, w // vae_scale
    m = mask[:, 0].reshape(b, lh, vae_scale, lw, vae_scale).permute(0, 2, 4, 1, 3)
    return pack_latents(m.reshape(b, vae_scale * vae_scale, lh, lw))


def check_text(transformer: Component, text: FluxTextCondition, name: str = "flux_text") -> None:
    """The text condition against the transformer's config, before anything is placed or sampled: a T5 sequence
    [B, L, joint_attention_dim] (any length L) and a pooled vector [B, pooled_projection_dim] of the same batch."""
    cfg = transformer.config
    width, pooled_width = cfg.get("joint_attention_dim"), cfg.get("pooled_projection_dim")
    hidden, pooled = text.t5_hidden, text.pooled
    want = f"a T5 sequence [B, L, {width}] and a CLIP-L pooled vector [B, {pooled_width}]"
    fix = "encode the prompt with FLUX's own text encoders: T5-XXL for the sequence, CLIP-L for the pooled vector."
    if getattr(hidden, "ndim", 0) != 3 or getattr(pooled, "ndim", 0) != 2:
        raise FillScopeInputError(name, f"holds tensors of shape {list(getattr(hidden, 'shape', []))} and "
                                        f"{list(getattr(pooled, 'shape', []))}; FLUX reads {want}.", fix)
    if (hidden.shape[-1], pooled.shape[-1]) != (width, pooled_width):
        what = (" (the widths of an SD3 condition: its pooled vector is CLIP-L ++ CLIP-G)"
                if pooled.shape[-1] == 2048 and hidden.shape[-1] == 4096 else "")
        raise FillScopeInputError(
            name, f"is {hidden.shape[-1]} channels per token with a pooled vector of {pooled.shape[-1]}{what}, but this "
                  f"FLUX Fill transformer reads {want}.", fix)
    if pooled.shape[0] != hidden.shape[0]:
        raise FillScopeInputError(name, f"the T5 sequence has batch {hidden.shape[0]} but the pooled vector "
                                        f"{pooled.shape[0]}.", "encode one prompt for both.")


@dataclass(kw_only=True)
class FillCondition(ConditionSource):
    """The Fill model's extra input: packed masked-image latents ++ packed mask."""

    condition: object  # [B, N, 320] = masked latents [B,N,64] ++ mask [B,N,256] (published widths)
    masked_latents: object  # [B, C, H/s, W/s] (published [B,16,H/8,W/8]) scaled latents of the masked image
    latent_height: int
    latent_width: int

    @property
    def tokens(self) -> int:
        return self.condition.shape[1]

    @property
    def latent_channels(self) -> int:
        """C: the VAE's latent channels (16 for the FLUX VAE)."""
        return self.masked_latents.shape[1]


def build_fill_condition(vae: Component, prepared: PreparedInput, observe=None, *, encode=None) -> FillCondition:
    """Step 2. `observe(name, tensor)` sees every boundary tensor (the shape records use it). `encode(vae, pixels)`:
    the VAE encode of the masked image (None: vae.encode, one whole-image call; the tiled modes give
    vae_tiles.encode_tiled, same shapes)."""
    import torch

    observe = observer_or_noop(observe)
    if vae.kind != "flux_vae":
        # the SD3 VAE also has 16 channels: without this check the mistake would surface only at decode (the widths
        # are checked against the transformer's in sample_flux_fill)
        raise FillScopeInputError("vae", "FLUX Fill needs the 16-channel FLUX VAE (scale 0.3611, shift 0.1159); "
                                  f"this is the {vae.kind.replace('_vae', '').upper()} VAE.",
                                  "set the VAE loader's kind to flux.")
    vae_scale = vae_ops.latent_format(vae).downscale
    require_grid(prepared, vae_scale * FLUX_PATCH, f"this VAE ({vae_ops.describe_widths(vae)}) with 2x2 patches")
    # masked pixels -> 0 (mid grey in [-1,1]), exactly diffusers' init_image * (1 - mask)
    masked = prepared.image * (1.0 - prepared.mask)  # [B,3,H,W]
    masked_latents = (encode or vae_ops.encode)(vae, masked)  # [B,16,H/8,W/8]
    mask = prepared.mask.to(device=masked_latents.device, dtype=masked_latents.dtype)
    packed_latents = pack_latents(masked_latents)  # [B,N,64]
    packed_mask = pack_mask(mask, vae_scale)  # [B,N,256]
    condition = torch.cat([packed_latents, packed_mask], dim=-1)  # [B,N,320]
    observe("masked_image", masked)
    observe("masked_image_latents", masked_latents)
    observe("masked_image_latents.packed", packed_latents)
    observe("mask.packed", packed_mask)
    observe("fill_condition", condition)
    _, _, lh, lw = masked_latents.shape
    return FillCondition(prepared=prepared, vae=vae, condition=condition, masked_latents=masked_latents,
                         latent_height=lh, latent_width=lw)


def check_widths(transformer: Component, cond: FillCondition) -> None:
    """The transformer's widths against the condition's VAE's, before anything is placed or sampled: in_channels =
    noisy 4C + condition (masked latents 4C + mask 4s^2), out_channels = 4C, for C latent channels at 1/s (published:
    64 + (64 + 256) = 384 in, 64 out)."""
    noisy, width = cond.latent_channels * FLUX_PATCH * FLUX_PATCH, cond.condition.shape[-1]
    gives = f"noisy {noisy} + condition {width} (masked latents {noisy} + mask {width - noisy}) = {noisy + width}"
    vae_ops.check_denoiser_widths(transformer, cond.vae, noisy + width, gives, noisy, (
        "load the FLUX.1 Fill transformer and the VAE it was trained with (published: the 16-channel FLUX VAE and "
        "in_channels 64 + 320 = 384, out_channels 64)."))


def soft_mask_latent(cond: FillCondition, soft_mask):
    """A soft mask (ComfyUI MASK at the condition's input or grid size) on the latent grid [B,1,H/8,W/8], checked
    (sampling.soft_mask_to_latent): what sample_flux_fill blends with; the node runs it before placing the model."""
    return soft_mask_to_latent(soft_mask, cond.prepared.geometry, cond.condition.shape[0], cond.latent_height,
                               cond.latent_width)


def transformer_velocity(model, tokens, t, guidance, text, txt_ids, img_ids):
    """One call of FillScope's own FLUX Fill transformer (diffusers' FluxTransformer2DModel): `tokens` [B,N,384]
    (noisy 64 ++ condition 320), `t` [B] the sigma in [0, 1], `guidance` [B] or None (a model without a guidance
    embedding), `text` = (T5 sequence [B,L,D], CLIP-L pooled [B,P]), `txt_ids` [L,3] and `img_ids` [N,3] the RoPE
    positions of the text and image tokens -> velocity [B,N,64]. sample_flux_fill's step and tiled sampling's
    shared windows (fillscope/tiled/shared_flux_fill.py: each window with its own, window-local img_ids) both call it."""
    hidden_text, pooled = text
    return model(hidden_states=tokens, timestep=t, guidance=guidance, pooled_projections=pooled,
                 encoder_hidden_states=hidden_text, txt_ids=txt_ids, img_ids=img_ids, return_dict=False)[0]


@cached_on_meta(first_argument)  # fillscope/meta_cache.py: faster on meta weights, same shapes
def sample_flux_fill(
    transformer: Component | ExternalDenoiser,
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
    soft_mask=None,
    parallel: int = 1,
    step_cache: str = "off",
    cache_threshold: float | None = None,
    schedule_tokens: int | None = None,
) -> SampledLatent:
    """Step 3. Flow-matching Euler over FLUX Fill. `callback(step, total)` runs after every step (ComfyUI's progress
    bar raises from it on interrupt). `noise` overrides the seeded initial noise [B,C,h,w] (C = 16 for the FLUX
    VAE). `schedule_tokens`: the token count the resolution shift mu is computed from (default: this latent's); tiled
    mode shared gives its largest window's, the image size the transformer sees.

    `soft_mask` (ComfyUI MASK, 1 = repaint; None = plain FLUX Fill, the model's mask condition alone): differential
    diffusion (sampling.py has the formula). The mask goes to the latent grid [B,1,H/8,W/8] (an area average per
    8x8 px); the blend runs per latent position in the packed token layout: the mask is expanded over the C (16)
    channels and packed like the latents, so each of a token's 64 values follows its own latent position, which is
    the same as blending the unpacked [B,16,h,w] latents. The model still gets the condition's (hard) mask.

    `parallel` > 1: this call is one of `parallel` ranks of a process group, each called with the same inputs;
    the transformer runs with Ulysses context parallelism (fillscope.parallel.context) and every rank returns the
    same latents. 1 (the default): one process, as always.

    `step_cache` (first-block / mag / taylorseer; "off" by default): a diffusers step cache for this run
    (fillscope.speed), `cache_threshold` its threshold; what it skipped is in the info.

    `transformer` may be an ExternalDenoiser (sampling.py: ComfyUI's own MODEL, nodes/native_model.py): it is called
    where the diffusers transformer would be, with the same tokens, t, guidance and text; everything else is as
    above (no step cache, parallel 1)."""
    import torch

    observe = observer_or_noop(observe)
    speed.check_step_cache(step_cache, cache_threshold)
    speed.check_with_parallel(step_cache, parallel)
    check_finite_settings(("guidance", guidance, "a finite number (FLUX.1 Fill [dev] is tuned for 30)"))
    check_steps_and_denoise(steps, denoise)
    external = isinstance(transformer, ExternalDenoiser)
    if external:
        check_external_options(transformer.input_name, step_cache, parallel)
    model = None if external else transformer.model
    cfg = transformer.config
    check_widths(transformer, cond)
    check_text(transformer, text)
    device, dtype = transformer.device, (transformer.dtype if external else model.dtype)
    b = cond.condition.shape[0]
    lh, lw = cond.latent_height, cond.latent_width
    n_tokens = cond.tokens
    if text.t5_hidden.shape[0] not in (1, b):
        raise FillScopeInputError("text", f"batch {text.t5_hidden.shape[0]} for {b} images.",
                                  "give one prompt, or one per region/image separated by lines ---.")
    if parallel != 1:
        check_parallel(parallel, cfg, n_tokens, text.t5_hidden.shape[1])

    soft = soft_mask_latent(cond, soft_mask) if soft_mask is not None else None  # [B,1,h,w], checked before the skip
    if cond.is_empty:
        return SampledLatent(cond.masked_latents, cond.prepared, "flux", unchanged=True, info={"skipped": "empty mask"})

    sched = flux_scheduler_config()
    # tiled shared mode: the resolution shift of the windows the transformer sees, not of the whole grid (at
    # 98,304 tokens, 6144x4096, mu ~17 would keep every sigma but the last at 1)
    shift_tokens = n_tokens if schedule_tokens is None else int(schedule_tokens)
    mu = flux_dynamic_mu(
        shift_tokens, sched["base_image_seq_len"], sched["max_image_seq_len"], sched["base_shift"], sched["max_shift"]
    )
    c = cond.latent_channels  # = the transformer's out_channels / 4 (check_widths)
    sigmas, noise, latents = starting_point(cond, flux_sigmas(steps, mu), steps, denoise, (b, c, lh, lw), seed,
                                            device, dtype, noise)  # noise, latents: [B,16,h,w]
    run_steps = len(sigmas) - 1
    x = pack_latents(latents)  # [B,N,64]
    if soft is not None:
        step_sigmas = sigmas.tolist()
        sigma_first, sigma_end = differential_range(sigmas, flux_sigma_min(mu))
        soft_facts = describe_soft_mask(soft)
        observe("soft_mask.latent", soft)  # [B,1,h,w]
        soft_packed = pack_latents(soft.expand(b, c, lh, lw).contiguous()).to(device)  # [B,N,64], float32
        source_packed = pack_latents(cond.source_latents().to(device=device, dtype=dtype))  # [B,N,64]
        noise_packed = pack_latents(noise)  # [B,N,64]

    condition = cond.condition.to(device=device, dtype=dtype)  # [B,N,320]
    hidden_text = text.t5_hidden.to(device=device, dtype=dtype).expand(b, -1, -1)  # [B,512,4096] (any length)
    pooled = text.pooled.to(device=device, dtype=dtype).expand(b, -1)  # [B,768]
    txt_ids = text.txt_ids.to(device=device, dtype=dtype)  # [512,3]
    img_ids = flux_image_ids(lh, lw, device=device, dtype=dtype)  # [N,3]
    guidance_vec = torch.full([b], guidance, device=device, dtype=torch.float32) if cfg.get("guidance_embeds") else None

    observe("initial_noise", noise)
    observe("noisy_latents.packed", x)
    observe("txt_ids", txt_ids)
    observe("img_ids", img_ids)
    on_device = sigmas.to(device)  # once: no host<->device copy per step
    tell_schedule(transformer, on_device)
    with (torch.inference_mode(), context_parallel(model, parallel),  # parallel 1: the model as it is
          speed.step_cache(model, step_cache, run_steps, cache_threshold) as cache):  # off: None, nothing on
        for i in range(run_steps):
            t = on_device[i] * 1000.0
            timestep = t.expand(b).to(dtype)
            model_input = torch.cat([x, condition], dim=2)  # [B,N,384]
            if external:
                velocity = transformer.call(model_input, timestep / 1000, guidance_vec, (hidden_text, pooled), (lh, lw))
            else:
                with speed.cache_context(model, cache, "cond"):
                    velocity = transformer_velocity(model, model_input, timestep / 1000, guidance_vec,
                                                    (hidden_text, pooled), txt_ids, img_ids)  # [B,N,64]
            if i == 0:
                observe("transformer.input", model_input)
                observe("transformer.output", velocity)
                require_finite_first_step("transformer", velocity, (
                    ("flux_text", [hidden_text, pooled], "the T5 / CLIP-L text encoder"),
                    ("condition", condition, "the VAE (masked-image latents)"),
                    ("condition", x, "the VAE (source latents, denoise < 1)"),
                ), component=None if external else transformer)
            x = euler_step(x, velocity, on_device[i], on_device[i + 1])
            if soft is not None:
                free = differential_mask(soft_packed, step_sigmas[i], sigma_first, sigma_end)
                x = blend_with_source(x, source_packed, noise_packed, free, step_sigmas[i + 1])
            observe_step(observe, i, velocity, x)
            if callback is not None:
                callback(i + 1, run_steps)
    require_finite_result("transformer", x)
    out = unpack_latents(x, lh, lw)  # [B,16,h,w]
    observe("latent.unpacked", out)
    info = {"steps_run": run_steps, "mu": mu, "sigma_start": float(sigmas[0]), "sigma_last_step": float(sigmas[-2]),
            "tokens": n_tokens, **shift_range_facts(shift_tokens, sched)}
    if soft is not None:
        info["differential_diffusion"] = soft_facts
    if parallel != 1:
        info["context_parallel"] = rank_shapes(cfg, parallel, n_tokens, hidden_text.shape[1], b)
    if cache is not None:
        info.update(cache.facts())
    return SampledLatent(out, cond.prepared, "flux", info=info)


def shift_range_facts(n_tokens: int, sched: dict | None = None) -> dict:
    """Whether the resolution shift mu is interpolated or extrapolated: FLUX.1's scheduler calibrates mu linearly
    between base_image_seq_len (256 tokens, 256x256 px) and max_image_seq_len (4096 tokens, 1024x1024 px); outside
    that range the same line is extended (as diffusers' calculate_shift does). There is no hard size limit: FLUX's
    RoPE positions are computed for any grid (diffusers' FluxPosEmbed has no table to outgrow)."""
    sched = flux_scheduler_config() if sched is None else sched
    lo, hi = int(sched["base_image_seq_len"]), int(sched["max_image_seq_len"])
    return {"mu_calibrated_tokens": f"{lo}-{hi}", "mu_extrapolated": not lo <= n_tokens <= hi}


@dataclass
class FluxFillResult:
    """Every stage's output of one `run`."""

    text: FluxTextCondition
    condition: FillCondition
    latent: SampledLatent
    image: object  # IMAGE [B,H,W,3] at the input's size


@cached_on_meta(stack_transformer)  # fillscope/meta_cache.py: faster on meta weights, same shapes
def run(stack: dict[str, Component], prompt: str, prepared: PreparedInput, *, steps: int = 28,
        guidance: float = 30.0, seed: int = 0, denoise: float = 1.0, callback=None, noise=None,
        observe=None, timings: dict | None = None, place=None, soft_mask=None, parallel: int = 1,
        step_cache: str = "off", cache_threshold: float | None = None) -> FluxFillResult:
    """The whole pipeline on a stack named as COMPONENTS (steps 1-4 above, in order). `timings`, when a dict,
    receives each step's wall time under its function's name; `place(components)`, when given, is a context
    manager around each step that puts that step's components where they run (placement.placer). `soft_mask`:
    differential diffusion in step 3 (sample_flux_fill); `parallel`: this call is one of that many ranks of a
    process group (sample_flux_fill)."""
    clip_l, t5, transformer, vae = (stack[name] for name in COMPONENTS)
    with stage("encode_prompt", [clip_l, t5], timings=timings, place=place):
        flux_text = encode_prompt(clip_l, t5, prompt, observe=observe)  # 1
    with stage("build_fill_condition", [vae], timings=timings, place=place):
        condition = build_fill_condition(vae, prepared, observe=observe)  # 2
    with stage("sample_flux_fill", [transformer], timings=timings, place=place):
        latent = sample_flux_fill(transformer, flux_text, condition, steps=steps, guidance=guidance, seed=seed,
                                  denoise=denoise, callback=callback, noise=noise, observe=observe,
                                  soft_mask=soft_mask, parallel=parallel, step_cache=step_cache,
                                  cache_threshold=cache_threshold)  # 3
    with stage("decode_to_image", [vae], timings=timings, place=place):
        image = decode_to_image(vae, latent, observe=observe)  # 4
    return FluxFillResult(flux_text, condition, latent, image)


def stages(stack: dict[str, Component], prompt: str, prepared: PreparedInput, done: FluxFillResult,
           *, seed: int = 0) -> list:
    """Each stage alone, as (label, the components it runs, a callable that re-runs it from `done`'s inputs):
    what the per-stage memory figures and the denoiser FLOP count measure."""
    return [
        ("text encoders", ["clip_l", "t5"], lambda: encode_prompt(stack["clip_l"], stack["t5"], prompt)),
        ("VAE encode", ["vae"], lambda: build_fill_condition(stack["vae"], prepared)),
        ("denoiser step", ["transformer"],
         lambda: sample_flux_fill(stack["transformer"], done.text, done.condition, steps=1, seed=seed)),
        ("VAE decode", ["vae"], lambda: decode_to_image(stack["vae"], done.latent)),
    ]


def traced_modules(stack: dict[str, Component]) -> dict:
    """The modules the tracers hook, by component name: CLIP-L's text transformer only (FLUX runs it without
    the projection)."""
    models = {name: comp.model for name, comp in stack.items()}
    models["clip_l"] = text_ops.clip_text_model(stack["clip_l"].model)
    return models


def parameters_not_run(stack: dict[str, Component]) -> dict[str, int]:
    """Instantiated parameters this pipeline never computes with."""
    projection = getattr(stack["clip_l"].model, "text_projection", None)
    return {"clip_l.text_projection": projection.weight.numel() if projection is not None else 0}
