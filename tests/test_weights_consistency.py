"""Every weight input checked before it can do harm (issue 10), at engine level: a config.json that does not match
its weights is refused naming the file, the count and the keys (never loaded with fresh random tensors); a damaged
config.json names the file and where its JSON breaks; a single file that lacks tensors or holds extra ones is
refused; a placeholder too big for the memory available is refused with both figures before anything is
allocated (the available figure injected: nothing big is allocated here); the model-folder helpers of the nodes
follow links, never loop and keep the source string inside the model folders (ComfyUI's folder_paths, in a
subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import checkpoint_files as cf  # tests/ is on sys.path: conftest.py
import pytest
import torch
from comfy_server import comfyui_installed, comfyui_path
from tiny_flux import build_tiny_components, build_tiny_flux_fill_folder
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

from fillscope.errors import FillScopeInputError
from fillscope.models import (
    AVAILABLE_RAM_ENV,
    AVAILABLE_VRAM_ENV,
    available_memory,
    build_on_meta,
    check_room_for,
    weight_bytes,
)
from fillscope.weights import load_component

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("consistency")
    return {"flux": build_tiny_flux_fill_folder(root / "flux", seed=0),
            "sd3": build_tiny_sd3_folder(root / "sd3", seed=0),
            "controlnet": build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0),
            "controlnet_old_config": build_tiny_sd3_controlnet_folder(root / "controlnet_old", seed=0,
                                                                      config_has_extra_channels=False)}


def edited_copy(src: Path, dst: Path, sub: str, **changes) -> Path:
    shutil.copytree(src, dst)
    path = dst / sub / "config.json"
    config = json.loads(path.read_text())
    for key, delta in changes.items():
        config[key] = config[key] + delta
    path.write_text(json.dumps(config))
    return dst


# ---- what diffusers / transformers report for the real tiny folders: nothing is refused ------------------------


@pytest.mark.parametrize("kind, folder", [
    ("flux_fill_transformer", "flux"), ("flux_vae", "flux"), ("clip_l", "flux"), ("t5_xxl", "flux"),
    ("sd3_transformer", "sd3"), ("sd3_vae", "sd3"), ("clip_l", "sd3"), ("clip_g", "sd3"), ("t5_xxl", "sd3"),
    ("sd3_controlnet", "controlnet"), ("sd3_controlnet", "controlnet_old_config"),
])
def test_every_tiny_folder_component_passes_the_consistency_check(folders, kind, folder):
    """T5's encoder.embed_tokens (tied to shared), CLIP's position_ids and SD3's pos_embed table are legitimately
    absent or computed; the check refuses none of the folders the tests build."""
    comp = load_component(kind, folders[folder], dtype="bf16", device="cpu")
    assert not any(p.is_meta for p in comp.model.parameters())


# ---- config.json that does not match its weights ---------------------------------------------------------------


def test_config_with_more_blocks_than_the_weights_is_refused_naming_the_file_and_keys(folders, tmp_path):
    repo = edited_copy(folders["flux"], tmp_path / "more", "transformer", num_layers=1)
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_fill_transformer", repo, dtype="fp32", device="cpu", input_name="transformer source")
    msg = str(e.value)
    assert msg.startswith("[FillScope] input 'transformer source': ")
    assert f"'{repo / 'transformer' / 'config.json'}' does not match the weights in 'diffusion_pytorch_model.safetensors'" in msg
    assert "the config builds 32 tensors the weights do not hold (transformer_blocks.1." in msg
    assert "(27 more)" in msg  # 5 of 32 shown
    assert ("Fix: the config.json does not match these weights: use the config that came with them, or download "
            "the repository again") in msg


def test_config_with_fewer_blocks_than_the_weights_is_refused(folders, tmp_path):
    repo = edited_copy(folders["flux"], tmp_path / "fewer", "transformer", num_single_layers=-1)
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_fill_transformer", repo, dtype="fp32", device="cpu")
    assert "the weights hold 14 tensors the config has no place for (single_transformer_blocks.0." in str(e.value)


def test_config_with_another_width_blames_the_config_not_the_download(folders, tmp_path):
    repo = edited_copy(folders["flux"], tmp_path / "width", "transformer", joint_attention_dim=8)
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_fill_transformer", repo, dtype="fp32", device="cpu")
    msg = str(e.value)
    assert "the shapes of 1 tensor differ between the weights and the config" in msg
    assert "context_embedder.weight: weights [32, 32], config [32, 40]" in msg
    assert "does not match these weights" in msg and "incomplete or corrupt" not in msg


@pytest.mark.parametrize("kind, sub, change", [
    ("clip_l", "text_encoder", {"num_hidden_layers": 1}),
    ("t5_xxl", "text_encoder_2", {"num_layers": 1}),
    ("flux_vae", "vae", {"layers_per_block": 1}),
])
def test_transformers_and_vae_configs_that_do_not_match_are_refused(folders, tmp_path, kind, sub, change):
    repo = edited_copy(folders["flux"], tmp_path / "repo", sub, **change)
    with pytest.raises(FillScopeInputError) as e:
        load_component(kind, repo, dtype="fp32", device="cpu")
    assert f"'{repo / sub / 'config.json'}' does not match the weights" in str(e.value)
    assert "tensors the weights do not hold" in str(e.value)


# ---- a damaged config.json / model_index.json ------------------------------------------------------------------


def test_malformed_config_names_the_file_and_where_the_json_breaks(folders, tmp_path):
    repo = tmp_path / "broken"
    shutil.copytree(folders["flux"], repo)
    config = repo / "vae" / "config.json"
    config.write_text(config.read_text().replace(",", "", 1))
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", repo, dtype="fp32", device="cpu", input_name="vae source")
    msg = str(e.value)
    assert msg.startswith(f"[FillScope] input 'vae source': '{config}' is not valid JSON (Expecting ',' delimiter at line ")
    assert "column" in msg and "Fix: the file is damaged or was edited by hand: restore config.json" in msg


def test_config_that_is_not_an_object_and_a_binary_config_are_refused(folders, tmp_path):
    repo = tmp_path / "list"
    shutil.copytree(folders["flux"], repo)
    (repo / "vae" / "config.json").write_text("[1, 2]")
    with pytest.raises(FillScopeInputError, match="holds a JSON list, not the object"):
        load_component("flux_vae", repo, dtype="fp32", device="cpu")
    (repo / "vae" / "config.json").write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(FillScopeInputError, match="is not a text file"):
        load_component("flux_vae", repo, dtype="fp32", device="cpu")


def test_malformed_model_index_names_the_file(folders, tmp_path):
    repo = tmp_path / "index"
    shutil.copytree(folders["flux"], repo)
    (repo / "model_index.json").write_text('{"_class_name": "FluxFillPipeline",')
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", repo, dtype="fp32", device="cpu")
    assert f"'{repo / 'model_index.json'}' is not valid JSON" in str(e.value) and "line 1" in str(e.value)


# ---- single files: every tensor needed is there and every tensor there is used --------------------------------


def test_single_file_missing_and_extra_tensors_are_refused(tmp_path):
    tiny = build_tiny_components(0)
    state = cf.vae_ldm_state(tiny["vae"])
    lacking = {k: v for k, v in state.items() if k != "decoder.conv_out.bias"}
    path = cf.save(tmp_path / "vae" / "lacking.safetensors", lacking)
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", path, dtype="fp32", device="cpu", input_name="vae source")
    msg = str(e.value)
    assert "input 'vae source'" in msg and "'lacking.safetensors'" in msg
    assert "lacks 1 tensor " in msg and "decoder.conv_out.bias" in msg and "download it again" in msg
    # a converted layout (LDM keys): the extra values are found by count; training leftovers (loss.*) are allowed
    extra = dict(state, **{"decoder.conv_out.extra": torch.zeros(3), "loss.discriminator.weight": torch.zeros(4)})
    path = cf.save(tmp_path / "vae" / "extra.safetensors", extra)
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", path, dtype="fp32", device="cpu")
    assert "'extra.safetensors'" in str(e.value) and "holds 3 values in tensors the model" in str(e.value)
    path = cf.save(tmp_path / "vae" / "leftovers.safetensors", dict(state, **{"loss.discriminator.weight": torch.zeros(4)}))
    assert not load_component("flux_vae", path, dtype="fp32", device="cpu").is_meta
    # a 1:1 layout (diffusers keys): the extra tensor is named
    keys = dict(tiny["transformer"].state_dict(), **{"transformer_blocks.0.attn.extra.weight": torch.zeros(2, 2)})
    path = cf.save(tmp_path / "diffusion_models" / "extra.safetensors", keys, cf.TINY_HINTS)
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_fill_transformer", path, dtype="fp32", device="cpu")
    assert "has 1 tensor the model has no place for (transformer_blocks.0.attn.extra.weight)" in str(e.value)


def test_sai_file_with_a_tensor_the_conversion_skips_is_refused_naming_it(tmp_path):
    from tiny_sd3 import build_tiny_sd3_components

    state = dict(cf.sd3_sai_state(build_tiny_sd3_components(0)["transformer"]))
    path = cf.save(tmp_path / "diffusion_models" / "sd3.safetensors", state, cf.TINY_HINTS)
    assert not load_component("sd3_transformer", path, dtype="fp32", device="cpu").is_meta
    state["joint_blocks.0.x_block.extra.weight"] = torch.zeros(5)
    path = cf.save(tmp_path / "diffusion_models" / "sd3_extra.safetensors", state, cf.TINY_HINTS)
    with pytest.raises(FillScopeInputError) as e:
        load_component("sd3_transformer", path, dtype="fp32", device="cpu")
    assert "holds 5 values in tensors the model built from its shapes has no place for" in str(e.value)
    assert "joint_blocks.0.x_block.extra.weight" in str(e.value)


# ---- placeholder builds and the memory available ---------------------------------------------------------------


def test_placeholder_larger_than_the_available_ram_is_refused_with_both_figures(monkeypatch):
    monkeypatch.setenv(AVAILABLE_RAM_ENV, str(100 * 2**20))  # 100 MiB; the fp32 FLUX VAE needs 0.31 GiB
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", "placeholder", dtype="fp32", device="cpu", input_name="vae source")
    msg = str(e.value)
    assert msg == ("[FillScope] input 'vae source': a placeholder FLUX VAE in fp32 needs 0.31 GiB of CPU memory (RAM), "
                   "but only 0.10 GiB is available (FillScope keeps 10% free), so it was not built. Fix: choose 'meta' "
                   "(the full topology with shapes only, no memory) or a smaller dtype (bf16 or fp16 halve fp32's "
                   "memory), or free memory (close other programs, unload other models).")
    # bf16 needs half, and the margin: 0.16 GiB fits in 0.2 GiB but not within 90% of 0.17 GiB
    monkeypatch.setenv(AVAILABLE_RAM_ENV, str(int(0.17 * 2**30)))
    with pytest.raises(FillScopeInputError, match=r"in bf16 needs 0\.16 GiB of CPU memory \(RAM\), but only 0\.17 GiB") as e:
        load_component("flux_vae", "placeholder", dtype="bf16", device="cpu")
    assert "smaller dtype" not in str(e.value)
    monkeypatch.setenv(AVAILABLE_RAM_ENV, str(int(0.2 * 2**30)))
    assert load_component("flux_vae", "placeholder", dtype="bf16", device="cpu").device == "cpu"
    assert load_component("flux_vae", "meta", dtype="fp32").is_meta  # meta never asks


def test_placeholder_estimate_and_the_gpu_check_without_allocating(monkeypatch):
    model = build_on_meta("flux_fill_transformer", dtype=torch.bfloat16)
    need = weight_bytes(model)
    assert need >= sum(p.numel() for p in model.parameters()) * 2 and 22.0 < need / 2**30 < 22.4  # 11.9B x 2 bytes
    monkeypatch.setenv(AVAILABLE_VRAM_ENV, str(24 * 2**30))  # a 24 GiB card: 23.x GiB > 90%
    with pytest.raises(FillScopeInputError) as e:
        check_room_for(model, "cuda:0", "transformer source", "FLUX.1 Fill transformer", "bf16")
    assert f"in bf16 needs {need / 2**30:.2f} GiB of GPU memory, but only 24.00 GiB is available" in str(e.value)
    monkeypatch.setenv(AVAILABLE_VRAM_ENV, str(80 * 2**30))
    check_room_for(model, "cuda", "transformer source", "FLUX.1 Fill transformer", "bf16")
    check_room_for(model, "meta", "transformer source", "FLUX.1 Fill transformer", "bf16")  # meta: no memory
    monkeypatch.delenv(AVAILABLE_RAM_ENV, raising=False)
    ram, where = available_memory("cpu")
    assert ram > 0 and where == "CPU memory (RAM)"


# ---- model-folder helpers of the nodes (links, loops, containment) -----------------------------------------------


# The three tests below read what nodes/common.py's helpers return in one Python process with ComfyUI's folder_paths
# (helper_runs): each test's model folders are built first, then one subprocess points ComfyUI's model folders at each
# in turn and runs that test's code; a process each spent ~4-5 s of CPU importing ComfyUI's folder_paths, FillScope's
# nodes and torch. Each scenario has folders of its own (nodes/common.py's caches are keyed by path).
PRELUDE = """
import json, os, sys, time, types
sys.path.insert(0, {comfyui!r})
import folder_paths
FOLDERS = ("diffusers", "diffusion_models", "text_encoders", "vae", "controlnet", "checkpoints")
ORIGINAL = {{name: folder_paths.folder_names_and_paths[name] for name in FOLDERS}}


