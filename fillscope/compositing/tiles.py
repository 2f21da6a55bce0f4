"""Overlapping tiles over a large image (issue 23): where the tiles lie, how their results are blended, and how the
seams between them are measured. Pixels only: the model runs elsewhere (fillscope/tiled/ runs a family's `run` per
tile and blends here).

- `plan_tiles`: a grid of boxes of side `tile` (a multiple of 16, one FLUX/SD3/klein token) overlapping by at least
  `overlap` x tile; the starts are multiples of `multiple` (so every tile's tokens sit on the whole image's token
  grid, which MultiDiffusion-style shared sampling will need) except the last row/column's, shifted inward so that
  every box lies inside the image. A side that fits in one tile gives one box of that whole side, not rounded: its
  tile is prepared with prepare_image_and_mask's size_mode "pad" (edge pixels bottom/right up to the next multiple
  of 16, cropped off again after decoding), exactly as the untiled run prepares the whole image, so an image that
  fits in one tile gives the untiled result. With a mask, only the tiles that intersect the mask grown by the
  overlap (a square, as masks' grow) are kept: the others would only give back source pixels.
- `ramp_weights`: per kept tile a weight map that is 1 inside, falls linearly to 0 across each overlap it shares
  with another kept tile and stays 1 at the image border and where no kept tile overlaps it; normalised so that the
  kept tiles' weights sum to 1 (to float rounding) wherever any of them covers.
- `blend_tiles`: the weighted sum of the tiles' images, the source where no tile covers.
- `ciede2000` (sRGB 0..1 -> CIELAB D65 -> CIEDE2000, Sharma, Wu and Dalal 2005) and `seam_bands`: the pixels near
  the interior tile borders, where a tiled result can differ from an untiled one by a visible step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import bounds
from ..errors import FillScopeInputError
from ..pixels import composite
from .tone import srgb_to_lab

# the table's ranges (bounds.TILED), here under the names the module's checks use
TILE_RANGE = bounds.TILED["tile"]
OVERLAP_RANGE = bounds.TILED["overlap"]
TOKEN_PX = 16  # one token of every published family: tile sides and starts are multiples of it


@dataclass(frozen=True)
class Tile:
    """One tile: its number in the grid (row-major over the whole grid, kept or not), its box in image pixels
    (x0, y0, x1, y1; x1 and y1 exclusive) and its grid row and column."""

    index: int
    box: tuple
    row: int
    col: int

    @property
    def height(self) -> int:
        return self.box[3] - self.box[1]

    @property
    def width(self) -> int:
        return self.box[2] - self.box[0]


def check_tile_settings(tile, overlap, *, multiple: int = TOKEN_PX, tile_range=None) -> None:
    """`tile` and `overlap` against the table (bounds.TILED), before any model runs. `tile_range` replaces the
    table's range for tiny test models, whose images are a few dozen pixels."""
    tile_range = TILE_RANGE if tile_range is None else tile_range
    problem = bounds.number_problem(tile, tile_range)
    if problem:
        raise FillScopeInputError("tile", f"{tile!r} {problem}.", f"set tile to a multiple of {multiple} from "
                                  f"{tile_range} px (1024 is FLUX's native size; 512 as in the klein document).")
    if tile % multiple:
        raise FillScopeInputError("tile", f"is {tile} px, not a multiple of {multiple} px (one token).",
                                  f"set tile to {tile // multiple * multiple or multiple} or "
                                  f"{-(-tile // multiple) * multiple}.")
    problem = bounds.number_problem(overlap, OVERLAP_RANGE)
    if problem:
        raise FillScopeInputError("overlap", f"{overlap!r} {problem}.",
                                  f"set overlap, the fraction of a tile shared with its neighbour, from "
                                  f"{OVERLAP_RANGE} (0.15 by default).")


