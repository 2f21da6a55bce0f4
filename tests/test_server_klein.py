"""FillScope's FLUX.2 [klein] nodes in a real ComfyUI 0.3.75 server: the shipped klein workflows through POST /prompt
on a tiny klein (the published single-file names in the model folders, tests/conftest.py), the same image as the
engine's klein.run on the same weights as a diffusers folder, the meta trace's production shapes, and bad input that
must fail clearly, each followed by a prompt that succeeds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_klein import build_tiny_klein_folder, qwen_bpe_dir
from workflow_helpers import image_saver, load_api, node_id, shapes_doc, tensors, with_dtype, with_synthetic_image

from server_checks import assert_still_serving, failed_run, next_seed, saved_pixels, small_image
from fillscope.masks import paste_back, prepare_image_and_mask, synthetic_image_and_mask
from fillscope.pipelines import klein

pytestmark = pytest.mark.server

KLEIN_NODES = {
    "FillScopeLoadQwen3": ["source", "variant", "dtype"],  # + device, placeholder_seed, memory: optional, advanced
    "FillScopeLoadKleinTransformer": ["source", "variant", "dtype"],  # distilled / base: the sampler's model_type
    "FillScopeQwen3Encode": ["qwen3", "text"],
    "FillScopeKleinInpaintCondition": ["vae", "image", "mask", "invert_mask", "threshold", "grow", "feather",
                                       "size_mode", "token_mask"],
    "FillScopeKleinEditCondition": ["vae", "image", "width", "height"],
    "FillScopeKleinSampler": ["positive", "condition", "seed", "steps", "guidance", "strength",
                              "model_type"],  # transformer or model: optional, exactly one wired
}
FILES = {"FillScopeLoadQwen3": "text_encoders/qwen_3_4b.safetensors",
         "FillScopeLoadKleinTransformer": "diffusion_models/flux-2-klein-4b.safetensors",
         "FillScopeLoadVAE": "vae/flux2-vae.safetensors"}
# tiny klein repositories next to the single files: the same weights as those (seed 0), a base model, and a Qwen3 of
# another width (hidden 48 -> 144 channels; the files' is 32 -> 96): the stand-in for 9B's Qwen3-8B
FOLDERS = {"FLUX.2-klein-4B": {}, "FLUX.2-klein-base-4B": {"distilled": False},
           "FLUX.2-klein-wide-tiny": {"qwen_hidden": 48}}
W, H = 128, 96  # tests/conftest.py's fillscope_example.png


@pytest.fixture(scope="module")
def server(served_models, comfy_models_dir):
    for name, options in FOLDERS.items():
        folder = comfy_models_dir / "diffusers" / name
        if not (folder / "model_index.json").is_file():
            build_tiny_klein_folder(folder, seed=0, **options)
    return served_models


@pytest.fixture(scope="module")
def engine_stack(server, comfy_models_dir):
    """The engine on the tiny klein folder, in the workflows' dtype (bf16) on the CPU, as the server runs."""
    return klein.load_stack(str(comfy_models_dir / "diffusers" / "FLUX.2-klein-4B"), tokenizer_folders=(qwen_bpe_dir(),),
                            dtype="bf16", device="cpu")


def inpaint_prompt(steps=4, dtype="fp32", **changes):
    """klein_inpaint at `steps`, every loader in `dtype` (workflow_helpers.with_dtype; shipped: bf16, ~20x slower on a
    CPU without bf16 instructions): bf16 where the engine reference is bf16, fp32 where the dtype is not the point."""
    prompt = with_dtype(load_api("klein_inpaint"), dtype)
    prompt[node_id(prompt, "FillScopeKleinSampler")]["inputs"]["steps"] = steps
    for node, inputs in changes.items():
        prompt[node_id(prompt, node)]["inputs"].update(inputs)
    return prompt


def assert_klein_still_samples(server):
    """After the klein sampler refused its input: the shipped klein graph samples again (one step on a 32x32 image, a
    fresh seed: nothing answered from the cache)."""
    entry = server.run(small_image(inpaint_prompt(steps=1, FillScopeKleinSampler={"seed": next_seed()})), timeout=300)
    assert entry["status"]["status_str"] == "success"


