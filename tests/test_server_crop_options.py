"""Crop For Inpaint's options (issue 24) through a real ComfyUI server, on the four masks of tests/crop_cases.py.

No model runs: the "generated" crop is the crop through ComfyUI's own ImageInvert (a value k comes back near
255 - k), so every pixel Stitch pastes is visibly changed and every pixel it keeps must be bit-identical. The
photo and masks travel as PNGs (LoadImage, LoadImageMask's red channel = mask / 255), so the test knows the exact
values the server works on. Two prompts do most of the work (1024x768 stitched and sized crops, 4096x3072 auto split);
a few more check what an old workflow and bad values do."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from comfy_server import ComfyExecutionError
from crop_cases import CASES, case_mask, photo
from PIL import Image
from scipy import ndimage
from server_checks import saved_pixels
from workflow_helpers import tensors

pytestmark = pytest.mark.server

CROP, STITCH = "FillScopeCropForInpaint", "FillScopeStitch"
H, W = 768, 1024  # the photo of every check but the auto split
BIG_H, BIG_W = 3072, 4096  # the auto split's photo (the sizes issue 24 measured)
OLD_CROP = {"context_factor": 1.5, "padding": 32, "target": 256, "regions": False}  # the inputs before issue 24
OLD_STITCH = {"feather": 8, "tone_match": False, "poisson": False}
NEW_INPUTS = ["size_mode", "width", "height", "min_side", "max_side", "multiple", "downscale", "upscale", "past_edge",
              "fill_colour", "threshold", "fill_holes", "grow", "blend_outside", "min_scale"]
THRESHOLD, GROW, BLEND = 0.5, 12, 16
FILL = (255, 0, 255)  # past_edge "fill colour": magenta, unlike anything in the photo


# ---- the masks as the server sees them ([H,W] float32, the PNG's values / 255) --------------------------------

def u8(mask: torch.Tensor) -> np.ndarray:
    return np.clip(np.round(255.0 * mask[0].numpy()), 0, 255).astype(np.uint8)


def soft(name: str) -> torch.Tensor:
    """The case mask with a soft edge: a 5x5 box blur, values k/25 over 2 px either side of the border."""
    m = case_mask(name, H, W)[None]
    return torch.nn.functional.avg_pool2d(m, 5, stride=1, padding=2, count_include_pad=False)[0]


def holed(name: str) -> torch.Tensor:
    """The case mask with a disc punched out of each blob's centre (the stroke, 5 px wide here, keeps no hole)."""
    m = case_mask(name, H, W)
    k = W / 4096
    centres = {"blob": [(0.5 * H, 0.45 * W, 20)], "border_blob": [(120 * k, W - 150 * k, 12)],
               "two_far_blobs": [(0.18 * H, 0.12 * W, 10), (0.82 * H, 0.88 * W, 10)], "stroke": []}[name]
    ys, xs = torch.arange(H, dtype=torch.float32)[:, None], torch.arange(W, dtype=torch.float32)[None, :]
    for cy, cx, r in centres:
        m[0, (ys - cy) ** 2 + (xs - cx) ** 2 <= r * r] = 0.0
    return m


PHOTO = np.clip(np.round(255.0 * photo(H, W)[0].numpy()), 0, 255).astype(np.uint8)  # [H,W,3] as LoadImage reads it
MASKS = {f"{kind}_{name}": make(name) for name in CASES
         for kind, make in (("plain", lambda n: case_mask(n, H, W)), ("soft", soft), ("holed", holed))}


def loaded(key: str) -> np.ndarray:
    """[H,W] the mask LoadImageMask hands the node (red channel / 255, float32)."""
    return u8(MASKS[key]).astype(np.float32) / 255.0


def square_grow(binary: np.ndarray, px: int) -> np.ndarray:
    return ndimage.maximum_filter(binary.astype(np.uint8), size=2 * px + 1, mode="constant", cval=0) > 0


# ---- API prompts -------------------------------------------------------------------------------------------------

class Prompt(dict):
    """An API prompt built node by node; add() returns the node's id."""

    def add(self, class_type: str, **inputs) -> str:
        key = str(len(self) + 1)
        self[key] = {"class_type": class_type, "inputs": inputs}
        return key


def crop_node(p: Prompt, image: str, mask: str, **options) -> str:
    return p.add(CROP, image=[image, 0], mask=[mask, 0], **{**OLD_CROP, **options})


