"""Where the crop's boxes go and what size the crop is: the geometry of crop and stitch, no pixels but the cut.

The crop size follows one of SIZE_MODES:
- "long side": the long side is `target`, the short side follows the boxes' aspect (multiples of `multiple`);
- "fixed": exactly `width` x `height`; the boxes take that aspect;
- "square": `target` x `target`;
- "no resize": the photo's own pixels (scale 1), the box grown to a multiple of `multiple`; a box whose long side is
  under `min_side` is upscaled to it, one over `max_side` downscaled to it (0: no limit).
All crops of one call share one size (one IMAGE batch): the size is planned on the envelope of the wanted boxes.

A box keeps the crop's aspect (in whole units of it where it can: the same scale on both axes). Where it runs past
the image's border PAST_EDGE says what happens: "shift inside" moves it back inside (a box bigger than the image
takes the whole side and is stretched to the crop's aspect); "edge pixels" and "fill colour" keep it centred on the
mask and extend the image there, by repeating its edge pixels or with one colour. The extension is context only:
its mask is 0 and Stitch pastes nothing outside the image.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import FillScopeInputError

SIZE_MODES = ("long side", "fixed", "square", "no resize")
PAST_EDGE = ("shift inside", "edge pixels", "fill colour")


def _choice(name, value, options):
    if value not in options:
        raise FillScopeInputError(name, f"is {value!r}; it must be one of {', '.join(repr(o) for o in options)}.",
                                  f"choose one of {', '.join(options)}.")


def parse_colour(text) -> tuple[float, float, float]:
    """'#rrggbb' (or 'rrggbb', '#rgb') -> (r, g, b) floats 0..1."""
    if isinstance(text, str):
        t = text.strip().lstrip("#")
        if re.fullmatch(r"[0-9a-fA-F]{3}", t):
            t = "".join(ch * 2 for ch in t)
        if re.fullmatch(r"[0-9a-fA-F]{6}", t):
            return tuple(int(t[k : k + 2], 16) / 255.0 for k in (0, 2, 4))
    raise FillScopeInputError("fill_colour", f"is {text!r}; it must be a hex colour such as '#808080'.",
                              "write the colour as #rrggbb (e.g. #808080 for mid grey, #000000 for black).")



@dataclass(frozen=True)
class CropSize:
    """How big the crop is (SIZE_MODES) and how its pixels are cut and resampled."""

    mode: str = "long side"
    target: int = 1024  # long side ("long side"), side ("square")
    width: int = 1024  # "fixed"
    height: int = 1024  # "fixed"
    min_side: int = 0  # "no resize": upscale a box whose long side is under this (0: no limit)
    max_side: int = 0  # "no resize": downscale a box whose long side is over this (0: no limit)
    multiple: int = 16  # crop sides are multiples of this (16: one FLUX token, 8 px x patch 2)
    past_edge: str = "shift inside"
    fill_colour: tuple = (0.5, 0.5, 0.5)

    def check(self) -> None:
        from ..bounds import CROP

        _choice("size_mode", self.mode, SIZE_MODES)
        _choice("past_edge", self.past_edge, PAST_EDGE)
        _whole("multiple", self.multiple, CROP["multiple"])
        used = {"long side": ("target",), "square": ("target",), "fixed": ("width", "height")}.get(self.mode, ())
        for name in used:  # only what the mode uses: a fixed size's width says nothing about a long side
            value = getattr(self, name)
            _whole(name, value, CROP[name])  # the node input's own range (target 64-4096, width / height 16-8192)
            if value < self.multiple:  # no side can be a multiple of it: `multiple` is what is too large
                larger = (f", or {name} to {self.multiple} or more" if self.multiple <= CROP[name].max else "")
                raise FillScopeInputError("multiple", f"is {self.multiple}, larger than {name} ({value}): every crop "
                                                      f"side is a multiple of it, so {name} cannot be one.",
                                          f"set multiple to at most {value} (16: one FLUX / klein token){larger}.")
            if value % self.multiple:
                raise FillScopeInputError(name, f"is {value}; it must be a multiple of {self.multiple} (multiple).",
                                          f"set {name} to {value // self.multiple * self.multiple} or "
                                          f"{-(-value // self.multiple) * self.multiple}.")
        for name in ("min_side", "max_side"):
            _whole(name, getattr(self, name), CROP[name])
        if self.min_side and self.max_side and self.min_side > self.max_side:
            raise FillScopeInputError("min_side", f"is {self.min_side}, more than max_side {self.max_side}.",
                                      "set min_side at most max_side (or either to 0: no limit).")

    @property
    def inside(self) -> bool:
        return self.past_edge == "shift inside"

    def no_resize_scale(self, box_h: float, box_w: float) -> float:
        """"no resize": 1, or what brings the long side to min_side / max_side."""
        long = max(box_h, box_w)
        if self.min_side and long < self.min_side:
            return self.min_side / long
        if self.max_side and long > self.max_side:
            return self.max_side / long
        return 1.0

    def scale_for(self, box_h: float, box_w: float) -> float:
        """The scale (crop px per photo px) a box of this size gets when it is cropped on its own."""
        if self.mode == "long side":
            return self.target / max(box_h, box_w)
        if self.mode == "square":
            return self.target / max(box_h, box_w)
        if self.mode == "fixed":
            return min(self.height / box_h, self.width / box_w)
        return self.no_resize_scale(box_h, box_w)

    def plan(self, wanted: list) -> tuple[int, int, float | None]:
        """(crop_h, crop_w, scale): the one crop size for boxes of `wanted` (h, w) sizes, planned on their envelope.
        `scale` is set for "no resize" only: every box is then wanted at crop / scale (the same scale for all)."""
        env_h, env_w = max(h for h, _ in wanted), max(w for _, w in wanted)
        m = self.multiple
        if self.mode == "long side":
            return (*crop_size(env_h, env_w, self.target, m), None)
        if self.mode == "square":
            return self.target, self.target, None
        if self.mode == "fixed":
            return self.height, self.width, None
        s = self.no_resize_scale(env_h, env_w)
        crop_h, crop_w = (max(m, math.ceil(round(side * s, 6) / m) * m) for side in (env_h, env_w))
        if self.max_side:
            cap = max(m, self.max_side // m * m)
            crop_h, crop_w = min(crop_h, cap), min(crop_w, cap)
        return crop_h, crop_w, s


def _whole(name, value, bounds):
    from ..bounds import number_problem

    problem = number_problem(value, bounds)
    if problem:
        raise FillScopeInputError(name, f"is {value!r}: it {problem}.", f"set {name} from {bounds}.")


def crop_size(box_h: int, box_w: int, target_long_side: int, multiple: int) -> tuple[int, int]:
    """(height, width) of the crop for a box: long side = target, short side the nearest multiple (at least one)."""
    if box_w >= box_h:
        return max(multiple, round(target_long_side * box_h / box_w / multiple) * multiple), target_long_side
    return target_long_side, max(multiple, round(target_long_side * box_w / box_h / multiple) * multiple)


def fit_box(bbox, wanted_h, wanted_w, crop_h, crop_w, height, width, inside: bool = True):
    """(top, left, h, w): a box holding `bbox` (y0, x0, y1, x1), at least wanted_h x wanted_w, with the crop's
    aspect ratio (in whole units of it where they fit: the same scale on both axes), centred on the bbox. inside:
    no bigger than the image and shifted to lie in it; otherwise it may run past the border (the caller extends the
    image there)."""
    y0, x0, y1, x1 = bbox
    need_h, need_w = y1 - y0, x1 - x0
    lim_h, lim_w = (height, width) if inside else (math.inf, math.inf)
    h, w = min(max(wanted_h, need_h), lim_h), min(max(wanted_w, need_w), lim_w)
    aspect = crop_w / crop_h
    if w < h * aspect:  # too narrow: widen, or (at the image's width) lower it back towards the aspect
        w = min(lim_w, round(h * aspect))
        if w < h * aspect:
            h = max(need_h, min(h, round(w / aspect)))
    else:
        h = min(lim_h, round(w / aspect))
        if w > h * aspect:
            w = max(need_w, min(w, round(h * aspect)))
    g = math.gcd(crop_h, crop_w)
    unit_h, unit_w = crop_h // g, crop_w // g
    k = max(-(-h // unit_h), -(-w // unit_w))
    if k * unit_h <= lim_h and k * unit_w <= lim_w:
        h, w = k * unit_h, k * unit_w
    h, w = int(h), int(w)
    cy, cx = (y0 + y1) / 2, (x0 + x1) / 2
    top, left = int(math.floor(cy - h / 2 + 0.5)), int(math.floor(cx - w / 2 + 0.5))
    if inside:
        top = min(max(top, max(0, y1 - h)), min(y0, height - h))
        left = min(max(left, max(0, x1 - w)), min(x0, width - w))
    else:
        top, left = min(max(top, y1 - h), y0), min(max(left, x1 - w), x0)
    return top, left, h, w


def wanted_size(bbox, context_factor, padding, height, width, inside: bool = True):
    """(h, w) the context asks for around a mask box: grown by context_factor and padding (at most the image when
    the box must stay inside it)."""
    y0, x0, y1, x1 = bbox
    wh = math.ceil((y1 - y0) * context_factor + 2 * padding)
    ww = math.ceil((x1 - x0) * context_factor + 2 * padding)
    if not inside:
        return max(wh, y1 - y0), max(ww, x1 - x0)
    return min(max(wh, y1 - y0), height), min(max(ww, x1 - x0), width)


def bbox_of(present):
    """(y0, x0, y1, x1) of the True pixels of a [H,W] bool tensor, or None."""
    rows, cols = present.any(dim=1), present.any(dim=0)
    if not bool(rows.any()):
        return None
    r, c = rows.nonzero(), cols.nonzero()
    return int(r[0]), int(c[0]), int(r[-1]) + 1, int(c[-1]) + 1


def union(a, b):
    if a is None or b is None:
        return a or b
    return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])


def in_image(top, left, h, w, height, width):
    """The part of a box inside the image: (y0, y1, x0, x1) in image pixels."""
    return max(top, 0), min(top + h, height), max(left, 0), min(left + w, width)


def cut_box(chw, top, left, h, w, past_edge: str = "shift inside", fill=(0.5, 0.5, 0.5)):
    """[N,C,H,W] -> [N,C,h,w]: the box's pixels; where it runs past the image, the image's edge pixels repeated
    ("edge pixels") or `fill` (one value per channel; a mask passes (0,)), never the pixels of the other side."""
    import torch
    import torch.nn.functional as F

    H, W = chw.shape[-2:]
    y0, y1, x0, x1 = in_image(top, left, h, w, H, W)
    inner = chw[..., y0:y1, x0:x1]
    if (y0, y1, x0, x1) == (top, top + h, left, left + w):
        return inner
    pads = (x0 - left, left + w - x1, y0 - top, top + h - y1)
    if past_edge == "edge pixels":
        return F.pad(inner, pads, mode="replicate")
    values = torch.tensor(fill, dtype=chw.dtype, device=chw.device).view(1, -1, 1, 1)
    out = values.expand(chw.shape[0], chw.shape[1], h, w).clone()
    out[..., y0 - top : y1 - top, x0 - left : x1 - left] = inner
    return out
