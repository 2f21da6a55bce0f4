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


# ---- the crop options (issue 24), each on the four masks of crop_cases.py ----------------------------------------

from crop_cases import CASES, case_mask  # noqa: E402
from crop_cases import photo as smooth_photo  # noqa: E402

from fillscope.compositing.crop_masks import mask_width  # noqa: E402
from fillscope.compositing.crop_preview import crop_preview  # noqa: E402
from fillscope.pixels import dilate  # noqa: E402
from fillscope.resample import FILTERS  # noqa: E402

SH, SW = 768, 1024  # the option tests' photo: the masks scale with it


@pytest.fixture(scope="module")
def small_photo():
    return smooth_photo(SH, SW)


def changed_pixels(result, source):
    """[B,H,W] bool: where stitch changed the photo (bit patterns differ)."""
    a = result.contiguous().view(torch.int32)
    b = source.contiguous().view(torch.int32)
    return (a != b).any(dim=-1)


def inverted_crops(out):
    """A 'generated' image that differs from the crop everywhere: the crop inverted."""
    return 1.0 - out.image


def soft_edged(mask, halo=6, value=0.05):
    """The mask with a faint halo `halo` px wide (values `value`) around it: a soft brush edge."""
    grown = dilate(mask[:, None], halo)[:, 0]
    return torch.where(mask > 0, mask, grown * value)


def holed(mask):
    """The mask with a small hole punched at its thickest point (a disc of a sixth of its width)."""
    import numpy as np
    from scipy import ndimage

    edt = ndimage.distance_transform_edt(np.pad(mask[0].numpy() > 0, 1))[1:-1, 1:-1]  # the border is outside
    cy, cx = divmod(int(edt.argmax()), mask.shape[-1])
    r = max(1, int(edt.max() / 3))  # a 5-px stroke keeps a pixel of mask on each side of the hole
    ys, xs = torch.meshgrid(torch.arange(mask.shape[1]), torch.arange(mask.shape[2]), indexing="ij")
    hole = ((ys - cy) ** 2 + (xs - cx) ** 2) <= r * r
    return mask.masked_fill(hole[None], 0.0), hole[None]


@pytest.mark.parametrize("case", CASES)
def test_threshold_drops_a_faint_edge_from_the_box_and_the_paste(small_photo, case):
    mask = case_mask(case, SH, SW)
    soft = soft_edged(mask)
    out = crop_for_inpaint(small_photo, soft, threshold=0.1, min_scale=0)
    result = stitch(inverted_crops(out), out.record, feather=0)
    changed = changed_pixels(result.image, small_photo)
    assert not bool((changed & (mask == 0)).any())  # the halo keeps the source, exactly
    assert bool(changed[mask > 0].all())
    assert any("threshold 0.1" in n for n in out.notes)
    plain = crop_for_inpaint(small_photo, soft, min_scale=0)  # without: the halo is pasted too
    assert bool((changed_pixels(stitch(inverted_crops(plain), plain.record, feather=0).image, small_photo)
                 & (soft > 0) & (mask == 0)).any())


@pytest.mark.parametrize("case", CASES)
def test_fill_holes_repaints_what_the_mask_encloses_and_nothing_else(small_photo, case):
    mask, hole = holed(case_mask(case, SH, SW))
    out = crop_for_inpaint(small_photo, mask, fill_holes=True, min_scale=0)
    changed = changed_pixels(stitch(inverted_crops(out), out.record, feather=0).image, small_photo)
    assert bool(changed[hole].all())  # the hole is repainted
    assert not bool((changed & (mask == 0) & ~hole).any())  # nothing outside the filled mask
    without = crop_for_inpaint(small_photo, mask, min_scale=0)
    kept = ~changed_pixels(stitch(inverted_crops(without), without.record, feather=0).image, small_photo)
    assert bool(kept[hole].all())  # off: the hole keeps the source


