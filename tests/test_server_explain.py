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


# --- the families users mix up, on tiny builds of ComfyUI's own classes (tests/comfy_nodes/
# fillscope_explain_test_nodes.py: SD1.5 / SDXL UNets and CLIPs, ControlNets, a CLIP vision model, Redux, FLUX.1 dev)

def sampled(model: str, clip: str) -> dict:
    """ComfyUI's text-to-image graph on a tiny UNet of family `model` and a tiny CLIP of family `clip`."""
    return {"1": {"class_type": "ExplainTestTinyModel", "inputs": {"family": model, "seed": 0}},
            "2": {"class_type": "ExplainTestTinyTextEncoder", "inputs": {"family": clip, "seed": 0}},
            "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red fox", "clip": ["2", 0]}},
            "4": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["2", 0]}},
            "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
            "6": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "seed": 0, "steps": 1, "cfg": 2.0,
                                                       "sampler_name": "euler", "scheduler": "normal",
                                                       "positive": ["3", 0], "negative": ["4", 0],
                                                       "latent_image": ["5", 0], "denoise": 1.0}},
            "7": {"class_type": "PreviewAny", "inputs": {"source": ["6", 0]}}}


def test_an_sdxl_clip_into_an_sd15_unet_names_the_clip_and_its_width(templates_server):
    error, got = fails(templates_server, sampled("sd15", "sdxl"))
    assert error["node_id"] == "6" and got["numbers"]["input width"] == 80  # CLIP-L 32 ++ CLIP-G 48
    assert culprit(got, "model")["architecture"] == "SD1.5"
    assert got["fix"].startswith("the CONDITIONING on 'positive' is 80 wide (from ExplainTestTinyTextEncoder node 2); "
                                 "the MODEL from node 1 (SD1.5) takes 32-wide text: encode the prompt with the CLIP")


def test_an_sd15_clip_into_an_sdxl_unet_names_the_pooled_vector_and_the_size_embeddings(templates_server):
    error, got = fails(templates_server, sampled("sdxl", "sd15"))
    # SDXL's label embedding takes the pooled CLIP-G vector ++ six 256-wide size embeddings: 48 + 1536 = 1584;
    # SD1.5's CLIP gives a 32-wide pooled vector: 1568
    assert (got["numbers"]["input width"], got["numbers"]["layer width"]) == (1568, 1584)
    assert "pooled width 32 (+1536 size embeddings)" in " ".join(culprit(got, "positive")["carries"])
    assert culprit(got, "model")["architecture"] == "SDXL"
    assert got["fix"].startswith("the CONDITIONING on 'positive' is 32 wide (from ExplainTestTinyTextEncoder node 2); "
                                 "the MODEL from node 1 (SDXL) takes 48-wide pooled vector")


def test_an_sd15_controlnet_on_sdxl_names_the_controlnet_not_the_clip(templates_server):
    prompt = sampled("sdxl", "sdxl")
    prompt["8"] = {"class_type": "ExplainTestTinyControlNet", "inputs": {"family": "sd15", "seed": 0}}
    prompt["9"] = {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}}
    prompt["10"] = {"class_type": "ControlNetApplyAdvanced", "inputs": {
        "positive": ["3", 0], "negative": ["4", 0], "control_net": ["8", 0], "image": ["9", 0], "strength": 1.0,
        "start_percent": 0.0, "end_percent": 1.0}}
    prompt["6"]["inputs"].update(positive=["10", 0], negative=["10", 1])
    _, got = fails(templates_server, prompt)
    assert "ControlNet context width 32" in culprit(got, "positive")["carries"]
    assert got["fix"] == ("the ControlNet on 'positive' (applied by ControlNetApplyAdvanced node 10; loaded by "
                          "ExplainTestTinyControlNet node 8) takes 32-wide text; the CONDITIONING it is applied with "
                          "is 80 wide; the MODEL from node 1 is SDXL: load a ControlNet made for this model's family")


