"""Batches (fillscope/batch, `python -m fillscope batch`): on tiny fp32 folders of the three families, a manifest's
images equal the family's run() + paste-back called directly, bit for bit; a rerun skips finished jobs (by key);
a bad job fails alone with its field named; the manifest's own problems name their line; stacks stay resident
between jobs; the CLI's exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_flux import build_tiny_flux_fill_folder
from tiny_klein import build_tiny_klein_folder
from tiny_models import tokenizers_available
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

from fillscope.batch.manifest import ManifestError, job_fingerprint, job_key, read_manifest
from fillscope.batch.runner import ModelCache, run_batch
from fillscope.masks import paste_back, prepare_image_and_mask
from fillscope.pipelines import flux_fill, klein, sd3_controlnet

pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

REPO = Path(__file__).resolve().parent.parent
H, W = 48, 64
PROMPT = "a red brick fireplace"
COMMON = {"prompt": PROMPT, "seed": 3, "steps": 2, "dtype": "fp32"}


def write_manifest(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def png(path) -> np.ndarray:
    return np.array(Image.open(path))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch_models")
    flux = build_tiny_flux_fill_folder(root / "flux", seed=0)
    return {"flux": flux, "flux_copy": shutil.copytree(flux, root / "flux_copy"),
            "sd3": build_tiny_sd3_folder(root / "sd3", seed=0),
            "controlnet": build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0),
            "klein": build_tiny_klein_folder(root / "klein", seed=0)}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """image.png (RGB), mask.png (greyscale, white = repaint), rgba.png (transparent = repaint), small_mask.png
    (32x32), in the folder the manifests are written to (their paths are relative)."""
    folder = tmp_path_factory.mktemp("batch_inputs")
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, size=(H, W, 3), dtype=np.uint8)
    Image.fromarray(rgb, "RGB").save(folder / "image.png")
    mask = np.zeros((H, W), dtype=np.uint8)
    mask[8:40, 16:48] = 255
    mask[20:24, 4:10] = 200  # soft values binarise at 0.5
    Image.fromarray(mask, "L").save(folder / "mask.png")
    alpha = np.full((H, W, 1), 255, dtype=np.uint8)
    alpha[12:36, 8:40] = 0
    Image.fromarray(np.concatenate([rgb, alpha], axis=-1), "RGBA").save(folder / "rgba.png")
    Image.fromarray(np.zeros((32, 32), dtype=np.uint8), "L").save(folder / "small_mask.png")
    return folder


@pytest.fixture(scope="module")
def jobs(models, inputs):
    """The manifest's lines: one job per family, a second FLUX job on the same folder, and one whose components are
    named one by one (the VAE from a copy of the folder: the stack is loaded component by component)."""
    flux = str(models["flux"])
    return [
        {"id": "flux", "family": "flux-fill", "models": flux, "image": "image.png", "mask": "mask.png", **COMMON},
        {"id": "sd3", "family": "sd3-controlnet", "models": {"default": str(models["sd3"]),
                                                             "controlnet": str(models["controlnet"])},
         "image": "image.png", "mask": "mask.png", "negative": "blurry", "cfg": 4.0, **COMMON},
        {"id": "klein", "family": "klein-4b", "models": str(models["klein"]), "image": "rgba.png", "mask": "alpha",
         "grow": 2, **COMMON},
        {"id": "flux-2", "family": "flux-fill", "models": flux, "image": "image.png", "mask": "mask.png",
         "feather": 3, "guidance": 20.0, **COMMON, "seed": 4},
        {"id": "flux-parts", "family": "flux-fill", "image": "image.png", "mask": "mask.png", **COMMON,
         "models": {"clip_l": flux, "t5": flux, "transformer": flux, "vae": str(models["flux_copy"])}},
    ]


@pytest.fixture(scope="module")
def cache():
    return ModelCache(max_resident=4, device="cpu")


@pytest.fixture(scope="module")
def first_run(jobs, inputs, cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("batch_out")
    manifest = write_manifest(inputs / "manifest.jsonl", jobs)
    loads_before = len(cache.loads)
    summary = run_batch(read_manifest(manifest), out, progress=False, cache=cache)
    return {"out": out, "summary": summary, "manifest": manifest, "loads": cache.loads[loads_before:]}


def direct(line: dict, stack, inputs: Path) -> np.ndarray:
    """The job computed without the batch: the files read with PIL, the family's run(), paste-back, 8-bit."""
    image = torch.from_numpy(np.array(Image.open(inputs / line["image"]).convert("RGB")).astype(np.float32) / 255)[None]
    if line["mask"] == "alpha":
        alpha = np.array(Image.open(inputs / line["image"]).getchannel("A"))
        mask = 1.0 - torch.from_numpy(alpha.astype(np.float32) / 255)
    else:
        mask = torch.from_numpy(np.array(Image.open(inputs / line["mask"]).convert("L")).astype(np.float32) / 255)
    prepared = prepare_image_and_mask(image, mask[None], grow=line.get("grow", 0), feather=line.get("feather", 0))
    kw = {"negative_prompt": line["negative"], "cfg": line["cfg"]} if "cfg" in line else {}
    if "guidance" in line:
        kw["guidance"] = line["guidance"]
    pipeline = {"flux-fill": flux_fill, "sd3-controlnet": sd3_controlnet, "klein-4b": klein}[line["family"]]
    done = pipeline.run(stack, line["prompt"], prepared, steps=line["steps"], seed=line["seed"], **kw)
    out = paste_back(done.image, prepared.source, prepared.paste_mask)
    return np.clip(255.0 * out[0].numpy(), 0, 255).astype(np.uint8)


