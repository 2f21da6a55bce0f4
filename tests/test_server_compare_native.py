"""FillScope's FLUX Fill against ComfyUI's own FLUX.1 Fill MODEL on the same weights, through the Compare nodes in a
real ComfyUI 0.3.75 server (the session's shared one with tests/comfy_nodes, conftest.py test_nodes_server:
NativeFillTestTinyFluxFill builds ComfyUI's FluxInpaint at the tiny folder's config with its transformer weights
converted by ComfyUI's own key map, as tests/test_server_native_model.py does). Run A is FillScope's pipeline; run B the
same text, condition, schedule and decode with ComfyUI's model as the denoiser. Every boundary both runs pass agrees
within 1e-4 (relative), the steps' denoiser outputs included: the measured figures are printed under `pytest -s`."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.server

FOLDER, STEPS = "FLUX.1-Fill-dev", 3


@pytest.fixture(scope="module")
def server(test_nodes_server):
    from tiny_flux import build_tiny_flux_fill_folder

    def prepare(server):
        build_tiny_flux_fill_folder(server.models_dir / "diffusers" / FOLDER, seed=0)

    with test_nodes_server.module(prepare) as server:
        yield server


def n(class_type, **inputs) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def graph(prefix: str, b: dict) -> dict:
    fs = {"source": FOLDER, "dtype": "fp32"}
    run = {"guidance": 30.0, "dtype": "as loaded", "storage": "as loaded"}
    return {
        "1": n("FillScopeLoadCLIPL", **fs), "2": n("FillScopeLoadT5", **fs),
        "3": n("FillScopeLoadFluxFillTransformer", **fs), "4": n("FillScopeLoadVAE", kind="flux", **fs),
        "m": n("NativeFillTestTinyFluxFill", folder=FOLDER, context_in_dim=0),
        "6": n("FillScopeSyntheticImageMask", width=128, height=96, mask_fraction=0.5),
        "a": n("FillScopeFluxFillCompareRun", clip_l=["1", 0], t5=["2", 0], transformer=["3", 0], vae=["4", 0],
               implementation="fillscope", **run),
        "b": n("FillScopeFluxFillCompareRun", clip_l=["1", 0], t5=["2", 0], vae=["4", 0], **run, **b,
               **({"model": ["m", 0]} if b.get("implementation") == "native" else {"transformer": ["3", 0]})),
        "c": n("FillScopeCompare", run_a=["a", 0], run_b=["b", 0], image=["6", 0], mask=["6", 1],
               prompt="a red brick fireplace", seed=2, steps=STEPS, filename_prefix=f"fillscope/{prefix}"),
    }


def record(server, prefix: str) -> dict:
    found = sorted((server.output_dir / "fillscope").glob(f"{prefix}_*.json"))
    return json.loads(found[-1].read_text())


def test_comfyuis_own_flux_fill_model_agrees_with_fillscopes_at_every_boundary_within_1e_4(server):
    server.run(graph("native", {"implementation": "native"}), timeout=600)
    doc = record(server, "native")
    shared = [r for r in doc["comparison"]["boundaries"] if r["status"] in ("same", "differs")]
    print("\nFillScope vs ComfyUI native FLUX.1 Fill (tiny fp32, CPU), measured:")
    for r in shared:
        print(f"  {r['name']:<28} rel {r['rel_err']:.3e}  max abs {r['max_abs']:.3e}")
    names = {r["name"] for r in shared}
    assert {f"step[{i}].denoiser" for i in range(1, STEPS + 1)} <= names and "decoded_image" in names
    assert all(r["rel_err"] <= 1e-4 for r in shared), doc["comparison"]["first_divergence"]
    assert doc["b"]["implementation"] == "native" and "MODEL" in doc["b"]["facts"]["denoiser"]


def test_native_without_a_model_is_refused_naming_model_and_the_next_prompt_runs(server):
    from comfy_server import ComfyExecutionError

    g = graph("nomodel", {"implementation": "native"})
    del g["b"]["inputs"]["model"]
    with pytest.raises(ComfyExecutionError) as e:
        server.run(g, timeout=600)
    assert "'model'" in str(e.value) and "native" in str(e.value)
    server.run(graph("again", {"implementation": "fillscope"}), timeout=600)
    assert record(server, "again")["comparison"]["first_divergence"] is None


@pytest.mark.parametrize("implementation", ["fillscope", "native"])
def test_model_and_transformer_both_wired_are_refused_as_the_samplers_refuse_them(server, implementation):
    """Issue 35: one rule for two inputs that mean the same. The FLUX Fill sampler refuses FillScope's transformer
    and ComfyUI's MODEL both wired; FLUX Fill Compare Run took both and ran one. It refuses them in the sampler's
    words (nodes/native_model.require_one_denoiser), whichever implementation is chosen."""
    from comfy_server import ComfyExecutionError

    g = graph(f"both_{implementation}", {"implementation": implementation})
    g["b"]["inputs"].update(transformer=["3", 0], model=["m", 0])
    with pytest.raises(ComfyExecutionError) as e:
        server.run(g, timeout=600)
    msg = str(e.value)
    assert "input 'transformer'" in msg and "is wired and so is 'model'" in msg and "exactly one denoiser" in msg, msg
    assert "not both" in msg
