"""FillScope's SD3 ControlNet inpainting nodes in a real ComfyUI server: both shipped SD3 workflows through
POST /prompt, and the bad-input cases of the FLUX issue for the SD3 nodes, each followed by a good prompt."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from workflow_helpers import (
    image_saver,
    load_api,
    node_id,
    sd3_inpaint_prompt,
    shapes_doc,
    tensors,
    with_dtype,
    with_synthetic_image,
)
from comfy_server import ComfyExecutionError, ComfyPromptError
from server_checks import assert_still_serving, sd3_prompt, small_image


pytestmark = pytest.mark.server










@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def assert_sd3_still_runs(server):
    """After a failed SD3 load: the shipped SD3 ControlNet graph on the tiny models loads, samples and saves again (one
    step on a 32x32 image, a fresh seed: nothing answered from the cache)."""
    assert server.run(small_image(sd3_prompt(steps=1)), timeout=300)["status"]["status_str"] == "success"


def test_sd3_meta_trace_reports_the_contract_shapes(server):
    prompt = load_api("sd3_controlnet_meta_trace")
    entry = server.run(prompt, timeout=300)
    rows = {r["tensor"]: r for r in entry["outputs"][node_id(prompt, "FillScopeShapesReport")]["fillscope_boundaries"]}
    expected = {
        "clip_l.penultimate": [1, 77, 768], "clip_l.text_embeds": [1, 768], "clip_g.penultimate": [1, 77, 1280],
        "clip_g.text_embeds": [1, 1280], "t5.hidden": [1, 256, 4096], "clip_lg.padded": [1, 77, 4096],
        "joint_context": [1, 333, 4096], "pooled": [1, 2048], "initial_noise": [1, 16, 128, 128],
        "inpaint_condition": [1, 17, 128, 128], "controlnet.residual[0]": [2, 4096, 1536],
        "controlnet.residual[22]": [2, 4096, 1536], "velocity.guided": [1, 16, 128, 128],
        "decoded_image": [1, 3, 1024, 1024],
    }
    for name, shape in expected.items():
        assert rows[name]["shape"] == shape, name
        assert rows[name]["provenance"] == "measured" and rows[name]["device"] == "meta"
    sampler = shapes_doc(entry, prompt, "FillScopeSD3ControlNetInpaintSampler")["node"]["facts"]
    assert sampler["controlnet_residuals"] == 23 and sampler["residual_mapping"] == "one_to_one"


def test_sd3_inpaint_workflow_runs_on_the_tiny_folders(server):
    prompt = sd3_inpaint_prompt()
    sampler = prompt[node_id(prompt, "FillScopeSD3ControlNetInpaintSampler")]["inputs"]
    assert sampler["steps"] == 28 and sampler["cfg"] == 7.0  # as shipped; run here at 2 steps
    sampler["steps"] = 2
    # the models as shipped (bf16), but the VAE in fp32: bf16 convolutions on a CPU without bf16 instructions are ~20x
    # slower (most of this test's time), and nothing here depends on the VAE's dtype
    prompt[node_id(prompt, "FillScopeLoadVAE")]["inputs"]["dtype"] = "fp32"
    entry = server.run(prompt, timeout=900)
    saved = entry["outputs"][image_saver(prompt)]["images"][0]
    png = Image.open(io.BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"])))
    assert png.size == (128, 96)
    cond = tensors(shapes_doc(entry, prompt, "FillScopeSD3InpaintCondition"))
    assert cond["inpaint_condition"]["shape"] == [1, 17, 12, 16] and cond["inpaint_condition"]["device"] == "cpu"
    facts = shapes_doc(entry, prompt, "FillScopeSD3ControlNetInpaintSampler")["node"]["facts"]
    assert facts["steps_run"] == 2 and facts["cfg"] == 7.0  # every step asked for ran, with the shipped CFG


def fp32_inpaint():
    """sd3_controlnet_inpaint on the tiny SD3 with every loader in fp32 (workflow_helpers.with_dtype): for the tests
    whose point is not the dtype (test_sd3_inpaint_workflow_runs_on_the_tiny_folders runs it as shipped: bf16 but its
    VAE)."""
    return with_dtype(sd3_inpaint_prompt(), "fp32")


def test_sd3_image_mask_size_mismatch_is_a_clear_error(server):
    prompt = fp32_inpaint()
    prompt[node_id(prompt, "LoadImage")]["inputs"]["image"] = "fillscope_rgb.png"
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    assert "input 'mask'" in str(e.value) and "64x64" in str(e.value) and "Fix:" in str(e.value)
    assert_still_serving(server)


def test_missing_controlnet_folder_is_refused_at_validation(server):
    prompt = sd3_inpaint_prompt()
    prompt[node_id(prompt, "FillScopeLoadSD3InpaintControlNet")]["inputs"]["source"] = "SD3-Controlnet-missing"
    with pytest.raises(ComfyPromptError) as e:
        server.queue(prompt)
    assert "SD3-Controlnet-missing" in json.dumps(e.value.body) and "Fix:" in json.dumps(e.value.body)
    assert_still_serving(server)


def test_flux_repository_on_the_sd3_transformer_loader_names_what_it_is(server):
    prompt = fp32_inpaint()
    prompt[node_id(prompt, "FillScopeLoadSD3Transformer")]["inputs"]["source"] = "FLUX.1-Fill-dev"
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    msg = str(e.value)
    assert "FLUX.1 Fill [dev] repository" in msg and "which has no SD3 transformer" in msg and "Fix:" in msg
    assert_sd3_still_runs(server)


def test_flux_vae_kind_on_an_sd3_repository_is_refused(server):
    prompt = fp32_inpaint()
    prompt[node_id(prompt, "FillScopeLoadVAE")]["inputs"].update(source="stable-diffusion-3-medium-diffusers", kind="flux")
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    assert "which has no FLUX VAE (it has the SD3 VAE)" in str(e.value) and "kind to sd3" in str(e.value)
    assert_sd3_still_runs(server)


def test_sd3_odd_size_runs_padded_and_says_so(server):
    """127x95 on the tiny SD3 (fp32, one step): padded to 128x96, said on the condition; the output keeps the odd
    size. (It ran the meta trace at 1023x777 before, padded to 1024x784: the same rule, and a full-size SD3 forward
    on meta weights costs seconds of Python meta kernels.)"""
    prompt = with_synthetic_image(sd3_prompt(steps=1), 127, 95, 0.5)
    entry = server.run(prompt, timeout=300)
    cond = shapes_doc(entry, prompt, "FillScopeSD3InpaintCondition")
    assert any("127x95 padded" in n for n in cond["node"]["notes"])
    assert tensors(cond)["inpaint_condition"]["shape"] == [1, 17, 12, 16]  # the padded 128x96 at 1/8
    assert tensors(shapes_doc(entry, prompt, "FillScopeVAEDecode"))["image"]["shape"] == [1, 95, 127, 3]


def test_sd3_empty_mask_returns_the_input_with_a_warning(server):
    prompt = with_synthetic_image(fp32_inpaint(), 32, 32, mask_fraction=0.0)  # any size: the smallest
    entry = server.run(prompt, timeout=300)
    sampler = shapes_doc(entry, prompt, "FillScopeSD3ControlNetInpaintSampler")
    assert any("mask is empty" in w for w in sampler["node"]["warnings"])
    assert "transformer.input" not in tensors(sampler)
    assert_still_serving(server)
