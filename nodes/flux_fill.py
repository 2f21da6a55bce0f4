"""FLUX.1 Fill nodes: condition assembly and sampler."""

from __future__ import annotations

from comfy_api.latest import io

from . import common as c, memory
from ..fillscope.trace.records import ShapeRecorder


class FluxFillCondition(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxFillCondition",
            display_name="FillScope FLUX Fill Condition",
            category=c.CATEGORY + "/flux fill",
            description=(
                "Masks the image (repaint pixels -> grey), VAE-encodes it by the latent mean and packs it with the "
                "8x8-block mask: [B, N, 64 + 256 = 320]."
            ),
            inputs=[c.Vae.Input("vae"), *c.mask_inputs()],
            outputs=[c.FillCondition.Output("condition", display_name="condition"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, vae, image, mask, invert_mask, threshold, grow, feather, size_mode) -> io.NodeOutput:
        from ..fillscope.flux_fill import build_fill_condition

        rec = ShapeRecorder("FillScopeFluxFillCondition", "FLUX Fill condition")
        prepared = c.prepare_masked_input(rec, image, mask, invert_mask, threshold, grow, feather, size_mode)
        with memory.use(vae.value, rec=rec):
            cond = build_fill_condition(vae.value, prepared, observe=rec.observe)
        rec.fact("tokens", cond.tokens)
        return c.finish(rec, (vae,), cond, wrap=(0,))


class FluxFillSampler(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxFillSampler",
            display_name="FillScope FLUX Fill Sampler",
            category=c.CATEGORY + "/flux fill",
            description=(
                "Flow-matching Euler with FLUX's resolution-dependent shift and guidance embedding; the transformer "
                "sees noisy 64 + condition 320 = 384 channels per token."
            ),
            inputs=[
                c.FluxFillModel.Input("transformer"),
                c.FluxText.Input("flux_text"),
                c.FillCondition.Input("condition"),
                io.Int.Input("seed", default=0, min=0, max=2**63 - 1, control_after_generate=True,
                             tooltip="Same seed -> same initial noise as diffusers (CPU generator)."),
                io.Int.Input("steps", default=28, min=1, max=200),
                io.Float.Input("guidance", default=30.0, min=0.0, max=100.0, step=0.5,
                               tooltip="Guidance embedding (FLUX.1 Fill [dev] is tuned for 30)."),
                io.Float.Input("denoise", default=1.0, min=0.01, max=1.0, step=0.01,
                               tooltip="Below 1: start from the noised source image and run the last steps only."),
            ],
            outputs=[c.Latent.Output("latent", display_name="latent"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, transformer, flux_text, condition, seed, steps, guidance, denoise) -> io.NodeOutput:
        from ..fillscope.flux_fill import sample_flux_fill

        rec = ShapeRecorder("FillScopeFluxFillSampler", "FLUX Fill sampler")
        cb = c.progress_callback(steps)
        with memory.use(transformer.value, rec=rec):
            out = sample_flux_fill(
                transformer.value, flux_text.value, condition.value,
                steps=steps, guidance=guidance, seed=seed, denoise=denoise, callback=cb, observe=rec.observe,
            )
        c.record_sampler_result(rec, out, transformer.value)
        return c.finish(rec, (transformer, flux_text, condition), out, wrap=(0,))


NODES = [FluxFillCondition, FluxFillSampler]
