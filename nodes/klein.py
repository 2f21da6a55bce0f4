"""FLUX.2 [klein] nodes: the inpaint and the reference-edit conditions, and the sampler (the loaders are in
loaders.py, Qwen3 Encode in text.py; decode and paste-back are the shared nodes in image.py)."""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.decode import to_comfy_latent
from ..fillscope.errors import FillScopeInputError
from ..fillscope.masks import check_reference_batches
from ..fillscope.pipelines.klein import (
    BASE_GUIDANCE,
    DISTILLED_STEPS,
    MODEL_TYPES,
    TOKEN_MASKS,
    VARIANTS,
    build_edit_condition,
    build_inpaint_condition,
    diffusers_downscale_note,
    resolve_distilled,
    sample_klein,
    soft_mask_latent,
    transformer_variant,
)
from ..fillscope.sampling import check_external_options
from ..fillscope.specs import shipped_config
from ..fillscope.speed import KLEIN_STEP_CACHES
from . import common as c
from . import native_klein, native_model
from . import tooltips as tips
from .base import FillScopeNode
from .native_vae import KLEIN_VAE_TOOLTIP, as_fillscope_vae, vae_input

CATEGORY = c.CATEGORY + "/flux2 klein"
TABLE = "klein"


def note_reference_crop(rec, name: str, image) -> None:
    """The engine centre-crops a reference to multiples of 16 px (one token); say so when that drops pixels."""
    rec.tensor(name, image, "input")
    h, w = image.shape[-3], image.shape[-2]
    if h % 16 or w % 16:
        rec.note(f"{name} {w}x{h}: centre-cropped to {w // 16 * 16}x{h // 16 * 16} (multiples of 16 px, one token)")


class KleinInpaintCondition(FillScopeNode):
    title = "klein inpaint condition"
    table = TABLE

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeKleinInpaintCondition",
            display_name="Klein Inpaint Condition",
            category=CATEGORY,
            description=(
                "VAE-encodes the whole source (FLUX.2: [B, 128, H/16, W/16], BatchNorm-normalised); its tokens are both "
                "the reference the transformer attends to (time offset 10) and what the sampler re-blends the kept "
                "area with every step. The mask becomes one value per 16x16-px token; an optional reference image "
                "('put this object there') follows at time offset 20."
            ),
            inputs=[
                vae_input(c.Vae.Input("vae", tooltip=KLEIN_VAE_TOOLTIP)),
                *c.mask_inputs(),
                io.Combo.Input(
                    "token_mask", options=list(TOKEN_MASKS), default="cover",
                    tooltip="How the pixel mask becomes one value per 16x16-px token. cover: every token a masked pixel "
                            "touches is repainted (a thin mask is never lost). bilinear: diffusers' resize, which samples "
                            "each block's centre (a thin line between centres repaints nothing)."),
                io.Image.Input("reference", optional=True,
                               tooltip="Optional reference image the model sees next to the source (e.g. the object to "
                                       "put in the mask); centre-cropped to multiples of 16 px."),
            ],
            outputs=[c.KleinCondition.Output("condition", display_name="condition"), c.shapes_output()],
        )

    @classmethod
    def prepare(cls, rec, vae, token_mask, reference=None, **mask_options):
        vae = as_fillscope_vae(vae, "flux2")  # ComfyUI's VAE: checked to be FLUX.2's before anything runs
        prepared = c.prepare_masked_input(rec, **mask_options)
        downscale = diffusers_downscale_note(prepared)
        if downscale:
            rec.warn(downscale)
        if reference is not None:
            check_reference_batches([("reference", reference)], prepared.image.shape[0], "the image's batch")
            note_reference_crop(rec, "reference", reference)
        return {"vae": vae, "prepared": prepared, "reference": reference, "token_mask": token_mask}

    @classmethod
    def run(cls, rec, vae, prepared, reference, token_mask):
        cond = build_inpaint_condition(vae, prepared, reference, token_mask=token_mask, observe=rec.observe)
        rec.fact("tokens", cond.tokens)
        rec.fact("reference tokens", cond.references.shape[1])
        rec.fact("token mask", token_mask)
        return cond


