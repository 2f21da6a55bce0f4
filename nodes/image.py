"""Back to pixels, shared by every model family: VAE decode and paste-back."""

from __future__ import annotations

from comfy_api.latest import io

from . import common as c, memory
from ..fillscope.trace.records import ShapeRecorder


class VAEDecode(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeVAEDecode",
            display_name="FillScope VAE Decode",
            category=c.CATEGORY + "/image",
            description="Unscales the latent (z / scale + shift), decodes, and returns the image at the input's size.",
            inputs=[c.Vae.Input("vae"), c.Latent.Input("latent")],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, vae, latent) -> io.NodeOutput:
        from ..fillscope.latents import decode_to_image

        rec = ShapeRecorder("FillScopeVAEDecode", "VAE decode")
        lat = latent.value
        rec.tensor("latent.unpacked", lat.latents, "input")
        with memory.use(vae.value, rec=rec):
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
            category=c.CATEGORY + "/image",
            description=(
                "Composites the result into the source with the (feathered) mask the sampler used; kept pixels stay "
                "bit-identical to the input."
            ),
            inputs=[
                io.Image.Input("generated", tooltip="The decoded result."),
                c.Latent.Input("latent", tooltip="The sampler's latent: it carries the source image and the mask."),
            ],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, generated, latent) -> io.NodeOutput:
        from ..fillscope.masks import paste_back

        rec = ShapeRecorder("FillScopePasteBack", "Paste back")
        prepared = latent.value.prepared
        rec.tensor("generated", generated, "input")
        out = paste_back(generated.to(prepared.source.device), prepared.source, prepared.paste_mask)
        kept = int((prepared.paste_mask == 0).sum())
        rec.fact("kept pixels (exact source values)", f"{kept:,}")
        rec.tensor("image", out)
        return c.finish(rec, (latent,), out)


NODES = [VAEDecode, PasteBack]
