"""Running a batch on Ray: workers that keep their models resident, jobs routed to the worker that holds their stack.

One worker (a Ray actor holding a `ModelCache`) per GPU, with `num_gpus=1`; on a node without GPUs, `cpu_workers`
CPU workers sharing its cores. Each is pinned to its node (node affinity), so jobs spread over every node of the
cluster. The driver (the process that called `run_batch_on_ray`) is the only writer of DIR: a worker computes a job
(runner.compute_job: the same code as the in-process batch) and returns its files as bytes; the driver writes them,
each whole, then appends the job's line to batch.jsonl. So a killed worker leaves no file and no line behind, and a
killed driver leaves only finished jobs, which a rerun skips (runner.pending_jobs).

A worker that dies under a job (killed, out of memory, its node lost) is restarted by Ray (`max_restarts`), and the
job goes back to the queue, to run again on whichever worker is free first; a job that took `max_attempts` workers
down with it fails alone with that said. A job's own failure (a missing file, a wrong size) is not retried: it is
the job's line in batch.jsonl, as in-process.

Paths in the manifest (models, images, masks) are read by the workers: on a cluster they must name the same files
on every node (a shared or copied folder); the outputs need no shared folder.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FillScopeInputError
from .manifest import Job
from .reach import CONNECT_TIMEOUT_S, join, refuse_while_given_up
from .runner import (LOG, JobOutput, JobResult, ModelCache, _Progress, append_line, pending_jobs, stack_key,
                     summarise)

MAX_RESTARTS = 2  # Ray restarts a dead worker this many times before it is given up
MAX_ATTEMPTS = 3  # workers a job may see die under it before it fails
RESTARTING = "restarting"  # a worker's state while Ray restarts it
LOCAL_OBJECT_STORE_BYTES = 512 * 1024**2  # a local cluster's object store: results are PNG bytes, not tensors


def import_ray():
    try:
        import ray
    except ImportError as e:
        raise FillScopeInputError("--ray", "needs the ray package, which is not installed.",
                                  "pip install 'fillscope[cluster]' (ray 2.60 or newer), or run the batch "
                                  "without --ray (in this process).") from e
    return ray


# --- the worker -------------------------------------------------------------------------------------------------------

WARM_DIFFUSERS = ("AutoencoderKL", "AutoencoderKLFlux2", "FluxTransformer2DModel", "Flux2Transformer2DModel",
                  "SD3Transformer2DModel", "SD3ControlNetModel")
WARM_TRANSFORMERS = ("CLIPTextModel", "CLIPTextModelWithProjection", "T5EncoderModel", "Qwen3Model")


def warm_imports() -> None:
    """The model classes the stacks are built from, imported while the workers start (in parallel, before the first
    job) instead of inside each worker's first job: 4.5 s in a fresh interpreter here (bench/bench_batch_ray.py)."""
    import diffusers
    import transformers

    for module, names in ((diffusers, WARM_DIFFUSERS), (transformers, WARM_TRANSFORMERS)):
        for name in names:
            getattr(module, name)  # both packages import a class on first access


class JobWorker:
    """A Ray actor's class (wrapped by ray.remote when a batch starts): a ModelCache kept between jobs."""

    def __init__(self, device: str, max_resident: int, threads: int):
        import torch

        torch.set_num_threads(threads)
        self.cache = ModelCache(max_resident, device)
        warm_imports()

    def where(self) -> str:
        import ray

        return f"node {ray.get_runtime_context().get_node_id()[:8]} pid {os.getpid()}"

    def pid(self) -> int:
        return os.getpid()

    def address(self) -> tuple[str, int]:
        from ..parallel.ray_ranks import rank_address

        return rank_address()

    def run(self, job: Job, key: str) -> JobOutput:
        from .runner import compute_job

        output = compute_job(job, self.cache, key=key)
        output.result.worker = self.where()
        return output

    def run_rank(self, job: Job, key: str, rank: int, settings: tuple) -> JobOutput | None:
        """The job as `rank` of a group of workers (ray_ranks.run_rank), on this worker's resident stack: rank 0's
        output, None on the other ranks."""
        from functools import partial

        from ..parallel.ray_ranks import run_rank
        from .runner import compute_job

        # compute_job returns every failure as the job's error, so run_rank's outcome is always ("ok", ...)
        _, output = run_rank(rank, settings, partial(compute_job, job, self.cache, key=key, in_group=True), ())
        if rank != 0:
            return None
        output.result.worker = f"{self.where()} (rank 0 of {settings[0]})"
        return output