def use(base):
    for name in FOLDERS:
        os.makedirs(os.path.join(base, name), exist_ok=True)
        folder_paths.folder_names_and_paths[name] = ([os.path.join(base, name)], ORIGINAL[name][1])


pkg = types.ModuleType("FillScope"); pkg.__path__ = [{repo!r}]; sys.modules["FillScope"] = pkg
from FillScope.nodes import common as c
results = {{}}
"""


def scenario(name: str, base: Path, code: str) -> str:
    """`code` (which sets `out`) run with ComfyUI's model folders at `base`; `out` kept as results[name]."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    return f"use({str(base)!r})\ndef _{name}():\n{body}\n    return out\nresults[{name!r}] = _{name}()\n"


def linked_folders(tmp_path: Path) -> tuple[Path, str]:
    base, outside = tmp_path / "models", tmp_path / "other_disk"
    (outside / "repo").mkdir(parents=True)
    (outside / "repo" / "model_index.json").write_text("{}")
    (outside / "ae.safetensors").write_bytes(b"x")
    (base / "diffusers").mkdir(parents=True)
    (base / "vae").mkdir()
    os.symlink(outside / "repo", base / "diffusers" / "linked-repo")
    os.symlink(outside / "ae.safetensors", base / "vae" / "linked-ae.safetensors")
    os.symlink(tmp_path / "nowhere.safetensors", base / "vae" / "dangling.safetensors")
    return base, """
names = ["linked-repo", "vae/linked-ae.safetensors", "../other_disk/repo", "vae/../../other_disk/ae.safetensors",
         "/etc", "C:/x", "linked-repo/../linked-repo", "vae/dangling.safetensors"]
out = {"folders": c.diffusers_folders(), "vae": c.file_sources("flux_vae"),
       "checks": {n: c.validate_source(n) for n in names},
       "resolved": [c.resolve_source("linked-repo"), c.resolve_source("vae/linked-ae.safetensors")]}
"""


