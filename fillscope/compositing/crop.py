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

from ..errors import FillScopeInputError
from ..pixels import as_mask, as_rgb, feather_inward, require_finite
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
    region: int | None = None  # 0-based region of its image (regions mode), else None
    mask: object = field(default=None, repr=False)  # [height, width] this crop's mask in its box, original values

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
                "mask_pixels": self.mask_pixels}


@dataclass
class StitchRecord:
    """What stitch needs to put the crops back: the original image and mask, and each crop's box and scale."""

    source: object = field(repr=False)  # [B,H,W,3] the original image (RGB, values as given)
    mask: object = field(repr=False)  # [B,H,W] the original mask at full size (0..1)
    crop_height: int = 0
    crop_width: int = 0
    crops: list = field(default_factory=list)  # CropBox, in the order of the crop batch

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


# ---- geometry --------------------------------------------------------------------------------------------------


def crop_size(box_h: int, box_w: int, target_long_side: int, multiple: int) -> tuple[int, int]:
    """(height, width) of the crop for a box: long side = target, short side the nearest multiple (at least one)."""
    if box_w >= box_h:
        return max(multiple, round(target_long_side * box_h / box_w / multiple) * multiple), target_long_side
    return target_long_side, max(multiple, round(target_long_side * box_w / box_h / multiple) * multiple)


def fit_box(bbox, wanted_h, wanted_w, crop_h, crop_w, height, width):
    """(top, left, h, w): a box holding `bbox` (y0, x0, y1, x1), at least wanted_h x wanted_w where the image allows,
    with the crop's aspect ratio (in whole units of it when they fit: the same scale on both axes), centred on the
    bbox and shifted to lie inside the image."""
    y0, x0, y1, x1 = bbox
    need_h, need_w = y1 - y0, x1 - x0
    h, w = min(max(wanted_h, need_h), height), min(max(wanted_w, need_w), width)
    aspect = crop_w / crop_h
    if w < h * aspect:  # too narrow: widen, or (at the image's width) lower it back towards the aspect
        w = min(width, round(h * aspect))
        if w < h * aspect:
            h = max(need_h, min(h, round(w / aspect)))
    else:
        h = min(height, round(w / aspect))
        if w > h * aspect:
            w = max(need_w, min(w, round(h * aspect)))
    g = math.gcd(crop_h, crop_w)
    unit_h, unit_w = crop_h // g, crop_w // g
    k = max(-(-h // unit_h), -(-w // unit_w))
    if k * unit_h <= height and k * unit_w <= width:
        h, w = k * unit_h, k * unit_w
    cy, cx = (y0 + y1) / 2, (x0 + x1) / 2
    top = min(max(int(math.floor(cy - h / 2 + 0.5)), max(0, y1 - h)), min(y0, height - h))
    left = min(max(int(math.floor(cx - w / 2 + 0.5)), max(0, x1 - w)), min(x0, width - w))
    return top, left, h, w


def _wanted(bbox, context_factor, padding, height, width):
    y0, x0, y1, x1 = bbox
    wh = math.ceil((y1 - y0) * context_factor + 2 * padding)
    ww = math.ceil((x1 - x0) * context_factor + 2 * padding)
    return min(max(wh, y1 - y0), height), min(max(ww, x1 - x0), width)


def _bbox(present):
    """(y0, x0, y1, x1) of the True pixels of a [H,W] bool tensor, or None."""
    rows, cols = present.any(dim=1), present.any(dim=0)
    if not bool(rows.any()):
        return None
    r, c = rows.nonzero(), cols.nonzero()
    return int(r[0]), int(c[0]), int(r[-1]) + 1, int(c[-1]) + 1


def _union(a, b):
    if a is None or b is None:
        return a or b
    return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])


def resize_image(chw, height: int, width: int):
    """[N,3,h,w] -> [N,3,height,width], bilinear, antialiased (a downscale averages), clamped to 0..1."""
    import torch.nn.functional as F

    if tuple(chw.shape[-2:]) == (height, width):
        return chw.clamp(0, 1)
    return F.interpolate(chw, size=(height, width), mode="bilinear", align_corners=False, antialias=True).clamp(0, 1)


def resize_mask(m, height: int, width: int):
    """[N,1,h,w] -> [N,1,height,width] by area averaging: 0 and 1 stay exact where a window holds only them."""
    import torch.nn.functional as F

    if tuple(m.shape[-2:]) == (height, width):
        return m
    return F.interpolate(m, size=(height, width), mode="area").clamp(0, 1)


# ---- crop -------------------------------------------------------------------------------------------------------


