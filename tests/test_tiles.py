"""Overlapping tiles (issue 23), pixels only (fillscope/compositing/tiles.py, tile_seams.py): the grid's boxes, the
mask's choice of tiles, ramp weights that sum to 1, the blend, the seam bands, CIEDE2000 against Sharma et al.'s
published test pairs, and the Poisson solve of the overlaps (the tiles' own gradients, inside the mask only)."""

from __future__ import annotations

import math

import pytest
import torch

from fillscope import bounds
from fillscope.compositing.tile_seams import _divergence, overlap_contrast, poisson_seams, tile_guidance
from fillscope.compositing.tiles import (blend_tiles, ciede2000, ciede2000_lab, plan_tiles, ramp_weights,
                                         seam_bands)
from fillscope.errors import FillScopeInputError

SMALL = bounds.Range(64, 4096)  # tiny-model tiles


def overlaps(starts_ends):
    return [a_end - b_start for (_, a_end), (b_start, _) in zip(starts_ends, starts_ends[1:])]


@pytest.mark.parametrize("height,width,tile,overlap", [
    (4096, 6144, 1024, 0.15), (3072, 4096, 512, 0.15), (1000, 3001, 1024, 0.5), (2049, 1100, 1024, 0.0),
    (96, 160, 64, 0.25)])
def test_boxes_lie_inside_the_image_cover_it_and_overlap_by_at_least_the_ratio(height, width, tile, overlap):
    tiles = plan_tiles(height, width, tile=tile, overlap=overlap, tile_range=SMALL)
    covered = torch.zeros(height, width, dtype=torch.int32)
    for t in tiles:
        x0, y0, x1, y1 = t.box
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
        assert (x1 - x0, y1 - y0) == (min(tile, width), min(tile, height))
        covered[y0:y1, x0:x1] += 1
    assert int(covered.min()) >= 1
    cols = sorted({(t.box[0], t.box[2]) for t in tiles})
    rows = sorted({(t.box[1], t.box[3]) for t in tiles})
    for axis in (cols, rows):
        assert all(o >= overlap * tile for o in overlaps(axis)), overlaps(axis)
        assert all(start % 16 == 0 for start, _ in axis[:-1])  # starts on the token grid, the last one shifted in
    assert [t.index for t in tiles] == list(range(len(tiles)))
    assert {(t.row, t.col) for t in tiles} == {(r, c) for r in range(len(rows)) for c in range(len(cols))}


def test_6144x4096_at_1024_is_7_by_5_tiles():
    tiles = plan_tiles(4096, 6144)
    assert sorted({t.box[0] for t in tiles}) == [0, 864, 1728, 2592, 3456, 4320, 5120]
    assert sorted({t.box[1] for t in tiles}) == [0, 768, 1536, 2304, 3072]


@pytest.mark.parametrize("height,width", [(1024, 1024), (600, 1000), (17, 1024)])
def test_an_image_that_fits_in_one_tile_is_one_box_of_the_whole_image(height, width):
    assert [t.box for t in plan_tiles(height, width)] == [(0, 0, width, height)]


def test_only_tiles_meeting_the_mask_grown_by_the_overlap_are_kept():
    mask = torch.zeros(1, 96, 160)
    mask[:, 4:24, 4:28] = 1  # in tile (0,0); grown by 16 px it reaches y 39 (row 1 starts at 32), x 43 (col 1: 48)
    tiles = plan_tiles(96, 160, tile=64, overlap=0.25, mask=mask, tile_range=SMALL)
    assert [(t.row, t.col) for t in tiles] == [(0, 0), (1, 0)]
    assert [t.index for t in plan_tiles(96, 160, tile=64, overlap=0.25, mask=mask, grow=0, tile_range=SMALL)] == [0]
    assert plan_tiles(96, 160, tile=64, overlap=0.25, mask=torch.zeros(96, 160), tile_range=SMALL) == []


@pytest.mark.parametrize("kw,name,says", [
    ({"tile": 128}, "tile", "below the range 256 to 4096"), ({"tile": 8192}, "tile", "above the range"),
    ({"tile": 1000}, "tile", "not a multiple of 16"), ({"tile": 1024.5}, "tile", "whole number"),
    ({"overlap": 0.6}, "overlap", "above the range 0 to 0.5"), ({"overlap": math.nan}, "overlap", "finite"),
    ({"overlap": -0.1}, "overlap", "below")])
def test_tile_and_overlap_out_of_bounds_are_refused_naming_the_input(kw, name, says):
    with pytest.raises(FillScopeInputError) as e:
        plan_tiles(2048, 2048, **kw)
    assert e.value.input_name == name and says in str(e.value), str(e.value)


