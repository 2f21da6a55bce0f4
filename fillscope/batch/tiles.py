"""A tiled job's tiles spread over Ray workers (issue 23): the driver plans, the workers run tiles, the driver blends.

A job whose `tiles` mode is independent (`spreads`) is not sent whole to one worker: when a worker is free for it,
the driver reads its image and mask and plans it (`SpreadJob.plan`: tiled.independent.plan_independent, the whole
image's mask prepared once), each kept tile becomes one task any worker may take (`tile_on_worker`: the job's
stack from the worker's ModelCache, tiled.independent.run_tile), and when every tile is back the driver blends and
pastes back (`SpreadJob.output`: tiled.independent.blend_planned) and writes the job's files as the in-process batch
does (runner.tiled_output): the same PNG, the same shape record (the tiles' tensors in tile order), the tile records
with the worker that ran each (Poisson blending of the seams, `poisson`, done by the driver too). Mode shared (one
sampler over the whole latent) runs whole on one worker (runner.compute_job), as in this process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..tiled.independent import TileOutput, TilePlan, blend_planned, check_spread, plan_independent, run_tile
from .images import load_image, load_mask
from .manifest import Job
from .runner import (JobOutput, JobResult, ModelCache, describe_error, family_options, job_record,
                     tile_mask_options, tiled_output)


def spreads(job: Job) -> bool:
    """Whether a job's tiles run as separate tasks on Ray: mode independent, and no problem of its manifest line
    (that one fails on the driver without running)."""
    return job.tiles is not None and job.tiles["mode"] == "independent" and job.error is None


@dataclass
class TileDone:
    """One tile's run on a worker: its TileOutput (None when it failed), the tensors it observed (the shape
    record's entries, "tile {index} ..."), the seconds its stack took to load there (0: resident), and its error."""

    index: int
    output: TileOutput | None
    tensors: list = field(default_factory=list)
    load_s: float = 0.0
    error: str | None = None


def tile_on_worker(cache: ModelCache, job: Job, work, worker: str) -> TileDone:
    """A worker's side: the job's stack (resident after the first tile), its family options (reference read here,
    as compute_job reads it), one tile run; its image returned on the CPU. A failure is returned, not raised."""
    index = work.tile.index
    try:
        stack, load_s = cache.stack(job)
        rec = job_record(job)
        out = run_tile(job.pipeline, stack, job.prompt, work, seed=job.seed, steps=job.steps, observe=rec.observe,
                       **family_options(job))
        out.image = out.image.cpu()
        out.record["worker"] = worker
        return TileDone(index, out, rec.record["tensors"], load_s)
    except Exception as e:  # noqa: BLE001  (the tile's job fails alone)
        return TileDone(index, None, error=describe_error(e))


class SpreadJob:
    """The driver's side of one spread job: its plan, the tiles back so far, and its first error."""

    def __init__(self, job: Job, key: str):
        self.job, self.key = job, key
        self.start = time.perf_counter()
        self.rec = job_record(job)
        self.plan: TilePlan | None = None
        self.done: dict[int, TileDone] = {}
        self.error: str | None = None
        self.attempts = 1  # the most any of its tiles took (a worker died under it: it ran again)
        self.closed = False  # its output was made (the driver's): later tiles of it are dropped

    def make_plan(self) -> list:
        """The job's image and mask read and planned here; its TileWorks (none when no tile meets the mask).
        Raises what reading or planning raises (a missing file, a bad size): the job's error."""
        job = self.job
        image, _ = load_image(job.image)
        mask = load_mask(job.mask, job.image)
        self.rec.tensor("image", image, "input")
        self.rec.tensor("mask", mask, "input")
        options = tile_mask_options(job)
        named = {k: v for k, v in job.options.items() if k in ("soft_mask", "size_mode") and v != "pad"}
        check_spread(job.tiles["tile"], job.tiles["overlap"], options, named)
        self.plan = plan_independent(image, mask, tile=job.tiles["tile"], overlap=job.tiles["overlap"],
                                     options=options)
        return list(self.plan.works)

    def complete(self) -> bool:
        """Every planned tile is back."""
        return len(self.done) == len(self.plan.works)

    def add(self, done: TileDone) -> None:
        if done.error is not None and self.error is None:
            self.error = f"tile {done.index}: {done.error}"
        self.done[done.index] = done

    def fail(self, error: str) -> None:
        if self.error is None:
            self.error = error

    def output(self) -> JobOutput:
        """The job's files (blended and pasted back here), or its error."""
        seconds = time.perf_counter() - self.start
        if self.error is not None:
            return JobOutput(JobResult(self.job.id, self.key, "error", seconds, error=self.error), {})
        try:
            outputs = [self.done[t.index].output for t in self.plan.tiles]
            for t in self.plan.tiles:  # the tiles' tensors in tile order, as one process records them
                self.rec.record["tensors"].extend(self.done[t.index].tensors)
            loads = [d.load_s for d in self.done.values() if d.load_s]
            workers = {d.output.record["worker"] for d in self.done.values()}
            self.rec.fact("stack", "not loaded (no tile meets the mask)" if not workers else
                          f"on {len(workers)} Ray worker(s)" + (f", loaded by {len(loads)} of them ({max(loads):.2f} "
                                                                f"s at most)" if loads else ", resident"))
            result = blend_planned(self.plan, outputs, poisson=self.job.tiles["poisson"])
            return tiled_output(self.job, self.key, self.rec, result, self.start)
        except Exception as e:  # noqa: BLE001
            return JobOutput(JobResult(self.job.id, self.key, "error", seconds, error=describe_error(e)), {})


__all__ = ["SpreadJob", "TileDone", "spreads", "tile_on_worker"]