def crop_for_inpaint(image, mask, *, context_mask=None, context_factor: float = 1.5, padding: int = 32,
                     target_long_side: int = 1024, multiple: int = 16, regions: bool = False, min_area: int = 64,
                     merge_distance: int = 32, max_crops: int = MAX_CROPS) -> CropResult:
    """Crops of `image` [B,H,W,C] around `mask` [B,H,W] (1 = repaint; any value > 0 is inside), each resized to
    one size whose long side is `target_long_side` (a multiple of `multiple`). One crop per image, or with
    regions=True one per region of each image's mask (regions.split_regions: min_area, merge_distance).
    `context_mask` (optional, same size) only enlarges the box: what the model should see around the hole (with
    regions, each region's box takes in the context mask's parts that overlap it)."""
    import torch

    _check_tensor("image", image, "IMAGE")
    _check_tensor("mask", mask, "MASK")
    if context_mask is not None:
        _check_tensor("context_mask", context_mask, "MASK")
    if not (isinstance(context_factor, (int, float)) and math.isfinite(context_factor) and 1.0 <= context_factor <= 100):
        raise FillScopeInputError("context_factor", f"is {context_factor!r}; it must be a number from 1 to 100.",
                                  "set context_factor to 1 (the mask's box only) or more (1.5: half as much again).")
    _whole("padding", padding, 0)
    _whole("multiple", multiple, 1)
    _whole("target", target_long_side, multiple)
    if target_long_side % multiple:
        raise FillScopeInputError("target", f"is {target_long_side}; it must be a multiple of {multiple}.",
                                  f"set target to {target_long_side // multiple * multiple} or "
                                  f"{-(-target_long_side // multiple) * multiple}.")
    _whole("max_crops", max_crops, 1, "crops")
    for name, t in (("image", image), ("mask", mask), ("context_mask", context_mask)):
        if t is not None:
            require_finite(name, t)
    notes: list[str] = []
    if image.dim() not in (3, 4):
        raise FillScopeInputError("image", f"expected an IMAGE [B,H,W,C], got shape {list(image.shape)}.",
                                  "connect a ComfyUI IMAGE.")
    as_rgb(image[..., :1, :1, :], notes)  # the IMAGE conventions (channels, notes), checked on one pixel
    source = _source_rgb(image)  # the values as given: what stitch returns outside the mask (crops are clamped)
    b, height, width, _ = source.shape
    m = as_mask(mask, source.shape).to(source.device)
    ctx = None
    if context_mask is not None:
        try:
            ctx = as_mask(context_mask, source.shape).to(source.device)
        except FillScopeInputError as e:
            raise _renamed(e, "context_mask") from None

    # the boxes: (image index, region index or None, bbox of the mask or region, that bbox with its context, the
    # Region or None)
    wanted = []
    for i in range(b):
        present = m[i] > 0
        ctx_bbox = _bbox(ctx[i] > 0) if ctx is not None else None
        if regions:
            # each region's box takes in the parts of the context mask that overlap its own box
            ctx_parts = ([(c.top, c.left, c.bottom, c.right) for c in split_regions(ctx[i], min_area=0, merge_distance=0)]
                         if ctx_bbox is not None else [])
            for r, region in enumerate(split_regions(m[i], min_area=min_area, merge_distance=merge_distance,
                                                     notes=notes)):
                bbox = grown = (region.top, region.left, region.bottom, region.right)
                for part in ctx_parts:
                    if part[0] < bbox[2] and bbox[0] < part[2] and part[1] < bbox[3] and bbox[1] < part[3]:
                        grown = _union(grown, part)
                wanted.append((i, r, bbox, grown, region))
        else:
            bbox = _bbox(present)
            if bbox is not None:
                wanted.append((i, None, bbox, _union(bbox, ctx_bbox), None))
        if not any(w[0] == i for w in wanted) and b > 1:
            notes.append(f"image {i}: nothing to repaint" + (" (every region under min_area)" if regions and
                         bool(present.any()) else " (empty mask)") + ": it comes back unchanged, no crop")
    if not wanted:
        why = ("every region of the mask is smaller than min_area" if regions and bool((m > 0).any()) else
               "the mask is empty (all 0)")
        raise FillScopeInputError(
            "mask", f"nothing to crop: {why}, so there is no box to give the model.",
            "paint the hole to repaint (1 = repaint; LoadImage's mask is 1 - alpha)"
            + (", or lower min_area." if regions else "."))
    if len(wanted) > max_crops:
        raise FillScopeInputError(
            "mask", f"has {len(wanted)} separate regions over the batch; at most {max_crops} crops are made in one "
                    "call (each is one model run).",
            "raise merge_distance (nearby holes become one region) or min_area (specks are dropped), or turn "
            "regions off (one box around the whole mask).")

    sizes = [_wanted(ctx_bbox, context_factor, padding, height, width) for _, _, _, ctx_bbox, _ in wanted]
    largest = max(range(len(sizes)), key=lambda k: (sizes[k][0] * sizes[k][1], -k))
    crop_h, crop_w = crop_size(*sizes[largest], target_long_side, multiple)

    boxes, img_crops, mask_crops = [], [], []
    chw_all = source.permute(0, 3, 1, 2)
    for (i, r, bbox, ctx_bbox, region), (wh, ww) in zip(wanted, sizes):
        top, left, h, w = fit_box(ctx_bbox, wh, ww, crop_h, crop_w, height, width)
        if region is None:
            box_mask = m[i, top : top + h, left : left + w]
        else:
            box_mask = torch.zeros(h, w, dtype=m.dtype, device=m.device)
            box_mask[region.top - top : region.bottom - top, region.left - left : region.right - left] = region.mask
        crop = CropBox(i, top, left, h, w, crop_h / h, crop_w / w, int((box_mask > 0).sum()), r, box_mask)
        boxes.append(crop)
        img_crops.append(resize_image(chw_all[i : i + 1, :, top : top + h, left : left + w].clamp(0, 1), crop_h,
                                      crop_w))
        mask_crops.append(resize_mask(box_mask[None, None], crop_h, crop_w))
    record = StitchRecord(source, m, crop_h, crop_w, boxes)
    warnings: list[str] = []
    for c in boxes:
        notes.append(f"{record._where(c)}{record.describe_crop(c)} ({c.box_text()})")
    ups = [c for c in boxes if c.scale > 1.0001]
    if ups:
        notes.append(f"{len(ups)} of {len(boxes)} box{'es' if len(boxes) > 1 else ''} upscaled (up to "
                     f"{max(c.scale for c in ups):.3g}x) so the model runs at its native size "
                     f"({target_long_side} px long side); the result is scaled back down when stitched")
    if any(not math.isclose(c.scale_x, c.scale_y, rel_tol=0.01) for c in boxes):
        warnings.append("a box could not take the crop's aspect ratio inside the image: its crop is stretched "
                        "(scales differ by more than 1 %); stitch undoes it")
    if regions and len(boxes) > 1:
        notes.append(f"{len(boxes)} regions cropped separately at one size ({crop_w}x{crop_h}: the largest box's)")
    image_crops = torch.cat(img_crops).permute(0, 2, 3, 1).contiguous()
    mask_crop = torch.cat(mask_crops)[:, 0].contiguous()
    return CropResult(image_crops, mask_crop, record, notes, warnings)


