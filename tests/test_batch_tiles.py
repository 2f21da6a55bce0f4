"""Tiled batch jobs (issue 23; fillscope/batch: the manifest's `tiles`, the runner, Ray; fillscope/tiled/independent.py),
on tiny fp32 FLUX Fill models and a 448x256 image that 256 px tiles cut into two:

- the manifest checks `tiles` when it is read (bounds.TILED, as the tiled nodes' inputs), each problem naming its
  job and field (tiles.tile, tiles.overlap, tiles.mode, tiles.<unknown key>), defaults filled in;
- a tiled job in this process gives run_tiled's image (its 8-bit PNG) and its tile records;
- the three separable steps of tiled.independent, composed here in another tile order, give run_tiled(mode independent)'s image bit for bit
  (torch.equal) and its records;
- on a local Ray cluster with 2 CPU workers the job's tiles run on both workers and the driver's blend gives the
  in-process job's PNG and shape record; a tile that fails fails its job alone; a task past task_timeout_s has its
  worker killed and its job failed, and the batch still ends;
- workers kept after a batch (run_batch_on_ray's keep_workers_s) are stopped when their idle limit passes, and a
  worker killed as hung is never kept (fillscope/batch/cluster.py: kept workers).

Ray writes under HOME, RAY_TMPDIR and TMPDIR: the Ray tests point all three at a short temporary folder
(conftest.ray_tmp_env) and give them back afterwards.
"""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from ray_session import process_running
from tiny_flux import build_tiny_flux_fill_folder
from tiny_models import tokenizers_available

from fillscope import bounds
from fillscope.batch.manifest import TILE_DEFAULTS, ManifestError, read_manifest
from fillscope.batch.runner import ModelCache, png_bytes, run_batch
from fillscope.pipelines import flux_fill
from fillscope.tiled import run_tiled
from fillscope.tiled.independent import blend_planned, plan_independent, run_tile

pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

H, W = 256, 448  # 256 px tiles, overlap 0.15: 1 row x 2 columns
SMALL = bounds.Range(64, 4096)  # run_tiled's tile_range for tiny models: 64 px tiles on a small picture
TILES = {"tile": 256, "overlap": 0.15}
COMMON = {"family": "flux-fill", "image": "image.png", "mask": "mask.png", "prompt": "a red brick fireplace",
          "seed": 3, "steps": 2, "dtype": "fp32"}


def write_manifest(path: Path, lines: list) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def png(path) -> np.ndarray:
    return np.array(Image.open(path))


