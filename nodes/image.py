"""Back to pixels, shared by every model family: VAE decode and paste-back."""

from __future__ import annotations

import math

from comfy_api.latest import io

from ..fillscope.decode import decode_comfy_latent, decode_to_image
from ..fillscope.errors import FillScopeInputError
from ..fillscope.masks import as_paste_mask, paste_back
from ..fillscope.weights import Component
from . import common as c
from .base import FillScopeNode
from .native_vae import DECODE_VAE_TOOLTIP, as_fillscope_vae, native_family, vae_input


# What a graph on meta weights shows where its image would be (the decode's warning, and Paste Back's).
META_BLANK = ("meta weights: shapes only, this image is blank (zeros of the right size; no pixel values exist on the "
              "meta device). Choose model files on the loaders' source menus for a real image.")


class VAEDecode(FillScopeNode):
    title = "VAE decode"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeVAEDecode",
            display_name="VAE Decode (FLUX.1 / SD3 / FLUX.2)",
            category=c.CATEGORY + "/image",
            description=("Undoes the latent's normalisation (FLUX/SD3: z / scale + shift; FLUX.2 [klein]: its BatchNorm "
                         "statistics), decodes, and returns the image at the input's size."),
            inputs=[
                vae_input(c.Vae.Input("vae", tooltip=DECODE_VAE_TOOLTIP)),
                c.Latent.Input("latent", optional=True,
                               tooltip="A FillScope sampler's latent: decoded and brought back to the input image's "
                                       "size (padding cropped, a crop pasted back)."),
                io.Latent.Input("native_latent", optional=True,
                                tooltip="ComfyUI's own LATENT (VAEEncode, LatentUpscale, KSampler, a FillScope "
                                        "sampler's LATENT output) of the VAE's family, wired instead of latent (not "
                                        "both): converted to FillScope's space (FLUX.1 / SD3: (z - shift) * scale; "
                                        "klein: as is) and decoded at the latent's size, as ComfyUI's VAEDecode does."),
            ],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, vae, latent=None, native_latent=None):
        if latent is not None and native_latent is not None:  # one rule for two inputs that mean the same
            raise FillScopeInputError("latent", "is wired and so is 'native_latent': the decode decodes exactly one "
                                                "latent, FillScope's sampler latent or ComfyUI's LATENT.",
                                      "wire FillScope's sampler latent to 'latent' or ComfyUI's LATENT to "
                                      "'native_latent', not both.")
        if not isinstance(vae, Component):  # ComfyUI's VAE: FLUX.1, SD3 and FLUX.2 (ComfyUI space in and out)
            vae = as_fillscope_vae(vae, latent.family if latent is not None else native_family(vae))
            rec.note(f"ComfyUI's VAE: {vae.provenance}")
        if native_latent is not None:
            return cls.run_native(rec, vae, native_latent)
        if latent is None:
            raise FillScopeInputError("latent", "nothing is connected: the decode needs a latent to decode.",
                                      "connect a FillScope sampler's latent, or a ComfyUI LATENT to native_latent.")
        rec.tensor("latent.unpacked", latent.latents, "input")
        image = decode_to_image(vae, latent, observe=rec.observe)
        rec.tensor("image", image)
        if latent.unchanged:
            rec.warn("mask is empty: the source image is returned unchanged")
        if vae.is_meta:
            rec.warn(META_BLANK)
        return image

    @classmethod
    def run_native(cls, rec, vae, native_latent):
        samples = native_latent.get("samples") if isinstance(native_latent, dict) else None
        if samples is None:
            raise FillScopeInputError("native_latent", "is not a ComfyUI LATENT (a dict holding 'samples').",
                                      "connect a LATENT output (VAEEncode, a sampler's LATENT).")
        rec.tensor("native_latent.samples", samples, "input")
        image = decode_comfy_latent(vae, samples, observe=rec.observe)
        rec.tensor("image", image)
        if vae.is_meta:
            rec.warn(META_BLANK)
        return image


class PasteBack(FillScopeNode):
    title = "Paste back"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopePasteBack",
            display_name="Inpaint Paste Back",
            category=c.CATEGORY + "/compositing",
            description=(
                "Composites the result into the source with the (feathered) mask the sampler used, or with the mask "
                "wired here; kept pixels stay bit-identical to the input. tone_match / poisson first adjust the "
                "generated image to the source on a ring of kept pixels around the mask (colour cast, seam), and "
                "report the ring's CIE76 delta E before and after."
            ),
            inputs=[
                io.Image.Input("generated", tooltip="The decoded result (VAE Decode's IMAGE), composited into the "
                                                    "source inside the mask."),
                c.Latent.Input("latent", tooltip="The sampler's latent: it carries the source image and the mask."),
                io.Mask.Input("mask", optional=True,
                              tooltip="Composite with this mask instead of the sampler's (as ImageCompositeMasked): "
                                      "1 = take the generated pixel, soft values blend; the image's size."),
                *c.tone_inputs(optional=True),
            ],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, generated, latent, mask=None, tone_match=False, poisson=False, ring_width=16):
        source = latent.prepared.source
        rec.tensor("generated", generated, "input")
        if mask is not None:
            rec.tensor("mask", mask, "input")
            rec.note("composited with the mask wired to Paste Back, not the sampler's")
        paste = latent.prepared.paste_mask if mask is None else as_paste_mask(mask, source)
        generated = generated.to(source.device)
        if tone_match or poisson:
            generated = adjust_tone(rec, generated, source, paste, tone_match, poisson, ring_width)
        out = paste_back(generated, source, paste)
        if getattr(latent.latents, "is_meta", False):
            rec.warn(META_BLANK.replace("this image is blank", "the repainted area is blank"))
        rec.fact("kept pixels (exact source values)", f"{int((paste == 0).sum()):,}")
        rec.tensor("image", out)
        return out


def adjust_tone(rec, generated, source, paste, tone_match: bool, poisson: bool, ring_width: int):
    """Paste Back's tone options, in order (tone match, then Poisson), before the feathered composite; the ring's
    delta E before and after recorded as facts."""
    from ..fillscope.compositing import tone

    if generated.shape != source.shape:  # paste_back's own error, before any work
        paste_back(generated, source, paste)
    ring = tone.ring_mask(paste, ring_width)
    before = tone.ring_delta_e(generated, source, ring)
    if tone_match:
        generated, info = tone.match_tone(generated, source, paste, ring_width=ring_width)
        if info.get("skipped"):
            rec.warn(f"tone match: {info['skipped']}")
        else:
            one = len(info["gain"]) == 1
            rec.note(f"tone matched in CIELAB on the {info['ring_pixels']:,} kept px within {ring_width} px outside "
                     f"the mask: gain (L, a, b) {info['gain'][0] if one else info['gain']}, offset "
                     f"{info['offset'][0] if one else info['offset']}, then a smooth offset field")
    if poisson:
        # outside the mask poisson_blend returns the source, so the ring's delta E after is 0 by construction
        generated = tone.poisson_blend(generated, source, paste)
        rec.note("Poisson blend: inside the mask the generated image's gradients, meeting the source on its border")
    after = tone.ring_delta_e(generated, source, ring)
    if math.isnan(before):  # no ring (an empty mask, or one covering the whole image)
        rec.warn("no kept pixels around the mask: nothing to measure the tone against")
    else:
        rec.fact("ring delta E (CIE76) before", f"{before:.2f}")
        rec.fact("ring delta E (CIE76) after", f"{after:.2f}")
    return generated


NODES = [VAEDecode, PasteBack]
