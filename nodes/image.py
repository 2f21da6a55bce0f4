"""Back to pixels, shared by every model family: VAE decode and paste-back."""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.decode import decode_to_image
from ..fillscope.masks import as_paste_mask, paste_back
from . import common as c
from .base import FillScopeNode

# What a graph on meta weights shows where its image would be (the decode's warning, and Paste Back's).
META_BLANK = ("meta weights: shapes only, this image is blank (zeros of the right size; no pixel values exist on the "
              "meta device). Choose model files on the loaders' source menus for a real image.")


class VAEDecode(FillScopeNode):
    title = "VAE decode"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeVAEDecode",
            display_name="FillScope VAE Decode",
            category=c.CATEGORY + "/image",
            description=("Undoes the latent's normalisation (FLUX/SD3: z / scale + shift; FLUX.2 [klein]: its BatchNorm "
                         "statistics), decodes, and returns the image at the input's size."),
            inputs=[c.Vae.Input("vae"), c.Latent.Input("latent")],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, vae, latent):
        rec.tensor("latent.unpacked", latent.latents, "input")
        image = decode_to_image(vae, latent, observe=rec.observe)
        rec.tensor("image", image)
        if latent.unchanged:
            rec.warn("mask is empty: the source image is returned unchanged")
        if vae.is_meta:
            rec.warn(META_BLANK)
        return image


class PasteBack(FillScopeNode):
    title = "Paste back"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopePasteBack",
            display_name="FillScope Paste Back",
            category=c.CATEGORY + "/image",
            description=(
                "Composites the result into the source with the (feathered) mask the sampler used, or with the mask "
                "wired here; kept pixels stay bit-identical to the input."
            ),
            inputs=[
                io.Image.Input("generated", tooltip="The decoded result."),
                c.Latent.Input("latent", tooltip="The sampler's latent: it carries the source image and the mask."),
                io.Mask.Input("mask", optional=True,
                              tooltip="Composite with this mask instead of the sampler's (as ImageCompositeMasked): "
                                      "1 = take the generated pixel, soft values blend; the image's size."),
            ],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, generated, latent, mask=None):
        source = latent.prepared.source
        rec.tensor("generated", generated, "input")
        if mask is not None:
            rec.tensor("mask", mask, "input")
            rec.note("composited with the mask wired to Paste Back, not the sampler's")
        paste = latent.prepared.paste_mask if mask is None else as_paste_mask(mask, source)
        out = paste_back(generated.to(source.device), source, paste)
        if getattr(latent.latents, "is_meta", False):
            rec.warn(META_BLANK.replace("this image is blank", "the repainted area is blank"))
        rec.fact("kept pixels (exact source values)", f"{int((paste == 0).sum()):,}")
        rec.tensor("image", out)
        return out


NODES = [VAEDecode, PasteBack]
