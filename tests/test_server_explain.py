"""Shape failures of ComfyUI's own nodes explained by the wires into the failing node (nodes/wire_explain.py, issue 34
first part), through a real server, on ComfyUI's own "Flux Inpaint" template (tests/comfy_templates.py: its loaders
swapped for tiny builds of ComfyUI's classes) with one part swapped for another family's, as users do by mistake:

- a CLIP of another family (SD3's, 4096 wide) into FLUX: KSampler fails "mat1 and mat2 shapes cannot be multiplied";
- SD3's MMDiT with FLUX's CLIP: the same message, on the pooled vector (CLIP-L's 32 against CLIP-L ++ CLIP-G);
- a 4-channel latent (a 4-channel VAE's encode) into FLUX (16): the model's input width is the sum with the inpaint
  condition;
- EmptyLatentImage's 4 channels into a 16-channel VAE's decode: a convolution's channel error;
each names the producing nodes, their widths and the file or folder they were loaded from, and the fix, at
GET /fillscope/explain and in the server log after ComfyUI's traceback; ComfyUI's own error is unchanged. A failure
that is no shape error lists the shapes into the node and guesses nothing; a prompt that succeeds has no
explanation."""

from __future__ import annotations

import comfy_templates as ct
import pytest
from comfy_server import ComfyExecutionError

pytestmark = pytest.mark.server

TEMPLATE = "flux_fill_inpaint_example"


@pytest.fixture(scope="module")
def base(templates_server):
    return ct.swapped(TEMPLATE, templates_server.object_info())


def fails(templates_server, prompt) -> tuple[dict, dict]:
    """(ComfyUI's execution_error, FillScope's explanation) of a prompt that fails."""
    with pytest.raises(ComfyExecutionError) as info:
        templates_server.run(prompt, timeout=600)
    prompt_id, entry = info.value.prompt_id, info.value.entry
    error = next(m[1] for m in entry["status"]["messages"] if m[0] == "execution_error")
    explanation = templates_server.get_json(f"/fillscope/explain?prompt_id={prompt_id}")["explanation"]
    assert explanation is not None and explanation["message"] == error["exception_message"]
    print(f"\n[explain] {error['node_type']}: {error['exception_message'].strip()}\n  -> {explanation['fix']}")
    return error, explanation


def culprit(explanation: dict, input_name: str) -> dict:
    found = [c for c in explanation["culprits"] if c["input"] == input_name]
    assert found, (input_name, explanation["culprits"], explanation["inputs"])
    return found[0]


def test_a_clip_of_another_family_into_flux_names_the_clip_and_the_model(templates_server, base):
    prompt = {k: {**v, "inputs": dict(v["inputs"])} for k, v in base.items()}
    prompt["34"] = {"class_type": "NativeTemplateTestTinySD3CLIP", "inputs": {"folder": ct.SD3}}
    error, got = fails(templates_server, prompt)
    assert "mat1 and mat2 shapes cannot be multiplied" in error["exception_message"] and error["node_id"] == "3"
    assert got["kind"] == "matmul" and got["numbers"]["input width"] == 4096
    cond, model = culprit(got, "positive"), culprit(got, "model")
    assert cond["node"] == "38" and cond["source"][0] == {"node": "34", "class_type": "NativeTemplateTestTinySD3CLIP",
                                                          "inputs": {"folder": ct.SD3}}
    assert model["node"] == "39" and model["architecture"] == "FLUX.1 Fill"
    assert model["source"][0]["class_type"] == "NativeFillTestTinyFluxFill"
    width = model["facts"]["context width"]
    assert got["fix"].startswith(f"the CONDITIONING on 'positive' is 4096 wide (from NativeTemplateTestTinySD3CLIP "
                                 f"node 34); the MODEL from node 39 (FLUX.1 Fill) takes {width}-wide text")
    log = templates_server.log_text(since=templates_server.module_log_start)
    assert "[FillScope] explain: node 3 (KSampler) failed on shapes: " + got["fix"] in log


def test_flux_clip_into_sd3s_mmdit_names_the_4096_wide_model(templates_server):
    prompt = ct.swapped("sd3.5_simple_example", templates_server.object_info())
    prompt["34"] = {"class_type": "NativeTestTinyCLIP", "inputs": {"folder": ct.FLUX, "kind": "flux"}}
    for node in prompt.values():
        if node["class_type"] == "CLIPTextEncode":
            node["inputs"]["clip"] = ["34", 0]
    _, got = fails(templates_server, prompt)
    model = culprit(got, "model")  # ComfyUI's MMDiT embeds the pooled vector first: 80 wide here (CLIP-L ++ CLIP-G)
    assert model["architecture"] == "SD3" and got["numbers"]["input width"] == 32
    pooled = model["facts"]["pooled width"]
    assert got["fix"].startswith(f"the CONDITIONING on 'positive' is 32 wide (from NativeTestTinyCLIP node 34); the "
                                 f"MODEL from node 4 (SD3) takes {pooled}-wide pooled vector")


