"""FLUX.2 [klein] 4B / 9B: inpainting and reference-image editing, one named function a stage.

    1. encode_prompt            Qwen3 chat text (thinking off) -> hidden states 9/18/27 stacked [B,512,3*hidden]
    2. build_inpaint_condition  source -> VAE -> BatchNorm-normalised patches [B,128,H/16,W/16], the source as
       (or build_edit_condition) reference tokens [B,N,128] at time offset 10 (+ an optional reference image at 20),
                                the token mask [B,N,1]; the edit path: reference images only, no mask
    3. sample_klein             Euler over the transformer on noisy [B,N,128] ++ reference tokens; the first N
                                outputs kept; inpaint re-blends the unmasked tokens with the noised source each step
    4. decode_to_image          BatchNorm undone, unpatchified [B,32,H/8,W/8] -> IMAGE [B,H,W,3]

`run` calls them in this order (`run_edit` for the mask-free edit); each node calls one of them; the trace driver
runs `run` under its tracers. On meta weights `run`, `run_edit` and `sample_klein` use fillscope/meta_cache.py.

Follows diffusers' Flux2KleinInpaintPipeline and Flux2KleinPipeline step for step (chat template, stacked layers,
noise drawn as [B,128,h,w], empirical mu, strength as img2img, per-step re-blend, reference ids), with these
deliberate differences, each an input that can be set to diffusers' behaviour:
- mask -> tokens: `token_mask="cover"` repaints every token any masked pixel touches (a thin mask is never lost);
  "bilinear" is diffusers' (the mask resized bilinearly to the token grid, which samples each 16x16 block's centre);
- sizes: the image runs at its own size, padded or cropped to multiples of 16 (masks.py size_mode); diffusers
  resizes to multiples of 16 and shrinks anything above 1024x1024 to about 1 megapixel (FillScope warns instead);
- the negative prompt of base (CFG) models is an input; diffusers always uses "" (the default here too);
- an empty mask returns the source unchanged without sampling; the source is encoded by the latent mean (the same
  as diffusers' argmax mode, which the klein pipelines use);
- `soft_mask` (optional, none in diffusers): differential diffusion as ComfyUI's node does it (sampling.py): the
  per-step re-blend keeps the tokens whose soft value is below the schedule's position, instead of the token mask's.

Shapes below are for 1024x1024, batch 1, klein 4B (N = 4096 image tokens; 9B: 12288 text channels) and the published
VAE's widths (32 x 2x2 = 128 channels at 1/16); the code takes them from the loaded VAE's and transformer's configs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import speed, text as text_ops, vae as vae_ops  # noqa: I001
from ..condition import ConditionSource
from ..decode import SampledLatent, decode_to_image
from ..errors import FillScopeInputError
from ..masks import PreparedInput, check_reference_batches, prepare_reference, require_grid
from ..observe import observe_step, observer_or_noop, stage
from ..parallel.context import check_parallel, context_parallel, rank_shapes
from ..sampling import (ExternalDenoiser, blend_with_source, check_external_options, check_finite_settings,
                        check_steps_and_denoise, describe_soft_mask, differential_mask, differential_range, euler_step,
                        flux_sigma_min, flux_sigmas, initial_noise, require_finite_first_step, require_finite_result,
                        require_noise_shape, soft_mask_to_latent, tell_schedule, truncate_for_denoise)
from ..specs import MIN_SIDE, shipped_config
from ..meta_cache import cached_on_meta, first_argument, stack_transformer
from ..weights import Component, load_component

FAMILY = "klein"
TITLE = "FLUX.2 [klein]"
COMPONENTS = ("qwen3", "transformer", "vae")  # the stack `run` takes, by these names
TAKES_NEGATIVE_PROMPT = True  # base models only (distilled ones run without CFG)
QWEN3_MAX_LENGTH = text_ops.QWEN3_MAX_LENGTH
VARIANTS = {"klein-4b": "qwen3-4b", "klein-9b": "qwen3-8b"}  # transformer variant -> its text encoder
MODELS = tuple(VARIANTS)  # the names this pipeline runs under (pipelines.PIPELINES, the CLI, the report)
MODEL_TYPES = ("auto", "distilled", "base")
TOKEN_MASKS = ("cover", "bilinear")
SOURCE_TIME_OFFSET = 10  # reference ids: (t, h, w, l) with t = 10 for the first reference image, 20 for the next
DISTILLED_STEPS = 4
BASE_GUIDANCE = 4.0
DIFFUSERS_MAX_PIXELS = 1024 * 1024  # above this diffusers shrinks the input silently


def load_klein_transformer(source, *, dtype="bf16", device="auto", seed=0, variant: str | None = None) -> Component:
    return load_component("klein_transformer", source, dtype=dtype, device=device, seed=seed,
                          input_name="transformer source", variant=variant)


def load_stack(source, *, tokenizer_folders, dtype="bf16", device="auto", seed=0,
               variant: str = "klein-4b") -> dict[str, Component]:
    """Every component from one weight source (meta, placeholder or a klein repository folder). `variant` picks
    klein-4b / klein-9b (and its Qwen3) for meta/placeholder; `tokenizer_folders` = (Qwen BPE folder,) for weights
    that carry no tokenizer."""
    (qwen_dir,) = tokenizer_folders
    kw = dict(dtype=dtype, device=device, seed=seed)
    return {
        "qwen3": text_ops.load_qwen3(source, variant=VARIANTS[variant], tokenizer_fallback=qwen_dir, **kw),
        "transformer": load_klein_transformer(source, variant=variant, **kw),
        "vae": vae_ops.load_vae(source, kind="flux2", **kw),
    }


# --- 1. text ------------------------------------------------------------------------------------------------------

@dataclass
class KleinText:
    """What the klein transformer reads from a prompt (batch 1), or from one prompt per region or image (batch N)."""

    embeds: object  # [B,512,3*hidden] encoder_hidden_states
    encoded: text_ops.Qwen3Output

    @property
    def text_ids(self):
        """[B,512,4] positions (t, h, w, l) = (0, 0, 0, token index), as diffusers' _prepare_text_ids."""
        import torch

        b, length, _ = self.embeds.shape
        ids = torch.zeros(b, length, 4, dtype=torch.long, device=self.embeds.device)
        ids[..., 3] = torch.arange(length, device=self.embeds.device)
        return ids