class KleinEditCondition(FillScopeNode):
    title = "klein edit condition"
    table = TABLE

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeKleinEditCondition",
            display_name="Klein Edit Condition",
            category=CATEGORY,
            description=(
                "Reference-image editing without a mask (restyle, change, combine): each image is VAE-encoded into "
                "reference tokens (time offsets 10, 20, 30) and the output is generated from noise next to them, as "
                "diffusers' Flux2KleinPipeline does."
            ),
            inputs=[
                vae_input(c.Vae.Input("vae", tooltip=KLEIN_VAE_TOOLTIP)),
                io.Image.Input("image", tooltip="The image to edit (the first reference); centre-cropped to multiples of 16 px."),
                io.Int.Input("width", default=0, min=0, max=8192, step=16,
                             tooltip="Output width in px, a multiple of 16; 0 = the first image's width."),
                io.Int.Input("height", default=0, min=0, max=8192, step=16,
                             tooltip="Output height in px, a multiple of 16; 0 = the first image's height."),
                io.Image.Input("image_2", optional=True, tooltip="A second reference image (optional)."),
                io.Image.Input("image_3", optional=True, tooltip="A third reference image (optional)."),
            ],
            outputs=[c.KleinCondition.Output("condition", display_name="condition"), c.shapes_output()],
        )

    @classmethod
    def prepare(cls, rec, vae, image, width, height, image_2=None, image_3=None):
        vae = as_fillscope_vae(vae, "flux2")  # ComfyUI's VAE: checked to be FLUX.2's before anything runs
        for name, value in (("width", width), ("height", height)):
            if value % 16:
                raise FillScopeInputError(name, f"is {value}, not a multiple of 16 px (one klein token).",
                                          f"set {name} to a multiple of 16, or 0 for the first image's size.")
        references = [(n, im) for n, im in (("image", image), ("image_2", image_2), ("image_3", image_3)) if im is not None]
        check_reference_batches(references, max(im.shape[0] for _, im in references), "the largest image batch")
        for name, im in references:
            note_reference_crop(rec, name, im)
        return {"vae": vae, "references": [im for _, im in references], "width": width, "height": height}

    @classmethod
    def run(cls, rec, vae, references, width, height):
        cond = build_edit_condition(vae, references, width=width, height=height, observe=rec.observe)
        rec.fact("output size", f"{cond.latent_width * 16}x{cond.latent_height * 16}")
        rec.fact("tokens", cond.tokens)
        rec.fact("reference tokens", f"{cond.references.shape[1]} ({len(references)} image(s))")
        for note in cond.prepared.notes:
            rec.note(note)
        return cond


def encoder_name(width: int) -> str:
    """The Qwen3 whose stacked states are `width` channels wide (3 x hidden)."""
    for variant in VARIANTS.values():
        if 3 * shipped_config("qwen3", variant)["hidden_size"] == width:
            return variant.replace("qwen3", "Qwen3").replace("b", "B")
    return f"a Qwen3 encoder of hidden size {width // 3}"


def check_text_width(name: str, text, transformer) -> None:
    """Before the transformer is placed: the prompt's width must be the transformer's text width."""
    width, reads = text.embeds.shape[-1], transformer.config.get("joint_attention_dim")
    if width == reads:
        return
    variant = transformer_variant(transformer.config)
    model = f"klein {variant.split('-')[1].upper()}" if variant else "klein transformer"
    raise FillScopeInputError(
        name, f"was encoded by {encoder_name(width)} ({width} channels = 3 x {width // 3}), but this {model} reads "
              f"{reads} channels: it needs the text of {encoder_name(reads)}.",
        "wire the Qwen3 Encode of the encoder that belongs with this transformer (klein 4B with Qwen3-4B, klein 9B "
        "with Qwen3-8B; a repository's own text_encoder/ always fits).")


