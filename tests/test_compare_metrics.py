"""fillscope/compare/metrics.py against independent references: SSIM against the formula written out here with
scipy.ndimage.gaussian_filter, PSNR against 10 log10(1 / MSE) by hand, known values (identical images, a constant
offset, orthogonal vectors), regions, NaN handling and the heatmap's colours.

Cross-check with scikit-image (not a dependency; installed for the check with
`.venv/bin/pip install --target /tmp/skimage_ref scikit-image`, scikit-image 0.26.0, run with
PYTHONPATH=/tmp/skimage_ref): on seven float64 image pairs (random, noisy, gradient, checkerboard, sinusoid with a
patch, 11x11, one channel 40x33) `ssim` agreed with structural_similarity(gaussian_weights=True, sigma=1.5,
use_sample_covariance=False, data_range=1, channel_axis=-1) to at most 2.5e-14 and `psnr` with
peak_signal_noise_ratio(data_range=1) to at most 8.9e-16 dB. bench/ssim_vs_skimage.py repeats that check where
scikit-image is importable (a script, not a test: under CI a test may not skip, and scikit-image is no dependency)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from fillscope.compare.metrics import (HEATMAP_ANCHORS, OUTLINE_COLOUR, colour_map, difference_heatmap,
                                       image_difference, psnr, ssim, tensor_difference)
from fillscope.errors import FillScopeInputError

ndimage = pytest.importorskip("scipy.ndimage")


# ------------------------------------------------------------------------------------------------------------
# Independent references
# ------------------------------------------------------------------------------------------------------------


def reference_ssim_map(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """SSIM map (Wang et al. 2004) of one image pair [H,W,C] float64 -> [H,W], channel mean: Gaussian-weighted local
    statistics (sigma 1.5, truncated at 3.5 sigma, scipy's 'reflect' border), population covariance,
    C1 = (0.01 * 1)^2, C2 = (0.03 * 1)^2."""
    c1, c2 = 0.01**2, 0.03**2
    maps = []
    for c in range(x.shape[-1]):
        xc, yc = x[..., c], y[..., c]

        def g(t):
            return ndimage.gaussian_filter(t, sigma=1.5, truncate=3.5, mode="reflect")

        mu_x, mu_y = g(xc), g(yc)
        sigma_xx = g(xc * xc) - mu_x**2
        sigma_yy = g(yc * yc) - mu_y**2
        sigma_xy = g(xc * yc) - mu_x * mu_y
        maps.append(((2 * mu_x * mu_y + c1) * (2 * sigma_xy + c2))
                    / ((mu_x**2 + mu_y**2 + c1) * (sigma_xx + sigma_yy + c2)))
    return np.mean(maps, axis=0)


def reference_ssim(x: np.ndarray, y: np.ndarray, region: np.ndarray | None = None) -> float:
    """Batch [B,H,W,C]: the maps' mean over the pixels 5 or more from the border (and in `region` [B,H,W])."""
    maps = np.stack([reference_ssim_map(xi, yi) for xi, yi in zip(x, y)])
    chosen = np.zeros(maps.shape, dtype=bool)
    chosen[:, 5:-5, 5:-5] = True
    if region is not None:
        chosen &= region
    return float(maps[chosen].mean())


def reference_psnr(x: np.ndarray, y: np.ndarray, region: np.ndarray | None = None) -> float:
    squared = (x - y) ** 2
    if region is not None:
        squared = squared[region]
    return 10 * math.log10(1.0 / squared.mean())


def image_pairs():
    """(name, a, b) float64 numpy [B,H,W,C]: random, noisy copy, smooth gradient, checkerboard, a patched sinusoid."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:40, 0:48] / 40.0
    noise = rng.random((2, 40, 48, 3))
    gradient = np.stack([x, y, (x + y) / 3], -1)[None]
    checker = ((np.floor(x * 6) + np.floor(y * 6)) % 2)[None, ..., None].repeat(3, -1)
    sinusoid = (np.sin(17 * x) * np.cos(11 * y) * 0.5 + 0.5)[None, ..., None].repeat(3, -1)
    patched = sinusoid.copy()
    patched[:, 12:30, 8:26] = 0.25
    return [
        ("random pair, batch 2", noise, rng.random(noise.shape)),
        ("random vs noisy copy", noise, np.clip(noise + 0.05 * rng.standard_normal(noise.shape), 0, 1)),
        ("gradient vs scaled", gradient, gradient * 0.9 + 0.05),
        ("checker vs noisy", checker, np.clip(checker + 0.1 * rng.standard_normal(checker.shape), 0, 1)),
        ("sinusoid vs patched", sinusoid, patched),
    ]


def t(array):
    return torch.from_numpy(np.ascontiguousarray(array))


# ------------------------------------------------------------------------------------------------------------
# SSIM and PSNR
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,a,b", image_pairs(), ids=[p[0] for p in image_pairs()])
def test_ssim_and_psnr_match_the_references(name, a, b):
    assert ssim(t(a), t(b)) == pytest.approx(reference_ssim(a, b), abs=1e-12)
    assert psnr(t(a), t(b)) == pytest.approx(reference_psnr(a, b), abs=1e-10)
    region = np.zeros(a.shape[:3], dtype=bool)
    region[:, 8:30, 10:40] = True
    assert ssim(t(a), t(b), t(region)) == pytest.approx(reference_ssim(a, b, region), abs=1e-12)
    assert psnr(t(a), t(b), t(region)) == pytest.approx(reference_psnr(a, b, region), abs=1e-10)


def test_known_values():
    rng = np.random.default_rng(1)
    a = 0.2 + 0.6 * rng.random((1, 32, 32, 3))
    assert ssim(t(a), t(a)) == 1.0
    assert psnr(t(a), t(a)) == math.inf
    for d in (0.1, 0.01, 0.003):
        assert psnr(t(a + d), t(a)) == pytest.approx(-20 * math.log10(d), abs=1e-9)
    # float32 and [H,W,C] inputs are taken too, measured in float64
    assert psnr(t(a[0]).float(), t(a[0] + 0.1).float()) == pytest.approx(20.0, abs=1e-5)


def test_region_limits_the_figures_and_accepts_hw_and_float_masks():
    rng = np.random.default_rng(2)
    a = rng.random((2, 40, 40, 3))
    b = a.copy()
    b[:, 30:, 30:] += 0.2  # the change lies 8+ pixels from the region, beyond SSIM's 5-pixel window radius
    region_hw = np.zeros((40, 40), dtype=bool)
    region_hw[5:22, 5:22] = True
    assert psnr(t(a), t(b), t(region_hw)) == math.inf
    assert ssim(t(a), t(b), t(region_hw)) == 1.0
    assert psnr(t(a), t(b), t(region_hw).float() * 0.9) == math.inf  # float mask: counted where > 0.5
    assert psnr(t(a), t(b)) < 30 and ssim(t(a), t(b)) < 1
    assert math.isnan(psnr(t(a), t(b), torch.zeros(40, 40, dtype=torch.bool)))
    assert math.isnan(ssim(t(a), t(b), torch.zeros(40, 40, dtype=torch.bool)))
    assert math.isnan(ssim(torch.rand(1, 10, 30, 3), torch.rand(1, 10, 30, 3)))  # nothing left after the border


def test_image_difference_inside_outside_and_all():
    rng = np.random.default_rng(3)
    a = rng.random((1, 48, 48, 3))
    b = a.copy()
    b[:, 20:30, 20:30] = np.clip(b[:, 20:30, 20:30] + 0.3, 0, 1)  # changed inside the mask only
    mask = np.zeros((1, 48, 48), dtype=np.float32)
    mask[:, 14:36, 14:36] = 1.0
    inside, outside = mask > 0.5, mask <= 0.5
    figures = image_difference(t(a), t(b), t(mask))
    assert set(figures) == {"psnr_inside", "psnr_outside", "psnr_all", "ssim_inside", "ssim_outside", "ssim_all",
                            "max_abs_inside", "max_abs_outside", "max_abs_all", "pixels_inside", "pixels_outside"}
    assert figures["psnr_outside"] == math.inf and figures["ssim_outside"] == 1.0 and figures["max_abs_outside"] == 0
    assert figures["psnr_inside"] == pytest.approx(reference_psnr(a, b, inside), abs=1e-10)
    assert figures["ssim_inside"] == pytest.approx(reference_ssim(a, b, inside), abs=1e-12)
    assert figures["psnr_all"] == pytest.approx(reference_psnr(a, b), abs=1e-10)
    assert figures["ssim_all"] == pytest.approx(reference_ssim(a, b), abs=1e-12)
    assert figures["max_abs_inside"] == pytest.approx(np.abs(a - b)[inside].max(), abs=0)
    assert (figures["pixels_inside"], figures["pixels_outside"]) == (int(inside.sum()), int(outside.sum()))
    assert set(image_difference(t(a), t(b), None)) == {"psnr_all", "ssim_all", "max_abs_all"}


def test_bad_image_inputs_are_refused_by_name():
    with pytest.raises(FillScopeInputError, match="image_b"):
        psnr(torch.rand(1, 16, 16, 3), torch.rand(1, 16, 17, 3))
    with pytest.raises(FillScopeInputError, match="image_a"):
        ssim(torch.rand(16, 16), torch.rand(16, 16))
    with pytest.raises(FillScopeInputError, match="region"):
        psnr(torch.rand(1, 16, 16, 3), torch.rand(1, 16, 16, 3), torch.ones(16, 15, dtype=torch.bool))
    with pytest.raises(FillScopeInputError, match="mask"):
        image_difference(torch.rand(2, 16, 16, 3), torch.rand(2, 16, 16, 3), torch.ones(3, 16, 16))


# ------------------------------------------------------------------------------------------------------------
# Tensors
# ------------------------------------------------------------------------------------------------------------


def test_tensor_difference_known_vectors():
    a = torch.tensor([1.0, 0.0, 0.0])
    b = torch.tensor([0.0, 2.0, 0.0])
    assert tensor_difference(a, b)["cosine"] == 0.0
    assert tensor_difference(a, -a)["cosine"] == -1.0
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    close = tensor_difference(x + 0.001 * x, x)
    assert close["rel_err"] == pytest.approx(0.001, rel=1e-9) and close["rel_to"] == "b"
    assert close["cosine"] == pytest.approx(1.0, abs=1e-12)
    assert close["max_abs"] == pytest.approx(float((0.001 * x).abs().max()), rel=1e-9)
    assert close["mean_abs"] == pytest.approx(float((0.001 * x).abs().mean()), rel=1e-9)
    assert (close["numel"], close["compared"], close["shape"], close["comparable"]) == (20, 20, [4, 5], True)
    assert (close["nonfinite_a"], close["nonfinite_b"]) == (0, 0)
    # against zero: the absolute norm, said so; zero against zero: cosine 1
    against_zero = tensor_difference(torch.tensor([3.0, 4.0]), torch.zeros(2))
    assert (against_zero["rel_err"], against_zero["rel_to"], against_zero["cosine"]) == (5.0, "abs", 0.0)
    assert tensor_difference(torch.zeros(3), torch.zeros(3))["cosine"] == 1.0
    # half precision in, float64 figures out
    assert tensor_difference(x.bfloat16(), x.bfloat16())["rel_err"] == 0.0


def test_tensor_difference_shape_mismatch_is_a_finding():
    assert tensor_difference(torch.zeros(2, 3), torch.zeros(3, 2)) == {
        "shape_a": [2, 3], "shape_b": [3, 2], "comparable": False}


def test_tensor_difference_counts_nonfinite_and_measures_the_rest():
    a = torch.tensor([1.0, float("nan"), 3.0, float("inf"), 5.0])
    b = torch.tensor([1.0, 2.0, float("nan"), 4.0, 4.0])
    d = tensor_difference(a, b)
    assert (d["nonfinite_a"], d["nonfinite_b"], d["compared"], d["numel"]) == (2, 1, 2, 5)
    # finite in both: entries 0 and 4, a = [1, 5], b = [1, 4]
    assert d["max_abs"] == 1.0 and d["mean_abs"] == 0.5
    assert d["rel_err"] == pytest.approx(1 / math.sqrt(17), rel=1e-12)
    assert d["cosine"] == pytest.approx(21 / (math.sqrt(26) * math.sqrt(17)), rel=1e-12)
    nothing = tensor_difference(torch.full((3,), float("nan")), torch.ones(3))
    assert nothing["compared"] == 0 and math.isnan(nothing["rel_err"]) and math.isnan(nothing["cosine"])


# ------------------------------------------------------------------------------------------------------------
# Heatmap
# ------------------------------------------------------------------------------------------------------------


def test_heatmap_shape_range_scale_and_zero_case():
    rng = np.random.default_rng(4)
    a = rng.random((2, 24, 20, 3))
    b = a + 0.02 * rng.standard_normal(a.shape)
    heat, scale = difference_heatmap(t(a), t(b))
    assert heat.shape == (2, 24, 20, 3) and heat.dtype == torch.float32
    assert float(heat.min()) >= 0 and float(heat.max()) <= 1
    per_pixel = np.abs(a - b).max(axis=-1)
    assert scale == pytest.approx(np.percentile(per_pixel[per_pixel > 0], 99.5), rel=1e-12)
    expected = colour_map(torch.from_numpy(np.clip(per_pixel / scale, 0, 1)))
    assert torch.allclose(heat, expected)
    _, given = difference_heatmap(t(a), t(b), scale=0.5)
    assert given == 0.5
    black, zero = difference_heatmap(t(a), t(a))
    assert zero == 0.0 and not bool(black.any())
    with pytest.raises(FillScopeInputError, match="scale"):
        difference_heatmap(t(a), t(b), scale=0.0)


def test_heatmap_outline_in_cyan_and_nan_at_full_scale():
    a = torch.rand(1, 16, 16, 3, generator=torch.Generator().manual_seed(5))
    b = a.clone()
    b[0, 2, 2, 1] = float("nan")
    mask = torch.zeros(16, 16)
    mask[4:10, 5:12] = 1.0
    heat, scale = difference_heatmap(a, b, mask)
    assert scale == 0.0  # no finite non-zero difference
    cyan = (heat == torch.tensor(OUTLINE_COLOUR)).all(dim=-1)[0]
    ring = torch.zeros(16, 16, dtype=torch.bool)
    ring[4:10, 5:12] = True
    ring[5:9, 6:11] = False  # the mask's pixels with a 4-neighbour outside it
    assert torch.equal(cyan, ring)
    assert torch.allclose(heat[0, 2, 2], torch.tensor(HEATMAP_ANCHORS[-1][1], dtype=torch.float32))
    rest = ~cyan
    rest[2, 2] = False
    assert not bool(heat[0][rest].any())


def test_colour_map_runs_from_black_to_yellow_getting_brighter():
    values = torch.linspace(0, 1, 101, dtype=torch.float64)
    colours = colour_map(values)
    assert colours[0].tolist() == [0.0, 0.0, 0.0]
    assert torch.allclose(colours[-1], torch.tensor(HEATMAP_ANCHORS[-1][1], dtype=torch.float32))
    luminance = colours @ torch.tensor([0.2126, 0.7152, 0.0722])
    assert bool((luminance[1:] > luminance[:-1]).all())
    assert not bool((colours == torch.tensor(OUTLINE_COLOUR)).all(dim=-1).any())


def test_importing_the_module_does_not_import_torch():
    code = "import sys, fillscope.compare.metrics; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