def without_seconds(records) -> list:
    return [{k: (list(v) if k == "box" else v) for k, v in r.items() if k not in ("seconds", "worker")}
            for r in records]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The tiny FLUX Fill folder, image.png (random RGB) and mask.png (a box meeting both tiles)."""
    root = tmp_path_factory.mktemp("batch_tiles")
    build_tiny_flux_fill_folder(root / "flux", seed=0)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, size=(H, W, 3), dtype=np.uint8), "RGB").save(root / "image.png")
    mask = np.zeros((H, W), dtype=np.uint8)
    mask[60:200, 150:330] = 255
    Image.fromarray(mask, "L").save(root / "mask.png")
    return root


@pytest.fixture(scope="module")
def jobs(folder):
    """A tiled job (grow, feather, Poisson seams), an untiled one, and a tiled one whose models are missing."""
    models = str(folder / "flux")
    return [
        {"id": "tiled", **COMMON, "models": models, "guidance": 20.0, "grow": 4, "feather": 3,
         "tiles": {**TILES, "poisson": True}},
        {"id": "plain", **COMMON, "models": models},
        {"id": "no-models", **COMMON, "models": str(folder / "missing"), "tiles": TILES},
    ]


@pytest.fixture(scope="module")
def stack(folder):
    return flux_fill.load_stack(folder / "flux", tokenizer_folders=(None, None), dtype="fp32", device="cpu")


@pytest.fixture(scope="module")
def in_process(folder, jobs, tmp_path_factory):
    out = tmp_path_factory.mktemp("in_process")
    manifest = write_manifest(folder / "manifest.jsonl", jobs)
    summary = run_batch(read_manifest(manifest), out, progress=False, cache=ModelCache(1, "cpu"))
    return {"out": out, "summary": summary, "manifest": manifest}


def inputs(folder):
    image = torch.from_numpy(np.array(Image.open(folder / "image.png").convert("RGB")).astype(np.float32) / 255)
    mask = torch.from_numpy(np.array(Image.open(folder / "mask.png").convert("L")).astype(np.float32) / 255)
    return image[None], mask[None]


# --- 1. the manifest --------------------------------------------------------------------------------------------------

def problems_of(folder: Path, tiles, **extra) -> list[str]:
    """Each problem of a one-job manifest whose job has `tiles`, as "<input_name>: <problem>"."""
    line = {"id": "job-1", **COMMON, "models": "meta", "tiles": tiles, **extra}
    try:
        read_manifest(write_manifest(folder / "check.jsonl", [line]))
    except ManifestError as e:
        return [f"{p.input_name}: {p.problem}" for p in e.problems]
    return []


def test_good_tiles_are_read_with_the_defaults_filled_in(folder):
    lines = [{"id": "a", **COMMON, "models": "meta", "tiles": {}},
             {"id": "b", **COMMON, "models": "meta", "tiles": {"tile": 512, "overlap": 0, "mode": "shared"}},
             {"id": "c", **COMMON, "models": "meta", "tiles": {"tile": 4096, "overlap": 0.5, "poisson": False},
              "size_mode": "pad", "masked_fill": "blur"},
             {"id": "d", **COMMON, "models": "meta"}]
    a, b, c, d = read_manifest(write_manifest(folder / "good.jsonl", lines))
    assert a.tiles == TILE_DEFAULTS == {"tile": 1024, "overlap": 0.15, "mode": "independent", "poisson": False}
    assert b.tiles == {"tile": 512, "overlap": 0.0, "mode": "shared", "poisson": False}
    assert isinstance(b.tiles["overlap"], float)
    assert c.tiles["tile"] == 4096 and c.tiles["overlap"] == 0.5 and c.options["masked_fill"] == "blur"
    assert d.tiles is None


@pytest.mark.parametrize("tile, says", [(128, "below the range 256 to 4096"), (8192, "above the range 256 to 4096"),
                                        (1000, "not a multiple of 16 px"), (512.5, "must be a whole number"),
                                        ("1024", "must be a whole number"), (True, "must be a whole number")])
def test_a_bad_tile_names_the_job_and_field(folder, tile, says):
    found = problems_of(folder, {"tile": tile})
    assert len(found) == 1 and found[0].startswith('line 1, job "job-1", field "tiles.tile": '), found
    assert says in found[0], found


@pytest.mark.parametrize("overlap, says", [(0.6, "above the range 0 to 0.5"), (-0.1, "below the range 0 to 0.5"),
                                           (float("nan"), "not a finite number"), ("0.2", "must be a number")])
def test_a_bad_overlap_names_the_job_and_field(folder, overlap, says):
    found = problems_of(folder, {"overlap": overlap})
    assert len(found) == 1 and found[0].startswith('line 1, job "job-1", field "tiles.overlap": '), found
    assert says in found[0], found


def test_a_bad_mode_names_the_job_and_field(folder):
    found = problems_of(folder, {"mode": "mixed"})
    assert found == ['line 1, job "job-1", field "tiles.mode": is "mixed".'], found
    found = problems_of(folder, {"mode": "shared", "poisson": True})
    assert len(found) == 1 and found[0].startswith('line 1, job "job-1", field "tiles.poisson": is true in mode '
                                                   'shared'), found


def test_unknown_keys_and_wrong_types_name_the_job_and_field(folder):
    found = problems_of(folder, {"tile": 512, "size": 3, "seam": 1})
    assert found == ['line 1, job "job-1", field "tiles.seam": is no tile setting.',
                     'line 1, job "job-1", field "tiles.size": is no tile setting.'], found
    assert problems_of(folder, 512) == ['line 1, job "job-1", field "tiles": is 512, not an object.']
    found = problems_of(folder, {"poisson": "yes"})
    assert found == ['line 1, job "job-1", field "tiles.poisson": is "yes"; it must be true or false.'], found


def test_what_a_tiled_job_cannot_combine_is_refused(folder):
    assert problems_of(folder, {}, parallel=2) == [
        'line 1, job "job-1", field "parallel": is 2; a tiled job runs each tile in one process.']
    found = problems_of(folder, {}, soft_mask="alpha", size_mode="crop")
    assert [f.split(":")[0] for f in found] == ['line 1, job "job-1", field "soft_mask"',
                                                'line 1, job "job-1", field "size_mode"'], found


# --- 2. in this process -----------------------------------------------------------------------------------------------

def test_a_tiled_job_gives_run_tileds_image_and_records(folder, jobs, stack, in_process):
    out, summary = in_process["out"], in_process["summary"]
    assert (summary["ok"], summary["error"]) == (2, 1), summary
    line = jobs[0]
    image, mask = inputs(folder)
    direct = run_tiled("flux-fill", stack, line["prompt"], image, mask, tile=256, overlap=0.15, seed=line["seed"],
                       steps=line["steps"], mask_options={"grow": 4, "feather": 3}, poisson=True, guidance=20.0)
    assert len(direct.tiles) == 2
    expected = np.array(Image.open(io.BytesIO(png_bytes(direct.image[0]))))
    assert np.array_equal(png(out / "tiled.png"), expected)
    logged = {x["id"]: x for x in map(json.loads, (out / "batch.jsonl").read_text().splitlines())}
    assert without_seconds(logged["tiled"]["tiles"]) == without_seconds(direct.records)
    assert all(r["sampled"] and r["tokens"] == 256 for r in logged["tiled"]["tiles"])  # 256 px: 16x16 tokens
    assert "tiles" not in logged["plain"]
    doc = json.loads((out / "tiled.shapes.json").read_text())
    assert doc["tiles"]["tile"] == 256 and doc["tiles"]["poisson"] and len(doc["tiles"]["records"]) == 2
    names = [t["name"] for t in doc["node"]["tensors"]]
    assert [n for n in names if n.endswith("transformer.input")] == [f"tile {i} transformer.input" for i in range(2)]
    assert logged["no-models"]["status"] == "error" and "missing" in logged["no-models"]["error"]


def test_the_separable_steps_give_run_tileds_result_exactly(stack):
    """On a 112x96 picture cut into 64 px tiles (tile_range for tiny models): a 2x2 grid with overlaps."""
    g = torch.Generator().manual_seed(4)
    image = torch.rand(1, 96, 112, 3, generator=g)
    mask = torch.zeros(1, 96, 112)
    mask[:, 20:80, 30:90] = 1
    for mask_options, extra in (({"grow": 4, "feather": 3, "masked_fill": "blur"},
                                 {"guidance": 20.0, "poisson": True}),):
        kw = dict(tile=64, overlap=0.25, seed=5, steps=2, mask_options=mask_options, tile_range=SMALL, **extra)
        calls_tiled, calls_spread = [], []
        # as Ray workers may return them: the tiles run last to first, each with its own progress
        plan = plan_independent(image, mask, tile=64, overlap=0.25, options=mask_options, tile_range=SMALL)
        outputs = [run_tile(flux_fill, stack, "a lamp", work, seed=5, steps=2, guidance=20.0,
                            callback=lambda *a: calls_spread.append(a)) for work in reversed(plan.works)]
        ours = blend_planned(plan, outputs, poisson=True)
        theirs = run_tiled("flux-fill", stack, "a lamp", image, mask, callback=lambda *a: calls_tiled.append(a), **kw)
        assert len(theirs.tiles) == 4
        assert torch.equal(ours.image, theirs.image)
        assert without_seconds(ours.records) == without_seconds(theirs.records)
        assert ours.tiles == theirs.tiles
        assert len(calls_spread) == len(calls_tiled) == 8 and calls_spread[-1] == (2, 2)  # 4 tiles x 2 steps
        assert [re.sub(r"\(\d+\.\d+ s\)", "", n) for n in ours.notes] == \
            [re.sub(r"\(\d+\.\d+ s\)", "", n) for n in theirs.notes]  # the same notes, timings apart


# --- 3. on Ray --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster(ray_tmp_env):
    """One local Ray with 2 CPUs for the module's batches (run_batch_on_ray leaves a Ray it did not start running)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'fillscope[cluster]')")
    ray.init(num_cpus=2, object_store_memory=256 * 1024**2, include_dashboard=False, logging_level="warning",
             log_to_driver=False)
    yield ray
    ray.shutdown()


