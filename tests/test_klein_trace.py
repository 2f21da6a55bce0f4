"""The five-page report for FLUX.2 [klein] from a real trace on the meta device: the production topology of 4B
and 9B (5 + 20 / 8 + 24 blocks, 3.876 B / 9.079 B transformer parameters, two text widths), the reference tokens
on page 1, the BatchNorm-normalised latent on page 5, FLOPs and module rows measured in the run; and the CLI that
writes it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tiny_klein import qwen_bpe_dir
from tiny_models import tokenizers_available

from fillscope.pipelines import klein
from fillscope.trace.report import render_report
from fillscope.trace.run import trace_pipeline

pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

TOPOLOGY = {"klein-4b": (5, 20, 3_875_544_576, 7680), "klein-9b": (8, 24, 9_078_581_248, 12288)}


@pytest.fixture(scope="module", params=list(TOPOLOGY))
def report(request):
    stack = klein.load_stack("meta", tokenizer_folders=(qwen_bpe_dir(),), variant=request.param)
    return request.param, trace_pipeline(request.param, stack, height=512, width=512, line_trace=False, memory=False)


def test_page_3_lists_every_block_of_the_variant(report):
    model, rep = report
    double, single, _, _ = TOPOLOGY[model]
    stages = {s["id"]: s for s in rep["pages"]["denoiser"]["stages"]}
    assert stages["double"]["count"] == double and len(stages["double"]["blocks"]) == double
    assert stages["single"]["count"] == single and len(stages["single"]["blocks"]) == single
    assert all(b["flops"] and b["hits"] == 1 for s in stages.values() for b in s["blocks"])


def test_parameters_and_text_width_are_the_published_ones(report):
    model, rep = report
    _, _, params, width = TOPOLOGY[model]
    assert rep["evidence"]["params"]["per_component"]["transformer"]["unique"] == params
    assert rep["figures"]["prompt_embeds"]["value"] == [1, 512, width]
    assert rep["title"] == f"FLUX.2 [klein] {model[-2:].upper()}"


def test_page_1_carries_the_reference_tokens_into_the_transformer(report):
    _, rep = report
    edges = {(e["from"], e["to"]): e["figure"] for e in rep["pages"]["macro"]["edges"]}
    assert edges[("reference", "transformer")] == "reference_tokens"
    assert rep["figures"]["reference_tokens"]["value"] == [1, 1024, 128]  # 512x512: (512/16)^2 tokens
    assert rep["figures"]["transformer.input"]["value"] == [1, 2048, 128]
    assert rep["figures"]["transformer.output.kept"]["value"] == [1, 1024, 128]


def test_page_5_shows_the_batchnorm_normalised_latent(report):
    _, rep = report
    vae = rep["pages"]["vae"]
    assert vae["latent_channels"] == 32 and "BatchNorm" in vae["latent_rule_en"]
    assert rep["figures"][vae["encode_figure"]]["value"] == [1, 128, 32, 32]
    html = render_report(rep)
    assert "BatchNorm running mean and variance" in html


def test_flops_and_module_rows_are_measured_in_the_run(report):
    _, rep = report
    ev = rep["evidence"]
    assert ev["flops"]["per_step"] > 0 and ev["flops"]["provenance"] == "measured"
    assert set(ev["module"]["per_component"]) == {"qwen3", "transformer", "vae"}


def test_cli_writes_the_klein_report(tmp_path, capsys):
    """The report through cli.main in this process (a subprocess spent most of its time importing torch, diffusers
    and transformers again); `python -m fillscope.cli` itself is run once, on an argument it refuses at once."""
    from fillscope import cli

    code = cli.main(["trace", "klein-4b", "--weights", "meta", "--size", "256x256", "--no-line-trace",
                     "--qwen-tokenizer", str(qwen_bpe_dir()), "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    assert "FLUX.2 [klein] 4B at 256x256" in out.out
    written = json.loads((tmp_path / "klein-4b_trace.json").read_text())
    assert written["model"] == "klein-4b" and (tmp_path / "klein-4b_trace.html").is_file()
    entry = subprocess.run([sys.executable, "-m", "fillscope.cli", "trace", "klein-4b", "--size", "0x0"],
                           capture_output=True, text=True, timeout=300)
    assert entry.returncode == 2 and "the width, 0, is below" in entry.stderr, entry.stderr[-2000:]


def test_cli_names_the_qwen_tokenizer_when_none_is_given_or_found(tmp_path, monkeypatch, capsys):
    from fillscope import cli  # without the flag the CLI looks for ComfyUI's (tests/test_manifest_bounds.py): none here

    monkeypatch.setattr(cli, "find_tokenizer_folders", lambda kinds: ({}, ["nowhere"]))
    assert cli.main(["trace", "klein-4b", "--weights", "meta", "--size", "256x256", "--out", str(tmp_path)]) == 2
    assert "--qwen-tokenizer DIR" in capsys.readouterr().err
