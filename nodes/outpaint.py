"""Outpainting: pad the canvas and make the mask of the new area (the engine: fillscope/compositing/outpaint.py)."""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.compositing.outpaint import (
    FILLS,
    MAX_PAD,
    pad_for_outpaint,
    parse_hex_colour,
)
from . import common as c
from .base import FillScopeNode


def _side(name: str, default: int):
    return io.Int.Input(name, default=default, min=0, max=MAX_PAD, step=8,
                        tooltip=f"Pixels added on the {name} side (0 = none).")


class OutpaintPad(FillScopeNode):
    title = "Outpaint pad"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeOutpaintPad",
            display_name="Outpaint Pad",
            category=c.CATEGORY + "/compositing",
            description=(
                "Adds pixels around the image and returns the larger image and its mask (1 on the new area, 0 on the "
                "original, whose pixels are exact copies) for a condition node's image and mask. Sides need not be "
                "multiples of 16: the condition node's size_mode pads or crops to the model's grid."
            ),
            inputs=[
                io.Image.Input("image", tooltip="The image to extend; its pixels are copied unchanged into the larger "
                                                "canvas."),
                _side("left", 0),
                _side("top", 0),
                _side("right", 256),
                _side("bottom", 0),
                io.Combo.Input("fill", options=list(FILLS), default="edge",
                               tooltip="What the new area starts as (the model repaints it): edge = the border pixels "
                                       "repeated, colour = one flat colour, mirror = the image reflected."),
                io.String.Input("colour", default="#808080",
                                tooltip="The flat colour of fill 'colour', as #RRGGBB (or #RGB); checked whatever the fill."),
                io.Int.Input("feather", default=0, min=0, max=256,
                             tooltip="Soft mask reaching this many px into the original along each padded side "
                                     "(values < 1, falling inward), so the model redraws across the seam: at the "
                                     "condition's threshold 0.5 the band's outer half is repainted; at threshold 0 it "
                                     "stays soft. 0 = a hard edge exactly at the original's border."),
            ],
            outputs=[io.Image.Output("padded"), io.Mask.Output("mask"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, image, left, top, right, bottom, fill, colour, feather):
        rgb = parse_hex_colour(colour)  # checked whatever the fill: a typo is refused before it is used
        rec.tensor("image", image, "input")
        out = pad_for_outpaint(image, left=left, top=top, right=right, bottom=bottom, fill=fill, colour=rgb,
                               feather=feather)
        rec.note(out.description)
        if left == top == right == bottom == 0:
            rec.warn("every side is 0 px: the image is unchanged and the mask is empty")
        rec.tensor("image", out.image)
        rec.tensor("mask", out.mask)
        return out.image, out.mask


NODES = [OutpaintPad]
