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

A tiled job in mode independent (tiles.py) is spread: the driver reads its image and mask and plans its tiles, each
tile is a task of its own for whichever worker is free (its stack resident there after the first), and the driver
blends the tiles' images and pastes them back when the last is in: the in-process job's PNG, bit for bit. A tile
whose worker dies runs again elsewhere, as a job does; a tile that fails fails its job.

No wait is unbounded: a task (a job, a rank, a tile) that has not answered `task_timeout_s` after it was sent has
its worker killed (Ray restarts it) and its job fails as timed out; the workers' start, a group's address and a
restart are waited for `timeout_s` at most.

Workers kept between batches (`keep_workers_s` > 0, off by default): keep.py.

Paths in the manifest (models, images, masks) are read by the workers: on a cluster they must name the same files
on every node (a shared or copied folder), and a spread job's image and mask also by the driver; the outputs need
no shared folder.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..errors import FillScopeInputError
from .manifest import Job
from .keep import (KEPT_ANSWER_S, _keep, _KeptWorkers, _take_kept, check_keep_workers, kept_worker_pids,  # noqa: F401
                   release_kept_workers)
from .reach import CONNECT_TIMEOUT_S, join, refuse_while_given_up
from .runner import (LOG, JobOutput, JobResult, _Progress, append_line, describe_error, pending_jobs,
                     stack_key, summarise)
from .tiles import SpreadJob, TileDone, spreads
from .worker import JobWorker

MAX_RESTARTS = 2  # Ray restarts a dead worker this many times before it is given up
MAX_ATTEMPTS = 3  # workers a job may see die under it before it fails
RESTARTING = "restarting"  # a worker's state while Ray restarts it
LOCAL_OBJECT_STORE_BYTES = 512 * 1024**2  # a local cluster's object store: results are PNG bytes, not tensors
TASK_TIMEOUT_S = 6 * 3600.0  # a job, a rank or a tile that has not answered by then is taken as hung
WAIT_SLICE_S = 5.0  # the driver's wait for the next answer, between two looks at the deadlines
KILL_GRACE_S = 60.0  # after a hung task's worker is killed, how long its call may take to fail



def import_ray():
    try:
        import ray
    except ImportError as e:
        raise FillScopeInputError("--ray", "needs the ray package, which is not installed.",
                                  "pip install 'fillscope[cluster]' (ray 2.60 or newer), or run the batch "
                                  "without --ray (in this process).") from e
    return ray


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
    deadline: float | None = None  # time.monotonic() by which its call must answer (task_timeout_s, restart)


class _Item(NamedTuple):
    """A queued task: a job (work None), or one tile of a spread job (work: its TileWork, spread: its SpreadJob)."""

    job: Job
    key: str
    attempt: int
    work: object = None
    spread: SpreadJob | None = None


@dataclass
class _Dispatch:
    """One task on one worker, or a job on a group of workers as the ranks of a parallel job (rank 0's output
    counts)."""

    job: Job
    key: str
    attempt: int
    waiting: int = 0  # ranks not answered yet
    output: object = None  # JobOutput, or TileDone for a tile
    died: BaseException | None = None  # a worker of it died
    timed_out: bool = False  # it ran past task_timeout_s: its workers were killed
    work: object = None  # a tile's TileWork
    spread: SpreadJob | None = None


