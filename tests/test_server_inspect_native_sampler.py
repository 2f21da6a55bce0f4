"""FillScope Inspect Model on a native MODEL that FillScope's own FLUX Fill sampler runs (nodes/native_model.py
run_native: the sampling run inside the MODEL's OUTER_SAMPLE wrappers, NativeRun as the executor's class_obj), in a
real ComfyUI 0.3.75 server.

The graph is tests/test_server_native_model.py's: FillScope's loaders on the tiny FLUX Fill folder
(tests/tiny_flux.py), FillScope's prompt and condition, and ComfyUI's own FluxInpaint model at that folder's config
and weights (test node NativeFillTestTinyFluxFill). One prompt samples the MODEL twice, once directly and once through
Inspect Model.

Checked: the latents are bit for bit the same with and without Inspect Model; the live record has one entry per
step of FillScope's schedule (its sigmas in transformer_options' sample_sigmas, as ComfyUI's samplers pass them), its
sigmas are the sampler's, the boundary rows have the widths of the folder's transformer config, the provenance and
what sampled (NativeRun and the sampler's node); with modules, one row per transformer block and no hook left on the
model afterwards; a Shapes Report on the sampler's shapes tables FillScope's boundaries and the Inspect record.
"""

from __future__ import annotations

import json

import pytest
from test_server_native_model import FOLDER, STEPS, graph, n
from workflow_helpers import saved_latent as latent

pytestmark = pytest.mark.server

PROMPT_TOKENS = 512  # the FillScopeFluxPrompt max_length of the graph (test_server_native_model.graph)


@pytest.fixture(scope="module")
def server(test_nodes_server):
    from tiny_flux import build_tiny_flux_fill_folder

    def prepare(server):
        build_tiny_flux_fill_folder(server.models_dir / "diffusers" / FOLDER, seed=0)

    with test_nodes_server.module(prepare) as server:
        yield server


def transformer_config(server) -> dict:
    return json.loads((server.models_dir / "diffusers" / FOLDER / "transformer" / "config.json").read_text())


def inspected_graph(name: str, modules: bool = False, **kw) -> dict:
    """test_server_native_model.graph's prompt with a second sampler ("8i") on the same MODEL through Inspect Model
    ("ins"), its latents saved as `<name>_inspected`; the first sampler saves `<name>_plain`."""
    g = graph(f"{name}_plain", native=True, **kw)
    g["ins"] = n("FillScopeInspectModel", model=["m", 0], modules=modules)
    g["8i"] = n("FillScopeFluxFillSampler", **{**g["8"]["inputs"], "model": ["ins", 0]})
    g["9i"] = n("NativeFillTestSaveFSLatent", latent=["8i", 0], name=f"{name}_inspected")
    return g


def live_record(server, prompt_id, node="ins") -> dict:
    outputs = server.get_json(f"/fillscope/live?prompt_id={prompt_id}")
    assert node in outputs, f"no live record of node {node}: {sorted(outputs)}"
    return outputs[node]["fillscope_shapes"][0]["node"]


def shapes(record) -> dict:
    return {t["name"]: t["shape"] for t in record["tensors"]}


def steps_of(record) -> list:
    return [v for k, v in record["facts"].items() if k.startswith("step ") and k[5:].isdigit()]


@pytest.mark.parametrize("case", [{}, {"denoise": 0.75, "soft": True, "seed": 3}], ids=["plain", "denoise-soft-mask"])
def test_fillscopes_sampler_on_an_inspected_model_gives_the_same_latents_and_one_entry_per_step(server, case):
    pid = server.queue(inspected_graph("run", **case))
    entry = server.wait(pid, timeout=600)
    plain, inspected = latent(server, "run_plain"), latent(server, "run_inspected")
    assert plain.dtype == inspected.dtype and bool((plain == inspected).all()), "Inspect Model changed the latents"
    b, c, h, w = plain.shape

    sampler = entry["outputs"]["8i"]["fillscope_shapes"][0]["node"]["facts"]  # FillScope's own record of the run
    rec = live_record(server, pid)
    facts = rec["facts"]
    print(f"Inspect Model on FillScope's sampler ({case or 'plain'}): {facts['steps seen']} steps of "
          f"{sampler['steps_run']}, sigma {facts['sigma first']} -> {facts['sigma last']} (sampler "
          f"{sampler['sigma_start']:.6g} -> {sampler['sigma_last_step']:.6g}), latents bit for bit equal")
    assert facts["provenance"] == "measured on cpu, native ComfyUI Flux"
    assert facts["diffusion model"] == "Flux" and facts["sampled by"] == "NativeRun (node 8i)"
    # one entry per step of FillScope's schedule (the steps denoise leaves), one cond call each
    assert facts["steps seen"] == sampler["steps_run"] == len(steps_of(rec))
    assert sampler["steps_run"] == (STEPS if not case else round(STEPS * case["denoise"]))
    assert facts["calls per step"] == 1 and facts["total calls"] == sampler["steps_run"]
    assert facts["cfg batches"] == "one call (cond)"
    assert abs(facts["sigma first"] - sampler["sigma_start"]) < 1e-6
    assert abs(facts["sigma last"] - sampler["sigma_last_step"]) < 1e-6
    # FillScope's schedule reaches the wrappers as ComfyUI's samplers pass theirs (transformer_options' sample_sigmas)
    assert facts["steps scheduled"] == sampler["steps_run"]
    assert all("1 call (cond) · batch 1" in s for s in steps_of(rec))

    # the boundary: widths of the folder's transformer config (diffusers' names, per 2x2 token -> per pixel)
    cfg = transformer_config(server)
    model_in = cfg["in_channels"] // 4  # 16 noisy + 16 masked-image latent + 64 packed mask per pixel
    got = shapes(rec)
    assert got["x (sampler latent)"] == [b, c, h, w] and c == cfg["out_channels"] // 4
    assert got["c_concat (concatenated to x)"] == [b, model_in - c, h, w]
    assert got["x (diffusion model in)"] == [b, model_in, h, w]
    assert got["context"] == [b, PROMPT_TOKENS, cfg["joint_attention_dim"]]
    assert got["y (pooled)"] == [b, cfg["pooled_projection_dim"]]
    assert got["sigma"] == got["timestep"] == got["guidance"] == [b]
    assert got["diffusion model out"] == got["denoised (apply_model out)"] == [b, c, h, w]
    assert all(t["provenance"] == "measured" and t["device"] == "cpu" for t in rec["tensors"])
    assert rec["warnings"] == [] and rec["table"] == "native_model"