@pytest.mark.parametrize("case", CASES)
def test_grow_widens_what_stitch_pastes_and_the_outside_stays_exact_past_it(small_photo, case):
    mask = case_mask(case, SH, SW)
    out = crop_for_inpaint(small_photo, mask, grow=12, min_scale=0)
    result = stitch(inverted_crops(out), out.record, feather=4)
    changed = changed_pixels(result.image, small_photo)
    grown = dilate(mask[:, None], 12)[:, 0] > 0
    assert not bool((changed & ~grown).any())  # exact outside the grown mask
    ring = grown & (mask == 0)
    assert float(changed[ring].float().mean()) > 0.9  # the ring is pasted (not merely the model's repaint)
    assert int(result.info["pasted outside the given mask"].split(" px")[0].replace(",", "")) == int(
        (changed & (mask == 0)).sum())


@pytest.mark.parametrize("case", CASES)
def test_blend_outside_mixes_a_band_outside_the_mask_and_keeps_the_rest_exact(small_photo, case):
    n = 10
    mask = case_mask(case, SH, SW)
    out = crop_for_inpaint(small_photo, mask, blend_outside=n, min_scale=0)
    result = stitch(inverted_crops(out), out.record, feather=4)
    changed = changed_pixels(result.image, small_photo)
    band = (dilate(mask[:, None], n)[:, 0] > 0) & (mask == 0)
    assert not bool((changed & (mask == 0) & ~band).any())  # exact beyond the band
    assert float(changed[band].float().mean()) > 0.8
    # in the band the result lies between the source and the fill: a ramp, not a paste
    gen = stitch(inverted_crops(out), out.record, feather=4)
    assert gen.info["pasted outside the given mask"].startswith(f"{int((changed & band).sum()):,} px")
    # the model repaints the band too: the crop's mask, in photo px, covers the mask grown by the band
    (c,) = out.record.crops
    grown_area = int((dilate(mask[:, None], n)[:, 0] > 0).sum())
    assert int((out.mask > 0).sum()) / (c.scale_x * c.scale_y) >= 0.97 * grown_area


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode, kwargs, size", [
    ("fixed", {"width": 768, "height": 512}, (512, 768)),
    ("square", {"target_long_side": 512}, (512, 512)),
    ("long side", {"target_long_side": 640, "multiple": 64}, None),
])
def test_size_modes_give_the_crop_size_they_promise_and_stitch_stays_exact(small_photo, case, mode, kwargs, size):
    mask = case_mask(case, SH, SW)
    out = crop_for_inpaint(small_photo, mask, size_mode=mode, min_scale=0, **kwargs)
    h, w = out.image.shape[1:3]
    if size is not None:
        assert (h, w) == size
    else:
        assert max(h, w) == 640 and h % 64 == 0 and w % 64 == 0
    for c in out.record.crops:  # one scale on both axes, within the aspect rounding, unless the photo is too small
        if c.scale_x != pytest.approx(c.scale_y, rel=0.02):
            assert c.height == SH or c.width == SW
            assert any("stretched" in w for w in out.warnings)
    changed = changed_pixels(stitch(inverted_crops(out), out.record).image, small_photo)
    assert not bool((changed & (mask == 0)).any())


@pytest.mark.parametrize("case", CASES)
def test_no_resize_keeps_the_photos_pixels_within_min_and_max_side(small_photo, case):
    mask = case_mask(case, SH, SW)
    out = crop_for_inpaint(small_photo, mask, size_mode="no resize", multiple=16, min_scale=0)
    for c in out.record.crops:
        assert c.scale_x == c.scale_y == 1.0 or c.height == SH or c.width == SW  # scale 1 unless the photo ends
    assert out.image.shape[1] % 16 == 0 and out.image.shape[2] % 16 == 0
    small = crop_for_inpaint(small_photo, mask, size_mode="no resize", max_side=256, min_scale=0)
    assert max(small.image.shape[1:3]) <= 256
    big = crop_for_inpaint(small_photo, mask, size_mode="no resize", min_side=1536, min_scale=0)
    assert max(big.image.shape[1:3]) >= 1536
    for o in (out, small, big):
        changed = changed_pixels(stitch(inverted_crops(o), o.record).image, small_photo)
        assert not bool((changed & (mask == 0)).any())