def encode_prompt(qwen3: Component, prompt: str, *, max_length: int = QWEN3_MAX_LENGTH, observe=None) -> KleinText:
    """Step 1. Qwen3 on the chat-templated prompt; hidden states 9, 18, 27 stacked per token. Several prompts
    (text.split_prompts: separated by lines ---) are encoded one by one and stacked along the batch [n,...]: prompt
    k for image k of the batch (crop k of Crop For Inpaint with regions)."""
    observe = observer_or_noop(observe)
    out = text_ops.concat_batch([text_ops.encode_qwen3(qwen3, p, max_length) for p in text_ops.split_prompts(prompt)])
    observe("qwen3.input_ids", out.input_ids)  # [B,512]
    observe("qwen3.attention_mask", out.attention_mask)  # [B,512]
    observe("prompt_embeds", out.embeds)  # [B,512,7680]
    return KleinText(out.embeds, out)


# --- 2. condition -------------------------------------------------------------------------------------------------

def pack_tokens(latents):
    """[B,128,h,w] -> [B,h*w,128]: one token a latent position (VAE did the 2x2 patching), as Flux2 _pack_latents."""
    b, c, h, w = latents.shape
    return latents.reshape(b, c, h * w).permute(0, 2, 1)


def unpack_tokens(tokens, height: int, width: int):
    """[B,h*w,128] -> [B,128,h,w]; the inverse of pack_tokens."""
    b, _, c = tokens.shape
    return tokens.permute(0, 2, 1).reshape(b, c, height, width)


def token_ids(height: int, width: int, time_offset: int = 0, batch: int = 1, device=None):
    """[B,h*w,4] positions (t, row, col, 0): t = 0 for the image being generated, 10, 20, ... for references."""
    import torch

    rows = torch.arange(height).repeat_interleave(width)
    cols = torch.arange(width).repeat(height)
    ids = torch.stack([torch.full_like(rows, time_offset), rows, cols, torch.zeros_like(rows)], dim=-1)
    return ids.unsqueeze(0).expand(batch, -1, -1).to(device)


def tokens_from_mask(mask, height: int, width: int, mode: str = "cover"):
    """Pixel mask [B,1,H,W] -> token mask [B,h*w,1] on the 16-px token grid. 'cover': a token is repainted as much
    as the most-repainted pixel it holds; 'bilinear': diffusers' bilinear resize (each 16x16 block's centre)."""
    import torch.nn.functional as F

    if mode not in TOKEN_MASKS:
        raise FillScopeInputError("token_mask", f"unknown mode {mode!r}.", f"use one of {', '.join(TOKEN_MASKS)}.")
    if mode == "bilinear":
        small = F.interpolate(mask, size=(height, width), mode="bilinear")
    else:
        small = F.adaptive_max_pool2d(mask, (height, width))
    return pack_tokens(small)  # [B,h*w,1]


