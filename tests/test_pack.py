"""The pack as ComfyUI and its registry see it: light import, registry metadata, requirements in step."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from comfy_server import comfyui_path

REPO = Path(__file__).resolve().parent.parent

# Every node the pack registers, exactly (workflows and users' graphs refer to these ids: never rename one).
NODE_IDS = sorted([
    # loaders
    "FillScopeLoadCLIPL", "FillScopeLoadCLIPG", "FillScopeLoadT5", "FillScopeLoadFluxFillTransformer",
    "FillScopeLoadSD3Transformer", "FillScopeLoadSD3InpaintControlNet", "FillScopeLoadVAE",
    "FillScopeLoadQwen3", "FillScopeLoadKleinTransformer",
    # text
    "FillScopeCLIPLEncode", "FillScopeCLIPGEncode", "FillScopeT5Encode", "FillScopeFluxTextCondition",
    "FillScopeSD3TextCondition", "FillScopeQwen3Encode",
    "FillScopeFluxPrompt", "FillScopeSD3Prompt",  # one prompt box per prompt (issue 12)
    # ComfyUI CONDITIONING in
    "FillScopeFluxTextFromConditioning", "FillScopeSD3TextFromConditioning", "FillScopeKleinTextFromConditioning",
    # FLUX.1 Fill, SD3 + inpainting ControlNet, FLUX.2 [klein]
    "FillScopeFluxFillCondition", "FillScopeFluxFillSampler",
    "FillScopeSD3InpaintCondition", "FillScopeSD3ControlNetInpaintSampler",
    "FillScopeKleinInpaintCondition", "FillScopeKleinEditCondition", "FillScopeKleinSampler",
    # image, inspection, traces
    "FillScopeVAEDecode", "FillScopePasteBack",
    "FillScopeSyntheticImageMask", "FillScopeShapesReport",
    "FillScopeFluxFillTrace", "FillScopeSD3ControlNetTrace", "FillScopeKleinTrace",
    "FillScopeFluxFillTiledInpaint", "FillScopeSD3ControlNetTiledInpaint", "FillScopeKleinTiledInpaint",
    # LoRA (one node per transformer socket type)
    "FillScopeFluxFillLoRA", "FillScopeSD3LoRA", "FillScopeKleinLoRA",
    # compositing (issue 13): crop and stitch, outpaint padding
    "FillScopeCropForInpaint", "FillScopeStitch", "FillScopeOutpaintPad",
    # batches: a manifest run from ComfyUI
    "FillScopeBatch",
    # ComfyUI's own MODEL inspected while its samplers run it (issue 21)
    "FillScopeInspectModel",
    # ComfyUI's own values, CLIP and VAE inspected (issue 21)
    "FillScopeInspect", "FillScopeInspectCLIP", "FillScopeInspectVAE",
    # one job run two ways, boundary by boundary (issue 25)
    "FillScopeFluxFillCompareRun", "FillScopeSD3ControlNetCompareRun", "FillScopeKleinCompareRun", "FillScopeCompare",
])


def test_loading_the_pack_imports_no_diffusers_or_transformers_and_registers_exactly_its_nodes():
    code = f"""
import sys, importlib.util, asyncio
sys.path.insert(0, {str(comfyui_path())!r})
spec = importlib.util.spec_from_file_location("FillScope", {str(REPO / "__init__.py")!r},
                                              submodule_search_locations=[{str(REPO)!r}])
mod = importlib.util.module_from_spec(spec); sys.modules["FillScope"] = mod; spec.loader.exec_module(mod)
ext = asyncio.run(mod.comfy_entrypoint())
nodes = asyncio.run(ext.get_node_list())
print("IDS", sorted(n.define_schema().node_id for n in nodes))
print("NAMES", sorted(n.define_schema().display_name for n in nodes))
heavy = [m for m in ("diffusers", "transformers") if m in sys.modules]
print("HEAVY", heavy)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
    ids = next(line for line in out.stdout.splitlines() if line.startswith("IDS "))
    assert ids == f"IDS {NODE_IDS}"  # no node missing, none extra, none twice
    # ComfyUI's frontend shows the pack's name in a badge on each node: the display names do not repeat it, and no two
    # are alike (tests/test_node_schema_polish.py checks them against ComfyUI's own nodes on a server)
    names = ast.literal_eval(next(line for line in out.stdout.splitlines() if line.startswith("NAMES "))[6:])
    assert len(names) == len(set(names)) == len(NODE_IDS)
    assert [n for n in names if "fillscope" in n.casefold()] == []


def test_engine_imports_without_comfyui():
    code = "import sys; import fillscope.pipelines.flux_fill, fillscope.cli; print(sorted(m for m in sys.modules if m.startswith(('comfy', 'folder_paths'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_requirements_txt_matches_pyproject_dependencies():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = [l.strip() for l in (REPO / "requirements.txt").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert sorted(reqs) == sorted(deps)


def test_comfy_node_validate_passes_in_the_pack_root():
    comfy = Path(sys.executable).parent / "comfy"
    env = dict(os.environ, DO_NOT_TRACK="1", PATH=f"{comfy.parent}:{os.environ.get('PATH', '')}")
    out = subprocess.run([str(comfy), "--skip-prompt", "node", "validate"], cwd=REPO, capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "validation checks passed" in out.stdout + out.stderr
