"""SD3 / SD3.5 + the alimama-creative SD3 inpainting ControlNet: the whole pipeline, one named function a stage.

    1. encode_prompt            CLIP-L ++ CLIP-G penultimate (zero-padded to 4096) cat T5 -> context [B,333,4096],
                                L ++ G text_embeds -> pooled [B,2048]; once for the prompt, once for the negative
    2. build_inpaint_condition  repaint pixels -> -1, VAE mean -> [B,16,H/8,W/8] ++ keep mask -> [B,17,H/8,W/8]
    3. sample_sd3_controlnet_inpaint  Euler with CFG; each step the ControlNet's 23 residuals join the MMDiT blocks
    4. decode_to_image          [B,16,H/8,W/8] -> IMAGE [B,H,W,3] at the input's size

`run` calls them in this order; each node calls one of them; the trace driver runs `run` under its tracers.

Follows diffusers' StableDiffusion3ControlNetInpaintingPipeline step for step (control image, CFG batching,
zero pooled input to the ControlNet, control start/end rule, schedule, Euler update), with these deliberate
differences, each one an option:
- residual mapping: ControlNet residual i is added after MMDiT block i (i = 0..22), as the model was trained
  (diffusers 0.29/0.30 and ComfyUI); diffusers >= 0.32 maps block i <- residual int(i * 23 / 24), which adds
  residual 0 twice and never adds residual 22 (`residual_mapping="diffusers"` reproduces it);
- the masked control image is encoded by the latent distribution's mean (diffusers samples, unseeded);
- denoise < 1 starts from the noised source image (diffusers' pipeline has no init image: its issue 10559);
- an empty mask skips sampling and returns the source unchanged;
- `soft_mask` (optional, none in diffusers): differential diffusion as ComfyUI's node does it (sampling.py): after
  each Euler step the latent positions whose soft value is below the schedule's position are set back to the
  source noised to the next sigma.

Shapes below are for 1024x1024, batch 1 (latent 128x128, 4096 patches of 2x2, width 1536 for SD3-medium), with the
published widths: 16 latent channels at 1/8, the ControlNet's 16 + 1 = 17. The code takes them from the loaded
VAE's, transformer's and ControlNet's configs (check_widths): C latent channels give a [B,C+1,H/s,W/s] condition.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import text as text_ops
from .. import vae as vae_ops
from ..condition import ConditionSource
from ..decode import SampledLatent, decode_to_image
from ..errors import FillScopeInputError
from ..masks import PreparedInput, require_grid
from ..observe import observe_step, observer_or_noop, stage
from ..parallel.cfg import check_cfg_parallel, gather_guidance_pair, rank_pass
from ..sampling import (ExternalDenoiser, blend_with_source, check_external_options, check_finite_settings,
                        check_steps_and_denoise, describe_soft_mask, differential_mask, differential_range, euler_step,
                        require_finite_first_step, require_finite_result, soft_mask_to_latent, starting_point,
                        static_shift_sigma_min, static_shift_sigmas, tell_schedule)
from ..specs import (MIN_SIDE, SideLimit, model_config, pos_embed_side_limit, scheduler_config, sd3_side_limit,
                     shipped_variant)
from ..text import SD3TextCondition
from ..meta_cache import cached_on_meta, first_argument, stack_transformer
from ..weights import Component, load_component

FAMILY = "sd3-controlnet-inpaint"
TITLE = "SD3 + alimama inpainting ControlNet"
COMPONENTS = ("clip_l", "clip_g", "t5", "transformer", "controlnet", "vae")  # the stack `run` takes
TAKES_NEGATIVE_PROMPT = True
T5_MAX_LENGTH = 256
RESIDUAL_MAPPINGS = ("one_to_one", "diffusers")


def load_sd3_transformer(source, *, variant=None, dtype="bf16", device="auto", seed=0) -> Component:
    return load_component("sd3_transformer", source, dtype=dtype, device=device, seed=seed,
                          input_name="transformer source", variant=variant)


def load_sd3_controlnet(source, *, dtype="bf16", device="auto", seed=0) -> Component:
    return load_component("sd3_controlnet", source, dtype=dtype, device=device, seed=seed, input_name="controlnet source")


def load_stack(source, *, tokenizer_folders, controlnet=None, variant=None, dtype="bf16", device="auto",
               seed=0) -> dict[str, Component]:
    """Every component from one weight source (meta, placeholder or a diffusers repository folder); the
    ControlNet from `controlnet` when it is a separate folder. `tokenizer_folders` = (CLIP, T5) tokenizer
    folders for weights that carry none."""
    clip_dir, t5_dir = tokenizer_folders
    kw = dict(dtype=dtype, device=device, seed=seed)
    return {
        "clip_l": text_ops.load_clip_l(source, tokenizer_fallback=clip_dir, **kw),
        "clip_g": text_ops.load_clip_g(source, tokenizer_fallback=clip_dir, **kw),
        "t5": text_ops.load_t5(source, tokenizer_fallback=t5_dir, **kw),
        "transformer": load_sd3_transformer(source, variant=variant, **kw),
        "controlnet": load_sd3_controlnet(controlnet or source, **kw),
        "vae": vae_ops.load_vae(source, kind="sd3", **kw),
    }


def encode_prompt(clip_l: Component, clip_g: Component, t5: Component, prompt: str, *,
                  max_length: int = T5_MAX_LENGTH, observe=None) -> SD3TextCondition:
    """Step 1, for one prompt box. Several prompts (text.split_prompts: separated by lines ---) are encoded one by
    one and stacked along the batch [n,...]: prompt k for image k of the batch (crop k of Crop For Inpaint with
    regions)."""
    observe = observer_or_noop(observe)
    prompts = text_ops.split_prompts(prompt)
    cl = text_ops.concat_batch([text_ops.encode_clip(clip_l, p) for p in prompts])
    cg = text_ops.concat_batch([text_ops.encode_clip(clip_g, p) for p in prompts])
    t5_out = text_ops.concat_batch([text_ops.encode_t5(t5, p, max_length) for p in prompts])
    for name, tensor in (("clip_l.penultimate", cl.penultimate),  # [B,77,768]
                         ("clip_l.text_embeds", cl.text_embeds),  # [B,768]
                         ("clip_g.penultimate", cg.penultimate),  # [B,77,1280]
                         ("clip_g.text_embeds", cg.text_embeds),  # [B,1280]
                         ("t5.hidden", t5_out.hidden),  # [B,256,4096]
                         ("clip_l.input_ids", cl.input_ids),  # [B,77]
                         ("clip_g.input_ids", cg.input_ids),  # [B,77]
                         ("t5.input_ids", t5_out.input_ids)):  # [B,256]
        if tensor is not None:
            observe(name, tensor)
    condition = text_ops.sd3_text_condition(cl, cg, t5_out, observe=observe)
    observe("joint_context", condition.context)  # [B,333,4096]
    observe("pooled", condition.pooled)  # [B,2048]
    return condition


def refuse_over_side_limit(input_name: str, geometry, limit: SideLimit, grid: str) -> None:
    """Refuse an image whose model grid has more patches a side than `limit`'s position-embedding grid (diffusers
    would fail inside the first step with "Height (256) cannot be greater than pos_embed_max_size: 192");
    `grid` names the grid ("SD3's position-embedding grid")."""
    if max(geometry.grid_height, geometry.grid_width) <= limit.pixels:
        return
    size = f"{geometry.width}x{geometry.height}"
    if (geometry.grid_width, geometry.grid_height) != (geometry.width, geometry.height):
        size += f" ({geometry.grid_width}x{geometry.grid_height} {'padded' if geometry.mode == 'pad' else 'cropped'} to the 16 px grid)"
    fix = (f"crop or scale the image to at most {limit.pixels} px a side, e.g. inpaint a crop around the masked "
           "area and composite it back into the full image, or inpaint it by tiles (SD3 ControlNet Tiled Inpaint)")
    unit = MIN_SIDE  # the 16 px grid: crop trims each side down to a multiple of it
    cropped = (geometry.width // unit * unit, geometry.height // unit * unit)
    if geometry.mode == "pad" and max(cropped) <= limit.pixels:
        fix = f"set size_mode to crop (it trims to {cropped[0]}x{cropped[1]}), or {fix}"
    raise FillScopeInputError(input_name, f"{size} is larger than {grid} allows ({limit.explain()}).", fix + ".")


def check_image_size(prepared: PreparedInput) -> None:
    """Step 2's size check, on its own so the condition node can run it before the VAE is placed: the largest
    side any shipped SD3 transformer and the ControlNet take (the sampler re-checks against the loaded models'
    own configs)."""
    refuse_over_side_limit("image", prepared.geometry, sd3_side_limit(), "SD3's position-embedding grid")


@dataclass(kw_only=True)
class InpaintCondition(ConditionSource):
    """The ControlNet's condition: masked-image latents (C = the VAE's latent channels, 16 published) ++ keep-mask
    (1, the last channel)."""

    control: object  # [B, 17, H/8, W/8] (published)

    @property
    def latent_channels(self) -> int:
        return self.control.shape[1] - 1


def build_inpaint_condition(vae: Component, prepared: PreparedInput, observe=None) -> InpaintCondition:
    """Step 2."""
    import torch
    import torch.nn.functional as F

    observe = observer_or_noop(observe)
    if vae.kind != "sd3_vae":
        raise FillScopeInputError("vae", "the SD3 ControlNet needs the SD3 VAE (scale 1.5305, shift 0.0609).",
                                  "set the VAE loader's kind to sd3.")
    check_image_size(prepared)  # before the VAE encodes
    fmt = vae_ops.latent_format(vae)
    require_grid(prepared, fmt.downscale, f"this VAE ({vae_ops.describe_widths(vae)})")
    image, mask = prepared.image, prepared.mask  # [B,3,H,W] in [-1,1], [B,1,H,W] 1 = repaint
    masked = image.clone()
    masked[(mask > 0.5).expand_as(masked)] = -1.0  # repaint pixels -> black, as diffusers
    latents = vae_ops.encode(vae, masked)  # [B,16,H/8,W/8]
    lh, lw = latents.shape[-2:]
    keep = 1.0 - F.interpolate(mask.to(device=latents.device, dtype=latents.dtype), size=(lh, lw))  # nearest
    control = torch.cat([latents, keep], dim=1)  # [B,17,H/8,W/8]
    observe("masked_image", masked)
    observe("masked_image_latents", latents)
    observe("keep_mask.latent", keep)
    observe("inpaint_condition", control)
    return InpaintCondition(prepared=prepared, vae=vae, control=control)


def one_to_one_hooks(transformer, residuals):
    """Add residual i after MMDiT block i (i < len(residuals)); returns the hook handles."""
    handles = []
    for i, block in enumerate(transformer.transformer_blocks):
        if i >= len(residuals):
            break

        def add(module, args, output, res=residuals[i]):
            encoder_hidden_states, hidden_states = output
            return encoder_hidden_states, hidden_states + res

        handles.append(block.register_forward_hook(add))
    return handles


def block_residuals(residuals: list, num_layers: int, residual_mapping: str = "one_to_one") -> list:
    """Entry i (of `num_layers`): the residual added to the image tokens after MMDiT block i, or None, as FillScope's
    own transformer adds them, for a denoiser that takes per-block additions (ComfyUI's MMDiT: control={"output": ...}).
    "one_to_one": residual i after block i for i < len(residuals) (`one_to_one_hooks`). "diffusers": the rule of
    diffusers' SD3Transformer2DModel, float for float: block i <- residuals[int(i / (num_layers / len(residuals)))],
    none on the last (context_pre_only) block (24 blocks, 23 residuals: 0<-0, 1<-0, 2<-1, ..., 22<-21, 23<-none)."""
    if not residuals:
        return [None] * num_layers
    if residual_mapping == "one_to_one":
        return [residuals[i] if i < len(residuals) else None for i in range(num_layers)]
    interval = num_layers / len(residuals)
    return [None if i == num_layers - 1 else residuals[int(i / interval)] for i in range(num_layers)]


def check_controlnet_width(transformer_config, controlnet: Component, input_name: str = "transformer") -> None:
    """The ControlNet's residuals are added to the transformer's image tokens: both have one token width (heads x
    head dim; published SD3 medium: 24 x 64), checked before anything is placed or sampled."""
    cn = model_config(controlnet)
    want = (transformer_config.get("num_attention_heads") or 0) * (transformer_config.get("attention_head_dim") or 0)
    heads, dim = cn.get("num_attention_heads") or 0, cn.get("attention_head_dim") or 0
    have = heads * dim
    if want and have and want != have:
        raise FillScopeInputError("controlnet", f"gives residuals of width {have} ({heads} heads x {dim}), but the "
                                  f"{input_name} input's MMDiT has width {want}: they are added to its image tokens.",
                                  "load the inpainting ControlNet made for this SD3 model, or the SD3 model it was "
                                  f"made for into '{input_name}'.")


def check_side_limits(transformer: Component | ExternalDenoiser, controlnet: Component,
                      cond: InpaintCondition) -> None:
    """The loaded transformer's and ControlNet's own position-embedding grids (a variant or a file may differ from
    the shipped default the condition node checked), before any sampling work."""
    if cond.vae is not None:
        scale = vae_ops.latent_format(cond.vae).downscale  # the condition's VAE's downscale (8 published)
    else:  # a condition built without its VAE: the downscale its own grids show
        scale = max(1, cond.prepared.geometry.grid_height // max(1, cond.control.shape[-2]))
    external = isinstance(transformer, ExternalDenoiser)
    for name, comp, title in (("transformer", transformer,
                               f"the {transformer.input_name} input's MODEL" if external else "this transformer"),
                              ("controlnet", controlnet, "this ControlNet")):
        config = model_config(comp)  # an ExternalDenoiser: its config in diffusers' names
        variant = shipped_variant("sd3_controlnet" if name == "controlnet" else "sd3_transformer", config)
        model = variant or "the loaded weights"
        limit = pos_embed_side_limit(config, model, scale)
        if limit is not None:
            refuse_over_side_limit("condition", cond.prepared.geometry, limit, f"{title}'s position-embedding grid")


def check_widths(transformer: Component | ExternalDenoiser, controlnet: Component, cond: InpaintCondition) -> None:
    """The loaded models' widths against each other and the condition's VAE, before anything is placed or sampled:
    the transformer's in_channels and out_channels and the ControlNet's in_channels = the VAE's latent channels C;
    the ControlNet's in_channels + extra_conditioning_channels = the condition's C + 1 (latents ++ keep mask); the
    latent grid a multiple of both patch sizes (published: 16, 16 + 1 = 17, patch 2)."""
    c = cond.latent_channels
    fix = ("load the SD3 transformer, the SD3 inpainting ControlNet and the SD3 VAE of one model family (published: "
           "16 latent channels each; the ControlNet takes 16 + 1 = 17).")
    vae_ops.check_denoiser_widths(transformer, cond.vae, c, f"{c} latent channels", c, fix)
    t_cfg, cn_cfg = model_config(transformer), model_config(controlnet)
    check_controlnet_width(t_cfg, controlnet, getattr(transformer, "input_name", "transformer"))
    cn_in, extra = cn_cfg.get("in_channels"), cn_cfg.get("extra_conditioning_channels", 0)
    if cn_in != c:
        raise FillScopeInputError("controlnet", f"takes in_channels {cn_in} but the transformer (in_channels "
                                  f"{t_cfg.get('in_channels')}) and {vae_ops.describe(cond.vae)} have {c} latent "
                                  "channels.", fix)
    if cn_in + extra != cond.control.shape[1]:
        raise FillScopeInputError(
            "controlnet", f"takes a condition of in_channels {cn_in} + extra_conditioning_channels {extra} = "
                          f"{cn_in + extra} channels, but the inpaint condition is {c} latent channels + 1 keep mask = "
                          f"{cond.control.shape[1]}.",
            "load the SD3 inpainting ControlNet (extra_conditioning_channels 1).")
    lh, lw = cond.control.shape[-2:]
    for name, cfg in (("transformer", t_cfg), ("controlnet", cn_cfg)):
        patch = cfg.get("patch_size")
        if lh % patch or lw % patch:
            unit = vae_ops.latent_format(cond.vae).downscale * patch if cond.vae is not None else patch
            raise FillScopeInputError(name, f"patch_size {patch} does not divide the {lw}x{lh} latent grid of "
                                      f"{vae_ops.describe(cond.vae)}.",
                                      f"pad or crop the image to multiples of {unit} px.")


def check_text(transformer: Component, positive: SD3TextCondition, negative: SD3TextCondition | None = None,
               cfg: float = 7.0) -> None:
    """The text conditions the sampler uses (the negative only under CFG) against the transformer's config, before
    anything is placed or sampled: a joint context [B, L, joint_attention_dim] (any length L; positive and negative
    may differ) and a pooled vector [B, pooled_projection_dim] of the same batch."""
    config = transformer.config
    width, pooled_width = config.get("joint_attention_dim"), config.get("pooled_projection_dim")
    want = f"a joint context [B, L, {width}] and a pooled vector [B, {pooled_width}] (CLIP-L ++ CLIP-G)"
    fix = "encode the prompt with SD3's text encoders (CLIP-L, CLIP-G and T5-XXL) into an SD3 text condition."
    for name, text in (("positive", positive), ("negative", negative if cfg > 1.0 else None)):
        if text is None:
            continue
        context, pooled = text.context, text.pooled
        if getattr(context, "ndim", 0) != 3 or getattr(pooled, "ndim", 0) != 2:
            raise FillScopeInputError(name, f"holds tensors of shape {list(getattr(context, 'shape', []))} and "
                                            f"{list(getattr(pooled, 'shape', []))}; SD3 reads {want}.", fix)
        if (context.shape[-1], pooled.shape[-1]) != (width, pooled_width):
            what = (" (the widths of a FLUX text condition: T5-XXL and the CLIP-L pooled vector alone)"
                    if (context.shape[-1], pooled.shape[-1]) == (4096, 768) else "")
            raise FillScopeInputError(
                name, f"is {context.shape[-1]} channels per token with a pooled vector of {pooled.shape[-1]}{what}, but "
                      f"this SD3 transformer reads {want}.", fix)
        if pooled.shape[0] != context.shape[0]:
            raise FillScopeInputError(name, f"the joint context has batch {context.shape[0]} but the pooled vector "
                                            f"{pooled.shape[0]}.", "encode one prompt for both.")


def text_batches(texts: list) -> list[list]:
    """The text conditions that share one denoiser pass a step. Under CFG, [negative, positive] in one batch [2B, ...]
    as diffusers does, when their contexts have one length; contexts of different lengths (ComfyUI's encoders grow
    with the prompt) cannot share a batch, and each gets its own pass, as ComfyUI's sampler does: per sample the same
    computation."""
    return [texts] if len({t.context.shape[1] for t in texts}) == 1 else [[t] for t in texts]


def controlnet_keep(step: int, steps: int, start: float, end: float) -> float:
    """diffusers' rule: the ControlNet acts on step i when start <= i/steps and (i+1)/steps <= end."""
    return 1.0 - float(step / steps < start or (step + 1) / steps > end)


def soft_mask_latent(cond: InpaintCondition, soft_mask):
    """A soft mask (ComfyUI MASK at the condition's input or grid size) on the latent grid [B,1,H/8,W/8], checked
    (sampling.soft_mask_to_latent): what the sampler blends with; the node runs it before placing the models."""
    lh, lw = cond.control.shape[-2:]
    return soft_mask_to_latent(soft_mask, cond.prepared.geometry, cond.control.shape[0], lh, lw)


@cached_on_meta(first_argument)  # fillscope/meta_cache.py: faster on meta weights, same shapes
def sample_sd3_controlnet_inpaint(
    transformer: Component | ExternalDenoiser,
    controlnet: Component,
    positive: SD3TextCondition,
    negative: SD3TextCondition | None,
    cond: InpaintCondition,
    *,
    steps: int = 28,
    cfg: float = 7.0,
    control_scale: float = 0.95,
    control_start: float = 0.0,
    control_end: float = 1.0,
    shift: float | None = None,
    seed: int = 0,
    denoise: float = 1.0,
    residual_mapping: str = "one_to_one",
    callback=None,
    noise=None,
    observe=None,
    soft_mask=None,
    parallel: int = 1,
) -> SampledLatent:
    """Step 3. Flow-matching Euler with classifier-free guidance (negative first in the batch, as diffusers).
    `callback(step, total)` runs after every step; `noise` overrides the seeded initial noise [B,C,h,w]
    (C = 16 published).

    `soft_mask` (ComfyUI MASK, 1 = repaint; None = the ControlNet's condition alone): differential diffusion
    (sampling.py has the formula), blended per latent position on [B,16,H/8,W/8] with the mask averaged over each
    8x8 px cell; sigma_min for the schedule position is ComfyUI's SD3 one at this `shift`. The ControlNet still gets
    the condition's (hard) mask.

    `parallel` = 2: this call is one of the 2 ranks of a process group, each called with the same inputs; under CFG
    rank 0 runs the positive pass and rank 1 the negative one (ControlNet and MMDiT, [B] each), the velocities are
    all-gathered and guided as here (fillscope.parallel.cfg); both ranks return the same latents. 1: one process.

    `transformer` may be an ExternalDenoiser (sampling.py; ComfyUI's own SD3 MODEL, nodes/native_sd3.py): FillScope's
    ControlNet still computes the residuals, and where the diffusers transformer would run the sampler calls

        transformer.call(x, sigma, context, pooled, control, cond_or_uncond) -> velocity

    x [n,C,h,w] the pass's latents in transformer.dtype (n = B, or 2B for a CFG batch, negative first), sigma [n] in
    [0, 1] (diffusers' transformer gets timestep 1000 * sigma), context [n,L,D] and pooled [n,P] the pass's texts,
    control the ControlNet's residuals per MMDiT block (`block_residuals`: num_layers entries [n, tokens, width] or
    None, residual_mapping applied; None when the ControlNet is off this step), cond_or_uncond one entry per batch
    chunk (0 positive, 1 negative: (1, 0) for a CFG batch); velocity [n,C,h,w]. `transformer.config`: its widths in
    diffusers' names (in/out_channels, joint_attention_dim, pooled_projection_dim, num_layers, num_attention_heads,
    attention_head_dim, patch_size, pos_embed_max_size) for the checks above. Everything else is as above; step
    caches and parallel > 1 are refused (check_external_options)."""
    import torch

    observe = observer_or_noop(observe)
    # NaN would switch CFG off silently (cfg), or reach the schedule / the residuals and be blamed on the weights
    check_finite_settings(("cfg", cfg, "a number of 1 or more (1 = off; the default is 7)"),
                          ("control_scale", control_scale, "a number from 0 to 2 (the model card's 0.95)"),
                          ("control_start", control_start, "a number from 0 to 1"),
                          ("control_end", control_end, "a number from 0 to 1"),
                          ("shift", shift, "a number above 0 (SD3: 3.0)"))
    if residual_mapping not in RESIDUAL_MAPPINGS:
        raise FillScopeInputError("residual_mapping", f"unknown {residual_mapping!r}.", f"use one of {', '.join(RESIDUAL_MAPPINGS)}.")
    check_steps_and_denoise(steps, denoise)
    external = isinstance(transformer, ExternalDenoiser)
    if external:
        check_external_options(transformer.input_name, "off", parallel)
    if parallel != 1:
        check_cfg_parallel(parallel)
    if not 0.0 <= control_start < control_end <= 1.0:
        raise FillScopeInputError("control_start", f"start {control_start} / end {control_end} leave no step.", "use 0 <= start < end <= 1.")
    model, cnet = (None if external else transformer.model), controlnet.model
    check_widths(transformer, controlnet, cond)
    use_cfg = cfg > 1.0
    if use_cfg and negative is None:
        raise FillScopeInputError("negative", f"CFG {cfg} needs a negative condition.", "wire a second SD3 text condition (an empty prompt is fine), or set cfg to 1.")
    check_text(transformer, positive, negative, cfg)
    check_side_limits(transformer, controlnet, cond)

    device, dtype = transformer.device, (transformer.dtype if external else model.dtype)
    b = cond.control.shape[0]
    for name, text in (("positive", positive), ("negative", negative if use_cfg else None)):
        if text is not None and text.context.shape[0] not in (1, b):
            raise FillScopeInputError(name, f"batch {text.context.shape[0]} for {b} images.",
                                      "give one prompt, or one per region/image separated by lines ---.")
    lh, lw = cond.control.shape[-2:]
    soft = soft_mask_latent(cond, soft_mask) if soft_mask is not None else None  # [B,1,h,w], checked before the skip
    if cond.is_empty:
        return SampledLatent(cond.control[:, :-1], cond.prepared, "sd3", unchanged=True, info={"skipped": "empty mask"})

    shift = scheduler_config("sd3")["shift"] if shift is None else shift
    c = model_config(transformer)["in_channels"]  # as diffusers: the transformer's (= the VAE's, check_widths)
    sigmas, noise, latents = starting_point(cond, static_shift_sigmas(steps, shift), steps, denoise, (b, c, lh, lw),
                                            seed, device, dtype, noise)  # noise, latents: [B,16,h,w]
    run_steps = len(sigmas) - 1
    if soft is not None:
        step_sigmas = sigmas.tolist()
        sigma_first, sigma_end = differential_range(sigmas, static_shift_sigma_min(shift))
        soft_facts = describe_soft_mask(soft)
        observe("soft_mask.latent", soft)  # [B,1,h,w]
        soft_on_device = soft.to(device)  # float32
        source = cond.source_latents().to(device=device, dtype=dtype)  # [B,16,h,w]

    def batch(t, n):
        return t.to(device=device, dtype=dtype).expand(n, *t.shape[1:])

    # the denoiser passes of a step: (context, pooled, control, the ControlNet's pooled) each
    passes, pass_parts = [], []  # pass_parts: cond_or_uncond per pass (1 = negative, 0 = positive), as ComfyUI's
    own = rank_pass(parallel, use_cfg)  # CFG parallel: "positive" on rank 0, "negative" on rank 1; else None
    texts = [negative, positive] if use_cfg else [positive]
    kinds = [1, 0] if use_cfg else [0]  # ComfyUI's cond_or_uncond of each text: 1 the negative, 0 the positive
    if own is not None:
        texts, kinds = ([positive], [0]) if own == "positive" else ([negative], [1])
    for group in text_batches(texts):  # the groups split `texts` in order
        context = torch.cat([batch(t.context, b) for t in group])  # [2B,333,4096] under CFG
        pooled = torch.cat([batch(t.pooled, b) for t in group])  # [2B,2048]
        control = torch.cat([cond.control] * len(group)).to(device=device, dtype=dtype)  # [2B,17,h,w]
        passes.append((context, pooled, control, torch.zeros_like(pooled)))  # the inpainting ControlNet: no pooled text
        first = sum(len(parts) for parts in pass_parts)
        pass_parts.append(tuple(kinds[first:first + len(group)]))
    observe("initial_noise", noise)
    observe("sampler.context", passes[-1][0])
    observe("sampler.pooled", passes[-1][1])
    observe("control_image", passes[-1][2])

    on_device = sigmas.to(device)  # once: no host<->device copy per step
    tell_schedule(transformer, on_device)
    controlnet_steps = 0

    def predict(x_in, t, scale, context, pooled, control, cnet_pooled, parts, sigma):
        """One denoiser pass: the ControlNet's residuals (none at scale 0), then the MMDiT with them added."""
        timestep = t.expand(x_in.shape[0])
        residuals = []
        if scale != 0.0:
            # (diffusers runs the ControlNet at scale 0 too and adds exact zeros: skipping it is the same sum)
            cast = (lambda v: v.to(cnet.dtype)) if external else (lambda v: v)  # external: float32 latents
            residuals = cnet(
                hidden_states=cast(x_in), timestep=timestep, encoder_hidden_states=cast(context),
                pooled_projections=cast(cnet_pooled), controlnet_cond=cast(control), conditioning_scale=scale,
                return_dict=False,
            )[0]  # 23 x [2B, tokens, width]
        if external:  # the same residual per block as below, applied by the external model
            per_block = block_residuals(residuals, transformer.config["num_layers"], residual_mapping)
            velocity = transformer.call(x_in, sigma.expand(x_in.shape[0]), context, pooled,
                                        per_block if residuals else None, parts)
            return velocity, residuals
        handles = one_to_one_hooks(model, residuals) if residual_mapping == "one_to_one" else []
        try:
            velocity = model(
                hidden_states=x_in, timestep=timestep, encoder_hidden_states=context, pooled_projections=pooled,
                block_controlnet_hidden_states=(residuals or None) if residual_mapping == "diffusers" else None,
                return_dict=False,
            )[0]
        finally:
            for h in handles:
                h.remove()
        return velocity, residuals

    with torch.inference_mode():
        for i in range(run_steps):
            t = on_device[i] * 1000.0
            scale = control_scale * controlnet_keep(i, run_steps, control_start, control_end)
            outputs = []
            for (context, pooled, control, cnet_pooled), parts in zip(passes, pass_parts):
                n = context.shape[0] // b
                x_in = torch.cat([latents] * n) if n > 1 else latents  # [2B,16,h,w] in a CFG batch
                velocity, residuals = predict(x_in, t, scale, context, pooled, control, cnet_pooled, parts,
                                              on_device[i])
                outputs.append((x_in, velocity, residuals if i == 0 else bool(residuals)))
            velocity = outputs[0][1] if len(outputs) == 1 else torch.cat([o[1] for o in outputs])  # negative first
            if own is not None:
                velocity = gather_guidance_pair(velocity)  # [2B]: both ranks' passes, negative first
            controlnet_steps += bool(outputs[-1][2])
            if i == 0:
                x_in, _, residuals = outputs[-1]
                observe("transformer.input", x_in)
                for k, r in enumerate(residuals):
                    if k in (0, len(residuals) - 1):
                        observe(f"controlnet.residual[{k}]", r)
                observe("transformer.output", velocity)
                require_finite_first_step("transformer", velocity, (
                    ("positive / negative", [x for p in passes for x in p[:2]], "the CLIP-L / CLIP-G / T5 text encoders"),
                    ("condition", passes[-1][2], "the VAE (masked-image latents)"),
                    ("condition", x_in, "the VAE (source latents, denoise < 1)"),
                    ("controlnet", [r for o in outputs for r in o[2]], "the ControlNet"),
                ), component=None if external else transformer)
            if use_cfg:
                uncond, text = velocity.chunk(2)
                velocity = uncond + cfg * (text - uncond)
            if i == 0:
                observe("velocity.guided", velocity)
            latents = euler_step(latents, velocity, on_device[i], on_device[i + 1])
            if soft is not None:
                free = differential_mask(soft_on_device, step_sigmas[i], sigma_first, sigma_end)
                latents = blend_with_source(latents, source, noise, free, step_sigmas[i + 1])
            observe_step(observe, i, velocity, latents)
            if callback is not None:
                callback(i + 1, run_steps)
    require_finite_result("transformer", latents)
    observe("latent", latents)
    info = {"steps_run": run_steps, "shift": shift, "sigma_start": float(sigmas[0]), "cfg": cfg,
            "controlnet_residuals": cnet.config.get("num_layers"), "controlnet_steps": controlnet_steps,
            "residual_mapping": residual_mapping}
    if soft is not None:
        info["differential_diffusion"] = soft_facts
    if parallel != 1:
        info["cfg_parallel"] = (f"{own} pass on this rank of 2" if own else "CFG off: each of the 2 ranks runs the "
                                "one pass")
    if len(passes) > 1:
        info["cfg_passes"] = (f"2 (negative {negative.context.shape[1]} and positive {positive.context.shape[1]} "
                              "context tokens: one pass each)")
    return SampledLatent(latents, cond.prepared, "sd3", info=info)


@dataclass
class SD3ControlNetResult:
    """Every stage's output of one `run`."""

    positive: SD3TextCondition
    negative: SD3TextCondition | None
    condition: InpaintCondition
    latent: SampledLatent
    image: object  # IMAGE [B,H,W,3] at the input's size


@cached_on_meta(stack_transformer)  # fillscope/meta_cache.py: faster on meta weights, same shapes
def run(stack: dict[str, Component], prompt: str, prepared: PreparedInput, *, negative_prompt: str = "",
        steps: int = 28, cfg: float = 7.0, control_scale: float = 0.95, control_start: float = 0.0,
        control_end: float = 1.0, shift: float | None = None, seed: int = 0, denoise: float = 1.0,
        residual_mapping: str = "one_to_one", callback=None, noise=None, observe=None,
        timings: dict | None = None, place=None, soft_mask=None, parallel: int = 1) -> SD3ControlNetResult:
    """The whole pipeline on a stack named as COMPONENTS (steps 1-4 above, in order). The negative prompt is
    encoded only when CFG is on; `observe` sees the positive prompt's text tensors. `timings`, when a dict,
    receives each step's wall time under its function's name; `place(components)`, when given, is a context
    manager around each step that puts that step's components where they run (placement.placer). `soft_mask`:
    differential diffusion in step 3 (sample_sd3_controlnet_inpaint); `parallel` 2: CFG parallel, this call one of
    the 2 ranks of a process group."""
    clip_l, clip_g, t5, transformer, controlnet, vae = (stack[name] for name in COMPONENTS)
    with stage("encode_prompt", [clip_l, clip_g, t5], timings=timings, place=place):
        positive = encode_prompt(clip_l, clip_g, t5, prompt, observe=observe)  # 1
        negative = encode_prompt(clip_l, clip_g, t5, negative_prompt) if cfg > 1.0 else None
    with stage("build_inpaint_condition", [vae], timings=timings, place=place):
        condition = build_inpaint_condition(vae, prepared, observe=observe)  # 2
    with stage("sample_sd3_controlnet_inpaint", [transformer, controlnet], timings=timings, place=place):
        latent = sample_sd3_controlnet_inpaint(  # 3
            transformer, controlnet, positive, negative, condition, steps=steps, cfg=cfg, control_scale=control_scale,
            control_start=control_start, control_end=control_end, shift=shift, seed=seed, denoise=denoise,
            residual_mapping=residual_mapping, callback=callback, noise=noise, observe=observe, soft_mask=soft_mask,
            parallel=parallel)
    with stage("decode_to_image", [vae], timings=timings, place=place):
        image = decode_to_image(vae, latent, observe=observe)  # 4
    return SD3ControlNetResult(positive, negative, condition, latent, image)


def stages(stack: dict[str, Component], prompt: str, prepared: PreparedInput, done: SD3ControlNetResult,
           *, negative_prompt: str = "", seed: int = 0) -> list:
    """Each stage alone, as (label, the components it runs, a callable that re-runs it from `done`'s inputs):
    what the per-stage memory figures and the denoiser FLOP count measure."""
    encoders = stack["clip_l"], stack["clip_g"], stack["t5"]
    return [
        ("text encoders", ["clip_l", "clip_g", "t5"],
         lambda: (encode_prompt(*encoders, prompt), encode_prompt(*encoders, negative_prompt))),
        ("VAE encode", ["vae"], lambda: build_inpaint_condition(stack["vae"], prepared)),
        ("denoiser step", ["transformer", "controlnet"],
         lambda: sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], done.positive,
                                               done.negative, done.condition, steps=1, seed=seed)),
        ("VAE decode", ["vae"], lambda: decode_to_image(stack["vae"], done.latent)),
    ]


def traced_modules(stack: dict[str, Component]) -> dict:
    """The modules the tracers hook, by component name: every component whole."""
    return {name: comp.model for name, comp in stack.items()}


def parameters_not_run(stack: dict[str, Component]) -> dict[str, int]:
    """SD3 computes with every instantiated parameter (both CLIP projections included)."""
    return {}
