"""fillscope/resample.py against Pillow's own resize on float images (mode "F", one image per channel), against
F.interpolate(mode="area") and an exact area integral, and its input checks.

Measured when written (Pillow 13.0.0, torch 2.14.1, CPU): lanczos / bicubic / bilinear differ from PIL's
LANCZOS / BICUBIC / BILINEAR by at most 2.4e-7 (float32 rounding: PIL sums in float64 and stores each pass in
float32, resize matmuls in float32) for every case below; area equals PIL BOX for integer factors and upscales by 2
(<= 6e-8); NEAREST equals PIL's except at exact ties (see test_nearest_matches_pil_except_exact_ties).
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from fillscope.errors import FillScopeInputError
from fillscope.resample import FILTERS, band_weights, nearest_index, resize, weight_matrix

PIL_FILTERS = {"lanczos": Image.Resampling.LANCZOS, "bicubic": Image.Resampling.BICUBIC,
               "bilinear": Image.Resampling.BILINEAR, "area": Image.Resampling.BOX,
               "nearest": Image.Resampling.NEAREST}
PIL_TOLERANCE = 2e-6  # measured max 2.4e-7 (float32 rounding of ~25-tap sums); 8x margin for other BLAS builds

# (in h, in w) -> (out h, out w): down by 4, down by a non-integer factor (1000 -> 333: 14 blocks of 24 rows),
# up by 2, up by non-integer factors, one axis only, tiny sizes (kernel wider than the image)
CASES = [((64, 96), (16, 24)), ((1000, 120), (333, 37)), ((40, 60), (80, 120)), ((30, 50), (77, 131)),
         ((64, 96), (64, 40)), ((7, 3), (1, 5)), ((1, 4), (3, 1))]
# where PIL's BOX (whole pixels by their centres) is the exact box: integer downscales, upscales by 2
INTEGER_OR_UP_CASES = [((64, 96), (16, 24)), ((40, 60), (80, 120)), ((64, 96), (64, 32)), ((45, 7), (15, 14))]


def _image(h, w, seed=0, channels=3):
    return torch.rand(1, channels, h, w, generator=torch.Generator().manual_seed(seed))


def _pil_resize(x, height, width, filter):
    """[1,C,h,w] float32 -> [1,C,height,width] through PIL mode "F", one channel at a time."""
    channels = []
    for channel in x[0]:
        image = Image.fromarray(channel.numpy().astype(np.float32), mode="F")
        channels.append(torch.from_numpy(np.array(image.resize((width, height), PIL_FILTERS[filter]))))
    return torch.stack(channels)[None]


def test_pil_float_mode_resizes_with_every_filter():
    """The reference itself: PIL's "F" mode takes each of the five filters (no 8-bit fallback needed)."""
    image = Image.fromarray(np.linspace(0, 1, 48, dtype=np.float32).reshape(6, 8), mode="F")
    for filter, resample in PIL_FILTERS.items():
        out = image.resize((3, 5), resample)
        assert out.mode == "F" and out.size == (3, 5), filter


@pytest.mark.parametrize("filter", ["lanczos", "bicubic", "bilinear"])
@pytest.mark.parametrize("sizes", CASES, ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in CASES])
def test_kernels_match_pil(filter, sizes):
    (h, w), (oh, ow) = sizes
    x = _image(h, w)
    ours, theirs = resize(x, oh, ow, filter), _pil_resize(x, oh, ow, filter)
    assert ours.shape == (1, 3, oh, ow)
    assert float((ours - theirs).abs().max()) < PIL_TOLERANCE


@pytest.mark.parametrize("sizes", INTEGER_OR_UP_CASES, ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in INTEGER_OR_UP_CASES])
def test_area_matches_pil_box_for_integer_factors(sizes):
    (h, w), (oh, ow) = sizes
    x = _image(h, w, seed=1)
    assert float((resize(x, oh, ow, "area") - _pil_resize(x, oh, ow, "area")).abs().max()) < PIL_TOLERANCE


def test_area_integer_downscale_equals_interpolate_area():
    x = _image(96, 120, seed=2)
    ours, torch_area = resize(x, 24, 40, "area"), F.interpolate(x, size=(24, 40), mode="area")
    assert float((ours - torch_area).abs().max()) < 1e-6  # measured <= 6e-8