def stitched(p: Prompt, crop: str, name: str, **stitch_options) -> dict:
    """The crop inverted, stitched back and previewed: {"crop", "stitch", "save"} node ids. `name` labels the case
    (it was SaveImage's filename_prefix). PreviewImage writes the same pixels (PNG is lossless) at compress level 1
    instead of SaveImage's 4: some 50 photos of 1024x768 a run."""
    invert = p.add("ImageInvert", image=[crop, 0])
    stitch = p.add(STITCH, generated=[invert, 0], stitch=[crop, 2], **{**OLD_STITCH, **stitch_options})
    return {"crop": crop, "stitch": stitch, "save": p.add("PreviewImage", images=[stitch, 0])}


def node_doc(entry: dict, node: str) -> dict:
    return entry["outputs"][node]["fillscope_shapes"][0]["node"]


def crop_shape(entry: dict, node: str) -> list:
    return tensors({"node": node_doc(entry, node)})["crop"]["shape"]


def scales(doc: dict) -> list[float]:
    return [float(s) for s in re.findall(r"scale ([0-9.]+)", doc["facts"]["mask in crop"])]


def boxes(doc: dict) -> list[tuple[int, int, int, int]]:
    """(top, left, height, width) of each crop's box, from the 'boxes' fact."""
    found = re.findall(r"box (\d+)x(\d+) at \(top (-?\d+), left (-?\d+)\)", doc["facts"]["boxes"])
    return [(int(t), int(left), int(h), int(w)) for w, h, t, left in found]


# ---- the server and its runs -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(comfy_server):
    """The session's ComfyUI server with this module's photo and masks in its input folder."""
    Image.fromarray(PHOTO, "RGB").save(comfy_server.input_dir / "fs_options_photo.png", compress_level=1)
    for key, m in MASKS.items():
        Image.fromarray(u8(m), "L").save(comfy_server.input_dir / f"fs_options_{key}.png")
    for name in CASES:
        big = u8(case_mask(name, BIG_H, BIG_W))
        Image.fromarray(big, "L").save(comfy_server.input_dir / f"fs_options_big_{name}.png")
    return comfy_server


def inputs(p: Prompt, *keys: str, big: bool = False) -> tuple[str, dict]:
    """(photo node, {mask key: LoadImageMask node})."""
    if big:
        image = p.add("EmptyImage", width=BIG_W, height=BIG_H, batch_size=1, color=0x6080A0)
    else:
        image = p.add("LoadImage", image="fs_options_photo.png")
    masks = {k: p.add("LoadImageMask", image=f"fs_options_{'big_' if big else ''}{k}.png", channel="red") for k in keys}
    return image, masks


@pytest.fixture(scope="module")
def small_run(server):
    """One prompt on the 1024x768 photo: every mask option, the filters and past_edge stitched (feather 0 for the
    mask options: the paste weight is the prepared mask itself), and the size modes cropped. Returns (entry, ids)."""
    p = Prompt()
    image, masks = inputs(p, *MASKS)
    ids: dict = {}
    for name in CASES:
        s, h, pl = masks[f"soft_{name}"], masks[f"holed_{name}"], masks[f"plain_{name}"]
        ids["soft", name] = stitched(p, crop_node(p, image, s), f"soft_{name}", feather=0)
        ids["threshold", name] = stitched(p, crop_node(p, image, s, threshold=THRESHOLD), f"thr_{name}", feather=0)
        ids["holed", name] = stitched(p, crop_node(p, image, h), f"holed_{name}", feather=0)
        ids["fill_holes", name] = stitched(p, crop_node(p, image, h, fill_holes=True), f"fill_{name}", feather=0)
        ids["grow", name] = stitched(p, crop_node(p, image, pl, grow=GROW), f"grow_{name}", feather=0)
        ids["blend", name] = stitched(p, crop_node(p, image, pl, blend_outside=BLEND), f"blend_{name}", feather=0)
        for mode, options in (("fixed", {"size_mode": "fixed", "width": 512, "height": 320}),
                              ("square", {"size_mode": "square"}),
                              ("no resize", {"size_mode": "no resize"}),
                              # width/height (1024, not multiples of 40) are unused in long side: not checked
                              ("multiple", {"multiple": 40, "target": 320})):
            crop = crop_node(p, image, pl, **options)
            ids[mode, name] = {"crop": crop, "save": p.add("PreviewImage", images=[crop, 0])}
    for name in CASES:  # target 240: every box is resampled (the border blob's is 256 px)
        crop = crop_node(p, image, masks[f"plain_{name}"], downscale="lanczos", upscale="lanczos", target=240)
        ids["lanczos", name] = stitched(p, crop, f"lanczos_{name}")
    for how, extra in (("edge pixels", {}), ("fill colour", {"fill_colour": "#{:02x}{:02x}{:02x}".format(*FILL)})):
        crop = crop_node(p, image, masks["plain_border_blob"], past_edge=how, **extra)
        ids[how] = {**stitched(p, crop, how.replace(" ", "_")), "crop image": p.add("PreviewImage", images=[crop, 0]),
                    "preview": p.add("PreviewImage", images=[crop, 4])}
        for name in CASES:  # every mask: a wide context runs past some border for each
            crop = crop_node(p, image, masks[f"plain_{name}"], past_edge=how, context_factor=3.0, **extra)
            ids[how, name] = stitched(p, crop, f"{how.replace(' ', '_')}_{name}")
    return server.run(p, timeout=300), ids


