"""Removal (fillscope/compositing/removal.py and prepare_image_and_mask's masked_fill): the object under the mask is
hidden from the model's view only; 'none' is exactly the preparation without the keyword."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fillscope.compositing.removal import MASKED_FILLS, neutralise_masked, push_pull
from fillscope.errors import FillScopeInputError
from fillscope.masks import prepare_image_and_mask, synthetic_image_and_mask


def scene(width=200, height=150):
    """The synthetic gradient with a saturated red object under the mask's centre."""
    img, mask = synthetic_image_and_mask(width, height, 0.4)
    img = img.clone()
    img[:, 60:90, 80:120] = torch.tensor([1.0, 0.0, 0.0])
    return img, mask


def _same(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("options", [{}, {"size_mode": "crop"}, {"threshold": 0.0, "grow": 3, "feather": 4},
                                     {"invert": True}])
def test_none_is_exactly_the_preparation_without_the_keyword(options):
    img, mask = scene(203, 151)  # not multiples of 16: pad / crop paths
    _same(prepare_image_and_mask(img, mask, **options), prepare_image_and_mask(img, mask, masked_fill="none", **options))


@pytest.mark.parametrize("mode", ["blur", "mean", "edge"])
@pytest.mark.parametrize("size_mode", ["pad", "crop"])
def test_fills_change_only_the_masked_pixels_of_the_models_view(mode, size_mode):
    img, mask = scene(203, 151)
    ref = prepare_image_and_mask(img, mask, size_mode=size_mode)
    out = prepare_image_and_mask(img, mask, size_mode=size_mode, masked_fill=mode)
    assert torch.equal(out.source, ref.source) and torch.equal(out.paste_mask, ref.paste_mask)
    assert torch.equal(out.mask, ref.mask)
    masked = (ref.mask > 0).expand_as(ref.image)
    assert torch.equal(out.image[~masked], ref.image[~masked])
    assert not torch.equal(out.image[masked], ref.image[masked])
    assert float(out.image.min()) >= -1 and float(out.image.max()) <= 1
    # the red object is gone from the model's view: the masked area's red is the surroundings', not 1
    top, left = out.geometry.top, out.geometry.left
    obj = out.image[:, 0, 60 - top : 90 - top, 80 - left : 120 - left]
    assert float(obj.max()) < 0.9  # [-1,1]: the object was +1 in red
    assert any(n.startswith(f"masked_fill {mode}:") for n in out.notes)
    assert len(out.notes) == len(ref.notes) + 1 and out.warnings == ref.warnings


def test_mean_is_the_kept_pixels_mean_and_edge_continues_the_border():
    x = torch.zeros(1, 3, 32, 32)
    x[:, :, :, :16] = -0.5  # left half dark, right half light
    x[:, :, :, 16:] = 0.5
    m = torch.zeros(1, 1, 32, 32)
    m[:, :, 8:24, 8:24] = 1
    mean = neutralise_masked(x, m, "mean")
    assert torch.allclose(mean[:, :, 8:24, 8:24], torch.full((1, 3, 16, 16), 0.0), atol=1e-6)
    edge = neutralise_masked(x, m, "edge")
    assert float(edge[0, 0, 16, 8]) < -0.2 and float(edge[0, 0, 16, 23]) > 0.2  # each side keeps its colour
    blur = neutralise_masked(x, m, "blur")
    assert float(blur[0, 0, 16, 8]) < float(blur[0, 0, 16, 23])
    for out in (mean, edge, blur):
        assert torch.equal(out[m.expand_as(x) == 0], x[m.expand_as(x) == 0])


def test_full_mask_has_nothing_to_fill_from_and_bad_modes_are_refused():
    x = torch.rand(1, 3, 16, 16)
    assert torch.equal(neutralise_masked(x, torch.ones(1, 1, 16, 16), "edge"), x)
    assert torch.equal(neutralise_masked(x, torch.zeros(1, 1, 16, 16), "mean"), x)
    with pytest.raises(FillScopeInputError, match="masked_fill"):
        neutralise_masked(x, torch.ones(1, 1, 16, 16), "inpaint")
    img, mask = scene()
    with pytest.raises(FillScopeInputError, match="masked_fill"):
        prepare_image_and_mask(img, mask, masked_fill="magic")
    assert set(MASKED_FILLS) == {"none", "blur", "mean", "edge"}


def test_empty_mask_records_no_fill():
    img, _ = scene()
    out = prepare_image_and_mask(img, torch.zeros(1, 150, 200), masked_fill="edge")
    assert not any(n.startswith("masked_fill") for n in out.notes)


def test_push_pull_keeps_known_values_and_fills_unknown_ones():
    v = torch.rand(2, 3, 33, 17)
    w = (torch.rand(2, 1, 33, 17) > 0.7).float()
    out = push_pull(v, w)
    known = (w > 0).expand_as(v)
    assert torch.allclose(out[known], v[known])
    assert bool(torch.isfinite(out).all()) and float(out.min()) >= 0 and float(out.max()) <= 1
