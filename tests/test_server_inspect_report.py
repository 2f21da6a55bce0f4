"""The Shapes Report on a graph of ComfyUI's own nodes (no FillScope sampler, no `shapes` document): it tables the
records the Inspect Model / Inspect VAE nodes delivered for the prompt (nodes/live.py), run `after` the VAE Decode.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes: ComfyUI's own FluxInpaint
model at a tiny size (NativeTestTinyModel), ComfyUI's VAE over its TAESD class (NativeTestTinyTAESD), zero CONDITIONINGs
of the tiny widths; everything else is ComfyUI's core nodes (InpaintModelConditioning, KSampler, VAEDecode ...). One
prompt runs the graph twice, plain and through Inspect Model / Inspect VAE.

Checked: the report's JSON, text and ui hold the diffusion model's boundary rows (the shapes the live record has, in
the order of a model call, the native class and provenance) and the VAE's encode / decode rows; the image and the
latent are bit for bit those of the plain graph; with neither a shapes document nor any Inspect record the report is
refused naming `shapes` (no Inspect node in the prompt; Inspect nodes whose sampler and decoder ComfyUI reused from
its cache), and the next prompt with a new seed is tabled again.
"""

from __future__ import annotations

import json

import pytest
from comfy_server import ComfyExecutionError
from safetensors.torch import load_file
from test_server_inspect_model import (
    FLUX_POOLED,
    FLUX_TEXT,
    LATENT,
    SIZE,
    STEPS,
    TOKENS,
    base_graph,
    n,
    sample,
)

pytestmark = pytest.mark.server

MODEL_ROWS = ["sampler latent", "sigma", "concatenated condition", "diffusion model in = cat(x, c_concat)",
              "timestep", "text context", "pooled vector", "guidance", "diffusion model out", "denoised"]
IMAGE = [1, SIZE, SIZE, 3]  # ComfyUI's IMAGE: [B, H, W, C]


@pytest.fixture(scope="module")
def server(test_nodes_server):
    with test_nodes_server.module() as server:
        yield server


