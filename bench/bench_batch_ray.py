"""Benchmark: jobs per second of the batch runner, in this process against Ray with 1 and 2 CPU workers.

The manifest is tests/test_batch_ray.py's: 20 jobs of tiny fp32 models (tests/tiny_flux.py, tiny_sd3.py,
tiny_klein.py): 8 FLUX.1 Fill, 6 SD3 + ControlNet, 6 FLUX.2 [klein] 4B, 48x64 px, 2 steps, one image and mask,
seeds and options varied. Three configurations, measured in the same run, 3 rounds of the three in turn
(FILLSCOPE_BENCH_ROUNDS=n to change; every figure the median of the rounds), every run into its own fresh output
folder (a reused folder would skip the finished jobs):

(1) in-process: fillscope.batch.runner.run_batch with a fresh ModelCache(3, "cpu"), torch threads = usable cores;
(2) Ray, 1 CPU worker and (3) Ray, 2 CPU workers: fillscope.batch.cluster.run_batch_on_ray(jobs, out,
    address="local", workers=N, device="cpu", max_resident=3, progress=False); the threads each worker uses come
    from plan_workers (its CPUs: cores // N) and are read back from the batch.

For each: the call's wall time whole (a Ray call includes starting a local Ray, the workers starting and importing
torch, and stopping Ray), the summary's own seconds, and the job phase: from the `started` callback (every worker
up) to the last job's result (`on_result`); shutdown = from that result to the call's return. Jobs/s of the whole
call and of the job phase, each against the in-process figure. Every configuration loads its three stacks inside
its timing (fresh caches); a Ray worker imports the diffusers / transformers model classes when it starts
(worker.warm_imports, inside the start-up), which this process had done before (the builders import them): a
reference line measures that import in a fresh interpreter.

Checks: every job ok in every run, and each image equal to the first in-process run's (numpy arrays of the
PNGs), printed as "outputs equal in-process: yes/no".

Ray writes under HOME, RAY_TMPDIR and TMPDIR: all three point into one short folder made with
tempfile.mkdtemp(prefix="fsray-", dir="/tmp") for the run (Ray's socket paths must stay under 108 characters),
removed afterwards with everything the run wrote (models, outputs).

About 2.5 min on the 2-core bench machine, idle (1 round: about 1 min).
Run from the repo root: .venv/bin/python bench/bench_batch_ray.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

sys.path.insert(0, str(bl.REPO))

STEPS = 2
MAX_RESIDENT = 3  # all three stacks stay resident (as tests/test_batch_ray.py runs them)
RAY_WORKERS = (1, 2)
PROVENANCE = "measured"
IN_PROCESS = "in-process"
BUSY_WARN = 0.15  # background load (share of all CPUs) above which the report says the machine was not quiet


def bench_rounds() -> int:
    """Runs of each configuration: 3 (about 2.5 min here), FILLSCOPE_BENCH_ROUNDS=n to change (1: a quick look)."""
    return max(1, int(os.environ.get("FILLSCOPE_BENCH_ROUNDS", "3")))


def ray_label(n: int) -> str:
    return f"Ray, {n} CPU worker{'s' if n > 1 else ''}"


# a fresh interpreter's imports: what a Ray worker pays at start (torch + the batch module, then the diffusers /
# transformers model classes the stacks load: worker.warm_imports)
IMPORT_PROBE = """
import time
t = time.perf_counter()
import torch
import fillscope.batch.cluster
t1 = time.perf_counter()
from diffusers import AutoencoderKL, FluxTransformer2DModel, SD3Transformer2DModel
from transformers import CLIPTextModel, T5EncoderModel
t2 = time.perf_counter()
print(f"{t1 - t:.3f} {t2 - t1:.3f}")
"""


def machine_busy(seconds: float = 2.0) -> float | None:
    """Share of all CPUs busy over `seconds` (/proc/stat), this process idle: the load from other processes."""
    total0, idle0 = bl.CpuWatch._stat()
    time.sleep(seconds)
    total1, idle1 = bl.CpuWatch._stat()
    if total1 <= total0:
        return None
    return 1.0 - (idle1 - idle0) / (total1 - total0)


def import_probe() -> tuple[float, float]:
    """(torch + fillscope.batch.cluster, then the diffusers / transformers model classes) in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=bl.REPO, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    return float(out[0]), float(out[1])


