"""Batches on Ray (fillscope/batch/cluster.py), on this CPU machine with real Ray: a 7-job manifest of tiny fp32
FLUX Fill, SD3 + ControlNet and klein jobs gives the in-process batch's images, bit for bit,

- on a local Ray cluster with 2 CPU workers (both used, one line a job in batch.jsonl, written by the driver, the
  cluster stopped afterwards): a job a family;
- when a worker process is killed (SIGKILL) in the middle of a job: the job runs again elsewhere, nothing lost or
  written twice (the same batch as above: one cluster start for both tests);
- on a simulated two-node cluster (ray.cluster_utils.Cluster, one CPU a node), jobs on both nodes (2 FLUX Fill jobs:
  one a node);
- with jobs of "parallel": 2 on a group of two workers (one a node of the same cluster);
- workers kept between two batches on one connection (run_batch_on_ray's keep_workers_s): the parallel batch runs
  on the two-node batch's workers, starts none, and (keep_workers_s left at its default, 0) stops them at its end;
- after the command line (`--ray ADDRESS --workers 2`, joining the two-node cluster) is interrupted (SIGINT)
  mid-batch: the rerun runs only the jobs that had not finished (the whole manifest).

Cost (issue 32): a batch on Ray pays its workers' start (an interpreter importing torch, diffusers and
transformers) and a stack load a family a worker, a cluster a few seconds more, and a group of spawned local ranks
an interpreter and a stack load a rank. So each test runs only the jobs its property needs, the local-cluster and
killed-worker tests read one batch (`local_batch`), the parallel test spawns two groups of local ranks, not three,
and the module starts two clusters: the local one `local_batch` starts and stops, then the two-node cluster, which
the two-node, parallel and command-line tests share (`two_nodes`). The two-node and parallel batches are one
connection's (`cluster_batches`): the parallel batch reuses the two-node batch's workers, the FLUX Fill stack
resident on both. What moved, and why (session 14): the parallel jobs ran on a local Ray of 2 CPUs of their own
(now: one worker on each of the two nodes, the group spanning them, as it would on a real cluster); the command line
ran `--ray local`, a cluster of its own in each of its two runs (now it joins the two-node cluster by its address:
the join of a live cluster is exercised there, as the two-node test's `address=` did; `address="local"` stays
covered in this process by `local_batch`, and the batch node's "ray local" by test_server_batch.py). Every
assertion kept. `local_batch` must run before the two-node cluster starts (file order): a Cluster writes its address
where a later ray.init() without one would join it.

Ray writes under HOME, RAY_TMPDIR and TMPDIR: the module points all three at a short temporary folder (Ray's
socket paths must stay under 108 characters) and gives them back afterwards.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from batch_jobs import build_batch_manifest
from ray_session import process_running
from tiny_models import tokenizers_available

from fillscope.batch.manifest import read_manifest
from fillscope.batch.runner import ModelCache, compute_on_rank, run_batch
from fillscope.parallel.launch import in_turn, run_on_ranks

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'fillscope[cluster]')")
pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

from fillscope.batch.cluster import (kept_worker_pids, plan_workers, release_kept_workers,  # noqa: E402
                                     run_batch_on_ray)

REPO = Path(__file__).resolve().parent.parent
COUNTS = (3, 2, 2)  # FLUX Fill, SD3 + ControlNet, klein: flux-0..2, sd3-0..1, klein-0..1
N_JOBS = sum(COUNTS)


@pytest.fixture(scope="module", autouse=True)
def ray_home(ray_tmp_env):
    return ray_tmp_env


def jobs_of(manifest: Path, ids) -> list:
    """The manifest's jobs `ids`, in manifest order."""
    return [job for job in read_manifest(manifest) if job.id in ids]


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


def assert_equals_in_process(out: Path, in_process: Path, ids=None) -> list[dict]:
    """Every job (`ids`; None: every job of the manifest) ok once in batch.jsonl, its image equal to the in-process
    one, bit for bit."""
    lines = logged(out)
    expected = sorted(ids) if ids is not None else sorted(p.stem for p in in_process.glob("*.png"))
    assert sorted(x["id"] for x in lines) == expected, lines
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


LOCAL_IDS = ("flux-0", "sd3-0", "klein-0")  # a job a family; the kill needs a job still running (below)