@dataclass(kw_only=True)
class KleinCondition(ConditionSource):
    """The reference tokens the transformer attends to, and (inpaint) the source and token mask the sampler
    re-blends with. For the mask-free edit `prepared` holds a blank canvas of the output size."""

    references: object  # [B,Nref,128]: the source's tokens (inpaint) and any reference image's, concatenated
    reference_ids: object  # [B,Nref,4]
    latent_height: int  # the token grid: H/16
    latent_width: int
    token_mask: object = None  # [B,N,1], 1 = repaint; None for the edit path
    source: object = None  # [B,128,h,w] the normalised source latents (inpaint), the re-blend target
    reference_sizes: list = field(default_factory=list)  # (height, width) px of each reference, in order

    @property
    def tokens(self) -> int:
        return self.latent_height * self.latent_width

    @property
    def is_edit(self) -> bool:
        return self.token_mask is None

    @property
    def is_empty(self) -> bool:
        return not self.is_edit and self.prepared.coverage == 0.0


def _require_flux2_vae(vae: Component) -> None:
    if vae.kind != "flux2_vae":
        raise FillScopeInputError("vae", f"klein needs the FLUX.2 VAE (BatchNorm-normalised 2x2 patches); this is the "
                                  f"{vae.kind.replace('_vae', '').upper()} VAE.", "set the VAE loader's kind to flux2.")


def _reference_tokens(vae: Component, images, start_offset: int, batch: int, observe, encode=None):
    """Each reference image (pixels [B|1,3,H,W] in [-1,1]) -> normalised latents -> tokens, with ids at time offsets
    start_offset, +10, ... -> ([B,Nref,128], [B,Nref,4], sizes). `encode`: as build_inpaint_condition's."""
    import torch

    tokens, ids, sizes = [], [], []
    for i, image in enumerate(images):
        latents = (encode or vae_ops.encode)(vae, image)  # [B|1,128,h,w]
        _, _, h, w = latents.shape
        packed = pack_tokens(latents)
        if packed.shape[0] == 1 and batch > 1:
            packed = packed.expand(batch, -1, -1)
        tokens.append(packed)
        ids.append(token_ids(h, w, start_offset + SOURCE_TIME_OFFSET * i, batch, packed.device))
        sizes.append((image.shape[-2], image.shape[-1]))
        observe(f"reference_{i}.latents", latents)
    return torch.cat(tokens, dim=1), torch.cat(ids, dim=1), sizes


def diffusers_downscale_note(prepared: PreparedInput, unit: int = MIN_SIDE) -> str | None:
    """Above 1024x1024 px diffusers' klein pipelines shrink the input to about one megapixel without a word;
    FillScope runs the size it is given and says what diffusers would have done instead (None at or below it);
    `unit`: one token's side in px (the node's model-free prepare step has no VAE yet and counts the published 16)."""
    h, w = prepared.image.shape[-2:]
    if h * w <= DIFFUSERS_MAX_PIXELS:
        return None
    return (f"runs at {w}x{h} ({(h // unit) * (w // unit):,} tokens); diffusers' klein pipelines would shrink this "
            "input to about 1 megapixel first: to match them, scale the image to 1.0 megapixels before this node (e.g. "
            "ImageScaleToTotalPixels), or crop around the mask (Crop For Inpaint)")


def build_inpaint_condition(vae: Component, prepared: PreparedInput, reference=None, *, token_mask: str = "cover",
                            observe=None, encode=None) -> KleinCondition:
    """Step 2 (inpaint). The source is encoded once: its latents are both the re-blend target and the first
    reference (t=10); `reference` (IMAGE, optional) at t=20. `encode(vae, pixels)` encodes both (None: vae.encode)."""
    observe = observer_or_noop(observe)
    _require_flux2_vae(vae)
    if reference is not None:
        check_reference_batches([("reference", reference)], prepared.image.shape[0], "the image's batch")
    unit = vae_ops.latent_format(vae).downscale  # one token's side: the VAE's downscale x patch (16 px published)
    require_grid(prepared, unit, f"this FLUX.2 VAE ({vae_ops.describe_widths(vae)})")
    note = diffusers_downscale_note(prepared, unit)
    if note and note not in prepared.notes:
        prepared.notes.append(note)
    source = (encode or vae_ops.encode)(vae, prepared.image)  # [B,128,H/16,W/16]
    b, _, h, w = source.shape
    observe("source_latents", source)
    extra = [prepare_reference(reference, unit=unit)] if reference is not None else []
    references, ids, sizes = _reference_tokens(vae, extra, SOURCE_TIME_OFFSET * 2, b, observe, encode) if extra else (None, None, [])
    import torch

    source_ids = token_ids(h, w, SOURCE_TIME_OFFSET, b, source.device)
    all_refs = pack_tokens(source) if references is None else torch.cat([pack_tokens(source), references], dim=1)
    all_ids = source_ids if ids is None else torch.cat([source_ids, ids], dim=1)
    mask = tokens_from_mask(prepared.mask.to(device=source.device, dtype=source.dtype), h, w, token_mask)
    observe("reference_tokens", all_refs)  # [B,4096,128] (+ the reference image's tokens)
    observe("reference_ids", all_ids)
    observe("token_mask", mask)  # [B,4096,1]
    cond = KleinCondition(prepared=prepared, vae=vae, references=all_refs, reference_ids=all_ids,
                          latent_height=h, latent_width=w, token_mask=mask, source=source,
                          reference_sizes=[tuple(prepared.image.shape[-2:])] + sizes)
    cond._source_latents = source
    return cond