def timed_run(call, out: Path) -> dict:
    """Runs `call(out, started, on_result)` and times it: whole, start-up (to `started`), job phase (`started`
    to the last result) and shutdown (the last result to the return)."""
    marks: dict = {"specs": None, "started": None, "last": None}

    def started(batch):
        marks["started"] = time.perf_counter()
        marks["specs"] = [(w.spec.cpus, w.spec.threads) for w in batch.workers]

    def on_result(result, done, total):
        marks["last"] = time.perf_counter()

    t0 = time.perf_counter()
    summary = call(out, started, on_result)
    t1 = time.perf_counter()
    begin = marks["started"] if marks["started"] is not None else t0
    last = marks["last"] if marks["last"] is not None else t1
    seconds = [r["seconds"] for r in summary["results"]]
    return {"summary": summary, "summary_s": summary["seconds"], "whole": t1 - t0, "startup": begin - t0,
            "jobs": last - begin, "shutdown": t1 - last, "specs": marks["specs"], "out": out,
            "job_sum": sum(seconds), "job_median": bl.median(seconds) if seconds else 0.0,
            "job_max": max(seconds, default=0.0),
            "workers_used": len({r.get("worker") for r in summary["results"]})}


def same_images(out: Path, ref: Path, ids: list[str]) -> int:
    """How many of `ids` have an image in `out` equal to the one in `ref` (numpy arrays of the PNGs)."""
    import numpy as np
    from PIL import Image

    equal = 0
    for i in ids:
        a, b = out / f"{i}.png", ref / f"{i}.png"
        if a.is_file() and b.is_file() and np.array_equal(np.array(Image.open(a)), np.array(Image.open(b))):
            equal += 1
    return equal


def main() -> int:
    watch = bl.CpuWatch()
    t_script = time.perf_counter()
    cores = bl.usable_cores()
    from batch_jobs import ray_tmp_env

    with ray_tmp_env() as folder:
        return measure(folder, cores, watch, t_script)