def run_error(server, prompt) -> str:
    return str(failed_run(server, prompt))


def save_node(prompt, key, source, prefix):
    prompt[key] = {"class_type": "SaveImage", "inputs": {"images": source, "filename_prefix": f"fillscope/{prefix}"}}


def as_saved(image: torch.Tensor) -> np.ndarray:
    """IMAGE [1,H,W,3] -> the uint8 pixels ComfyUI's SaveImage writes."""
    return np.clip(255.0 * image[0].float().numpy(), 0, 255).astype(np.uint8)


def load_like_comfy(server, name="fillscope_example.png"):
    """(IMAGE [1,H,W,3], MASK [1,H,W]) as ComfyUI's LoadImage gives them: RGB / 255, mask = 1 - alpha."""
    rgba = np.asarray(Image.open(server.input_dir / name).convert("RGBA")).astype(np.float32) / 255.0
    return torch.from_numpy(rgba[..., :3]).unsqueeze(0), 1.0 - torch.from_numpy(rgba[..., 3]).unsqueeze(0)


def test_object_info_lists_the_klein_nodes_and_files(server):
    info = server.object_info()
    for name, inputs in KLEIN_NODES.items():
        assert info[name]["input_order"]["required"] == inputs, name
        assert info[name]["category"].startswith("FillScope")
    assert info["FillScopeKleinSampler"]["input_order"]["optional"] == [
        "transformer", "model", "negative", "soft_mask", "step_cache", "cache_threshold"]
    assert info["FillScopeKleinInpaintCondition"]["input_order"]["optional"] == ["masked_fill", "reference"]
    assert info["FillScopeKleinSampler"]["output"] == ["FS_LATENT", "STRING", "LATENT"]
    assert info["FillScopeQwen3Encode"]["output"] == ["FS_KLEIN_TEXT", "STRING"]
    assert info["FillScopeLoadKleinTransformer"]["input"]["optional"]["storage"][1]["options"] == ["as loaded", "fp8_e4m3fn"]
    assert "flux2" in info["FillScopeLoadVAE"]["input"]["required"]["kind"][1]["options"]
    for node, source in FILES.items():
        options = info[node]["input"]["required"]["source"][1]["options"]
        assert source in options and "FLUX.2-klein-4B" in options, (node, source)


def test_inpaint_workflow_equals_the_engine_and_keeps_unmasked_pixels(server, engine_stack):
    """The shipped klein_inpaint (single files, bf16, 4 steps, seed 0) through the server = klein.run on the same
    weights from a diffusers folder, pixel for pixel; outside the mask the result is the source, bit for bit."""
    prompt = inpaint_prompt(dtype="bf16")  # as shipped: the engine reference (engine_stack) is bf16
    save_node(prompt, "90", [node_id(prompt, "FillScopeVAEDecode"), 0], "klein_generated")
    entry = server.run(prompt, timeout=600)

    image, mask = load_like_comfy(server)
    prepared = prepare_image_and_mask(image, mask)
    ours = klein.run(engine_stack, "a red brick fireplace", prepared, steps=4, seed=0)
    pasted = paste_back(ours.image, prepared.source, prepared.paste_mask)
    generated = saved_pixels(server, entry, "90")
    result = saved_pixels(server, entry, image_saver(prompt))
    assert result.shape == generated.shape == (H, W, 3)
    assert np.array_equal(generated, as_saved(ours.image))
    assert np.array_equal(result, as_saved(pasted))

    keep = mask[0].numpy() == 0
    assert keep.any() and (~keep).any()
    assert np.array_equal(result[keep], as_saved(image)[keep])  # unmasked pixels: the source, bit for bit
    assert not np.array_equal(result[~keep], as_saved(image)[~keep])  # the hole was repainted

    text = tensors(shapes_doc(entry, prompt, "FillScopeQwen3Encode"))
    assert text["prompt_embeds"]["shape"] == [1, 512, 96]  # 3 x the tiny Qwen3's hidden 32
    sampler = shapes_doc(entry, prompt, "FillScopeKleinSampler")
    assert tensors(sampler)["transformer.input"]["shape"] == [1, 2 * 48, 128]  # 48 noisy + 48 source tokens
    assert tensors(sampler)["transformer.output.kept"]["shape"] == [1, 48, 128]
    facts = sampler["node"]["facts"]
    assert facts["steps_run"] == 4 and facts["cfg"] is False and facts["model type"].startswith("distilled")
    paste = shapes_doc(entry, prompt, "FillScopePasteBack")["node"]["facts"]
    assert paste["kept pixels (exact source values)"] == f"{int(keep.sum()):,}"


