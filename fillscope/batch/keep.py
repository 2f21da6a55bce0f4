"""Workers kept between batches (`keep_workers_s` > 0, off by default): a caller that stays connected to a
cluster (it called ray.init itself: a script or a server queueing several batches on one connection) may keep a
batch's workers, with their resident stacks, for the next batch this process runs on that connection with the same plan (nodes, GPUs,
CPUs, threads, max_resident): it starts no worker and loads no stack it already holds. Kept workers hold their
GPU or CPU reservation and their models' memory, so the keep is bounded: they are stopped `keep_workers_s` after
the batch that kept them (a timer; at most KEEP_WORKERS_MAX_S), by the next batch that does not keep them (the
default: it reuses them, then stops them), by a batch with another plan, by `release_kept_workers()`, and with the
connection (Ray stops a driver's actors when it disconnects). A worker that died, was restarted, timed out or was
still running a task when its batch ended is never kept (then none of the batch's workers is), and a kept worker is
asked its process id before it is reused: one that does not answer as the same process within KEPT_ANSWER_S (dead,
restarting, restarted) makes the batch start new workers (the kept ones stopped). A cluster a call connects or
starts itself (`address` given while this process has no Ray) is disconnected or stopped at the call's end, its
workers with it: nothing is kept then.

The kept workers are `cluster.RayBatch` workers (its `_Worker`s); this module keeps, hands over and stops them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..errors import FillScopeInputError

KEEP_WORKERS_MAX_S = 3600.0  # the longest a batch's workers may be kept idle for the next batch (keep_workers_s)
KEPT_ANSWER_S = 60.0  # how long a kept worker may take to answer before the next batch starts new workers instead,
# and how long a batch that keeps its workers waits for their stray calls (tiles of a job already failed) to end


@dataclass
class _KeptWorkers:
    """A finished batch's workers, idle, kept for the next batch on the same connection and plan."""

    connection: tuple  # _connection(ray) when they were kept: the driver's connection that owns them
    plan: tuple  # (the WorkerSpecs, max_resident) they were started for
    workers: list  # _Worker, with the driver's mirror of their resident stacks
    pids: list  # each worker's process id
    timer: threading.Timer | None = None


_kept: _KeptWorkers | None = None
_kept_lock = threading.Lock()


def _connection(ray) -> tuple:
    """This process's connection to its cluster: the cluster (GCS address, session) and this driver's worker id,
    new at every ray.init."""
    ctx = ray.get_runtime_context()
    return ctx.gcs_address, ctx.get_session_name(), ctx.get_worker_id()


def _stop_workers(ray, workers: list) -> None:
    for w in workers:
        try:
            ray.kill(w.handle)
        except Exception:  # noqa: BLE001  (already gone, or the connection with it)
            pass


def _release(kept: _KeptWorkers | None) -> None:
    """The kept workers stopped (when they are still the ones kept, and their connection is still this process's)."""
    global _kept
    with _kept_lock:
        if kept is None or _kept is not kept:
            return
        _kept = None
    if kept.timer is not None:
        kept.timer.cancel()
    import ray

    try:
        same = ray.is_initialized() and _connection(ray) == kept.connection
    except Exception:  # noqa: BLE001  (disconnected meanwhile: Ray stopped its actors with the connection)
        same = False
    if same:
        _stop_workers(ray, kept.workers)


def release_kept_workers() -> None:
    """Stops the workers a batch kept (run_batch_on_ray's keep_workers_s) now, if any."""
    _release(_kept)


def kept_worker_pids() -> list[int]:
    """The process ids of the workers kept for the next batch ([] when none are kept)."""
    kept = _kept
    return list(kept.pids) if kept is not None else []


def _take_kept(ray, plan: tuple, timeout_s: float) -> _KeptWorkers | None:
    """The kept workers for a batch of `plan` on this connection, each alive as the same process it was kept as
    (asked within `timeout_s`); else None, and any kept workers stopped (another plan or connection, or one of them
    dead, restarting or restarted)."""
    global _kept
    with _kept_lock:
        kept, _kept = _kept, None
    if kept is None:
        return None
    if kept.timer is not None:
        kept.timer.cancel()
    usable = kept.plan == plan and _connection(ray) == kept.connection
    if usable:
        try:
            pids = ray.get([w.handle.pid.remote() for w in kept.workers], timeout=timeout_s)
            usable = list(pids) == kept.pids
        except Exception:  # noqa: BLE001  (dead, restarting or not answering: started afresh)
            usable = False
    if usable:
        return kept
    if _connection(ray) == kept.connection:
        _stop_workers(ray, kept.workers)
    return None


def _keep(ray, batch, plan: tuple, keep_s: float) -> None:
    """The batch's workers kept for the next batch, stopped after `keep_s` seconds if none takes them."""
    global _kept
    kept = _KeptWorkers(_connection(ray), plan, batch.workers, [batch.pids[id(w)] for w in batch.workers])
    for w in kept.workers:
        w.busy, w.deadline = None, None
    kept.timer = threading.Timer(keep_s, _release, args=(kept,))
    kept.timer.daemon = True
    with _kept_lock:
        previous, _kept = _kept, kept
    _release(previous)  # none expected: this batch took them
    kept.timer.start()


def check_keep_workers(keep_workers_s) -> float:
    if isinstance(keep_workers_s, bool) or not isinstance(keep_workers_s, (int, float)) \
            or not 0 <= keep_workers_s <= KEEP_WORKERS_MAX_S:
        raise FillScopeInputError("keep_workers_s", f"is {keep_workers_s!r}.",
                                  f"give seconds from 0 (stop the workers after the batch) to {KEEP_WORKERS_MAX_S:g}.")
    return float(keep_workers_s)
