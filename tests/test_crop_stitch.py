"""Crop and stitch (fillscope/compositing/crop.py, regions.py): the model runs on a box around the mask at its native
size; stitching puts the result back with every pixel outside the mask bit-identical, at any photo size."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fillscope.compositing.crop import crop_for_inpaint, crop_size, fit_box, stitch
from fillscope.compositing.regions import label_components, split_regions
from fillscope.errors import FillScopeInputError
from fillscope.masks import synthetic_image_and_mask

H, W = 3072, 4096


@pytest.fixture(scope="module")
def photo():
    g = torch.Generator().manual_seed(0)
    return torch.rand(1, H, W, 3, generator=g)


def rect_mask(*boxes, height=H, width=W, batch=1):
    m = torch.zeros(batch, height, width)
    for top, left, h, w in boxes:
        m[:, top : top + h, left : left + w] = 1.0
    return m


def assert_kept(result, source, mask):
    """Every pixel where `mask` [B,H,W] is 0 is bit-identical in `result` and `source` [B,H,W,3] (compared as the
    float32 bit patterns; a boolean-indexed torch.equal would copy the 4096x3072 photo twice)."""
    same = result.contiguous().view(torch.int32) == source.contiguous().view(torch.int32)
    assert bool((same | (mask != 0)[..., None]).all())


def test_a_small_mask_on_a_4096x3072_photo_is_sampled_at_the_target_size_and_stitched_exactly(photo):
    mask = rect_mask((1000, 2000, 300, 400))  # 4:3 -> a 600x450 context box (factor 1.5, no padding)
    out = crop_for_inpaint(photo, mask, context_factor=1.5, padding=0, target_long_side=1024)
    assert out.image.shape == (1, 768, 1024, 3) and out.mask.shape == (1, 768, 1024)
    (crop,) = out.record.crops
    assert (crop.top, crop.left, crop.height, crop.width) == (925, 1900, 450, 600)
    assert crop.scale_x == crop.scale_y == 1024 / 600
    assert out.record.describe() == "4096x3072 photo -> 1024x768 crop, scale 1.707"
    assert any("upscaled" in n and "native size" in n for n in out.notes)

    generated = torch.rand(1, 768, 1024, 3, generator=torch.Generator().manual_seed(1))
    result = stitch(generated, out.record, feather=8)
    assert result.image.shape == (1, H, W, 3)
    keep = mask == 0
    assert_kept(result.image, photo, ~keep)  # bit-identical outside the mask
    assert not torch.equal(result.image[~keep], photo[~keep])
    assert result.kept_pixels == int(keep.sum())
    assert result.info["kept pixels (exact source values)"] == f"{int(keep.sum()):,}"
    assert result.crops[0]["scale_x"] == 1024 / 600


def test_a_mask_whose_box_exceeds_the_photo_takes_the_whole_photo_at_scale_a_quarter(photo):
    out = crop_for_inpaint(photo, rect_mask((200, 300, 2700, 3600)), target_long_side=1024)
    (crop,) = out.record.crops
    assert (crop.top, crop.left, crop.height, crop.width) == (0, 0, H, W)
    assert out.image.shape == (1, 768, 1024, 3)
    assert out.record.describe() == "4096x3072 photo -> 1024x768 crop, scale 0.25"


def test_crop_sides_are_multiples_of_16_and_the_scale_is_the_same_on_both_axes(photo):
    for box in [(10, 10, 37, 91), (500, 700, 211, 97), (1500, 100, 123, 1234), (3000, 4000, 72, 96)]:
        out = crop_for_inpaint(photo, rect_mask(box), target_long_side=512)
        n, h, w, _ = out.image.shape
        assert max(h, w) == 512 and h % 16 == 0 and w % 16 == 0
        (c,) = out.record.crops
        assert abs(c.scale_x - c.scale_y) < 1e-9, (box, c)
        assert 0 <= c.top and c.top + c.height <= H and 0 <= c.left and c.left + c.width <= W
        top, left, bh, bw = box
        bh, bw = min(bh, H - top), min(bw, W - left)
        assert c.top <= top and c.top + c.height >= top + bh and c.left <= left and c.left + c.width >= left + bw


def test_identity_round_trip_changes_pixels_only_inside_the_mask_by_resampling_error():
    image, _ = synthetic_image_and_mask(1600, 1200)  # a smooth gradient: resampling error is small
    mask = rect_mask((500, 700, 120, 160), height=1200, width=1600)
    for target in (256, 1024):  # downscaled and upscaled boxes
        out = crop_for_inpaint(image, mask, target_long_side=target)
        result = stitch(out.image, out.record, feather=0)
        keep = mask == 0
        assert_kept(result.image, image, ~keep)
        assert float((result.image - image).abs().max()) < 0.01, target


def test_the_box_is_shifted_inside_the_photo_at_its_borders(photo):
    for box, expect in [((0, 0, 50, 80), (0, 0)), ((H - 40, W - 60, 40, 60), None)]:
        out = crop_for_inpaint(photo, rect_mask(box), padding=64)
        (c,) = out.record.crops
        if expect is not None:
            assert (c.top, c.left) == expect
        else:
            assert (c.top + c.height, c.left + c.width) == (H, W)  # against the bottom-right corner
        assert c.height > box[2] * 1.5 and c.width > box[3] * 1.5  # shifted, not cut: the full context
        result = stitch(torch.zeros_like(out.image), out.record)
        keep = rect_mask(box) == 0
        assert_kept(result.image, photo, ~keep)


def test_fit_box_grows_to_the_crop_aspect_and_takes_the_whole_side_when_too_big():
    # a tall mask in a wide crop: the box widens; wider than the image: the whole width, height lowered to match
    assert fit_box((100, 100, 200, 150), 100, 50, 768, 1024, 3072, 4096)[2:] == (102, 136)
    top, left, h, w = fit_box((0, 0, 90, 10), 120, 20, 768, 1024, 100, 100)
    assert (h, w) == (90, 100) and top == 0  # never lower than the mask
    assert crop_size(450, 600, 1024, 16) == (768, 1024)
    assert crop_size(600, 450, 1024, 16) == (1024, 768)
    assert crop_size(1, 4000, 1024, 16) == (16, 1024)


def test_two_regions_become_two_crops_of_one_size_and_both_are_stitched(photo):
    mask = rect_mask((100, 100, 200, 400), (2000, 3000, 100, 100))
    out = crop_for_inpaint(photo, mask, regions=True, target_long_side=1024)
    assert out.image.shape[0] == 2 and out.mask.shape[0] == 2
    assert out.image.shape[2] == 1024 and out.image.shape[1] % 16 == 0
    a, b = out.record.crops
    assert (a.region, b.region) == (0, 1) and a.image_index == b.image_index == 0
    assert a.mask_pixels == 200 * 400 and b.mask_pixels == 100 * 100
    for c in (a, b):  # both boxes have the crop's aspect: one scale on both axes
        assert abs(c.scale_x - c.scale_y) < 1e-9
    # each crop's mask shows its own region only
    assert float(out.mask[0].max()) == 1.0 and float(out.mask[1].max()) == 1.0
    generated = torch.full_like(out.image, 0.5)
    generated[1] = 0.25
    result = stitch(generated, out.record, feather=0)
    keep = mask == 0
    assert_kept(result.image, photo, ~keep)
    assert torch.allclose(result.image[0, 120:280, 120:480], torch.tensor(0.5), atol=1e-6)
    assert torch.allclose(result.image[0, 2010:2090, 3010:3090], torch.tensor(0.25), atol=1e-6)
    assert "region 1" in out.record.describe()


def test_regions_that_overlap_each_others_box_are_pasted_through_their_own_masks():
    image = torch.rand(1, 400, 400, 3, generator=torch.Generator().manual_seed(3))
    mask = rect_mask((100, 100, 40, 40), (100, 200, 40, 40), height=400, width=400)
    out = crop_for_inpaint(image, mask, regions=True, merge_distance=8, min_area=1, target_long_side=256)
    assert len(out.record.crops) == 2
    generated = torch.stack([torch.full(out.image.shape[1:], 0.2), torch.full(out.image.shape[1:], 0.8)])
    result = stitch(generated, out.record, feather=0)
    assert torch.allclose(result.image[0, 100:140, 100:140], torch.tensor(0.2), atol=1e-6)
    assert torch.allclose(result.image[0, 100:140, 200:240], torch.tensor(0.8), atol=1e-6)
    keep = mask == 0
    assert_kept(result.image, image, ~keep)


def test_split_regions_merges_near_holes_and_drops_specks():
    mask = rect_mask((10, 10, 20, 20), (10, 40, 20, 20), (200, 200, 30, 30), (300, 10, 3, 3), height=400, width=400)
    notes = []
    regions = split_regions(mask[0], min_area=64, merge_distance=32, notes=notes)
    assert [(r.top, r.left, r.height, r.width, r.area) for r in regions] == [(10, 10, 20, 50, 800), (200, 200, 30, 30, 900)]
    assert notes and "1 mask region under min_area 64 px dropped (9 px" in notes[0]
    # the two left squares' nearest pixels (columns 29 and 40) are 11 px apart: merged from merge_distance 11
    apart = split_regions(mask[0], min_area=0, merge_distance=10)
    assert len(apart) == 4
    touching = split_regions(mask[0], min_area=0, merge_distance=11)
    assert len(touching) == 3
    full = regions[0].full_mask(400, 400)
    assert torch.equal(full, rect_mask((10, 10, 20, 20), (10, 40, 20, 20), height=400, width=400)[0])


def test_labelling_without_scipy_gives_the_same_components():
    g = torch.Generator().manual_seed(5)
    binary = (torch.rand(120, 150, generator=g) > 0.7).numpy()
    ours, n_ours = label_components(binary, use_scipy=False)
    if importlib.util.find_spec("scipy") is None:
        pytest.skip("scipy not installed: nothing to compare the fallback with")
    theirs, n_theirs = label_components(binary, use_scipy=True)
    assert n_ours == n_theirs
    pairs = {(int(a), int(b)) for a, b in zip(ours.ravel(), theirs.ravel())}
    assert len(pairs) == n_ours + 1  # one-to-one: the same partition
    assert ((ours == 0) == (theirs == 0)).all()


def test_a_batch_of_two_images_gives_one_crop_each_and_two_stitched_images():
    g = torch.Generator().manual_seed(2)
    images = torch.rand(2, 600, 800, 3, generator=g)
    masks = torch.cat([rect_mask((50, 60, 90, 120), height=600, width=800),
                       rect_mask((400, 500, 150, 200), height=600, width=800)])
    out = crop_for_inpaint(images, masks, target_long_side=256)
    assert out.image.shape[0] == 2 and [c.image_index for c in out.record.crops] == [0, 1]
    result = stitch(torch.rand(out.image.shape, generator=g), out.record)
    assert result.image.shape == (2, 600, 800, 3)
    keep = masks == 0
    assert_kept(result.image, images, ~keep)
    for i in range(2):
        assert not torch.equal(result.image[i][~keep[i]], images[i][~keep[i]])
    # an image of the batch with an empty mask: no crop, it comes back unchanged
    masks[1] = 0
    out = crop_for_inpaint(images, masks, target_long_side=256)
    assert len(out.record.crops) == 1 and any("image 1: nothing to repaint" in n for n in out.notes)
    result = stitch(out.image, out.record)
    assert torch.equal(result.image[1], images[1])


def test_regions_over_a_batch_map_each_crop_to_its_image_and_the_context_mask_to_its_region():
    g = torch.Generator().manual_seed(4)
    images = torch.rand(2, 300, 400, 3, generator=g)
    masks = torch.cat([rect_mask((20, 20, 30, 30), (200, 300, 40, 40), height=300, width=400),
                       rect_mask((100, 150, 50, 60), height=300, width=400)])
    context = torch.zeros(2, 300, 400)
    context[0, 10:120, 10:150] = 1.0  # around image 0's first hole only
    out = crop_for_inpaint(images, masks, context_mask=context, regions=True, target_long_side=128,
                           context_factor=1.0, padding=0)
    crops = out.record.crops
    assert [(c.image_index, c.region) for c in crops] == [(0, 0), (0, 1), (1, 0)]
    assert crops[0].top <= 10 and crops[0].left <= 10 and crops[0].top + crops[0].height >= 120
    assert crops[1].height < 110  # the context mask does not reach the second hole's box
    result = stitch(torch.rand(out.image.shape, generator=g), out.record)
    assert result.image.shape == (2, 300, 400, 3)
    assert_kept(result.image, images, masks)
    assert "image 1, region 0" in out.record.describe()


def test_the_crop_mask_keeps_0_and_1_exact():
    image, mask = synthetic_image_and_mask(1000, 700, 0.3)
    for target in (128, 2048):
        m = crop_for_inpaint(image, mask, target_long_side=target).mask
        assert float(m.min()) == 0.0 and float(m.max()) == 1.0
        assert int((m == 1).sum()) > 0.5 * int((m > 0).sum())  # the inside is exactly 1; only the edge is between


@pytest.mark.parametrize("case, name, text", [
    ("empty", "mask", "nothing to crop"),
    ("size", "mask", "64x64 but the image is 4096x3072"),
    ("nan_image", "image", "NaN/inf"),
    ("nan_mask", "mask", "NaN/inf"),
    ("nan_context", "context_mask", "NaN/inf"),
    ("context_size", "context_mask", "context_mask is 100x100"),
    ("target", "target", "multiple of 16"),
])
def test_bad_input_is_a_clear_error_naming_the_input(photo, case, name, text):
    mask = rect_mask((100, 100, 50, 50))
    kwargs = {}
    image = photo
    if case == "empty":
        mask = torch.zeros(1, H, W)
    elif case == "size":
        mask = torch.zeros(1, 64, 64)
    elif case == "nan_image":
        image = photo.clone()
        image[0, 5, 5, 1] = float("nan")
    elif case == "nan_mask":
        mask[0, 3, 3] = float("nan")
    elif case == "nan_context":
        kwargs["context_mask"] = torch.full((1, H, W), float("inf"))
    elif case == "context_size":
        kwargs["context_mask"] = torch.zeros(1, 100, 100)
    elif case == "target":
        kwargs["target_long_side"] = 1000
    with pytest.raises(FillScopeInputError) as e:
        crop_for_inpaint(image, mask, **kwargs)
    assert e.value.input_name == name and text in str(e.value) and "Fix:" in str(e.value)


def test_stitch_refuses_crops_of_another_size_or_batch(photo):
    out = crop_for_inpaint(photo, rect_mask((100, 100, 50, 50)), target_long_side=256)
    for bad in (torch.zeros(1, 64, 64, 3), torch.zeros(2, *out.image.shape[1:])):
        with pytest.raises(FillScopeInputError) as e:
            stitch(bad, out.record)
        assert e.value.input_name == "generated" and "crop made 1 crop(s)" in str(e.value)
    nan = out.image.clone()
    nan[0, 0, 0, 0] = float("nan")
    with pytest.raises(FillScopeInputError) as e:
        stitch(nan, out.record)
    assert e.value.input_name == "generated"
    with pytest.raises(FillScopeInputError) as e:
        stitch(out.image, "not a record")
    assert e.value.input_name == "stitch"


def test_too_many_regions_is_a_clear_error():
    boxes = [(20 + 40 * (k // 10), 20 + 40 * (k % 10), 10, 10) for k in range(20)]
    with pytest.raises(FillScopeInputError) as e:
        crop_for_inpaint(torch.rand(1, 500, 500, 3), rect_mask(*boxes, height=500, width=500), regions=True,
                         min_area=1, merge_distance=4)
    assert e.value.input_name == "mask" and "20 separate regions" in str(e.value) and "merge_distance" in str(e.value)


def test_context_mask_enlarges_the_box_only(photo):
    mask = rect_mask((1000, 1000, 60, 80))
    context = rect_mask((900, 900, 400, 500))
    out = crop_for_inpaint(photo, mask, context_mask=context, context_factor=1.0, padding=0)
    (c,) = out.record.crops
    assert c.top <= 900 and c.left <= 900 and c.top + c.height >= 1300 and c.left + c.width >= 1400
    assert c.mask_pixels == 60 * 80  # the context is not repainted
    result = stitch(torch.zeros_like(out.image), out.record)
    keep = mask == 0
    assert_kept(result.image, photo, ~keep)


def test_tone_options_report_the_ring_delta_e_and_keep_the_outside_exact():
    pytest.importorskip("fillscope.compositing.tone", reason="fillscope/compositing/tone.py not there yet")
    image, _ = synthetic_image_and_mask(800, 600)
    mask = rect_mask((200, 300, 100, 120), height=600, width=800)
    out = crop_for_inpaint(image, mask, target_long_side=256)
    generated = (out.image * 0.8 + 0.15).clamp(0, 1)  # a colour cast the ring can measure
    plain = stitch(generated, out.record)
    assert "ring delta E before" not in plain.info
    keep = mask == 0
    for options in ({"tone_match": True}, {"poisson": True}, {"tone_match": True, "poisson": True}):
        result = stitch(generated, out.record, **options)
        assert_kept(result.image, image, ~keep)
        before = float(result.info["ring delta E before"])
        after = float(result.info["ring delta E after"])
        assert after < before, (options, before, after)
        assert "ring delta E before" in result.crops[0]