@pytest.fixture(scope="module")
def local_batch(ray_home, manifest, tmp_path_factory):
    """One batch on a local Ray cluster it starts itself (address "local", 2 CPU workers), one worker killed
    (SIGKILL) in the middle of a job: (the summary, the output folder, the workers' pids at the start, the killed
    job's id, whether Ray was still initialised in this process after the batch).

    Shared by the two tests below (issue 32: a cluster's and two workers' start, paid once). Its own cluster: address
    "local" starts one only when this process has none, and the check that it is stopped afterwards needs the start
    to be this batch's. LOCAL_IDS, three stacks: the workers take flux-0 and sd3-0 (cluster.RayBatch._choose spreads
    new stacks); the first back (flux-0: the smallest stack) takes klein-0, the slowest load, so when sd3-0 is in
    (done == 2) each worker has finished one job and the other is still loading or running klein-0, and is killed.
    A fourth job would let the first worker finish two before the other one (flux-0 then flux-1, seen here)."""
    from ray_session import disconnect

    disconnect()
    out = tmp_path_factory.mktemp("local_ray")
    killed, first_pids = [], []

    def started(batch):
        first_pids.extend(batch.pids.get(id(w)) for w in batch.workers)  # learnt by batch.start()

        def on_result(result, done, total):
            if done == 2 and not killed:
                busy = [(pid, job) for pid, job in batch.busy() if pid is not None]
                pid, job = busy[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(job)

        batch.on_result = on_result

    summary = run_batch_on_ray(jobs_of(manifest, LOCAL_IDS), out, address="local", workers=2, device="cpu",
                               max_resident=3, progress=False, started=started)
    return summary, out, first_pids, killed[0] if killed else None, ray.is_initialized()


def test_local_ray_with_two_workers_equals_the_in_process_batch(local_batch, in_process):
    summary, out, first_pids, _, still_initialised = local_batch
    assert (summary["ok"], summary["error"], summary["ran"]) == (len(LOCAL_IDS), 0, len(LOCAL_IDS)), summary
    lines = assert_equals_in_process(out, in_process, LOCAL_IDS)
    assert len(first_pids) == 2 and None not in first_pids, first_pids
    ran_on = {int(x["worker"].split(" pid ")[1]) for x in lines}
    assert set(first_pids) <= ran_on, (first_pids, lines)  # both workers ran jobs
    assert not still_initialised  # the local cluster it started is stopped


def test_killing_a_worker_mid_job_loses_nothing(local_batch, in_process):
    summary, out, _, killed, _ = local_batch
    assert killed, "no worker was busy to kill"
    assert summary["ok"] == len(LOCAL_IDS) and summary["ran"] == len(LOCAL_IDS), summary
    lines = assert_equals_in_process(out, in_process, LOCAL_IDS)
    assert len(lines) == len(LOCAL_IDS)  # one line a job: nothing written twice
    again = next(x for x in lines if x["id"] == killed)
    assert again["attempts"] == 2, again  # the killed job ran a second time


# --- the two-node cluster: the tests below share it (after local_batch: see the module docstring) ----------------

@pytest.fixture(scope="module")
def two_nodes(ray_home):
    """A simulated two-node cluster (ray.cluster_utils.Cluster: the head and one node, 1 CPU each, so one CPU worker
    a node) for the rest of the module; this process connected to no Ray when it starts (a local one stopped)."""
    from ray.cluster_utils import Cluster
    from ray_session import disconnect

    disconnect()
    for attempt in (1, 2):
        cluster = Cluster()
        try:
            # the head without Ray's dashboard (as the module's local clusters: nothing here uses it), a cheaper start
            cluster.add_node(num_cpus=1, include_dashboard=False)
            cluster.add_node(num_cpus=1)
            break
        except Exception as e:  # noqa: BLE001
            # Ray waits a fixed 30 s (ray/_private/node.py) for a new node's raylet to register; on a machine at load
            # 20 (other test runs beside this one) it took longer: one more start, never more
            cluster.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                raise
    try:
        cluster.wait_for_nodes()
        yield cluster
    finally:
        release_kept_workers()
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


TWO_NODE_IDS = ("flux-0", "flux-1")
KEEP_S = 600.0  # the two-node batch's workers kept for the parallel batch (taken at once: the bound is never reached)


def parallel_manifest(manifest: Path) -> Path:
    """flux-0, sd3-0 and klein-1 at "parallel": 2, flux-1 alone, and flux-2 at parallel 4 (more than the workers)."""
    lines = {x["id"]: x for x in map(json.loads, manifest.read_text().splitlines())}
    chosen = [dict(lines["flux-0"], parallel=2), dict(lines["sd3-0"], parallel=2), dict(lines["klein-1"], parallel=2),
              lines["flux-1"], dict(lines["flux-2"], id="flux-4-ranks", parallel=4)]
    path = manifest.with_name("parallel.jsonl")
    path.write_text("".join(json.dumps(x) + "\n" for x in chosen))
    return path


def wait_gone(pids, timeout_s: float = 120.0) -> list:
    """The processes of `pids` still running once none is, or `timeout_s` has passed (a killed actor exits
    asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [pid for pid in pids if process_running(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster_batches(two_nodes, manifest, tmp_path_factory):
    """Two batches on one connection to the two-node cluster: the two-node batch (TWO_NODE_IDS, one worker a node),
    its workers kept (keep_workers_s); then the parallel batch (parallel_manifest, workers=2: the same plan), which
    reuses them and, keeping none (the default), stops them at its end. Before them, the parallel jobs' spawned local
    ranks (their images are the parallel test's reference): flux-0 through run_batch (a parallel job in this process
    runs on local ranks), sd3-0 and klein-1 as the same rank function (runner.compute_on_rank) in one group start
    for both (a start is two interpreters loading torch and the stack).

    Returns a dict: the two-node batch's summary and folder ("two"), the workers' pids when it started and those it
    left kept ("two_pids", "kept"); the parallel batch's summary and folder ("par"), its workers' pids when it
    started, those kept after it and those still running a bounded wait after it ("par_pids", "kept_after",
    "alive_after"); the local ranks' images ("local_png")."""
    root = tmp_path_factory.mktemp("two_nodes")
    path = parallel_manifest(manifest)
    jobs = {j.id: j for j in read_manifest(path)}
    local = run_batch([jobs["flux-0"]], root / "local", progress=False, cache=ModelCache(1, "cpu"))
    assert local["ok"] == 1, local
    ranked_ids = ("sd3-0", "klein-1")
    outputs = run_on_ranks(in_turn, 2, *(partial(compute_on_rank, jobs[i], None, "cpu") for i in ranked_ids))
    local_png = {"flux-0": pixels(root / "local" / "flux-0.png")}
    for job_id, output in zip(ranked_ids, outputs):
        assert output.result.status == "ok", output.result
        local_png[job_id] = pixels(io.BytesIO(output.files[f"{job_id}.png"]))

    def pids_into(found):
        return lambda batch: found.extend(batch.pids.get(id(w)) for w in batch.workers)

    ray.init(address=two_nodes.address, logging_level="warning", log_to_driver=False)
    try:
        two_pids, par_pids = [], []
        two = run_batch_on_ray(jobs_of(manifest, TWO_NODE_IDS), root / "two", address=two_nodes.address,
                               device="cpu", max_resident=3, progress=False, keep_workers_s=KEEP_S,
                               started=pids_into(two_pids))
        kept = kept_worker_pids()
        par = run_batch_on_ray(list(jobs.values()), root / "par", address=two_nodes.address, workers=2,
                               device="cpu", max_resident=3, progress=False, started=pids_into(par_pids))
        kept_after = kept_worker_pids()
        alive_after = wait_gone(par_pids)
    finally:
        release_kept_workers()
        ray.shutdown()
    return {"two": (two, root / "two"), "two_pids": two_pids, "kept": kept, "par": (par, root / "par"),
            "par_pids": par_pids, "kept_after": kept_after, "alive_after": alive_after, "local_png": local_png,
            "manifest_lines": {x["id"]: x for x in map(json.loads, manifest.read_text().splitlines())},
            "parallel_manifest": path}


def test_a_two_node_cluster_runs_jobs_on_both_nodes(cluster_batches, in_process):
    # its own topology (two nodes of 1 CPU, one worker each). Two jobs of one stack: both workers are idle when the
    # batch starts, the first takes flux-0 and the second the job left (cluster.RayBatch._schedule), so each node
    # runs one
    summary, out = cluster_batches["two"]
    assert summary["ok"] == len(TWO_NODE_IDS), summary
    lines = assert_equals_in_process(out, in_process, TWO_NODE_IDS)
    nodes = {x["worker"].split(" pid ")[0] for x in lines}
    assert len(nodes) == 2, nodes


def test_parallel_jobs_run_on_a_group_of_workers(cluster_batches, in_process):
    """Jobs with "parallel": 2 (Ulysses for FLUX Fill and klein, CFG parallel for SD3) run on 2 workers as one
    process group and give the image of the spawned local ranks bit for bit, and the one-process image to within
    one 8-bit level; a job wanting more ranks than there are workers fails alone; the manifest refuses degrees a
    family cannot run. The group: one worker on each node of the two-node cluster (cluster_batches)."""
    on_ray, out = cluster_batches["par"]
    local_png, lines = cluster_batches["local_png"], cluster_batches["manifest_lines"]
    assert (on_ray["ok"], on_ray["error"]) == (4, 1), on_ray
    failed = next(r for r in on_ray["results"] if r["status"] == "error")
    assert failed["id"] == "flux-4-ranks" and "parallel is 4 and 2 Ray worker(s)" in failed["error"]
    ranked = {x["id"]: x for x in logged(out)}
    for job_id in ("flux-0", "sd3-0", "klein-1"):
        assert "(rank 0 of 2)" in ranked[job_id]["worker"]
        ours = pixels(out / f"{job_id}.png")
        assert np.array_equal(ours, local_png[job_id]), job_id
        one = pixels(in_process / f"{job_id}.png").astype(int)
        assert np.abs(ours.astype(int) - one).max() <= 1, job_id
        doc = json.loads((out / f"{job_id}.shapes.json").read_text())
        facts = json.dumps(doc["node"]["facts"])
        assert ("cfg_parallel" if job_id.startswith("sd3") else "context_parallel") in facts, facts
    assert np.array_equal(pixels(out / "flux-1.png"), pixels(in_process / "flux-1.png"))

    path = cluster_batches["parallel_manifest"].with_name("parallel_bad.jsonl")
    for bad, text in ((dict(lines["flux-0"], parallel=3), "flux-fill runs one image on 1, 2, 4 or 8 ranks"),
                      (dict(lines["sd3-0"], parallel=4), "use one of 1, 2 (1: one process)")):
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(Exception, match=text.replace("(", "\\(").replace(")", "\\)")):
            read_manifest(path)


def test_kept_workers_run_the_next_batch_and_the_default_stops_them(cluster_batches):
    """keep_workers_s on a connection this process made: the two-node batch's workers stay up after it; the
    parallel batch (the same plan) runs on those processes, starting none, its stacks resident there (flux-0's
    ranks and flux-1 load nothing); keeping none itself, it stops them: none kept and none running afterwards."""
    two_pids, par_pids = cluster_batches["two_pids"], cluster_batches["par_pids"]
    assert len(two_pids) == 2 and None not in two_pids, two_pids
    assert cluster_batches["kept"] == two_pids
    assert par_pids == two_pids  # the same worker processes: no worker started for the second batch
    _, out = cluster_batches["par"]
    ran_on = {int(x["worker"].split(" pid ")[1].split()[0]) for x in logged(out) if x.get("worker")}
    assert ran_on and ran_on <= set(two_pids), (ran_on, two_pids)
    for job_id in ("flux-0", "flux-1"):  # the FLUX Fill stack the first batch left resident
        facts = json.loads((out / f"{job_id}.shapes.json").read_text())["node"]["facts"]
        assert facts["stack"] == "resident", (job_id, facts)
    assert cluster_batches["kept_after"] == []
    assert cluster_batches["alive_after"] == [], "the workers outlived the batch that kept none"


def test_a_rerun_after_an_interrupted_batch_runs_only_the_missing_jobs(two_nodes, manifest, in_process, tmp_path):
    # the command line joins the two-node cluster by its address (one worker a node), in its own process; this one
    # holds no worker meanwhile (cluster_batches stopped its own). The whole manifest: after 2 jobs are in, 5 still
    # run or wait (stack loads of seconds), so SIGINT always lands mid-batch
    assert kept_worker_pids() == []
    out = tmp_path / "out"
    command = [sys.executable, "-m", "fillscope", "batch", str(manifest), "--out", str(out), "--device", "cpu",
               "--ray", two_nodes.address, "--workers", "2", "--max-resident", "3", "--no-progress"]
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