def looping_links(tmp_path: Path) -> tuple[Path, str]:
    base = tmp_path / "models"
    repo = base / "diffusers" / "loop-repo"
    repo.mkdir(parents=True)
    (repo / "model_index.json").write_text("{}")
    (repo / "vae").mkdir()
    (repo / "vae" / "config.json").write_text("{}")
    (repo / "vae" / "w.safetensors").write_bytes(b"x")
    junk = base / "diffusers" / "junk"  # no model at the top: the listing walks into it
    junk.mkdir()
    for folder in (repo, repo / "vae", junk):
        os.symlink(".", folder / "a")
        os.symlink(".", folder / "b")
    os.symlink("self", junk / "self")  # a link to itself (ELOOP)
    return base, """
t0 = time.monotonic()
folders = c.diffusers_folders()
t1 = time.monotonic()
fp = c.source_fingerprint("loop-repo")
t2 = time.monotonic()
out = {"folders": folders, "fp": fp, "list_s": t1 - t0, "fp_s": t2 - t1,
       "note": c.fingerprint_note(c.resolve_source("loop-repo"))}
"""


def past_the_caps(tmp_path: Path) -> tuple[Path, str]:
    base = tmp_path / "models"
    repo = base / "diffusers" / "deep"
    deep = repo.joinpath(*[f"d{i}" for i in range(12)])
    deep.mkdir(parents=True)
    (repo / "config.json").write_text("{}")
    (repo / "w.safetensors").write_bytes(b"x")
    (deep / "far.json").write_text("{}")
    return base, """
fp = c.source_fingerprint("deep")
out = {"fp": fp, "note": c.fingerprint_note(c.resolve_source("deep"))}
"""


