"""Crop and stitch: the model runs on a box around the mask at its native size, however big the photo is.

crop_for_inpaint(image, mask) takes the bounding box of the mask (and of an optional context mask), grows it by
`context_factor` around its centre plus `padding` px a side, keeps it inside the image (shifted, not cut, where it
can be; a box bigger than the image takes the whole side), and resizes it so that its long side is
`target_long_side` and both sides are multiples of `multiple` (16: one FLUX token). The box is chosen with the
crop's aspect ratio, in whole units of it where the image allows, so the scale is the same on both axes. Small
boxes are upscaled too: the model works best at its native size (1024 for FLUX.1 Fill).

With regions=True (several separate holes) every region gets its own box (regions.split_regions); all crops of one
call share one size so that they form one IMAGE batch: the size of the largest region's box, the other boxes grown
to its aspect ratio. A batch of images with their masks gives one crop per image (or per region of each image).

Resampling: the image with bilinear interpolation, antialiased (a downscale averages, it never aliases); the mask
with area averaging, which keeps 0 and 1 exact (a window of zeros averages to exactly 0, of ones to exactly 1).

stitch(generated, record) resizes each generated crop back to its box and composites it into a copy of the
original through the mask (feathered inward, as pixels.feather_inward): where the original mask is 0 the original
pixels come back bit-identical, at any photo size. Only the boxes are touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..bounds import CROP, number_problem, whole_value
from ..errors import FillScopeInputError
from ..pixels import as_mask, as_rgb, require_finite
from .crop_boxes import CropSize, bbox_of, crop_size, cut_box, fit_box, parse_colour, union, wanted_size  # noqa: F401
from .regions import split_regions

MAX_CROPS = 16  # crops of one call (one IMAGE batch): a noisy mask must not ask for thousands of model runs


@dataclass
class CropBox:
    """One crop: which image, where in it (original pixels), at what scale (crop px per original px)."""

    image_index: int
    top: int
    left: int
    height: int
    width: int
    scale_y: float
    scale_x: float
    mask_pixels: int  # pixels of this crop's mask (> 0) in the original
    region: int | None = None  # 0-based region (or piece) of its image when it has several crops, else None
    mask: object = field(default=None, repr=False)  # [height, width] this crop's prepared mask in its box
    mask_in_crop: tuple = (0, 0)  # (width, height) of the mask's bounding box in crop px
    stroke_px: float = 0.0  # the mask's stroke width in crop px (crop_masks.mask_width)
    image_height: int = 0  # of the photo: tells a box that runs past its border
    image_width: int = 0

    @property
    def past_edge(self) -> bool:
        return (self.top < 0 or self.left < 0 or self.top + self.height > self.image_height
                or self.left + self.width > self.image_width)

    def measure_in_crop(self, crop_mask) -> None:
        """The mask's size in the crop: its bounding box and its stroke width, in crop px ([h,w] crop mask)."""
        from .crop_masks import mask_width

        present = crop_mask > 0.5
        box = bbox_of(present)
        self.mask_in_crop = (0, 0) if box is None else (box[3] - box[1], box[2] - box[0])
        self.stroke_px = mask_width(present)

    def mask_text(self) -> str:
        w, h = self.mask_in_crop
        return f"mask {w}x{h} px in the crop, strokes ~{self.stroke_px:.0f} px"

    @property
    def scale(self) -> float:
        return self.scale_x if math.isclose(self.scale_x, self.scale_y, rel_tol=1e-9) else (self.scale_x + self.scale_y) / 2

    def scale_text(self) -> str:
        if math.isclose(self.scale_x, self.scale_y, rel_tol=1e-9):
            return f"scale {self.scale_x:.4g}"
        return f"scale {self.scale_x:.4g} (x) / {self.scale_y:.4g} (y)"

    def box_text(self) -> str:
        return f"box {self.width}x{self.height} at (top {self.top}, left {self.left})"

    def as_dict(self) -> dict:
        return {"image": self.image_index, "region": self.region, "top": self.top, "left": self.left,
                "height": self.height, "width": self.width, "scale_y": self.scale_y, "scale_x": self.scale_x,
                "mask_pixels": self.mask_pixels, "mask_in_crop": list(self.mask_in_crop),
                "stroke_px": round(self.stroke_px, 1)}


