"""Local ranks for a parallel run: `run_on_ranks(fn, world_size, *args)` starts `world_size` processes on this
machine (torch.multiprocessing spawn), joins them in a gloo process group (MASTER_ADDR 127.0.0.1, a free port)
and calls `fn(*args)` on each; rank 0's result comes back.

The rank function knows nothing of how its rank started: it finds the group initialised and asks torch.distributed
for its rank. A Ray actor group (ray_ranks.run_on_ray_ranks) starts the group its own way (`process_group`) and
calls the same function.

`fn` and `args` travel to the ranks by pickle (module-level functions, functools.partial of them; tensors through
shared memory): fine for tiny models and conditions, not for production weights, which a rank loads from its own
source. Each rank's HOME and TMPDIR point into a temporary folder removed afterwards; rank 0's result comes back as
a file there (torch.save). An input error raised on a rank (FillScopeInputError) is raised again here as itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

from ..errors import FillScopeInputError

RESULT = "result.pt"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS says, else the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_threads(world_size: int) -> int:
    """The CPU threads each rank uses: this process's cores shared out (at least 1)."""
    return max(1, usable_cores() // world_size)


def run_on_ranks(fn, world_size: int, *args, timeout_s: float = 600.0, threads: int | None = None):
    """`fn(*args)` on `world_size` local ranks in one gloo process group; returns rank 0's result. A rank's
    exception fails the run (the other ranks are stopped); `timeout_s` bounds each collective."""
    import torch
    import torch.multiprocessing as mp

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise FillScopeInputError("world_size", f"is {world_size!r}.", "use a whole number of ranks, 1 or more.")
    folder = Path(tempfile.mkdtemp(prefix="fillscope-ranks-"))
    try:
        settings = (world_size, free_port(), str(folder), threads or default_threads(world_size), float(timeout_s))
        try:
            mp.spawn(_rank_main, args=(settings, fn, args), nprocs=world_size, join=True)
        except mp.ProcessRaisedException as e:
            errors = sorted(folder.glob("input-error-*.pt"))
            if errors:
                raise FillScopeInputError(**torch.load(errors[0], weights_only=True)) from e
            raise
        return torch.load(folder / RESULT, weights_only=False)  # written by rank 0 of this run, just now
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def in_turn(*calls) -> list:
    """A rank function that makes several calls one after the other in the same group (zero-argument callables,
    functools.partial of module-level functions): their results, in order. One group start for several checks."""
    return [call() for call in calls]


@contextlib.contextmanager
def process_group(rank: int, world_size: int, master_addr: str, port: int, backend: str = "gloo",
                  timeout_s: float = 600.0):
    """This process as `rank` of a `world_size` group whose rank 0 listens on master_addr:port, for the block; every
    rank waits for the others at the end before the group is torn down."""
    from datetime import timedelta

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s))
    try:
        yield
        # every rank's work (diffusers' functional collectives are asynchronous) done before any rank tears the
        # group down: a rank destroying it while another still waits on it aborted ("terminate called without an
        # active exception") in a loaded CI run
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _rank_main(rank: int, settings: tuple, fn, args):
    """One rank: its environment, the group, `fn(*args)`, rank 0's result written, the group torn down."""
    import torch

    world_size, port, folder, threads, timeout_s = settings
    folder = Path(folder)
    for name in ("home", "tmp"):
        (folder / name).mkdir(exist_ok=True)
    os.environ.update(HOME=str(folder / "home"), TMPDIR=str(folder / "tmp"))
    tempfile.tempdir = None  # TMPDIR is read again
    torch.set_num_threads(threads)
    try:
        with process_group(rank, world_size, "127.0.0.1", port, "gloo", timeout_s):
            result = fn(*args)
            if rank == 0:
                partial = folder / (RESULT + ".part")
                torch.save(result, partial)
                partial.replace(folder / RESULT)
    except FillScopeInputError as e:
        torch.save({"input_name": e.input_name, "problem": e.problem, "fix": e.fix},
                   folder / f"input-error-{rank}.pt")
        raise
