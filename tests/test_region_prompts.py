"""A prompt per region (issue 13): one prompt box holds several prompts separated by lines `---`
(fillscope.text.split_prompts); each family's encode_prompt encodes them one by one and stacks them along the batch,
so prompt k conditions crop k of Crop For Inpaint with regions.

(a) the split rule and the crops' order; (b) two prompts encode to the batch-2 concatenation of the single encodings
for FLUX, SD3 and klein (tiny fp32 folders); (c) end to end on the tiny FLUX Fill: two holes -> two crops -> one
batch-2 run with two prompts equals each crop run alone with its own prompt; (d) a count that matches neither 1 nor
the crops is refused, naming text, before the transformer runs; (e) the prompt nodes (ComfyUI's modules in a
subprocess): the fact, the early refusal, the tooltip, and FLUX Prompt's batch equal to the engine's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from comfy_server import comfyui_installed, comfyui_path
from tiny_models import tokenizers_available

from fillscope import masks
from fillscope import text as text_ops
from fillscope.compositing.crop import crop_for_inpaint
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import flux_fill, klein, sd3_controlnet
from fillscope.sampling import initial_noise
from fillscope.text import concat_batch, split_prompts

REPO = Path(__file__).resolve().parent.parent
PROMPTS = ["a red brick chimney", "a blue glass window with a white frame"]
needs_tokenizers = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")


# ---- (a) the split rule --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["a cat on a mat", "", "  spaces and\nlines kept \n", "a --- b", "x\n----\ny",
                                  "x\n-- -\ny", "x ---\ny"])
def test_one_prompt_is_the_text_as_given(text):
    """No line holding only ---: one prompt, the very same string (not stripped), so it encodes as it always has."""
    out = split_prompts(text)
    assert out == [text] and out[0] is text


@pytest.mark.parametrize("text, want", [
    ("a\n---\nb", ["a", "b"]),
    ("  a red hat \n---\n\n  a blue door\n\n", ["a red hat", "a blue door"]),
    ("a\r\n---\r\nb\r\n", ["a", "b"]),  # Windows line ends
    ("a\n  ---\t \nb\n---\nc", ["a", "b", "c"]),  # spaces / tabs around the separator
    ("first line\nsecond line\n---\nthird", ["first line\nsecond line", "third"]),  # a prompt may span lines
    ("a\n---\nb --- c\n----\nd", ["a", "b --- c\n----\nd"]),  # only a line of exactly --- separates
])
def test_several_prompts(text, want):
    assert split_prompts(text) == want


@pytest.mark.parametrize("text, empty", [("a\n---", "2 of 2"), ("---\na", "1 of 2"), ("a\n---\n  \n---\nb", "2 of 3"),
                                         ("---", "1, 2 of 2"), ("a\n---\n---\n", "2, 3 of 3")])
def test_an_empty_prompt_is_refused_naming_text(text, empty):
    with pytest.raises(FillScopeInputError) as e:
        split_prompts(text)
    assert e.value.input_name == "text"
    assert empty in e.value.problem
    assert "---" in e.value.fix and "a single prompt needs none" in e.value.fix


def test_not_text_is_refused():
    with pytest.raises(FillScopeInputError, match="'text'"):
        split_prompts(None)


def test_concat_batch_joins_tensors_and_keeps_the_longest_token_count():
    a = text_ops.Qwen3Output(torch.zeros(1, 4, 6), torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long),
                             real_tokens=3, given_tokens=3)
    b = text_ops.Qwen3Output(torch.ones(1, 4, 6), torch.ones(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long),
                             real_tokens=4, given_tokens=9)
    both = concat_batch([a, b])
    assert both.embeds.shape == (2, 4, 6) and torch.equal(both.embeds[1], b.embeds[0])
    assert (both.real_tokens, both.given_tokens, both.truncated) == (4, 9, True)
    assert concat_batch([a]) is a
    nested = concat_batch([klein.KleinText(a.embeds, a), klein.KleinText(b.embeds, b)])
    assert nested.embeds.shape == (2, 4, 6) and nested.encoded.input_ids.shape == (2, 4)
    assert nested.text_ids.shape == (2, 4, 4)
    clip = {"pooled": torch.zeros(1, 2), "last_hidden": torch.zeros(1, 3, 2), "penultimate": torch.zeros(1, 3, 2),
            "text_embeds": None, "input_ids": torch.zeros(1, 3, dtype=torch.long)}
    joined = concat_batch([text_ops.ClipOutput(**clip, encoder="clip_g"), text_ops.ClipOutput(**clip, encoder="clip_g")])
    assert joined.text_embeds is None and joined.encoder == "clip_g" and joined.pooled.shape == (2, 2)
    with pytest.raises(ValueError, match="encoder"):
        concat_batch([text_ops.ClipOutput(**clip, encoder="clip_l"), text_ops.ClipOutput(**clip, encoder="clip_g")])


def _two_holes():
    """A 128x96 image: hole A at the bottom left, hole B at the top right, far enough apart to stay two regions."""
    g = torch.Generator().manual_seed(3)
    image = torch.rand(1, 96, 128, 3, generator=g)
    mask = torch.zeros(1, 96, 128)
    mask[:, 60:76, 10:30] = 1.0  # A: top 60, left 10
    mask[:, 10:26, 90:114] = 1.0  # B: top 10, left 90
    return image, mask


CROP = {"regions": True, "target_long_side": 64, "padding": 4, "merge_distance": 8, "min_area": 16}


def test_crop_order_is_image_then_regions_top_to_bottom_then_left_to_right():
    """The order the prompt nodes' tooltip documents: image by image; in an image, regions by the top edge of each
    hole, equal tops by the left edge (regions.split_regions sorts by (top, left)); an image with nothing to repaint
    has no crop."""
    image, mask = _two_holes()
    mask2 = torch.zeros(1, 96, 128)
    mask2[:, 40:56, 70:90] = 1.0  # C: top 40, left 70
    mask2[:, 40:50, 5:20] = 1.0  # D: top 40, left 5 (same top as C: left first)
    mask2[:, 80:90, 40:60] = 1.0  # E: top 80
    blank = torch.zeros(1, 96, 128)
    images = torch.cat([image, image, image])
    out = crop_for_inpaint(images, torch.cat([mask, blank, mask2]), **CROP)
    got = [(c.image_index, c.region, c.mask_pixels) for c in out.record.crops]
    assert got == [(0, 0, 16 * 24), (0, 1, 16 * 20),  # B (top 10) before A (top 60)
                   (2, 0, 10 * 15), (2, 1, 16 * 20), (2, 2, 10 * 20)]  # D (left 5), C (left 70), E (top 80)
    assert any(n.startswith("image 1: nothing to repaint") for n in out.notes)
    listed = [n.split(":")[0] for n in out.notes if n.startswith("image ") and ", region " in n.split(":")[0]]
    assert listed == ["image 0, region 0", "image 0, region 1", "image 2, region 0", "image 2, region 1",
                      "image 2, region 2"]  # the crop node's notes list the crops in this order


# ---- (b) several prompts encode to the concatenation of the single encodings ---------------------------------


def _fields_equal(batch, singles, names):
    for name in names:
        joined = getattr(batch, name)
        assert joined.shape[0] == len(singles), name
        assert torch.equal(joined, torch.cat([getattr(s, name) for s in singles])), name


@pytest.fixture(scope="module")
def flux_stack(tmp_path_factory):
    if not tokenizers_available():
        pytest.skip("ComfyUI tokenizer files not found")
    from tiny_flux import build_tiny_flux_fill_folder

    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("flux") / "FLUX.1-Fill-tiny", seed=0)
    stack = flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    stack["folder"] = folder
    return stack


@needs_tokenizers
def test_flux_two_prompts_are_the_batch_of_the_single_encodings(flux_stack):
    seen = {}
    joined = flux_fill.encode_prompt(flux_stack["clip_l"], flux_stack["t5"], "\n---\n".join(PROMPTS),
                                     observe=lambda n, t: seen.setdefault(n, tuple(t.shape)))
    singles = [flux_fill.encode_prompt(flux_stack["clip_l"], flux_stack["t5"], p) for p in PROMPTS]
    _fields_equal(joined, singles, ("t5_hidden", "pooled"))
    assert joined.txt_ids.shape == singles[0].txt_ids.shape  # [L,3]: no batch, every text token at (0,0,0)
    assert seen["t5.hidden"][0] == seen["clip_l.pooled"][0] == seen["t5.input_ids"][0] == 2
    # batch 1 is today's encoding: the encoders called on the prompt as given
    t5 = text_ops.encode_t5(flux_stack["t5"], PROMPTS[0], flux_fill.T5_MAX_LENGTH)
    clip = text_ops.encode_clip(flux_stack["clip_l"], PROMPTS[0], project=False)
    assert torch.equal(singles[0].t5_hidden, t5.hidden) and torch.equal(singles[0].pooled, clip.pooled)


@needs_tokenizers
def test_sd3_two_prompts_are_the_batch_of_the_single_encodings(tmp_path_factory):
    from tiny_sd3 import build_tiny_sd3_folder

    folder = build_tiny_sd3_folder(tmp_path_factory.mktemp("sd3") / "sd3", seed=0)
    kw = {"dtype": "fp32", "device": "cpu"}
    encoders = (text_ops.load_clip_l(folder, **kw), text_ops.load_clip_g(folder, **kw), text_ops.load_t5(folder, **kw))
    joined = sd3_controlnet.encode_prompt(*encoders, PROMPTS[0] + "\n\n---\n\n" + PROMPTS[1])
    singles = [sd3_controlnet.encode_prompt(*encoders, p) for p in PROMPTS]
    _fields_equal(joined, singles, ("context", "pooled"))
    assert joined.origin is None


@needs_tokenizers
def test_klein_two_prompts_are_the_batch_of_the_single_encodings(tmp_path_factory):
    from tiny_klein import build_tiny_klein_folder

    folder = build_tiny_klein_folder(tmp_path_factory.mktemp("klein") / "klein", seed=0)
    qwen3 = text_ops.load_qwen3(str(folder), dtype="fp32", device="cpu")
    joined = klein.encode_prompt(qwen3, "\n---\n".join(PROMPTS))
    singles = [klein.encode_prompt(qwen3, p) for p in PROMPTS]
    _fields_equal(joined, singles, ("embeds", "text_ids"))
    _fields_equal(joined.encoded, [s.encoded for s in singles], ("embeds", "input_ids", "attention_mask"))
    assert joined.encoded.real_tokens == max(s.encoded.real_tokens for s in singles)


# ---- (c) end to end: a prompt per region on the tiny FLUX Fill ------------------------------------------------


STEPS, SEED = 3, 5


@pytest.fixture(scope="module")
def crops():
    image, mask = _two_holes()
    return crop_for_inpaint(image, mask, **CROP)


def _sample(stack, prompt, crop_image, crop_mask, noise):
    prepared = masks.prepare_image_and_mask(crop_image, crop_mask)
    cond = flux_fill.build_fill_condition(stack["vae"], prepared)
    text = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], prompt)
    return flux_fill.sample_flux_fill(stack["transformer"], text, cond, steps=STEPS, seed=SEED, noise=noise).latents


@needs_tokenizers
def test_a_prompt_per_region_equals_each_crop_run_alone(flux_stack, crops):
    """Two holes -> two crops (one IMAGE batch) -> one run with the prompts "B's\\n---\\nA's" -> crop k equals the
    crop run alone (batch 1) with prompt k. The noise is drawn once for the batch, [2,16,h,w] from the seed (one
    generator: crop 1's noise is not what seed alone draws for a batch of 1), and each lone run gets its own slice
    through `noise=`, so both sides start from the same point. They agree to float32 rounding (batched and single
    convolutions and matmuls round differently, ~1e-6), far below what the prompt changes (a crop run with the
    other prompt differs by ~0.07): the tolerance 1e-5 tells the two apart."""
    assert crops.image.shape[0] == 2
    lh, lw = crops.image.shape[1] // 8, crops.image.shape[2] // 8
    noise = initial_noise((2, 16, lh, lw), SEED, "cpu", torch.float32)
    batch = _sample(flux_stack, "\n---\n".join(PROMPTS), crops.image, crops.mask, noise)
    assert batch.shape == (2, 16, lh, lw)
    for k in range(2):
        alone = _sample(flux_stack, PROMPTS[k], crops.image[k : k + 1], crops.mask[k : k + 1], noise[k : k + 1])
        torch.testing.assert_close(batch[k : k + 1], alone, rtol=0, atol=1e-5)
        other = _sample(flux_stack, PROMPTS[1 - k], crops.image[k : k + 1], crops.mask[k : k + 1], noise[k : k + 1])
        assert float((other - alone).abs().max()) > 1e-2, "the tiny model must respond to the prompt"


@needs_tokenizers
def test_prompt_k_reaches_crop_k_only(flux_stack, crops):
    """In one batch, changing the second prompt leaves crop 0 bit for bit unchanged (same batch size, same inputs in
    row 0) and changes crop 1; one prompt for both crops equals that prompt written twice."""
    kw = {"steps": STEPS, "seed": SEED}
    cond = flux_fill.build_fill_condition(flux_stack["vae"], masks.prepare_image_and_mask(crops.image, crops.mask))

    def run(prompt):
        text = flux_fill.encode_prompt(flux_stack["clip_l"], flux_stack["t5"], prompt)
        return flux_fill.sample_flux_fill(flux_stack["transformer"], text, cond, **kw).latents

    mine, changed, shared = run("\n---\n".join(PROMPTS)), run(f"{PROMPTS[0]}\n---\na wooden door"), run(PROMPTS[0])
    assert torch.equal(mine[0], changed[0])
    assert float((mine[1] - changed[1]).abs().max()) > 1e-2
    torch.testing.assert_close(run(f"{PROMPTS[0]}\n---\n{PROMPTS[0]}"), shared, rtol=0, atol=1e-6)


# ---- (d) a count that fits neither one prompt nor the crops ---------------------------------------------------


@needs_tokenizers
def test_three_prompts_for_two_crops_are_refused_before_any_step(flux_stack, crops, monkeypatch):
    cond = flux_fill.build_fill_condition(flux_stack["vae"], masks.prepare_image_and_mask(crops.image, crops.mask))
    text = flux_fill.encode_prompt(flux_stack["clip_l"], flux_stack["t5"], "a\n---\nb\n---\nc")
    assert text.t5_hidden.shape[0] == 3

    def no_step(*args, **kwargs):
        raise AssertionError("the transformer ran")

    monkeypatch.setattr(flux_stack["transformer"].model, "forward", no_step)
    steps = []
    with pytest.raises(FillScopeInputError) as e:
        flux_fill.sample_flux_fill(flux_stack["transformer"], text, cond, steps=2, callback=lambda i, n: steps.append(i))
    assert e.value.input_name == "text" and steps == []
    assert "batch 3 for 2 images" in e.value.problem
    assert e.value.fix == "give one prompt, or one per region/image separated by lines ---."


# ---- (e) the prompt nodes -------------------------------------------------------------------------------------


NODE_CHECK = """
import json, sys, types
import torch
sys.path.insert(0, {comfy!r})
pkg = types.ModuleType("FillScope"); pkg.__path__ = [{repo!r}]; sys.modules["FillScope"] = pkg
from FillScope.nodes import text as T
from FillScope.fillscope.errors import FillScopeInputError
from FillScope.fillscope.pipelines import flux_fill
from FillScope.fillscope.text import load_clip_l, load_t5
from FillScope.fillscope.trace.records import ShapeRecorder
out = {{}}
for cls in (T.FluxPrompt, T.SD3Prompt, T.Qwen3Encode):
    schema = cls.define_schema()
    tip = next(i for i in schema.inputs if i.id == "text").tooltip
    rec = ShapeRecorder(schema.node_id)
    cls.prepare(rec, text="one\\n---\\ntwo\\n---\\nthree")
    one = ShapeRecorder(schema.node_id)
    cls.prepare(one, text="one prompt")
    try:
        cls.prepare(ShapeRecorder(schema.node_id), text="one\\n---\\n")
        refused = None
    except FillScopeInputError as e:
        refused = e.input_name
    out[schema.node_id] = {{"tip": tip, "facts": rec.record["facts"], "one": one.record["facts"], "refused": refused}}
folder = {folder!r}
clip_l, t5 = load_clip_l(folder, dtype="fp32", device="cpu"), load_t5(folder, dtype="fp32", device="cpu")
text = "a red brick chimney\\n---\\na blue glass window"
rec = ShapeRecorder("FillScopeFluxPrompt")
node = T.FluxPrompt.run(rec, clip_l, t5, text, 512)
engine = flux_fill.encode_prompt(clip_l, t5, text)
out["flux"] = {{"equal": torch.equal(node.t5_hidden, engine.t5_hidden) and torch.equal(node.pooled, engine.pooled),
               "shapes": {{t["name"]: t["shape"] for t in rec.record["tensors"]}}}}
print(json.dumps(out))
"""


@needs_tokenizers
@pytest.mark.skipif(not comfyui_installed(), reason="ComfyUI is not installed (make setup)")
def test_prompt_nodes_count_refuse_and_explain(flux_stack):
    code = NODE_CHECK.format(comfy=str(comfyui_path()), repo=str(REPO), folder=str(flux_stack["folder"]))
    res = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for node_id in ("FillScopeFluxPrompt", "FillScopeSD3Prompt", "FillScopeQwen3Encode"):
        got = out[node_id]
        assert got["facts"] == {"prompts": 3} and got["one"] == {} and got["refused"] == "text", node_id
        assert "separated by a line holding only ---" in got["tip"], node_id
        assert "regions top to bottom by the top edge of each hole, equal tops left to right" in got["tip"], node_id
    assert out["flux"]["equal"]
    assert out["flux"]["shapes"]["encoder_hidden_states"][0] == 2 and out["flux"]["shapes"]["t5.hidden"][0] == 2