@pytest.fixture(scope="module")
def big_run(server):
    """One prompt on a 4096x3072 photo: each case at the default min_scale (0.5), and the stroke at min_scale 0;
    each crop's preview output saved."""
    p = Prompt()
    image, masks = inputs(p, *CASES, big=True)
    ids = {}
    for name, min_scale in [(n, None) for n in CASES] + [("stroke", 0.0)]:
        extra = {} if min_scale is None else {"min_scale": min_scale}
        crop = p.add(CROP, image=[image, 0], mask=[masks[name], 0], **{**OLD_CROP, "target": 1024}, **extra)
        ids[name, min_scale] = {"crop": crop, "preview": p.add("PreviewImage", images=[crop, 4])}
    return server.run(p, timeout=300), ids


def result(server, entry, ids) -> np.ndarray:
    out = saved_pixels(server, entry, ids["save"])
    assert out.shape == (H, W, 3)  # the photo's size, whatever the crop was
    return out


def changed(server, entry, ids) -> np.ndarray:
    """[H,W] bool: pixels the stitched image does not return bit for bit."""
    return (result(server, entry, ids) != PHOTO).any(-1)


# ---- mask preparation ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_threshold_gives_the_faint_edge_back_to_the_source(server, small_run, name):
    entry, ids = small_run
    m = loaded(f"soft_{name}")
    faint = (m > 0) & (m < THRESHOLD)
    assert faint.sum() > 100
    without = changed(server, entry, ids["soft", name])
    assert np.array_equal(without, m > 0)  # without threshold every pixel of the soft mask is pasted (weight = value)
    cut = changed(server, entry, ids["threshold", name])
    assert np.array_equal(cut, m >= THRESHOLD)  # with it: the faint edge is the source, bit for bit
    notes = " ".join(node_doc(entry, ids["threshold", name]["crop"])["notes"])
    assert f"{int(faint.sum()):,} faint mask px set to 0" in notes


@pytest.mark.parametrize("name", CASES)
def test_fill_holes_repaints_the_enclosed_hole_and_nothing_outside_the_filled_mask(server, small_run, name):
    entry, ids = small_run
    given, filled = loaded(f"holed_{name}") > 0, loaded(f"plain_{name}") > 0  # the punched discs lie inside the blobs
    assert np.array_equal(changed(server, entry, ids["holed", name]), given)  # the hole kept as it is
    assert np.array_equal(changed(server, entry, ids["fill_holes", name]), filled)
    facts = node_doc(entry, ids["fill_holes", name]["stitch"])["facts"]
    assert facts["pasted outside the given mask"].startswith(f"{int((filled & ~given).sum()):,} px")


@pytest.mark.parametrize("name", CASES)
def test_grow_pastes_exactly_the_square_grown_mask(server, small_run, name):
    entry, ids = small_run
    grown = square_grow(loaded(f"plain_{name}") > 0, GROW)
    assert np.array_equal(changed(server, entry, ids["grow", name]), grown)


