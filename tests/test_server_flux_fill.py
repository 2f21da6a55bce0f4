"""FillScope's FLUX Fill nodes in a real ComfyUI 0.3.75 server: node listing, both shipped workflows through
POST /prompt, the UI-format files, and bad input that must fail clearly without taking the server down."""

from __future__ import annotations

import json
from pathlib import Path
import sys

import pytest
from PIL import Image

from workflow_helpers import EXAMPLES, WORKFLOWS, load_api, node_id, shapes_doc, tensors, with_synthetic_image
from workflow_helpers import with_dtype
from comfy_server import ComfyExecutionError, ComfyPromptError
from server_checks import assert_still_serving, flux_prompt, saved_pixels, small_image

sys.path.insert(0, str(WORKFLOWS))
import graphs  # noqa: E402

pytestmark = pytest.mark.server

EXPECTED_NODES = {
    # loaders: device, placeholder_seed, memory (and storage) are optional advanced inputs after these, same widget order
    "FillScopeLoadCLIPL": ["source", "dtype"],
    "FillScopeLoadT5": ["source", "dtype"],
    "FillScopeLoadFluxFillTransformer": ["source", "dtype"],
    "FillScopeLoadVAE": ["source", "kind", "dtype"],
    "FillScopeLoadCLIPG": ["source", "dtype"],
    "FillScopeLoadSD3Transformer": ["source", "variant", "dtype"],
    "FillScopeLoadSD3InpaintControlNet": ["source", "dtype"],
    "FillScopeFluxPrompt": ["clip_l", "t5", "text", "max_length"],
    "FillScopeSD3Prompt": ["clip_l", "clip_g", "t5", "text"],
    "FillScopeCLIPGEncode": ["clip_g", "text"],
    "FillScopeSD3TextCondition": ["clip_l_embeds", "clip_g_embeds", "t5_embeds"],
    "FillScopeSD3InpaintCondition": ["vae", "image", "mask", "invert_mask", "threshold", "grow", "feather", "size_mode"],
    "FillScopeSD3ControlNetInpaintSampler": [  # transformer or model: optional, exactly one wired
        "controlnet", "positive", "negative", "condition", "seed", "steps", "cfg", "control_scale",
        "control_start", "control_end", "shift", "denoise", "residual_mapping",
    ],
    "FillScopeCLIPLEncode": ["clip_l", "text"],
    "FillScopeT5Encode": ["t5", "text", "max_length"],
    "FillScopeFluxTextCondition": ["t5_embeds", "clip_embeds"],
    "FillScopeFluxFillCondition": ["vae", "image", "mask", "invert_mask", "threshold", "grow", "feather", "size_mode"],
    "FillScopeFluxFillSampler": ["flux_text", "condition", "seed", "steps", "guidance", "denoise"],  # transformer or model: optional
    "FillScopeVAEDecode": ["vae"],
    "FillScopePasteBack": ["generated", "latent"],
    "FillScopeSyntheticImageMask": ["width", "height", "mask_fraction"],
    "FillScopeShapesReport": ["filename_prefix"],  # shapes optional: Inspect records alone make a report
}

CONTRACT_1024 = json.loads((Path(__file__).parent / "data" / "seed_shapes.json").read_text())["flux_fill_1024"]  # the seeds' shapes










@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def assert_fillscope_still_runs(server):
    """After a failed FillScope load: the shipped FLUX Fill graph on the tiny models loads its transformer, samples and
    saves again (one step on a 32x32 image, a fresh seed: nothing answered from the cache)."""
    entry = server.run(small_image(flux_prompt(steps=1)), timeout=300)
    assert entry["status"]["status_str"] == "success"


