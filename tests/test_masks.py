"""Mask and image preparation: explicit options, sizes, bad input, and exact paste-back."""

from __future__ import annotations

import pytest
import torch

from fillscope.errors import FillScopeInputError
from fillscope.masks import as_paste_mask, paste_back, prepare_image_and_mask, restore_geometry
from fillscope.pixels import feather_inward


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


# ---- crop mode: what reaches the model, what is kept (issue 10) ------------------------------------------------


def test_crop_with_a_mask_on_the_cropped_off_border_warns_with_the_count_and_keeps_those_pixels():
    """50x40 -> a 48x32 crop at (top 4, left 1): a full mask repaints only the crop; the 464 border pixels stay
    source pixels, and the paste mask, the counts and the warnings all say so."""
    image = torch.rand(1, 40, 50, 3)
    p = prepare_image_and_mask(image, torch.ones(1, 40, 50), size_mode="crop", feather=3)
    border = 40 * 50 - 32 * 48
    assert border == 464
    assert p.warnings[0] == (
        "mask reaches the border size_mode crop cuts off (4 px top, 4 px bottom, 1 px left, 1 px right): 464 repaint "
        "pixels fall outside the 48x32 crop and stay source pixels; set size_mode to pad to repaint them")
    assert p.kept_pixels == border and p.repaint_pixels == 32 * 48
    assert int((p.paste_mask == 0).sum()) == border  # Paste Back's "kept pixels" fact counts this
    assert p.coverage == pytest.approx(32 * 48 / (40 * 50))
    assert not any("nothing is kept from the source" in w for w in p.warnings)  # the border is kept
    assert any(w.startswith("mask covers the whole 48x32 crop") and "464 pixels" in w for w in p.warnings)
    assert "repaints 1,536 px and keeps 464 px as exact source values" in p.notes
    # what actually happens: the border comes back bit-identical, the crop is the model's
    generated = restore_geometry(torch.rand(1, 32, 48, 3), p.geometry, p.source)
    out = paste_back(generated, p.source, p.paste_mask)
    same = (out == image).all(dim=-1)
    assert int(same.sum()) == border
    assert torch.equal(out[:, 4:36, 1:49], generated[:, 4:36, 1:49])


def test_crop_with_the_mask_only_on_the_border_repaints_nothing_and_says_why():
    m = torch.zeros(1, 40, 50)
    m[:, :3, :] = 1.0  # the top 3 rows: all cut off by the crop (top 4)
    p = prepare_image_and_mask(torch.rand(1, 40, 50, 3), m, size_mode="crop")
    assert p.coverage == 0.0 and p.repaint_pixels == 0 and p.kept_pixels == 40 * 50
    assert "150 repaint pixels fall outside the 48x32 crop" in p.warnings[0]
    assert p.warnings[1] == ("nothing to repaint inside the 48x32 crop (the mask lies in the cropped-off border): the "
                             "source image is returned unchanged")
    assert float(p.paste_mask.abs().sum()) == 0.0


def test_crop_with_the_mask_inside_the_crop_has_no_warning_and_true_counts():
    p = prepare_image_and_mask(torch.rand(1, 40, 50, 3), rect_mask(40, 50, 10, 10, 8, 8), size_mode="crop")
    assert p.warnings == []
    assert (p.repaint_pixels, p.kept_pixels) == (64, 40 * 50 - 64)
    assert float(p.mask.sum()) == 64


def test_a_full_mask_in_pad_mode_keeps_nothing_and_says_so():
    """The padding is not the user's image: a full mask on 50x40 keeps nothing, though the 64x48 grid is not full."""
    p = prepare_image_and_mask(torch.rand(1, 40, 50, 3), torch.ones(1, 40, 50), size_mode="pad")
    assert p.coverage == 1.0 and p.kept_pixels == 0
    assert any("nothing is kept from the source" in w for w in p.warnings)


def test_counts_are_over_the_batch():
    p = prepare_image_and_mask(torch.rand(2, 32, 32, 3), rect_mask(32, 32, 0, 0, 4, 4))
    assert (p.repaint_pixels, p.kept_pixels) == (32, 2 * 32 * 32 - 32)
    assert "repaints 32 px and keeps 2,016 px as exact source values (over the batch of 2)" in p.notes