def test_a_4_channel_latent_into_flux_names_the_latent(templates_server, base):
    # not EmptyLatentImage: ComfyUI 0.3.75 gives an all-zero latent of the wrong channel count the model's channels
    # (comfy.sample.fix_empty_latent_channels); a 4-channel VAE's encode of the image is what fails
    prompt = {k: {**v, "inputs": dict(v["inputs"])} for k, v in base.items()}
    prompt["61"] = {"class_type": "NativeTestTinyTAESD", "inputs": {"seed": 0, "latent_channels": 4}}
    prompt["60"] = {"class_type": "VAEEncode", "inputs": {"pixels": ["17", 0], "vae": ["61", 0]}}
    prompt["3"]["inputs"]["latent_image"] = ["60", 0]
    _, got = fails(templates_server, prompt)
    latent = culprit(got, "latent_image")
    assert latent["node"] == "60" and latent["shapes"][0]["shape"] == [1, 4, 8, 8]
    assert got["fix"] == ("the LATENT on 'latent_image' from node 60 has 4 channels; the MODEL from node 39 (FLUX.1 "
                          "Fill) works on 16-channel latents: make the latent with EmptySD3LatentImage (16 channels: "
                          "SD3, FLUX.1), or use the model of the family that made it")
    model = culprit(got, "model")
    assert model["carries"] == ["model in channels 96 (x4 patched)"]
    called = {c["name"]: c["shape"] for c in model["called with"]}  # the call it failed in: 4 + 80 channels, not 96
    assert called["x (diffusion model in)"] == [1, 84, 8, 8]


def test_a_4_channel_latent_into_a_16_channel_vae_decode_names_both(templates_server, base):
    prompt = {"60": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
              "32": base["32"],
              "8": {"class_type": "VAEDecode", "inputs": {"samples": ["60", 0], "vae": ["32", 0]}},
              "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}}}
    error, got = fails(templates_server, prompt)
    assert got["kind"] == "conv channels" and error["node_id"] == "8"
    assert culprit(got, "vae")["source"][0]["inputs"] == {"folder": ct.FLUX}
    assert got["fix"].startswith("the LATENT on 'samples' from node 60 has 4 channels; the VAE from node 32 "
                                 "(AutoencoderKL) works on 16-channel latents")


def test_a_failure_that_is_no_shape_error_lists_the_inputs_and_guesses_nothing(templates_server):
    prompt = {"1": {"class_type": "EmptyImage", "inputs": {"width": 32, "height": 24, "batch_size": 1, "color": 0}},
              "2": {"class_type": "WiresTestFailOtherwise", "inputs": {"image": ["1", 0]}},
              "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}
    error, got = fails(templates_server, prompt)
    assert error["exception_message"].strip() == "the lamp ran out of oil"
    assert (got["kind"], got["culprits"], got["fix"]) == ("unrecognised", [], None)
    (inp,) = got["inputs"]
    assert (inp["input"], inp["node"], inp["shapes"]) == ("image", "1", [{"name": "image", "shape": [1, 24, 32, 3]}])


def test_a_prompt_that_succeeds_has_no_explanation(templates_server, base):
    entry = templates_server.run(base, timeout=600)
    answer = templates_server.get_json(f"/fillscope/explain?prompt_id={entry['prompt'][1]}")
    assert answer["explanation"] is None


def test_a_lora_for_another_family_loads_silently_and_its_wire_says_so(templates_server):
    """No error: ComfyUI loads what fits of a FLUX LoRA into SD3's MMDiT (nothing) and logs each key it could not put
    anywhere; the LoRA node's record carries the warning, and the Shapes Report shows it."""
    import native_templates as nt

    prompt = ct.swapped("sd3.5_simple_example", templates_server.object_info())
    sampler = next(k for k, v in prompt.items() if v["class_type"] == "KSampler")
    prompt["70"] = {"class_type": "LoraLoaderModelOnly", "inputs": {"model": prompt[sampler]["inputs"]["model"],
                                                                    "lora_name": nt.LORA[1], "strength_model": 1.0}}
    prompt[sampler]["inputs"]["model"] = ["70", 0]
    prompt["900"] = {"class_type": "FillScopeShapesReport", "inputs": {"filename_prefix": "wires/lora",
                                                                       "after": [sampler, 0]}}
    entry = templates_server.run(prompt, timeout=600)
    record = templates_server.get_json(f"/fillscope/wires?prompt_id={entry['prompt'][1]}")["nodes"]["70"]
    (warning,) = record["warnings"]
    print(f"\n[explain] LoraLoaderModelOnly's wire: {warning}")
    assert "LoRA weight(s) not loaded" in warning and "another model family" in warning, warning
    assert int(warning.split()[0]) > 0
    assert "WARNING: " + warning in entry["outputs"]["900"]["text"][0]
