"""Mask and image preparation: explicit options, sizes, bad input, and exact paste-back."""

from __future__ import annotations

import pytest
import torch

from fillscope.errors import FillScopeInputError
from fillscope.masks import feather_inward, paste_back, prepare_image_and_mask, restore_geometry


def rect_mask(h, w, top, left, mh, mw):
    m = torch.zeros(1, h, w)
    m[:, top : top + mh, left : left + mw] = 1.0
    return m


def test_rgba_image_drops_alpha_and_says_so():
    image = torch.rand(1, 32, 48, 4)
    p = prepare_image_and_mask(image, rect_mask(32, 48, 8, 8, 8, 8))
    assert p.image.shape == (1, 3, 32, 48)
    assert any("alpha dropped" in n for n in p.notes)
    assert torch.equal(p.source, image[..., :3])


def test_mask_size_mismatch_names_the_input_and_the_fix():
    with pytest.raises(FillScopeInputError) as e:
        prepare_image_and_mask(torch.rand(1, 80, 96, 3), torch.zeros(1, 64, 64))
    msg = str(e.value)
    assert "'mask'" in msg and "64x64" in msg and "96x80" in msg and "Fix:" in msg


def test_odd_size_is_padded_to_16_and_restored():
    image = torch.rand(1, 777, 1023, 3)
    p = prepare_image_and_mask(image, rect_mask(777, 1023, 100, 100, 200, 200), size_mode="pad")
    assert p.image.shape == (1, 3, 784, 1024)
    assert p.geometry.mode == "pad"
    assert any("padded" in n and "1023x777" in n for n in p.notes)
    assert float(p.mask[:, :, 777:, :].sum()) == 0.0  # padding is never repainted
    back = restore_geometry(torch.zeros(1, 784, 1024, 3), p.geometry, p.source)
    assert back.shape == (1, 777, 1023, 3)


def test_odd_size_can_be_center_cropped_and_pasted_back():
    image = torch.rand(1, 777, 1023, 3)
    p = prepare_image_and_mask(image, rect_mask(777, 1023, 100, 100, 200, 200), size_mode="crop")
    assert p.image.shape == (1, 3, 768, 1008)
    back = restore_geometry(torch.zeros(1, 768, 1008, 3), p.geometry, p.source)
    assert back.shape == (1, 777, 1023, 3)
    top, left = p.geometry.top, p.geometry.left
    assert torch.equal(back[:, :top], image[:, :top])  # outside the crop: the source
    assert float(back[:, top : top + 768, left : left + 1008].abs().sum()) == 0.0


def test_binarise_invert_and_grow_are_explicit():
    m = rect_mask(32, 32, 10, 10, 4, 4) * 0.6
    p = prepare_image_and_mask(torch.rand(1, 32, 32, 3), m, threshold=0.5)
    assert set(p.mask.unique().tolist()) == {0.0, 1.0}
    assert float(p.mask.sum()) == 16
    grown = prepare_image_and_mask(torch.rand(1, 32, 32, 3), m, grow=2)
    assert float(grown.mask.sum()) == 64
    inv = prepare_image_and_mask(torch.rand(1, 32, 32, 3), m, invert=True)
    assert float(inv.mask.sum()) == 32 * 32 - 16
    soft = prepare_image_and_mask(torch.rand(1, 32, 32, 3), m, threshold=0.0)
    assert torch.allclose(soft.mask.max(), torch.tensor(0.6))


def test_empty_and_full_masks_warn():
    e = prepare_image_and_mask(torch.rand(1, 32, 32, 3), torch.zeros(1, 32, 32))
    assert e.coverage == 0.0 and any("empty" in w for w in e.warnings)
    f = prepare_image_and_mask(torch.rand(1, 32, 32, 3), torch.ones(1, 32, 32))
    assert f.coverage == 1.0 and any("whole image" in w for w in f.warnings)


def test_feather_ramps_inward_only():
    m = rect_mask(40, 40, 10, 10, 20, 20)[:, None]
    soft = feather_inward(m, 4)
    assert float(soft[m == 0].abs().sum()) == 0.0
    assert float(soft[0, 0, 20, 20]) == 1.0  # deep inside
    assert 0.0 < float(soft[0, 0, 10, 20]) < 1.0  # on the border


def test_paste_back_keeps_unmasked_pixels_bit_identical():
    image = torch.rand(1, 40, 40, 3)
    p = prepare_image_and_mask(image, rect_mask(40, 40, 10, 10, 20, 20), feather=5)
    generated = torch.rand(1, 40, 40, 3)
    out = paste_back(generated, p.source, p.paste_mask)
    keep = (p.paste_mask == 0).expand_as(out)
    assert torch.equal(out[keep], image[keep])
    assert torch.equal(out[0, 20, 20], generated[0, 20, 20])