# --- 1. outputs -------------------------------------------------------------------------------------------------------

def test_outputs_equal_the_pipelines_run_directly(models, inputs, jobs, first_run):
    out, summary = first_run["out"], first_run["summary"]
    assert summary["ok"] == 5 and summary["error"] == 0, summary
    stacks = {
        "flux-fill": flux_fill.load_stack(models["flux"], tokenizer_folders=(None, None), dtype="fp32", device="cpu"),
        "sd3-controlnet": sd3_controlnet.load_stack(models["sd3"], controlnet=models["controlnet"],
                                                    tokenizer_folders=(None, None), dtype="fp32", device="cpu"),
        "klein-4b": klein.load_stack(str(models["klein"]), tokenizer_folders=(None,), dtype="fp32", device="cpu"),
    }
    references = {}  # flux-parts asks for what flux asks for (the same stack, image, mask and options): computed once
    for line in jobs:
        ours = png(out / f"{line['id']}.png")
        assert ours.shape == (H, W, 3) and ours.dtype == np.uint8
        same = json.dumps({k: v for k, v in line.items() if k not in ("id", "models")}, sort_keys=True)
        if same not in references:
            references[same] = direct(line, stacks[line["family"]], inputs)
        assert np.array_equal(ours, references[same]), line["id"]
    assert np.array_equal(png(out / "flux-parts.png"), png(out / "flux.png"))  # component by component: the same
    assert not np.array_equal(png(out / "flux-2.png"), png(out / "flux.png"))


def test_shapes_json_holds_what_the_run_observed(jobs, first_run):
    out = first_run["out"]
    expected = {"flux": [1, 12, 384], "sd3": [2, 16, 6, 8], "klein": [1, 24, 128]}  # 64x48: 12 tokens / a 6x8 grid
    for job_id, shape in expected.items():
        doc = json.loads((out / f"{job_id}.shapes.json").read_text())
        assert doc["schema"] == "fillscope.shapes/1"
        tensors = {t["name"]: t for t in doc["node"]["tensors"]}
        assert tensors["transformer.input"]["shape"] == shape
        assert tensors["transformer.input"]["dtype"] == "float32"
        assert tensors["image"]["shape"] == [1, H, W, 3]
        assert doc["job"]["id"] == job_id and doc["job"]["seconds"] > 0
        logged = [json.loads(x) for x in (out / "batch.jsonl").read_text().splitlines()]
        line = next(x for x in logged if x["id"] == job_id)
        assert doc["job"]["key"] == line["key"]
    assert not list(out.glob(".*.tmp"))  # no temporary file left


# --- 2. reruns --------------------------------------------------------------------------------------------------------

