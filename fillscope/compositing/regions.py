"""Several separate holes in one mask: split into regions, each cropped and sampled on its own.

A region is a connected component (8-connected) of the mask's non-zero pixels, after merging components whose
nearest pixels are at most `merge_distance` px apart (Chebyshev distance: the gap between them is narrower than
`merge_distance`), so a hole drawn in two strokes stays one region. Regions of fewer than `min_area` mask pixels are
dropped (they are not repainted: stitch keeps their source pixels) and a note says so.

Labelling uses scipy.ndimage.label when scipy is installed (ComfyUI requires it) and otherwise a run-length
union-find in numpy; both give the same regions. The work is done inside the bounding box of the mask only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FillScopeInputError
from ..pixels import require_finite


@dataclass
class Region:
    """One region of a mask [H,W]: its bounding box in the image and its mask values inside that box (the
    original values on the region's pixels, 0 elsewhere, so another region's pixels in the box are 0)."""

    top: int
    left: int
    height: int
    width: int
    area: int  # mask pixels (> 0) of the region
    mask: object = field(repr=False)  # [height, width] float tensor

    @property
    def bottom(self) -> int:
        return self.top + self.height

    @property
    def right(self) -> int:
        return self.left + self.width

    def full_mask(self, height: int, width: int):
        """The region's mask at the image's size [H,W] (zeros outside the region)."""
        import torch

        out = torch.zeros(height, width, dtype=self.mask.dtype, device=self.mask.device)
        out[self.top : self.bottom, self.left : self.right] = self.mask
        return out


def _dilate_window(binary, distance: int):
    """Chebyshev dilation of a bool array by a (distance x distance) window, so that after dilation two pixels at
    most `distance` apart along each axis touch or overlap (8-connected). Box sums from cumulative sums: the cost
    does not grow with the distance."""
    import numpy as np

    if distance <= 1:
        return binary
    a = (distance - 1) // 2
    b = distance - 1 - a  # a + b = distance - 1: the window [x - a, x + b]
    out = binary
    for axis in (0, 1):
        n = out.shape[axis]
        cs = np.cumsum(out, axis=axis, dtype=np.int32)
        cs = np.concatenate([np.zeros_like(np.take(cs, [0], axis=axis)), cs], axis=axis)  # cs[k] = sum of [0, k)
        hi = np.minimum(np.arange(n) + b + 1, n)
        lo = np.maximum(np.arange(n) - a, 0)
        out = (np.take(cs, hi, axis=axis) - np.take(cs, lo, axis=axis)) > 0
    return out


def label_components(binary, *, use_scipy: bool | None = None):
    """(labels int32 [h,w] with 0 = background and 1..n the 8-connected components, n)."""
    import numpy as np

    binary = np.ascontiguousarray(binary, dtype=bool)
    if use_scipy is not False:
        try:
            from scipy import ndimage
        except ImportError:
            if use_scipy:
                raise
        else:
            labels, n = ndimage.label(binary, structure=np.ones((3, 3), dtype=bool))
            return labels.astype(np.int32, copy=False), int(n)
    return _label_runs(binary)


def _label_runs(binary):
    """8-connected labelling without scipy: horizontal runs per row, joined to the overlapping runs of the row above
    (union-find), labels numbered in raster order of each component's first run (as scipy numbers them)."""
    import numpy as np

    h, w = binary.shape
    labels = np.zeros((h, w), dtype=np.int32)
    padded = np.zeros((h, w + 2), dtype=np.int8)
    padded[:, 1:-1] = binary
    d = np.diff(padded, axis=1)
    rows, starts = np.nonzero(d == 1)
    _, ends = np.nonzero(d == -1)  # exclusive; row-major order pairs each end with its start
    n = len(rows)
    if n == 0:
        return labels, 0
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    row_first = np.searchsorted(rows, np.arange(h + 1))
    for r in range(1, h):
        i, i_end = row_first[r], row_first[r + 1]
        j, j_end = row_first[r - 1], row_first[r]
        while i < i_end and j < j_end:
            # 8-connected: [s_i, e_i) and [s_j, e_j) touch when s_i <= e_j and s_j <= e_i
            if starts[i] <= ends[j] and starts[j] <= ends[i]:
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
            if ends[i] < ends[j]:
                i += 1
            else:
                j += 1
    roots = [find(i) for i in range(n)]
    numbers: dict[int, int] = {}
    for k in range(n):
        number = numbers.setdefault(roots[k], len(numbers) + 1)
        labels[rows[k], starts[k] : ends[k]] = number
    return labels, len(numbers)


