"""Poisson blending at the seams of independently sampled tiles (issue 23, tiled mode `independent`, option
`poisson`), and the seam-visibility measure that shows what it does. Pixels only.

Why: the ramp blend (tiles.blend_tiles) B = sum_k w_k I_k has, across each overlap,
grad B = sum_k w_k grad I_k + sum_k I_k grad w_k. The second term is gradients no tile drew: the difference between
two tiles' contents, spread over the overlap by the ramp's slope (a band where one tile's texture fades into the
other's, both at reduced contrast, the colour offset a linear ramp with a kink at each end).

The formulation (gradient-domain stitching, as Levin, Zomet, Peleg and Weiss, "Seamless image stitching in the
gradient domain", ECCV 2004):
- the domain Omega: the pixels two or more kept tiles cover (the overlaps), grown by `margin` px (a square), only
  where the paste mask is > 0 (pixels outside the mask are the source's after paste-back, untouched here) and only
  where a tile covers;
- the guidance v: on each edge between two 4-neighbours, the gradient of the one tile that weighs most there
  (the largest w_k(p) + w_k(q) among the tiles covering both pixels; ties to the tile planned first). The
  guidance is thus every tile's own drawing with a cut along the ramps' midlines, and across the cut the
  gradient of one tile, never the step between two;
- the boundary: the ramp-blended image B on every pixel outside Omega (at the mask's border the paste-back then
  meets the source as it meets the ramp blend);
- the result f = B + d, where d minimises sum over edges of |grad (B + d) - v|^2 with d = 0 outside Omega, i.e.
  Laplacian(d) = div(v - grad B) inside Omega (image edges free: no edge past the border). Outside the overlaps
  v = grad B exactly (one tile of weight 1 there), so the right-hand side is zero and the margin only lets the
  correction spread smoothly. One tile, or tiles that do not overlap: Omega is empty and B comes back as it is.

Solved per image on Omega's bounding box with compositing/tone.py's multigrid (its pyramid and V-cycles with a
right-hand side; red-black Gauss-Seidel smoothing, the image border a free edge), `cycles` V-cycles from d = 0.
The result is clamped to 0..1. Cost, measured (CPU, one thread): 0.06 s for 3x2 tiles of 64 px (96x160), 1.7 s for
3x3 tiles of 512 px (1024x1024, overlap 0.15); it grows with the solved box's area (the bounding box of the
overlaps in the mask).

`overlap_contrast` measures what a viewer sees of the ramp blend's seams: the texture contrast (mean |gradient|) in
the overlaps against a seam-free reference's there (the untiled run); a ramp blend of tiles that drew different
texture washes the overlaps out (a ratio below 1), the gradient-domain solve keeps one tile's contrast per edge.
"""

from __future__ import annotations

from ..errors import FillScopeInputError
from ..pixels import dilate
from . import tone

# V-cycles from d = 0. The thin bands drop out of the coarse levels, so cycles after the second gain less than the
# 4x of a full grid; measured on 3x2 textured 64 px tiles: max error against 40 cycles 5e-3 after 1, 1e-3 after 2,
# 4e-4 after 6 (0.1 of an 8-bit level)
DEFAULT_CYCLES = 6


def _check(blended, tiles, images, weights, mask):
    if blended.dim() != 4 or blended.shape[-1] != 3:
        raise FillScopeInputError("blended", f"expected [B,H,W,3], got {list(blended.shape)}.",
                                  "pass blend_tiles' output.")
    if not (len(tiles) == len(images) == len(weights)):
        raise FillScopeInputError("images", f"{len(tiles)} tiles, {len(images)} images, {len(weights)} weights.",
                                  "give one image and one weight map per kept tile (blend_tiles' inputs).")
    b, h, w, _ = blended.shape
    if mask.dim() != 3 or tuple(mask.shape[1:]) != (h, w) or mask.shape[0] not in (1, b):
        raise FillScopeInputError("mask", f"is {list(mask.shape)} for images {list(blended.shape)}.",
                                  "pass the paste mask as [B,H,W] (one, or one per image).")


def tile_guidance(blended, tiles: list, images: list, weights: list):
    """The guidance gradients (module docstring) and where tiles overlap.

    Returns gx [B,H,W-1,3] (f(x+1) - f(x)), gy [B,H-1,W,3] (f(y+1) - f(y)), float32, the blended image's own
    gradients where no tile covers an edge, and overlap [H,W] bool: pixels two or more tiles cover."""
    import torch

    src = blended.float()
    gx = src[:, :, 1:] - src[:, :, :-1]
    gy = src[:, 1:] - src[:, :-1]
    best_x = torch.full(gx.shape[1:3], -1.0)
    best_y = torch.full(gy.shape[1:3], -1.0)
    count = torch.zeros(src.shape[1:3], dtype=torch.int32)
    for t, image, w in zip(tiles, images, weights):
        x0, y0, x1, y1 = t.box
        im = image.float().cpu()
        count[y0:y1, x0:x1] += 1
        wx, wy = w[:, 1:] + w[:, :-1], w[1:] + w[:-1]  # the edge's weight: both pixels' (each <= 1)
        bx, by = best_x[y0:y1, x0:x1 - 1], best_y[y0:y1 - 1, x0:x1]
        take_x, take_y = wx > bx, wy > by
        gx[:, y0:y1, x0:x1 - 1] = torch.where(take_x[None, :, :, None], im[:, :, 1:] - im[:, :, :-1],
                                              gx[:, y0:y1, x0:x1 - 1])
        gy[:, y0:y1 - 1, x0:x1] = torch.where(take_y[None, :, :, None], im[:, 1:] - im[:, :-1],
                                              gy[:, y0:y1 - 1, x0:x1])
        best_x[y0:y1, x0:x1 - 1] = torch.where(take_x, wx, bx)
        best_y[y0:y1 - 1, x0:x1] = torch.where(take_y, wy, by)
    return gx, gy, count >= 2


