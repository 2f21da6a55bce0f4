"""Crop and stitch in a real ComfyUI server: a 4096x3072 photo sampled by the tiny FLUX Fill at the crop's size and
stitched back with every pixel outside the mask bit-identical; two separate holes sampled as one batch of two crops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from server_checks import saved_pixels
from workflow_helpers import load_api, node_id, shapes_doc, tensors, with_dtype

from fillscope.compositing.crop import crop_for_inpaint
from fillscope.masks import synthetic_image_and_mask

pytestmark = pytest.mark.server

CROP, STITCH = "FillScopeCropForInpaint", "FillScopeStitch"


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def as_saved(image: torch.Tensor) -> np.ndarray:
    """IMAGE [1,H,W,3] -> the uint8 pixels ComfyUI's SaveImage (and the Shapes Report with `images`) writes."""
    return np.clip(255.0 * image[0].float().numpy(), 0, 255).astype(np.uint8)


def crop_stitch_prompt(image, mask, *, target=256, regions=False, steps=2) -> dict:
    """flux_fill_inpaint with Crop For Inpaint between the image and the condition and Stitch after the decode (in
    place of Paste Back): image/mask are [node, output] links. Every loader in fp32 (shipped: bf16, ~20x slower on a
    CPU without bf16 instructions): the crop's size and the exact outside do not depend on the dtype."""
    prompt = with_dtype(load_api("flux_fill_inpaint"), "fp32")
    cond, sampler = node_id(prompt, "FillScopeFluxFillCondition"), node_id(prompt, "FillScopeFluxFillSampler")
    decode, paste = node_id(prompt, "FillScopeVAEDecode"), node_id(prompt, "FillScopePasteBack")
    prompt["91"] = {"class_type": CROP, "inputs": {"image": image, "mask": mask, "context_factor": 1.5, "padding": 32,
                                                   "target": target, "regions": regions}}
    prompt[cond]["inputs"].update(image=["91", 0], mask=["91", 1])
    prompt[sampler]["inputs"]["steps"] = steps
    prompt["92"] = {"class_type": STITCH, "inputs": {"generated": [decode, 0], "stitch": ["91", 2], "feather": 8,
                                                     "tone_match": False, "poisson": False}}
    del prompt[paste]
    report = node_id(prompt, "FillScopeShapesReport")  # it saves the image under its report's number
    prompt[report]["inputs"].update(images=["92", 0], shapes=["92", 1])
    return prompt


def test_object_info_lists_the_crop_and_stitch_nodes(server):
    info = server.object_info()
    crop, stitch = info[CROP], info[STITCH]
    assert crop["input_order"]["required"] == ["image", "mask", "context_factor", "padding", "target", "regions"]
    assert crop["input_order"]["optional"] == [
        "context_mask", "min_area", "merge_distance", "size_mode", "width", "height", "min_side", "max_side",
        "multiple", "downscale", "upscale", "past_edge", "fill_colour", "threshold", "fill_holes", "grow",
        "blend_outside", "min_scale"]  # the options after merge_distance came later: saved workflows keep their order
    assert crop["output"] == ["IMAGE", "MASK", "FS_STITCH", "STRING", "IMAGE"]
    assert stitch["input_order"]["required"] == ["generated", "stitch", "feather", "tone_match", "poisson"]
    assert stitch["input_order"]["optional"] == ["ring_width"]
    assert stitch["output"] == ["IMAGE", "STRING"]
    for node, name in ((crop, "min_area"), (crop, "merge_distance"), (stitch, "ring_width")):
        assert node["input"]["optional"][name][1]["advanced"] is True
    assert crop["category"] == stitch["category"] == "FillScope/compositing"