@dataclass
class StitchRecord:
    """What stitch needs to put the crops back: the original image and mask, and each crop's box and scale."""

    source: object = field(repr=False)  # [B,H,W,3] the original image (RGB, values as given)
    mask: object = field(repr=False)  # [B,H,W] the original mask at full size (0..1)
    crop_height: int = 0
    crop_width: int = 0
    crops: list = field(default_factory=list)  # CropBox, in the order of the crop batch
    given_mask: object = field(default=None, repr=False)  # [B,H,W] the mask as given, when preparation changed it
    blend_outside: int = 0  # px outside the mask Stitch blends over (crop_masks.paste_alpha)
    downscale: str = "bilinear"  # resampling filters (fillscope/resample.py), crop and stitch alike
    upscale: str = "bilinear"

    def __post_init__(self):
        for c in self.crops:
            c.image_height, c.image_width = self.height, self.width

    @property
    def height(self) -> int:
        return int(self.source.shape[1])

    @property
    def width(self) -> int:
        return int(self.source.shape[2])

    @property
    def batch(self) -> int:
        return int(self.source.shape[0])

    def describe_crop(self, crop: CropBox) -> str:
        return f"{self.width}x{self.height} photo -> {self.crop_width}x{self.crop_height} crop, {crop.scale_text()}"

    def describe(self) -> str:
        """e.g. '4096x3072 photo -> 1024x768 crop, scale 0.25' (one line per crop when there are several)."""
        if len(self.crops) == 1:
            return self.describe_crop(self.crops[0])
        return "\n".join(f"crop {i}: {self._where(c)}{self.describe_crop(c)} ({c.box_text()})"
                         for i, c in enumerate(self.crops))

    def _where(self, crop: CropBox) -> str:
        parts = ([f"image {crop.image_index}"] if self.batch > 1 else []) + (
            [f"region {crop.region}"] if crop.region is not None else [])
        return (", ".join(parts) + ": ") if parts else ""


@dataclass
class CropResult:
    image: object  # [N,h,w,3] float 0..1, the crops (ComfyUI IMAGE)
    mask: object  # [N,h,w] 0..1, the crops' masks (ComfyUI MASK)
    record: StitchRecord
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)


@dataclass
class StitchResult:
    image: object  # [B,H,W,3]
    info: dict = field(default_factory=dict)  # facts: crops, kept pixels, ring delta E with the tone options
    crops: list = field(default_factory=list)  # per crop: box, scale (+ ring delta E before/after with tone options)
    notes: list = field(default_factory=list)
    kept_pixels: int = 0  # pixels (over the batch) returned as the exact source values


# ---- checks ---------------------------------------------------------------------------------------------------


def _check_tensor(name, t, kind):
    import torch

    if not isinstance(t, torch.Tensor):
        raise FillScopeInputError(name, f"is {type(t).__name__}, not a ComfyUI {kind} tensor.", f"connect a {kind}.")
    if t.device.type == "meta":
        raise FillScopeInputError(name, "is on the meta device: it has a shape but no pixel values to crop or stitch.",
                                  f"connect a real {kind} (a meta graph has no pixels).")


def _whole(name, value, low, what="pixels"):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise FillScopeInputError(name, f"is {value!r}; it must be a whole number of {what}, {low} or more.",
                                  f"set {name} to {low} or more.")


def _renamed(e: FillScopeInputError, name: str) -> FillScopeInputError:
    return FillScopeInputError(name, e.problem.replace("mask ", f"{name} ", 1), e.fix)


def _source_rgb(image):
    """The image as [B,H,W,3] with its values as given (alpha dropped, grey repeated): what stitch returns outside
    the mask, bit for bit."""
    if image.dim() == 3:
        image = image.unsqueeze(0)
    if image.shape[-1] == 4:
        image = image[..., :3]
    elif image.shape[-1] == 1:
        image = image.expand(*image.shape[:-1], 3)
    return image.float()


# ---- resampling -------------------------------------------------------------------------------------------------