def test_a_clip_vision_of_another_width_into_redux_names_the_clip_vision(templates_server):
    prompt = {"2": {"class_type": "ExplainTestTinyTextEncoder", "inputs": {"family": "sd15", "seed": 0}},
              "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red fox", "clip": ["2", 0]}},
              "11": {"class_type": "ExplainTestTinyCLIPVision", "inputs": {"width": 48, "seed": 0}},
              "12": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
              "13": {"class_type": "CLIPVisionEncode", "inputs": {"clip_vision": ["11", 0], "image": ["12", 0],
                                                                  "crop": "center"}},
              "14": {"class_type": "ExplainTestTinyRedux", "inputs": {"image_width": 32, "text_width": 32, "seed": 0}},
              "15": {"class_type": "StyleModelApply", "inputs": {
                  "conditioning": ["3", 0], "style_model": ["14", 0], "clip_vision_output": ["13", 0],
                  "strength": 1.0, "strength_type": "multiply"}},
              "16": {"class_type": "PreviewAny", "inputs": {"source": ["15", 0]}}}
    error, got = fails(templates_server, prompt)
    assert error["node_id"] == "15" and culprit(got, "style_model")["carries"] == ["image width 32"]
    assert got["fix"] == ("the CLIP_VISION_OUTPUT on 'clip_vision_output' from node 13 is 48 wide (encoded by the CLIP "
                          "vision of ExplainTestTinyCLIPVision node 11); the STYLE_MODEL "
                          "from node 14 takes 32-wide image features: encode the image with the CLIP vision model "
                          "this style model was made for (FLUX.1 Redux: sigclip_vision_patch14_384)")


def test_two_images_of_different_sizes_into_one_latent_batch_name_both_and_the_dimension(templates_server):
    prompt = {"20": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
              "21": {"class_type": "EmptyImage", "inputs": {"width": 40, "height": 48, "batch_size": 1, "color": 0}},
              "22": {"class_type": "NativeTestTinyTAESD", "inputs": {"seed": 0, "latent_channels": 4}},
              "23": {"class_type": "VAEEncode", "inputs": {"pixels": ["20", 0], "vae": ["22", 0]}},
              "24": {"class_type": "VAEEncode", "inputs": {"pixels": ["21", 0], "vae": ["22", 0]}},
              "25": {"class_type": "LatentConcat", "inputs": {"samples1": ["23", 0], "samples2": ["24", 0],
                                                              "dim": "x"}},
              "26": {"class_type": "PreviewAny", "inputs": {"source": ["25", 0]}}}
    error, got = fails(templates_server, prompt)
    assert got["kind"] == "cat" and error["node_id"] == "25"
    assert culprit(got, "samples1")["shapes"][0]["shape"] == [1, 4, 8, 8]
    assert culprit(got, "samples2")["shapes"][0]["shape"] == [1, 4, 6, 5]
    assert got["fix"] == ("the LATENTs on 'samples1' (node 23) and 'samples2' (node 24) differ in height (8 and 6): "
                          "bring them to one size first (ImageScale on the images, LatentUpscale on latents)")


def test_two_conditionings_of_different_widths_into_a_concat_name_both_encoders(templates_server):
    prompt = {"2": {"class_type": "ExplainTestTinyTextEncoder", "inputs": {"family": "sd15", "seed": 0}},
              "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red fox", "clip": ["2", 0]}},
              "30": {"class_type": "ExplainTestTinyTextEncoder", "inputs": {"family": "sdxl", "seed": 0}},
              "31": {"class_type": "CLIPTextEncode", "inputs": {"text": "in the snow", "clip": ["30", 0]}},
              "32": {"class_type": "ConditioningConcat", "inputs": {"conditioning_to": ["3", 0],
                                                                    "conditioning_from": ["31", 0]}},
              "33": {"class_type": "PreviewAny", "inputs": {"source": ["32", 0]}}}
    _, got = fails(templates_server, prompt)
    assert {c["input"] for c in got["culprits"]} == {"conditioning_to", "conditioning_from"}
    assert got["fix"].startswith("the CONDITIONINGs on 'conditioning_to' (node 3) and 'conditioning_from' (node 31) "
                                 "differ in width (32 and 80): they were encoded by text encoders of different "
                                 "families")


def warnings_of(templates_server, prompt) -> dict:
    """{node id: its record's warnings} of a prompt that runs."""
    entry = templates_server.run(prompt, timeout=600)
    nodes = templates_server.get_json(f"/fillscope/wires?prompt_id={entry['prompt'][1]}")["nodes"]
    return {k: r["warnings"] for k, r in nodes.items() if r.get("warnings")}


