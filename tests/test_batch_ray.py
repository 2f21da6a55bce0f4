"""Batches on Ray (fillscope/batch/cluster.py), on this CPU machine with real Ray: a 7-job manifest of tiny fp32
FLUX Fill, SD3 + ControlNet and klein jobs (the fewest that still show both workers busy, a killed job run again and
an interrupted batch resumed) gives the in-process batch's images, bit for bit,

- on a local Ray cluster with 2 CPU workers (both used, one line a job in batch.jsonl, written by the driver);
- on a simulated two-node cluster (ray.cluster_utils.Cluster), jobs on both nodes;
- when a worker process is killed (SIGKILL) in the middle of a job: the job runs again elsewhere, nothing lost or
  written twice;
- after the command line (`--ray local --workers 2`) is interrupted (SIGINT) mid-batch: the rerun runs only the
  jobs that had not finished.

Ray writes under HOME, RAY_TMPDIR and TMPDIR: the module points all three at a short temporary folder (Ray's
socket paths must stay under 108 characters) and gives them back afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from batch_jobs import build_batch_manifest
from tiny_models import tokenizers_available

from fillscope.batch.manifest import read_manifest
from fillscope.batch.runner import ModelCache, run_batch

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'fillscope[cluster]')")
pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

from fillscope.batch.cluster import plan_workers, run_batch_on_ray  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COUNTS = (3, 2, 2)  # FLUX Fill, SD3 + ControlNet, klein: flux-0..2, sd3-0..1, klein-0..1
N_JOBS = sum(COUNTS)


@pytest.fixture(scope="module", autouse=True)
def ray_home(ray_tmp_env):
    return ray_tmp_env


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    """COUNTS jobs of FLUX Fill, SD3 + ControlNet and klein 4B, seeds and options varied, one image and mask."""
    path = build_batch_manifest(tmp_path_factory.mktemp("ray_batch"), counts=COUNTS)
    assert len(path.read_text().splitlines()) == N_JOBS
    return path


@pytest.fixture(scope="module")
def in_process(manifest, tmp_path_factory):
    out = tmp_path_factory.mktemp("in_process")
    summary = run_batch(read_manifest(manifest), out, progress=False, cache=ModelCache(3, "cpu"))
    assert summary["ok"] == N_JOBS, summary
    return out


def pixels(path) -> np.ndarray:
    return np.array(Image.open(path))


def logged(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "batch.jsonl").read_text().splitlines()]


def assert_equals_in_process(out: Path, in_process: Path) -> list[dict]:
    """Every job ok once in batch.jsonl, its image equal to the in-process one, bit for bit."""
    lines = logged(out)
    assert sorted(x["id"] for x in lines) == sorted(p.stem for p in in_process.glob("*.png")), lines
    assert all(x["status"] == "ok" for x in lines), [x for x in lines if x["status"] != "ok"]
    for x in lines:
        assert np.array_equal(pixels(out / f"{x['id']}.png"), pixels(in_process / f"{x['id']}.png")), x["id"]
    assert not list(out.glob(".*.tmp"))
    return lines


def test_plan_gives_one_worker_per_gpu_and_shares_cpu_nodes():
    nodes = [{"NodeID": "a" * 56, "Alive": True, "Resources": {"CPU": 16.0, "GPU": 4.0}},
             {"NodeID": "b" * 56, "Alive": True, "Resources": {"CPU": 8.0}},
             {"NodeID": "c" * 56, "Alive": False, "Resources": {"CPU": 8.0}},
             {"NodeID": "d" * 56, "Alive": True, "Resources": {"CPU": 0.0}}]
    specs = plan_workers(nodes, cpu_workers=2)
    assert [(s.node[0], s.gpus, s.cpus, s.threads) for s in specs] == [("a", 1, 0, 4)] * 4 + [("b", 0, 4, 4)] * 2
    assert [s.node[0] for s in plan_workers(nodes, 2, device="cuda")] == ["a"] * 4
    assert [(s.node[0], s.gpus) for s in plan_workers(nodes, 1, device="cpu")] == [("a", 0), ("b", 0)]
    with pytest.raises(Exception, match="no node of the Ray cluster has a GPU"):
        plan_workers(nodes[1:], 1, device="cuda")
    with pytest.raises(Exception, match="--workers"):
        plan_workers(nodes, 0)


def test_local_ray_with_two_workers_equals_the_in_process_batch(manifest, in_process, tmp_path):
    summary = run_batch_on_ray(read_manifest(manifest), tmp_path, address="local", workers=2, device="cpu",
                               max_resident=3, progress=False)
    assert (summary["ok"], summary["error"], summary["ran"]) == (N_JOBS, 0, N_JOBS), summary
    lines = assert_equals_in_process(tmp_path, in_process)
    assert len({x["worker"] for x in lines}) == 2  # both workers ran jobs
    assert not ray.is_initialized()  # the local cluster it started is stopped


def test_a_two_node_cluster_runs_jobs_on_both_nodes(manifest, in_process, tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        summary = run_batch_on_ray(read_manifest(manifest), tmp_path, address=cluster.address, device="cpu",
                                   max_resident=3, progress=False)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    assert summary["ok"] == N_JOBS, summary
    lines = assert_equals_in_process(tmp_path, in_process)
    nodes = {x["worker"].split(" pid ")[0] for x in lines}
    assert len(nodes) == 2, nodes


def test_killing_a_worker_mid_job_loses_nothing(manifest, in_process, tmp_path):
    killed = []

    def started(batch):
        def on_result(result, done, total):
            if done == 2 and not killed:
                busy = [(pid, job) for pid, job in batch.busy() if pid is not None]
                pid, job = busy[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(job)

        batch.on_result = on_result

    summary = run_batch_on_ray(read_manifest(manifest), tmp_path, address="local", workers=2, device="cpu",
                               max_resident=3, progress=False, started=started)
    assert killed, "no worker was busy to kill"
    assert summary["ok"] == N_JOBS and summary["ran"] == N_JOBS, summary
    lines = assert_equals_in_process(tmp_path, in_process)
    assert len(lines) == N_JOBS  # one line a job: nothing written twice
    again = next(x for x in lines if x["id"] == killed[0])
    assert again["attempts"] == 2, again  # the killed job ran a second time


def test_a_rerun_after_an_interrupted_batch_runs_only_the_missing_jobs(manifest, in_process, tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "fillscope", "batch", str(manifest), "--out", str(out), "--device", "cpu",
               "--ray", "local", "--workers", "2", "--max-resident", "3", "--no-progress"]
    # SIGINT back to its default in the child: a shell without job control starts background jobs with SIGINT
    # ignored, the ignore is inherited down to this batch, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = out / "batch.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err
    finished = {x["id"] for x in logged(out) if x["status"] == "ok"}
    assert 2 <= len(finished) < N_JOBS, finished
    assert {p.stem for p in out.glob("*.png")} == finished  # no image without its line, no half file

    res = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(finished)} skipped" in res.stdout, res.stdout
    lines = assert_equals_in_process(out, in_process)
    assert len(lines) == N_JOBS  # the rerun added exactly the missing jobs


def test_parallel_jobs_run_on_a_group_of_workers(manifest, in_process, tmp_path):
    """Jobs with "parallel": 2 (Ulysses for FLUX Fill and klein, CFG parallel for SD3) run on 2 workers as one
    process group and give the image of the spawned local ranks bit for bit, and the one-process image to within
    one 8-bit level; a job wanting more ranks than there are workers fails alone; the manifest refuses degrees a
    family cannot run."""
    lines = {x["id"]: x for x in map(json.loads, manifest.read_text().splitlines())}
    chosen = [dict(lines["flux-0"], parallel=2), dict(lines["sd3-0"], parallel=2), dict(lines["klein-1"], parallel=2),
              lines["flux-1"], dict(lines["flux-2"], id="flux-4-ranks", parallel=4)]
    path = manifest.with_name("parallel.jsonl")
    path.write_text("".join(json.dumps(x) + "\n" for x in chosen))
    local_jobs = [j for j in read_manifest(path) if j.id != "flux-4-ranks"]
    local = run_batch(local_jobs, tmp_path / "local", progress=False, cache=ModelCache(3, "cpu"))
    on_ray = run_batch_on_ray(read_manifest(path), tmp_path / "ray", address="local", workers=2, device="cpu",
                              max_resident=3, progress=False)
    assert (on_ray["ok"], on_ray["error"]) == (4, 1), on_ray
    failed = next(r for r in on_ray["results"] if r["status"] == "error")
    assert failed["id"] == "flux-4-ranks" and "parallel is 4 and 2 Ray worker(s)" in failed["error"]
    ranked = {x["id"]: x for x in logged(tmp_path / "ray")}
    for job_id in ("flux-0", "sd3-0", "klein-1"):
        assert "(rank 0 of 2)" in ranked[job_id]["worker"]
        ours = pixels(tmp_path / "ray" / f"{job_id}.png")
        assert np.array_equal(ours, pixels(tmp_path / "local" / f"{job_id}.png")), job_id
        one = pixels(in_process / f"{job_id}.png").astype(int)
        assert np.abs(ours.astype(int) - one).max() <= 1, job_id
        doc = json.loads((tmp_path / "ray" / f"{job_id}.shapes.json").read_text())
        facts = json.dumps(doc["node"]["facts"])
        assert ("cfg_parallel" if job_id.startswith("sd3") else "context_parallel") in facts, facts
    assert np.array_equal(pixels(tmp_path / "ray" / "flux-1.png"), pixels(in_process / "flux-1.png"))
    assert local["ok"] == 4, local

    for bad, text in ((dict(lines["flux-0"], parallel=3), "flux-fill runs one image on 1, 2, 4 or 8 ranks"),
                      (dict(lines["sd3-0"], parallel=4), "use one of 1, 2 (1: one process)")):
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(Exception, match=text.replace("(", "\\(").replace(")", "\\)")):
            read_manifest(path)
