"""FillScope's FLUX Fill nodes in a real ComfyUI 0.3.75 server: node listing, both shipped workflows through
POST /prompt, the UI-format files, and bad input that must fail clearly without taking the server down."""

from __future__ import annotations

import json
from pathlib import Path
import sys

import pytest
from PIL import Image

from workflow_helpers import load_api, node_id, shapes_doc, tensors, with_synthetic_image
from comfy_server import ComfyExecutionError, ComfyPromptError

from workflow_helpers import WORKFLOWS  # noqa: E402

sys.path.insert(0, str(WORKFLOWS))
import graphs  # noqa: E402

pytestmark = pytest.mark.server

EXPECTED_NODES = {
    "FillScopeLoadCLIPL": ["source", "dtype", "device", "placeholder_seed"],
    "FillScopeLoadT5": ["source", "dtype", "device", "placeholder_seed"],
    "FillScopeLoadFluxFillTransformer": ["source", "dtype", "device", "placeholder_seed"],
    "FillScopeLoadVAE": ["source", "kind", "dtype", "device", "placeholder_seed"],
    "FillScopeLoadCLIPG": ["source", "dtype", "device", "placeholder_seed"],
    "FillScopeLoadSD3Transformer": ["source", "variant", "dtype", "device", "placeholder_seed"],
    "FillScopeLoadSD3InpaintControlNet": ["source", "dtype", "device", "placeholder_seed"],
    "FillScopeCLIPGEncode": ["clip_g", "text"],
    "FillScopeSD3TextCondition": ["clip_l_embeds", "clip_g_embeds", "t5_embeds"],
    "FillScopeSD3InpaintCondition": ["vae", "image", "mask", "invert_mask", "threshold", "grow", "feather", "size_mode"],
    "FillScopeSD3ControlNetInpaintSampler": [
        "transformer", "controlnet", "positive", "negative", "condition", "seed", "steps", "cfg", "control_scale",
        "control_start", "control_end", "shift", "denoise", "residual_mapping",
    ],
    "FillScopeCLIPLEncode": ["clip_l", "text"],
    "FillScopeT5Encode": ["t5", "text", "max_length"],
    "FillScopeFluxTextCondition": ["t5_embeds", "clip_embeds"],
    "FillScopeFluxFillCondition": ["vae", "image", "mask", "invert_mask", "threshold", "grow", "feather", "size_mode"],
    "FillScopeFluxFillSampler": ["transformer", "flux_text", "condition", "seed", "steps", "guidance", "denoise"],
    "FillScopeVAEDecode": ["vae", "latent"],
    "FillScopePasteBack": ["generated", "latent"],
    "FillScopeSyntheticImageMask": ["width", "height", "mask_fraction"],
    "FillScopeShapesReport": ["shapes", "filename_prefix"],
}

CONTRACT_1024 = json.loads((Path(__file__).parent / "data" / "seed_shapes.json").read_text())["flux_fill_1024"]  # the seeds' shapes










@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def assert_still_serving(server):
    entry = server.run(meta_prompt(256, 256), timeout=300)
    assert entry["status"]["status_str"] == "success"


def meta_prompt(width, height, mask_fraction=0.5):
    prompt = load_api("flux_fill_meta_trace")
    synth = prompt[node_id(prompt, "FillScopeSyntheticImageMask")]["inputs"]
    synth.update(width=width, height=height, mask_fraction=mask_fraction)
    return prompt


def test_object_info_lists_every_node_with_its_inputs(server):
    info = server.object_info()
    for name, inputs in EXPECTED_NODES.items():
        assert name in info, name
        assert info[name]["input_order"]["required"] == inputs, name
        assert info[name]["category"].startswith("FillScope")
    assert info["FillScopeFluxFillSampler"]["output"] == ["FS_LATENT", "STRING"]
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
    assert any("meta weights" in w for w in decode["node"]["warnings"])


