"""FLUX.1 Fill nodes: condition assembly and sampler."""

from __future__ import annotations


from comfy_api.latest import io

from ..fillscope.decode import to_comfy_latent
from ..fillscope.pipelines.flux_fill import (
    build_fill_condition,
    check_text,
    sample_flux_fill,
    soft_mask_latent,
)
from ..fillscope.sampling import check_external_options
from ..fillscope.speed import STEP_CACHES
from . import common as c
from . import native_model
from . import tooltips as tips
from .base import FillScopeNode
from .native_vae import VAE_TOOLTIP, as_fillscope_vae, vae_input


class FluxFillCondition(FillScopeNode):
    title = "FLUX Fill condition"
    table = "flux_fill"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxFillCondition",
            display_name="FLUX Fill Inpaint Condition",
            category=c.CATEGORY + "/flux fill",
            description=(
                "Masks the image (repaint pixels -> grey), VAE-encodes it by the latent mean and packs it with the "
                "8x8-block mask: [B, N, 64 + 256 = 320]."
            ),
            inputs=[vae_input(c.Vae.Input("vae", tooltip=VAE_TOOLTIP)), *c.mask_inputs()],
            outputs=[c.FillCondition.Output("condition", display_name="condition"), c.shapes_output()],
        )

    @classmethod
    def prepare(cls, rec, vae, **mask_options):
        return {"vae": as_fillscope_vae(vae, "flux", rec=rec), "prepared": c.prepare_masked_input(rec, **mask_options)}

    @classmethod
    def run(cls, rec, vae, prepared):
        cond = build_fill_condition(vae, prepared, observe=rec.observe)
        rec.fact("tokens", cond.tokens)
        return cond


class FluxFillSampler(FillScopeNode):
    title = "FLUX Fill sampler"
    table = "flux_fill"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxFillSampler",
            display_name="FLUX Fill Inpaint Sampler",
            category=c.CATEGORY + "/flux fill",
            description=(
                "Flow-matching Euler with FLUX's resolution-dependent shift and guidance embedding; the transformer "
                "sees noisy 64 + condition 320 = 384 channels per token."
            ),
            inputs=[
                c.FluxFillModel.Input("transformer", optional=True,
                                      tooltip="FillScope's FLUX Fill transformer; or wire model instead (one of the two)."),
                io.Model.Input("model", optional=True,
                               tooltip="ComfyUI's own FLUX.1 Fill MODEL (UNETLoader; native LoRAs and patches apply) "
                                       "in place of transformer (one of the two)."),
                c.FluxText.Input("flux_text", tooltip=tips.FLUX_TEXT),
                c.FillCondition.Input("condition", tooltip=tips.FILL_CONDITION),
                io.Int.Input("seed", default=0, min=c.bounds.SEED.min, max=c.bounds.SEED.max,
                             control_after_generate=True,
                             tooltip="Same seed -> same initial noise as diffusers (CPU generator)."),
                io.Int.Input("steps", default=28, min=c.bounds.STEPS.min, max=c.bounds.STEPS.max,
                             tooltip=tips.STEPS + " FLUX.1 Fill [dev]: 28 to 50."),
                io.Float.Input("guidance", default=30.0, min=c.bounds.FLUX_FILL["guidance"].min,
                               max=c.bounds.FLUX_FILL["guidance"].max, step=0.5,
                               tooltip="Guidance embedding (FLUX.1 Fill [dev] is tuned for 30)."),
                io.Float.Input("denoise", default=1.0, min=c.bounds.FLUX_FILL["denoise"].min,
                               max=c.bounds.FLUX_FILL["denoise"].max, step=0.01,
                               tooltip="Below 1: start from the noised source image and run the last steps only."),
                c.soft_mask_input(),
                *c.step_cache_inputs(STEP_CACHES),
            ],
            outputs=[c.Latent.Output("latent", display_name="latent"), c.shapes_output(), c.native_latent_output()],
            hidden=[io.Hidden.prompt, io.Hidden.unique_id],  # whether the LATENT output is wired (the source kept)
        )

    @classmethod
    def prepare(cls, rec, flux_text, guidance, condition, transformer=None, model=None, soft_mask=None, **rest):
        """Before the transformer is placed: the text's widths against it, which guidance is used, the soft mask."""
        native_model.require_one_denoiser(transformer, model, "FLUX Fill", "FLUX.1 Fill")
        if model is not None:
            if "denoise_mask_function" in (getattr(model, "model_options", None) or {}):
                rec.warn("the MODEL carries ComfyUI's DifferentialDiffusion patch (its denoise_mask_function), which "
                         "this sampler does not apply: wire the soft mask to soft_mask instead (the same differential "
                         "diffusion, FillScope's own)" if soft_mask is None else
                         "the MODEL's DifferentialDiffusion patch is not applied; soft_mask does the same here")
            check_external_options("model", rest.get("step_cache") or "off")  # before the MODEL is placed
            rest["native"] = native_model.check_flux_fill_model(model, flux_text, condition)
        else:
            check_text(transformer, flux_text)
        c.check_soft_mask(rec, soft_mask, condition, soft_mask_latent)
        origin = flux_text.origin or {}
        if origin.get("guidance") is not None:
            rec.note(f"guidance {guidance} (this input) is used; the {origin['source']}'s guidance {origin['guidance']} "
                     "is not")
        return {"transformer": transformer, "model": model, "flux_text": flux_text, "guidance": guidance,
                "condition": condition, "soft_mask": soft_mask, **rest}

    @classmethod
    def run(cls, rec, flux_text, condition, seed, steps, guidance, denoise, transformer=None, model=None, native=None,
            soft_mask=None, step_cache="off", cache_threshold=None):
        def sample(denoiser):
            return sample_flux_fill(denoiser, flux_text, condition, steps=steps, guidance=guidance, seed=seed,
                                    denoise=denoise, callback=c.progress_callback(steps), observe=rec.observe,
                                    soft_mask=soft_mask, step_cache=step_cache or "off", cache_threshold=cache_threshold)

        if model is None:
            out = sample(transformer)
        else:  # a native MODEL: placed for this run only
            out = native_model.run_native(model, condition.masked_latents.shape,
                                          lambda run: sample(native_model.flux_fill_denoiser(run, native)))
        c.record_sampler_result(rec, out, transformer)
        record_shift_range(rec, out.info)
        return out, native_latent(rec, cls, out, condition)


