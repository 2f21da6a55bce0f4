"""The three templates that put FillScope's nodes and ComfyUI's own in one graph (api_workflows/native_*.api.json, made by
api_workflows/graphs.py) run through a real ComfyUI 0.3.75 server on tiny weights.

Each test loads the template's API twin as shipped and swaps only its loader nodes for test-only nodes that build
ComfyUI's own model classes at tiny sizes (tests/native_templates.py `swapped`; the nodes are in tests/comfy_nodes,
which the session's shared server, conftest.py test_nodes_server, has as one more custom_nodes path); every other node
runs as the template has it, with the same inputs, except that the input image is a small one (64x48, a transparent hole
= the mask) under a name of its own that the templates' Load Image is pointed at (the pack's own
fillscope_example.png is in the input folder from start-up):

- UNETLoader flux1-fill-dev -> NativeFillTestTinyFluxFill: ComfyUI's FluxInpaint model at the tiny FLUX Fill folder's
  config with its weights (UNETLoader cannot load a tiny FLUX: ComfyUI's detection fixes 24 heads of 128);
- DualCLIPLoader clip_l + t5xxl -> NativeTestTinyCLIP (kind flux): ComfyUI's FLUX CLIP object on that folder's CLIP-L
  and T5 (DualCLIPLoader builds the full-size configs, so it cannot load tiny CLIP / T5 files);
- VAELoader ae -> InspectTestTinyVAE: ComfyUI's VAE object on that folder's tiny VAE (VAELoader builds the full-size
  FLUX VAE, ch 128, whatever the file holds);
- native_sd3_inspect: CheckpointLoaderSimple sd3_medium -> NativeTemplateTestTinySD3 (its MODEL: ComfyUI's SD3 MMDiT,
  2 blocks, seeded weights) and NativeTestTinyTAESD (its VAE: ComfyUI's VAE over its TAESD class, 16 latent
  channels); TripleCLIPLoader -> NativeTemplateTestTinySD3CLIP (ComfyUI's SD3 CLIP on the tiny SD3 folder's CLIP-L and
  CLIP-G, built with 3 layers since ComfyUI reads their penultimate one, without T5: a tiny T5 would have to be 4096 wide to join ComfyUI's padded CLIP states, so the context is
  CLIP's 77 tokens only). The ControlNet is NOT swapped: ComfyUI's own ControlNetLoader loads a tiny alimama-layout
  file (diffusers' SD3ControlNetModel, 17 condition channels, 2 blocks of 2 heads of 64, seeded) that this module
  writes under the template's file name, and ControlNetInpaintingAliMamaApply runs on it;
- native_flux_fill_mixed: the same FLUX swaps; LoraLoaderModelOnly is kept and loads a tiny kohya LoRA of the tiny
  transformer written under the template's LoRA file name.

Checked: every prompt succeeds; the PNG the Shapes Report saves is the input's size; Inspect Model's live record
(GET /fillscope/live?prompt_id=) holds one entry per KSampler step with the boundary shapes the tiny configs imply
(FLUX Fill: 16 + 80 concatenated channels; SD3: the CFG halves and the ControlNet's residuals), Inspect CLIP's and
Inspect VAE's records list the calls the graph made, the Inspect nodes on the conditioning and latent show them;
in the mixed graph FillScope's sampler ran ComfyUI's MODEL and the Shapes Report tables the chain.
"""

from __future__ import annotations

import io
import sys
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.server

sys.path.insert(0, str(Path(__file__).resolve().parent))
import native_templates as nt  # noqa: E402
from native_templates import swapped  # noqa: E402

FLUX, SD3 = nt.FLUX, nt.SD3
W, H = 64, 48  # the input image: latents of 8x6 (FLUX / SD3 VAEs: 8x)
IMAGE = "native_templates_example.png"  # not the template's name: the pack puts its own example image there at
# start-up (nodes/example_image.py) and this shared server refuses a file written twice with other contents


def folder_config(server, folder, sub) -> dict:
    return nt.folder_config(server.models_dir, folder, sub)


@pytest.fixture(scope="module")
def server(test_nodes_server):
    def prepare(server):
        nt.prepare(server.models_dir)
        rgba = np.random.default_rng(0).integers(0, 256, size=(H, W, 4), dtype=np.uint8)
        rgba[..., 3] = 255
        rgba[12:36, 16:48, 3] = 0  # transparent = repaint (LoadImage's mask = 1 - alpha)
        server.input_dir.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rgba, "RGBA").save(server.input_dir / IMAGE)

    with test_nodes_server.module(prepare) as server:
        yield server


# ---- reading the results ------------------------------------------------------------------------------------------


def saved_image(server, entry, key) -> np.ndarray:
    image = entry["outputs"][key]["images"][0]
    return np.asarray(Image.open(io.BytesIO(server.view(image["filename"], image["subfolder"], image["type"]))))