def test_inpaint_workflow_runs_on_the_tiny_folder_and_saves_an_image(server):
    prompt = load_api("flux_fill_inpaint")
    entry = server.run(prompt, timeout=600)
    saved = entry["outputs"][node_id(prompt, "SaveImage")]["images"][0]
    png = Image.open(__import__("io").BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"])))
    assert png.size == (128, 96)
    cond = tensors(shapes_doc(entry, prompt, "FillScopeFluxFillCondition"))
    assert cond["fill_condition"]["shape"] == [1, 48, 320]  # 96x128 -> 6*8 tokens
    assert cond["fill_condition"]["device"] == "cpu"
    sampler = shapes_doc(entry, prompt, "FillScopeFluxFillSampler")
    assert sampler["node"]["facts"]["steps_run"] == 28
    assert tensors(sampler)["transformer.input"]["shape"] == [1, 48, 384]


def test_committed_workflows_are_the_generated_graphs(server):
    info = server.object_info()
    for g in graphs.GRAPHS:
        api, ui = graphs.render(g, info)
        assert (WORKFLOWS / f"{g.name}.api.json").read_text() == api, g.name
        assert (WORKFLOWS / f"{g.name}.json").read_text() == ui, g.name
        assert (graphs.EXAMPLES / f"{g.name}.json").read_text() == ui, g.name


@pytest.mark.parametrize("name", [g.name for g in graphs.GRAPHS])  # FLUX and SD3 graphs alike
def test_ui_workflow_nodes_exist_and_widget_values_fit(server, name):
    info = server.object_info()
    ui = json.loads((WORKFLOWS / f"{name}.json").read_text())
    for node in ui["nodes"]:
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
        assert values == [], (node["type"], values)


def test_image_mask_size_mismatch_is_a_clear_error(server):
    prompt = load_api("flux_fill_inpaint")
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
    prompt = load_api("flux_fill_inpaint")
    prompt[node_id(prompt, "FillScopeLoadFluxFillTransformer")]["inputs"]["source"] = "FLUX.1-dev-tiny"
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    msg = str(e.value)
    assert "FLUX.1 [dev]/[schnell] text-to-image" in msg and "FluxPipeline" in msg and "Fix:" in msg
    assert_still_serving(server)


def test_odd_size_runs_padded_and_says_so(server):
    prompt = meta_prompt(1023, 777)
    entry = server.run(prompt, timeout=300)
    cond = shapes_doc(entry, prompt, "FillScopeFluxFillCondition")
    assert any("1023x777 padded" in n for n in cond["node"]["notes"])
    assert tensors(cond)["fill_condition"]["shape"] == [1, 49 * 64, 320]
    decode = tensors(shapes_doc(entry, prompt, "FillScopeVAEDecode"))
    assert decode["image"]["shape"] == [1, 777, 1023, 3]
    report = entry["outputs"][node_id(prompt, "FillScopeShapesReport")]
    decoded = {r["tensor"]: r for r in report["fillscope_boundaries"]}["decoded_image"]
    assert decoded["shape"] == [1, 3, 784, 1024] and decoded["size_note"] == "padded from 1023x777"
    assert "[1, 3, 784, 1024] (padded from 1023x777)" in report["text"][0]


def test_empty_mask_returns_the_input_with_a_warning(server):
    prompt = with_synthetic_image(load_api("flux_fill_inpaint"), 128, 96, mask_fraction=0.0)
    entry = server.run(prompt, timeout=300)
    sampler = shapes_doc(entry, prompt, "FillScopeFluxFillSampler")
    assert any("mask is empty" in w for w in sampler["node"]["warnings"])
    decode = shapes_doc(entry, prompt, "FillScopeVAEDecode")
    assert any("returned unchanged" in w for w in decode["node"]["warnings"])
    assert "transformer.input" not in tensors(sampler)  # no denoiser step ran
    assert_still_serving(server)


def test_single_files_in_comfyui_model_folders_run_the_inpaint_workflow(server):
    """The same tiny FLUX Fill as single files (BFL transformer, LDM ae, ComfyUI clip_l, fp8 T5), chosen from the
    loaders' menus as '<folder>/<file>'."""
    info = server.object_info()
    sources = {
        "FillScopeLoadFluxFillTransformer": "diffusion_models/flux1-fill-dev.safetensors",
        "FillScopeLoadVAE": "vae/ae.safetensors",
        "FillScopeLoadCLIPL": "text_encoders/clip_l.safetensors",
        "FillScopeLoadT5": "text_encoders/t5xxl_fp8_e4m3fn.safetensors",
    }
    prompt = load_api("flux_fill_inpaint")
    for node, source in sources.items():
        assert source in info[node]["input"]["required"]["source"][1]["options"], (node, source)
        prompt[node_id(prompt, node)]["inputs"]["source"] = source
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"]["steps"] = 2
    entry = server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success"
    t5 = shapes_doc(entry, prompt, "FillScopeLoadT5")["node"]["facts"]
    assert any("fp8" in str(k).lower() or "fp8" in str(v).lower() for k, v in t5.items())
    assert tensors(shapes_doc(entry, prompt, "FillScopeFluxFillCondition"))["fill_condition"]["shape"] == [1, 48, 320]


def _saved_pixels(server, entry, node):
    import numpy as np

    saved = entry["outputs"][node]["images"][0]
    return np.asarray(Image.open(__import__("io").BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"]))))


def test_paste_back_with_a_wired_mask_keeps_every_pixel_outside_it(server):
    """A MASK wired into Paste Back replaces the sampler's mask (as ImageCompositeMasked): outside it the saved
    image is the source, bit for bit, also where the sampler repainted; a mask of another size is a clear error."""
    from fillscope.masks import synthetic_image_and_mask

    prompt = with_synthetic_image(load_api("flux_fill_inpaint"), 128, 96, mask_fraction=0.75)
    paste = node_id(prompt, "FillScopePasteBack")
    result = next(k for k, v in prompt.items() if v["class_type"] == "SaveImage" and v["inputs"]["images"][0] == paste)
    prompt["91"] = {"class_type": "FillScopeSyntheticImageMask", "inputs": {"width": 128, "height": 96, "mask_fraction": 0.25}}
    prompt["92"] = {"class_type": "SaveImage", "inputs": {"images": ["90", 0], "filename_prefix": "fillscope/paste_source"}}
    prompt[paste]["inputs"]["mask"] = ["91", 1]
    entry = server.run(prompt, timeout=600)
    out, source = _saved_pixels(server, entry, result), _saved_pixels(server, entry, "92")
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