def build_edit_condition(vae: Component, references: list, *, width: int = 0, height: int = 0,
                         observe=None, encode=None) -> KleinCondition:
    """Step 2 (edit, no mask). Reference images (IMAGE each) at t = 10, 20, ...; the output is width x height,
    or the first reference's size (multiples of one token, 16 px published) when 0, as diffusers does. `encode`:
    as build_inpaint_condition's."""
    import torch

    from ..masks import Geometry

    observe = observer_or_noop(observe)
    _require_flux2_vae(vae)
    if not references:
        raise FillScopeInputError("image", "the edit needs at least one reference image.", "connect an IMAGE.")
    unit = vae_ops.latent_format(vae).downscale  # one token's side (16 px published)
    pixels = [prepare_reference(image, "image" if i == 0 else f"reference_{i + 1}", unit=unit)
              for i, image in enumerate(references)]
    batch = max(p.shape[0] for p in pixels)
    check_reference_batches([("image" if i == 0 else f"reference_{i + 1}", p) for i, p in enumerate(pixels)], batch,
                            "the largest image batch")
    tokens, ids, sizes = _reference_tokens(vae, pixels, SOURCE_TIME_OFFSET, batch, observe, encode)
    out_h, out_w = height or sizes[0][0], width or sizes[0][1]
    if out_h % unit or out_w % unit:
        raise FillScopeInputError("width/height", f"{out_w}x{out_h} is not a multiple of {unit} px (one klein token).",
                                  f"set width and height to multiples of {unit}, or 0 for the reference's size.")
    blank = torch.zeros(batch, out_h, out_w, 3)
    prepared = PreparedInput(image=blank.permute(0, 3, 1, 2), mask=torch.ones(batch, 1, out_h, out_w), source=blank,
                             paste_mask=torch.ones(batch, out_h, out_w, 1), geometry=Geometry(out_h, out_w, out_h, out_w, "exact"),
                             coverage=1.0, notes=[f"edit: {len(pixels)} reference image(s), output {out_w}x{out_h}"])
    observe("reference_tokens", tokens)  # [B,4096,128] per 1024^2 reference
    observe("reference_ids", ids)
    return KleinCondition(prepared=prepared, vae=vae, references=tokens, reference_ids=ids,
                          latent_height=out_h // unit, latent_width=out_w // unit, reference_sizes=sizes)


# --- 3. sampling --------------------------------------------------------------------------------------------------

def compute_empirical_mu(image_tokens: int, steps: int) -> float:
    """FLUX.2's schedule shift: fitted to the token count and the number of steps (BFL's flux2 code, which
    diffusers copies); above 4300 tokens only the 200-step line applies."""
    a1, b1 = 8.73809524e-05, 1.89833333
    a2, b2 = 0.00016927, 0.45666666
    if image_tokens > 4300:
        return float(a2 * image_tokens + b2)
    m_200 = a2 * image_tokens + b2
    m_10 = a1 * image_tokens + b1
    a = (m_200 - m_10) / 190.0
    return float(a * steps + (m_200 - 200.0 * a))


def resolve_distilled(transformer: Component, model_type: str = "auto") -> tuple[bool, str]:
    """(distilled?, where that came from). The weights cannot tell distilled from base: the repository's
    model_index.json (is_distilled) or the sampler's model_type input; meta/placeholder default to distilled."""
    if model_type not in MODEL_TYPES:
        raise FillScopeInputError("model_type", f"unknown type {model_type!r}.", f"use one of {', '.join(MODEL_TYPES)}.")
    if model_type != "auto":
        return model_type == "distilled", f"model_type input ({model_type})"
    known = transformer.extras.get("is_distilled")
    if isinstance(known, bool):
        return known, transformer.extras.get("is_distilled_from", "the repository's model_index.json (is_distilled)")
    return True, "default (distilled; set model_type to base for a base model)"


def soft_mask_latent(cond: KleinCondition, soft_mask):
    """A soft mask (ComfyUI MASK at the condition's input or grid size) on the token grid [B,1,H/16,W/16] (an area
    average per 16x16 px token), checked (sampling.soft_mask_to_latent); the mask-free edit has nothing to keep and
    refuses one. What sample_klein re-blends with; the node runs it before placing the model."""
    if cond.is_edit:
        raise FillScopeInputError("soft_mask", "the mask-free edit generates every token from noise: there is no "
                                  "source to keep.", "disconnect soft_mask, or use Klein Inpaint Condition.")
    return soft_mask_to_latent(soft_mask, cond.prepared.geometry, cond.references.shape[0], cond.latent_height,
                               cond.latent_width)


@cached_on_meta(first_argument)
def sample_klein(transformer: Component | ExternalDenoiser, text: KleinText, cond: KleinCondition, *,
                 steps: int = DISTILLED_STEPS, guidance: float = BASE_GUIDANCE, distilled: bool = True,
                 negative: KleinText | None = None, strength: float = 1.0, seed: int = 0, callback=None, noise=None,
                 observe=None, soft_mask=None, parallel: int = 1, step_cache: str = "off",
                 cache_threshold: float | None = None, schedule_tokens: int | None = None) -> SampledLatent:
    """Step 3. Flow-matching Euler. Distilled models: one transformer call a step, guidance ignored. Base models
    with guidance > 1: classifier-free guidance against `negative` (the encoded "" unless given). `strength` < 1
    starts from the source noised to the first kept sigma (inpaint only). `noise` overrides the seeded [B,C,h,w] draw
    (C = in_channels, 128 published); `callback(step, total)` runs after every step (ComfyUI's progress bar raises).
    `schedule_tokens`: the token count mu is computed from (default: this latent's); tiled mode shared gives its
    largest window's, the image size the transformer sees.

    `soft_mask` (ComfyUI MASK, 1 = repaint; inpaint only): differential diffusion (sampling.py has the formula) on
    the token grid [B,1,H/16,W/16]: each step's re-blend keeps the tokens below the schedule's position (the source
    noised to the next sigma) instead of the condition's token mask; sigma_min for the schedule position is
    ComfyUI's ModelSamplingFlux one at this run's mu.

    `parallel` > 1: one of `parallel` ranks of a process group called with the same inputs, the transformer under
    Ulysses context parallelism (fillscope.parallel); every rank returns the same latents. 1: one process.

    `step_cache` / `cache_threshold`: as sample_flux_fill (the positive and negative calls keep separate cache
    states, as diffusers' pipelines do).

    `transformer` may be an ExternalDenoiser (sampling.py; ComfyUI's own Flux2 MODEL: nodes/native_klein.py): no step
    cache, parallel 1, everything else as above; where the transformer is called (once a step, twice with CFG) the
    engine calls `call(tokens, t, guidance, text, grid, references, reference_ids, part)` -> velocity [B,N,C], the
    image tokens' only: tokens [B,N,C] the noisy image tokens alone (pack_tokens order; C = in_channels, 128
    published), t [B] the sigma in [0, 1] (the transformer's timestep), guidance [B] when its config has
    guidance_embeds else None (klein has none), text [B,L,D] the pass's Qwen3 states (positive, or the negative for
    CFG's uncond pass), grid (h, w) with N = h * w, references [B,Nref,C] and reference_ids [B,Nref,4] (t, row, col, 0;
    t = 10, 20, ... per reference) as the condition holds them, part "cond" or "uncond"."""
    import torch

    speed.check_step_cache(step_cache, cache_threshold)
    speed.check_with_parallel(step_cache, parallel)

    observe = observer_or_noop(observe)
    check_finite_settings(("guidance", guidance, "a finite number (base models: 4; ignored by distilled ones)"),
                          ("strength", strength, "a number in (0, 1]"))
    check_steps_and_denoise(steps, strength)
    if cond.is_edit and strength != 1.0:
        raise FillScopeInputError("strength", "the mask-free edit starts from noise (the image is a reference, not a "
                                  "start point).", "set strength to 1, or use the inpaint condition with a mask.")
    external = isinstance(transformer, ExternalDenoiser)
    if external:
        check_external_options(transformer.input_name, step_cache, parallel)
    model = None if external else transformer.model
    cfg = transformer.config
    width = text.embeds.shape[-1]
    if cfg.get("joint_attention_dim") != width:
        raise FillScopeInputError(
            "text", f"is {width} channels wide but this transformer reads {cfg.get('joint_attention_dim')} "
            f"(klein 4B: 7680 from Qwen3-4B; klein 9B: 12288 from Qwen3-8B).",
            "load the Qwen3 encoder that belongs with this transformer (4B with Qwen3-4B, 9B with Qwen3-8B).")
    channels = cond.references.shape[-1]  # the VAE's latent_channels x patch^2 (published 32 x 2x2 = 128)
    vae_ops.check_denoiser_widths(transformer, cond.vae, channels, f"{channels}-channel tokens", channels,
                                  "load the klein transformer and the FLUX.2 VAE of one model (published: 32 x 2x2 = "
                                  "in_channels 128).")
    use_cfg = guidance > 1.0 and not distilled
    if use_cfg and negative is None:
        raise FillScopeInputError("negative", "a base model with guidance > 1 needs the negative prompt's encoding.",
                                  "encode the negative prompt (\"\" as diffusers does) and connect it.")
    device, dtype = transformer.device, (transformer.dtype if external else model.dtype)
    b = cond.references.shape[0]
    h, w, n_tokens = cond.latent_height, cond.latent_width, cond.tokens
    for name, t in (("text", text), ("negative", negative)):
        if t is not None and t.embeds.shape[0] not in (1, b):
            raise FillScopeInputError(name, f"batch {t.embeds.shape[0]} for {b} images.",
                                      "give one prompt, or one per region/image separated by lines ---.")
    if parallel != 1:  # every text the transformer reads is split with the noisy and reference tokens
        for t in (text, negative) if use_cfg else (text,):
            check_parallel(parallel, cfg, n_tokens + cond.references.shape[1], t.embeds.shape[1])
    soft = soft_mask_latent(cond, soft_mask) if soft_mask is not None else None  # [B,1,h,w], checked before the skip
    if cond.is_empty:
        return SampledLatent(cond.source, cond.prepared, "flux2", unchanged=True, info={"skipped": "empty mask"})

    # tiled shared mode: the shift of the windows the transformer sees, not of the whole grid (whole-grid mu at
    # 6144x4096 is ~17: a 4-step schedule would keep sigma 1 for three steps)
    mu = compute_empirical_mu(n_tokens if schedule_tokens is None else int(schedule_tokens), steps)
    sigmas = truncate_for_denoise(flux_sigmas(steps, mu), steps, strength)
    if len(sigmas) < 2:
        raise FillScopeInputError("strength", f"{strength} leaves no step out of {steps}.", "raise strength or steps.")
    run_steps = len(sigmas) - 1
    shape = (b, channels, h, w)  # channels = the transformer's in_channels (checked above), as diffusers draws it
    noise = initial_noise(shape, seed, device, dtype) if noise is None else noise
    require_noise_shape(noise, shape)
    noise_tokens = pack_tokens(noise.to(device=device, dtype=dtype))  # [B,N,128]
    on_device = sigmas.to(device)
    tell_schedule(transformer, on_device)
    if cond.is_edit:
        x = noise_tokens
        source = mask = None
    else:
        source = pack_tokens(cond.source.to(device=device, dtype=dtype))  # [B,N,128]
        mask = cond.token_mask.to(device=device, dtype=dtype)  # [B,N,1]
        x = _noised(source, noise_tokens, on_device[0]).to(dtype)  # = noise at strength 1
    if soft is not None:
        step_sigmas = sigmas.tolist()
        sigma_first, sigma_end = differential_range(sigmas, flux_sigma_min(mu))
        soft_facts = describe_soft_mask(soft)
        observe("soft_mask.latent", soft)  # [B,1,h,w]
        soft_tokens = pack_tokens(soft).to(device)  # [B,N,1], float32
    references = cond.references.to(device=device, dtype=dtype)  # [B,Nref,128]
    img_ids = torch.cat([token_ids(h, w, 0, b, device), cond.reference_ids.to(device)], dim=1)  # [B,N+Nref,4]
    prompt = text.embeds.to(device=device, dtype=dtype).expand(b, -1, -1)  # [B,512,7680]
    txt_ids = text.text_ids.to(device).expand(b, -1, -1)
    if use_cfg:
        neg = negative.embeds.to(device=device, dtype=dtype).expand(b, -1, -1)
        neg_ids = negative.text_ids.to(device).expand(b, -1, -1)
    embedded = torch.full([b], guidance, device=device, dtype=torch.float32) if cfg.get("guidance_embeds") else None

    def denoise(x, model_input, timestep, states, ids, part):  # one pass -> (velocity [B,N,128], the whole output)
        if external:  # the image tokens' velocity only
            v = transformer.call(x, timestep, embedded, states, (h, w), references, cond.reference_ids.to(device), part)
            return v, v
        with speed.cache_context(model, cache, part):
            out = model(hidden_states=model_input, timestep=timestep, guidance=None, encoder_hidden_states=states,
                        txt_ids=ids, img_ids=img_ids, return_dict=False)[0]  # [B,N+Nref,128]
        return out[:, :n_tokens], out  # the reference tokens' outputs are not used

    observe("initial_noise", noise)
    observe("noisy_latents.packed", x)
    observe("img_ids", img_ids)
    observe("txt_ids", txt_ids)
    with (torch.inference_mode(), context_parallel(model, parallel),  # parallel 1: the model as it is
          speed.step_cache(model, step_cache, run_steps, cache_threshold) as cache):  # off: None, nothing on
        for i in range(run_steps):
            timestep = (on_device[i] * 1000.0).expand(b).to(x.dtype) / 1000
            model_input = torch.cat([x, references], dim=1).to(dtype) if not external or i == 0 else None  # N+Nref
            velocity, out = denoise(x, model_input, timestep, prompt, txt_ids, "cond")
            if use_cfg:
                uncond, _ = denoise(x, model_input, timestep, neg, neg_ids, "uncond")
                velocity = uncond + guidance * (velocity - uncond)
            if i == 0:
                observe("transformer.input", model_input)
                observe("transformer.output", out)
                observe("transformer.output.kept", velocity)
                require_finite_first_step("transformer", velocity, (("text", [prompt], "the Qwen3 text encoder"),
                                          ("condition", references, "the FLUX.2 VAE (reference latents)")),
                                          component=None if external else transformer)
            x = euler_step(x, velocity, on_device[i], on_device[i + 1])
            if soft is not None:
                free = differential_mask(soft_tokens, step_sigmas[i], sigma_first, sigma_end)
                x = blend_with_source(x, source, noise_tokens, free, step_sigmas[i + 1])
            elif mask is not None:
                # unmasked tokens follow the source along the schedule (the clean source after the last step)
                kept = _noised(source, noise_tokens, on_device[i + 1]) if i < run_steps - 1 else source
                x = ((1 - mask) * kept + mask * x).to(x.dtype)
            observe_step(observe, i, velocity, x)
            if callback is not None:
                callback(i + 1, run_steps)
    require_finite_result("transformer", x)
    out_latents = unpack_tokens(x, h, w)  # [B,128,h,w]
    observe("latent.unpacked", out_latents)
    info = {"steps_run": run_steps, "mu": mu, "sigma_start": float(sigmas[0]), "sigma_last_step": float(sigmas[-2]),
            "tokens": n_tokens, "reference_tokens": cond.references.shape[1], "cfg": use_cfg,
            "transformer_calls": run_steps * (2 if use_cfg else 1)}
    if soft is not None:
        info["differential_diffusion"] = soft_facts
    if parallel != 1:
        info["context_parallel"] = rank_shapes(cfg, parallel, n_tokens + references.shape[1], prompt.shape[1], b)
    if cache is not None:
        info.update(cache.facts())
    return SampledLatent(out_latents, cond.prepared, "flux2", info=info)


def _noised(clean, noise, sigma):
    """diffusers' scale_noise: sigma * noise + (1 - sigma) * clean, sigma in float32."""
    return sigma * noise + (1.0 - sigma) * clean


# --- the whole pipeline -------------------------------------------------------------------------------------------

@dataclass
class KleinResult:
    """Every stage's output of one `run` / `run_edit`."""

    text: KleinText
    negative: KleinText | None
    condition: KleinCondition
    latent: SampledLatent
    image: object  # IMAGE [B,H,W,3]

    @property
    def positive(self):
        return self.text


def _encode_texts(qwen3, prompt, negative_prompt, use_cfg, observe):
    positive = encode_prompt(qwen3, prompt, observe=observe)
    negative = encode_prompt(qwen3, negative_prompt) if use_cfg else None
    return positive, negative


@cached_on_meta(stack_transformer)
def run(stack: dict[str, Component], prompt: str, prepared: PreparedInput, *, reference=None,
        negative_prompt: str = "", steps: int = DISTILLED_STEPS, guidance: float = BASE_GUIDANCE,
        model_type: str = "auto", strength: float = 1.0, token_mask: str = "cover", seed: int = 0,
        callback=None, noise=None, observe=None, timings: dict | None = None, place=None,
        soft_mask=None, parallel: int = 1, step_cache: str = "off", cache_threshold: float | None = None
        ) -> KleinResult:
    """Inpaint: the whole pipeline on a stack named as COMPONENTS (steps 1-4 above, in order). `timings` and
    `place` as in flux_fill.run; `soft_mask`: differential diffusion in step 3 (sample_klein); `parallel`: this call
    is one of that many ranks of a process group."""
    qwen3, transformer, vae = (stack[name] for name in COMPONENTS)
    distilled, _ = resolve_distilled(transformer, model_type)
    use_cfg = guidance > 1.0 and not distilled
    with stage("encode_prompt", [qwen3], timings=timings, place=place):
        positive, negative = _encode_texts(qwen3, prompt, negative_prompt, use_cfg, observe)  # 1
    with stage("build_inpaint_condition", [vae], timings=timings, place=place):
        condition = build_inpaint_condition(vae, prepared, reference, token_mask=token_mask, observe=observe)  # 2
    with stage("sample_klein", [transformer], timings=timings, place=place):
        latent = sample_klein(transformer, positive, condition, steps=steps, guidance=guidance, distilled=distilled,
                              negative=negative, strength=strength, seed=seed, callback=callback, noise=noise,
                              observe=observe, soft_mask=soft_mask, parallel=parallel, step_cache=step_cache,
                              cache_threshold=cache_threshold)  # 3
    with stage("decode_to_image", [vae], timings=timings, place=place):
        image = decode_to_image(vae, latent, observe=observe)  # 4
    return KleinResult(positive, negative, condition, latent, image)


@cached_on_meta(stack_transformer)
def run_edit(stack: dict[str, Component], prompt: str, references: list, *, width: int = 0, height: int = 0,
             negative_prompt: str = "", steps: int = DISTILLED_STEPS, guidance: float = BASE_GUIDANCE,
             model_type: str = "auto", seed: int = 0, callback=None, noise=None, observe=None,
             timings: dict | None = None, place=None) -> KleinResult:
    """The mask-free edit (Flux2KleinPipeline with reference images): steps 1, 2 (edit), 3, 4."""
    qwen3, transformer, vae = (stack[name] for name in COMPONENTS)
    distilled, _ = resolve_distilled(transformer, model_type)
    use_cfg = guidance > 1.0 and not distilled
    with stage("encode_prompt", [qwen3], timings=timings, place=place):
        positive, negative = _encode_texts(qwen3, prompt, negative_prompt, use_cfg, observe)
    with stage("build_edit_condition", [vae], timings=timings, place=place):
        condition = build_edit_condition(vae, references, width=width, height=height, observe=observe)
    with stage("sample_klein", [transformer], timings=timings, place=place):
        latent = sample_klein(transformer, positive, condition, steps=steps, guidance=guidance, distilled=distilled,
                              negative=negative, seed=seed, callback=callback, noise=noise, observe=observe)
    with stage("decode_to_image", [vae], timings=timings, place=place):
        image = decode_to_image(vae, latent, observe=observe)
    return KleinResult(positive, negative, condition, latent, image)


def title_for(model: str) -> str:
    return f"{TITLE} {model.removeprefix('klein-').upper()}"


def stages(stack: dict[str, Component], prompt: str, prepared: PreparedInput, done: KleinResult,
           *, seed: int = 0, negative_prompt: str = "") -> list:
    """Each stage alone, as (label, the components it runs, a callable that re-runs it from `done`'s inputs)."""
    return [
        ("text encoder", ["qwen3"], lambda: encode_prompt(stack["qwen3"], prompt)),
        ("VAE encode", ["vae"], lambda: build_inpaint_condition(stack["vae"], prepared)),
        ("denoiser step", ["transformer"],
         lambda: sample_klein(stack["transformer"], done.text, done.condition, steps=1, seed=seed)),
        ("VAE decode", ["vae"], lambda: decode_to_image(stack["vae"], done.latent)),
    ]


def traced_modules(stack: dict[str, Component]) -> dict:
    """The modules the tracers hook, by component name."""
    return {name: comp.model for name, comp in stack.items()}


def parameters_not_run(stack: dict[str, Component]) -> dict[str, int]:
    """Instantiated parameters this pipeline never computes with: none (Qwen3 is built without the layers and the
    LM head klein never reads; see specs.qwen3_kept_config)."""
    return {}


def transformer_variant(config) -> str | None:
    """klein-4b / klein-9b from a transformer config (None for a size of its own, e.g. a tiny test model)."""
    for variant in VARIANTS:
        shipped = shipped_config("klein_transformer", variant)
        if all(config.get(k) == shipped[k] for k in ("num_layers", "num_single_layers", "num_attention_heads")):
            return variant
    return None