SCENARIOS = {"linked": linked_folders, "looping": looping_links, "caps": past_the_caps}


@pytest.fixture(scope="module")
def helper_runs(tmp_path_factory) -> dict:
    """{scenario: (its tmp folder, what its code returned)}: every scenario's folders built, then one subprocess with
    nodes/common.py imported runs each scenario's code with ComfyUI's model folders at that scenario's models/."""
    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()}")
    script, folders = PRELUDE.format(comfyui=str(comfyui_path()), repo=str(REPO)), {}
    for name, build in SCENARIOS.items():
        folders[name] = tmp_path_factory.mktemp(f"helpers_{name}")
        base, code = build(folders[name])
        script += scenario(name, base, code)
    script += "print(json.dumps(results))\n"
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(res.stdout.strip().splitlines()[-1])
    return {name: (folders[name], results[name]) for name in SCENARIOS}


def test_linked_folders_and_files_are_listed_and_accepted_and_dotdot_is_not(helper_runs):
    tmp_path, data = helper_runs["linked"]
    base, outside = tmp_path / "models", tmp_path / "other_disk"
    assert data["folders"] == ["linked-repo"]
    assert data["vae"] == ["vae/linked-ae.safetensors"]  # the dangling link is not offered
    checks = data["checks"]
    assert checks["linked-repo"] is True and checks["vae/linked-ae.safetensors"] is True
    assert checks["linked-repo/../linked-repo"] is True  # '..' that stays inside is folded
    for escaping in ("../other_disk/repo", "vae/../../other_disk/ae.safetensors", "/etc", "C:/x"):
        assert "points outside ComfyUI's models/" in checks[escaping], escaping
    assert "not found" in checks["vae/dangling.safetensors"]
    # the path in the model folder, the link kept (its name's suffix is what the pickle check reads); reading it
    # follows the link to the other disk
    assert data["resolved"] == [str(base / "diffusers" / "linked-repo"), str(base / "vae" / "linked-ae.safetensors")]
    assert [os.path.realpath(p) for p in data["resolved"]] == [str((outside / "repo").resolve()),
                                                               str((outside / "ae.safetensors").resolve())]


def test_looping_links_are_listed_and_fingerprinted_at_once(helper_runs):
    _, data = helper_runs["looping"]
    assert data["list_s"] < 5 and data["fp_s"] < 5
    assert data["folders"] == ["loop-repo"]
    assert data["fp"][0] == "loop-repo" and [f[0] for f in data["fp"][1]] == ["model_index.json", "vae/config.json",
                                                                             "vae/w.safetensors"]
    assert data["note"] is None


def test_a_folder_past_the_caps_gets_a_partial_fingerprint_and_a_note(helper_runs):
    _, data = helper_runs["caps"]
    assert data["fp"][1] == "partial" and [f[0] for f in data["fp"][2]] == ["config.json", "w.safetensors"]
    assert "nested deeper than 8" in data["note"] and "noticed after a restart or /free" in data["note"]
