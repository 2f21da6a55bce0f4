"""SD3 ControlNet inpainting nodes: the 17-channel condition and the CFG sampler."""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.decode import to_comfy_latent
from ..fillscope.pipelines.sd3_controlnet import (
    build_inpaint_condition,
    check_image_size,
    check_text,
    sample_sd3_controlnet_inpaint,
    soft_mask_latent,
)
from ..fillscope.specs import sd3_side_limit
from . import common as c
from . import native_model, native_sd3
from . import tooltips as tips
from .base import FillScopeNode
from .native_vae import VAE_TOOLTIP, as_fillscope_vae, vae_input

B = c.bounds.SD3_CONTROLNET  # the sampler's min/max (fillscope/bounds.py, which the batch manifest reads too)


class SD3InpaintCondition(FillScopeNode):
    title = "SD3 inpaint condition"
    table = "sd3_controlnet"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3InpaintCondition",
            display_name="SD3 Inpaint Condition",
            category=c.CATEGORY + "/sd3 controlnet",
            description=(
                "Repaint pixels -> black (-1), VAE-encode by the latent mean with SD3's scale/shift, mask resized to "
                "the latent grid and inverted (1 = keep): [B, 16 + 1 = 17, H/8, W/8]."
            ),
            inputs=[vae_input(c.Vae.Input("vae", tooltip=VAE_TOOLTIP)), *c.mask_inputs()],
            outputs=[c.SD3Condition.Output("condition", display_name="condition"), c.shapes_output()],
        )

    @classmethod
    def prepare(cls, rec, vae, **mask_options):
        prepared = c.prepare_masked_input(rec, **mask_options)
        rec.fact("largest side (position-embedding grid)", sd3_side_limit().explain())
        check_image_size(prepared)  # before the VAE is placed
        return {"vae": as_fillscope_vae(vae, "sd3", rec=rec), "prepared": prepared}

    @classmethod
    def run(cls, rec, vae, prepared):
        return build_inpaint_condition(vae, prepared, observe=rec.observe)


class SD3ControlNetInpaintSampler(FillScopeNode):
    title = "SD3 ControlNet inpaint sampler"
    table = "sd3_controlnet"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3ControlNetInpaintSampler",
            display_name="SD3 ControlNet Inpaint Sampler",
            category=c.CATEGORY + "/sd3 controlnet",
            description=(
                "Flow-matching Euler with classifier-free guidance; each step the inpainting ControlNet turns the "
                "17-channel condition into 23 residuals added to the MMDiT's blocks."
            ),
            inputs=[
                c.SD3Model.Input("transformer", optional=True,
                                 tooltip="FillScope's SD3 transformer; or wire model instead (one of the two)."),
                io.Model.Input("model", optional=True,
                               tooltip="ComfyUI's own SD3 / SD3.5 MODEL (CheckpointLoaderSimple or UNETLoader; native "
                                       "LoRAs and patches apply) in place of transformer (one of the two). FillScope's "
                                       "ControlNet, schedule (the shift input) and CFG stay."),
                c.SD3ControlNet.Input("controlnet", tooltip=tips.SD3_CONTROLNET),
                c.SD3Text.Input("positive", tooltip=tips.SD3_POSITIVE),
                c.SD3Text.Input("negative", tooltip="The negative prompt's SD3 text condition (an empty prompt is fine)."),
                c.SD3Condition.Input("condition", tooltip=tips.SD3_CONDITION),
                io.Int.Input("seed", default=0, min=c.bounds.SEED.min, max=c.bounds.SEED.max,
                             control_after_generate=True,
                             tooltip="Same seed -> same initial noise as diffusers (CPU generator)."),
                io.Int.Input("steps", default=28, min=c.bounds.STEPS.min, max=c.bounds.STEPS.max,
                             tooltip=tips.STEPS + " SD3 with the inpainting ControlNet: 28."),
                io.Float.Input("cfg", default=7.0, min=B["cfg"].min, max=B["cfg"].max, step=0.1,
                               tooltip="Classifier-free guidance; 1 = off."),
                io.Float.Input("control_scale", default=0.95, min=B["control_scale"].min, max=B["control_scale"].max,
                               step=0.01,
                               tooltip="ControlNet residual scale (0.95 on the model card)."),
                io.Float.Input("control_start", default=0.0, min=B["control_start"].min,
                               max=B["control_start"].max, step=0.01, tooltip=tips.CONTROL_START),
                io.Float.Input("control_end", default=1.0, min=B["control_end"].min,
                               max=B["control_end"].max, step=0.01, tooltip=tips.CONTROL_END),
                io.Float.Input("shift", default=3.0, min=B["shift"].min, max=B["shift"].max, step=0.1,
                               tooltip="Static schedule shift (SD3: 3.0)."),
                io.Float.Input("denoise", default=1.0, min=B["denoise"].min, max=B["denoise"].max, step=0.01,
                               tooltip="Below 1: start from the noised source image and run the last steps only."),
                io.Combo.Input(
                    "residual_mapping", options=["one_to_one", "diffusers"], default="one_to_one",
                    tooltip="one_to_one: residual i after block i, as the ControlNet was trained (and ComfyUI). "
                            "diffusers: >= 0.32's block i <- residual int(i*23/24), which repeats residual 0 and drops 22.",
                ),
                c.soft_mask_input(),
            ],
            outputs=[c.Latent.Output("latent", display_name="latent"), c.shapes_output(), c.native_latent_output()],
        )

    @classmethod
    def prepare(cls, rec, positive, negative, cfg, condition, transformer=None, model=None, soft_mask=None, **rest):
        """Before the models are placed: exactly one denoiser; the texts' widths against it (a native MODEL: its
        family, widths and position-embedding grid against the condition and the ControlNet too); the soft mask."""
        native_model.require_one_denoiser(transformer, model, "SD3", "SD3")
        if model is not None:
            rest["native"] = native_sd3.check_sd3_model(model, positive, condition, negative=negative, cfg=cfg,
                                                        controlnet=rest.get("controlnet"))
            model_shift = getattr(model.model.model_sampling, "shift", None)
            if model_shift is not None and rest.get("shift") is not None and float(model_shift) != rest["shift"]:
                rec.note(f"shift {rest['shift']} (this input) sets the schedule; the MODEL's own shift {model_shift} "
                         "(ModelSamplingSD3) is ComfyUI's samplers' and is not used")
        else:
            check_text(transformer, positive, negative, cfg)
        c.check_soft_mask(rec, soft_mask, condition, soft_mask_latent)
        return {"transformer": transformer, "model": model, "positive": positive, "negative": negative, "cfg": cfg,
                "condition": condition, "soft_mask": soft_mask, **rest}

    @classmethod
    def run(cls, rec, controlnet, positive, negative, condition, steps, transformer=None, model=None, native=None,
            **options):
        def sample(denoiser):
            return sample_sd3_controlnet_inpaint(denoiser, controlnet, positive, negative, condition, steps=steps,
                                                 callback=c.progress_callback(steps), observe=rec.observe, **options)

        if model is None:
            out = sample(transformer)
        else:  # a native MODEL: placed for this run only; one step's batch is 2B under CFG (negative ++ positive)
            b, channels = condition.control.shape[0], condition.latent_channels
            shape = (b * (2 if options["cfg"] > 1.0 else 1), channels, *condition.control.shape[-2:])
            out = native_model.run_native(model, shape, lambda run: sample(native_sd3.sd3_denoiser(run, native)))
        c.record_sampler_result(rec, out, transformer)
        return out, to_comfy_latent(out)


NODES = [SD3InpaintCondition, SD3ControlNetInpaintSampler]