def test_object_info_lists_every_node_with_its_inputs(server):
    info = server.object_info()
    for name, inputs in EXPECTED_NODES.items():
        assert name in info, name
        assert info[name]["input_order"]["required"] == inputs, name
        assert info[name]["category"].startswith("FillScope")
    assert info["FillScopeFluxFillSampler"]["output"] == ["FS_LATENT", "STRING", "LATENT"]
    assert "FLUX.1-Fill-dev" in info["FillScopeLoadFluxFillTransformer"]["input"]["required"]["source"][1]["options"]


def test_meta_trace_workflow_reports_the_contract_shapes(server):
    prompt = load_api("flux_fill_meta_trace")
    entry = server.run(prompt, timeout=300)
    report = entry["outputs"][node_id(prompt, "FillScopeShapesReport")]
    rows = {r["tensor"]: r for r in report["fillscope_boundaries"]}
    for name, shape in CONTRACT_1024.items():
        assert rows[name]["shape"] == shape, name
        assert rows[name]["provenance"] == "measured" and rows[name]["device"] == "meta"
    saved = report["fillscope_report"][0]
    doc = json.loads(server.view(saved["filename"], saved["subfolder"], "output"))
    assert doc["shapes"]["schema"] == "fillscope.shapes/1"
    decode = shapes_doc(entry, prompt, "FillScopeVAEDecode")
    assert [r["node"] for r in decode["trail"]][-1] == "FillScopeFluxFillSampler"
    assert any(w.startswith("meta weights: shapes only, this image is blank") for w in decode["node"]["warnings"])
    assert any("this image is blank" in t for t in entry["outputs"][node_id(prompt, "FillScopeVAEDecode")]["text"])