def test_modules_give_one_row_per_block_and_leave_no_hook(server):
    g = inspected_graph("modules", modules=True)
    # what is left on the model and on the inspected clone after the sampler ran (its ComfyUI LATENT: output 2)
    g["h_model"] = n("NativeTestModelHooks", model=["m", 0], after=["8i", 2], name="native_sampler_model")
    g["h_clone"] = n("NativeTestModelHooks", model=["ins", 0], after=["8i", 2], name="native_sampler_clone")
    pid = server.queue(g)
    server.wait(pid, timeout=600)
    assert bool((latent(server, "modules_plain") == latent(server, "modules_inspected")).all())
    facts = live_record(server, pid)["facts"]
    cfg = transformer_config(server)
    blocks = {k[6:]: v for k, v in facts.items() if k.startswith("block ")}
    assert facts["blocks"] == len(blocks) == cfg["num_layers"] + cfg["num_single_layers"]
    assert all(v.startswith(f"{STEPS} calls · ") for v in blocks.values()), blocks
    for name in ("native_sampler_model", "native_sampler_clone"):
        report = json.loads((server.output_dir / "fillscope_native" / f"{name}.json").read_text())
        assert report["hooked_modules"] == {} and report["modules"] > 10, (name, report)


def test_a_shapes_report_on_the_sampler_tables_fillscopes_boundaries_and_the_inspect_record(server):
    # a seed no other prompt here uses: right after the plain case above (xdist may hand this test alone to a worker),
    # ComfyUI would serve that case's identical samplers from its cache, and a cached sampler makes no Inspect record
    g = inspected_graph("report", seed=1)
    g["report"] = n("FillScopeShapesReport", shapes=["8i", 1], filename_prefix="inspect_native/report")
    pid = server.queue(g)
    entry = server.wait(pid, timeout=600)
    ui = entry["outputs"]["report"]
    report = json.loads((server.output_dir / "inspect_native" / ui["fillscope_report"][0]["filename"]).read_text())
    assert report["boundaries"] == ui["fillscope_boundaries"] and report["prompt_id"] == pid

    rec = live_record(server, pid)
    (section,) = report["inspect"]
    assert section["node"] == "ins" and section["class"] == "Flux" and section["record"] == rec
    assert section["facts"]["sampled by"] == "NativeRun (node 8i)"
    native = {r["tensor"]: r for r in report["boundaries"] if r.get("inspect_node") == "ins"}
    own = {r["tensor"]: r for r in report["boundaries"] if "inspect_node" not in r}
    assert {k: r["shape"] for k, r in native.items()} == shapes(rec)
    assert native["x (diffusion model in)"]["boundary"] == "diffusion model in = cat(x, c_concat)"
    # FillScope's tokens [B, N, 384] are the native model's [B, 96, h, w] input, patchified 2x2
    b, c, h, w = native["x (diffusion model in)"]["shape"]
    assert own["transformer.input"]["shape"] == [b, h * w // 4, c * 4]
    assert own["transformer.output"]["shape"] == [b, h * w // 4, native["diffusion model out"]["shape"][1] * 4]
    text = ui["text"][0]
    assert text.startswith("Inspect Model (node ins): Flux\n  provenance: measured on cpu, native ComfyUI Flux")
    assert "transformer input = cat(noisy 64, condition 320)" in text
    print(text)


def test_an_interrupted_fillscope_run_is_recorded_up_to_the_interrupt_and_leaves_no_hook(server):
    # ComfyUI's own APPLY_MODEL wrapper asks for an interrupt after the 2nd model call; FillScope's progress callback
    # raises it at the end of that step, inside the OUTER_SAMPLE wrappers
    g = graph("interrupted", native=True, interrupt_at=2)
    g["ins"] = n("FillScopeInspectModel", model=["stop", 0], modules=True)
    g["8"]["inputs"]["model"] = ["ins", 0]
    pid = server.queue(g)
    entry = server.wait(pid, timeout=600, raise_on_error=False)
    assert any(kind == "execution_interrupted" for kind, _ in entry["status"]["messages"]), entry["status"]
    rec = live_record(server, pid)
    assert rec["facts"]["total calls"] == rec["facts"]["steps seen"] == 2
    assert rec["warnings"][0].startswith("the sampling run ended with InterruptProcessingException after 2")

    g = graph("after_interrupt", native=True)
    g["h"] = n("NativeTestModelHooks", model=["m", 0], after=["8", 2], name="native_sampler_after_interrupt")
    server.run(g, timeout=600)
    report = json.loads((server.output_dir / "fillscope_native" / "native_sampler_after_interrupt.json").read_text())
    assert report["hooked_modules"] == {} and report["patcher_wrappers"] == {}
