"""The Compare nodes (nodes/compare.py, issue 25) in a real ComfyUI 0.3.75 server on the tiny fp32 models the session
server serves: two Compare Run nodes of one family wired to FillScope Compare, which runs both on one image and
writes the record (fillscope.compare/1) to the output folder. FillScope against diffusers' own pipeline is identical
at every shared boundary for the three families; bf16 against fp32, fp8 storage against as loaded and a step cache
against none each give per-boundary figures and the image's PSNR; runs of two families are refused naming run_b, and
the server runs the next prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from workflow_helpers import api_node, load_api, sd3_inpaint_prompt

from comfy_server import ComfyExecutionError

pytestmark = pytest.mark.server

W, H, STEPS = 128, 96, 2
IMAGE = "fillscope_compare.png"
RUN_NODES = {"flux": "FillScopeFluxFillCompareRun", "sd3": "FillScopeSD3ControlNetCompareRun",
             "klein": "FillScopeKleinCompareRun"}
LOADER_INPUT = {"FillScopeLoadCLIPL": "clip_l", "FillScopeLoadCLIPG": "clip_g", "FillScopeLoadT5": "t5",
                "FillScopeLoadVAE": "vae", "FillScopeLoadQwen3": "qwen3",
                "FillScopeLoadSD3InpaintControlNet": "controlnet"}


@pytest.fixture(scope="module")
def server(served_models):
    rng = np.random.default_rng(3)
    rgba = np.concatenate([rng.integers(0, 256, (H, W, 3)), np.full((H, W, 1), 255)], -1).astype(np.uint8)
    rgba[24:72, 32:96, 3] = 0  # transparent = repaint (LoadImage's mask is 1 - alpha)
    Image.fromarray(rgba, "RGBA").save(served_models.input_dir / IMAGE)
    return served_models


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


def compare_graph(info, family: str, a: dict, b: dict, *, other_family: str | None = None, prefix="cmp") -> dict:
    """The family's loaders (fp32) -> two Compare Run nodes (settings a, b) -> FillScope Compare -> Save Image of
    the heat map."""
    prompt = {"flux": lambda: load_api("flux_fill_inpaint"), "sd3": sd3_inpaint_prompt,
              "klein": lambda: load_api("klein_inpaint")}
    graph, runs = {}, []
    for k, (fam, settings) in enumerate(((family, a), (other_family or family, b))):
        wire = {}
        for node_key, node in prompt[fam]().items():
            if node["class_type"].startswith("FillScopeLoad"):
                key = f"{k}{node_key}"
                graph[key] = {**node, "inputs": {**node["inputs"], "dtype": "fp32"}}
                wire[LOADER_INPUT.get(node["class_type"], "transformer")] = [key, 0]
        graph[f"run{k}"] = api_node(info, RUN_NODES[fam], **wire, **settings)
        runs.append([f"run{k}", 0])
    graph["img"] = {"class_type": "LoadImage", "inputs": {"image": IMAGE}}
    graph["cmp"] = api_node(info, "FillScopeCompare", run_a=runs[0], run_b=runs[1], image=["img", 0],
                            mask=["img", 1], prompt="a red brick fireplace", seed=3, steps=STEPS,
                            filename_prefix=f"fillscope/{prefix}")
    graph["save"] = {"class_type": "SaveImage", "inputs": {"images": ["cmp", 2], "filename_prefix": f"{prefix}/heat"}}
    return graph


def record(server, entry, prefix: str) -> dict:
    """The newest compare record the prompt wrote (output/fillscope/<prefix>_NNNNN.json)."""
    found = sorted((server.output_dir / "fillscope").glob(f"{prefix}_*.json"))
    assert found, entry
    return json.loads(found[-1].read_text())


def rows(doc) -> dict:
    return {r["name"]: r for r in doc["comparison"]["boundaries"]}


@pytest.mark.parametrize("family", ["flux", "sd3", "klein"])
def test_fillscope_and_diffusers_are_equal_at_every_shared_boundary(server, info, family):
    prefix = f"fs_vs_diffusers_{family}"
    # what diffusers' own pipelines always run: SD3's residual mapping, klein's token mask
    a = {"sd3": {"residual_mapping": "diffusers"}, "klein": {"token_mask": "bilinear"}}.get(family, {})
    entry = server.run(compare_graph(info, family, a, {"implementation": "diffusers", **a}, prefix=prefix),
                       timeout=600)
    doc = record(server, entry, prefix)
    r = rows(doc)
    shared = [x for x in r.values() if x["status"] in ("same", "differs")]
    assert len(shared) >= 10 and all(x["rel_err"] <= 1e-5 for x in shared), [
        (x["name"], x["rel_err"]) for x in shared if x["rel_err"] > 1e-5]
    assert all(f"step[{i}].denoiser" in r and f"step[{i}].latent" in r for i in range(1, STEPS + 1))
    assert doc["a"]["implementation"] == "fillscope" and doc["b"]["implementation"] == "diffusers"
    text = entry["outputs"]["cmp"]["text"][0]
    assert "A: fillscope" in text and "B: diffusers" in text and "boundary" in text


def test_sd3s_trained_residual_mapping_against_diffusers_first_differs_at_the_transformer(server, info):
    """FillScope's default one_to_one mapping (residual i after block i, as the ControlNet was trained and ComfyUI
    runs it) against diffusers' int(i*23/24): the text, the condition and the ControlNet's residuals agree, the
    transformer's output is the first boundary that does not (a measured finding, README's comparisons line)."""
    # both runs as the canvas sends them (the advanced menu at its default): the diffusers run drops it with a note
    canvas = {"residual_mapping": "one_to_one"}
    entry = server.run(compare_graph(info, "sd3", canvas, {"implementation": "diffusers", **canvas},
                                     prefix="sd3_mapping"), timeout=600)
    doc = record(server, entry, "sd3_mapping")
    r = rows(doc)
    assert doc["comparison"]["first_divergence"] == "transformer.output"
    assert r["controlnet.residual[0]"]["status"] == "same" and r["joint_context"]["status"] == "same"


@pytest.mark.parametrize("b, check", [
    ({"dtype": "bf16"}, "dtype"), ({"storage": "fp8_e4m3fn"}, "storage"), ({"step_cache": "taylorseer"}, "cache")])
def test_a_variant_gives_per_boundary_figures_and_the_images_psnr(server, info, b, check):
    prefix = f"variant_{check}"
    entry = server.run(compare_graph(info, "flux", {}, b, prefix=prefix), timeout=600)
    doc = record(server, entry, prefix)
    r, c = rows(doc), doc["comparison"]
    assert all(isinstance(r[f"step[{i}].denoiser"]["rel_err"], float) for i in range(1, STEPS + 1))
    assert "psnr_inside" in c["image"] and "ssim_outside" in c["image"]
    if check == "dtype":
        assert c["first_divergence"] is not None and doc["b"]["dtype"] == "bf16"
        assert r["step[1].denoiser"]["status"] == "differs"
    if check == "storage":
        assert r["fill_condition"]["status"] == "same" and r["step[1].denoiser"]["status"] == "differs"
        assert "transformer storage" in doc["b"]["facts"]
    if check == "cache":
        assert doc["b"]["step_cache"] == "taylorseer"
    saved = entry["outputs"]["save"]["images"][0]
    assert saved["filename"].startswith("heat")


def test_runs_of_two_families_are_refused_naming_run_b_and_the_next_prompt_runs(server, info):
    with pytest.raises(ComfyExecutionError) as e:
        server.run(compare_graph(info, "flux", {}, {}, other_family="klein", prefix="mixed"), timeout=600)
    assert "run_b" in str(e.value) and "same family" in str(e.value)
    entry = server.run(compare_graph(info, "flux", {}, {}, prefix="after"), timeout=600)
    doc = record(server, entry, "after")
    assert doc["comparison"]["first_divergence"] is None


def test_the_shipped_compare_template_runs_on_the_tiny_stand_ins_and_writes_its_record(server):
    """flux_fill_compare_fp8 as shipped (bf16 against fp8 storage), on the session server's tiny stand-ins for the
    published files, with a 32x32 synthetic image (server_checks.SMALL: the shipped bf16 VAE is slow on a CPU without
    bf16 instructions, and the size is not the point) and 2 steps: the record names its runs and has every step's
    figures."""
    from server_checks import SMALL
    from workflow_helpers import with_synthetic_image

    prompt = with_synthetic_image(load_api("flux_fill_compare_fp8"), SMALL, SMALL, 0.4)
    cmp = next(k for k, v in prompt.items() if v["class_type"] == "FillScopeCompare")
    prompt[cmp]["inputs"].update(steps=STEPS, filename_prefix="fillscope/template")
    server.run(prompt, timeout=600)
    doc = record(server, None, "template")
    assert doc["b"]["storage"] == "fp8_e4m3fn" and doc["a"]["storage"] == "as loaded"
    assert all(f"step[{i}].denoiser" in rows(doc) for i in range(1, STEPS + 1))


# --- issue 35 -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["flux", "sd3"])
def test_a_prompt_the_runs_cannot_use_is_refused_naming_compare_runs_prompt_input(server, info, family):
    """Two prompts (a line ---) for one image: the engine names its own inputs (FLUX's `text`, SD3's `positive`),
    which Compare Runs has not; the refusal names its `prompt`."""
    graph = compare_graph(info, family, {}, {}, prefix=f"two_prompts_{family}")
    graph["cmp"]["inputs"]["prompt"] = "a red brick fireplace\n---\na lamp"
    with pytest.raises(ComfyExecutionError) as e:
        server.run(graph, timeout=600)
    message = str(e.value)
    assert "input 'prompt'" in message and "batch 2 for 1 images" in message, message
    assert "input 'text'" not in message and "input 'positive'" not in message


def test_an_empty_mask_is_refused_naming_mask_before_either_run(server, info):
    """An empty mask: FillScope's run would return the source without sampling and diffusers' would repaint, with
    every boundary both pass agreeing (issue 35's 'no boundary over 0.0001'); Compare Runs refuses it as `mask`."""
    rgba = np.concatenate([np.random.default_rng(4).integers(0, 256, (H, W, 3)), np.full((H, W, 1), 255)], -1)
    Image.fromarray(rgba.astype(np.uint8), "RGBA").save(server.input_dir / "fillscope_compare_opaque.png")
    graph = compare_graph(info, "flux", {}, {"implementation": "diffusers"}, prefix="empty_mask")
    graph["img"]["inputs"]["image"] = "fillscope_compare_opaque.png"
    with pytest.raises(ComfyExecutionError) as e:
        server.run(graph, timeout=600)
    message = str(e.value)
    assert "input 'mask'" in message and "is empty" in message and "Fix:" in message, message
    assert not list((server.output_dir / "fillscope").glob("empty_mask_*.json"))