def _starts(length: int, tile: int, overlap: float, multiple: int) -> list[int]:
    """Tile starts along one side: one tile of the whole side when it fits; else the fewest tiles whose step is at
    most tile - ceil(overlap x tile) rounded down to `multiple`, evenly spaced on multiples of `multiple`, the last
    one at length - tile."""
    if length <= tile:
        return [0]
    max_step = max(multiple, (tile - math.ceil(overlap * tile)) // multiple * multiple)
    span = length - tile
    n = -(-span // max_step) + 1
    even = -(-span // (n - 1))  # the even spacing, rounded up to a whole pixel, then to `multiple`
    step = min(max_step, -(-even // multiple) * multiple)
    starts = [min(i * step, span) for i in range(n - 1)] + [span]
    return sorted(set(starts))


def plan_tiles(height: int, width: int, *, tile: int = 1024, overlap: float = 0.15, multiple: int = TOKEN_PX,
               mask=None, grow: int | None = None, tile_range=None) -> list:
    """The tiles over a height x width image, row-major. `mask` ([H,W] or [B,H,W], > 0 = repaint; any image of a
    batch): keep only the tiles that intersect it grown by `grow` px (default: the overlap, ceil(overlap x tile)),
    so a repaint pixel near a tile's edge is also sampled by the neighbour that sees it from the inside."""
    check_tile_settings(tile, overlap, multiple=multiple, tile_range=tile_range)
    tile = bounds.whole_value(tile)  # 1024.0 (accepted as whole) -> 1024: boxes are whole pixels
    for name, side in (("height", height), ("width", width)):
        if isinstance(side, bool) or not isinstance(side, int) or side < multiple:
            raise FillScopeInputError(name, f"is {side!r}; the smallest image side is {multiple} px (one token).",
                                      "use a larger image.")
    rows, cols = _starts(height, tile, overlap, multiple), _starts(width, tile, overlap, multiple)
    tiles = [Tile(r * len(cols) + c, (x0, y0, min(x0 + tile, width), min(y0 + tile, height)), r, c)
             for r, y0 in enumerate(rows) for c, x0 in enumerate(cols)]
    if mask is None:
        return tiles
    grow = math.ceil(overlap * tile) if grow is None else grow
    if isinstance(grow, bool) or not isinstance(grow, int) or grow < 0:
        raise FillScopeInputError("grow", f"is {grow!r}; it must be a whole number of pixels, 0 or more.",
                                  "leave grow unset to grow the mask by the overlap.")
    repaint = _repaint_pixels(mask, height, width)
    return [t for t in tiles if _box_has_mask(repaint, t.box, grow, height, width)]


def _repaint_pixels(mask, height, width):
    """(mask > 0) over the batch (any image's repaint pixel), [H, W] bool. Each box is then asked `any()` on its own
    view: a few reads of the boxes' pixels, where an int64 integral image cost two cumsums over the whole image
    (seconds at 6144x4096)."""
    m = mask if mask.dim() == 2 else mask.reshape(-1, *mask.shape[-2:])
    if tuple(m.shape[-2:]) != (height, width):
        raise FillScopeInputError("mask", f"is {m.shape[-1]}x{m.shape[-2]} but the image is {width}x{height}.",
                                  "give the mask of this image.")
    if m.dim() == 3:
        m = m[0] if m.shape[0] == 1 else m.amax(0)  # one image: itself, not an amax copy of it
    return m > 0


def _box_has_mask(repaint, box, grow, height, width) -> bool:
    x0, y0, x1, y1 = box
    x0, y0, x1, y1 = max(0, x0 - grow), max(0, y0 - grow), min(width, x1 + grow), min(height, y1 + grow)
    return bool(repaint[y0:y1, x0:x1].any())


def _ramps(tile: Tile, others: list, axis: int):
    """The tile's 1D ramp along x (axis 0) or y (axis 1), float64 [side]: 1 inside; where a kept tile overlapping
    it reaches past its start (end), a ramp over the widest such overlap from ~0 at its edge to ~1, sampled at pixel
    centres so that two tiles' ramps over the same overlap sum to exactly 1 there."""
    import torch

    a0, a1 = tile.box[axis], tile.box[axis + 2]
    pos = torch.arange(a0, a1, dtype=torch.float64) + 0.5
    ramp = torch.ones(a1 - a0, dtype=torch.float64)
    before = [o.box[axis + 2] for o in others if o.box[axis] < a0 < o.box[axis + 2]]
    after = [o.box[axis] for o in others if o.box[axis] < a1 < o.box[axis + 2]]
    if before:
        end = max(before)
        ramp = ramp * ((pos - a0) / (end - a0)).clamp(max=1.0)
    if after:
        start = min(after)
        ramp = ramp * ((a1 - pos) / (a1 - start)).clamp(max=1.0)
    return ramp


def _overlapping(tile: Tile, tiles: list) -> list:
    x0, y0, x1, y1 = tile.box
    return [o for o in tiles if o is not tile and o.box[0] < x1 and x0 < o.box[2] and o.box[1] < y1 and y0 < o.box[3]]


def ramp_weights(tiles: list, height: int, width: int) -> list:
    """Per kept tile its weight map [h, w] (float32; computed in float64): the product of its x and y ramps
    (_ramps), divided by the sum of every kept tile's at that pixel. A pixel one tile alone covers gets exactly 1
    (x / x); where tiles overlap the weights sum to 1 to float rounding, and each tile's weight goes to 0 towards an
    edge that lies inside another kept tile, so the blend has no step there."""
    import torch

    raw = []
    ox, oy, ex, ey = union_box(tiles) if tiles else (0, 0, 0, 0)  # the sums over the tiles' extent, not the image's
    total = torch.zeros(ey - oy, ex - ox, dtype=torch.float64)
    for t in tiles:
        others = _overlapping(t, tiles)
        w = _ramps(t, others, 1)[:, None] * _ramps(t, others, 0)[None, :]
        x0, y0, x1, y1 = t.box
        total[y0 - oy:y1 - oy, x0 - ox:x1 - ox] += w
        raw.append(w)
    out = []
    for t, w in zip(tiles, raw):
        x0, y0, x1, y1 = t.box
        out.append((w / total[y0 - oy:y1 - oy, x0 - ox:x1 - ox]).float())
    return out


def union_box(tiles: list) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1): the smallest box holding every tile's."""
    return (min(t.box[0] for t in tiles), min(t.box[1] for t in tiles), max(t.box[2] for t in tiles),
            max(t.box[3] for t in tiles))


def _accumulate(tiles: list, images: list, weights: list, batch: int, channels: int, box: tuple):
    """(the tiles' images [B,h,w,3] times their weights, summed over `box` (x0, y0, x1, y1) [B,bh,bw,C] float32;
    [bh,bw] bool: covered by a tile)."""
    import torch

    ox, oy, ex, ey = box
    acc = torch.zeros((batch, ey - oy, ex - ox, channels), dtype=torch.float32)
    covered = torch.zeros(ey - oy, ex - ox, dtype=torch.bool)
    for t, image, w in zip(tiles, images, weights):
        x0, y0, x1, y1 = t.box
        if tuple(image.shape[1:3]) != (y1 - y0, x1 - x0):
            raise FillScopeInputError("images", f"tile {t.index}'s image is {image.shape[2]}x{image.shape[1]} for a "
                                                f"{x1 - x0}x{y1 - y0} box.", "give each tile's image at its box size.")
        acc[:, y0 - oy:y1 - oy, x0 - ox:x1 - ox] += image.float().cpu() * w[None, :, :, None]
        covered[y0 - oy:y1 - oy, x0 - ox:x1 - ox] = True
    return acc, covered


def blend_tiles(source, tiles: list, images: list, weights: list):
    """The kept tiles' images [B,h,w,3] blended with their weights into [B,H,W,3]; `source` [B,H,W,3] where no
    kept tile covers."""
    import torch

    b, h, w, c = source.shape
    out, covered = _accumulate(tiles, images, weights, b, c, (0, 0, w, h))
    return torch.where(covered[None, :, :, None], out, source.float().cpu())


def blend_and_paste(source, tiles: list, images: list, weights: list, paste_mask, rows: int = 256):
    """blend_tiles then masks.paste_back, bit for bit, with the memory of one whole image: the result starts as a
    copy of `source` [B,H,W,3] (float32, CPU), the tiles are summed over their union box only, and the paste's
    arithmetic runs over `rows` rows at a time; `paste_mask` [B,H,W,1] is 0 outside every tile."""
    import torch

    out = source.float().cpu().clone()
    if not tiles:
        return out
    ox, oy, ex, ey = box = union_box(tiles)
    acc, covered = _accumulate(tiles, images, weights, source.shape[0], source.shape[3], box)
    for top in range(0, ey - oy, rows):
        band = slice(oy + top, min(ey, oy + top + rows))
        src = out[:, band, ox:ex]
        blended = torch.where(covered[top:top + rows][None, :, :, None], acc[:, top:top + rows], src)
        out[:, band, ox:ex] = composite(src, blended, paste_mask[:, band, ox:ex].to(torch.float32))
    return out


def seam_bands(tiles: list, height: int, width: int, band: int):
    """[H, W] bool: the pixels within `band` px of a kept tile's border that lies inside the image (the image's own
    edges are no seam), along that border's length."""
    import torch

    out = torch.zeros(height, width, dtype=torch.bool)
    for t in tiles:
        x0, y0, x1, y1 = t.box
        ya, yb = max(0, y0 - band), min(height, y1 + band)
        xa, xb = max(0, x0 - band), min(width, x1 + band)
        for x in (x0, x1):
            if 0 < x < width:
                out[ya:yb, max(0, x - band):min(width, x + band)] = True
        for y in (y0, y1):
            if 0 < y < height:
                out[max(0, y - band):min(height, y + band), xa:xb] = True
    return out


def ciede2000_lab(lab_a, lab_b):
    """CIEDE2000 colour difference [...] of CIELAB colours [...,3] (kL = kC = kH = 1), in float64, following Sharma,
    Wu and Dalal (2005), 'The CIEDE2000 color-difference formula: implementation notes' (their equations 2-22,
    hue mean and difference by their rules for C' = 0 and |h1' - h2'| > 180)."""
    import torch

    L1, a1, b1 = lab_a.double().unbind(-1)
    L2, a2, b2 = lab_b.double().unbind(-1)
    c_bar = (torch.hypot(a1, b1) + torch.hypot(a2, b2)) / 2
    g = 0.5 * (1 - torch.sqrt(c_bar ** 7 / (c_bar ** 7 + 25.0 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = torch.hypot(a1p, b1), torch.hypot(a2p, b2)
    h1p = torch.rad2deg(torch.atan2(b1, a1p)) % 360
    h2p = torch.rad2deg(torch.atan2(b2, a2p)) % 360
    h1p = torch.where((a1p == 0) & (b1 == 0), torch.zeros_like(h1p), h1p)
    h2p = torch.where((a2p == 0) & (b2 == 0), torch.zeros_like(h2p), h2p)
    both = (c1p * c2p) != 0
    dh = h2p - h1p
    dh = torch.where(dh > 180, dh - 360, torch.where(dh < -180, dh + 360, dh))
    dh = torch.where(both, dh, torch.zeros_like(dh))
    d_l, d_c = L2 - L1, c2p - c1p
    d_h = 2 * torch.sqrt(c1p * c2p) * torch.sin(torch.deg2rad(dh / 2))
    l_bar, cp_bar = (L1 + L2) / 2, (c1p + c2p) / 2
    h_sum = h1p + h2p
    h_bar = torch.where((h1p - h2p).abs() <= 180, h_sum / 2,
                        torch.where(h_sum < 360, (h_sum + 360) / 2, (h_sum - 360) / 2))
    h_bar = torch.where(both, h_bar, h_sum)
    t = (1 - 0.17 * torch.cos(torch.deg2rad(h_bar - 30)) + 0.24 * torch.cos(torch.deg2rad(2 * h_bar))
         + 0.32 * torch.cos(torch.deg2rad(3 * h_bar + 6)) - 0.20 * torch.cos(torch.deg2rad(4 * h_bar - 63)))
    d_theta = 30 * torch.exp(-(((h_bar - 275) / 25) ** 2))
    r_c = 2 * torch.sqrt(cp_bar ** 7 / (cp_bar ** 7 + 25.0 ** 7))
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / torch.sqrt(20 + (l_bar - 50) ** 2)
    s_c = 1 + 0.045 * cp_bar
    s_h = 1 + 0.015 * cp_bar * t
    r_t = -torch.sin(torch.deg2rad(2 * d_theta)) * r_c
    return torch.sqrt((d_l / s_l) ** 2 + (d_c / s_c) ** 2 + (d_h / s_h) ** 2 + r_t * (d_c / s_c) * (d_h / s_h))


def ciede2000(rgb_a, rgb_b):
    """CIEDE2000 [...] between sRGB colours [...,3] in 0..1 (converted to CIELAB D65 by tone.srgb_to_lab)."""
    return ciede2000_lab(srgb_to_lab(rgb_a), srgb_to_lab(rgb_b))
