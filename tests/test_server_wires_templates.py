"""The wire recorder (nodes/wires.py) on ComfyUI's own templates, run through a real server with nothing of FillScope
in the graph: flux_fill_inpaint_example, flux_fill_outpaint_example and sd3.5_simple_example from the installed
comfyui_workflow_templates packages, converted to API prompts, only their loaders swapped for tiny builds of
ComfyUI's own classes (tests/comfy_templates.py). Every link gets a record with the shape ComfyUI's code gives there,
the MODEL / CLIP / VAE wires carry the calls their consumers made (the diffusion model's input at each step on the
MODEL wire into KSampler), nodes served from ComfyUI's cache keep a record marked cached, and the outputs are the
same bits on a server started with FILLSCOPE_WIRES=off."""

from __future__ import annotations

import io
import os

import comfy_templates as ct
import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def runs(templates_server):
    """Each template run once on the recording server: (prompt, history entry, /fillscope/wires answer)."""
    info = templates_server.object_info()
    done = {}
    for name in ct.TEMPLATES:
        prompt = ct.swapped(name, info)
        entry = templates_server.run(prompt, timeout=600)
        prompt_id = entry["prompt"][1]
        done[name] = (prompt, entry, templates_server.get_json(f"/fillscope/wires?prompt_id={prompt_id}"))
    return done


def saved_pixels(templates_server, entry) -> dict:
    out = {}
    for node_id, output in entry["outputs"].items():
        for image in output.get("images", []):
            data = templates_server.view(image["filename"], image["subfolder"], image["type"])
            out[node_id] = np.asarray(Image.open(io.BytesIO(data)))
    return out


def tensors(record: dict, slot: int) -> dict:
    (value, *_) = record["outputs"][slot]["values"]
    return {t["name"]: t["shape"] for t in value["tensors"]}


def node_of(prompt: dict, class_type: str) -> str:
    (node_id,) = [k for k, v in prompt.items() if v["class_type"] == class_type]
    return node_id