def test_a_4096x3072_photo_is_sampled_at_the_crop_size_and_stitched_with_the_outside_exact(server):
    width, height, fraction = 4096, 3072, 0.05
    prompt = crop_stitch_prompt(["90", 0], ["90", 1])
    prompt["90"] = {"class_type": "FillScopeSyntheticImageMask",
                    "inputs": {"width": width, "height": height, "mask_fraction": fraction}}
    del prompt[node_id(prompt, "LoadImage")]
    entry = server.run(prompt, timeout=600)

    image, mask = synthetic_image_and_mask(width, height, fraction)
    expected = crop_for_inpaint(image, mask, target_long_side=256).record
    out = saved_pixels(server, entry, node_id(prompt, "FillScopeShapesReport"))
    assert out.shape == (height, width, 3)
    keep = mask[0].numpy() == 0
    assert np.array_equal(out[keep], as_saved(image)[keep])  # every pixel outside the mask, bit for bit
    assert not np.array_equal(out[~keep], as_saved(image)[~keep])  # the hole was repainted

    ch, cw = expected.crop_height, expected.crop_width
    assert max(ch, cw) == 256 and ch % 16 == 0 and cw % 16 == 0
    crop = shapes_doc(entry, prompt, CROP)["node"]
    assert crop["facts"]["crop"] == expected.describe() and expected.describe().startswith(f"4096x3072 photo -> {cw}x{ch} crop")
    assert tensors({"node": crop})["crop"]["shape"] == [1, ch, cw, 3]
    sampler = tensors(shapes_doc(entry, prompt, "FillScopeFluxFillSampler"))
    assert sampler["transformer.input"]["shape"] == [1, (ch // 16) * (cw // 16), 384]  # the model ran at the crop size
    stitch = shapes_doc(entry, prompt, STITCH)
    assert stitch["node"]["facts"]["crop"] == expected.describe()
    assert stitch["node"]["facts"]["kept pixels (exact source values)"] == f"{int(keep.sum()):,}"
    assert tensors(stitch)["image"]["shape"] == [1, height, width, 3]
    assert CROP in [r["node"] for r in stitch["trail"]]  # the crop's record travels with the stitch record


def test_two_separate_holes_are_sampled_as_a_batch_of_two_crops_and_both_stitched(server):
    h, w = 768, 1024
    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    holes = [(100, 200, 100, 250), (500, 620, 700, 900)]
    for y0, y1, x0, x1 in holes:
        rgba[y0:y1, x0:x1, 3] = 0  # transparent = repaint
    Image.fromarray(rgba, "RGBA").save(server.input_dir / "fillscope_two_holes.png")
    prompt = crop_stitch_prompt(["8", 0], ["8", 1], regions=True)
    prompt[node_id(prompt, "LoadImage")]["inputs"]["image"] = "fillscope_two_holes.png"
    entry = server.run(prompt, timeout=600)

    crop = shapes_doc(entry, prompt, CROP)["node"]
    assert crop["facts"]["crops"] == 2
    n, ch, cw, _ = tensors({"node": crop})["crop"]["shape"]
    assert n == 2 and max(ch, cw) == 256
    sampler = tensors(shapes_doc(entry, prompt, "FillScopeFluxFillSampler"))
    assert sampler["transformer.input"]["shape"] == [2, (ch // 16) * (cw // 16), 384]  # both at the target size
    out = saved_pixels(server, entry, node_id(prompt, "FillScopeShapesReport"))
    source = rgba[..., :3]  # LoadImage's RGB / 255, saved back: the same bytes
    assert out.shape == (h, w, 3)
    keep = rgba[..., 3] == 255
    assert np.array_equal(out[keep], source[keep])
    for y0, y1, x0, x1 in holes:
        assert not np.array_equal(out[y0:y1, x0:x1], source[y0:y1, x0:x1])  # each hole repainted
    stitch = shapes_doc(entry, prompt, STITCH)["node"]
    assert stitch["facts"]["kept pixels (exact source values)"] == f"{int(keep.sum()):,}"
    assert "region 1" in stitch["facts"]["crop"]


def test_the_shipped_meta_trace_samples_a_4096x3072_photo_at_1024_px_and_returns_4096x3072(server):
    """flux_fill_crop_stitch_meta_trace as shipped (production FLUX.1 Fill topology on meta weights): the transformer
    sees the 1024 px crop's tokens, the stitch returns the photo's size, and the Shapes Report says so in one line."""
    prompt = load_api("flux_fill_crop_stitch_meta_trace")
    entry = server.run(prompt, timeout=600)
    sampler = tensors(shapes_doc(entry, prompt, "FillScopeFluxFillSampler"))
    n, tokens, channels = sampler["transformer.input"]["shape"]
    assert n == 1 and channels == 384 and tokens <= 4096, sampler["transformer.input"]
    crop = shapes_doc(entry, prompt, CROP)["node"]
    _, ch, cw, _ = tensors({"node": crop})["crop"]["shape"]
    assert max(ch, cw) == 1024 and tokens == (ch // 16) * (cw // 16)
    stitch = shapes_doc(entry, prompt, STITCH)
    assert tensors(stitch)["image"]["shape"] == [1, 3072, 4096, 3]
    report = entry["outputs"][node_id(prompt, "FillScopeShapesReport")]["text"][0]
    line = f"crop: {crop['facts']['crop']}: transformer.input [1, {tokens}, 384]"
    assert line in report and crop["facts"]["crop"].startswith(f"4096x3072 photo -> {cw}x{ch} crop"), report


def test_an_outpaint_of_256_px_a_side_returns_the_padded_size_with_the_original_exact(server):
    """flux_fill_outpaint on the tiny FLUX Fill: 256 px on every side; the original's pixels come back bit for bit."""
    h, w = 192, 256
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    Image.fromarray(rgb, "RGB").save(server.input_dir / "fillscope_outpaint.png")
    prompt = with_dtype(load_api("flux_fill_outpaint"), "fp32")
    prompt[node_id(prompt, "LoadImage")]["inputs"]["image"] = "fillscope_outpaint.png"
    prompt[node_id(prompt, "FillScopeOutpaintPad")]["inputs"].update(left=256, top=256, right=256, bottom=256)
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"]["steps"] = 2
    # every loader in fp32 (shipped: bf16, which a CPU without bf16 instructions takes minutes to run over 768x704 px
    # in the VAE): the padded size and the original's pixels do not depend on the dtype
    entry = server.run(prompt, timeout=600)
    out = saved_pixels(server, entry, node_id(prompt, "FillScopeShapesReport"))
    assert out.shape == (h + 512, w + 512, 3)
    assert np.array_equal(out[256:256 + h, 256:256 + w], rgb)  # the original, bit for bit
    assert not np.array_equal(out[:256], np.broadcast_to(out[:1], out[:256].shape))  # the new area was painted


def test_a_colour_shifted_crop_stitched_with_tone_match_has_a_smaller_ring_error(server):
    """The generated crop shifted in colour (ComfyUI's own EmptyImage + ImageBlend: a quarter of pure red over it) and
    stitched with tone_match: the Stitch node measures the ring's mean CIE76 delta E before and after; after is a
    fraction of before. No model runs: the shift stands in for a model's colour drift."""
    width, height, fraction = 1024, 768, 0.3
    image, mask = synthetic_image_and_mask(width, height, fraction)
    record = crop_for_inpaint(image, mask, target_long_side=256).record
    prompt = {
        "1": {"class_type": "FillScopeSyntheticImageMask",
              "inputs": {"width": width, "height": height, "mask_fraction": fraction}},
        "2": {"class_type": CROP, "inputs": {"image": ["1", 0], "mask": ["1", 1], "context_factor": 1.5, "padding": 32,
                                             "target": 256, "regions": False}},
        "3": {"class_type": "EmptyImage", "inputs": {"width": record.crop_width, "height": record.crop_height,
                                                     "batch_size": 1, "color": 0xFF0000}},
        "4": {"class_type": "ImageBlend", "inputs": {"image1": ["2", 0], "image2": ["3", 0], "blend_factor": 0.25,
                                                     "blend_mode": "normal"}},
        "5": {"class_type": STITCH, "inputs": {"generated": ["4", 0], "stitch": ["2", 2], "feather": 8,
                                               "tone_match": True, "poisson": False, "ring_width": 16}},
        "6": {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}},  # an output node: the prompt runs
    }
    entry = server.run(prompt, timeout=300)
    facts = entry["outputs"]["5"]["fillscope_shapes"][0]["node"]["facts"]
    before, after = float(facts["ring delta E before"]), float(facts["ring delta E after"])
    print(f"ring delta E (CIE76) of a crop blended 25% with red: {before:.2f} without, {after:.2f} with tone_match")
    assert before > 5.0 and after < before / 3, facts
