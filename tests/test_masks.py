"""Mask and image preparation: explicit options, sizes, bad input, and exact paste-back."""

from __future__ import annotations

import pytest
import torch

from fillscope.errors import FillScopeInputError
from fillscope.masks import as_paste_mask, feather_inward, paste_back, prepare_image_and_mask, restore_geometry


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


def test_paste_back_with_a_wired_mask_uses_it_instead_of_the_samplers():
    """Paste Back's optional MASK (as ImageCompositeMasked): 1 = generated, soft values blend, 0 = the source exactly,
    also where the sampler's mask would have taken the generated pixel."""
    image = torch.rand(1, 40, 48, 3)
    p = prepare_image_and_mask(image, rect_mask(40, 48, 5, 5, 30, 38))  # the sampler repainted a large area
    generated = torch.rand(1, 40, 48, 3)
    wired = rect_mask(40, 48, 15, 15, 10, 10)
    wired[0, 15, 15] = 0.25  # a soft pixel
    paste = as_paste_mask(wired, p.source)
    assert paste.shape == (1, 40, 48, 1)
    out = paste_back(generated, p.source, paste)
    outside = (wired == 0)[..., None].expand_as(out)
    assert torch.equal(out[outside], image[outside])  # bit-identical, inside the sampler's mask too
    assert torch.equal(out[0, 20, 20], generated[0, 20, 20])
    assert torch.allclose(out[0, 15, 15], 0.75 * image[0, 15, 15] + 0.25 * generated[0, 15, 15])
    assert int((paste == 0).sum()) == 40 * 48 - 100  # kept pixels (the soft one blends, so it is not kept)


def test_paste_back_mask_of_another_size_or_with_nan_is_a_clear_error():
    source = torch.rand(1, 40, 48, 3)
    with pytest.raises(FillScopeInputError) as e:
        as_paste_mask(torch.ones(1, 64, 64), source)
    msg = str(e.value)
    assert "input 'mask'" in msg and "64x64" in msg and "48x40" in msg and "Fix:" in msg
    bad = torch.zeros(1, 40, 48)
    bad[0, 3, 4] = float("nan")
    with pytest.raises(FillScopeInputError) as e:
        as_paste_mask(bad, source)
    assert "input 'mask'" in str(e.value) and "NaN" in str(e.value) and "Fix:" in str(e.value)
    with pytest.raises(FillScopeInputError, match="batch of 2 masks for 1 images"):
        as_paste_mask(torch.zeros(2, 40, 48), source)