@pytest.mark.parametrize("name", CASES)
def test_blend_outside_mixes_a_band_outside_the_mask_and_keeps_everything_beyond_it(server, small_run, name):
    entry, ids = small_run
    mask = loaded(f"plain_{name}") > 0
    got = changed(server, entry, ids["blend", name])
    assert not (got & ~square_grow(mask, BLEND)).any()  # beyond the band: the source, bit for bit
    near = square_grow(mask, BLEND // 2) & ~mask  # the inner half of the band: paste weight over one half
    assert got[mask].all() and got[near].all()
    assert got[square_grow(mask, BLEND) & ~mask].mean() > 0.5
    facts = node_doc(entry, ids["blend", name]["stitch"])["facts"]
    assert f"its {BLEND} px blend band" in facts["pasted outside the given mask"]


# ---- size, filters, past the edge -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_size_modes_give_the_crop_sizes_they_promise(server, small_run, name):
    entry, ids = small_run

    def shape(mode):
        n, h, w, _ = crop_shape(entry, ids[mode, name]["crop"])
        assert len(entry["outputs"][ids[mode, name]["save"]]["images"]) == n  # the batch PreviewImage saved
        assert saved_pixels(server, entry, ids[mode, name]["save"]).shape == (h, w, 3)
        return n, h, w

    assert shape("fixed")[1:] == (320, 512)
    assert shape("square")[1:] == (256, 256)
    _, h, w = shape("multiple")
    assert max(h, w) == 320 and h % 40 == 0 and w % 40 == 0
    n, h, w = shape("no resize")
    doc = node_doc(entry, ids["no resize", name]["crop"])
    assert scales(doc) == [1.0] * n  # the photo's own pixels
    assert h % 16 == 0 and w % 16 == 0
    assert all((bh, bw) == (h, w) for _, _, bh, bw in boxes(doc))  # each box is the crop, pixel for pixel


@pytest.mark.parametrize("name", CASES)
def test_a_lanczos_crop_runs_and_keeps_the_outside_exact(server, small_run, name):
    entry, ids = small_run
    mask = loaded(f"plain_{name}") > 0
    got = changed(server, entry, ids["lanczos", name])
    assert not got[~mask].any() and got[mask].all()
    assert any(s != 1.0 for s in scales(node_doc(entry, ids["lanczos", name]["crop"])))  # it did resample


@pytest.mark.parametrize("how", ["edge pixels", "fill colour"])
def test_past_edge_keeps_the_border_blob_centred_and_pastes_inside_the_photo_only(server, small_run, how):
    entry, ids = small_run
    mask = loaded("plain_border_blob") > 0
    got = changed(server, entry, ids[how])
    assert not got[~mask].any() and got[mask].all()
    doc = node_doc(entry, ids[how]["crop"])
    [(top, left, h, w)] = boxes(doc)
    ys, xs = np.nonzero(mask)
    assert top < 0 and left + w > W  # past the top and right borders
    assert abs((top + h / 2) - (ys.min() + ys.max() + 1) / 2) <= 1
    assert abs((left + w / 2) - (xs.min() + xs.max() + 1) / 2) <= 1
    crop = saved_pixels(server, entry, ids[how]["crop image"])
    corner = crop[1, -2].astype(int)  # top right: above and right of the photo
    if how == "fill colour":
        assert np.abs(corner - FILL).max() <= 1, corner
    else:
        assert np.abs(corner - PHOTO[0, -1].astype(int)).max() <= 8, corner  # the photo's corner repeated


@pytest.mark.parametrize("how", ["edge pixels", "fill colour"])
@pytest.mark.parametrize("name", CASES)
def test_past_edge_on_every_mask_returns_the_photos_size_with_the_outside_exact(server, small_run, how, name):
    entry, ids = small_run
    mask = loaded(f"plain_{name}") > 0
    got = changed(server, entry, ids[how, name])
    assert not got[~mask].any() and got[mask].all()


# ---- the automatic split at 4096x3072 --------------------------------------------------------------------------

def test_auto_split_gives_far_blobs_their_own_crops_and_cuts_the_stroke_but_never_the_blob(big_run):
    entry, ids = big_run
    summary = {}
    for (name, min_scale), node in ids.items():
        doc = node_doc(entry, node["crop"])
        n = crop_shape(entry, node["crop"])[0]
        assert n == doc["facts"]["crops"] == len(scales(doc)) == len(boxes(doc))
        summary[name, min_scale] = (n, scales(doc), doc["warnings"])
        print(f"4096x3072 {name} (min_scale {0.5 if min_scale is None else min_scale}): {n} crop(s) of "
              f"{doc['facts']['crop size']}, {doc['facts']['mask in crop']}")
    assert summary["blob", None][0] == 1 and summary["border_blob", None][0] == 1
    assert summary["two_far_blobs", None][0] == 2 and min(summary["two_far_blobs", None][1]) >= 0.5
    n, split_scales, warnings = summary["stroke", None]
    assert n >= 2 and min(split_scales) >= 0.5 and not warnings
    n, one_scale, warnings = summary["stroke", 0.0]
    assert n == 1 and one_scale[0] < 0.5
    assert any("px wide in the crop" in w for w in warnings), warnings


def test_the_preview_output_is_at_most_1024_px_and_shows_the_mask(server, small_run, big_run):
    for entry, node, (h, w) in [(big_run[0], ids["preview"], (BIG_H, BIG_W)) for ids in big_run[1].values()] + [
            (small_run[0], small_run[1][how]["preview"], (H, W)) for how in ("edge pixels", "fill colour")]:
        preview = saved_pixels(server, entry, node).astype(int)
        assert max(preview.shape[:2]) <= 1024 and preview.shape[:2] == (round(h * 1024 / w), 1024)
    # the big blob: its centre tinted red over the flat photo (0x6080A0)
    blob = saved_pixels(server, big_run[0], big_run[1]["blob", None]["preview"]).astype(int)
    r, g, b = blob[384, round(0.45 * 1024)]
    assert r > g + 40 and r > b, (r, g, b)


# ---- old workflows and bad values ----------------------------------------------------------------------------

def old_workflow(mask_key: str) -> tuple[Prompt, dict]:
    """Crop For Inpaint and Stitch with only the inputs they had before issue 24."""
    p = Prompt()
    image, masks = inputs(p, mask_key)
    crop = p.add(CROP, image=[image, 0], mask=[masks[mask_key], 0], **OLD_CROP)
    return p, stitched(p, crop, f"old_{mask_key}")


def test_an_old_workflow_without_the_new_inputs_validates_and_runs(server):
    info = server.object_info(CROP)[CROP]
    assert info["input_order"]["optional"] == ["context_mask", "min_area", "merge_distance", *NEW_INPUTS]
    assert info["output"] == ["IMAGE", "MASK", "FS_STITCH", "STRING", "IMAGE"]  # preview last: old links keep slots
    p, ids = old_workflow("plain_blob")
    entry = server.run(p, timeout=120)
    mask = loaded("plain_blob") > 0
    got = changed(server, entry, ids)
    assert not got[~mask].any() and got[mask].all()
    assert crop_shape(entry, ids["crop"])[1:3] == [240, 256]  # long side = target, as before


def test_bad_values_are_refused_naming_the_input_and_the_server_runs_the_next_prompt(server):
    for options, name in (({"size_mode": "fixed", "width": 1000}, "width"),
                          ({"past_edge": "fill colour", "fill_colour": "nope"}, "fill_colour")):
        p = Prompt()
        image, masks = inputs(p, "plain_blob")
        crop = crop_node(p, image, masks["plain_blob"], **options)
        p.add("PreviewImage", images=[crop, 0])
        with pytest.raises(ComfyExecutionError) as refused:
            server.run(p, timeout=120)
        message = str(refused.value)
        print("refused:", message.splitlines()[1])
        assert f"({CROP})" in message and f"input '{name}'" in message and "Fix:" in message
    p, ids = old_workflow("plain_border_blob")
    entry = server.run(p, timeout=120)
    mask = loaded("plain_border_blob") > 0
    got = changed(server, entry, ids)
    assert not got[~mask].any() and got[mask].all()


def test_a_multiple_larger_than_target_is_refused_naming_multiple_with_a_fix_its_widgets_can_reach(server):
    """Issue 35: multiple 512 with target 256 blamed target, with a range (512 to 8192) past target's widget (64 to
    4096): it is `multiple` that no crop side can be a multiple of."""
    p = Prompt()
    image, masks = inputs(p, "plain_blob")
    crop = crop_node(p, image, masks["plain_blob"], multiple=512, target=256)
    p.add("PreviewImage", images=[crop, 0])
    with pytest.raises(ComfyExecutionError) as refused:
        server.run(p, timeout=120)
    message = str(refused.value)
    assert f"({CROP})" in message and "input 'multiple'" in message and "input 'target'" not in message, message
    assert "is 512, larger than target (256)" in message and "set multiple to at most 256" in message
    assert "8192" not in message