def test_the_bounds_are_in_the_table():
    assert bounds.TILED == {"tile": bounds.Range(256, 4096), "overlap": bounds.Range(0.0, 0.5)}


def weight_sum(tiles, weights, height, width):
    total = torch.zeros(height, width, dtype=torch.float64)
    for t, w in zip(tiles, weights):
        total[t.box[1]:t.box[3], t.box[0]:t.box[2]] += w.double()
    return total


@pytest.mark.parametrize("keep", ["all", "mask", "diagonal"])
def test_kept_tiles_weights_sum_to_one_wherever_a_tile_covers(keep):
    height, width = 200, 296
    tiles = plan_tiles(height, width, tile=96, overlap=0.25, tile_range=SMALL)
    if keep == "mask":
        mask = torch.zeros(height, width)
        mask[90:120, 10:150] = 1
        tiles = plan_tiles(height, width, tile=96, overlap=0.25, mask=mask, tile_range=SMALL)
    elif keep == "diagonal":
        tiles = [t for t in tiles if t.row == t.col]  # neighbours only at corners
    weights = ramp_weights(tiles, height, width)
    total = weight_sum(tiles, weights, height, width)
    covered = total > 0
    err = float((total[covered] - 1).abs().max())
    print(f"\n{keep}: {len(tiles)} tiles, max |sum - 1| = {err:.2e}")
    assert err < 1e-6
    assert all(float(w.min()) > 0 and float(w.max()) <= 1 + 1e-6 for w in weights)


def test_ramps_are_one_inside_zero_at_shared_edges_and_one_at_the_image_border():
    tiles = plan_tiles(64, 160, tile=64, overlap=0.25, tile_range=SMALL)  # one row: x 0-64, 48-112, 96-160
    w = ramp_weights(tiles, 64, 160)
    assert torch.equal(w[0][:, :48], torch.ones(64, 48))  # interior and the image's left border: exactly 1
    assert float(w[0][0, 63]) < 0.04 and float(w[1][0, 0]) < 0.04  # edges inside a neighbour: ~0 (1/32)
    assert torch.equal(w[2][:, 16:], torch.ones(64, 48))  # right of the last overlap, to the image's border
    alone = ramp_weights([tiles[0]], 64, 160)[0]  # no kept neighbour: no ramp
    assert torch.equal(alone, torch.ones(64, 64))


def test_blend_is_the_weighted_sum_and_the_source_where_no_tile_covers():
    height, width = 96, 160
    mask = torch.zeros(height, width)
    mask[40:60, 20:90] = 1
    tiles = plan_tiles(height, width, tile=64, overlap=0.25, mask=mask, grow=0, tile_range=SMALL)
    assert len(tiles) < 6
    source = torch.rand(1, height, width, 3)
    images = [torch.full((1, t.height, t.width, 3), float(k + 1)) for k, t in enumerate(tiles)]
    weights = ramp_weights(tiles, height, width)
    out = blend_tiles(source, tiles, images, weights)
    expect = weight_sum(tiles, [w * (k + 1) for k, w in enumerate(weights)], height, width).float()
    covered = weight_sum(tiles, weights, height, width) > 0
    assert torch.allclose(out[0, ..., 0][covered], expect[covered], atol=1e-5)
    assert torch.equal(out[0][~covered], source[0][~covered])


def test_seam_bands_follow_the_interior_borders_only():
    tiles = plan_tiles(64, 160, tile=64, overlap=0.25, tile_range=SMALL)
    band = seam_bands(tiles, 64, 160, 2)
    cols = torch.nonzero(band.any(0)).flatten().tolist()
    assert cols == [46, 47, 48, 49, 62, 63, 64, 65, 94, 95, 96, 97, 110, 111, 112, 113]
    assert bool(band[:, 46].all())  # along the whole border
    assert not seam_bands(plan_tiles(64, 64, tile=64, overlap=0.25, tile_range=SMALL), 64, 64, 4).any()


