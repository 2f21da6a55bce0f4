"""Outpaint padding (fillscope/compositing/outpaint.py): sizes, exact original pixels, the mask, each fill."""

from __future__ import annotations

import pytest
import torch

from fillscope.compositing.outpaint import FILLS, pad_for_outpaint, parse_hex_colour
from fillscope.errors import FillScopeInputError


def image(h=120, w=160, batch=1):
    g = torch.Generator().manual_seed(0)
    return torch.rand(batch, h, w, 3, generator=g)


@pytest.mark.parametrize("fill", FILLS)
def test_256_px_a_side_keeps_the_original_and_masks_the_new_area(fill):
    img = image()
    out = pad_for_outpaint(img, left=256, top=256, right=256, bottom=256, fill=fill, colour=(0.2, 0.4, 0.6))
    assert out.image.shape == (1, 120 + 512, 160 + 512, 3)
    assert out.mask.shape == (1, 120 + 512, 160 + 512)
    assert torch.equal(out.image[:, 256:376, 256:416], img)  # exact copies
    original = torch.zeros_like(out.mask, dtype=torch.bool)
    original[:, 256:376, 256:416] = True
    assert bool((out.mask[original] == 0).all()) and bool((out.mask[~original] == 1).all())
    assert float(out.image.min()) >= 0 and float(out.image.max()) <= 1
    assert "-> 672x632" in out.description and "size_mode" in out.description


def test_each_fill_fills_the_new_area_as_it_says():
    img = image()
    edge = pad_for_outpaint(img, left=8, right=4, fill="edge").image
    assert torch.equal(edge[:, :, 0], img[:, :, 0]) and torch.equal(edge[:, :, -1], img[:, :, -1])
    mirror = pad_for_outpaint(img, left=8, top=3, fill="mirror").image
    assert torch.equal(mirror[:, 3:, 7], img[:, :, 1])  # the first column reflected (not repeated)
    assert torch.equal(mirror[:, 2, 8:], img[:, 1])
    colour = pad_for_outpaint(img, bottom=16, fill="colour", colour=(0.2, 0.4, 0.6)).image
    assert torch.allclose(colour[:, 120:], torch.tensor([0.2, 0.4, 0.6]).expand(1, 16, 160, 3))


def test_mirror_wider_than_the_image_reflects_in_rounds():
    img = image(10, 12)
    out = pad_for_outpaint(img, left=40, right=30, top=25, bottom=0, fill="mirror")
    assert out.image.shape == (1, 35, 82, 3)
    assert torch.equal(out.image[:, 25:, 40:52], img)
    # every new pixel is a pixel of the image (a reflection of a reflection)
    colours = {tuple(p.tolist()) for p in img.reshape(-1, 3)}
    assert all(tuple(p.tolist()) in colours for p in out.image.reshape(-1, 3)[::97])


def test_feather_reaches_into_the_original_with_soft_values_only():
    img = image()
    out = pad_for_outpaint(img, right=64, feather=8)
    assert torch.equal(out.image[:, :, :160], img)
    band = out.mask[0, :, 152:160]
    assert bool((band > 0).all()) and bool((band < 1).all())
    assert band[0].tolist() == pytest.approx([k / 9 for k in range(1, 9)])  # rising towards the seam
    assert bool((out.mask[0, :, :152] == 0).all()) and bool((out.mask[0, :, 160:] == 1).all())
    # only the padded sides feather
    both = pad_for_outpaint(img, left=16, top=16, feather=4).mask[0]
    assert float(both[16, 16]) == pytest.approx(4 / 5)  # the corner: the larger of the two sides
    assert bool((both[24:, -4:] == 0).all())


def test_batch_and_rgba_and_no_padding():
    img = torch.cat([image(), image()])
    out = pad_for_outpaint(img, top=32)
    assert out.image.shape == (2, 152, 160, 3) and out.mask.shape == (2, 152, 160)
    rgba = torch.cat([image(), torch.ones(1, 120, 160, 1)], dim=-1)
    out = pad_for_outpaint(rgba, left=16)
    assert out.image.shape[-1] == 3 and "alpha dropped" in out.description
    same = pad_for_outpaint(image())
    assert torch.equal(same.image, image()) and float(same.mask.sum()) == 0 and "nothing added" in same.description


def test_bad_inputs_name_the_input():
    with pytest.raises(FillScopeInputError, match="'fill'"):
        pad_for_outpaint(image(), left=8, fill="noise")
    with pytest.raises(FillScopeInputError, match="'left'"):
        pad_for_outpaint(image(), left=-8)
    with pytest.raises(FillScopeInputError, match="'colour'"):
        pad_for_outpaint(image(), left=8, fill="colour", colour=(1.5, 0, 0))
    assert parse_hex_colour("#808080") == pytest.approx((128 / 255,) * 3)
    assert parse_hex_colour("f00") == (1.0, 0.0, 0.0)
    for bad in ("grey", "#12345", "#gg0000", ""):
        with pytest.raises(FillScopeInputError, match="'colour'"):
            parse_hex_colour(bad)