def test_a_rerun_runs_only_what_is_not_finished(first_run, inputs, tmp_path):
    out = shutil.copytree(first_run["out"], tmp_path / "out")
    log = out / "batch.jsonl"
    before = log.read_bytes()
    assert len(before.splitlines()) == 5
    jobs = read_manifest(first_run["manifest"])

    cache = ModelCache(device="cpu")
    summary = run_batch(jobs, out, progress=False, cache=cache)
    assert (summary["ran"], summary["skipped"]) == (0, 5)
    assert log.read_bytes() == before and cache.loads == []

    klein_png = png(out / "klein.png")
    (out / "klein.png").unlink()
    summary = run_batch(jobs, out, progress=False, cache=cache)
    assert [r["id"] for r in summary["results"]] == ["klein"] and summary["skipped"] == 4
    assert np.array_equal(png(out / "klein.png"), klein_png)

    lines = log.read_text().splitlines()
    log.write_text("".join(x + "\n" for x in lines if json.loads(x)["id"] != "sd3"))
    summary = run_batch(jobs, out, progress=False, cache=cache)
    assert [r["id"] for r in summary["results"]] == ["sd3"] and summary["ok"] == 1

    edited = [dict(j.line, seed=9) if j.id == "flux" else j.line for j in jobs]  # an edited line: a new key
    edited_manifest = write_manifest(inputs / "edited.jsonl", edited)
    summary = run_batch(read_manifest(edited_manifest), out, progress=False, cache=cache)
    assert [r["id"] for r in summary["results"]] == ["flux"]


def test_the_key_follows_the_line_and_the_files(first_run, models):
    job = read_manifest(first_run["manifest"])[0]
    key = job_key(job, job_fingerprint(job))
    assert key == job_key(job, job_fingerprint(job)) and len(key) == 64
    edited = read_manifest(first_run["manifest"])[0]
    edited.line = dict(edited.line, steps=3)
    assert job_key(edited, job_fingerprint(edited)) != key
    weights = next((Path(models["flux"]) / "vae").glob("*.safetensors"))
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        assert job_key(job, job_fingerprint(job)) != key
    finally:
        os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert job_key(job, job_fingerprint(job)) == key


# --- 3. a bad job fails alone -----------------------------------------------------------------------------------------

def test_a_bad_job_fails_alone_naming_its_field(jobs, inputs, cache, tmp_path):
    good = jobs[0]
    lines = [dict(good, id="missing-image", image="nope.png"), dict(good, id="small-mask", mask="small_mask.png"),
             dict(good, id="unknown-option", guidanse=3.0), dict(good, id="bad-mode", size_mode="stretch"), good]
    manifest = write_manifest(inputs / "bad.jsonl", lines)
    with pytest.raises(ManifestError, match='line 3, job "unknown-option", field "guidanse"'):
        read_manifest(manifest)  # strict: nothing runs
    summary = run_batch(read_manifest(manifest, strict=False), tmp_path, progress=False, cache=cache)
    assert (summary["ok"], summary["error"]) == (1, 4)
    errors = {r["id"]: r["error"] for r in summary["results"] if r["status"] == "error"}
    assert "input 'image'" in errors["missing-image"] and "nope.png" in errors["missing-image"]
    assert "input 'mask'" in errors["small-mask"] and "32x32" in errors["small-mask"]
    assert '"guidanse"' in errors["unknown-option"] and "guidance" in errors["unknown-option"]
    assert 'field "size_mode"' in errors["bad-mode"] and "pad, crop" in errors["bad-mode"]  # refused when read
    logged = [json.loads(x) for x in (tmp_path / "batch.jsonl").read_text().splitlines()]
    assert {x["id"]: x["status"] for x in logged} == {**dict.fromkeys(errors, "error"), "flux": "ok"}
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["flux.png"]


# --- 4. the manifest's problems name their line -----------------------------------------------------------------------