def test_edit_workflow_runs_and_equals_the_engine(server, engine_stack):
    prompt = load_api("klein_edit")
    entry = server.run(prompt, timeout=600)
    image, _ = load_like_comfy(server)
    ours = klein.run_edit(engine_stack, "turn this room into a loose watercolour painting", [image], steps=4, seed=0)
    out = saved_pixels(server, entry, image_saver(prompt))
    assert out.shape == (H, W, 3)
    assert np.array_equal(out, as_saved(ours.image))
    cond = shapes_doc(entry, prompt, "FillScopeKleinEditCondition")["node"]
    assert cond["facts"]["output size"] == f"{W}x{H}"
    assert tensors(shapes_doc(entry, prompt, "FillScopeKleinSampler"))["transformer.input"]["shape"] == [1, 96, 128]


def test_meta_trace_workflow_reports_the_production_shapes(server):
    prompt = load_api("klein_inpaint_meta_trace")
    sampler = prompt[node_id(prompt, "FillScopeKleinSampler")]["inputs"]
    assert sampler["steps"] == 4  # as shipped; run here at 1: no shape below depends on it, and every step is a
    sampler["steps"] = 1  # full-size klein forward on meta weights (seconds of Python meta kernels)
    entry = server.run(prompt, timeout=300)
    text = tensors(shapes_doc(entry, prompt, "FillScopeQwen3Encode"))
    assert text["prompt_embeds"]["shape"] == [1, 512, 7680]
    assert text["prompt_embeds"]["device"] == "meta" and text["prompt_embeds"]["provenance"] == "measured"
    cond = tensors(shapes_doc(entry, prompt, "FillScopeKleinInpaintCondition"))
    assert cond["source_latents"]["shape"] == [1, 128, 64, 64]
    assert cond["reference_tokens"]["shape"] == [1, 4096, 128] and cond["token_mask"]["shape"] == [1, 4096, 1]
    sampler = tensors(shapes_doc(entry, prompt, "FillScopeKleinSampler"))
    assert sampler["transformer.input"]["shape"] == [1, 8192, 128]
    assert sampler["transformer.output.kept"]["shape"] == [1, 4096, 128]
    assert sampler["img_ids"]["shape"] == [1, 8192, 4] and sampler["txt_ids"]["shape"] == [1, 512, 4]
    decode = shapes_doc(entry, prompt, "FillScopeVAEDecode")
    assert tensors(decode)["decoded_image"]["shape"] == [1, 3, 1024, 1024]
    assert any("meta weights" in w for w in decode["node"]["warnings"])
    loader = shapes_doc(entry, prompt, "FillScopeLoadKleinTransformer")["node"]["facts"]
    assert loader["parameters (unique)"] == "3,875,544,576" and loader["variant"] == "klein-4b"
    rows = entry["outputs"][node_id(prompt, "FillScopeShapesReport")]["fillscope_boundaries"]
    assert {"prompt_embeds", "transformer.input"} <= {r["tensor"] for r in rows}  # the klein boundary table


def test_text_encoder_of_another_width_is_a_clear_error_naming_it(server):
    """A Qwen3 whose stacked states are 144 wide (hidden 48) wired into a transformer reading 96: refused by the
    sampler before any step, naming the encoder it came from and the one that fits."""
    prompt = inpaint_prompt(FillScopeLoadQwen3={"source": "FLUX.2-klein-wide-tiny"})
    msg = run_error(server, prompt)
    assert "input 'positive'" in msg and "FillScopeKleinSampler" in msg
    assert "a Qwen3 encoder of hidden size 48 (144 channels" in msg and "reads 96 channels" in msg
    assert "it needs the text of a Qwen3 encoder of hidden size 32" in msg and "Qwen3-4B" in msg and "Fix:" in msg
    assert_klein_still_samples(server)


