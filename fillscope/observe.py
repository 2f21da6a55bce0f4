"""How callers watch a pipeline: the `observe(name, tensor)` callback every stage takes (the shape records and the
trace listen through it) and per-stage wall times."""

import sys
import time
from contextlib import contextmanager


def observer_or_noop(observe):
    return observe if observe is not None else (lambda name, tensor: None)


@contextmanager
def timed(timings: dict | None, name: str):
    """Adds the wall time of the block to timings[name] when a dict is given. With CUDA in use the device is
    synchronised at both ends, so the figure is what the stage ran, not what the host queued (only callers
    that ask for timings pay for the syncs)."""
    if timings is None:
        yield
        return
    _sync_cuda()
    start = time.perf_counter()
    try:
        yield
    finally:
        _sync_cuda()
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def _sync_cuda() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
