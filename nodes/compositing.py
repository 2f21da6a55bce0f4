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
                io.Int.Input("target", default=1024, min=c.bounds.CROP["target"].min, max=c.bounds.CROP["target"].max,
                             step=16,
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
                                      tooltip="regions and auto split: holes at most this many pixels apart are one "
                                              "region.")),
                *crop_option_inputs(),
            ],
            outputs=[io.Image.Output("crop"), io.Mask.Output("crop_mask"),
                     Stitch.Output("stitch", display_name="stitch"), c.shapes_output(),
                     io.Image.Output("preview", tooltip="The photo (long side at most 1024) with the mask tinted red "
                                                        "(yellow: added by grow/fill_holes, blue: dropped by "
                                                        "threshold) and each crop's box outlined.")],
        )

    @classmethod
    def run(cls, rec, image, mask, context_factor, padding, target, regions, context_mask=None, min_area=64,
            merge_distance=32, **options):
        from ..fillscope.compositing.crop_preview import crop_preview

        rec.tensor("image", image, "input")
        rec.tensor("mask", mask, "input")
        if context_mask is not None:
            rec.tensor("context_mask", context_mask, "input")
        out = crop_for_inpaint(image, mask, context_mask=context_mask, context_factor=context_factor,
                               padding=padding, target_long_side=target, regions=regions, min_area=min_area,
                               merge_distance=merge_distance,
                               **{k: v for k, v in options.items() if v is not None})  # unset: the engine's default
        record_crop(rec, out.record)
        for n in out.notes:
            if n not in rec.record["notes"]:
                rec.note(n)
        for w in out.warnings:
            rec.warn(w)
        rec.tensor("crop", out.image)
        rec.tensor("crop_mask", out.mask)
        preview = crop_preview(out.record)
        rec.tensor("preview", preview)
        return out.image, out.mask, out.record, preview


# the crop options beyond the box (all optional: a workflow saved before them loads and runs as it did, but for
# min_scale's automatic split), by crop_for_inpaint's names; their defaults are read from its signature
CROP_OPTIONS = ("size_mode", "width", "height", "min_side", "max_side", "multiple", "downscale", "upscale",
                "past_edge", "fill_colour", "threshold", "fill_holes", "grow", "blend_outside", "min_scale")


def crop_option_defaults() -> dict:
    import inspect

    params = inspect.signature(crop_for_inpaint).parameters
    return {name: params[name].default for name in CROP_OPTIONS}


def crop_option_inputs():
    """Mask preparation, output size, resampling, past the edge and the automatic split, as Crop For Inpaint offers
    them (README's crop table names their ComfyUI-Inpaint-CropAndStitch equivalents)."""
    from ..fillscope.compositing.crop_boxes import PAST_EDGE, SIZE_MODES
    from ..fillscope.resample import FILTERS

    d, B = crop_option_defaults(), c.bounds.CROP
    return [
        io.Combo.Input("size_mode", options=list(SIZE_MODES), default=d["size_mode"], optional=True,
                       tooltip="long side: the long side is target, the short side follows the box. fixed: exactly "
                               "width x height. square: target x target. no resize: the photo's own pixels (scale 1), "
                               "kept between min_side and max_side."),
        advanced(io.Int.Input("width", default=d["width"], min=B["width"].min, max=B["width"].max, step=16, optional=True,
                              tooltip="size_mode fixed: the crop's width (a multiple of `multiple`).")),
        advanced(io.Int.Input("height", default=d["height"], min=B["height"].min, max=B["height"].max, step=16, optional=True,
                              tooltip="size_mode fixed: the crop's height (a multiple of `multiple`).")),
        advanced(io.Int.Input("min_side", default=d["min_side"], min=B["min_side"].min, max=B["min_side"].max, optional=True,
                              tooltip="size_mode no resize: a box whose long side is shorter is upscaled to this "
                                      "(0: no limit).")),
        advanced(io.Int.Input("max_side", default=d["max_side"], min=B["max_side"].min, max=B["max_side"].max, optional=True,
                              tooltip="size_mode no resize: a box whose long side is longer is downscaled to this "
                                      "(0: no limit).")),
        advanced(io.Int.Input("multiple", default=d["multiple"], min=B["multiple"].min, max=B["multiple"].max, optional=True,
                              tooltip="Crop sides are multiples of this: 16 for FLUX and klein (8 px latent x 2 px "
                                      "patch), 16 for SD3; the samplers refuse other sizes.")),
        advanced(io.Combo.Input("downscale", options=list(FILTERS), default=d["downscale"], optional=True,
                                tooltip="Resampling filter when a box is shrunk to the crop (and a crop shrunk back "
                                        "into its box). Masks always use area averaging (0 and 1 stay exact).")),
        advanced(io.Combo.Input("upscale", options=list(FILTERS), default=d["upscale"], optional=True,
                                tooltip="Resampling filter when a box is enlarged to the crop (or a crop enlarged "
                                        "back into its box).")),
        advanced(io.Combo.Input("past_edge", options=list(PAST_EDGE), default=d["past_edge"], optional=True,
                                tooltip="A context box that runs past the photo's border: shift inside (moved back "
                                        "in; too big: stretched), edge pixels or fill colour (kept centred, the photo "
                                        "extended there as context: mask 0, nothing pasted outside the photo).")),
        advanced(io.String.Input("fill_colour", default=d["fill_colour"], optional=True,
                                 tooltip="past_edge fill colour: the colour of the extension, #rrggbb.")),
        advanced(io.Float.Input("threshold", default=d["threshold"], min=B["threshold"].min, max=B["threshold"].max, step=0.01, optional=True,
                                tooltip="Mask values below this become 0 (a faint brush edge neither widens the box "
                                        "nor is pasted): those pixels keep the source, exactly.")),
        io.Boolean.Input("fill_holes", default=d["fill_holes"], optional=True,
                         tooltip="Pixels the mask encloses are repainted too. They are pasted by Stitch: exact "
                                 "outside the filled mask, not outside the mask as drawn."),
        io.Int.Input("grow", default=d["grow"], min=B["grow"].min, max=B["grow"].max, optional=True,
                     tooltip="Grow the mask by this many px (a square), for what the model repaints AND what Stitch "
                             "pastes: exact outside the grown mask, not outside the mask as drawn."),
        io.Int.Input("blend_outside", default=d["blend_outside"], min=B["blend_outside"].min, max=B["blend_outside"].max, optional=True,
                     tooltip="Blend the fill into this many px outside the mask (the model repaints that band, "
                             "Stitch ramps it out): kept pixels in the band are mixed, not exact; beyond it they are. "
                             "0: the paste stays inside the mask (Stitch's feather ramps inward)."),
        io.Float.Input("min_scale", default=d["min_scale"], min=B["min_scale"].min, max=B["min_scale"].max, step=0.05, optional=True,
                       tooltip="Auto split: when one box would shrink the photo below this scale (crop px per photo "
                               "px), separate holes get their own crops and a thin stroke is cut into pieces; a "
                               "compact hole is never cut. 0: never split."),
    ]


def record_crop(rec, record) -> None:
    """The crop on a node's record: the description ('4096x3072 photo -> 1024x768 crop, scale 0.25') and the boxes."""
    rec.fact("crop", record.describe())
    rec.fact("crop size", f"{record.crop_width}x{record.crop_height}")
    rec.fact("crops", len(record.crops))
    rec.fact("boxes", "; ".join(c.box_text() for c in record.crops))
    rec.fact("mask in crop", "; ".join(f"{c.scale_text()}, {c.mask_text()}" for c in record.crops))


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
