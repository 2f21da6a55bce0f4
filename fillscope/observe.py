"""How callers watch and steer a pipeline's stages: the `observe(name, tensor)` callback every stage takes (the
shape records and the trace listen through it), per-stage wall times, and a `place` hook that puts a stage's
components where they must be while it runs (a memory policy)."""

import sys
import time
from contextlib import contextmanager, nullcontext


def observer_or_noop(observe):
    return observe if observe is not None else (lambda name, tensor: None)


def observe_step(observe, i: int, denoiser_output, latent) -> None:
    """Step i's denoiser output (the velocity the step takes, after CFG) and the latent after it, as
    `step[i+1].denoiser` / `step[i+1].latent`, for observers that ask for every step (`per_step = True`: a
    comparison); the shape records see step 1's tensors under their own names and skip these."""
    if getattr(observe, "per_step", False):
        observe(f"step[{i + 1}].denoiser", denoiser_output)
        observe(f"step[{i + 1}].latent", latent)


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


@contextmanager
def stage(name: str, components: list, *, timings: dict | None = None, place=None):
    """One stage of a pipeline's run: `place(components)` (a context manager, e.g. placement.placer's) around
    it, and its wall time, placement included, added to timings[name]."""
    with timed(timings, name), (place(components) if place is not None else nullcontext()):
        yield
