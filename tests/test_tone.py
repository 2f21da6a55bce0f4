"""Seams and colour (fillscope/compositing/tone.py): the ring, its CIE76 delta E, tone matching and the Poisson blend.

The generated images here are the source with a known colour drift (a constant offset, a left-to-right gradient), as
a fill model's output drifts from the source it was told to keep; the figures are printed (pytest -s shows them)."""

from __future__ import annotations

import math
import time

import pytest
import torch

from fillscope.compositing.tone import (
    lab_to_srgb,
    match_tone,
    poisson_blend,
    ring_delta_e,
    ring_mask,
    srgb_to_lab,
)
from fillscope.errors import FillScopeInputError


def textured_source(h=192, w=256, seed=0):
    """A smooth colour gradient with fine texture, values kept inside 0.15..0.85 so a drift of 0.1 never clips."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, h)[:, None].expand(h, w)
    xs = torch.linspace(0, 1, w)[None, :].expand(h, w)
    base = torch.stack([0.25 + 0.4 * xs, 0.3 + 0.3 * ys, 0.6 - 0.3 * xs * ys], dim=-1)
    texture = 0.1 * (torch.rand(h, w, 3, generator=g) - 0.5)
    return (base + texture).clamp(0.15, 0.85)[None]


def box_mask(h=192, w=256, top=48, left=64, height=96, width=128):
    m = torch.zeros(1, h, w, 1)
    m[:, top : top + height, left : left + width] = 1.0
    return m


def test_lab_round_trip_and_white_point():
    rgb = torch.rand(1, 8, 8, 3)
    assert torch.allclose(lab_to_srgb(srgb_to_lab(rgb)), rgb, atol=1e-4)
    white = srgb_to_lab(torch.ones(1, 1, 1, 3))[0, 0, 0]
    assert torch.allclose(white, torch.tensor([100.0, 0.0, 0.0]), atol=1e-2)


def test_ring_is_the_band_just_outside_the_mask():
    m = box_mask()
    ring = ring_mask(m, 16)
    assert ring.dtype == torch.bool and ring.shape == m.shape
    assert not bool((ring & (m > 0)).any())  # never inside the mask
    assert int(ring.sum()) == (96 + 32) * (128 + 32) - 96 * 128  # a square dilation of a box: a box ring
    assert int(ring_mask(torch.zeros_like(m), 16).sum()) == 0
    assert int(ring_mask(torch.ones_like(m), 16).sum()) == 0
    assert int(ring_mask(m, 0).sum()) == 0


def test_delta_e_of_identical_images_is_zero_and_nan_on_an_empty_ring():
    src = textured_source()
    ring = ring_mask(box_mask(), 16)
    assert ring_delta_e(src, src.clone(), ring) == 0.0
    assert math.isnan(ring_delta_e(src, src, torch.zeros_like(ring)))
    # a known difference: L* 50 grey against a slightly lighter grey
    a = torch.full((1, 4, 4, 3), 0.5)
    b = torch.full((1, 4, 4, 3), 0.52)
    expected = float((srgb_to_lab(b) - srgb_to_lab(a))[0, 0, 0].norm())
    assert ring_delta_e(a, b, torch.ones(1, 4, 4, 1, dtype=torch.bool)) == pytest.approx(expected, rel=1e-5)


def _drifted(src, offset):
    return (src + offset).clamp(0, 1)


def test_match_tone_removes_a_constant_colour_cast():
    src, m = textured_source(), box_mask()
    gen = _drifted(src, torch.tensor([0.08, -0.04, 0.06]))
    out, info = match_tone(gen, src, m)
    print(f"\nconstant cast: ring delta E {info['delta_e_before']:.2f} -> {info['delta_e_after']:.2f}")
    assert info["delta_e_before"] > 5
    assert info["delta_e_after"] < info["delta_e_before"] / 3
    assert info["delta_e_after"] == pytest.approx(ring_delta_e(out, src, ring_mask(m, 16)), rel=1e-5)
    assert out.shape == src.shape and float(out.min()) >= 0 and float(out.max()) <= 1
    # inside the mask the same cast is gone too (the generated image there is the source, drifted)
    inside = (m > 0).expand_as(src)
    assert float((out - src)[inside].abs().mean()) < float((gen - src)[inside].abs().mean()) / 3


def test_match_tone_removes_a_left_to_right_gradient_cast():
    src, m = textured_source(), box_mask()
    ramp = torch.linspace(-1, 1, src.shape[2])[None, None, :, None]
    gen = _drifted(src, ramp * torch.tensor([0.1, 0.0, -0.08]))
    _, info_flat = match_tone(gen, src, m, low_frequency=False)
    out, info = match_tone(gen, src, m, low_frequency=True)
    print(f"\ngradient cast: ring delta E {info['delta_e_before']:.2f} -> {info_flat['delta_e_after']:.2f} "
          f"(mean/std only) -> {info['delta_e_after']:.2f} (with the low-frequency field)")
    assert info["delta_e_after"] < info["delta_e_before"] / 3
    assert info["delta_e_after"] < info_flat["delta_e_after"] / 2  # the field is what fixes a gradient
    inside = (m > 0).expand_as(src)
    assert float((out - src)[inside].abs().mean()) < float((gen - src)[inside].abs().mean()) / 3


def test_match_tone_with_no_ring_changes_nothing_and_says_why():
    src = textured_source()
    gen = _drifted(src, 0.05)
    for m in (torch.zeros(1, *src.shape[1:3], 1), torch.ones(1, *src.shape[1:3], 1)):
        out, info = match_tone(gen, src, m)
        assert "skipped" in info
        assert torch.equal(out, gen)


def test_match_tone_works_per_image_of_a_batch():
    src = torch.cat([textured_source(seed=0), textured_source(seed=1)])
    m = torch.cat([box_mask(), box_mask(top=20, left=20, height=60, width=60)])
    gen = torch.cat([_drifted(src[:1], 0.06), _drifted(src[1:], -0.06)])
    out, info = match_tone(gen, src, m)
    assert out.shape == src.shape
    assert info["delta_e_after"] < info["delta_e_before"] / 3
    assert info["offset"][0][0] < 0 < info["offset"][1][0]  # L*: the first image was too light, the second too dark


def test_shapes_are_checked():
    src = textured_source()
    with pytest.raises(FillScopeInputError, match="generated"):
        match_tone(src[:, :100], src, box_mask())
    with pytest.raises(FillScopeInputError, match="mask"):
        poisson_blend(src, src, box_mask()[:, :100])


def test_poisson_keeps_the_source_outside_and_a_constant_offset_leaves_no_seam():
    src, m = textured_source(), box_mask()
    gen = _drifted(src, torch.tensor([0.1, -0.05, 0.07]))
    out = poisson_blend(gen, src, m)
    outside = (m == 0).expand_as(src)
    assert torch.equal(out[outside], src[outside])  # bit-identical
    # the generated gradients are the source's: the blend gives the source back inside too, so no seam at all
    inside = ~outside
    err = float((out - src)[inside].abs().max())
    # the seam: the step across the mask's border compared with the source's own step there
    inner = (m > 0) & ring_mask(1.0 - m, 1)  # the mask's own first pixel row
    seam = float((out - src)[inner.expand_as(src)].abs().max())
    print(f"\nPoisson, constant offset 0.1: max |result - source| inside {err:.2e}, on the seam {seam:.2e}")
    assert err < 2e-3 and seam < 2e-3


def test_poisson_keeps_the_generated_detail_inside():
    src = textured_source()
    m = box_mask()
    g = torch.Generator().manual_seed(3)
    gen = (0.45 + 0.1 * torch.rand(src.shape, generator=g))  # other content, another colour: no clipping
    out = poisson_blend(gen, src, m)
    d = (out - gen)[0].permute(2, 0, 1)  # the membrane added to the generated image: harmonic inside
    lap = d[:, :-2, 1:-1] + d[:, 2:, 1:-1] + d[:, 1:-1, :-2] + d[:, 1:-1, 2:] - 4 * d[:, 1:-1, 1:-1]
    interior = (m[0, 2:-2, 2:-2, 0] > 0)
    interior = torch.nn.functional.pad(interior, (1, 1, 1, 1))  # the mask shrunk by one pixel, on lap's grid
    residual = float(lap[:, interior].abs().mean())
    print(f"\nPoisson, other content: mean |Laplacian of the correction| inside {residual:.2e}")
    assert residual < 1e-3
    # on the border the fill meets the source: the first pixel inside is close to its outside neighbour
    step_out = float((out[:, 48, 64:192] - src[:, 47, 64:192]).abs().mean())
    step_raw = float((gen[:, 48, 64:192] - src[:, 47, 64:192]).abs().mean())
    assert step_out < step_raw / 2


def test_poisson_edge_cases_and_timing():
    src = textured_source()
    gen = _drifted(src, 0.05)
    assert torch.equal(poisson_blend(gen, src, torch.zeros(1, *src.shape[1:3], 1)), src)
    assert torch.equal(poisson_blend(gen, src, torch.ones(1, *src.shape[1:3], 1)), gen)
    # a mask touching the image border: that edge is free (nothing to meet there)
    m = torch.zeros(1, *src.shape[1:3], 1)
    m[:, :40, :60] = 1
    out = poisson_blend(gen, src, m)
    assert float((out - src)[(m > 0).expand_as(src)].abs().max()) < 2e-3
    # a soft mask is a region (> 0): what the caller composites with
    soft = box_mask() * 0.5
    assert torch.equal(poisson_blend(gen, src, soft)[(soft == 0).expand_as(src)], src[(soft == 0).expand_as(src)])
    t0 = time.perf_counter()
    poisson_blend(gen, src, box_mask())
    print(f"\nPoisson {src.shape[2]}x{src.shape[1]} with a 128x96 hole: {time.perf_counter() - t0:.2f} s")
