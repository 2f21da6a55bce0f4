"""Outpainting: a larger canvas with the image on it, and the mask of what the model is to paint around it.

`pad_for_outpaint` adds `left`/`top`/`right`/`bottom` px around an IMAGE [B,H,W,C] and returns
(padded [B,H+top+bottom,W+left+right,3], mask [B,H',W'], description). The new area is filled so the model starts
from something plausible (the fill is only a start: the mask is 1 there and the model repaints it):

- ``edge``: the border pixels repeated outward;
- ``mirror``: the image reflected at its border (reflected again when the pad is wider than the image);
- ``colour``: one flat colour (`colour`, RGB 0..1).

The original pixels are exact copies in the padded image. The mask is 1 on the new area and 0 on the original,
except with `feather` > 0: a seam band reaching `feather` px INTO the original along each padded side, soft values
falling from feather/(feather+1) at the first original pixel to 1/(feather+1) at the feather-th (all < 1; corners
take the larger of two sides). A condition node binarising at 0.5 repaints the band's outer half (values >= 0.5)
as well: the model redraws across the seam; at threshold 0 the band stays soft and the paste-back blends over it.
Sides need not be multiples of 16: the condition nodes' size_mode pads or crops the canvas to the model's grid.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import FillScopeInputError
from ..pixels import as_rgb, require_finite

FILLS = ("edge", "colour", "mirror")
MAX_PAD = 4096


class OutpaintPad(NamedTuple):
    image: object  # [B,H',W',3] 0..1
    mask: object  # [B,H',W'] 1 = new area (to paint)
    description: str


def parse_hex_colour(text: str, name: str = "colour") -> tuple:
    """'#RRGGBB' / 'RRGGBB' / '#RGB' -> (r, g, b) in 0..1; a FillScopeInputError naming `name` otherwise."""
    t = (text or "").strip().removeprefix("#")
    if len(t) == 3:
        t = "".join(ch * 2 for ch in t)
    try:
        if len(t) != 6:
            raise ValueError
        return tuple(int(t[i: i + 2], 16) / 255.0 for i in (0, 2, 4))
    except ValueError:
        raise FillScopeInputError(name, f"{text!r} is not a hex colour.",
                                  "write it as #RRGGBB (e.g. #808080 for mid grey) or #RGB.") from None


def _mirror(x, pads):
    """Reflect-pad [B,C,H,W] by (left, right, top, bottom), in rounds when a pad is wider than the image."""
    import torch.nn.functional as F

    left, right, top, bottom = pads
    while left or right or top or bottom:
        h, w = x.shape[-2:]
        if h < 2 and (top or bottom) or w < 2 and (left or right):  # a 1-px side has nothing to reflect
            return F.pad(x, (left, right, top, bottom), mode="replicate")
        step = [min(p, (w if i < 2 else h) - 1) for i, p in enumerate((left, right, top, bottom))]
        x = F.pad(x, tuple(step), mode="reflect")
        left, right, top, bottom = (p - s for p, s in zip((left, right, top, bottom), step))
    return x


def _seam_ramp(length: int, pad_before: int, pad_after: int, feather: int, device):
    """[length] of the original's positions along one axis: soft values near a padded side, 0 elsewhere."""
    import torch

    pos = torch.arange(length, device=device, dtype=torch.float32)
    ramp = torch.zeros(length, device=device)
    if feather <= 0:
        return ramp
    for dist, padded in ((pos, pad_before), (length - 1 - pos, pad_after)):
        if padded:
            ramp = torch.maximum(ramp, ((feather - dist) / (feather + 1)).clamp(min=0))
    return ramp


def pad_for_outpaint(image, *, left: int = 0, top: int = 0, right: int = 0, bottom: int = 0, fill: str = "edge",
                     colour=(0.5, 0.5, 0.5), feather: int = 0) -> OutpaintPad:
    """See the module docstring. `image` [B,H,W,C] 0..1 (C 3; 4 drops alpha, 1 is repeated); `colour` (r, g, b)
    0..1 for fill 'colour'; `feather` px of soft mask into the original (0: a hard 0/1 mask)."""
    import math

    import torch
    import torch.nn.functional as F

    if fill not in FILLS:
        raise FillScopeInputError("fill", f"unknown fill {fill!r}.", f"use one of {', '.join(FILLS)}.")
    for name, v in (("left", left), ("top", top), ("right", right), ("bottom", bottom), ("feather", feather)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_PAD:
            raise FillScopeInputError(name, f"is {v!r}; it must be a whole number from 0 to {MAX_PAD}.",
                                      f"set {name} to a number of pixels from 0 to {MAX_PAD}.")
    if len(tuple(colour)) != 3 or not all(isinstance(c, (int, float)) and math.isfinite(c) and 0 <= c <= 1
                                          for c in colour):
        raise FillScopeInputError("colour", f"is {colour!r}; it must be three numbers from 0 to 1 (r, g, b).",
                                  "give an RGB colour, e.g. (0.5, 0.5, 0.5) for mid grey.")
    notes: list[str] = []
    rgb = as_rgb(image, notes)
    require_finite("image", rgb)
    b, h, w, _ = rgb.shape
    chw = rgb.permute(0, 3, 1, 2)
    pads = (left, right, top, bottom)
    if fill == "edge":
        out = F.pad(chw, pads, mode="replicate")
    elif fill == "mirror":
        out = _mirror(chw, pads)
    else:
        out = F.pad(chw, pads, value=0.0)
        c = torch.tensor(colour, dtype=out.dtype, device=out.device).view(1, 3, 1, 1)
        new = torch.ones_like(out[:, :1], dtype=torch.bool)
        new[:, :, top: top + h, left: left + w] = False
        out = torch.where(new, c.expand_as(out), out)
    out[:, :, top: top + h, left: left + w] = chw  # the original, exact (already so; made explicit)
    H, W = h + top + bottom, w + left + right
    mask = torch.ones(b, H, W, dtype=out.dtype, device=out.device)
    rows = _seam_ramp(h, top, bottom, feather, out.device)
    cols = _seam_ramp(w, left, right, feather, out.device)
    mask[:, top: top + h, left: left + w] = torch.maximum(rows[:, None], cols[None, :]).to(out.dtype)
    added = H * W - h * w
    if added == 0:
        desc = f"{w}x{h}: nothing added (every side is 0 px); the mask is empty"
    else:
        sides = ", ".join(f"{n} px {s}" for n, s in ((left, "left"), (top, "top"), (right, "right"),
                                                     (bottom, "bottom")) if n)
        how = {"edge": "the border pixels repeated", "mirror": "the image mirrored",
               "colour": "rgb({:.0f}, {:.0f}, {:.0f})".format(*(255 * c for c in colour))}[fill]
        desc = (f"{w}x{h} -> {W}x{H}: {sides} added, filled with {how}; mask 1 on the {added * b:,} new px, 0 on the "
                "original" + (f", soft over {feather} px into the original along the padded sides" if feather else "")
                + "; sides not multiples of 16 are padded or cropped by the condition node's size_mode")
    if notes:
        desc += "; " + "; ".join(notes)
    return OutpaintPad(out.permute(0, 2, 3, 1).contiguous(), mask, desc)