def live(server, prompt_id) -> dict:
    return server.get_json("/fillscope/live?prompt_id=" + urllib.parse.quote(prompt_id))


def live_node(records, key) -> dict:
    assert key in records, f"no live record of node {key}: {sorted(records)}"
    return records[key]["fillscope_shapes"][0]["node"]


def record(entry, key) -> dict:
    return entry["outputs"][key]["fillscope_shapes"][0]["node"]


def shapes(rec) -> dict:
    return {t["name"]: t["shape"] for t in rec["tensors"]}


def assert_report_tables_the_inspect_records(entry, report_key, inspect_keys, records) -> None:
    """The template's Shapes Report (wired `after` VAE Decode, no FillScope shapes) tables the records every Inspect
    Model / CLIP / VAE node of the graph delivered in this prompt, one section each, every row of each."""
    out = entry["outputs"][report_key]
    text, rows = out["text"][0], out["fillscope_boundaries"]
    assert "no record in this prompt" not in text, text
    for key in inspect_keys:
        assert f"(node {key})" in text, (key, text[:2000])
    assert len(rows) == sum(len(live_node(records, key)["tensors"]) for key in inspect_keys), len(rows)
    print(f"  Shapes Report {report_key}: {len(rows)} rows from Inspect nodes {', '.join(inspect_keys)}")