@pytest.mark.parametrize("case", CASES)
def test_every_resampling_filter_crops_and_stitches_with_the_outside_exact(small_photo, case):
    mask = case_mask(case, SH, SW)
    crops = {}
    for f in FILTERS:
        out = crop_for_inpaint(small_photo, mask, downscale=f, upscale=f, target_long_side=512, min_scale=0)
        assert 0.0 <= float(out.image.min()) and float(out.image.max()) <= 1.0  # lanczos' overshoot is clamped
        changed = changed_pixels(stitch(inverted_crops(out), out.record).image, small_photo)
        assert not bool((changed & (mask == 0)).any())
        crops[f] = out.image
    assert not torch.equal(crops["lanczos"], crops["nearest"])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("past_edge", ["edge pixels", "fill colour"])
def test_past_the_edge_the_photo_is_extended_and_stitch_pastes_inside_it_only(small_photo, case, past_edge):
    mask = case_mask(case, SH, SW)
    out = crop_for_inpaint(small_photo, mask, past_edge=past_edge, fill_colour="#ff0000", context_factor=2.5,
                           min_scale=0)
    result = stitch(inverted_crops(out), out.record)
    assert result.image.shape == small_photo.shape
    assert not bool((changed_pixels(result.image, small_photo) & (mask == 0)).any())
    (c,) = out.record.crops
    y0, x0 = c.top + c.height / 2, c.left + c.width / 2
    rows, cols = (mask[0] > 0).nonzero()[:, 0], (mask[0] > 0).nonzero()[:, 1]
    centre = ((rows.min() + rows.max() + 1) / 2, (cols.min() + cols.max() + 1) / 2)
    if case == "border_blob":  # the box runs past the border: centred on the mask, not shifted
        assert c.past_edge and abs(y0 - float(centre[0])) <= 1 and abs(x0 - float(centre[1])) <= 1
        top_rows = int(round(-c.top * c.scale_y))  # crop rows above the photo
        assert top_rows > 2
        ext = out.image[0, : top_rows - 2]
        if past_edge == "fill colour":
            assert torch.allclose(ext, torch.tensor([1.0, 0.0, 0.0]).expand_as(ext), atol=1e-6)
        assert float(out.mask[0, : top_rows - 2].max()) == 0.0  # context only
        assert any("past the image's border" in n for n in out.notes)


def test_the_crop_never_starves_the_model_on_the_four_masks_at_4096x3072():
    big = smooth_photo(3072, 4096)
    results = {}
    for case in CASES:
        mask = case_mask(case)
        off = crop_for_inpaint(big, mask, min_scale=0)
        on = crop_for_inpaint(big, mask)  # min_scale 0.5: the default
        results[case] = (off, on)
        for out in (off, on):
            changed = changed_pixels(stitch(inverted_crops(out), out.record).image, big)
            assert not bool((changed & (mask == 0)).any())
            assert bool(changed[mask > 0].float().mean() > 0.99)
    off, on = results["two_far_blobs"]
    assert len(off.record.crops) == 1 and off.record.crops[0].scale <= 0.26  # the 0.25 squeeze
    assert len(on.record.crops) == 2 and min(c.scale for c in on.record.crops) >= 0.5
    assert any("auto split" in n for n in on.notes)
    off, on = results["stroke"]
    assert len(off.record.crops) == 1 and off.record.crops[0].stroke_px < 8
    assert any("masked detail is about" in w for w in off.warnings)
    assert len(on.record.crops) > 1 and min(c.scale for c in on.record.crops) >= 0.5
    assert min(c.stroke_px for c in on.record.crops) >= 2 * off.record.crops[0].stroke_px
    assert not on.warnings
    for case in ("blob", "border_blob"):  # a compact hole is never cut
        off, on = results[case]
        assert len(on.record.crops) == 1 and on.record.crops[0].as_dict() == off.record.crops[0].as_dict()
    # the shapes facts' figures: scale and the mask's size in the crop
    c = results["stroke"][1].record.crops[0]
    assert c.mask_in_crop[0] > 0 and "strokes ~" in c.mask_text()


def test_mask_width_measures_the_stroke_and_the_blob():
    m = case_mask("stroke")[0]
    assert 18 <= mask_width(m) <= 22
    d = torch.zeros(400, 400)
    ys, xs = torch.meshgrid(torch.arange(400), torch.arange(400), indexing="ij")
    d[((ys - 200) ** 2 + (xs - 200) ** 2) <= 100**2] = 1
    assert 195 <= mask_width(d) <= 201


