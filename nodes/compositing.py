"""Crop and stitch: the model runs on a box around the mask at its native size, however big the photo is.

Crop For Inpaint cuts a box around the mask (or one per region), resizes it to the model's size and hands on the
crop, its mask and a stitch record (FS_STITCH); Stitch puts the generated crops back into the full-size photo,
keeping every pixel outside the mask bit-identical. The engine is fillscope/compositing/crop.py."""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.compositing.crop import crop_for_inpaint
from ..fillscope.compositing.crop import stitch as stitch_crops
from . import common as c
from .base import FillScopeNode
from .common import advanced

Stitch = io.Custom("FS_STITCH")  # the crop record: original image and mask, each crop's box and scale

CATEGORY = c.CATEGORY + "/compositing"


class CropForInpaint(FillScopeNode):
    title = "Crop for inpaint"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeCropForInpaint",
            display_name="Crop For Inpaint",
            category=CATEGORY,
            description=(
                "Cuts a box around the mask (grown by context_factor and padding, kept inside the image) and resizes "
                "it to the model's size (long side = target, sides multiples of 16; small boxes are upscaled), so a "
                "4096x3072 photo is sampled at 1024x768. With regions, each separate hole gets its own box, all at "
                "one size (one batch). Wire the stitch output to Inpaint Stitch."
            ),
            inputs=[
                io.Image.Input("image", tooltip="The full-size source photo (any size); only the box around the mask "
                                                "is sampled, the rest stays as it is."),
                io.Mask.Input("mask", tooltip="1 = repaint (ComfyUI's LoadImage mask is 1 - alpha); any value > 0 is "
                                              "inside the box."),
                io.Float.Input("context_factor", default=1.5, min=1.0, max=8.0, step=0.05,
                               tooltip="The mask's box grown by this factor around its centre: what the model sees "
                                       "around the hole."),
                io.Int.Input("padding", default=32, min=0, max=2048, tooltip="Pixels added on each side of the box."),
                io.Int.Input("target", default=1024, min=64, max=4096, step=16,
                             tooltip="Long side of the crop (the model's native size: 1024 for FLUX.1 Fill); the "
                                     "short side follows the box's aspect, both multiples of 16."),
                io.Boolean.Input("regions", default=False,
                                 tooltip="One crop per separate hole (all at one size, as a batch) instead of one box "
                                         "around the whole mask."),
                io.Mask.Input("context_mask", optional=True,
                              tooltip="Optional: the box also takes in this mask (context the model should see); it "
                                      "is not repainted."),
                advanced(io.Int.Input("min_area", default=64, min=0, max=16_777_216, optional=True,
                                      tooltip="regions: holes of fewer pixels are dropped (not repainted).")),
                advanced(io.Int.Input("merge_distance", default=32, min=0, max=4096, optional=True,
                                      tooltip="regions: holes at most this many pixels apart are one region.")),
            ],
            outputs=[io.Image.Output("crop"), io.Mask.Output("crop_mask"),
                     Stitch.Output("stitch", display_name="stitch"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, image, mask, context_factor, padding, target, regions, context_mask=None, min_area=64,
            merge_distance=32):
        rec.tensor("image", image, "input")
        rec.tensor("mask", mask, "input")
        if context_mask is not None:
            rec.tensor("context_mask", context_mask, "input")
        out = crop_for_inpaint(image, mask, context_mask=context_mask, context_factor=context_factor,
                               padding=padding, target_long_side=target, regions=regions, min_area=min_area,
                               merge_distance=merge_distance)
        record_crop(rec, out.record)
        for n in out.notes:
            if n not in rec.record["notes"]:
                rec.note(n)
        for w in out.warnings:
            rec.warn(w)
        rec.tensor("crop", out.image)
        rec.tensor("crop_mask", out.mask)
        return out.image, out.mask, out.record


def record_crop(rec, record) -> None:
    """The crop on a node's record: the description ('4096x3072 photo -> 1024x768 crop, scale 0.25') and the boxes."""
    rec.fact("crop", record.describe())
    rec.fact("crop size", f"{record.crop_width}x{record.crop_height}")
    rec.fact("crops", len(record.crops))
    rec.fact("boxes", "; ".join(c.box_text() for c in record.crops))


class StitchNode(FillScopeNode):
    title = "Stitch"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeStitch",
            display_name="Inpaint Stitch",
            category=CATEGORY,
            description=(
                "Puts the generated crops back into the full-size photo: each resized to its box and composited "
                "through the mask (feathered inward); every pixel outside the mask is the original, bit for bit. "
                "tone_match / poisson correct the fill's colours to the source on a ring around the mask."
            ),
            inputs=[
                io.Image.Input("generated", tooltip="The decoded crops (VAE Decode after the sampler), at the crop's "
                                                    "size and batch."),
                Stitch.Input("stitch", tooltip="Crop For Inpaint's stitch output."),
                io.Int.Input("feather", default=8, min=0, max=256,
                             tooltip="Paste edge: ramps inward over this many pixels of the photo; pixels outside the "
                                     "mask stay exact."),
                *c.tone_inputs(optional=False),
            ],
            outputs=[io.Image.Output("image"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, generated, stitch, feather, tone_match, poisson, ring_width=16):
        record = stitch
        rec.tensor("generated", generated, "input")
        rec.tensor("source", record.source, "input")
        out = stitch_crops(generated, record, feather=feather, tone_match=tone_match, poisson=poisson,
                           ring_width=ring_width)
        record_crop(rec, record)
        for k, v in out.info.items():
            if k != "crops":
                rec.fact(k, v)
        for n in out.notes:
            rec.note(n)
        rec.tensor("image", out.image)
        return out.image


NODES = [CropForInpaint, StitchNode]