def resize_image(chw, height: int, width: int, filter: str = "bilinear"):
    """[N,3,h,w] -> [N,3,height,width], clamped to 0..1 (lanczos and bicubic overshoot at edges). bilinear is
    torch's antialiased interpolate (a downscale averages); the others resample.resize."""
    import torch.nn.functional as F

    if tuple(chw.shape[-2:]) == (height, width):
        return chw.clamp(0, 1)
    if filter == "bilinear":
        return F.interpolate(chw, size=(height, width), mode="bilinear", align_corners=False,
                             antialias=True).clamp(0, 1)
    from ..resample import resize

    return resize(chw, height, width, filter).clamp(0, 1)


def resize_mask(m, height: int, width: int):
    """[N,1,h,w] -> [N,1,height,width] by area averaging: 0 and 1 stay exact where a window holds only them."""
    import torch.nn.functional as F

    if tuple(m.shape[-2:]) == (height, width):
        return m
    return F.interpolate(m, size=(height, width), mode="area").clamp(0, 1)


def _filter_for(src_h, src_w, dst_h, dst_w, downscale, upscale):
    """The upscale filter when either side grows (as ComfyUI-Inpaint-CropAndStitch decides), else the downscale."""
    return upscale if dst_h > src_h or dst_w > src_w else downscale


# ---- crop -------------------------------------------------------------------------------------------------------