# Sharma, Wu and Dalal (2005), Table 1: L1 a1 b1, L2 a2 b2, delta E00 (4 decimals)
SHARMA = [
    (50.0000, 2.6772, -79.7751, 50.0000, 0.0000, -82.7485, 2.0425),
    (50.0000, 3.1571, -77.2803, 50.0000, 0.0000, -82.7485, 2.8615),
    (50.0000, 2.8361, -74.0200, 50.0000, 0.0000, -82.7485, 3.4412),
    (50.0000, -1.3802, -84.2814, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -1.1848, -84.8006, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -0.9009, -85.5211, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, 0.0000, 0.0000, 50.0000, -1.0000, 2.0000, 2.3669),
    (50.0000, -1.0000, 2.0000, 50.0000, 0.0000, 0.0000, 2.3669),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0009, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0010, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0011, 7.2195),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0012, 7.2195),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0009, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0010, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0011, -2.4900, 4.7461),
    (50.0000, 2.5000, 0.0000, 50.0000, 0.0000, -2.5000, 4.3065),
    (50.0000, 2.5000, 0.0000, 73.0000, 25.0000, -18.0000, 27.1492),
    (50.0000, 2.5000, 0.0000, 61.0000, -5.0000, 29.0000, 22.8977),
    (50.0000, 2.5000, 0.0000, 56.0000, -27.0000, -3.0000, 31.9030),
    (50.0000, 2.5000, 0.0000, 58.0000, 24.0000, 15.0000, 19.4535),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.1736, 0.5854, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2972, 0.0000, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 1.8634, 0.5757, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2592, 0.3350, 1.0000),
    (60.2574, -34.0099, 36.2677, 60.4626, -34.1751, 39.4387, 1.2644),
    (63.0109, -31.0961, -5.8663, 62.8187, -29.7946, -4.0864, 1.2630),
    (61.2901, 3.7196, -5.3901, 61.4292, 2.2480, -4.9620, 1.8731),
    (35.0831, -44.1164, 3.7933, 35.0232, -40.0716, 1.5901, 1.8645),
    (22.7233, 20.0904, -46.6940, 23.0331, 14.9730, -42.5619, 2.0373),
    (36.4612, 47.8580, 18.3852, 36.2715, 50.5065, 21.2231, 1.4146),
    (90.8027, -2.0831, 1.4410, 91.1528, -1.6435, 0.0447, 1.4441),
    (90.9257, -0.5406, -0.9208, 88.6381, -0.8985, -0.7239, 1.5381),
    (6.7747, -0.2908, -2.4247, 5.8714, -0.0985, -2.2286, 0.6377),
    (2.0776, 0.0795, -1.1350, 0.9033, -0.0636, -0.5514, 0.9082),
]


def test_ciede2000_gives_sharmas_34_published_values():
    pairs = torch.tensor(SHARMA, dtype=torch.float64)
    got = ciede2000_lab(pairs[:, 0:3], pairs[:, 3:6])
    assert float((got - pairs[:, 6]).abs().max()) < 5e-5  # the table rounds to 4 decimals
    swapped = ciede2000_lab(pairs[:, 3:6], pairs[:, 0:3])
    assert torch.allclose(got, swapped, atol=1e-12)  # symmetric


def test_ciede2000_of_srgb_is_zero_for_equal_colours_and_large_for_black_and_white():
    rgb = torch.rand(8, 8, 3)
    assert float(ciede2000(rgb, rgb).abs().max()) == 0.0
    assert abs(float(ciede2000(torch.zeros(3), torch.ones(3))) - 100.0) < 1e-3  # L 0 -> 100, neutral


# Poisson blending at the seams (fillscope/compositing/tile_seams.py)
def textured_tiles(height=96, width=160, seed=0):
    """3x2 tiles of 64 px (overlap 0.25) over a smooth picture, each tile with its own texture (normal, 0.05) and
    colour offset (up to +-0.03), all within 0.2..0.8 so that no clamp acts: what independent sampling gives. Returns
    the tiles, their images, ramp weights, the ramp blend and the picture with one texture over it (no seam)."""
    g = torch.Generator().manual_seed(seed)
    tiles = plan_tiles(height, width, tile=64, overlap=0.25, tile_range=SMALL)
    ys = torch.linspace(0, 1, height)[:, None, None]
    xs = torch.linspace(0, 1, width)[None, :, None]
    base = 0.35 + 0.3 * torch.cat([xs.expand(height, width, 1), ys.expand(height, width, 1),
                                   (0.5 * (xs + ys)).expand(height, width, 1)], -1)[None]
    images = [(base[:, t.box[1]:t.box[3], t.box[0]:t.box[2]]
               + (0.05 * torch.randn(1, t.height, t.width, 3, generator=g)).clamp(-0.14, 0.14)
               + 0.06 * (torch.rand(1, 1, 1, 3, generator=g) - 0.5)) for t in tiles]
    weights = ramp_weights(tiles, height, width)
    seamless = base + (0.05 * torch.randn(base.shape, generator=g)).clamp(-0.14, 0.14)  # one texture, no tiles
    return tiles, images, weights, blend_tiles(base, tiles, images, weights), seamless


