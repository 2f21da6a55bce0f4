"""The wrappers of FillScope Inspect CLIP / VAE (nodes/inspect_clip.py, inspect_vae.py) on ComfyUI's own CLIP and VAE objects, in
one subprocess (ComfyUI's modules in CPU mode, the pack imported as ComfyUI imports it; live.publish captured):

- the input object is untouched (no instance attribute added) and its calls record nothing;
- the copy gives the very results of the original, shares the VAE's ModelPatcher (ComfyUI loads and unloads one set
  of weights) / holds a clone of the CLIP's patcher;
- the wrappers hold their object weakly: a copy is freed by reference counting alone (garbage collector off), as
  ComfyUI's model management expects (a model kept alive by a cycle is logged as a potential memory leak);
- Inspect on an inspected copy records to both nodes; a clone of an inspected CLIP (CLIPSetLastLayer, LoRA) records.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from comfy_server import comfyui_installed, comfyui_path

REPO = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import gc, importlib.util, os, sys, tempfile, weakref
sys.path.insert(0, {tests!r})
import checkpoint_files as cf
cf.comfy()
import torch
spec = importlib.util.spec_from_file_location("FillScope", {init!r}, submodule_search_locations=[{repo!r}])
mod = importlib.util.module_from_spec(spec); sys.modules["FillScope"] = mod; spec.loader.exec_module(mod)
from FillScope.nodes import inspect_calls, inspect_clip, inspect_vae, live
published = []
live.publish = lambda node, record, trail=None: published.append((node, record))
live.current_prompt_id = lambda: "P"
from tiny_flux import build_tiny_flux_fill_folder
root = tempfile.mkdtemp(); build_tiny_flux_fill_folder(os.path.join(root, "F"), seed=0)

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m); m._folder = lambda n: os.path.join(root, n); return m

nodes_dir = os.path.join({tests!r}, "comfy_nodes")
vae, = load(os.path.join(nodes_dir, "fillscope_inspect_test_nodes.py"), "t1").TinyVAE().load("F")
clip, = load(os.path.join(nodes_dir, "fillscope_native_test_nodes.py"), "t2").TinyCLIP().load("F", "flux")

# VAE
before = dict(vars(vae))
log_a = inspect_calls.CallLog("a", "FillScopeInspectVAE", "Inspect VAE", {{}})
seen = inspect_vae.inspected_vae(vae, log_a)
assert vars(vae).keys() == before.keys() and "decode" not in vars(vae) and "decode" in vars(seen)
assert seen.patcher is vae.patcher and seen.first_stage_model is vae.first_stage_model
img = torch.rand(1, 64, 96, 3)
latent = vae.encode(img)
assert not published, "the input VAE recorded"
assert torch.equal(seen.encode(img), latent) and torch.equal(seen.decode(latent), vae.decode(latent))
assert torch.equal(seen.decode_tiled(latent, tile_x=4, tile_y=4, overlap=1), vae.decode_tiled(latent, tile_x=4, tile_y=4, overlap=1))
assert len(published) == 3 and published[-1][0] == "a" and published[-1][1]["facts"]["calls"] == 3
log_b = inspect_calls.CallLog("b", "FillScopeInspectVAE", "Inspect VAE", {{}})
twice = inspect_vae.inspected_vae(seen, log_b)
published.clear(); twice.decode(latent)
assert sorted(n for n, _ in published) == ["a", "b"]
published.clear(); seen.decode(latent); vae.decode(latent)
assert [n for n, _ in published] == ["a"]
gc.disable()
refs = [weakref.ref(twice), weakref.ref(seen)]
del twice, seen
assert all(r() is None for r in refs), "an inspected VAE copy outlived its last reference (a cycle)"
gc.enable()

# CLIP
published.clear()
log_c = inspect_calls.CallLog("c", "FillScopeInspectCLIP", "Inspect CLIP", {{}})
seen = inspect_clip.inspected_clip(clip, log_c)
assert not any(k in vars(clip) for k in inspect_clip.CLIP_METHODS) and inspect_calls.LOGS not in vars(clip)
assert seen.patcher is not clip.patcher and seen.cond_stage_model is clip.cond_stage_model
ours = seen.encode_from_tokens_scheduled(seen.tokenize("a red brick fireplace"))
theirs = clip.encode_from_tokens_scheduled(clip.tokenize("a red brick fireplace"))
assert torch.equal(ours[0][0], theirs[0][0]) and torch.equal(ours[0][1]["pooled_output"], theirs[0][1]["pooled_output"])
assert len(published) == 1  # one record for the scheduled encode (its inner encode_from_tokens is part of it)
facts = published[-1][1]["facts"]
assert facts["encode 1: tokens l"].startswith("1 chunk x 77: 4 text + 2 special") and facts["encode 1: ids l"][0] == 49406
layered = seen.clone(); layered.clip_layer(-2)
layered.encode_from_tokens(layered.tokenize("a cat"), return_pooled=True)
assert len(published) == 2 and published[-1][1]["facts"]["calls"] == 2
gc.disable()
refs = [weakref.ref(seen), weakref.ref(layered)]
del seen, layered
assert all(r() is None for r in refs), "an inspected CLIP clone outlived its last reference (a cycle)"
print("WRAPPERS OK")
"""


def test_wrappers_on_comfyuis_clip_and_vae():
    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()}")
    code = SCRIPT.format(tests=str(REPO / "tests"), init=str(REPO / "__init__.py"), repo=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0 and "WRAPPERS OK" in out.stdout, out.stdout[-3000:] + out.stderr[-6000:]