def crop_for_inpaint(image, mask, *, context_mask=None, context_factor: float = 1.5, padding: int = 32,
                     target_long_side: int = 1024, multiple: int = 16, regions: bool = False, min_area: int = 64,
                     merge_distance: int = 32, max_crops: int = MAX_CROPS, threshold: float = 0.0,
                     fill_holes: bool = False, grow: int = 0, blend_outside: int = 0, size_mode: str = "long side",
                     width: int = 1024, height: int = 1024, min_side: int = 0, max_side: int = 0,
                     past_edge: str = "shift inside", fill_colour: str = "#808080", downscale: str = "bilinear",
                     upscale: str = "bilinear", min_scale: float = 0.5) -> CropResult:
    """Crops of `image` [B,H,W,C] around `mask` [B,H,W] (1 = repaint; any value > 0 is inside), all at one size
    (crop_boxes.CropSize: size_mode with target / width x height / min_side..max_side, sides multiples of
    `multiple`). One crop per image, or with regions=True one per region of each image's mask
    (regions.split_regions: min_area, merge_distance); a box that would fall under `min_scale` is split
    (crop_split; 0: never). The mask is prepared first (crop_masks: threshold, fill_holes, grow; blend_outside
    widens what the model repaints and what Stitch blends). `context_mask` (optional, same size) only enlarges the
    box: what the model should see around the hole (with several crops, each box takes in the context mask's parts
    that overlap it). past_edge: what a box that runs past the border does (crop_boxes.PAST_EDGE)."""
    import torch

    from ..resample import FILTERS
    from .crop_masks import check_prep_options, prepare_mask, repaint_mask
    from .crop_split import split_starved

    _check_tensor("image", image, "IMAGE")
    _check_tensor("mask", mask, "MASK")
    if context_mask is not None:
        _check_tensor("context_mask", context_mask, "MASK")
    # whole numbers may come as integral floats (1024.0; bounds.number_problem): the ints they are from here on
    padding, target_long_side, multiple, min_area, merge_distance, max_crops, grow, blend_outside, width, height, \
        min_side, max_side = map(whole_value, (padding, target_long_side, multiple, min_area, merge_distance,
                                               max_crops, grow, blend_outside, width, height, min_side, max_side))
    if not (isinstance(context_factor, (int, float)) and math.isfinite(context_factor) and 1.0 <= context_factor <= 100):
        raise FillScopeInputError("context_factor", f"is {context_factor!r}; it must be a number from 1 to 100.",
                                  "set context_factor to 1 (the mask's box only) or more (1.5: half as much again).")
    _whole("padding", padding, 0)
    _whole("max_crops", max_crops, 1, "crops")
    size = CropSize(size_mode, target_long_side, width, height, min_side, max_side, multiple, past_edge,
                    parse_colour(fill_colour) if past_edge == "fill colour" else (0.5, 0.5, 0.5))
    size.check()
    check_prep_options(threshold, fill_holes, grow, blend_outside)
    for name, value in (("downscale", downscale), ("upscale", upscale)):
        if value not in FILTERS:
            raise FillScopeInputError(name, f"is {value!r}; it must be one of {', '.join(FILTERS)}.",
                                      f"choose one of {', '.join(FILTERS)}.")
    problem = number_problem(min_scale, CROP["min_scale"])
    if problem:
        raise FillScopeInputError("min_scale", f"is {min_scale!r}: it {problem}.",
                                  "set min_scale to 0 (never split) or e.g. 0.5 (split a box scaled under half).")
    for name, t in (("image", image), ("mask", mask), ("context_mask", context_mask)):
        if t is not None:
            require_finite(name, t)
    notes: list[str] = []
    warnings: list[str] = []
    if image.dim() not in (3, 4):
        raise FillScopeInputError("image", f"expected an IMAGE [B,H,W,C], got shape {list(image.shape)}.",
                                  "connect a ComfyUI IMAGE.")
    as_rgb(image[..., :1, :1, :], notes)  # the IMAGE conventions (channels, notes), checked on one pixel
    source = _source_rgb(image)  # the values as given: what stitch returns outside the mask (crops are clamped)
    b, H, W, _ = source.shape
    given = as_mask(mask, source.shape).to(source.device)
    m = prepare_mask(given, threshold=threshold, fill_holes=fill_holes, grow=grow, notes=notes)
    ctx = None
    if context_mask is not None:
        try:
            ctx = as_mask(context_mask, source.shape).to(source.device)
        except FillScopeInputError as e:
            raise _renamed(e, "context_mask") from None

    def grown(bbox):  # the box the mask needs once blend_outside widens it (inside the image)
        y0, x0, y1, x1 = bbox
        n = blend_outside
        return max(0, y0 - n), max(0, x0 - n), min(H, y1 + n), min(W, x1 + n)

    def scale_of(bbox):
        return size.scale_for(*wanted_size(grown(bbox), context_factor, padding, H, W, size.inside))

    # the pieces: (image index, region index or None, Region, its box with blend band and context)
    wanted = []
    for i in range(b):
        where = f"image {i}: " if b > 1 else ""
        pieces = split_starved(m[i], regions=regions, min_area=min_area, merge_distance=merge_distance,
                               min_scale=min_scale, scale_of=scale_of, max_pieces=max_crops, notes=notes, where=where)
        ctx_bbox = bbox_of(ctx[i] > 0) if ctx is not None else None
        ctx_parts = []
        if ctx_bbox is not None and (regions or len(pieces) > 1):
            ctx_parts = [(c.top, c.left, c.bottom, c.right) for c in split_regions(ctx[i], min_area=0, merge_distance=0)]
        for r, piece in enumerate(pieces):
            box = grown((piece.top, piece.left, piece.bottom, piece.right))
            if ctx_parts:  # each crop takes in the parts of the context mask that overlap its own box
                for part in ctx_parts:
                    if part[0] < box[2] and box[0] < part[2] and part[1] < box[3] and box[1] < part[3]:
                        box = union(box, part)
            else:
                box = union(box, ctx_bbox)
            wanted.append((i, r if (regions or len(pieces) > 1) else None, piece, box))
        if not pieces and b > 1:
            notes.append(f"image {i}: nothing to repaint" + (" (every region under min_area)" if regions and
                         bool((m[i] > 0).any()) else " (empty mask)") + ": it comes back unchanged, no crop")
    if not wanted:
        why = ("every region of the mask is smaller than min_area" if regions and bool((m > 0).any()) else
               "the mask is empty (all 0)" + (" once threshold dropped its faint values" if bool((given > 0).any())
                                              else ""))
        raise FillScopeInputError(
            "mask", f"nothing to crop: {why}, so there is no box to give the model.",
            "paint the hole to repaint (1 = repaint; LoadImage's mask is 1 - alpha)"
            + (", or lower min_area." if regions else ", or lower threshold." if threshold > 0 else "."))
    if len(wanted) > max_crops:
        raise FillScopeInputError(
            "mask", f"has {len(wanted)} separate regions over the batch; at most {max_crops} crops are made in one "
                    "call (each is one model run).",
            "raise merge_distance (nearby holes become one region) or min_area (specks are dropped), or turn "
            "regions off (one box around the whole mask).")

    sizes = [wanted_size(box, context_factor, padding, H, W, size.inside) for *_, box in wanted]
    crop_h, crop_w, same_scale = size.plan(sizes)
    if same_scale is not None:  # "no resize": every box at the one scale the crop size was planned at
        sizes = [(math.ceil(crop_h / same_scale - 1e-6), math.ceil(crop_w / same_scale - 1e-6))] * len(wanted)

    boxes, img_crops, mask_crops = [], [], []
    chw_all = source.permute(0, 3, 1, 2)
    for (i, r, piece, box), (wh, ww) in zip(wanted, sizes):
        top, left, h, w = fit_box(box, wh, ww, crop_h, crop_w, H, W, size.inside)
        box_mask = torch.zeros(h, w, dtype=m.dtype, device=m.device)
        box_mask[piece.top - top : piece.bottom - top, piece.left - left : piece.right - left] = piece.mask
        crop = CropBox(i, top, left, h, w, crop_h / h, crop_w / w, int((box_mask > 0).sum()), r, box_mask)
        boxes.append(crop)
        pixels = cut_box(chw_all[i : i + 1], top, left, h, w, size.past_edge, size.fill_colour).clamp(0, 1)
        img_crops.append(resize_image(pixels, crop_h, crop_w, _filter_for(h, w, crop_h, crop_w, downscale, upscale)))
        mask_crops.append(resize_mask(repaint_mask(box_mask, blend_outside)[None, None], crop_h, crop_w))
    record = StitchRecord(source, m, crop_h, crop_w, boxes, given_mask=None if m is given else given,
                          blend_outside=blend_outside, downscale=downscale, upscale=upscale)
    for c, mc in zip(boxes, mask_crops):
        c.measure_in_crop(mc[0, 0])
        notes.append(f"{record._where(c)}{record.describe_crop(c)} ({c.box_text()}; {c.mask_text()})")
    _size_notes(record, size, notes, warnings, min_scale)
    image_crops = torch.cat(img_crops).permute(0, 2, 3, 1).contiguous()
    mask_crop = torch.cat(mask_crops)[:, 0].contiguous()
    return CropResult(image_crops, mask_crop, record, notes, warnings)