def native_latent(rec, cls, out, condition) -> dict:
    """The sampler's LATENT output: where it is wired (to ComfyUI's VAEDecode, a KSampler ...), outside the mask the
    source's latent (one more VAE encode of the source), as ComfyUI's KSampler with InpaintModelConditioning's
    noise_mask keeps it; unwired, nothing is encoded for it."""
    if out.unchanged or not c.output_linked(cls, 2):
        return to_comfy_latent(out)
    rec.note("LATENT output: outside the mask the source's latent (as ComfyUI's KSampler with a noise_mask keeps it; "
             "the mask resized to the latent by ComfyUI's rule, bilinear), inside it the sampled one; the latent "
             "output stays the model's result everywhere (Paste Back puts the source's pixels back)")
    return to_comfy_latent(out, condition.source_latents())


def record_shift_range(rec, info) -> None:
    """A warning when the resolution shift mu was extrapolated above FLUX.1's calibrated range (mu grows linearly with
    the tokens: the schedule spends ever more of its steps near sigma 1), a note below it (small images: mild)."""
    if not info.get("mu_extrapolated"):
        return
    lo, hi = (int(v) for v in info["mu_calibrated_tokens"].split("-"))
    side = int(round(hi ** 0.5)) * 16
    text = (f"resolution shift mu extrapolated: {info['tokens']} tokens is outside the range FLUX.1 was calibrated "
            f"on ({lo}-{hi} tokens, up to ~{side}x{side} px); mu = {info['mu']:.2f}: the last step starts at sigma "
            f"{info['sigma_last_step']:.2f}")
    (rec.warn if info["tokens"] > hi else rec.note)(text)


NODES = [FluxFillCondition, FluxFillSampler]