def test_poisson_seams_solves_the_overlaps_with_the_tiles_own_gradients():
    tiles, images, weights, blended, seamless = textured_tiles()
    mask = torch.ones(1, 96, 160)
    solved = poisson_seams(blended, tiles, images, weights, mask)
    gx, gy, overlap = tile_guidance(blended, tiles, images, weights)

    def foreign(f):  # mean |gradient - guidance| in the overlaps: gradients no tile drew
        return float(((f[:, :, 1:] - f[:, :, :-1] - gx)[0][overlap[:, 1:]].abs().mean()
                      + (f[:, 1:] - f[:, :-1] - gy)[0][overlap[1:]].abs().mean()) / 2)

    # the normal equations div(grad f - v) = 0 hold in the overlaps after the default V-cycles (no clamp acted)
    residual = (_divergence(gx - (solved[:, :, 1:] - solved[:, :, :-1]), gy - (solved[:, 1:] - solved[:, :-1]))
                [0][overlap].abs().max())
    ramp_contrast, solved_contrast = (overlap_contrast(f, seamless, tiles, mask)[2] for f in (blended, solved))
    print(f"\nforeign gradients ramp {foreign(blended):.4f} -> poisson {foreign(solved):.4f}; overlap contrast "
          f"ramp {ramp_contrast:.3f} -> poisson {solved_contrast:.3f}; max residual {float(residual):.1e}")
    assert float(residual) < 2e-3  # 0..1 units; the guidance's own steps are ~0.07
    assert foreign(solved) < 0.25 * foreign(blended)
    # against one texture of the same statistics: ~1 when one tile's texture is kept per edge; averaging two
    # independent textures keeps sqrt(w^2 + (1 - w)^2) of the contrast (1/sqrt(2) at the midline)
    assert ramp_contrast < 0.9 and abs(solved_contrast - 1) < 0.05
    assert torch.equal(solved[0][overlap.logical_not()], blended[0][overlap.logical_not()])  # margin 0: overlaps only


def test_poisson_seams_keeps_pixels_outside_the_mask_and_changes_nothing_with_one_tile():
    tiles, images, weights, blended, _ = textured_tiles()
    mask = torch.zeros(1, 96, 160)
    mask[:, 10:70, 30:120] = 1
    solved = poisson_seams(blended, tiles, images, weights, mask, margin=4)
    assert torch.equal(solved[0][mask[0] == 0], blended[0][mask[0] == 0])
    assert not torch.equal(solved, blended)
    assert torch.equal(poisson_seams(blended, tiles[:1], images[:1], [torch.ones(64, 64)], mask), blended)
    assert torch.equal(poisson_seams(blended, tiles, images, weights, torch.zeros(1, 96, 160)), blended)


@pytest.mark.parametrize("kw,name", [({"margin": -1}, "margin"), ({"cycles": 0}, "cycles"),
                                     ({"images": []}, "images"), ({"mask": torch.ones(1, 8, 8)}, "mask")])
def test_poisson_seams_refuses_bad_input(kw, name):
    tiles, images, weights, blended, _ = textured_tiles()
    args = {"blended": blended, "tiles": tiles, "images": images, "weights": weights, "mask": torch.ones(1, 96, 160)}
    with pytest.raises(FillScopeInputError) as e:
        poisson_seams(**{**args, **kw})
    assert e.value.input_name == name


def test_blend_and_paste_equals_blend_tiles_then_paste_back_bit_for_bit():
    """The tiled run's fused blend and paste-back (one copy of the image, the paste 256 rows at a time; here 7 rows,
    so bands cut through tiles) against blend_tiles + masks.paste_back, with a soft paste mask inside the tiles."""
    from fillscope.compositing.tiles import blend_and_paste, blend_tiles, ramp_weights
    from fillscope.masks import paste_back

    g = torch.Generator().manual_seed(0)
    source = torch.rand(1, 96, 160, 3, generator=g)
    mask = torch.zeros(1, 96, 160)
    mask[:, 10:60, 70:150] = 1
    tiles = plan_tiles(96, 160, tile=64, overlap=0.25, mask=mask, tile_range=SMALL)
    assert len(tiles) > 2
    weights = ramp_weights(tiles, 96, 160)
    images = [torch.rand(1, t.box[3] - t.box[1], t.box[2] - t.box[0], 3, generator=g) for t in tiles]
    paste = torch.zeros(1, 96, 160, 1)
    paste[:, 12:58, 72:148] = torch.rand(1, 46, 76, 1, generator=g)
    paste[:, 20:40, 90:120] = 1.0
    expected = paste_back(blend_tiles(source, tiles, images, weights), source, paste)
    assert torch.equal(blend_and_paste(source, tiles, images, weights, paste, rows=7), expected)