def _size_notes(record, size, notes, warnings, min_scale) -> None:
    from .crop_split import THIN_PX

    boxes = record.crops
    ups = [c for c in boxes if c.scale > 1.0001]
    if ups and size.mode != "no resize":
        notes.append(f"{len(ups)} of {len(boxes)} box{'es' if len(boxes) > 1 else ''} upscaled (up to "
                     f"{max(c.scale for c in ups):.3g}x) so the model runs at its native size "
                     f"({record.crop_width}x{record.crop_height} crop); the result is scaled back down when stitched")
    if any(not math.isclose(c.scale_x, c.scale_y, rel_tol=0.01) for c in boxes):
        warnings.append("a box could not take the crop's aspect ratio inside the image: its crop is stretched "
                        "(scales differ by more than 1 %); stitch undoes it (past_edge 'edge pixels' or 'fill "
                        "colour' extends the image instead)")
    if any(c.past_edge for c in boxes):
        notes.append(f"{sum(c.past_edge for c in boxes)} box(es) run past the image's border: extended with "
                     f"{size.past_edge} (context only: mask 0 there, nothing pasted outside the image)")
    if len(boxes) > 1:
        notes.append(f"{len(boxes)} crops at one size ({record.crop_width}x{record.crop_height}: planned on the "
                     "largest box)")
    for k, c in enumerate(boxes):
        if c.stroke_px and c.stroke_px < THIN_PX / 4:
            warnings.append(
                f"crop {k}: the masked detail is about {c.stroke_px:.0f} px wide in the crop ({c.scale_text()}): "
                "the model can hardly see it. Fix: raise min_scale (auto split), turn regions on, lower "
                "context_factor or padding, or raise the crop size.")
        elif min_scale and c.scale < min_scale:
            notes.append(f"crop {k} is sampled at {c.scale_text()} (under min_scale {min_scale:g}): the hole itself "
                         "is that big, and one hole is not cut; raise the crop size or use a tiled node for more "
                         "detail")


# ---- stitch -----------------------------------------------------------------------------------------------------