class KleinSampler(FillScopeNode):
    title = "klein sampler"
    table = TABLE

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeKleinSampler",
            display_name="Klein Inpaint & Edit Sampler",
            category=CATEGORY,
            description=(
                "Flow-matching Euler over the klein transformer on noisy tokens ++ reference tokens [1, N + Nref, 128] "
                "(the first N outputs are kept); inpaint re-blends the unmasked tokens with the noised source after "
                "every step. Distilled models: one call a step; base models with guidance > 1: CFG against negative."
            ),
            inputs=[
                c.KleinModel.Input("transformer", optional=True,
                                   tooltip="FillScope's klein transformer; or wire model instead (one of the two)."),
                io.Model.Input("model", optional=True,
                               tooltip="ComfyUI's own FLUX.2 [klein] MODEL (UNETLoader of a ComfyUI that detects klein; "
                                       "native LoRAs and patches apply) in place of transformer (one of the two)."),
                c.KleinText.Input("positive", tooltip=tips.KLEIN_POSITIVE),
                c.KleinCondition.Input("condition", tooltip="Klein Inpaint Condition or Klein Edit Condition."),
                io.Int.Input("seed", default=0, min=c.bounds.SEED.min, max=c.bounds.SEED.max,
                             control_after_generate=True,
                             tooltip="Same seed -> same initial noise as diffusers (CPU generator)."),
                io.Int.Input("steps", default=DISTILLED_STEPS, min=c.bounds.STEPS.min, max=c.bounds.STEPS.max,
                             tooltip="Distilled klein: 4. Base klein: about 50."),
                io.Float.Input("guidance", default=BASE_GUIDANCE, min=c.bounds.KLEIN["guidance"].min,
                               max=c.bounds.KLEIN["guidance"].max, step=0.1,
                               tooltip="Classifier-free guidance for base models (4.0; 1 = off). Ignored by distilled "
                                       "models, which run without CFG."),
                io.Float.Input("strength", default=1.0, min=c.bounds.KLEIN["strength"].min,
                               max=c.bounds.KLEIN["strength"].max, step=0.01,
                               tooltip="Edit strength (inpaint only): 1 repaints the mask from noise; 0.3-0.7 starts from "
                                       "the noised source and runs the last steps, keeping its layout and colours."),
                io.Combo.Input("model_type", options=list(MODEL_TYPES), default="auto",
                               tooltip="distilled (flux-2-klein-4b/9b: 4 steps, no guidance) or base (flux-2-klein-"
                                       "base-*: ~50 steps, CFG 4 with a negative prompt); the weights cannot tell them "
                                       "apart. auto: a repository's model_index.json (is_distilled), as the transformer "
                                       "loader read it, else distilled (always distilled for ComfyUI's MODEL)."),
                c.KleinText.Input("negative", optional=True,
                                  tooltip="The negative prompt's Qwen3 Encode (an empty prompt, as diffusers): needed by "
                                          "base models with guidance > 1; unused by distilled ones."),
                c.soft_mask_input(),
                *c.step_cache_inputs(KLEIN_STEP_CACHES),
            ],
            outputs=[c.Latent.Output("latent", display_name="latent"), c.shapes_output(), c.native_latent_output()],
        )

    @classmethod
    def prepare(cls, rec, positive, condition, steps, guidance, model_type, transformer=None, model=None, negative=None,
                soft_mask=None, **rest):
        """Everything that needs no weights, before the transformer (or the native MODEL) is placed: exactly one
        denoiser, the model type, the text widths, CFG's negative."""
        native_model.require_one_denoiser(transformer, model, "klein", "FLUX.2 [klein]")
        if model is not None:
            check_external_options("model", rest.get("step_cache") or "off")  # before the MODEL is placed
            rest["native"] = native_klein.check_klein_model(model, positive, condition, negative=negative)
            # a ComfyUI MODEL does not say distilled or base (the same weights' shapes): the sampler's input does
            if model_type == "auto":
                distilled, why = True, ("default for ComfyUI's MODEL (it does not say distilled or base; set "
                                        "model_type to base for klein base)")
            else:
                distilled, why = resolve_distilled(None, model_type)
                why = f"the sampler's {why}"
            cfg = rest["native"]
            rec.fact("denoiser", f"ComfyUI's MODEL ({type(model.model).__name__}): {cfg['num_attention_heads']} heads x "
                                 f"{cfg['attention_head_dim']}, {cfg['num_layers']} double + {cfg['num_single_layers']} "
                                 f"single blocks, text {cfg['joint_attention_dim']}")
        else:
            distilled, why = resolve_distilled(transformer, model_type)
            if model_type != "auto":
                why = f"the sampler's {why}"
            for name, text in (("positive", positive), ("negative", negative)):
                if text is not None:
                    check_text_width(name, text, transformer)
        rec.fact("model type", f"{'distilled' if distilled else 'base'}, from {why}")
        if distilled:
            rec.fact("guidance", "ignored (distilled: no CFG)")
            if negative is not None:
                rec.note("negative prompt unused: distilled models run without CFG")
            if steps != DISTILLED_STEPS:
                rec.note(f"distilled klein is tuned for {DISTILLED_STEPS} steps ({steps} set)")
        elif guidance > 1.0 and negative is None:
            raise FillScopeInputError(
                "negative", f"this is a base klein model ({why}) and guidance is {guidance} > 1: classifier-free "
                            "guidance needs the negative prompt's encoding, and nothing is wired to negative.",
                "wire a second FillScope Qwen3 Encode (an empty prompt, as diffusers uses) to negative, or set guidance "
                "to 1 (no CFG); for a distilled model set model_type to distilled.")
        elif steps < 20:
            rec.note(f"base klein is meant for about 50 steps ({steps} set)")
        c.check_soft_mask(rec, soft_mask, condition, soft_mask_latent)
        return {"transformer": transformer, "model": model, "positive": positive, "condition": condition,
                "steps": steps, "guidance": guidance, "negative": negative, "distilled": distilled,
                "soft_mask": soft_mask, **rest}

    @classmethod
    def run(cls, rec, positive, condition, steps, guidance, negative, distilled, seed, strength, transformer=None,
            model=None, native=None, soft_mask=None, step_cache="off", cache_threshold=None):
        def sample(denoiser):
            return sample_klein(denoiser, positive, condition, steps=steps, guidance=guidance, distilled=distilled,
                                negative=negative, strength=strength, seed=seed, callback=c.progress_callback(steps),
                                observe=rec.observe, soft_mask=soft_mask, step_cache=step_cache or "off",
                                cache_threshold=cache_threshold)

        if model is None:
            out = sample(transformer)
        else:  # a native MODEL: placed for this run only
            b, width, refs = condition.references.shape
            # ComfyUI's memory estimate is by area, the ref_latents' areas added to the latent's (estimate_memory):
            # the image's tokens plus the references' as one [B,C,N+Nref,1] shape
            area = (b, width, condition.tokens + refs, 1)
            out = native_model.run_native(model, area, lambda run: sample(native_klein.klein_denoiser(run, native)))
        c.record_sampler_result(rec, out, transformer)
        return out, to_comfy_latent(out)


NODES = [KleinInpaintCondition, KleinEditCondition, KleinSampler]
