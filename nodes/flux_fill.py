"""FLUX.1 Fill nodes: condition assembly, sampler, VAE decode, paste-back."""

from __future__ import annotations

from comfy_api.latest import io

from . import common as c
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
            inputs=[
                c.Vae.Input("vae"),
                io.Image.Input("image"),
                io.Mask.Input("mask", tooltip="1 = repaint (ComfyUI's LoadImage mask is 1 - alpha)."),
                io.Boolean.Input("invert_mask", default=False),
                io.Float.Input("threshold", default=0.5, min=0.0, max=1.0, step=0.01,
                               tooltip="Binarise the mask at this value (diffusers uses 0.5). 0 keeps a soft mask."),
                io.Int.Input("grow", default=0, min=0, max=256, tooltip="Dilate the mask by this many pixels."),
                io.Int.Input("feather", default=0, min=0, max=256,
                             tooltip="Paste-back edge: ramps inward over this many pixels; kept pixels stay exact."),
                io.Combo.Input("size_mode", options=["pad", "crop"], default="pad",
                               tooltip="Sides not multiples of 16: pad (edge pixels, cropped off after) or center-crop."),
            ],
            outputs=[c.FillCondition.Output("condition", display_name="condition"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, vae, image, mask, invert_mask, threshold, grow, feather, size_mode) -> io.NodeOutput:
        from ..fillscope.flux_fill import build_fill_condition
        from ..fillscope.masks import prepare_image_and_mask

        rec = ShapeRecorder("FillScopeFluxFillCondition", "FLUX Fill condition")
        rec.tensor("image", image, "input")
        rec.tensor("mask", mask, "input")
        prepared = prepare_image_and_mask(
            image, mask, invert=invert_mask, threshold=threshold, grow=grow, feather=feather, size_mode=size_mode
        )
        cond = build_fill_condition(vae.value, prepared, observe=rec.observe)
        rec.fact("repaint coverage", f"{prepared.coverage:.1%}")
        rec.fact("tokens", cond.tokens)
        for n in prepared.notes:
            rec.note(n)
        for w in prepared.warnings:
            rec.warn(w)
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
        out = sample_flux_fill(
            transformer.value, flux_text.value, condition.value,
            steps=steps, guidance=guidance, seed=seed, denoise=denoise, callback=cb, observe=rec.observe,
        )
        for k, v in out.info.items():
            rec.fact(k, v)
        if out.unchanged:
            rec.warn("mask is empty: sampling skipped, the source image is returned unchanged")
        if transformer.value.is_meta:
            rec.note("meta weights: shapes only, no values")
        return c.finish(rec, (transformer, flux_text, condition), out, wrap=(0,))


class VAEDecode(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeVAEDecode",
            display_name="FillScope VAE Decode",
            category=c.CATEGORY + "/flux fill",
            description="Unscales the latent (z / scale + shift), decodes, and returns the image at the input's size.",
            inputs=[c.Vae.Input("vae"), c.Latent.Input("latent")],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, vae, latent) -> io.NodeOutput:
        from ..fillscope.flux_fill import decode_to_image

        rec = ShapeRecorder("FillScopeVAEDecode", "VAE decode")
        lat = latent.value
        rec.tensor("latent.unpacked", lat.latents, "input")
        image = decode_to_image(vae.value, lat, observe=rec.observe)
        rec.tensor("image", image)
        if lat.unchanged:
            rec.warn("mask is empty: the source image is returned unchanged")
        if vae.value.is_meta:
            rec.warn("meta weights: no pixel values exist; the IMAGE output is zeros of the right size")
        return c.finish(rec, (vae, latent), image)


class PasteBack(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopePasteBack",
            display_name="FillScope Paste Back",
            category=c.CATEGORY + "/flux fill",
            description="Composites the result into the source with the condition's (feathered) mask; kept pixels stay bit-identical.",
            inputs=[io.Image.Input("generated", tooltip="The decoded result."), c.FillCondition.Input("condition")],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, generated, condition) -> io.NodeOutput:
        from ..fillscope.masks import paste_back

        rec = ShapeRecorder("FillScopePasteBack", "Paste back")
        prepared = condition.value.prepared
        rec.tensor("generated", generated, "input")
        out = paste_back(generated.to(prepared.source.device), prepared.source, prepared.paste_mask)
        kept = int((prepared.paste_mask == 0).sum())
        rec.fact("kept pixels (exact source values)", f"{kept:,}")
        rec.tensor("image", out)
        return c.finish(rec, (condition,), out)


NODES = [FluxFillCondition, FluxFillSampler, VAEDecode, PasteBack]