def split_regions(mask, *, min_area: int = 64, merge_distance: int = 32, notes: list | None = None,
                  use_scipy: bool | None = None) -> list[Region]:
    """The regions of one mask [H,W] (or [1,H,W]; 1 = repaint, any value > 0 counts), top to bottom then left to
    right. Components at most `merge_distance` px apart are one region; regions under `min_area` px are dropped
    (a note in `notes` says how many and how many pixels). Each Region holds its bounding box and its mask values
    inside it, not a full-size mask (a 4096x3072 mask per region would cost 48 MB each): Region.full_mask gives one."""
    import numpy as np
    import torch

    if not isinstance(mask, torch.Tensor):
        raise FillScopeInputError("mask", f"is {type(mask).__name__}, not a MASK tensor.", "connect a ComfyUI MASK.")
    if mask.dim() == 3 and mask.shape[0] == 1:
        mask = mask[0]
    if mask.dim() != 2:
        raise FillScopeInputError("mask", f"split_regions takes one mask [H,W], got shape {list(mask.shape)}.",
                                  "split each mask of a batch on its own.")
    for name, value in (("min_area", min_area), ("merge_distance", merge_distance)):
        if not isinstance(value, int) or value < 0:
            raise FillScopeInputError(name, f"is {value!r}; it must be a whole number of pixels, 0 or more.",
                                      f"set {name} to 0 or more.")
    require_finite("mask", mask)
    h, w = mask.shape
    present = mask > 0
    rows, cols = present.any(dim=1), present.any(dim=0)
    if not bool(rows.any()):
        return []
    y0, y1 = int(rows.nonzero()[0]), int(rows.nonzero()[-1]) + 1
    x0, x1 = int(cols.nonzero()[0]), int(cols.nonzero()[-1]) + 1
    binary = present[y0:y1, x0:x1].cpu().numpy()
    # merging: label the dilated mask (a window around the mask's box is enough: dilation never joins across the
    # image border) and give each original pixel its dilated component's label
    labels, n = label_components(_dilate_window(binary, merge_distance), use_scipy=use_scipy)
    labels = np.where(binary, labels, 0)
    areas = np.bincount(labels.ravel(), minlength=n + 1)
    regions, dropped, dropped_px = [], 0, 0
    ys_all, xs_all = np.nonzero(labels)
    lab_all = labels[ys_all, xs_all]
    order = np.argsort(lab_all, kind="stable")
    lab_sorted = lab_all[order]
    bounds = np.searchsorted(lab_sorted, np.arange(1, n + 2))
    for k in range(1, n + 1):
        area = int(areas[k])
        if area == 0:
            continue
        if area < min_area:
            dropped, dropped_px = dropped + 1, dropped_px + area
            continue
        idx = order[bounds[k - 1] : bounds[k]]
        ys, xs = ys_all[idx], xs_all[idx]
        top, left = int(ys.min()), int(xs.min())
        bottom, right = int(ys.max()) + 1, int(xs.max()) + 1
        inside = torch.from_numpy(labels[top:bottom, left:right] == k).to(mask.device)
        values = mask[y0 + top : y0 + bottom, x0 + left : x0 + right].float()
        regions.append(Region(y0 + top, x0 + left, bottom - top, right - left, area,
                              torch.where(inside, values, torch.zeros_like(values))))
    if dropped and notes is not None:
        notes.append(f"{dropped} mask region{'s' if dropped > 1 else ''} under min_area {min_area} px dropped "
                     f"({dropped_px:,} px not repainted: they keep their source pixels)")
    regions.sort(key=lambda r: (r.top, r.left))
    return regions