def test_on_ray_the_tiles_spread_over_two_workers_and_equal_the_local_run(ray_cluster, in_process, tmp_path):
    """The tiled job's two tiles run on both workers and the driver's blend gives the local run's PNG and records;
    the job whose models are missing fails alone; and the workers, kept for a next batch that never comes
    (keep_workers_s, on this module's connection), are stopped when their idle limit has passed."""
    from fillscope.batch.cluster import kept_worker_pids, run_batch_on_ray

    started, pids = time.perf_counter(), []
    summary = run_batch_on_ray(read_manifest(in_process["manifest"]), tmp_path, workers=2, device="cpu",
                               progress=False, task_timeout_s=300, keep_workers_s=5.0,
                               started=lambda batch: pids.extend(batch.pids[id(w)] for w in batch.workers))
    seconds = time.perf_counter() - started
    assert len(pids) == 2 and kept_worker_pids() == pids, (pids, kept_worker_pids())  # kept, idle
    deadline = time.monotonic() + 120  # the 5 s idle limit, then Ray stopping the processes
    while (kept_worker_pids() or any(map(process_running, pids))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kept_worker_pids() == [] and not any(map(process_running, pids)), (kept_worker_pids(), pids)
    assert (summary["ok"], summary["error"]) == (2, 1), summary
    local = in_process["out"]
    for job_id in ("tiled", "plain"):
        assert np.array_equal(png(tmp_path / f"{job_id}.png"), png(local / f"{job_id}.png")), job_id
    logged = {x["id"]: x for x in map(json.loads, (tmp_path / "batch.jsonl").read_text().splitlines())}
    local_logged = {x["id"]: x for x in map(json.loads, (local / "batch.jsonl").read_text().splitlines())}
    tiles = logged["tiled"]["tiles"]
    assert without_seconds(tiles) == without_seconds(local_logged["tiled"]["tiles"])
    workers = {r["worker"] for r in tiles}
    assert len(workers) == 2, tiles  # the job's two tiles ran on both workers
    ours, theirs = (json.loads((d / "tiled.shapes.json").read_text()) for d in (tmp_path, local))
    assert ours["node"]["tensors"] == theirs["node"]["tensors"]  # the same tensors, in the same order
    assert logged["no-models"]["status"] == "error" and logged["no-models"]["error"].startswith("tile ")
    assert not list(tmp_path.glob(".*.tmp"))
    print(f"\n[measured, this run] Ray local, 2 CPU workers: 3 jobs (one of 2 tiles spread over "
          f"{len(workers)} workers) in {seconds:.1f} s, workers' start included")


def test_a_task_past_its_timeout_fails_its_job_and_the_batch_ends(ray_cluster, in_process, tmp_path):
    from fillscope.batch.cluster import run_batch_on_ray

    from fillscope.batch.cluster import kept_worker_pids

    jobs = [j for j in read_manifest(in_process["manifest"]) if j.id == "tiled"]
    started = time.perf_counter()
    summary = run_batch_on_ray(jobs, tmp_path, workers=1, device="cpu", progress=False, task_timeout_s=0.5,
                               keep_workers_s=600)
    seconds = time.perf_counter() - started
    assert kept_worker_pids() == []  # a worker killed as hung (restarted by Ray) is never kept, keep_workers_s or not
    assert (summary["ok"], summary["error"]) == (0, 1), summary
    assert "task timeout (0.5 s)" in summary["results"][0]["error"], summary
    assert not (tmp_path / "tiled.png").exists()
    print(f"\n[measured, this run] a 0.5 s task timeout: the batch ended in {seconds:.1f} s")
