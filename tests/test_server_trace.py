"""The trace nodes in a real ComfyUI server: one shape-equivalent denoiser step of each meta stack under the
tracers, the five-page report (HTML + JSON) written to the output folder and served by /view."""

from __future__ import annotations

import json

import pytest

from workflow_helpers import load_api, node_id

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def run_trace(server, name, trace_node, **inputs):
    prompt = load_api(name)
    prompt[node_id(prompt, trace_node)]["inputs"].update(inputs)
    entry = server.run(prompt, timeout=600)
    out = entry["outputs"][node_id(prompt, trace_node)]
    files = {f["filename"].rsplit(".", 1)[1]: f for f in out["fillscope_report"]}
    report = json.loads(server.view(files["json"]["filename"], files["json"]["subfolder"], "output"))
    html = server.view(files["html"]["filename"], files["html"]["subfolder"], "output").decode()
    return report, html, out["text"][0]


def test_flux_fill_trace_reproduces_the_seed_module_figure(server):
    report, html, summary = run_trace(server, "flux_fill_trace", "FillScopeFluxFillTrace")
    module = report["evidence"]["module"]
    # the seed's 2,029 rows / 2,051 hits (one transformer forward + T5 + CLIP-L + VAE encode + VAE decode)
    assert abs(module["rows"] - 2029) / 2029 < 0.01 and abs(module["hits"] - 2051) / 2051 < 0.01
    assert module["provenance"] == "measured" and module["device"] == "meta"
    line = report["evidence"]["line"]
    assert line["rows"] > 0 and line["hits"] > line["rows"] and line["python"] and line["tracer"] in ("sys.settrace", "sys.monitoring")
    assert report["evidence"]["params"]["tie_counted"] == 17_003_768_291
    assert abs(report["evidence"]["flops"]["per_step"] / 1e12 - 74.4) < 0.1
    assert report["evidence"]["peak_memory"]["provenance"] == "estimated"
    stages = {s["id"]: s for s in report["pages"]["denoiser"]["stages"]}
    assert len(stages["double"]["blocks"]) == 19 and len(stages["single"]["blocks"]) == 38
    assert report["figures"]["transformer.input"]["value"] == [1, 4096, 384]
    assert f"{module['rows']:,}" in summary and "module rows/hits" in summary
    assert html.startswith("<!DOCTYPE html>") and "fillscope.report/1" in html and "https://" not in html.split("application/json")[0]


def test_sd3_controlnet_trace_lists_24_joint_and_23_controlnet_blocks(server):
    report, html, _ = run_trace(server, "sd3_controlnet_trace", "FillScopeSD3ControlNetTrace", line_trace=False)
    stages = {s["id"]: s for s in report["pages"]["denoiser"]["stages"]}
    assert len(stages["joint"]["blocks"]) == 24 and len(stages["controlnet"]["blocks"]) == 23
    assert report["evidence"]["params"]["unique"] == 9_716_387_043
    assert report["evidence"]["line"] is None
    assert report["figures"]["inpaint_condition"]["value"] == [1, 17, 128, 128]
    assert abs(report["evidence"]["flops"]["per_step"] / 1e12 - 35.8) < 0.1


def test_klein_trace_lists_5_double_and_20_single_blocks_with_the_reference_tokens(server):
    report, html, summary = run_trace(server, "klein_trace", "FillScopeKleinTrace", line_trace=False)
    assert report["model"] == "klein-4b" and report["title"] == "FLUX.2 [klein] 4B"
    stages = {s["id"]: s for s in report["pages"]["denoiser"]["stages"]}
    assert len(stages["double"]["blocks"]) == 5 and len(stages["single"]["blocks"]) == 20
    assert report["evidence"]["params"]["per_component"]["transformer"]["unique"] == 3_875_544_576
    assert report["figures"]["prompt_embeds"]["value"] == [1, 512, 7680]
    assert report["figures"]["transformer.input"]["value"] == [1, 8192, 128]
    assert report["figures"]["reference_tokens"]["value"] == [1, 4096, 128]
    assert abs(report["evidence"]["flops"]["per_step"] / 1e12 - 76.7) < 0.1  # REFERENCE.md section 9
    assert "BatchNorm" in html and "FLUX.2 [klein] 4B" in summary