def run(server, prompt) -> tuple[dict, str]:
    for node in prompt.values():  # the templates' example image -> this module's small one
        if node["class_type"] == "LoadImage" and node["inputs"].get("image") == "fillscope_example.png":
            node["inputs"]["image"] = IMAGE
    pid = server.queue(prompt)
    entry = server.wait(pid, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    return entry, pid


# ---- tests -------------------------------------------------------------------------------------------------------


def test_native_flux_fill_inspect_runs_and_every_inspect_node_records(server):
    prompt = swapped("native_flux_fill_inspect")
    steps = prompt["15"]["inputs"]["steps"]
    entry, pid = run(server, prompt)
    assert saved_image(server, entry, "18").shape == (H, W, 3)

    tf = folder_config(server, FLUX, "transformer")
    text, pooled = tf["joint_attention_dim"], tf["pooled_projection_dim"]
    latent = [1, tf["out_channels"] // 4, H // 8, W // 8]  # patch 2: the packed width / 4
    concat = tf["in_channels"] // 4 - latent[1]  # what InpaintModelConditioning concatenates: image latent + mask
    records = live(server, pid)
    model = live_node(records, "7")
    rows = shapes(model)
    print(f"native_flux_fill_inspect: Inspect Model {model['facts']['steps seen']} steps, x {rows['x (sampler latent)']}"
          f" + c_concat {rows['c_concat (concatenated to x)']}, context {rows['context']}")
    assert model["facts"]["steps seen"] == steps and model["facts"]["calls per step"] == 1  # cfg 1
    assert model["facts"]["provenance"] == "measured on cpu, native ComfyUI Flux"
    assert rows["x (sampler latent)"] == latent and rows["c_concat (concatenated to x)"] == [1, concat, *latent[2:]]
    assert rows["context"][0] == 1 and rows["context"][2] == text and rows["y (pooled)"] == [1, pooled]
    assert rows["guidance"] == [1] and rows["diffusion model out"] == latent

    clip = live_node(records, "4")
    assert clip["facts"]["calls"] == 2  # the two CLIPTextEncode nodes (positive and negative)
    assert {clip["facts"][f"encode {i}: called by node"] for i in (1, 2)} == {"8", "9"}
    assert shapes(clip)["encode 1: pooled_output"] == [1, pooled]
    vae = live_node(records, "5")
    called = {vae["facts"][k] for k in vae["facts"] if k.endswith(": called by node")}
    assert called == {"12", "16"}  # InpaintModelConditioning's encode, VAEDecode's decode
    vae_rows = shapes(vae)
    assert [1, H, W, 3] in vae_rows.values() and latent in vae_rows.values()

    assert_report_tables_the_inspect_records(entry, "18", ("4", "5", "7"), records)

    cond, lat = record(entry, "13"), record(entry, "14")
    assert cond["facts"]["type"] == "CONDITIONING" and cond["facts"]["cond[0].guidance"] == 30.0
    assert shapes(lat)["samples"] == latent and "noise_mask" in shapes(lat)


def test_native_sd3_inspect_runs_with_the_controlnet_and_records_cfg_and_control(server):
    prompt = swapped("native_sd3_inspect")
    steps = prompt["15"]["inputs"]["steps"]
    entry, pid = run(server, prompt)
    assert saved_image(server, entry, "18").shape == (H, W, 3)

    pooled = sum(folder_config(server, SD3, s)["hidden_size"] for s in ("text_encoder", "text_encoder_2"))
    latent = [1, 16, H // 8, W // 8]
    records = live(server, pid)
    model = live_node(records, "4")
    rows, facts = shapes(model), model["facts"]
    print(f"native_sd3_inspect: Inspect Model {facts['steps seen']} steps, {facts['cfg batches']}, rows "
          f"{sorted(k for k in rows if k.startswith('control'))[:3]}")
    assert facts["steps seen"] == steps and facts["provenance"] == "measured on cpu, native ComfyUI SD3"
    assert facts["total calls"] == steps * facts["calls per step"]
    assert rows["x (diffusion model in)"][1:] == latent[1:] and rows["y (pooled)"][1] == pooled
    assert rows["context"][1:] == [77, 4096]  # CLIP-L ++ CLIP-G padded to 4096 by ComfyUI (no T5 in the stand-in)
    # the ControlNet's residuals reach the model: ComfyUI's MMDiT ControlNet repeats each of its blocks' outputs
    # depth // blocks times and drops the last one (comfy/cldm/mmdit.py): 2 blocks on a depth-2 model give 1
    nodes = nt.template_nodes
    residuals = (nodes.DEPTH // nodes.DEPTH) * nodes.DEPTH - 1
    control = rows[f"control.output ({residuals} residuals, first)"]
    assert control[1:] == [(H // 16) * (W // 16), 64 * nodes.DEPTH], control

    clip = live_node(records, "5")
    assert clip["facts"]["calls"] == 2 and shapes(clip)["encode 1: pooled_output"] == [1, pooled]
    vae = live_node(records, "6")
    called = {vae["facts"][k] for k in vae["facts"] if k.endswith(": called by node")}
    # VAEEncode, VAEDecode, and the ControlNet's condition image: ControlNetInpaintingAliMamaApply only attaches the
    # image, ComfyUI's ControlNet encodes it with the VAE when the sampler (KSampler, node 15) first runs it
    assert called == {"11", "15", "16"}

    assert_report_tables_the_inspect_records(entry, "18", ("4", "5", "6"), records)

    cond, lat = record(entry, "13"), record(entry, "14")
    assert cond["facts"]["type"] == "CONDITIONING" and any("control" in k for k in cond["facts"]), cond["facts"]
    assert shapes(lat)["samples"] == latent and shapes(lat)["noise_mask"][-2:] == [H, W]


def test_native_flux_fill_mixed_runs_comfyuis_model_lora_and_vae_in_fillscopes_sampler(server):
    prompt = swapped("native_flux_fill_mixed")
    lora, sampler_in = prompt["4"], prompt["9"]["inputs"]
    assert lora["class_type"] == "LoraLoaderModelOnly" and sampler_in["model"] == ["4", 0]
    assert "transformer" not in sampler_in and prompt["10"]["class_type"] == "VAEDecode"
    assert prompt["10"]["inputs"]["samples"] == ["9", 2]  # the sampler's LATENT into ComfyUI's VAEDecode
    entry, _ = run(server, prompt)
    image = saved_image(server, entry, "12")
    assert image.shape == (H, W, 3)

    tf = folder_config(server, FLUX, "transformer")
    tokens = (H // 16) * (W // 16)  # 8x VAE, 2x2 patches
    sampler = record(entry, "9")
    assert sampler["facts"]["steps_run"] == sampler_in["steps"] and sampler["facts"]["tokens"] == tokens
    rows = shapes(sampler)
    assert rows["transformer.input"] == [1, tokens, tf["in_channels"]]  # ComfyUI's MODEL called through FillScope's
    assert rows["transformer.output"] == [1, tokens, tf["out_channels"]]
    text = shapes(record(entry, "6"))
    assert text["t5.hidden"] == [1, 256, tf["joint_attention_dim"]]  # ComfyUI pads FLUX's T5 prompt to 256
    assert text["clip_l.pooled"] == [1, tf["pooled_projection_dim"]]
    assert shapes(record(entry, "8"))["fill_condition"][:2] == [1, tokens]

    report = {r["boundary"]: r for r in entry["outputs"]["12"]["fillscope_boundaries"]}
    print(f"native_flux_fill_mixed: Shapes Report {len(report)} rows; transformer input "
          f"{report['transformer input = cat(noisy 64, condition 320)']['shape']}")
    assert report["transformer input = cat(noisy 64, condition 320)"]["shape"] == [1, tokens, tf["in_channels"]]
    assert report["T5-XXL last hidden state"]["provenance"] == "from ComfyUI CONDITIONING (cross_attn)"
    assert report["VAE encode of masked image (scaled)"]["shape"] == [1, 16, H // 8, W // 8]

    # the LoRA on ComfyUI's MODEL reaches FillScope's sampler: without it (strength 0) the image differs
    strength, lora["inputs"]["strength_model"] = lora["inputs"]["strength_model"], 0.0
    plain = saved_image(server, run(server, prompt)[0], "12")
    diff = float(np.abs(image.astype(np.int16) - plain.astype(np.int16)).mean())
    print(f"native_flux_fill_mixed: LoRA at {strength} vs 0: mean |diff| "
          f"{diff:.2f} of 255")
    assert diff > 0