def _divergence(gx, gy):
    """[B,H,W,3]: sum over a pixel's in-image neighbours q of g(p -> q) (the discrete Laplacian's adjoint)."""
    import torch.nn.functional as F

    px = F.pad(gx, (0, 0, 1, 1))  # zero edges past the image's left and right borders
    py = F.pad(gy, (0, 0, 0, 0, 1, 1))
    return (px[:, :, 1:] - px[:, :, :-1]) + (py[:, 1:] - py[:, :-1])


def poisson_seams(blended, tiles: list, images: list, weights: list, mask, *, margin: int = 0,
                  cycles: int = DEFAULT_CYCLES, base_sweeps: int = 50):
    """The ramp-blended image `blended` [B,H,W,3] (blend_tiles' output) with its overlap seams re-solved in the
    gradient domain (module docstring). `tiles`, `images` ([B,h,w,3] each) and `weights` are blend_tiles' inputs;
    `mask` [B,H,W] (or [1,H,W]): the paste mask, > 0 where the result may change. Returns [B,H,W,3] float32:
    `blended` bit for bit outside Omega (so outside the mask, and everywhere when one tile is kept)."""
    import torch

    _check(blended, tiles, images, weights, mask)
    if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
        raise FillScopeInputError("margin", f"is {margin!r}; it must be a whole number of pixels, 0 or more.",
                                  "use 0 (the overlaps only) or a few px.")
    if cycles < 1 or base_sweeps < 1:
        raise FillScopeInputError("cycles", f"cycles {cycles}, base_sweeps {base_sweeps}: both must be 1 or more.",
                                  f"use the defaults ({DEFAULT_CYCLES} V-cycles, 50 sweeps on the coarsest grid).")
    out = blended.float().cpu().clone()
    if len(tiles) < 2:
        return out
    gx, gy, overlap = tile_guidance(out, tiles, images, weights)
    covered = torch.zeros_like(overlap)
    for t in tiles:
        covered[t.box[1]:t.box[3], t.box[0]:t.box[2]] = True
    grown = dilate(overlap.float()[None, None], margin)[0, 0] > 0
    rhs_all = _divergence(gx - (out[:, :, 1:] - out[:, :, :-1]), gy - (out[:, 1:] - out[:, :-1]))
    paste = (mask > 0).cpu().expand(out.shape[0], -1, -1)
    height, width = out.shape[1:3]
    with torch.inference_mode():
        for i in range(out.shape[0]):
            omega = grown & covered & paste[i]
            if not bool(omega.any()):
                continue
            ys, xs = torch.nonzero(omega.any(1)).flatten(), torch.nonzero(omega.any(0)).flatten()
            # one known pixel of margin around the box: d = 0 there (or the free image edge)
            y0, y1 = max(0, int(ys[0]) - 1), min(height, int(ys[-1]) + 2)
            x0, x1 = max(0, int(xs[0]) - 1), min(width, int(xs[-1]) + 2)
            unknown = omega[y0:y1, x0:x1].view(1, 1, y1 - y0, x1 - x0)
            rhs = rhs_all[i, y0:y1, x0:x1].permute(2, 0, 1).unsqueeze(0)  # [1,3,h,w]
            rhs = torch.where(unknown, rhs, torch.zeros_like(rhs))
            d = tone.solve_poisson(rhs, unknown, cycles=cycles, base_sweeps=base_sweeps)
            solved = (out[i, y0:y1, x0:x1] + d[0].permute(1, 2, 0)).clamp(0, 1)
            out[i, y0:y1, x0:x1] = torch.where(unknown[0, 0, :, :, None], solved, out[i, y0:y1, x0:x1])
    return out


def _contrast(f):
    """[B,H,W]: mean over the channels of |f(x+1) - f(x)| + |f(y+1) - f(y)| (0 past the last row / column)."""
    import torch

    grad = torch.zeros(f.shape[:3])
    grad[:, :, :-1] += (f[:, :, 1:] - f[:, :, :-1]).abs().mean(-1)
    grad[:, :-1] += (f[:, 1:] - f[:, :-1]).abs().mean(-1)
    return grad


def overlap_contrast(image, reference, tiles: list, mask):
    """The texture contrast in the overlaps of `image` [B,H,W,3] against `reference`'s (an image with no seams there,
    e.g. the untiled run): the mean |gradient| (_contrast) of each on the pixels of `mask` ([B,H,W], > 0 =
    measured; the last row and column left out) that two or more of `tiles` cover. A ramp blend of tiles that drew
    different texture averages them there: a washed-out band along each seam, a ratio below 1; a blend that keeps
    one tile's texture per edge keeps the reference's contrast, near 1. Returns (image's, reference's, ratio); nan
    when the mask meets no overlap."""
    import torch

    f, r = image.float().cpu(), reference.float().cpu()
    height, width = f.shape[1:3]
    count = torch.zeros(height, width, dtype=torch.int32)
    for t in tiles:
        count[t.box[1]:t.box[3], t.box[0]:t.box[2]] += 1
    inside = (mask > 0).cpu().expand(f.shape[0], -1, -1) & (count >= 2)
    inside = inside.clone()
    inside[:, -1], inside[:, :, -1] = False, False  # the last row / column has only one of its two differences
    if not bool(inside.any()):
        return float("nan"), float("nan"), float("nan")
    a, b = float(_contrast(f)[inside].mean()), float(_contrast(r)[inside].mean())
    return a, b, a / b if b > 0 else float("nan")


__all__ = ["DEFAULT_CYCLES", "overlap_contrast", "poisson_seams", "tile_guidance"]