def _in_image(record: StitchRecord, crop: CropBox):
    """(y0, y1, x0, x1) of the crop's box inside the photo: a box that runs past the border pastes only there."""
    from .crop_boxes import in_image

    return in_image(crop.top, crop.left, crop.height, crop.width, record.height, record.width)


def _paste_area(record: StitchRecord, crop: CropBox, margin: int):
    """(y0, y1, x0, x1) in photo px: where the crop can change anything, its mask's bounding box grown by
    blend_outside + `margin` px, inside its box and the photo; None when its mask is empty. Only this area is
    blended: the rest of a big box keeps the source without being computed."""
    box = bbox_of(crop.mask > 0)
    if box is None:
        return None
    by0, bx0, by1, bx1 = box
    grow = record.blend_outside + margin
    iy0, iy1, ix0, ix1 = _in_image(record, crop)
    y0, x0 = max(iy0, crop.top + by0 - grow), max(ix0, crop.left + bx0 - grow)
    y1, x1 = min(iy1, crop.top + by1 + grow), min(ix1, crop.left + bx1 + grow)
    return (y0, y1, x0, x1) if y0 < y1 and x0 < x1 else None


def _paste_mask(record: StitchRecord, crop: CropBox, feather: int, area):
    """[h,w,1] the paste weight (crop_masks.paste_alpha) on `area` (_paste_area); computed on it grown by
    `feather + blend_outside` px (inside the photo, zero beyond the area: the mask is) so the ramp sees the mask's
    true neighbours, not the area's edge."""
    import torch

    from .crop_masks import paste_alpha

    y0, y1, x0, x1 = area
    m = crop.mask[y0 - crop.top : y1 - crop.top, x0 - crop.left : x1 - crop.left].float()
    margin = feather + record.blend_outside
    if margin <= 0:
        return m[..., None]
    H, W = record.height, record.width
    t0, l0 = max(0, y0 - margin), max(0, x0 - margin)
    b1, r1 = min(H, y1 + margin), min(W, x1 + margin)
    grown = torch.zeros(b1 - t0, r1 - l0, dtype=m.dtype, device=m.device)
    grown[y0 - t0 : y1 - t0, x0 - l0 : x1 - l0] = m
    soft = paste_alpha(grown[None, None], feather, record.blend_outside)[0, 0]
    return soft[y0 - t0 : y1 - t0, x0 - l0 : x1 - l0, None]


def _tone(tone_match, poisson, generated, source, paste, ring_width):
    """The tone options (compositing/tone.py, imported only when one is on) on one box: (adjusted generated [h,w,3],
    facts). The ring delta E compares the generated crop with the source on the kept pixels within `ring_width` px
    outside the mask: before (as the model made it) and after (as it is composited)."""
    from . import tone

    g, src, m = generated[None], source[None].float(), paste[None]
    ring = tone.ring_mask(m, ring_width)
    facts = {"ring pixels": int(ring.sum()), "ring delta E before": tone.ring_delta_e(g, src, ring)}
    if tone_match:
        g, info = tone.match_tone(g, src, m, ring_width=ring_width)
        if info.get("skipped"):
            facts["tone match"] = info["skipped"]
    if poisson:
        # outside the mask poisson_blend returns the source: the fill meets it on the mask's border, so the ring's
        # delta E after is 0 by construction (the drift measured before is spread into the hole, smoothly)
        g = tone.poisson_blend(g, src, m)
    facts["ring delta E after"] = tone.ring_delta_e(g, src, ring)
    return g[0], facts