def measure(folder: Path, cores: int, watch, t_script: float) -> int:
    from tiny_models import tokenizers_available

    if not tokenizers_available():
        raise RuntimeError("ComfyUI's tokenizer files were not found (the tiny models need them)")
    import ray
    import torch

    bl.quiet_libraries()
    from batch_jobs import H, W, build_batch_manifest

    from fillscope.batch.cluster import run_batch_on_ray
    from fillscope.batch.manifest import read_manifest
    from fillscope.batch.runner import ModelCache, run_batch

    data = folder / "data"
    t = time.perf_counter()
    manifest = build_batch_manifest(data, STEPS)
    jobs = read_manifest(manifest)
    ids = [j.id for j in jobs]
    build_s = time.perf_counter() - t
    print(f"[batch_ray] {len(jobs)} jobs, tiny folders built in {build_s:.1f} s", flush=True)
    busy_before = machine_busy()
    probe_start, probe_models = import_probe()

    torch.set_num_threads(cores)
    inproc_threads = torch.get_num_threads()

    def in_process(out, started, on_result):
        return run_batch(jobs, out, progress=False, cache=ModelCache(MAX_RESIDENT, "cpu"), on_result=on_result)

    def on_ray(n):
        return lambda out, started, on_result: run_batch_on_ray(
            jobs, out, address="local", workers=n, device="cpu", max_resident=MAX_RESIDENT, progress=False,
            started=started, on_result=on_result)

    configs = {IN_PROCESS: in_process}
    configs.update({ray_label(n): on_ray(n) for n in RAY_WORKERS})
    rounds = bench_rounds()
    runs: dict = {label: [] for label in configs}
    for i in range(rounds):  # the configurations alternate, so a burst of background load hits each alike
        for k, (label, call) in enumerate(configs.items()):
            r = timed_run(call, data / f"out-{k}-{i}")
            runs[label].append(r)
            print(f"[batch_ray] round {i + 1}/{rounds}, {label}: {r['whole']:.1f} s", flush=True)
    if ray.is_initialized():
        ray.shutdown()

    # ---- checks ----
    n_jobs = len(jobs)
    ref_out = runs[IN_PROCESS][0]["out"]
    all_ok = all(r["summary"]["ok"] == n_jobs and r["summary"]["ran"] == n_jobs for rs in runs.values() for r in rs)
    equal = {label: [same_images(r["out"], ref_out, ids) for r in rs] for label, rs in runs.items()}
    equal[IN_PROCESS] = equal[IN_PROCESS][1:]  # its first run is the reference
    images_equal = all(n == len(ids) for v in equal.values() for n in v)

    # ---- table: medians over the rounds ----
    def med(label, key):
        return bl.median([r[key] for r in runs[label]])

    base_whole = n_jobs / med(IN_PROCESS, "whole")
    base_jobs = n_jobs / med(IN_PROCESS, "jobs")
    rows = []
    for label, rs in runs.items():
        ray_run = rs[0]["specs"] is not None
        if ray_run:
            workers = f"{len(rs[0]['specs'])} x {', '.join(str(t) for _, t in rs[0]['specs'])}"
        else:
            workers = f"1 x {inproc_threads}"
        ok = min(r["summary"]["ok"] for r in rs)
        whole_rate, job_rate = n_jobs / med(label, "whole"), n_jobs / med(label, "jobs")
        rows.append([
            label, workers, f"{ok}/{n_jobs}", f"{med(label, 'whole'):.2f}", f"{med(label, 'summary_s'):.2f}",
            f"{whole_rate:.2f}", ", ".join(f"{n_jobs / r['whole']:.2f}" for r in rs), f"{whole_rate / base_whole:.2f}",
            f"{med(label, 'startup'):.2f}" if ray_run else "-", f"{med(label, 'jobs'):.2f}", f"{job_rate:.2f}",
            ", ".join(f"{n_jobs / r['jobs']:.2f}" for r in rs), f"{job_rate / base_jobs:.2f}",
            f"{med(label, 'shutdown'):.2f}" if ray_run else "-", f"{med(label, 'job_sum'):.2f}",
            f"{med(label, 'job_median'):.3f}", f"{med(label, 'job_max'):.2f}", PROVENANCE,
        ])
    header = ["configuration", "workers x threads", "jobs ok", "call s", "summary s", "jobs/s (call)", "runs",
              "vs in-proc", "Ray start-up s", "job phase s", "jobs/s (job phase)", "runs", "vs in-proc",
              "shutdown s", "sum of job s", "median job s", "max job s", "provenance"]

    ray_version = bl._version("ray")
    busy_text = f"{busy_before:.0%}" if busy_before is not None else "unavailable"
    how = [
        (f"machine: {cores} usable cores (os.sched_getaffinity), no GPU; torch threads in-process: {inproc_threads}, "
         f"in a Ray worker: its CPUs (plan_workers: cores // workers); ray {ray_version}; machine busy before the "
         f"runs (2 s sample, this process idle): {busy_text}"),
        (f"how: {n_jobs} jobs (8 FLUX.1 Fill, 6 SD3 + ControlNet, 6 klein 4B; tests/test_batch_ray.py's manifest), "
         f"tiny fp32 models, {W}x{H} px, {STEPS} steps, device cpu, max_resident {MAX_RESIDENT}; {rounds} "
         f"round{'s' if rounds > 1 else ''}, "
         f"each running the configurations in the order shown, every run into a fresh output folder; every figure "
         f"is {PROVENANCE} in this run, the median of the {rounds} runs (ratios: of the medians); tiny folders "
         f"built in {build_s:.1f} s (not timed)"),
        ("how: call s = run_batch / run_batch_on_ray called to returned; summary s = the summary's own 'seconds' "
         "(the same call, timed inside it); jobs/s (call) = jobs / call s; runs = each run's jobs/s; vs in-proc = "
         "jobs/s / in-process jobs/s"),
        ("how: Ray start-up s = the call to the `started` callback (ray.init of a local cluster, the workers "
         "started, each importing torch, fillscope.batch and the model classes); job phase s = `started` to the last job's on_result "
         "(in-process: the call to the last result); shutdown s = the last result to the return (workers killed, "
         "ray.shutdown)"),
        ("how: every job phase includes loading the 3 stacks (fresh caches; on Ray each worker loads the stacks of "
         "the jobs it is given); sum of job s = the jobs' own seconds (JobResult.seconds) added up, work across workers; median / max job "
         "s = the median / slowest job's"),
        (f"reference ({PROVENANCE}, a fresh interpreter): import torch + fillscope.batch.cluster {probe_start:.2f} s "
         f"then the diffusers / transformers model classes {probe_models:.2f} s (both in a Ray worker's start)"),
        (f"outputs equal in-process: {'yes' if images_equal else 'no'} (PNG arrays against the first in-process "
         "run: " + "; ".join(f"{label} {', '.join(f'{n}/{len(ids)}' for n in v)}" for label, v in equal.items() if v)
         + "; workers that ran jobs: "
         + ", ".join(f"{label} {', '.join(str(r['workers_used']) for r in rs)}" for label, rs in runs.items()
                     if rs[0]["specs"] is not None) + ")"),
        f"script wall: {time.perf_counter() - t_script:.0f} s",
    ]

    notes = []
    last = ray_label(RAY_WORKERS[-1])
    n_last = RAY_WORKERS[-1]
    r_whole, r_jobs = n_jobs / med(last, "whole"), n_jobs / med(last, "jobs")
    if r_whole < base_whole:
        notes.append(
            f"over the whole call, {n_last} Ray workers on {cores} cores did not beat in-process on these tiny jobs "
            f"({r_whole:.2f} vs {base_whole:.2f} jobs/s): the call includes {med(last, 'startup'):.1f} s of start-up "
            f"(a local Ray, its workers importing torch) and {med(last, 'shutdown'):.1f} s of shutdown, against a "
            f"job phase of {med(last, 'jobs'):.1f} s.")
    else:
        notes.append(f"over the whole call, {n_last} Ray workers beat in-process ({r_whole:.2f} vs "
                     f"{base_whole:.2f} jobs/s), start-up and shutdown included.")
    if r_jobs < base_jobs:
        notes.append(
            f"in the job phase too, {n_last} workers were slower than in-process ({r_jobs:.2f} vs {base_jobs:.2f} "
            f"jobs/s; sum of job s {med(last, 'job_sum'):.1f} vs {med(IN_PROCESS, 'job_sum'):.1f}, slowest job "
            f"{med(last, 'job_max'):.2f} vs {med(IN_PROCESS, 'job_max'):.2f} s): each worker "
            f"loads its own stacks, and the {n_last} workers share the {cores} cores that in-process uses as {inproc_threads} torch threads.")
    else:
        notes.append(f"in the job phase, {n_last} workers ran {r_jobs / base_jobs:.2f}x the in-process rate "
                     f"({r_jobs:.2f} vs {base_jobs:.2f} jobs/s).")
    one = ray_label(1)
    if one in runs and runs[one][0]["specs"] and runs[one][0]["specs"][0][1] == inproc_threads:
        notes.append(
            f"{one} runs its jobs with the same {inproc_threads} torch threads as in-process: median job "
            f"{med(one, 'job_median'):.3f} s vs {med(IN_PROCESS, 'job_median'):.3f} s, slowest job "
            f"{med(one, 'job_max'):.2f} s vs {med(IN_PROCESS, 'job_max'):.2f} s, job phase "
            f"{med(one, 'jobs') - med(IN_PROCESS, 'jobs'):+.1f} s (medians); a fresh interpreter's import of the "
            f"model classes measured {probe_models:.1f} s.")
    spread = {label: [r["whole"] for r in rs] for label, rs in runs.items()}
    notes.append("run to run (call s): " + "; ".join(
        f"{label} {min(v):.1f} to {max(v):.1f}" for label, v in spread.items()) + ".")
    if busy_before is None or busy_before > BUSY_WARN:
        notes.append(
            f"the machine was not quiet: {busy_text} of its CPUs busy before the runs with this process idle (other "
            f"processes); read the medians and the per-run figures with that.")
    notes.append("cpu use: the Ray workers are not this process's children, so their CPU time counts under 'other "
                 "processes' in the cpu line; the 2 s sample before the runs is the background load.")
    if not all_ok:
        notes.append("NOT every job was ok: the rates above are not comparable (see the batch.jsonl lines).")
        for label, rs in runs.items():
            for r in rs:
                for line in r["summary"]["results"]:
                    if line["status"] != "ok":
                        notes.append(f"{label}: {line['id']}: {line['error']}")
    bl.print_report(
        f"bench_batch_ray: batch jobs/s, in-process vs Ray ({', '.join(map(str, RAY_WORKERS))} CPU workers), "
        f"{n_jobs} tiny fp32 jobs",
        how, rows, header, notes, watch)
    return 0 if all_ok else 1

if __name__ == "__main__":
    bl.run_main(main, "batch_ray")