def _exact_area_1d(values, out_size):
    """float64 reference along the last axis: output j = mean of the piecewise-constant source over
    [j * in / out, (j + 1) * in / out], from its running integral."""
    in_size = values.shape[-1]
    integral = np.concatenate([np.zeros(values.shape[:-1] + (1,)), np.cumsum(values, axis=-1)], axis=-1)

    def at(t):  # integral of the source from 0 to t
        whole = min(int(math.floor(t)), in_size - 1)
        return integral[..., whole] + (t - whole) * values[..., whole]

    scale = in_size / out_size
    return np.stack([(at((j + 1) * scale) - at(j * scale)) / scale for j in range(out_size)], axis=-1)


@pytest.mark.parametrize("sizes", [((1000, 120), (333, 37)), ((30, 50), (77, 131)), ((45, 64), (20, 27))])
def test_area_weights_partial_pixels_exactly(sizes):
    """Non-integer factors: the exact box average (partly covered pixels weighted by the part), not PIL's BOX."""
    (h, w), (oh, ow) = sizes
    x = _image(h, w, seed=3)
    reference = _exact_area_1d(_exact_area_1d(x.double().numpy(), ow).swapaxes(-1, -2), oh).swapaxes(-1, -2)
    ours = resize(x, oh, ow, "area")
    assert float((ours.double() - torch.from_numpy(reference)).abs().max()) < 1e-6  # measured ~1e-7
    # ... which is why PIL's BOX is no reference here: it counts whole pixels by their centres
    assert float((_pil_resize(x, oh, ow, "area") - ours).abs().max()) > 1e-2


def test_nearest_matches_pil_except_exact_ties():
    """Both take source pixel floor((j + 0.5) * in / out). Where that position is exactly an integer (a pixel
    boundary: (2j + 1) * in divisible by 2 * out) PIL's floating-point position may land just below it and take the
    pixel below (measured over 3000 random size pairs up to 5000: 994 pairs have a tie; of the tie columns PIL took
    the pixel below at 1558, the same at 4903; every non-tie column equal); resize takes the exact floor.
    F.interpolate("nearest-exact") computes the scale in float32 and is a pixel off at some non-tie columns
    (2705 -> 3868), which is why resize computes the index in integers."""
    lower_ties = 0
    for in_size, out_size in [(120, 37), (1000, 333), (30, 77), (64, 16), (40, 80), (2705, 3868), (1, 5), (5, 1)]:
        ramp = np.arange(in_size, dtype=np.float32)[None, :]
        pil = np.array(Image.fromarray(ramp, mode="F").resize((out_size, 1), Image.Resampling.NEAREST))[0]
        ours = resize(torch.from_numpy(ramp)[None, None], 1, out_size, "nearest")[0, 0, 0].numpy()
        assert np.array_equal(ours, nearest_index(in_size, out_size).numpy())
        j = np.arange(out_size)
        tie = ((2 * j + 1) * in_size) % (2 * out_size) == 0
        assert np.array_equal(ours[~tie], pil[~tie]), (in_size, out_size)
        assert set((ours[tie] - pil[tie]).tolist()) <= {0.0, 1.0}, (in_size, out_size)
        lower_ties += int((ours[tie] - pil[tie] == 1).sum())
    assert lower_ties >= 1  # 120 -> 37 at j = 18 (18.5 * 120 / 37 = 60 exactly): PIL takes 59
    # 2705 -> 3868, j = 3347: (j + 0.5) * 2705 / 3868 = 2340.99987..., in float32 2341.0: F.interpolate takes 2341
    ramp = np.arange(2705, dtype=np.float32)[None, :]
    ours = resize(torch.from_numpy(ramp)[None, None], 1, 3868, "nearest")[0, 0, 0]
    torch_exact = F.interpolate(torch.from_numpy(ramp)[None, None], size=(1, 3868), mode="nearest-exact")[0, 0, 0]
    pil = np.array(Image.fromarray(ramp, mode="F").resize((3868, 1), Image.Resampling.NEAREST))[0]
    assert float(ours[3347]) == 2340 == float(pil[3347]) and float(torch_exact[3347]) == 2341


def test_nearest_2d_matches_pil_without_ties():
    x = _image(64, 96, seed=4)  # 64 -> 16, 96 -> 24 and 40 -> 80, 60 -> 120 have no ties
    assert torch.equal(resize(x, 16, 24, "nearest"), _pil_resize(x, 16, 24, "nearest"))
    y = _image(40, 60, seed=5)
    assert torch.equal(resize(y, 80, 120, "nearest"), _pil_resize(y, 80, 120, "nearest"))