def stitch(generated, record: StitchRecord, *, feather: int = 8, tone_match: bool = False, poisson: bool = False,
           ring_width: int = 16) -> StitchResult:
    """The generated crops [N,h,w,C] back into the original image: each resized to its box, composited through its
    mask feathered `feather` px inward; where the original mask is 0 the result is the original, bit for bit.
    tone_match / poisson (compositing/tone.py) adjust each crop to the source on a ring `ring_width` px wide
    around its mask before compositing, and report the ring's delta E before and after."""
    import torch

    if not isinstance(record, StitchRecord):
        raise FillScopeInputError("stitch", f"is {type(record).__name__}, not a crop record.",
                                  "wire the stitch output of the Crop For Inpaint node that made these crops.")
    _check_tensor("generated", generated, "IMAGE")
    _whole("feather", feather, 0)
    _whole("ring_width", ring_width, 1)
    if generated.dim() == 3:
        generated = generated.unsqueeze(0)
    n = len(record.crops)
    if generated.dim() != 4 or generated.shape[-1] not in (3, 4):
        raise FillScopeInputError("generated", f"expected an IMAGE [N,h,w,3], got shape {list(generated.shape)}.",
                                  "connect the decoded crops (VAE Decode after the sampler).")
    got = (int(generated.shape[0]), int(generated.shape[1]), int(generated.shape[2]))
    if got != (n, record.crop_height, record.crop_width):
        raise FillScopeInputError(
            "generated", f"is {got[0]} image(s) of {got[2]}x{got[1]}, but the crop made {n} crop(s) of "
                         f"{record.crop_width}x{record.crop_height}.",
            "wire the image decoded from these crops (Crop For Inpaint -> condition -> sampler -> VAE Decode), at the "
            "crop's size and batch.")
    require_finite("generated", generated)
    gen = generated[..., :3].float().to(record.source.device)
    out = record.source.clone()
    result = StitchResult(out)
    touched = torch.zeros(record.batch, record.height, record.width, dtype=torch.bool, device=out.device)
    outside_given = 0
    tone_margin = ring_width + 2 if (tone_match or poisson) else 0
    for i, crop in enumerate(record.crops):
        entry = {"crop": i, **crop.as_dict()}
        result.crops.append(entry)
        area = _paste_area(record, crop, tone_margin)
        if area is None:
            continue
        y0, y1, x0, x1 = area
        box = (crop.image_index, slice(y0, y1), slice(x0, x1))
        back = _filter_for(record.crop_height, record.crop_width, crop.height, crop.width, record.downscale,
                           record.upscale)
        g = resize_image(gen[i : i + 1].permute(0, 3, 1, 2), crop.height, crop.width, back)[0].permute(1, 2, 0)
        g = g[y0 - crop.top : y1 - crop.top, x0 - crop.left : x1 - crop.left]
        src = out[box]  # the source, or an earlier crop's pixels where its region reaches into this box
        paste = _paste_mask(record, crop, feather, area).to(g.dtype)
        if tone_match or poisson:
            g, facts = _tone(tone_match, poisson, g, record.source[box], paste, ring_width)
            entry.update(facts)
        blended = src * (1.0 - paste) + g * paste
        out[box] = torch.where(paste == 0, src, blended)
        pasted = paste[..., 0] > 0
        touched[box] |= pasted
        if record.given_mask is not None or record.blend_outside:
            given = (record.given_mask if record.given_mask is not None else record.mask)[box]
            outside_given += int((pasted & (given == 0)).sum())
    result.kept_pixels = int((~touched).sum())
    result.info["crops"] = record.describe()
    result.info["kept pixels (exact source values)"] = f"{result.kept_pixels:,}"
    if record.given_mask is not None or record.blend_outside:
        # overlapping boxes may count a pixel twice; the figure is what the options moved past the given mask
        result.info["pasted outside the given mask"] = (
            f"{outside_given:,} px (grow / fill_holes / blend_outside: exact outside the prepared mask"
            + (f" and its {record.blend_outside} px blend band)" if record.blend_outside else ")"))
    for key in ("ring delta E before", "ring delta E after"):
        values = [e[key] for e in result.crops if key in e]
        if values:
            result.info[key] = ", ".join("n/a (no ring)" if v != v else f"{v:.2f}" for v in values)
    if feather:
        result.notes.append(f"paste-back edge feathered {feather} px inward")
    if record.blend_outside:
        result.notes.append(f"paste blended over {record.blend_outside} px outside the mask (blend_outside): those "
                            "kept pixels mix source and fill")
    if tone_match:
        result.notes.append(f"tone matched in CIELAB to the source on a {ring_width} px ring outside each mask")
    if poisson:
        result.notes.append("poisson blend: each fill keeps its gradients and meets the source on the mask's border "
                            "(the ring's delta E after is 0 by construction)")
    for e in result.crops:
        if "tone match" in e:
            result.notes.append(f"crop {e['crop']}: {e['tone match']}")
    return result