# ---- stitch -----------------------------------------------------------------------------------------------------


def _paste_mask(record: StitchRecord, crop: CropBox, feather: int):
    """[h,w,1] the crop's mask in its box, feathered inward over `feather` px; computed on the box grown by
    `feather` px (inside the image) so the feather sees the mask's true neighbours, not the box's edge."""
    import torch

    m = crop.mask.float()
    if feather <= 0:
        return m[..., None]
    H, W = record.height, record.width
    t0, l0 = max(0, crop.top - feather), max(0, crop.left - feather)
    b1, r1 = min(H, crop.top + crop.height + feather), min(W, crop.left + crop.width + feather)
    grown = torch.zeros(b1 - t0, r1 - l0, dtype=m.dtype, device=m.device)
    grown[crop.top - t0 : crop.top - t0 + crop.height, crop.left - l0 : crop.left - l0 + crop.width] = m
    soft = feather_inward(grown[None, None], feather)[0, 0]
    return soft[crop.top - t0 : crop.top - t0 + crop.height, crop.left - l0 : crop.left - l0 + crop.width, None]


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
    changed = 0
    for i, crop in enumerate(record.crops):
        box = (crop.image_index, slice(crop.top, crop.top + crop.height), slice(crop.left, crop.left + crop.width))
        g = resize_image(gen[i : i + 1].permute(0, 3, 1, 2), crop.height, crop.width)[0].permute(1, 2, 0)
        src = out[box]  # the source, or an earlier crop's pixels where its region reaches into this box
        paste = _paste_mask(record, crop, feather).to(g.dtype)
        entry = {"crop": i, **crop.as_dict()}
        if tone_match or poisson:
            g, facts = _tone(tone_match, poisson, g, record.source[box], paste, ring_width)
            entry.update(facts)
        blended = src * (1.0 - paste) + g * paste
        out[box] = torch.where(paste == 0, src, blended)
        changed += int((paste > 0).sum())
        result.crops.append(entry)
    total = record.batch * record.height * record.width
    result.kept_pixels = total - changed
    result.info["crops"] = record.describe()
    result.info["kept pixels (exact source values)"] = f"{result.kept_pixels:,}"
    for key in ("ring delta E before", "ring delta E after"):
        values = [e[key] for e in result.crops if key in e]
        if values:
            result.info[key] = ", ".join("n/a (no ring)" if v != v else f"{v:.2f}" for v in values)
    if feather:
        result.notes.append(f"paste-back edge feathered {feather} px inward")
    if tone_match:
        result.notes.append(f"tone matched in CIELAB to the source on a {ring_width} px ring outside each mask")
    if poisson:
        result.notes.append("poisson blend: each fill keeps its gradients and meets the source on the mask's border "
                            "(the ring's delta E after is 0 by construction)")
    for e in result.crops:
        if "tone match" in e:
            result.notes.append(f"crop {e['crop']}: {e['tone match']}")
    return result