@pytest.mark.parametrize("filter", ["lanczos", "bicubic", "bilinear", "area"])
def test_rows_sum_to_one_and_constants_stay_constant(filter):
    for in_size, out_size in [(4096, 1024), (1000, 333), (7, 1), (1, 9), (37, 120), (3, 2)]:
        rows = weight_matrix(in_size, out_size, filter).sum(dim=1)
        assert float((rows - 1).abs().max()) < 1e-12, (filter, in_size, out_size)
    constant = torch.full((2, 3, 50, 70), 0.37)
    for oh, ow in [(13, 29), (111, 150), (50, 9)]:
        assert float((resize(constant, oh, ow, filter) - 0.37).abs().max()) < 1e-6


@pytest.mark.parametrize("filter", ["lanczos", "bicubic", "bilinear", "area"])
def test_banded_blocks_equal_the_dense_matrices(filter):
    """The block-by-block band (several blocks of 64 rows per axis) against the whole [out, in] matrices, float64."""
    x = _image(300, 210, seed=6).double()
    for oh, ow in [(130, 77), (700, 451)]:
        dense = torch.einsum("oh,nchw,pw->ncop", weight_matrix(300, oh, filter), x, weight_matrix(210, ow, filter))
        assert float((resize(x, oh, ow, filter) - dense).abs().max()) < 1e-12


def test_band_covers_the_whole_kernel_support():
    """No weight is lost to the band's window: the band and the full kernel over every pixel agree."""
    first, weights = band_weights(1000, 333, "lanczos")
    assert weights.shape[1] >= 2 * 3 * 1000 / 333  # the stretched lanczos spans 6 * scale source pixels
    assert int(first.min()) >= 0 and int(first.max()) + weights.shape[1] <= 1000


def test_same_size_returns_the_input_and_dtype_device_are_kept():
    x = _image(20, 30)
    for filter in FILTERS:
        assert resize(x, 20, 30, filter) is x
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        for filter in FILTERS:
            out = resize(x.to(dtype), 9, 41, filter)
            assert out.dtype == dtype and out.device == x.device and out.shape == (1, 3, 9, 41)
    batch = torch.cat([_image(20, 30, seed=s, channels=2) for s in range(3)])  # N=3, C=2: each image on its own
    out = resize(batch, 11, 17, "lanczos")
    for i in range(3):
        assert torch.allclose(out[i:i + 1], resize(batch[i:i + 1], 11, 17, "lanczos"), atol=1e-6)


def test_lanczos_and_bicubic_overshoot_and_resize_does_not_clamp():
    step = torch.zeros(1, 1, 8, 64)
    step[..., 32:] = 1.0
    for filter in ("lanczos", "bicubic"):
        for size in (24, 160):  # down and up
            out = resize(step, 8, size, filter)
            assert float(out.min()) < -1e-3 and float(out.max()) > 1 + 1e-3, filter
    for filter in ("bilinear", "area", "nearest"):  # positive kernels stay inside the input's range
        out = resize(step, 8, 24, filter)
        assert float(out.min()) >= 0 and float(out.max()) <= 1 + 1e-6


def test_unknown_filter_names_the_input():
    x = _image(8, 8)
    with pytest.raises(FillScopeInputError) as caught:
        resize(x, 4, 4, "lanczos4")
    error = caught.value
    assert error.input_name == "filter" and "'lanczos4'" in error.problem
    assert all(name in error.problem for name in FILTERS) and error.fix.startswith("choose one of")
    with pytest.raises(FillScopeInputError) as caught:
        resize(x, 4, 4, None, name="resample_filter")
    assert caught.value.input_name == "resample_filter"


@pytest.mark.parametrize("height,width,bad", [(0, 4, "height"), (4, -1, "width"), (2.5, 4, "height"),
                                              (4, True, "width"), ("4", 4, "height")])
def test_bad_sizes_name_the_input(height, width, bad):
    with pytest.raises(FillScopeInputError) as caught:
        resize(_image(8, 8), height, width, "bilinear")
    assert caught.value.input_name == bad and repr(height if bad == "height" else width) in caught.value.problem


def test_filters_are_the_combo_order():
    assert FILTERS == ("lanczos", "bicubic", "bilinear", "area", "nearest")