@dataclass(frozen=True)
class WorkerSpec:
    """One worker to start: the node it is pinned to, its GPU (0 or 1), the CPUs Ray reserves and the threads
    torch uses in it."""

    node: str
    gpus: int
    cpus: float
    threads: int


def plan_workers(nodes: list[dict], cpu_workers: int = 1, device: str = "auto") -> list[WorkerSpec]:
    """One worker per GPU on nodes that have GPUs (their CPUs shared out as threads); `cpu_workers` on a node
    without (never more than its CPUs); nodes with neither are left out. device "cuda": GPU workers only; "cpu":
    CPU workers on every node. `nodes`: ray.nodes()."""
    if isinstance(cpu_workers, bool) or not isinstance(cpu_workers, int) or cpu_workers < 1:
        raise FillScopeInputError("--workers", f"is {cpu_workers!r}.", "start at least 1 worker per CPU node.")
    specs = []
    for node in nodes:
        if not node.get("Alive", False):
            continue
        resources, node_id = node.get("Resources", {}), node["NodeID"]
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        if device == "cpu":
            gpus = 0
        elif device == "cuda" and not gpus:
            continue
        if gpus:
            specs += [WorkerSpec(node_id, 1, 0, max(1, cpus // gpus))] * gpus
        elif cpus:
            n = min(cpu_workers, cpus)
            specs += [WorkerSpec(node_id, 0, cpus // n, max(1, cpus // n))] * n
    if not specs:
        if device == "cuda":
            raise FillScopeInputError("--device", "is cuda, and no node of the Ray cluster has a GPU.",
                                      "use --device auto (CPU workers) or add GPU nodes.")
        raise FillScopeInputError("--ray", "the cluster has no node with a CPU or GPU to give a worker.",
                                  "start the nodes with CPUs (ray start --num-cpus N) or GPUs.")
    return specs


def connect(ray, address: str, workers: int, runtime_env: dict | None = None, *,
            timeout_s: float = CONNECT_TIMEOUT_S, check_cancel=None) -> bool:
    """Ray initialised for this batch: `"local"` starts a cluster on this machine, anything else joins the
    cluster at that address within `timeout_s`, calling `check_cancel()` (raises to cancel) while it waits
    (reach.join: an unreachable or silent address is refused, Ray left shut down); `runtime_env` as ray.init takes
    it (the ComfyUI node ships the engine's folder as a py_module). False when Ray was initialised before (the
    caller's; left running)."""
    refuse_while_given_up()
    if ray.is_initialized():
        return False
    kw = dict(include_dashboard=False, logging_level="warning", log_to_driver=False)
    if runtime_env:
        kw["runtime_env"] = runtime_env
    if address == "local":
        from ..parallel.launch import usable_cores

        ray.init(num_cpus=max(usable_cores(), workers), object_store_memory=LOCAL_OBJECT_STORE_BYTES, **kw)
    else:
        join(ray, address, kw, timeout_s, check_cancel)
    return True


# --- the driver -------------------------------------------------------------------------------------------------------

@dataclass
class _Worker:
    handle: object
    spec: WorkerSpec
    resident: OrderedDict = field(default_factory=OrderedDict)  # the driver's mirror of its ModelCache's keys
    busy: object = None  # the _Dispatch it runs, or RESTARTING
    gone: bool = False  # dead for good: given no more jobs


@dataclass
class _Dispatch:
    """One job on one worker, or on a group of workers as the ranks of a parallel job (rank 0's output counts)."""

    job: Job
    key: str
    attempt: int
    waiting: int = 0  # ranks not answered yet
    output: JobOutput | None = None
    died: BaseException | None = None  # a worker of it died


class RayBatch:
    """The driver of one batch on Ray. `run(todo)` runs (job, key) pairs and returns their results in the order
    they finished; `busy()` says which worker runs which job now (pid, job id).

    Scheduling: a parallel job (`parallel` N > 1) takes N idle workers at once (those holding its stack first) and
    runs on them as the ranks of one process group; while it waits for N, idle workers wait with it rather than
    start other jobs (which would starve it). Any other job goes to the first idle worker, preferring one whose
    stack it holds (runner.stack_key)."""

    def __init__(self, ray, specs: list[WorkerSpec], out_dir: Path, *, max_resident: int = 1, progress: bool = True,
                 on_result=None, max_attempts: int = MAX_ATTEMPTS, timeout_s: float = 600.0):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray, self.out_dir, self.log = ray, Path(out_dir), Path(out_dir) / LOG
        self.max_resident, self.progress, self.on_result = max_resident, progress, on_result
        self.max_attempts, self.timeout_s = max_attempts, timeout_s
        remote = ray.remote(JobWorker)
        self.workers = []
        for spec in specs:
            options = dict(num_cpus=spec.cpus, num_gpus=spec.gpus, max_restarts=MAX_RESTARTS, max_task_retries=0,
                           scheduling_strategy=NodeAffinitySchedulingStrategy(spec.node, soft=False))
            handle = remote.options(**options).remote("cuda" if spec.gpus else "cpu", max_resident, spec.threads)
            self.workers.append(_Worker(handle, spec))
        self.pids = {}  # id(worker) -> pid, learnt when it first answers
        self.stack_keys: dict = {}  # job id -> runner.stack_key, once a job (the queue is scanned every dispatch)

    def start(self) -> None:
        """Waits until every worker has started (imports done), so the first jobs do not time the start-up."""
        refs = [w.handle.pid.remote() for w in self.workers]
        for w, pid in zip(self.workers, self.ray.get(refs, timeout=self.timeout_s)):
            self.pids[id(w)] = pid

    def busy(self) -> list[tuple[int, str]]:
        return [(self.pids.get(id(w)), w.busy.job.id) for w in self.workers if isinstance(w.busy, _Dispatch)]

    # --- choosing -------------------------------------------------------------------------------------------------

    def _choose(self, worker: _Worker, queue: list) -> int | None:
        """Which queued single job this idle worker takes: one whose stack it holds, else one of the stack with the
        most queued jobs for each worker holding it (a new stack spreads to a second worker once it has many)."""
        keys = {i: self.stack_keys[item[0].id] for i, item in enumerate(queue) if item[0].parallel == 1}
        if not keys:
            return None
        for i, k in keys.items():
            if k in worker.resident:
                return i
        counts: dict = {}
        for k in keys.values():
            counts[k] = counts.get(k, 0) + 1
        holders = {k: sum(k in w.resident for w in self.workers) for k in counts}
        best = max(counts, key=lambda k: counts[k] / (1 + holders[k]))
        return next(i for i, k in keys.items() if k == best)

    def _group_for(self, job: Job, idle: list) -> list | None:
        """`job.parallel` idle workers of one kind (GPU or CPU), those holding its stack first; None if too few."""
        k = self.stack_keys[job.id]
        for gpus in (1, 0):
            same = sorted((w for w in idle if w.spec.gpus == gpus), key=lambda w: k not in w.resident)
            if len(same) >= job.parallel:
                return same[:job.parallel]
        return None

    def _mark_resident(self, worker: _Worker, job: Job) -> None:
        k = self.stack_keys[job.id]
        worker.resident[k] = True
        worker.resident.move_to_end(k)
        while len(worker.resident) > self.max_resident:
            worker.resident.popitem(last=False)

    # --- dispatching ----------------------------------------------------------------------------------------------

    def _dispatch(self, item: tuple, workers: list, inflight: dict) -> None:
        job, key, attempt = item
        d = _Dispatch(job, key, attempt, waiting=len(workers))
        if len(workers) == 1:
            refs = [workers[0].handle.run.remote(job, key)]
        else:
            address, port = self.ray.get(workers[0].handle.address.remote(), timeout=self.timeout_s)
            settings = (len(workers), address, port, "nccl" if workers[0].spec.gpus else "gloo", self.timeout_s)
            refs = [w.handle.run_rank.remote(job, key, rank, settings) for rank, w in enumerate(workers)]
        for w, ref in zip(workers, refs):
            w.busy = d
            self._mark_resident(w, job)
            inflight[ref] = w

    def _schedule(self, queue: list, inflight: dict) -> list:
        """Gives idle workers work; returns the queued items that can never run (a parallel job wanting more
        workers than are alive)."""
        idle = [w for w in self.workers if w.busy is None and not w.gone]
        alive = sum(not w.gone for w in self.workers)
        impossible, waiting = [], False
        for item in list(queue):
            if item[0].parallel == 1:
                continue
            if item[0].parallel > alive:
                queue.remove(item)
                impossible.append(item)
                continue
            group = self._group_for(item[0], idle)
            if group is None:
                waiting = True
                break
            queue.remove(item)
            self._dispatch(item, group, inflight)
            idle = [w for w in idle if w not in group]
        if not waiting:
            for w in idle:
                i = self._choose(w, queue)
                if i is not None:
                    self._dispatch(queue.pop(i), [w], inflight)
        return impossible

    # --- the loop -------------------------------------------------------------------------------------------------

    def run(self, todo: list[tuple[Job, str]]) -> list[JobResult]:
        from ray.exceptions import RayError, RayTaskError

        queue = [(job, key, 1) for job, key in todo]
        self.stack_keys = {job.id: stack_key(job) for job, _ in todo}
        inflight: dict = {}  # object ref -> worker
        results: list[JobResult] = []
        bar = _Progress(len(todo), self.progress)

        def fail(job, key, attempt, error):
            output = JobOutput(JobResult(job.id, key, "error", 0.0, error=error, attempts=attempt), {})
            results.append(self._finish(output, bar, len(todo), len(results) + 1))

        try:
            while queue or inflight:
                for job, key, attempt in self._schedule(queue, inflight):
                    alive = sum(not w.gone for w in self.workers)
                    fail(job, key, attempt, f"parallel is {job.parallel} and {alive} Ray worker(s) are alive; "
                         f"a parallel job runs on that many workers at once. Fix: start more workers (--workers, "
                         f"GPUs) or lower parallel.")
                if not inflight:  # every worker gone
                    for job, key, attempt in queue:
                        fail(job, key, attempt, "every Ray worker died (see the errors above); nothing ran this job")
                    break
                ready, _ = self.ray.wait(list(inflight), num_returns=1)
                ref = ready[0]
                w = inflight.pop(ref)
                d, w.busy = w.busy, None
                if d == RESTARTING:
                    try:
                        self.pids[id(w)] = self.ray.get(ref)  # back, with a new process and an empty cache
                    except RayError:
                        w.gone = True  # its restarts are used up (or its node is lost)
                    continue
                d.waiting -= 1
                try:
                    output = self.ray.get(ref)
                    if output is not None:  # a single job, or rank 0 of a group
                        d.output = output
                except RayTaskError as e:  # raised inside the worker outside the job (compute_job returns its own)
                    d.output = JobOutput(JobResult(d.job.id, d.key, "error", 0.0, error=str(e)[:2000]), {})
                except RayError as e:  # the worker died under the job
                    d.died = e
                    w.resident.clear()
                    self.pids.pop(id(w), None)
                    # no job for it until Ray has restarted it: a call while it restarts fails at once, while this
                    # one (retried until it is back, or its restarts are used up) answers when it is ready
                    w.busy = RESTARTING
                    inflight[w.handle.pid.options(max_task_retries=-1).remote()] = w
                if d.waiting:
                    continue
                if d.died is not None:  # the job goes back to the queue, to the first free worker(s)
                    if d.attempt < self.max_attempts:
                        queue.insert(0, (d.job, d.key, d.attempt + 1))
                    else:
                        fail(d.job, d.key, d.attempt, f"{d.attempt} times a Ray worker died running this job (the "
                             f"last: {type(d.died).__name__}); it is not tried again")
                    continue
                d.output.result.attempts = d.attempt
                results.append(self._finish(d.output, bar, len(todo), len(results) + 1))
        finally:
            bar.close()
        return results

    def _finish(self, output: JobOutput, bar, total: int, done: int) -> JobResult:
        result = output.write(self.out_dir)
        append_line(self.log, result.line())
        bar.update(result)
        if self.on_result is not None:
            self.on_result(result, done, total)
        return result

    def shutdown(self) -> None:
        for w in self.workers:
            try:
                self.ray.kill(w.handle)
            except Exception:  # noqa: BLE001  (already gone)
                pass


def run_batch_on_ray(jobs: list[Job], out_dir, *, address: str = "local", workers: int = 1, device: str = "auto",
                     max_resident: int = 1, progress: bool = True, on_result=None,
                     max_attempts: int = MAX_ATTEMPTS, started=None, runtime_env: dict | None = None,
                     connect_timeout: float = CONNECT_TIMEOUT_S, check_cancel=None) -> dict:
    """Every job not finished before, on Ray workers (module docstring); the same summary as runner.run_batch.
    `address`: "local" (a cluster on this machine, stopped afterwards) or a cluster's address; `workers`: CPU
    workers per node without GPUs. `started(batch)` is called once the workers are up (tests use it to find the
    workers' processes); `runtime_env`, `connect_timeout` (seconds), `check_cancel`: for connect."""
    start = time.perf_counter()
    ray = import_ray()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    todo, skipped = pending_jobs(jobs, out_dir)
    if not todo:
        return summarise(jobs, [], skipped, out_dir, start)
    ours = connect(ray, address, workers, runtime_env, timeout_s=connect_timeout, check_cancel=check_cancel)
    batch = None
    try:
        specs = plan_workers(ray.nodes(), workers, device)
        batch = RayBatch(ray, specs, out_dir, max_resident=max_resident, progress=progress, on_result=on_result,
                         max_attempts=max_attempts)
        batch.start()
        if started is not None:
            started(batch)
        results = batch.run(todo)
    finally:
        if batch is not None:
            batch.shutdown()
        if ours:
            ray.shutdown()
    return summarise(jobs, results, skipped, out_dir, start)
