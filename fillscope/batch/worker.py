"""The Ray worker of a batch (cluster.py): an actor holding a ModelCache, so a worker keeps its stacks resident
between jobs; it computes a job, a tile of a spread job or a rank of a parallel job and returns the files as bytes
(the driver writes them)."""

from __future__ import annotations

import os

from .manifest import Job
from .runner import JobOutput, ModelCache
from .tiles import TileDone, tile_on_worker

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

    def run_tile(self, job: Job, key: str, work) -> TileDone:
        """One tile of a spread job (tiles.tile_on_worker) on this worker's resident stack."""
        return tile_on_worker(self.cache, job, work, self.where())

    def run_rank(self, job: Job, key: str, rank: int, settings: tuple) -> JobOutput | None:
        """The job as `rank` of a group of workers (ray_ranks.run_rank), on this worker's resident stack: rank 0's
        output, None on the other ranks."""
        from functools import partial

        from ..parallel.ray_ranks import raise_rank_errors, run_rank
        from .runner import compute_job

        # compute_job returns a job's failure as its error; what run_rank hands back besides "ok" (the group could
        # not form: a lost peer) is raised here, as a failed task the driver reruns or reports
        output = raise_rank_errors([run_rank(rank, settings, partial(compute_job, job, self.cache, key=key,
                                                                      in_group=True), ())])
        if rank != 0:
            return None
        output.result.worker = f"{self.where()} (rank 0 of {settings[0]})"
        return output