def test_inpaint_workflow_runs_on_the_tiny_folder_and_saves_an_image(server):
    prompt = load_api("flux_fill_inpaint")
    sampler_inputs = prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"]
    assert sampler_inputs["steps"] == 28  # as shipped; run here at 2 steps
    sampler_inputs["steps"] = 2
    # the models as shipped (bf16), but the VAE in fp32: bf16 convolutions on a CPU without bf16 instructions are ~20x
    # slower (most of this test's time), and nothing here depends on the VAE's dtype
    prompt[node_id(prompt, "FillScopeLoadVAE")]["inputs"]["dtype"] = "fp32"
    entry = server.run(prompt, timeout=600)
    saved = entry["outputs"][node_id(prompt, "FillScopeShapesReport")]["images"][0]  # the report saves the image
    png = Image.open(__import__("io").BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"])))
    assert png.size == (128, 96)
    stem = saved["filename"].removesuffix(".png")  # its report under the same number
    assert {f["filename"] for f in entry["outputs"][node_id(prompt, "FillScopeShapesReport")]["fillscope_report"]} \
        >= {stem + ".json", stem + ".html"}
    cond = tensors(shapes_doc(entry, prompt, "FillScopeFluxFillCondition"))
    assert cond["fill_condition"]["shape"] == [1, 48, 320]  # 96x128 -> 6*8 tokens
    assert cond["fill_condition"]["device"] == "cpu"
    sampler = shapes_doc(entry, prompt, "FillScopeFluxFillSampler")
    assert sampler["node"]["facts"]["steps_run"] == 2  # every step asked for ran
    assert tensors(sampler)["transformer.input"]["shape"] == [1, 48, 384]


def test_committed_workflows_are_the_generated_graphs(server, tmp_path):
    """Regenerating with the server's /object_info (graphs.main, as a user runs it) writes every file byte for byte as
    committed; the UI files only in example_workflows/, the API files only in api_workflows/."""
    (tmp_path / "api").mkdir()
    assert graphs.main(["--object-info", server.url, "--api-out", str(tmp_path / "api"), "--ui-out", str(tmp_path / "ui")]) == 0
    for g in graphs.GRAPHS:
        assert (tmp_path / "api" / f"{g.name}.api.json").read_bytes() == (WORKFLOWS / f"{g.name}.api.json").read_bytes(), g.name
        assert (tmp_path / "ui" / f"{g.name}.json").read_bytes() == (EXAMPLES / f"{g.name}.json").read_bytes(), g.name
    assert sorted(p.name for p in EXAMPLES.glob("*.json")) == sorted(f"{g.name}.json" for g in graphs.GRAPHS)
    assert sorted(p.name for p in WORKFLOWS.glob("*.json")) == sorted(f"{g.name}.api.json" for g in graphs.GRAPHS)


@pytest.mark.parametrize("name", ["flux_fill_inpaint", "sd3_controlnet_inpaint", "klein_inpaint", "klein_edit",
                                  "flux_fill_tiled_inpaint", "klein_tiled_edit"])
def test_real_weight_workflows_load_the_published_files_and_declare_them(name):
    """Every loader of a real-weight workflow reads a published single file ('<folder>/<file>', no diffusers folder)
    and declares it for the Missing Models dialog as ComfyUI's templates do: properties.models (name, url, directory)
    and, once per file, the workflow's models list. The read-me note names every file and folder."""
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    api = load_api(name)
    loaders = [n for n in ui["nodes"] if n["type"].startswith("FillScopeLoad")]
    assert loaders
    for node in loaders:
        source = api[str(node["id"])]["inputs"]["source"]
        (model,) = node["properties"]["models"]
        assert source == f"{model['directory']}/{model['name']}", (node["type"], source)
        assert model["url"].startswith("https://huggingface.co/") and model["url"].endswith(".safetensors")
    files = {m["url"]: m for n in loaders for m in n["properties"]["models"]}
    assert ui["models"] == list(files.values())
    note = next(n for n in ui["nodes"] if n["type"] in graphs.NOTE_TYPES)["widgets_values"][0]
    for m in ui["models"]:
        assert m["url"] in note and f"{m['directory']}/" in note and m["name"] in note


def test_the_template_scan_sees_exactly_the_ui_workflows(server):
    """ComfyUI lists every *.json in a pack's example_workflows, example, examples, workflow and workflows folders
    (app/custom_node_manager.py): only the UI files, once each, and each loads in the canvas format."""
    listed = server.get_json("/workflow_templates")["FillScope"]
    assert sorted(listed) == sorted(g.name for g in graphs.GRAPHS)
    for name in listed:
        ui = server.get_json(f"/api/workflow_templates/FillScope/{name}.json")
        assert ui["version"] == 0.4 and ui["nodes"] and "links" in ui, name


def test_a_loader_added_by_hand_starts_on_the_first_model_file_holding_its_component(server):
    """object_info's default source (what a loader added on the canvas shows): the first entry of the menu (diffusers
    folders, then files; placeholder and meta last) that holds the loader's component, never meta while one is there;
    the VAE's kind follows it."""
    info = server.object_info()
    expected = {
        "FillScopeLoadFluxFillTransformer": "FLUX.1-Fill-dev",
        "FillScopeLoadCLIPL": "FLUX.1-Fill-dev",
        "FillScopeLoadCLIPG": "stable-diffusion-3-medium-diffusers",  # skips the FLUX folders: no CLIP-G in them
        "FillScopeLoadSD3Transformer": "stable-diffusion-3-medium-diffusers",
        "FillScopeLoadSD3InpaintControlNet": "SD3-Controlnet-Inpainting",  # a single-model folder (config.json)
        "FillScopeLoadQwen3": "text_encoders/qwen_3_4b.safetensors",  # a file: clip_g/clip_l come first, are not Qwen3
        "FillScopeLoadKleinTransformer": "diffusion_models/flux-2-klein-4b.safetensors",
        "FillScopeLoadVAE": "FLUX.1-Fill-dev",
    }
    # test_server_klein.py adds tiny klein repositories to this shared server's diffusers folder (it may have run
    # before this module on the worker): then the first entry holding a Qwen3 or a klein transformer is its folder
    klein_folder = "FLUX.2-klein-4B"
    if klein_folder in info["FillScopeLoadQwen3"]["input"]["required"]["source"][1]["options"]:
        expected.update(FillScopeLoadQwen3=klein_folder, FillScopeLoadKleinTransformer=klein_folder)
    for node_type, source in expected.items():
        spec = info[node_type]["input"]["required"]["source"][1]
        assert spec["default"] == source, (node_type, spec["default"], spec["options"])
        assert spec["options"][-2:] == ["placeholder", "meta"]
        for advanced in ("device", "placeholder_seed", "memory"):
            assert info[node_type]["input"]["optional"][advanced][1]["advanced"] is True
    assert info["FillScopeLoadVAE"]["input"]["required"]["kind"][1]["default"] == "flux"


def test_each_example_has_one_text_box_per_prompt(server):
    """The canvas shows one prompt box per prompt: a multiline text widget on one node, encoded there by every text
    encoder the model has; SD3 has a second for its negative prompt. The read-me note is not a prompt."""
    info = server.object_info()
    for g in graphs.GRAPHS:
        ui = json.loads((EXAMPLES / f"{g.name}.json").read_text())
        boxes = []
        for node in ui["nodes"]:
            if node["type"] in graphs.NOTE_TYPES:
                continue
            spec = {**info[node["type"]]["input"]["required"], **info[node["type"]]["input"].get("optional", {})}
            boxes += [(node["id"], name) for name, opts in graphs.widget_names(info[node["type"]])
                      if spec[name][0] == "STRING" and opts.get("multiline")]
        negative = any("negative" in n.inputs or "negative_prompt" in n.inputs for n in g.nodes)
        assert len(boxes) == 1 + negative, (g.name, boxes)
        # each box on its own node, but an all-in-one node's own negative_prompt (the klein tiled node)
        assert len({nid for nid, _ in boxes}) == len([b for b in boxes if b[1] != "negative_prompt"]), (g.name, boxes)


@pytest.mark.parametrize("name", [g.name for g in graphs.GRAPHS])  # FLUX and SD3 graphs alike
def test_ui_workflow_nodes_exist_and_widget_values_fit(server, name):
    info = server.object_info()
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    for node in ui["nodes"]:
        if node["type"] in graphs.NOTE_TYPES:  # the read-me: a frontend node
            assert node["widgets_values"] and isinstance(node["widgets_values"][0], str)
            continue
        assert node["type"] in info, node["type"]
        values = list(node["widgets_values"])
        for wname, opts in graphs.widget_names(info[node["type"]]):
            spec = {**info[node["type"]]["input"]["required"], **info[node["type"]]["input"].get("optional", {})}[wname]
            value = values.pop(0)
            kind = spec[0]
            if isinstance(kind, list) or kind == "COMBO":
                options = kind if isinstance(kind, list) else opts.get("options", [])
                if wname != "upload":
                    assert value in options, (node["type"], wname, value)
            elif kind == "INT":
                assert isinstance(value, int) and opts.get("min", value) <= value <= opts.get("max", value)
            elif kind == "FLOAT":
                assert opts.get("min", value) <= value <= opts.get("max", value)
            elif kind == "BOOLEAN":
                assert isinstance(value, bool)
            elif kind == "STRING":
                assert isinstance(value, str)
            if opts.get("control_after_generate"):
                assert values.pop(0) in ("fixed", "increment", "decrement", "randomize")
        # LoadImage's upload button is a canvas-only widget, saved after the file name as the canvas saves it
        assert values == (["image"] if node["type"] == "LoadImage" else []), (node["type"], values)


def fp32_inpaint():
    """flux_fill_inpaint with every loader in fp32 (workflow_helpers.with_dtype): for the tests whose point is not the
    dtype (test_inpaint_workflow_runs_on_the_tiny_folder_and_saves_an_image runs it as shipped: bf16 but its VAE)."""
    return with_dtype(load_api("flux_fill_inpaint"), "fp32")


def test_image_mask_size_mismatch_is_a_clear_error(server):
    prompt = fp32_inpaint()
    prompt[node_id(prompt, "LoadImage")]["inputs"]["image"] = "fillscope_rgb.png"  # no alpha: 64x64 mask
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    msg = str(e.value)
    assert "input 'mask'" in msg and "64x64" in msg and "128x96" in msg and "Fix:" in msg
    assert_still_serving(server)


def test_missing_model_folder_is_refused_at_validation(server):
    prompt = load_api("flux_fill_inpaint")
    prompt[node_id(prompt, "FillScopeLoadVAE")]["inputs"]["source"] = "FLUX.1-Fill-missing"
    with pytest.raises(ComfyPromptError) as e:
        server.queue(prompt)
    msg = json.dumps(e.value.body)
    assert "FLUX.1-Fill-missing" in msg and "was not found under models/diffusers" in msg and "Fix:" in msg
    assert_still_serving(server)


def test_path_outside_the_model_folders_is_refused(server):
    prompt = load_api("flux_fill_inpaint")
    prompt[node_id(prompt, "FillScopeLoadVAE")]["inputs"]["source"] = "../../../etc"
    with pytest.raises(ComfyPromptError) as e:
        server.queue(prompt)
    assert "outside ComfyUI's models/diffusers" in json.dumps(e.value.body)


def test_folder_of_another_model_names_what_it_is(server):
    prompt = fp32_inpaint()
    prompt[node_id(prompt, "FillScopeLoadFluxFillTransformer")]["inputs"]["source"] = "FLUX.1-dev-tiny"
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    msg = str(e.value)
    assert "FLUX.1 [dev]/[schnell] text-to-image" in msg and "FluxPipeline" in msg and "Fix:" in msg
    assert_fillscope_still_runs(server)


def test_odd_size_runs_padded_and_says_so(server):
    """127x95 (neither a multiple of 16) on the tiny models (fp32, one step): padded to 128x96, said on the condition,
    the decoded image and the report; the output keeps the odd size. (It ran the meta trace at 1023x777 before, padded
    to 1024x784: the same rule, and a full-size FLUX forward on meta weights costs seconds of Python meta kernels.)"""
    prompt = with_synthetic_image(flux_prompt(steps=1), 127, 95, 0.5)
    # the report on the decode's record, as the meta trace wires it (Paste Back's record follows the latent, not the
    # decoded image)
    prompt[node_id(prompt, "FillScopeShapesReport")]["inputs"]["shapes"] = [node_id(prompt, "FillScopeVAEDecode"), 1]
    entry = server.run(prompt, timeout=300)
    cond = shapes_doc(entry, prompt, "FillScopeFluxFillCondition")
    assert any("127x95 padded" in n for n in cond["node"]["notes"])
    assert tensors(cond)["fill_condition"]["shape"] == [1, 6 * 8, 320]  # the padded 128x96: 6x8 tokens
    decode = tensors(shapes_doc(entry, prompt, "FillScopeVAEDecode"))
    assert decode["image"]["shape"] == [1, 95, 127, 3]
    report = entry["outputs"][node_id(prompt, "FillScopeShapesReport")]
    decoded = {r["tensor"]: r for r in report["fillscope_boundaries"]}["decoded_image"]
    assert decoded["shape"] == [1, 3, 96, 128] and decoded["size_note"] == "padded from 127x95"
    assert "[1, 3, 96, 128] (padded from 127x95)" in report["text"][0]


def test_empty_mask_returns_the_input_with_a_warning(server):
    prompt = with_synthetic_image(fp32_inpaint(), 32, 32, mask_fraction=0.0)  # any size: the smallest
    entry = server.run(prompt, timeout=300)
    sampler = shapes_doc(entry, prompt, "FillScopeFluxFillSampler")
    assert any("mask is empty" in w for w in sampler["node"]["warnings"])
    decode = shapes_doc(entry, prompt, "FillScopeVAEDecode")
    assert any("returned unchanged" in w for w in decode["node"]["warnings"])
    assert "transformer.input" not in tensors(sampler)  # no denoiser step ran
    assert_still_serving(server)


def test_single_files_in_comfyui_model_folders_run_the_inpaint_workflow(server):
    """The tiny FLUX Fill as single files (BFL transformer, LDM ae, ComfyUI clip_l, fp8 T5), chosen from the
    loaders' menus as '<folder>/<file>' (the workflow ships with t5xxl_fp16: here the fp8 file)."""
    info = server.object_info()
    sources = {
        "FillScopeLoadFluxFillTransformer": "diffusion_models/flux1-fill-dev.safetensors",
        "FillScopeLoadVAE": "vae/ae.safetensors",
        "FillScopeLoadCLIPL": "text_encoders/clip_l.safetensors",
        "FillScopeLoadT5": "text_encoders/t5xxl_fp8_e4m3fn.safetensors",
    }
    prompt = fp32_inpaint()  # the files and the fp8 T5 are the point, not the compute dtype
    for node, source in sources.items():
        assert source in info[node]["input"]["required"]["source"][1]["options"], (node, source)
        prompt[node_id(prompt, node)]["inputs"]["source"] = source
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"]["steps"] = 2
    entry = server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success"
    t5 = shapes_doc(entry, prompt, "FillScopeLoadT5")["node"]["facts"]
    assert any("fp8" in str(k).lower() or "fp8" in str(v).lower() for k, v in t5.items())
    assert tensors(shapes_doc(entry, prompt, "FillScopeFluxFillCondition"))["fill_condition"]["shape"] == [1, 48, 320]


def test_paste_back_with_a_wired_mask_keeps_every_pixel_outside_it(server):
    """A MASK wired into Paste Back replaces the sampler's mask (as ImageCompositeMasked): outside it the saved
    image is the source, bit for bit, also where the sampler repainted; a mask of another size is a clear error."""
    from fillscope.masks import synthetic_image_and_mask

    prompt = with_synthetic_image(fp32_inpaint(), 128, 96, mask_fraction=0.75)
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"]["steps"] = 2  # any steps repaint (shipped: 28)
    paste = node_id(prompt, "FillScopePasteBack")
    result = next(k for k, v in prompt.items()
                  if v["class_type"] == "FillScopeShapesReport" and v["inputs"]["images"][0] == paste)
    prompt["91"] = {"class_type": "FillScopeSyntheticImageMask", "inputs": {"width": 128, "height": 96, "mask_fraction": 0.25}}
    prompt["92"] = {"class_type": "SaveImage", "inputs": {"images": ["90", 0], "filename_prefix": "fillscope/paste_source"}}
    prompt[paste]["inputs"]["mask"] = ["91", 1]
    entry = server.run(prompt, timeout=600)
    out, source = saved_pixels(server, entry, result), saved_pixels(server, entry, "92")
    wired = synthetic_image_and_mask(128, 96, 0.25)[1][0].numpy()
    sampler = synthetic_image_and_mask(128, 96, 0.75)[1][0].numpy()
    assert out.shape == source.shape == (96, 128, 3)
    assert (out[wired == 0] == source[wired == 0]).all()
    assert ((sampler == 1) & (wired == 0)).any()  # the check covers pixels the sampler repainted
    assert (out[wired == 1] != source[wired == 1]).any()  # inside the wired mask: the generated pixels
    doc = shapes_doc(entry, prompt, "FillScopePasteBack")["node"]
    assert doc["facts"]["kept pixels (exact source values)"] == f"{int((wired == 0).sum()):,}"
    assert tensors({"node": doc})["mask"]["shape"] == [1, 96, 128]

    prompt["91"]["inputs"].update(width=64, height=64)
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    msg = str(e.value)
    assert "input 'mask'" in msg and "64x64" in msg and "128x96" in msg and "Fix:" in msg
    assert_still_serving(server)
