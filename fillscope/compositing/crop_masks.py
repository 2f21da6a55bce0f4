"""Mask preparation on the crop: what the model repaints and what Stitch pastes, decided before the box is cut.

prepare_mask applies, in this order, a low-value cut-off (`threshold`: soft values below it become 0, so a faint
brush edge does not widen the box or the paste), hole filling (`fill_holes`: pixels the mask encloses become 1) and
growing (`grow` px, a square max filter). The result is the mask Stitch pastes through: each option moves the
exact-outside guarantee from the given mask to the prepared one (grow and fill_holes repaint pixels the given mask
left alone; threshold gives pixels back to the source).

blend_outside widens what the model repaints by `pixels` px (repaint_mask) and Stitch ramps the paste from 1 at the
prepared mask's edge down to 0 that far outside it (paste_alpha): the seam is spread over kept pixels, which then are
no longer exact within that band.

mask_width measures how thick a mask's stroke is (twice the largest distance from a mask pixel to the nearest
pixel outside: the diameter of the largest disc that fits), the figure the crop uses to tell a detail the model can
no longer see once the box is scaled down.
"""

from __future__ import annotations

from ..errors import FillScopeInputError
from ..pixels import dilate, feather_inward


def check_prep_options(threshold, fill_holes, grow, blend_outside) -> None:
    """The bounds of bounds.CROP (the node's inputs read the same table)."""
    from ..bounds import CROP, number_problem

    fixes = {"threshold": "set threshold to 0 (keep every value above 0) or e.g. 0.1 (drop faint edges).",
             "grow": "set grow to 0 (off) or a few pixels (e.g. 8).",
             "blend_outside": "set blend_outside to 0 (off) or a few pixels (e.g. 8)."}
    for name, value in (("threshold", threshold), ("grow", grow), ("blend_outside", blend_outside)):
        problem = number_problem(value, CROP[name])
        if problem:
            raise FillScopeInputError(name, f"{value!r} {problem}.", fixes[name])
    if not isinstance(fill_holes, bool):
        raise FillScopeInputError("fill_holes", f"is {fill_holes!r}; it must be true or false.",
                                  "set fill_holes to true or false.")


def _fill_holes_2d(binary):
    """[H,W] bool numpy -> the same with every region of False that does not reach the border set True."""
    import numpy as np

    try:
        from scipy import ndimage
    except ImportError:
        from .regions import label_components

        labels, _ = label_components(~binary, use_scipy=False)  # 8-connected background, as scipy's path below
        border = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
        return binary | ~np.isin(labels, border)
    # the background 8-connected, as the fallback labels it: a diagonal gap in the stroke opens the hole either way
    return ndimage.binary_fill_holes(binary, structure=np.ones((3, 3), dtype=bool))


def fill_enclosed(mask):
    """[B,H,W] mask -> the same with the pixels it encloses set to 1 (worked inside each image's mask box only)."""
    import numpy as np
    import torch

    from .crop_boxes import bbox_of

    out = mask.clone()
    for i in range(mask.shape[0]):
        present = mask[i] > 0
        box = bbox_of(present)
        if box is None:
            continue
        y0, x0, y1, x1 = box
        # a one-pixel frame of background around the box: a hole is what that frame cannot reach
        framed = np.pad(present[y0:y1, x0:x1].cpu().numpy(), 1)
        filled = torch.from_numpy(_fill_holes_2d(framed)[1:-1, 1:-1]).to(mask.device)
        holes = filled & ~present[y0:y1, x0:x1]
        out[i, y0:y1, x0:x1] = torch.where(holes, torch.ones_like(out[i, y0:y1, x0:x1]), out[i, y0:y1, x0:x1])
    return out


def grown_in_box(mask, pixels: int):
    """[B,H,W] -> the mask dilated by `pixels` (pixels.dilate), computed on each image's mask box grown by
    `pixels` only: a small hole on a 4096x3072 photo costs a small box, not the whole photo."""
    from .crop_boxes import bbox_of

    out = mask.clone()
    H, W = mask.shape[-2:]
    for i in range(mask.shape[0]):
        box = bbox_of(mask[i] > 0)
        if box is None:
            continue
        y0, x0 = max(0, box[0] - pixels), max(0, box[1] - pixels)
        y1, x1 = min(H, box[2] + pixels), min(W, box[3] + pixels)
        out[i, y0:y1, x0:x1] = dilate(mask[i : i + 1, None, y0:y1, x0:x1], pixels)[0, 0]
    return out


def prepare_mask(mask, *, threshold: float = 0.0, fill_holes: bool = False, grow: int = 0, notes=None):
    """[B,H,W] 0..1 -> [B,H,W]: threshold, then fill holes, then grow (see the module's docstring). Each option
    that changes pixels appends a note with how many; with every option off the mask itself comes back."""
    check_prep_options(threshold, fill_holes, grow, 0)
    notes = [] if notes is None else notes
    out = mask
    if threshold > 0:
        cut = (out > 0) & (out < threshold)
        if bool(cut.any()):
            notes.append(f"threshold {threshold:g}: {int(cut.sum()):,} faint mask px set to 0 (kept as source)")
            out = out.masked_fill(cut, 0.0)
    if fill_holes:
        before = int((out > 0).sum())
        out = fill_enclosed(out)
        added = int((out > 0).sum()) - before
        if added:
            notes.append(f"fill_holes: {added:,} px the mask encloses are repainted too")
    if grow > 0:
        before = int((out > 0).sum())
        out = grown_in_box(out, grow)
        notes.append(f"grow {grow} px: {int((out > 0).sum()) - before:,} px added to what is repainted and pasted")
    return out


def repaint_mask(mask_box, blend_outside: int):
    """[h,w] a crop's prepared mask in its box -> what the model repaints: the mask grown by blend_outside px (the
    band Stitch blends over), its values spread by a max filter."""
    if blend_outside <= 0:
        return mask_box
    return dilate(mask_box[None, None], blend_outside)[0, 0]


def paste_alpha(mask_area, feather: int, blend_outside: int):
    """[1,1,h,w] a crop's prepared mask on an area that holds it and `blend_outside + feather` px around it ->
    Stitch's paste weight there: 0 beyond blend_outside px outside the mask, ramping up to 1 `feather` px inside it.
    blend_outside = 0 gives feather_inward(mask, feather): exactly 0 wherever the mask is 0."""
    if blend_outside <= 0:
        return feather_inward(mask_area, feather)
    return feather_inward(dilate(mask_area, blend_outside), blend_outside + feather)


def mask_width(mask_2d) -> float:
    """The stroke width of a [h,w] mask (> 0 is inside) in its own pixels: the diameter of the largest disc that
    fits in it (2 x the largest Euclidean distance to a pixel outside). A 20-px line gives about 20, a 300-px
    blob about 300. Without scipy, the count of 3x3 erosions it survives (a lower bound on diagonal strokes)."""
    import numpy as np

    binary = np.pad((mask_2d > 0).cpu().numpy(), 1)
    if not binary.any():
        return 0.0
    try:
        from scipy import ndimage
    except ImportError:
        import torch
        import torch.nn.functional as F

        t, steps = torch.from_numpy(binary).float()[None, None], 0
        while bool(t.any()):
            t = 1.0 - F.max_pool2d(1.0 - t, kernel_size=3, stride=1, padding=1)
            steps += 1
        return float(2 * steps - 1)
    # the distance to the nearest outside pixel's centre counts the pixel itself: 2 x max - 1 is the width in pixels
    return float(2 * ndimage.distance_transform_edt(binary).max() - 1)