def test_manifest_problems_name_their_line(jobs, inputs):
    good = jobs[0]
    cases = {
        "bad_json": ([good, '{"id": "b", "family": ', dict(good, id="c")], 'line 2, field "JSON"'),
        "duplicate": ([good, dict(good, id="other"), good], 'line 3, job "flux", field "id": is used twice: line 1'),
        "family": ([dict(good, family="flux")], 'line 1, job "flux", field "family"'),
        "missing": ([{k: v for k, v in good.items() if k != "prompt"}], 'field "prompt": is missing'),
        "unsafe_id": ([dict(good, id="../up")], 'line 1, field "id"'),
        "type": ([dict(good, steps="2")], 'field "steps"'),
    }
    for name, (lines, text) in cases.items():
        with pytest.raises(ManifestError) as e:
            read_manifest(write_manifest(inputs / f"{name}.jsonl", lines))
        assert text in str(e.value), (name, str(e.value))
    with pytest.raises(ManifestError, match="flux-fill, sd3-controlnet, klein-4b, klein-9b"):
        read_manifest(inputs / "family.jsonl")
    with pytest.raises(ManifestError, match="takes no negative prompt"):
        read_manifest(write_manifest(inputs / "negative.jsonl", [dict(good, negative="x")]))
    # a bad JSON line stops the manifest even when jobs may fail alone
    with pytest.raises(ManifestError, match="line 2"):
        read_manifest(inputs / "bad_json.jsonl", strict=False)


# --- 5. resident models -----------------------------------------------------------------------------------------------

def test_stacks_stay_resident_between_jobs(first_run, jobs):
    loaded = [key[0] for key in first_run["loads"]]
    assert sorted(loaded) == ["flux-fill", "flux-fill", "klein-4b", "sd3-controlnet"]  # flux + flux-parts
    doc = json.loads((first_run["out"] / "flux-2.shapes.json").read_text())
    assert doc["node"]["facts"]["stack"] == "resident"

    by_id = {j.id: j for j in read_manifest(first_run["manifest"])}
    one = ModelCache(max_resident=1, device="cpu")
    for job_id in ("flux", "flux-2", "klein", "flux"):
        one.stack(by_id[job_id])
    assert [k[0] for k in one.loads] == ["flux-fill", "klein-4b", "flux-fill"] and len(one) == 1
    two = ModelCache(max_resident=2, device="cpu")
    for job_id in ("flux", "klein", "flux-2", "klein"):
        two.stack(by_id[job_id])
    assert [k[0] for k in two.loads] == ["flux-fill", "klein-4b"]


# --- 6. the command line ----------------------------------------------------------------------------------------------

def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fillscope", "batch", *map(str, args), "--device", "cpu"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def cli_here(capsys, *args) -> subprocess.CompletedProcess:
    """cli.main in this process, as `python -m fillscope` calls it (fillscope/__main__.py: sys.exit(cli.main())): its
    exit code and what it printed. A subprocess spends most of its time importing torch, diffusers and transformers;
    the first run of test_cli_runs_a_manifest_with_exit_codes stays a real `python -m fillscope` process."""
    from fillscope.cli import main

    capsys.readouterr()  # what was printed before
    code = main(["batch", *map(str, args), "--device", "cpu"])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["python", "-m", "fillscope", "batch", *map(str, args)], code, out.out, out.err)


def test_cli_runs_a_manifest_with_exit_codes(jobs, inputs, first_run, tmp_path, capsys):
    """The first run is `python -m fillscope batch` in a process of its own (its exit code, and the same bits as this
    process's batch); the skip, failure and refusal exit codes after it call cli.main in this process (cli_here)."""
    good = jobs[0]
    manifest = write_manifest(inputs / "cli.jsonl", [good])
    out = tmp_path / "out"
    res = cli(manifest, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "1 ok, 0 failed" in res.stdout
    assert np.array_equal(png(out / "flux.png"), png(first_run["out"] / "flux.png"))  # another process, same bits

    res = cli_here(capsys, manifest, "--out", out, "--no-progress")
    assert res.returncode == 0 and "1 skipped" in res.stdout, res.stdout + res.stderr

    with_bad = write_manifest(inputs / "cli_bad.jsonl", [good, dict(good, id="gone", image="gone.png")])
    res = cli_here(capsys, with_bad, "--out", out, "--no-progress")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAILED gone" in res.stdout and "gone.png" in res.stdout

    res = cli_here(capsys, write_manifest(inputs / "cli_json.jsonl", [good, "{not json"]), "--out", tmp_path / "never")
    assert res.returncode == 2 and "line 2" in res.stderr
    assert not (tmp_path / "never").exists()

    unknown = write_manifest(inputs / "cli_option.jsonl", [dict(good, id="typo", guidanse=1.0)])
    assert cli_here(capsys, unknown, "--out", out).returncode == 2
    res = cli_here(capsys, unknown, "--out", out, "--keep-going", "--no-progress")
    assert res.returncode == 1 and "guidanse" in res.stdout
