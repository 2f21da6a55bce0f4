"""diffusers' own pipelines run on FillScope's loaded components, captured under FillScope's boundary names, so that a
FillScope run and a diffusers run of one job line up boundary by boundary (fillscope.compare.capture).

    run_diffusers(family, stack, prompt, prepared, *, steps, seed, capture, **options) -> image [B,3,H,W] in [0,1]

family: a pipeline module's name ("flux_fill", "sd3_controlnet", "klein"); stack: what `<family>.load_stack` returns
(the torch modules are `Component.model`, the tokenizers `Component.tokenizer`); prepared: the PreparedInput
FillScope's `run` takes. The diffusers pipeline (FluxFillPipeline, StableDiffusion3ControlNetInpaintingPipeline,
Flux2KleinInpaintPipeline) is built from those same in-memory modules, nothing read from disk again, with a new
FlowMatchEulerDiscreteScheduler from FillScope's shipped scheduler config (configs/flux_scheduler.json for FLUX.1 and
klein, configs/sd3_scheduler.json for SD3), as from_pretrained builds it from the repository's scheduler_config.json.

Inputs, made equal to FillScope's run:
- image: [0,1] NCHW, the pipeline normalising it to [-1,1] as FillScope does (prepared.source when the grid is the
  input's size and its 2x - 1 is bit for bit prepared.image; else (prepared.image + 1) / 2), contiguous as
  prepared.image is (diffusers keeps a tensor's strides, and the VAE rounds differently on a channels-last view:
  5.8e-6 relative in FLUX's masked-image latents, 4.3e-7 in klein's reference latents, measured on the tiny models);
  SD3 takes the tensors untouched, so it gets prepared.image and prepared.mask as they are; klein's reference IMAGE
  goes in as [B,3,H,W] in [0,1], contiguous;
- mask: prepared.mask (already binarised by FillScope's prepare step; diffusers' binarise at 0.5 leaves it as is);
- VAE encodes by the latent mean (FillScope's; diffusers' FLUX Fill and SD3 sample: switched to the mean for the call,
  as tests/tiny_flux.py and tests/tiny_sd3.py do; klein's pipelines already take the mean);
- noise: `torch.Generator("cpu").manual_seed(seed)`, whose first draw is the noise in every pipeline once the encodes
  draw nothing (fillscope.sampling.initial_noise draws it the same way);
- CLIP token length 77 (FillScope's; diffusers reads tokenizer.model_max_length, 8192 in ComfyUI's tokenizer files).

Options (**options) per family, FillScope's names and defaults:
- flux_fill: guidance (30.0), denoise (1.0 -> diffusers' strength);
- sd3_controlnet: negative_prompt (""), cfg (7.0), control_scale (0.95), control_start (0.0), control_end (1.0),
  shift (None: the shipped config's 3.0; else the scheduler is built with it);
- klein: guidance (4.0), strength (1.0), reference (IMAGE [B,H,W,3] or None), model_type ("auto": the transformer's
  is_distilled, as FillScope resolves it).
FillScope options that diffusers has no counterpart for are taken only at diffusers' behaviour, so that one options
dict can serve both runs: residual_mapping "diffusers", denoise 1 (SD3); token_mask "bilinear", negative_prompt ""
(klein); soft_mask None (all); any other value, or an unknown option, is a FillScopeInputError. One prompt a run (no
lines ---).

Known differences that remain visible (not numeric): with control_start/control_end leaving step 1 outside the
window, diffusers runs the ControlNet at scale 0 (its residuals exact zeros, captured) where FillScope skips it (the
same sum; no controlnet.residual[k] observed); an empty mask makes FillScope skip sampling while diffusers samples.

What is captured and how (diffusers' quantity -> FillScope's name; "layout" says any conversion):

| FillScope name | diffusers source | layout |
|---|---|---|
| clip_l.input_ids, clip_g.input_ids, t5.input_ids, qwen3.input_ids, qwen3.attention_mask | forward pre-hook on text_encoder(_2/_3), first call (the positive prompt) | as is |
| clip_l.pooled (FLUX) | text_encoder output .pooler_output | as is |
| clip_l.penultimate, clip_g.penultimate / clip_l.text_embeds, clip_g.text_embeds (SD3) | text_encoder(_2) output .hidden_states[-2] / [0] | as is |
| t5.hidden | text_encoder_2 (FLUX) / text_encoder_3 (SD3) output [0] | as is |
| joint_context, pooled (SD3); prompt_embeds (klein) | pipe.encode_prompt's return, first call | as is |
| clip_lg.padded (SD3) | joint_context[:, :77] (the zero-padded CLIP part diffusers concatenates first) | a slice |
| masked_image (FLUX, SD3) | prepare_mask_latents' argument (FLUX); the VAE encode's input (SD3) | as is |
| masked_image_latents.packed, mask.packed, fill_condition (FLUX) | prepare_mask_latents' return; its cat along channels | cat as the pipeline does it |
| masked_image_latents (FLUX) | unpack of the packed masked-image latents ([B,N,4C] -> [B,C,h,w]) | a permutation |
| masked_image_latents, keep_mask.latent, inpaint_condition (SD3) | prepare_image_with_mask's return [B,C+1,h,w] split: [:, :C], [:, C:], whole (its un-duplicated first B under CFG) | slices |
| source_latents, noisy_latents.packed (klein) | prepare_latents' return (image_latents, latents) | as is |
| reference_tokens, reference_ids, token_mask (klein) | prepare_image_latents' / prepare_mask_latents' return | as is |
| reference_0.latents (klein) | _encode_vae_image's return for the reference image | as is |
| initial_noise | randn_tensor's result inside the pipeline's module (the noise draw) | as is |
| noisy_latents.packed (FLUX) | prepare_latents' return | as is |
| txt_ids, img_ids (FLUX, klein); sampler.context, sampler.pooled (SD3) | transformer's keyword inputs at its first call | as is |
| control_image (SD3) | the ControlNet's controlnet_cond at its first call | as is |
| transformer.input | the transformer's hidden_states at its first call (forward pre-hook, with_kwargs) | as is |
| transformer.output | the transformer's output [0] at its first call (SD3: the [2B] CFG batch; klein: all tokens) | as is |
| controlnet.residual[0], controlnet.residual[K-1] (SD3) | the ControlNet's output [0] at its first call | as is |
| step[i].denoiser; velocity.guided (SD3), transformer.output.kept (klein) at i = 1 | scheduler.step's model_output (the velocity after CFG, wrapped on the instance) | as is |
| step[i].latent | callback_on_step_end's latents (after klein's re-blend) | as is |
| latent.unpacked (FLUX, klein), latent (SD3) | _unpack_latents (FLUX) / _unpack_latents_with_ids (klein) return; the last step's latents (SD3) | as is |
| decoded_image | vae.decode's output [B,3,H,W] in [-1,1] (wrapped on the instance for the call) | as is |

Every hook and instance wrap is removed when the call returns (the modules are FillScope's, shared with its stack).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

from ..errors import FillScopeInputError
from ..specs import scheduler_config
from ..text import CLIP_MAX_LENGTH

FAMILIES = ("flux_fill", "sd3_controlnet", "klein")


def run_diffusers(family: str, stack: dict, prompt: str, prepared, *, steps: int, seed: int, capture, **options):
    """diffusers' own pipeline for `family` on `stack`'s modules, every boundary it exposes handed to `capture(name,
    tensor)` under FillScope's name (module docstring) -> the pipeline's image [B,3,H,W] in [0,1]."""
    if family not in FAMILIES:
        raise FillScopeInputError("family", f"unknown family {family!r}.", f"use one of {', '.join(FAMILIES)}.")
    meta = [name for name, comp in stack.items() if getattr(comp, "is_meta", False)]
    if meta:
        raise FillScopeInputError("stack", f"{', '.join(meta)} are on the meta device: there are no values to run "
                                  "diffusers' pipeline on.", "load the stack with real or placeholder weights.")
    run = {"flux_fill": _run_flux_fill, "sd3_controlnet": _run_sd3_controlnet, "klein": _run_klein}[family]
    with ExitStack() as undo:
        return run(undo, stack, prompt, prepared, steps, seed, capture, dict(options))


# --- shared machinery ---------------------------------------------------------------------------------------------

def _generator(seed: int):
    import torch

    return torch.Generator("cpu").manual_seed(int(seed))


def _scheduler(name: str):
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(**scheduler_config(name))


def _only(options: dict, name: str, allowed, why: str) -> None:
    """A FillScope option diffusers has no counterpart for: taken when it has diffusers' behaviour (so one options
    dict can serve both runs), refused otherwise."""
    if name in options and options.pop(name) != allowed:
        raise FillScopeInputError(name, f"must be {allowed!r} for the diffusers run: {why}.",
                                  f"set {name} to {allowed!r} in both runs to compare them.")


def _single_prompt(prompt: str) -> None:
    from ..text import split_prompts

    if len(split_prompts(prompt)) != 1:
        raise FillScopeInputError("prompt", "holds several prompts (lines ---); the diffusers run takes one.",
                                  "compare one prompt at a time.")


def _refuse_leftovers(options: dict, family: str) -> None:
    if options:
        raise FillScopeInputError("options", f"{', '.join(sorted(options))} are not options of the {family} "
                                  "comparison run.", "pass only the options the module docstring lists.")


def _as_clip_text_model(model):
    """FluxFillPipeline reads CLIPTextModel's pooler_output; a CLIP-L loaded with its projection (a single file of
    ComfyUI's: CLIPTextModelWithProjection) holds a CLIPTextModel as its text_model (transformers 5), which diffusers
    is given: the same weights, and the pooled output FillScope takes (text.clip_text_model)."""
    from transformers import CLIPTextModel

    if isinstance(model, CLIPTextModel):
        return model
    inner = getattr(model, "text_model", None)
    if not isinstance(inner, CLIPTextModel):
        raise FillScopeInputError("clip_l", f"is a {type(model).__name__} holding no CLIPTextModel: diffusers' FLUX "
                                            "pipeline cannot take it.", "load CLIP-L as a CLIP text model.")
    return inner


def _unit_pixels(prepared):
    """[B,3,H,W] in [0,1] whose 2x - 1 is prepared.image (bit for bit when the source is the grid), in prepared.image's
    memory layout: diffusers keeps a tensor's strides through its preprocessing, and the VAE's convolutions round
    differently on a channels-last view (prepared.source.permute is one) than on FillScope's contiguous NCHW pixels
    (measured on the tiny FLUX VAE: 5.8e-6 relative in the masked-image latents)."""
    image = prepared.image
    if prepared.geometry.mode == "exact":
        source = prepared.source.permute(0, 3, 1, 2)
        if source.shape == image.shape and bool((source * 2 - 1 == image).all()):
            return source.contiguous() if image.is_contiguous() else source
    return (image + 1) / 2


@contextmanager
def _instance_attr(obj, name: str, value):
    """obj.name = value for the block (an instance attribute over the class's method), removed afterwards."""
    had = name in vars(obj)
    old = vars(obj).get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


def _wrap(undo: ExitStack, obj, name: str, after):
    """obj.name(...) -> after(result, args, kwargs) sees every call's result (and may return a replacement)."""
    original = getattr(obj, name)

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        replaced = after(out, args, kwargs)
        return out if replaced is None else replaced

    undo.enter_context(_instance_attr(obj, name, wrapped))


def _first_call_hooks(undo: ExitStack, module, *, before=None, after=None) -> None:
    """Forward hooks on `module` that run `before(args, kwargs)` / `after(output)` at its first call only."""
    calls = [0, 0]

    def pre(m, args, kwargs):
        calls[0] += 1
        if calls[0] == 1:
            before(args, kwargs)

    def post(m, args, output):
        calls[1] += 1
        if calls[1] == 1:
            after(output)

    if before is not None:
        undo.callback(module.register_forward_pre_hook(pre, with_kwargs=True).remove)
    if after is not None:
        undo.callback(module.register_forward_hook(post).remove)


def _input_ids(capture, prefix: str):
    def keep(args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        capture(f"{prefix}.input_ids", ids)
        if kwargs.get("attention_mask") is not None:
            capture(f"{prefix}.attention_mask", kwargs["attention_mask"])
    return keep


def _capture_transformer(undo, capture, transformer, kwarg_names: dict) -> None:
    """transformer.input / transformer.output at the first call, and the keyword inputs `kwarg_names` maps
    (diffusers' keyword -> FillScope's name)."""
    def before(args, kwargs):
        capture("transformer.input", kwargs["hidden_states"])
        for key, name in kwarg_names.items():
            capture(name, kwargs.get(key))

    _first_call_hooks(undo, transformer, before=before, after=lambda out: capture("transformer.output", out[0]))


def _capture_steps(undo, capture, scheduler, first_step_names=()) -> dict:
    """step[i].denoiser from scheduler.step's model_output (i from 1), also under `first_step_names` at i = 1;
    returns the call kwargs' callback_on_step_end, which captures step[i].latent and keeps the last latents."""
    seen = {"steps": 0, "last": None}
    original = scheduler.step

    def step(model_output, *args, **kwargs):
        seen["steps"] += 1
        capture(f"step[{seen['steps']}].denoiser", model_output)
        if seen["steps"] == 1:
            for name in first_step_names:
                capture(name, model_output)
        return original(model_output, *args, **kwargs)

    undo.enter_context(_instance_attr(scheduler, "step", step))

    def on_step_end(pipe, i, t, tensors):
        capture(f"step[{i + 1}].latent", tensors["latents"])
        seen["last"] = tensors["latents"]
        return {}

    seen["callback"] = on_step_end
    return seen


def _capture_decode(undo, capture, vae) -> None:
    def after(out, args, kwargs):
        capture("decoded_image", out[0] if isinstance(out, tuple) else out.sample)

    _wrap(undo, vae, "decode", after)


def _capture_noise(undo, capture, module) -> None:
    """The pipeline module's randn_tensor (looked up by global name at each call) records what it draws."""
    original = module.randn_tensor

    def randn_tensor(*args, **kwargs):
        out = original(*args, **kwargs)
        capture("initial_noise", out)
        return out

    undo.enter_context(_instance_attr(module, "randn_tensor", randn_tensor))


def _quiet(pipe):
    pipe.set_progress_bar_config(disable=True)
    return pipe


# --- FLUX.1 Fill ---------------------------------------------------------------------------------------------------

def _run_flux_fill(undo, stack, prompt, prepared, steps, seed, capture, options):
    import torch
    from diffusers import FluxFillPipeline
    from diffusers.pipelines.flux import pipeline_flux_fill as module

    guidance = options.pop("guidance", 30.0)
    strength = options.pop("denoise", 1.0)
    _only(options, "soft_mask", None, "FluxFillPipeline has no differential diffusion")
    _refuse_leftovers(options, "flux_fill")
    _single_prompt(prompt)
    clip_l, t5, transformer, vae = (stack[n] for n in ("clip_l", "t5", "transformer", "vae"))
    clip_model = _as_clip_text_model(clip_l.model)
    pipe = _quiet(FluxFillPipeline(scheduler=_scheduler("flux"), vae=vae.model, text_encoder=clip_model,
                                   tokenizer=clip_l.tokenizer, text_encoder_2=t5.model, tokenizer_2=t5.tokenizer,
                                   transformer=transformer.model))
    pipe.tokenizer_max_length = CLIP_MAX_LENGTH

    original_retrieve = module.retrieve_latents

    def retrieve_mean(encoder_output, generator=None, sample_mode="sample"):
        return original_retrieve(encoder_output, generator=generator, sample_mode="argmax")

    undo.enter_context(_instance_attr(module, "retrieve_latents", retrieve_mean))
    _capture_noise(undo, capture, module)
    _first_call_hooks(undo, clip_model, before=_input_ids(capture, "clip_l"),
                      after=lambda out: capture("clip_l.pooled", out.pooler_output))
    _first_call_hooks(undo, t5.model, before=_input_ids(capture, "t5"), after=lambda out: capture("t5.hidden", out[0]))

    def mask_latents(out, args, kwargs):
        packed_mask, packed_latents = out
        capture("masked_image", kwargs.get("masked_image", args[1] if len(args) > 1 else None))
        h, w = prepared.image.shape[-2:]  # the class's static unpack: the instance's is wrapped for the final latent
        capture("masked_image_latents", FluxFillPipeline._unpack_latents(packed_latents, h, w, pipe.vae_scale_factor))
        capture("masked_image_latents.packed", packed_latents)
        capture("mask.packed", packed_mask)
        capture("fill_condition", torch.cat((packed_latents, packed_mask), dim=-1))

    _wrap(undo, pipe, "prepare_mask_latents", mask_latents)
    _wrap(undo, pipe, "prepare_latents", lambda out, a, k: capture("noisy_latents.packed", out[0]))
    _capture_transformer(undo, capture, transformer.model, {"txt_ids": "txt_ids", "img_ids": "img_ids"})
    steps_seen = _capture_steps(undo, capture, pipe.scheduler)
    _wrap(undo, pipe, "_unpack_latents", lambda out, a, k: capture("latent.unpacked", out))
    _capture_decode(undo, capture, vae.model)
    h, w = prepared.image.shape[-2:]
    return pipe(prompt=prompt, image=_unit_pixels(prepared), mask_image=prepared.mask, height=h, width=w,
                strength=strength, num_inference_steps=steps, guidance_scale=guidance, max_sequence_length=512,
                generator=_generator(seed), output_type="pt", callback_on_step_end=steps_seen["callback"]).images


# --- SD3 + alimama inpainting ControlNet --------------------------------------------------------------------------

def _run_sd3_controlnet(undo, stack, prompt, prepared, steps, seed, capture, options):
    from diffusers import StableDiffusion3ControlNetInpaintingPipeline
    from diffusers.pipelines.controlnet_sd3 import pipeline_stable_diffusion_3_controlnet_inpainting as module

    negative = options.pop("negative_prompt", "")
    cfg = options.pop("cfg", 7.0)
    control = {"controlnet_conditioning_scale": options.pop("control_scale", 0.95),
               "control_guidance_start": options.pop("control_start", 0.0),
               "control_guidance_end": options.pop("control_end", 1.0)}
    shift = options.pop("shift", None)
    _only(options, "residual_mapping", "diffusers", "diffusers >= 0.32 adds residual int(i * 23 / 24) after block i")
    _only(options, "denoise", 1.0, "the pipeline has no init image: it always starts from noise")
    _only(options, "soft_mask", None, "the pipeline has no differential diffusion")
    _refuse_leftovers(options, "sd3_controlnet")
    _single_prompt(prompt)
    scheduler = _scheduler("sd3")
    if shift is not None:  # FillScope's shift input: the scheduler built with it, as from a config saying so
        from diffusers import FlowMatchEulerDiscreteScheduler

        scheduler = FlowMatchEulerDiscreteScheduler(**{**scheduler_config("sd3"), "shift": float(shift)})
    parts = {n: stack[n] for n in ("clip_l", "clip_g", "t5", "transformer", "controlnet", "vae")}
    pipe = _quiet(StableDiffusion3ControlNetInpaintingPipeline(
        transformer=parts["transformer"].model, scheduler=scheduler, vae=parts["vae"].model,
        text_encoder=parts["clip_l"].model, tokenizer=parts["clip_l"].tokenizer,
        text_encoder_2=parts["clip_g"].model, tokenizer_2=parts["clip_g"].tokenizer,
        text_encoder_3=parts["t5"].model, tokenizer_3=parts["t5"].tokenizer, controlnet=parts["controlnet"].model))
    pipe.tokenizer_max_length = CLIP_MAX_LENGTH

    vae = parts["vae"].model
    original_encode = vae.encode
    encodes = []

    def encode_mean(x, return_dict: bool = True):
        """The masked control image's encode by the latent mean (diffusers samples from the global RNG here)."""
        if not encodes:
            capture("masked_image", x)
        encodes.append(1)
        out = original_encode(x, return_dict=return_dict)
        dist = out.latent_dist if return_dict else out[0]
        dist.sample = lambda generator=None: dist.mode()
        return out

    undo.enter_context(_instance_attr(vae, "encode", encode_mean))
    _capture_noise(undo, capture, module)
    for comp, prefix in ((parts["clip_l"], "clip_l"), (parts["clip_g"], "clip_g")):
        def after(out, prefix=prefix):
            capture(f"{prefix}.penultimate", out.hidden_states[-2])
            capture(f"{prefix}.text_embeds", out[0])
        _first_call_hooks(undo, comp.model, before=_input_ids(capture, prefix), after=after)
    _first_call_hooks(undo, parts["t5"].model, before=_input_ids(capture, "t5"),
                      after=lambda out: capture("t5.hidden", out[0]))

    def prompts(out, args, kwargs):
        context, _, pooled, _ = out
        capture("clip_lg.padded", context[:, :CLIP_MAX_LENGTH])
        capture("joint_context", context)
        capture("pooled", pooled)

    _wrap(undo, pipe, "encode_prompt", prompts)

    def condition(out, args, kwargs):
        b = prepared.image.shape[0]
        first = out[:b]  # under CFG the pipeline returns it twice, [negative, positive]
        c = first.shape[1] - 1
        capture("masked_image_latents", first[:, :c])
        capture("keep_mask.latent", first[:, c:])
        capture("inpaint_condition", first)

    _wrap(undo, pipe, "prepare_image_with_mask", condition)
    _capture_transformer(undo, capture, parts["transformer"].model,
                         {"encoder_hidden_states": "sampler.context", "pooled_projections": "sampler.pooled"})

    def residuals(out):
        blocks = out[0]
        capture("controlnet.residual[0]", blocks[0])
        capture(f"controlnet.residual[{len(blocks) - 1}]", blocks[-1])

    _first_call_hooks(undo, parts["controlnet"].model, before=lambda a, k: capture("control_image", k["controlnet_cond"]),
                      after=residuals)
    steps_seen = _capture_steps(undo, capture, pipe.scheduler, first_step_names=("velocity.guided",))

    def decoded(out, args, kwargs):  # the loop is over: its last latents are the sampler's result
        capture("latent", steps_seen["last"])
        capture("decoded_image", out[0] if isinstance(out, tuple) else out.sample)

    _wrap(undo, vae, "decode", decoded)
    h, w = prepared.image.shape[-2:]
    out = pipe(prompt=prompt, negative_prompt=negative, control_image=prepared.image, control_mask=prepared.mask,
               height=h, width=w, num_inference_steps=steps, guidance_scale=cfg, max_sequence_length=256,
               generator=_generator(seed), output_type="pt", callback_on_step_end=steps_seen["callback"],
               **control).images
    if not encodes:
        raise RuntimeError("StableDiffusion3ControlNetInpaintingPipeline no longer calls vae.encode: the mean encode "
                           "was not applied")
    return out


# --- FLUX.2 [klein] -------------------------------------------------------------------------------------------------

def _run_klein(undo, stack, prompt, prepared, steps, seed, capture, options):
    from diffusers import Flux2KleinInpaintPipeline
    from diffusers.pipelines.flux2 import pipeline_flux2_klein_inpaint as module

    from ..pipelines.klein import resolve_distilled

    guidance = options.pop("guidance", 4.0)
    strength = options.pop("strength", 1.0)
    reference = options.pop("reference", None)
    distilled, _ = resolve_distilled(stack["transformer"], options.pop("model_type", "auto"))
    _only(options, "token_mask", "bilinear", "the pipeline resizes the mask bilinearly to the token grid")
    _only(options, "negative_prompt", "", "the pipeline's CFG always encodes \"\" as the negative prompt")
    _only(options, "soft_mask", None, "the pipeline has no differential diffusion")
    _refuse_leftovers(options, "klein")
    _single_prompt(prompt)
    qwen3, transformer, vae = (stack[n] for n in ("qwen3", "transformer", "vae"))
    pipe = _quiet(Flux2KleinInpaintPipeline(scheduler=_scheduler("flux"), vae=vae.model, text_encoder=qwen3.model,
                                            tokenizer=qwen3.tokenizer, transformer=transformer.model,
                                            is_distilled=distilled))
    _capture_noise(undo, capture, module)
    _first_call_hooks(undo, qwen3.model, before=_input_ids(capture, "qwen3"))
    prompt_calls = []

    def prompts(out, args, kwargs):
        prompt_calls.append(1)
        if len(prompt_calls) == 1:
            capture("prompt_embeds", out[0])

    _wrap(undo, pipe, "encode_prompt", prompts)

    def latents(out, args, kwargs):
        noisy, _, _, source, _ = out
        capture("source_latents", source)
        capture("noisy_latents.packed", noisy)

    _wrap(undo, pipe, "prepare_latents", latents)
    encodes = []

    def encoded(out, args, kwargs):
        encodes.append(1)
        if len(encodes) > 1:  # the first encode is the source's (source_latents)
            capture(f"reference_{len(encodes) - 2}.latents", out)

    _wrap(undo, pipe, "_encode_vae_image", encoded)

    def references(out, args, kwargs):
        capture("reference_tokens", out[0])
        capture("reference_ids", out[1])

    _wrap(undo, pipe, "prepare_image_latents", references)
    _wrap(undo, pipe, "prepare_mask_latents", lambda out, a, k: capture("token_mask", out))
    _capture_transformer(undo, capture, transformer.model, {"img_ids": "img_ids", "txt_ids": "txt_ids"})
    steps_seen = _capture_steps(undo, capture, pipe.scheduler, first_step_names=("transformer.output.kept",))
    _wrap(undo, pipe, "_unpack_latents_with_ids", lambda out, a, k: capture("latent.unpacked", out))
    _capture_decode(undo, capture, vae.model)
    h, w = prepared.image.shape[-2:]
    return pipe(prompt=prompt, image=_unit_pixels(prepared), mask_image=prepared.mask,
                image_reference=None if reference is None else reference.permute(0, 3, 1, 2).contiguous(),
                strength=strength,
                num_inference_steps=steps, guidance_scale=guidance, height=h, width=w, generator=_generator(seed),
                output_type="pt", callback_on_step_end=steps_seen["callback"]).images