@pytest.mark.parametrize("name", ct.TEMPLATES)
def test_every_link_of_comfyuis_own_template_has_the_shape_comfyuis_code_gives_there(runs, name):
    prompt, entry, answer = runs[name]
    assert answer["status"] == "on"
    records = answer["nodes"]
    assert set(prompt) <= set(records), sorted(set(prompt) - set(records))  # every node that ran, output nodes too
    for source, slot, target, input_name, kind in ct.links(name):
        output = records[source]["outputs"][slot]
        assert output["type"] == kind and output["values"], (source, slot, target, input_name)
        value = output["values"][0]
        assert value["tensors"] or value["facts"], (source, slot, kind)
        if kind in ("IMAGE", "MASK", "LATENT", "CONDITIONING"):
            assert value["tensors"], (source, slot, kind)
    # what ComfyUI's code makes of the 64 x 64 input (a 1024 x 1024 SD3 latent made 256 x 256: comfy_templates.py)
    sampler = node_of(prompt, "KSampler")
    latent_in = prompt[sampler]["inputs"]["latent_image"]
    samples = tensors(records[latent_in[0]], latent_in[1])["samples"]
    assert tensors(records[sampler], 0)["samples"] == samples
    decoded = tensors(records[node_of(prompt, "VAEDecode")], 0)["image"]
    assert decoded == [samples[0], samples[2] * 8, samples[3] * 8, 3]
    if name != "sd3.5_simple_example":
        load = node_of(prompt, "LoadImage")
        assert tensors(records[load], 0) == {"image": [1, ct.INPUT_SIZE, ct.INPUT_SIZE, 3]}
        assert tensors(records[load], 1) == {"mask": [1, ct.INPUT_SIZE, ct.INPUT_SIZE]}
        pixels = 64 if name == "flux_fill_inpaint_example" else 64 + 2 * 400
        height = 64 if name == "flux_fill_inpaint_example" else 64 + 400
        assert samples == [1, 16, height // 8, pixels // 8]
        cond = tensors(records[node_of(prompt, "InpaintModelConditioning")], 0)
        assert cond["[0][1].concat_latent_image"] == samples and cond["[0][1].concat_mask"] == [1, 1, height, pixels]
    else:
        assert samples == [1, 16, ct.SD3_SIZE // 8, ct.SD3_SIZE // 8]


@pytest.mark.parametrize("name", ct.TEMPLATES)
def test_the_model_wire_carries_the_diffusion_models_input_at_each_step(runs, name):
    prompt, _, answer = runs[name]
    records = answer["nodes"]
    sampler = node_of(prompt, "KSampler")
    source, slot = prompt[sampler]["inputs"]["model"]
    model = records[source]["outputs"][slot]
    facts = model["values"][0]["facts"]
    (call,) = [c for c in model["calls"] if c["kind"] == "diffusion model"]
    assert (call["consumer"], call["input"], call["steps scheduled"]) == (sampler, "model", ct.STEPS)
    assert call["calls"] == ct.STEPS  # cfg 1 (FLUX): one call a step; cfg 4 (SD3): cond and uncond in one batch
    rows = {r["name"]: r["shape"] for r in call["rows"]}
    latent_in = prompt[sampler]["inputs"]["latent_image"]
    _, _, h, w = tensors(records[latent_in[0]], latent_in[1])["samples"]
    batch = 1 if name.startswith("flux") else 2
    assert rows["x (diffusion model in)"] == [batch, facts["model in channels"], h, w]
    assert rows["diffusion model out"] == [batch, facts["model out channels"], h, w]
    positive = prompt[sampler]["inputs"]["positive"]
    context = tensors(records[positive[0]], positive[1])["[0][0]"]
    assert rows["context"] == [batch, *context[1:]]


def test_clip_and_vae_wires_carry_the_text_models_and_the_coders_calls(runs):
    prompt, _, answer = runs["flux_fill_inpaint_example"]
    records = answer["nodes"]
    encode = node_of(prompt, "CLIPTextEncode")
    clip_calls = records[prompt[encode]["inputs"]["clip"][0]]["outputs"][0]["calls"]
    parts = {c["part"]: {r["name"]: r["shape"] for r in c["rows"]} for c in clip_calls if c["consumer"] == encode}
    cond = tensors(records[encode], 0)
    assert parts["t5xxl"]["states[0]"] == cond["[0][0]"]  # FLUX's context is T5's states
    assert parts["clip_l"]["states[1]"] == cond["[0][1].pooled_output"]  # and its pooled vector CLIP-L's
    vae_calls = records[prompt[node_of(prompt, "VAEDecode")]["inputs"]["vae"][0]]["outputs"][0]["calls"]
    by = {(c["consumer"], c["part"]): {r["name"]: r["shape"] for r in c["rows"]} for c in vae_calls}
    decode, condition = node_of(prompt, "VAEDecode"), node_of(prompt, "InpaintModelConditioning")
    assert by[(decode, "decoder")]["decoder out"] == [1, 3, ct.INPUT_SIZE, ct.INPUT_SIZE]
    assert by[(condition, "encoder")]["encoder in"] == [1, 3, ct.INPUT_SIZE, ct.INPUT_SIZE]


def test_nodes_served_from_the_cache_keep_their_record_marked_cached(templates_server, runs):
    prompt, _, _ = runs["flux_fill_inpaint_example"]
    again = {k: {**v, "inputs": dict(v["inputs"])} for k, v in prompt.items()}
    sampler = node_of(again, "KSampler")
    again[sampler]["inputs"]["seed"] += 1  # only the sampler and what follows it run again
    # ComfyUI's cache holds the outputs of the latest prompt's nodes: this one's
    templates_server.run(prompt, timeout=600)
    entry = templates_server.run(again, timeout=600)
    records = templates_server.get_json(f"/fillscope/wires?prompt_id={entry['prompt'][1]}")["nodes"]
    assert set(again) <= set(records)
    loader = node_of(again, "NativeFillTestTinyFluxFill")
    assert records[loader]["cached"] and not records[sampler]["cached"]
    source, slot = again[sampler]["inputs"]["model"]
    assert records[source]["cached"] and records[source]["outputs"][slot]["calls"][0]["consumer"] == sampler


def test_outputs_are_the_same_bits_with_the_recorder_off(templates_server, runs):
    from comfy_server import ServerWithTestNodes, comfyui_installed

    if not comfyui_installed():
        pytest.skip("ComfyUI not installed")
    off = ServerWithTestNodes(env=dict(os.environ, FILLSCOPE_WIRES="off"))
    try:
        off.start()
        off.install(ct.prepare)
        assert off.get_json("/fillscope/wires")["status"] == "off (FILLSCOPE_WIRES=off)"
        assert "wire recorder off (FILLSCOPE_WIRES=off)" in off.log_text()
        for name in ct.TEMPLATES:
            prompt, entry, _ = runs[name]
            recorded = saved_pixels(templates_server, entry)
            unrecorded = saved_pixels(off, off.run(prompt, timeout=600))
            assert recorded and recorded.keys() == unrecorded.keys(), name
            for node_id, pixels in recorded.items():
                assert np.array_equal(pixels, unrecorded[node_id]), (name, node_id)
    finally:
        off.cleanup()


def test_the_shapes_report_of_a_graph_of_comfyuis_own_nodes_tables_its_wires(templates_server):
    prompt = ct.swapped("flux_fill_inpaint_example", templates_server.object_info())
    decode = node_of(prompt, "VAEDecode")
    prompt["900"] = {"class_type": "FillScopeShapesReport", "inputs": {"filename_prefix": "wires/report",
                                                                       "after": [decode, 0]}}
    entry = templates_server.run(prompt, timeout=600)
    out = entry["outputs"]["900"]
    text, rows = out["text"][0], out["fillscope_boundaries"]
    assert "not observed" not in text
    records = templates_server.get_json(f"/fillscope/wires?prompt_id={entry['prompt'][1]}")["nodes"]
    tabled = {(r["inspect_node"], r["boundary"]): r["shape"] for r in rows}
    for source, slot, _, _, kind in ct.links("flux_fill_inpaint_example"):
        output = records[source]["outputs"][slot]
        for t in output["values"][0]["tensors"]:
            assert tabled[(source, f"{output['name']}: {t['name']}")] == t["shape"], (source, slot, t["name"])
        assert f"(node {source})" in text, source
    sampler = node_of(prompt, "KSampler")
    x = [r for r in rows if r.get("called_by") == sampler and r["tensor"] == "x (diffusion model in)"]
    assert len(x) == 1 and x[0]["shape"][1] == records[x[0]["inspect_node"]]["outputs"][0]["values"][0]["facts"][
        "model in channels"]


def test_a_guider_wire_carries_the_calls_samplercustomadvanced_made(templates_server):
    """SamplerCustomAdvanced takes no MODEL: CFGGuider holds it, and the guider's wire gets the calls."""
    prompt = ct.swapped("flux_fill_inpaint_example", templates_server.object_info())
    sampler = node_of(prompt, "KSampler")
    k = prompt.pop(sampler)["inputs"]
    prompt.update({
        "g": {"class_type": "CFGGuider", "inputs": {"model": k["model"], "positive": k["positive"],
                                                    "negative": k["negative"], "cfg": 1.0}},
        "n": {"class_type": "RandomNoise", "inputs": {"noise_seed": 0}},
        "s": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "sg": {"class_type": "BasicScheduler", "inputs": {"model": k["model"], "scheduler": "simple",
                                                          "steps": ct.STEPS, "denoise": 1.0}},
        "sca": {"class_type": "SamplerCustomAdvanced", "inputs": {"noise": ["n", 0], "guider": ["g", 0],
                                                                  "sampler": ["s", 0], "sigmas": ["sg", 0],
                                                                  "latent_image": k["latent_image"]}},
    })
    prompt[node_of(prompt, "VAEDecode")]["inputs"]["samples"] = ["sca", 0]
    entry = templates_server.run(prompt, timeout=600)
    records = templates_server.get_json(f"/fillscope/wires?prompt_id={entry['prompt'][1]}")["nodes"]
    (call,) = records["g"]["outputs"][0]["calls"]
    assert (call["consumer"], call["input"], call["calls"], call["steps scheduled"]) == ("sca", "guider", ct.STEPS,
                                                                                      ct.STEPS)
    x = {r["name"]: r["shape"] for r in call["rows"]}["x (diffusion model in)"]
    _, _, h, w = tensors(records[k["latent_image"][0]], k["latent_image"][1])["samples"]
    assert x[2:] == [h, w]