def fill_graph(seed: int, prefix: str) -> dict:
    """ComfyUI's native FLUX Fill inpaint graph twice: plain (m, vae) and inspected (Inspect Model 'ins', Inspect VAE
    'iv'), InpaintModelConditioning -> KSampler -> VAEDecode each; the Shapes Report after the inspected decode."""
    g = {**base_graph("flux_fill", FLUX_TEXT, FLUX_POOLED),
         "vae": n("NativeTestTinyTAESD", seed=0, latent_channels=16),
         "img": n("EmptyImage", width=SIZE, height=SIZE, batch_size=1, color=0x806040),
         "hole": n("SolidMask", value=1.0, width=SIZE // 2, height=SIZE // 2),
         "none": n("SolidMask", value=0.0, width=SIZE, height=SIZE),
         "mask": n("MaskComposite", destination=["none", 0], source=["hole", 0], x=SIZE // 4, y=SIZE // 4,
                   operation="add"),
         "ins": n("FillScopeInspectModel", model=["m", 0], modules=False),
         "iv": n("FillScopeInspectVAE", vae=["vae", 0])}
    for key, model, vae in (("plain", "m", "vae"), ("inspected", "ins", "iv")):
        g[f"imc_{key}"] = n("InpaintModelConditioning", positive=["pos", 0], negative=["neg", 0], vae=[vae, 0],
                            pixels=["img", 0], mask=["mask", 0], noise_mask=True)
        g.update(sample(key, (model, 0), seed, 1.0, (f"imc_{key}", 2), (f"imc_{key}", 0), (f"imc_{key}", 1)))
        g[f"dec_{key}"] = n("VAEDecode", samples=[key, 0], vae=[vae, 0])
        g[f"img_{key}"] = n("InspectTestSave", name=f"image_{key}_{seed}", image=[f"dec_{key}", 0])
    g["report"] = n("FillScopeShapesReport", filename_prefix=prefix, after=["dec_inspected", 0])
    return g


def saved(server, name: str, key: str):
    folder = "fillscope_native" if key == "samples" else "fillscope_inspect"
    return load_file(str(server.output_dir / folder / f"{name}.safetensors"))[key]


def report_of(server, entry) -> tuple[dict, dict]:
    ui = entry["outputs"]["report"]
    file = ui["fillscope_report"][0]
    return json.loads((server.output_dir / file["subfolder"] / file["filename"]).read_text()), ui


def refusal(server, graph) -> str:
    with pytest.raises(ComfyExecutionError) as e:
        server.run(graph, timeout=300)
    return str(e.value)


def test_a_native_graph_ends_in_a_shapes_report_of_its_inspect_records(server):
    seed = 2000
    pid = server.queue(fill_graph(seed, "inspect_report/native"))
    entry = server.wait(pid, timeout=300)

    # the inspected graph computes what the plain one does, bit for bit
    a, b = saved(server, f"plain_{seed}", "samples"), saved(server, f"inspected_{seed}", "samples")
    assert list(a.shape) == LATENT and bool((a == b).all())
    image, seen = saved(server, f"image_plain_{seed}", "image"), saved(server, f"image_inspected_{seed}", "image")
    assert list(image.shape) == IMAGE and image.dtype == seen.dtype and bool((image == seen).all())

    report, ui = report_of(server, entry)
    live = server.get_json(f"/fillscope/live?prompt_id={pid}")
    assert report["prompt_id"] == pid and report["shapes"] is None
    assert report["boundaries"] == ui["fillscope_boundaries"]
    sections = {s["node"]: s for s in report["inspect"]}
    assert sorted(sections) == ["ins", "iv"]
    for node, s in sections.items():  # the report tables exactly what was delivered for the prompt
        assert s["record"] == live[node]["fillscope_shapes"][0]["node"], node

    # the diffusion model's boundary, in the order of a model call, with the shapes the record measured
    model = sections["ins"]
    assert model["class"] == "Flux" and model["title"] == "Inspect Model"
    assert model["facts"]["provenance"] == "measured on cpu, native ComfyUI Flux"
    assert model["facts"]["steps seen"] == STEPS and model["facts"]["sampled by"] == "CFGGuider (node inspected)"
    rows = [r for r in report["boundaries"] if r["inspect_node"] == "ins"]
    assert [r["boundary"] for r in rows] == MODEL_ROWS
    got = {r["boundary"]: r["shape"] for r in rows}
    assert got["sampler latent"] == got["diffusion model out"] == got["denoised"] == LATENT
    assert got["concatenated condition"] == [1, 80, *LATENT[2:]]  # 16 masked-image latent + 64 (8x8-packed mask)
    assert got["diffusion model in = cat(x, c_concat)"] == [1, 96, *LATENT[2:]]
    assert got["text context"] == [1, TOKENS, FLUX_TEXT] and got["pooled vector"] == [1, FLUX_POOLED]
    assert got["sigma"] == got["timestep"] == got["guidance"] == [1]
    assert all(r["provenance"] == "measured" and r["device"] == "cpu" and r["class"] == "Flux"
               and r["node"] == "Inspect Model (node ins, Flux)" for r in rows)

    # the VAE: InpaintModelConditioning's encodes and VAE Decode's decode, each call's shapes in and out
    vae = sections["iv"]
    assert vae["class"] == "TAESD" and vae["facts"]["VAE object"] == "VAE"
    got = {r["tensor"]: (r["shape"], r["boundary"]) for r in report["boundaries"] if r["inspect_node"] == "iv"}
    assert got["decode 1: latent"] == (LATENT, "decode 1: latent in")
    assert got["decode 1: image"] == (IMAGE, "decode 1: image out")
    assert got["encode 1: pixels"][0] == IMAGE and got["encode 1: latent"][0] == LATENT
    assert not any(t.startswith("decode 2") for t in got)  # the plain decode's VAE records nothing
    callers = {r["tensor"]: r["called_by"] for r in vae["rows"]}
    assert callers["decode 1: image"] == "dec_inspected" and callers["encode 1: latent"] == "imc_inspected"

    text = ui["text"][0]
    assert "Inspect Model (node ins): Flux\n" in text and "Inspect VAE (node iv): TAESD\n" in text
    txt = (server.output_dir / "inspect_report" / ui["fillscope_report"][0]["filename"].replace(".json", ".txt"))
    assert txt.read_text() == text + "\n"
    print(text)


def test_a_report_with_nothing_to_table_is_refused_naming_shapes(server):
    msg = refusal(server, {"report": n("FillScopeShapesReport", filename_prefix="inspect_report/empty")})
    assert "input 'shapes'" in msg and "has no Inspect Model / Inspect CLIP / Inspect VAE node" in msg, msg
    assert "wire the graph's last output (e.g. VAE Decode's IMAGE) to after" in msg, msg


def test_a_report_whose_sampler_ran_from_cache_is_refused_and_a_new_seed_is_tabled(server):
    seed = 2100
    server.run(fill_graph(seed, "inspect_report/first"), timeout=300)
    # the same graph with another file name: ComfyUI runs the report alone, every other node from its cache
    msg = refusal(server, fill_graph(seed, "inspect_report/cached"))
    assert "input 'shapes'" in msg and "Inspect Model 'ins'" in msg and "Inspect VAE 'iv'" in msg, msg
    assert "reused the cached outputs" in msg and "change an input of the sampler (the seed)" in msg, msg

    # a new seed: the sampler and the decoder run again on the cached Inspect nodes' MODEL and VAE
    pid = server.queue(fill_graph(seed + 1, "inspect_report/cached"))
    report, _ = report_of(server, server.wait(pid, timeout=300))
    nodes = {s["node"]: s for s in report["inspect"]}
    assert nodes["ins"]["facts"]["steps seen"] == STEPS and report["prompt_id"] == pid
    assert any(r["tensor"] == "decode 1: image" for r in nodes["iv"]["rows"])