def test_flux_dev_with_inpaint_model_conditioning_warns_that_the_condition_is_dropped(templates_server, base):
    """No error: ComfyUI drops the inpaint condition for a model whose inputs are its latent's only (Flux.concat_cond);
    the wire from InpaintModelConditioning says so."""
    prompt = {k: {**v, "inputs": dict(v["inputs"])} for k, v in base.items()}
    loader = next(k for k, v in prompt.items() if v["class_type"] == "NativeFillTestTinyFluxFill")
    prompt[loader] = {"class_type": "ExplainTestTinyModel", "inputs": {"family": "flux_dev", "seed": 0}}
    inpaint = next(k for k, v in prompt.items() if v["class_type"] == "InpaintModelConditioning")
    got = warnings_of(templates_server, prompt)
    assert list(got) == [inpaint], got
    (warning,) = got[inpaint]
    print(f"\n[explain] InpaintModelConditioning's wire: {warning}")
    assert warning.startswith(f"inpaint condition dropped: the masked image and mask InpaintModelConditioning node "
                              f"{inpaint} put on 'positive' and 'negative' are not used by the MODEL of node ")
    assert "(FLUX.1 dev, 16 input channels: its latent's 16 only" in warning and "plain masked img2img" in warning
    log = templates_server.log_text(since=templates_server.module_log_start)
    assert f"[FillScope] wires: node {inpaint} (InpaintModelConditioning): inpaint condition dropped" in log


def test_the_flux_vae_in_an_sd3_graph_warns_on_the_vae_wire(templates_server):
    prompt = ct.swapped("sd3.5_simple_example", templates_server.object_info())
    prompt["50"] = {"class_type": "InspectTestTinyVAE", "inputs": {"folder": ct.FLUX}}
    decode = next(k for k, v in prompt.items() if v["class_type"] == "VAEDecode")
    prompt[decode]["inputs"]["vae"] = ["50", 0]
    got = warnings_of(templates_server, prompt)
    assert list(got) == ["50"], got
    (warning,) = got["50"]
    print(f"\n[explain] the FLUX.1 VAE's wire in SD3: {warning}")
    assert warning.startswith(f"VAE of another family: this VAE is FLUX.1's (its file or folder name '{ct.FLUX}' says "
                              "so); the graph's MODEL (node 4) is SD3, whose latents have the same 16 channels but "
                              "another scale (ComfyUI's SD3 latent format: scale 1.5305, shift 0.0609)")


def test_the_right_vae_and_an_inpaint_model_get_no_warning(templates_server, base):
    assert warnings_of(templates_server, base) == {}


def test_a_culprits_file_is_named_with_the_architecture_its_header_says(templates_server):
    """The culprit MODEL came through a LoRA whose safetensors header says it is SDXL's (kohya's
    ss_base_model_version): the explanation's source names the file and what it says; only the header is read."""
    from pathlib import Path

    import torch
    from safetensors.torch import save_file

    name = "explain_sdxl_style.safetensors"
    lora = Path(templates_server.models_dir) / "loras" / name
    lora.parent.mkdir(parents=True, exist_ok=True)
    save_file({"lora_unet_nowhere.lora_down.weight": torch.zeros(4, 8)}, str(lora),
              metadata={"ss_base_model_version": "sdxl_base_v1-0"})
    prompt = sampled("sd15", "sdxl")
    prompt["40"] = {"class_type": "LoraLoaderModelOnly", "inputs": {"model": ["1", 0], "lora_name": name,
                                                                    "strength_model": 1.0}}
    prompt["6"]["inputs"]["model"] = ["40", 0]
    _, got = fails(templates_server, prompt)
    (source,) = culprit(got, "model")["source"]
    assert source == {"node": "40", "class_type": "LoraLoaderModelOnly", "inputs": {"lora_name": name},
                      "file says": {"lora_name": "sdxl_base_v1-0"}}
    log = templates_server.log_text(since=templates_server.module_log_start)
    assert f"read from {{'lora_name': '{name}'}} (the file says {{'lora_name': 'sdxl_base_v1-0'}})" in log
