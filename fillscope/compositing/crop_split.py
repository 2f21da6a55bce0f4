"""A crop that never starves the model: when one box would scale the mask down too far, split it.

One box around two far-apart holes is as wide as the gap: on a 4096-px photo it is squeezed to scale 0.25, and a
20-px stroke across the picture ends up 5 px wide in the crop, a detail the model can hardly see and Stitch scales
back up 4x. When a box's scale (crop px per photo px) would fall under `min_scale`:
1. separate holes become separate crops: the mask's regions (regions.split_regions, no speck dropped), merged
   greedily while a merged box still reaches min_scale (near holes stay one crop), and down to max_pieces;
2. a thin region (its stroke narrower than THIN_PX once scaled) is cut in two across its long side, again and
   again, until each piece reaches min_scale. Neighbouring pieces share OVERLAP px of the mask, so Stitch
   cross-fades from one fill to the next instead of letting the source through at the cut.
A hole that is simply big (a compact blob) is never cut: one object is sampled whole; the caller warns instead.
"""

from __future__ import annotations

import math

from .regions import Region, split_regions

THIN_PX = 32  # a stroke narrower than this in the crop is a detail the model barely sees
OVERLAP = 64  # photo px of mask two pieces of a cut stroke share (Stitch feathers up to half of it cleanly)
MAX_SPECKS = 64  # more separate bits than this: the mask is noise, one box it stays (with a warning)


def whole_region(mask_2d) -> Region | None:
    """The whole mask of one image as a single Region (its bounding box and values), or None when empty."""
    from .crop_boxes import bbox_of

    bbox = bbox_of(mask_2d > 0)
    if bbox is None:
        return None
    y0, x0, y1, x1 = bbox
    values = mask_2d[y0:y1, x0:x1].float()
    return Region(y0, x0, y1 - y0, x1 - x0, int((values > 0).sum()), values)


def merged(a: Region, b: Region) -> Region:
    """One region holding both (their box's union, their mask values together)."""
    import torch

    top, left = min(a.top, b.top), min(a.left, b.left)
    bottom, right = max(a.bottom, b.bottom), max(a.right, b.right)
    mask = torch.zeros(bottom - top, right - left, dtype=a.mask.dtype, device=a.mask.device)
    for r in (a, b):
        part = mask[r.top - top : r.bottom - top, r.left - left : r.right - left]
        torch.maximum(part, r.mask, out=part)
    return Region(top, left, bottom - top, right - left, a.area + b.area, mask)


def _bbox(r: Region):
    return r.top, r.left, r.bottom, r.right


def group_regions(parts: list, scale_of, min_scale: float, max_pieces: int) -> list:
    """Greedy: merge the pair whose joint box is smallest while that box still reaches min_scale; then, while
    there are more than max_pieces, the smallest joint box whatever its scale."""
    from .crop_boxes import union

    groups = list(parts)
    while len(groups) > 1:
        best, best_area, best_ok = None, math.inf, False
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                y0, x0, y1, x1 = union(_bbox(groups[i]), _bbox(groups[j]))
                area = (y1 - y0) * (x1 - x0)
                ok = scale_of((y0, x0, y1, x1)) >= min_scale
                if (ok, -area) > (best_ok, -best_area):
                    best, best_area, best_ok = (i, j), area, ok
        if not best_ok and len(groups) <= max_pieces:
            break
        i, j = best
        groups[i] = merged(groups[i], groups[j])
        del groups[j]
    groups.sort(key=lambda r: (r.top, r.left))
    return groups


def stroke_width(region: Region) -> float:
    """The region's stroke width in photo px (crop_masks.mask_width), measured at most 1024 px a side: a max-pool
    keeps a thin stroke, and the width is scaled back."""
    import torch.nn.functional as F

    from .crop_masks import mask_width

    f = max(1, math.ceil(max(region.height, region.width) / 1024))
    present = (region.mask > 0).float()
    if f > 1:
        present = F.max_pool2d(present[None, None], kernel_size=f, stride=f, ceil_mode=True)[0, 0]
    return mask_width(present) * f


def bisect(region: Region, overlap: int = OVERLAP) -> list:
    """Two pieces of a region cut across its long side at the middle, sharing `overlap` px; each piece's box is
    tightened to its own mask (a diagonal stroke's halves have boxes half the size each way)."""
    from .crop_boxes import bbox_of

    along_rows = region.height >= region.width
    length = region.height if along_rows else region.width
    mid, half = length // 2, overlap // 2
    pieces = []
    for a, b in ((0, min(length, mid + half)), (max(0, mid - half), length)):
        part = region.mask[a:b, :] if along_rows else region.mask[:, a:b]
        box = bbox_of(part > 0)
        if box is None:
            continue
        y0, x0, y1, x1 = box
        top = region.top + (a if along_rows else 0) + y0
        left = region.left + (0 if along_rows else a) + x0
        values = part[y0:y1, x0:x1]
        pieces.append(Region(top, left, y1 - y0, x1 - x0, int((values > 0).sum()), values))
    return pieces


def split_starved(mask_2d, *, regions: bool, min_area: int, merge_distance: int, min_scale: float, scale_of,
                  max_pieces: int, notes: list, where: str = "") -> list:
    """The pieces of one image's mask [H,W] to crop: one Region (or one per region with `regions`), split as the
    module says when min_scale > 0 and a box would fall under it. `scale_of(bbox)` is the scale a box around
    that mask bbox would get cropped on its own."""
    if regions:
        pieces = split_regions(mask_2d, min_area=min_area, merge_distance=merge_distance, notes=notes)
    else:
        whole = whole_region(mask_2d)
        pieces = [] if whole is None else [whole]
    if min_scale <= 0 or not pieces:
        return pieces
    before, count_before = min(scale_of(_bbox(p)) for p in pieces), len(pieces)
    if not regions and before < min_scale:
        parts = split_regions(mask_2d, min_area=0, merge_distance=merge_distance)
        if 1 < len(parts) <= MAX_SPECKS:
            groups = group_regions(parts, scale_of, min_scale, max_pieces)
            if len(groups) > 1:
                pieces = groups
        elif len(parts) > MAX_SPECKS:
            notes.append(f"{where}auto split skipped: the mask has {len(parts)} separate bits (more than "
                         f"{MAX_SPECKS}); raise merge_distance or clean the mask")
    widths = {id(p): stroke_width(p) for p in pieces}
    while len(pieces) < max_pieces:
        starved = [p for p in pieces if scale_of(_bbox(p)) < min_scale and max(p.height, p.width) > 2 * OVERLAP
                   and widths[id(p)] * scale_of(_bbox(p)) < THIN_PX]
        if not starved:
            break
        worst = min(starved, key=lambda p: scale_of(_bbox(p)))
        halves = bisect(worst)
        if len(halves) < 2:
            break
        k = pieces.index(worst)
        pieces[k : k + 1] = halves
        for h in halves:
            widths[id(h)] = widths[id(worst)]
    if len(pieces) > count_before:
        notes.append(f"{where}auto split (min_scale {min_scale:g}): one box would be sampled at scale {before:.3g}; "
                     f"split into {len(pieces)} crops (each crop's scale below)")
    return pieces