def test_the_preview_draws_the_mask_and_each_box_on_a_small_copy_of_the_photo():
    big = smooth_photo(3072, 4096)
    mask = case_mask("two_far_blobs")
    out = crop_for_inpaint(big, mask, grow=8)
    preview = crop_preview(out.record)
    assert preview.shape == (1, 768, 1024, 3)
    c = out.record.crops[1]
    y, x = round(c.top / 4), round((c.left + c.width / 2) / 4)  # the top edge of box 1, in preview px
    assert torch.allclose(preview[0, y, x], torch.tensor([1.0, 0.2, 0.9]))
    r = out.record.crops[0]
    cy, cx = round((0.18 * 3072) / 4), round((0.12 * 4096) / 4)  # a blob's centre: tinted red
    px = preview[0, cy, cx]
    assert float(px[0]) > float(px[1]) + 0.2 and r.image_index == 0


@pytest.mark.parametrize("kwargs, name, text", [
    ({"size_mode": "huge"}, "size_mode", "one of"),
    ({"size_mode": "fixed", "width": 1000}, "width", "multiple of 16"),
    ({"past_edge": "fill colour", "fill_colour": "nope"}, "fill_colour", "hex colour"),
    ({"size_mode": "no resize", "min_side": 2048, "max_side": 1024}, "min_side", "more than max_side"),
    ({"threshold": float("nan")}, "threshold", "from 0 to 1"),
    ({"grow": -1}, "grow", "0 to 1024"),
    ({"downscale": "hamming"}, "downscale", "lanczos"),
    ({"min_scale": float("inf")}, "min_scale", "from 0 to 4"),
    ({"multiple": 0}, "multiple", "1 to 512"),
])
def test_bad_crop_options_are_a_clear_error_naming_the_option(small_photo, kwargs, name, text):
    with pytest.raises(FillScopeInputError) as e:
        crop_for_inpaint(small_photo, case_mask("blob", SH, SW), **kwargs)
    assert e.value.input_name == name and text in str(e.value) and "Fix:" in str(e.value)


def test_a_threshold_that_drops_the_whole_mask_says_so():
    image, mask = smooth_photo(SH, SW), case_mask("blob", SH, SW) * 0.05
    with pytest.raises(FillScopeInputError) as e:
        crop_for_inpaint(image, mask, threshold=0.1)
    assert "threshold" in str(e.value) and e.value.input_name == "mask"


def test_fill_holes_gives_the_same_mask_with_and_without_scipy(monkeypatch):
    from fillscope.compositing import crop_masks

    ring = torch.zeros(1, 40, 40)
    ring[0, 5:30, 5:30] = 1
    ring[0, 8:27, 8:27] = 0  # a sealed hole
    second = torch.zeros(1, 40, 40)
    second[0, 10:20, 10:20] = 1
    second[0, 12:18, 12:18] = 0
    second[0, 11, 11] = 0  # a diagonal gap from the hole to the outside corner: open with an 8-connected background
    second[0, 10, 10] = 0
    with_scipy = [crop_masks.fill_enclosed(m) for m in (ring, second)]
    import builtins

    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    without = [crop_masks.fill_enclosed(m) for m in (ring, second)]
    assert all(torch.equal(a, b) for a, b in zip(with_scipy, without))
    assert float(with_scipy[0][0, 15, 15]) == 1.0  # the sealed hole is filled
    assert float(with_scipy[1][0, 15, 15]) == 0.0  # the hole with a diagonal way out is not


def test_a_size_mode_checks_only_the_sizes_it_uses(small_photo):
    mask = case_mask("blob", SH, SW)
    assert max(crop_for_inpaint(small_photo, mask, multiple=40, target_long_side=320).image.shape[1:3]) == 320
    assert crop_for_inpaint(small_photo, mask, size_mode="fixed", width=480, height=288,
                            multiple=48).image.shape[1:3] == (288, 480)
    assert crop_for_inpaint(small_photo, mask, size_mode="no resize", multiple=24).image.shape[1] % 24 == 0