@pytest.mark.parametrize("size_mode,grid", [("pad", (96, 128)), ("crop", (80, 112))])
def test_size_not_a_multiple_of_16_follows_size_mode(server, size_mode, grid):
    prompt = with_synthetic_image(inpaint_prompt(steps=2, FillScopeKleinInpaintCondition={"size_mode": size_mode}),
                                  120, 90, mask_fraction=0.5)
    entry = server.run(prompt, timeout=300)
    cond = shapes_doc(entry, prompt, "FillScopeKleinInpaintCondition")
    assert any(f"120x90 {'padded' if size_mode == 'pad' else 'center-cropped'}" in n for n in cond["node"]["notes"]), cond["node"]["notes"]
    assert tensors(cond)["source_latents"]["shape"] == [1, 128, grid[0] // 16, grid[1] // 16]
    assert saved_pixels(server, entry, image_saver(prompt)).shape == (90, 120, 3)


def test_empty_mask_returns_the_source(server):
    prompt = with_synthetic_image(inpaint_prompt(), W, H, mask_fraction=0.0)
    entry = server.run(prompt, timeout=300)
    sampler = shapes_doc(entry, prompt, "FillScopeKleinSampler")
    assert any("mask is empty" in w for w in sampler["node"]["warnings"])
    assert "transformer.input" not in tensors(sampler)  # no denoiser step ran
    source = as_saved(synthetic_image_and_mask(W, H, 0.0)[0])
    assert np.array_equal(saved_pixels(server, entry, image_saver(prompt)), source)
    assert_still_serving(server)


def test_base_model_with_guidance_needs_a_negative(server):
    """klein base (model_index.json is_distilled false) with guidance 4: refused before sampling without a negative
    prompt; with one (an empty prompt, as diffusers) it runs CFG, two transformer calls a step."""
    prompt = inpaint_prompt(steps=2, FillScopeLoadKleinTransformer={"source": "FLUX.2-klein-base-4B"})
    msg = run_error(server, prompt)
    assert "input 'negative'" in msg and "base klein model" in msg and "is_distilled" in msg
    assert "guidance is 4.0 > 1" in msg and "Fix:" in msg and "Qwen3 Encode" in msg

    prompt["80"] = {"class_type": "FillScopeQwen3Encode", "inputs": {"qwen3": [node_id(prompt, "FillScopeLoadQwen3"), 0],
                                                                    "text": ""}}
    prompt[node_id(prompt, "FillScopeKleinSampler")]["inputs"]["negative"] = ["80", 0]
    entry = server.run(prompt, timeout=300)
    facts = shapes_doc(entry, prompt, "FillScopeKleinSampler")["node"]["facts"]
    assert facts["cfg"] is True and facts["transformer_calls"] == 4 and facts["model type"].startswith("base")

    del prompt[node_id(prompt, "FillScopeKleinSampler")]["inputs"]["negative"]  # the sampler's override wins
    prompt[node_id(prompt, "FillScopeKleinSampler")]["inputs"]["model_type"] = "distilled"
    facts = shapes_doc(server.run(prompt, timeout=300), prompt, "FillScopeKleinSampler")["node"]["facts"]
    assert facts["cfg"] is False and "sampler's model_type input" in facts["model type"]


def test_workflow_files_declare_the_published_model_files():
    """As ComfyUI's own templates: each loader's properties.models (name, url, directory) and, since a FillScope
    source is '<folder>/<file>' (the canvas matches properties.models by widget value), the workflow's models list."""
    from workflow_helpers import EXAMPLES

    for name in ("klein_inpaint", "klein_edit"):
        ui = json.loads((EXAMPLES / f"{name}.json").read_text())
        declared = {n["type"]: n["properties"]["models"] for n in ui["nodes"] if "models" in n["properties"]}
        assert set(declared) == set(FILES)
        for node, models in declared.items():
            (model,) = models
            assert FILES[node] == f"{model['directory']}/{model['name']}"
            assert model["url"].startswith("https://huggingface.co/") and model["url"].endswith("/" + model["name"])
        assert sorted(m["name"] for m in ui["models"]) == sorted(m[0]["name"] for m in declared.values())