class RayBatch:
    """The driver of one batch on Ray. `run(todo)` runs (job, key) pairs and returns their results in the order
    they finished; `busy()` says which worker runs which job now (pid, job id).

    Scheduling: a parallel job (`parallel` N > 1) takes N idle workers at once (those holding its stack first) and
    runs on them as the ranks of one process group; while it waits for N, idle workers wait with it rather than
    start other jobs (which would starve it). A tiled job in mode independent (tiles.spreads) is planned when a
    worker first takes it, and its tiles are queued in its place: each is a task of its own, so the job's tiles
    spread over the idle workers. Any other task goes to the first idle worker, preferring one whose stack it holds
    (runner.stack_key). Every wait has a limit: a task that has not answered after `task_timeout_s` has its
    worker(s) killed (Ray restarts them) and its job fails saying so; a restart that does not answer within
    `timeout_s` gives the worker up."""

    def __init__(self, ray, specs: list[WorkerSpec], out_dir: Path, *, max_resident: int = 1, progress: bool = True,
                 on_result=None, max_attempts: int = MAX_ATTEMPTS, timeout_s: float = 600.0,
                 task_timeout_s: float = TASK_TIMEOUT_S, kept: _KeptWorkers | None = None):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray, self.out_dir, self.log = ray, Path(out_dir), Path(out_dir) / LOG
        self.max_resident, self.progress, self.on_result = max_resident, progress, on_result
        self.max_attempts, self.timeout_s, self.task_timeout_s = max_attempts, timeout_s, task_timeout_s
        self.pids = {}  # id(worker) -> pid, learnt when it first answers
        self.reused = kept is not None  # the workers of an earlier batch (_take_kept: alive, the same processes)
        if kept is not None:
            self.workers = kept.workers
            self.pids = {id(w): pid for w, pid in zip(kept.workers, kept.pids)}
        else:
            remote = ray.remote(JobWorker)
            self.workers = []
            for spec in specs:
                options = dict(num_cpus=spec.cpus, num_gpus=spec.gpus, max_restarts=MAX_RESTARTS, max_task_retries=0,
                               scheduling_strategy=NodeAffinitySchedulingStrategy(spec.node, soft=False))
                handle = remote.options(**options).remote("cuda" if spec.gpus else "cpu", max_resident, spec.threads)
                self.workers.append(_Worker(handle, spec))
        self.first_pids: dict = {}  # id(worker) -> its pid when the batch started (a restart changes it)
        self.restarted = False  # a worker died, was restarted or given up during the batch
        self.stack_keys: dict = {}  # job id -> runner.stack_key, once a job (the queue is scanned every dispatch)
        self.results: list[JobResult] = []
        self.total, self.bar = 0, None

    def start(self) -> None:
        """Waits until every worker has started (imports done), so the first jobs do not time the start-up."""
        if not self.reused:  # kept workers answered their pids in _take_kept
            refs = [w.handle.pid.remote() for w in self.workers]
            for w, pid in zip(self.workers, self.ray.get(refs, timeout=self.timeout_s)):
                self.pids[id(w)] = pid
        self.first_pids = dict(self.pids)

    def drain(self, limit_s: float) -> None:
        """Waits, `limit_s` at most, for the calls still running when the batch ended (tiles of a job that failed
        meanwhile), so their workers are idle; a worker restarting is not waited for (it is not kept)."""
        stray = {ref: w for ref, w in getattr(self, "inflight", {}).items() if isinstance(w.busy, _Dispatch)}
        end = time.monotonic() + limit_s
        while stray:
            timeout = max(0.0, min(end, *(w.deadline for w in stray.values())) - time.monotonic())
            ready, _ = self.ray.wait(list(stray), num_returns=1, timeout=timeout)
            if not ready:
                return  # past its deadline: the worker stays busy, so none is kept
            w = stray.pop(ready[0])
            w.busy, w.deadline = None, None

    def keepable(self) -> bool:
        """Whether every worker may be kept for the next batch: none died, was restarted, timed out or given up
        during this one, and none still runs a task (a tile of a job that failed meanwhile)."""
        return (not self.restarted and all(w.busy is None and not w.gone for w in self.workers)
                and all(self.pids.get(id(w)) == self.first_pids.get(id(w)) is not None for w in self.workers))

    def busy(self) -> list[tuple[int, str]]:
        return [(self.pids.get(id(w)), w.busy.job.id) for w in self.workers if isinstance(w.busy, _Dispatch)]

    # --- choosing -------------------------------------------------------------------------------------------------

    def _choose(self, worker: _Worker, queue: list) -> int | None:
        """Which queued single task this idle worker takes: one whose stack it holds, else one of the stack with the
        most queued tasks for each worker holding it (a new stack spreads to a second worker once it has many)."""
        keys = {i: self.stack_keys[item.job.id] for i, item in enumerate(queue) if item.job.parallel == 1}
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

    def _dispatch(self, item: _Item, workers: list, inflight: dict) -> None:
        job, key, attempt = item.job, item.key, item.attempt
        d = _Dispatch(job, key, attempt, waiting=len(workers), work=item.work, spread=item.spread)
        if item.work is not None:
            refs = [workers[0].handle.run_tile.remote(job, key, item.work)]
        elif len(workers) == 1:
            refs = [workers[0].handle.run.remote(job, key)]
        else:
            address, port = self.ray.get(workers[0].handle.address.remote(), timeout=self.timeout_s)
            settings = (len(workers), address, port, "nccl" if workers[0].spec.gpus else "gloo", self.timeout_s)
            refs = [w.handle.run_rank.remote(job, key, rank, settings) for rank, w in enumerate(workers)]
        deadline = time.monotonic() + self.task_timeout_s
        for w, ref in zip(workers, refs):
            w.busy, w.deadline = d, deadline
            self._mark_resident(w, job)
            inflight[ref] = w

    def _expand(self, item: _Item) -> list:
        """A spread job's queue items, one a tile (planned here, now); none when it finished without a tile task (its
        image or mask could not be read, or no tile meets its mask)."""
        spread = SpreadJob(item.job, item.key)
        try:
            works = spread.make_plan()
        except Exception as e:  # noqa: BLE001  (the job fails alone, as compute_job's failures do)
            spread.fail(describe_error(e))
            works = []
        if not works:
            spread.closed = True
            self._finish(spread.output(), item.attempt)
        return [_Item(item.job, item.key, item.attempt, work, spread) for work in works]

    def _schedule(self, queue: list, inflight: dict) -> list:
        """Gives idle workers work; returns the queued items that can never run (a parallel job wanting more
        workers than are alive)."""
        idle = [w for w in self.workers if w.busy is None and not w.gone]
        alive = sum(not w.gone for w in self.workers)
        impossible, waiting = [], False
        for item in list(queue):
            if item.job.parallel == 1:
                continue
            if item.job.parallel > alive:
                queue.remove(item)
                impossible.append(item)
                continue
            group = self._group_for(item.job, idle)
            if group is None:
                waiting = True
                break
            queue.remove(item)
            self._dispatch(item, group, inflight)
            idle = [w for w in idle if w not in group]
        if not waiting:
            for w in idle:
                while (i := self._choose(w, queue)) is not None:
                    if queue[i].work is None and spreads(queue[i].job):
                        queue[i:i + 1] = self._expand(queue[i])
                        continue
                    self._dispatch(queue.pop(i), [w], inflight)
                    break
        return impossible

    # --- the loop -------------------------------------------------------------------------------------------------

    def run(self, todo: list[tuple[Job, str]]) -> list[JobResult]:
        from ray.exceptions import GetTimeoutError, RayError, RayTaskError

        queue = [_Item(job, key, 1) for job, key in todo]
        self.stack_keys = {job.id: stack_key(job) for job, _ in todo}
        inflight: dict = {}  # object ref -> worker
        self.inflight = inflight  # what is left in it at the end: tiles of a job already finished, restarts (drain)
        self.results, self.total = [], len(todo)
        self.bar = _Progress(len(todo), self.progress)
        try:
            while queue or self._working(inflight):
                for item in self._schedule(queue, inflight):
                    alive = sum(not w.gone for w in self.workers)
                    self._fail(item, f"parallel is {item.job.parallel} and {alive} Ray worker(s) are alive; a "
                               f"parallel job runs on that many workers at once. Fix: start more workers (--workers, "
                               f"GPUs) or lower parallel.", queue)
                if not inflight:  # every worker gone
                    for item in list(queue):
                        self._fail(item, "every Ray worker died (see the errors above); nothing ran this job", queue)
                    break
                ready, _ = self.ray.wait(list(inflight), num_returns=1,
                                         timeout=min(WAIT_SLICE_S, self.task_timeout_s))
                if not ready:
                    self._expire(inflight, queue)
                    continue
                ref = ready[0]
                w = inflight.pop(ref)
                d, w.busy, w.deadline = w.busy, None, None
                if d == RESTARTING:
                    try:
                        self.pids[id(w)] = self.ray.get(ref, timeout=self.timeout_s)  # back, new process, no cache
                    except (RayError, GetTimeoutError):
                        w.gone = True  # its restarts are used up (or its node is lost)
                    continue
                try:
                    output = self.ray.get(ref, timeout=self.timeout_s)  # ready: it answers at once
                    if output is not None:  # a single job or a tile, or rank 0 of a group
                        d.output = output
                except RayTaskError as e:  # raised inside the worker outside the task (which returns its own)
                    d.output = self._task_error(d, str(e)[:2000])
                except (RayError, GetTimeoutError) as e:  # the worker died under the task
                    d.died = e
                    self._restart(w, inflight)
                self._settle(d, w, queue)
        finally:
            self.bar.close()
        return self.results

    @staticmethod
    def _working(inflight: dict) -> bool:
        """Whether a call in flight still counts: workers restarting, or running tiles of a job already finished
        (another tile of it failed), are not waited for once nothing else is left."""
        return any(isinstance(w.busy, _Dispatch) and not (w.busy.spread is not None and w.busy.spread.closed)
                   for w in inflight.values())

    def _task_error(self, d: _Dispatch, error: str):
        if d.work is not None:
            return TileDone(d.work.tile.index, None, error=error)
        return JobOutput(JobResult(d.job.id, d.key, "error", 0.0, error=error), {})

    def _restart(self, w: _Worker, inflight: dict) -> None:
        """No task for a worker that died until Ray has restarted it: a call while it restarts fails at once, while
        this one (retried until it is back, or its restarts are used up) answers when it is ready."""
        w.resident.clear()
        self.pids.pop(id(w), None)
        self.restarted = True
        w.busy, w.deadline = RESTARTING, time.monotonic() + self.timeout_s
        inflight[w.handle.pid.options(max_task_retries=-1).remote()] = w

    def _settle(self, d: _Dispatch, w: _Worker, queue: list) -> None:
        """One of a task's workers has answered (or died, or was given up): once all have, its job goes on."""
        d.waiting -= 1
        if d.waiting or (d.spread is not None and d.spread.closed):
            return  # a group still running, or a tile of a job already finished (another tile of it failed)
        item = _Item(d.job, d.key, d.attempt, d.work, d.spread)
        if d.timed_out:
            return self._fail(item, f"ran past the task timeout ({self.task_timeout_s:g} s) on a Ray worker, which "
                                    "was restarted; it is not tried again", queue)
        if d.died is not None:  # the task goes back to the queue, to the first free worker(s)
            if d.attempt < self.max_attempts:
                queue.insert(0, item._replace(attempt=d.attempt + 1))
                if d.spread is not None:
                    d.spread.attempts = max(d.spread.attempts, d.attempt + 1)
            else:
                self._fail(item, f"{d.attempt} times a Ray worker died running this job (the last: "
                                 f"{type(d.died).__name__}); it is not tried again", queue)
            return
        if d.spread is not None:
            d.spread.add(d.output)
            if d.spread.error is not None or d.spread.complete():
                self._close(d.spread, queue)
            return
        d.output.result.attempts = d.attempt
        self._finish(d.output, d.attempt)

    def _close(self, spread: SpreadJob, queue: list) -> None:
        """A spread job's last tile is back, or one failed: its queued tiles dropped (those still running are
        dropped when they answer), the job blended here and finished, once."""
        queue[:] = [item for item in queue if item.spread is not spread]
        spread.closed = True
        self._finish(spread.output(), spread.attempts)

    def _fail(self, item: _Item, error: str, queue: list) -> None:
        if item.spread is not None:
            if not item.spread.closed:
                item.spread.fail(error if item.work is None else f"tile {item.work.tile.index}: {error}")
                self._close(item.spread, queue)
            return
        self._finish(JobOutput(JobResult(item.job.id, item.key, "error", 0.0, error=error), {}), item.attempt)

    def _expire(self, inflight: dict, queue: list) -> None:
        """Calls past their deadline: a task's workers are killed (Ray restarts them, their calls then fail and the
        job fails as timed out); a call that still has not answered a grace period after that, or a restart that did
        not come back, is given up with its worker."""
        now = time.monotonic()
        for ref, w in list(inflight.items()):
            if w.deadline is None or now < w.deadline:
                continue
            if w.busy == RESTARTING or (isinstance(w.busy, _Dispatch) and w.busy.timed_out):
                inflight.pop(ref)
                d, w.busy, w.deadline, w.gone = w.busy, None, None, True
                if d != RESTARTING:
                    self._settle(d, w, queue)
                continue
            d = w.busy
            d.timed_out = True
            self.restarted = True  # its workers are killed below
            for other in self.workers:
                if other.busy is d:
                    other.deadline = now + KILL_GRACE_S
                    try:
                        self.ray.kill(other.handle, no_restart=False)
                    except Exception:  # noqa: BLE001  (already gone)
                        pass

    def _finish(self, output: JobOutput, attempt: int = 1) -> JobResult:
        output.result.attempts = attempt
        result = output.write(self.out_dir)
        append_line(self.log, result.line())
        self.results.append(result)
        self.bar.update(result)
        if self.on_result is not None:
            self.on_result(result, len(self.results), self.total)
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
                     connect_timeout: float = CONNECT_TIMEOUT_S, check_cancel=None,
                     task_timeout_s: float = TASK_TIMEOUT_S, keep_workers_s: float = 0.0) -> dict:
    """Every job not finished before, on Ray workers (module docstring); the same summary as runner.run_batch.
    `address`: "local" (a cluster on this machine, stopped afterwards) or a cluster's address; `workers`: CPU
    workers per node without GPUs. `started(batch)` is called once the workers are up (tests use it to find the
    workers' processes); `runtime_env`, `connect_timeout` (seconds), `check_cancel`: for connect; `task_timeout_s`:
    how long one task (a job, or one tile of a spread job) may run before its worker is taken as hung.
    `keep_workers_s`: on a connection this process made before the call, the workers (and their resident stacks)
    stay up that many seconds after the batch for the next one (module docstring: kept workers); 0, the default,
    stops them when the batch ends. Workers an earlier batch kept are reused when the plan matches, whatever this
    batch keeps."""
    start = time.perf_counter()
    keep_s = check_keep_workers(keep_workers_s)
    ray = import_ray()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    todo, skipped = pending_jobs(jobs, out_dir)
    if not todo:
        return summarise(jobs, [], skipped, out_dir, start)
    ours = connect(ray, address, workers, runtime_env, timeout_s=connect_timeout, check_cancel=check_cancel)
    batch, kept = None, False
    try:
        specs = plan_workers(ray.nodes(), workers, device)
        plan = (tuple(specs), max_resident)
        timeout_s = 600.0
        reuse = None if ours else _take_kept(ray, plan, min(timeout_s, KEPT_ANSWER_S))
        if reuse is None:
            release_kept_workers()  # kept on a connection that has ended (Ray stopped them with it), if any
        batch = RayBatch(ray, specs, out_dir, max_resident=max_resident, progress=progress, on_result=on_result,
                         max_attempts=max_attempts, timeout_s=timeout_s, task_timeout_s=task_timeout_s, kept=reuse)
        batch.start()
        if started is not None:
            started(batch)
        results = batch.run(todo)
        if keep_s > 0 and not ours:
            batch.drain(KEPT_ANSWER_S)
        if keep_s > 0 and not ours and batch.keepable():
            _keep(ray, batch, plan, keep_s)
            kept = True
    finally:
        if batch is not None and not kept:
            batch.shutdown()
        if ours:
            ray.shutdown()
    return summarise(jobs, results, skipped, out_dir, start)
