"""SD3 ControlNet inpainting nodes: the 17-channel condition and the CFG sampler."""

from __future__ import annotations

from comfy_api.latest import io

from . import common as c, memory
from ..fillscope.trace.records import ShapeRecorder


class SD3InpaintCondition(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3InpaintCondition",
            display_name="FillScope SD3 Inpaint Condition",
            category=c.CATEGORY + "/sd3 controlnet",
            description=(
                "Repaint pixels -> black (-1), VAE-encode by the latent mean with SD3's scale/shift, mask resized to "
                "the latent grid and inverted (1 = keep): [B, 16 + 1 = 17, H/8, W/8]."
            ),
            inputs=[c.Vae.Input("vae"), *c.mask_inputs()],
            outputs=[c.SD3Condition.Output("condition", display_name="condition"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, vae, image, mask, invert_mask, threshold, grow, feather, size_mode) -> io.NodeOutput:
        from ..fillscope.sd3_inpaint import build_inpaint_condition

        rec = ShapeRecorder("FillScopeSD3InpaintCondition", "SD3 inpaint condition")
        prepared = c.prepare_masked_input(rec, image, mask, invert_mask, threshold, grow, feather, size_mode)
        with memory.use(vae.value, rec=rec):
            cond = build_inpaint_condition(vae.value, prepared, observe=rec.observe)
        return c.finish(rec, (vae,), cond, wrap=(0,))


class SD3ControlNetInpaintSampler(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3ControlNetInpaintSampler",
            display_name="FillScope SD3 ControlNet Inpaint Sampler",
            category=c.CATEGORY + "/sd3 controlnet",
            description=(
                "Flow-matching Euler with classifier-free guidance; each step the inpainting ControlNet turns the "
                "17-channel condition into 23 residuals added to the MMDiT's blocks."
            ),
            inputs=[
                c.SD3Model.Input("transformer"),
                c.SD3ControlNet.Input("controlnet"),
                c.SD3Text.Input("positive"),
                c.SD3Text.Input("negative", tooltip="The negative prompt's SD3 text condition (an empty prompt is fine)."),
                c.SD3Condition.Input("condition"),
                io.Int.Input("seed", default=0, min=0, max=2**63 - 1, control_after_generate=True,
                             tooltip="Same seed -> same initial noise as diffusers (CPU generator)."),
                io.Int.Input("steps", default=28, min=1, max=200),
                io.Float.Input("cfg", default=7.0, min=1.0, max=30.0, step=0.1, tooltip="Classifier-free guidance; 1 = off."),
                io.Float.Input("control_scale", default=0.95, min=0.0, max=2.0, step=0.01,
                               tooltip="ControlNet residual scale (0.95 on the model card)."),
                io.Float.Input("control_start", default=0.0, min=0.0, max=1.0, step=0.01),
                io.Float.Input("control_end", default=1.0, min=0.0, max=1.0, step=0.01),
                io.Float.Input("shift", default=3.0, min=0.1, max=20.0, step=0.1, tooltip="Static schedule shift (SD3: 3.0)."),
                io.Float.Input("denoise", default=1.0, min=0.01, max=1.0, step=0.01,
                               tooltip="Below 1: start from the noised source image and run the last steps only."),
                io.Combo.Input(
                    "residual_mapping", options=["one_to_one", "diffusers"], default="one_to_one",
                    tooltip="one_to_one: residual i after block i, as the ControlNet was trained (and ComfyUI). "
                            "diffusers: >= 0.32's block i <- residual int(i*23/24), which repeats residual 0 and drops 22.",
                ),
            ],
            outputs=[c.Latent.Output("latent", display_name="latent"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, transformer, controlnet, positive, negative, condition, seed, steps, cfg, control_scale,
                control_start, control_end, shift, denoise, residual_mapping) -> io.NodeOutput:
        from ..fillscope.sd3_inpaint import sample_sd3_controlnet_inpaint

        rec = ShapeRecorder("FillScopeSD3ControlNetInpaintSampler", "SD3 ControlNet inpaint sampler")
        with memory.use(transformer.value, controlnet.value, rec=rec):
            out = sample_sd3_controlnet_inpaint(
                transformer.value, controlnet.value, positive.value, negative.value, condition.value,
                steps=steps, cfg=cfg, control_scale=control_scale, control_start=control_start,
                control_end=control_end, shift=shift, seed=seed, denoise=denoise,
                residual_mapping=residual_mapping, callback=c.progress_callback(steps), observe=rec.observe,
            )
        c.record_sampler_result(rec, out, transformer.value)
        return c.finish(rec, (transformer, controlnet, positive, negative, condition), out, wrap=(0,))


NODES = [SD3InpaintCondition, SD3ControlNetInpaintSampler]
