"""Ranks as Ray actors: `run_on_ray_ranks(fn, world_size, *args)` calls `fn(*args)` on `world_size` actors joined
in one process group (nccl when each has a GPU, gloo on CPUs) and returns rank 0's result; the same rank functions
as launch.run_on_ranks, which starts local processes instead.

The actors are placed by a placement group (one bundle a rank, packed onto as few nodes as fit), so the ranks can
span nodes; rank 0's node address and a free port there are the group's rendezvous. An input error raised on a rank
(FillScopeInputError) is raised again here as itself.
"""

from __future__ import annotations

from ..errors import FillScopeInputError
from .launch import free_port, process_group


def rank_address() -> tuple[str, int]:
    """This node's address as Ray knows it, and a port free on it now: a rendezvous for rank 0."""
    import ray

    return ray.util.get_node_ip_address(), free_port()


def run_rank(rank: int, settings: tuple, fn, args):
    """`fn(*args)` as `rank` of the group `settings` (world_size, address, port, backend, timeout_s) describe:
    ("ok", rank 0's result, else None), ("input-error", the error's fields) or ("error", any other exception).
    Another error comes back as a value, not raised: when one rank refuses an input and leaves the group, a rank
    still connecting fails with a lost peer (gloo's "Connection closed by peer"), and the refusal must win over that
    consequence whatever the order the ranks finish in (raise_rank_errors)."""
    world_size, address, port, backend, timeout_s = settings
    try:
        with process_group(rank, world_size, address, port, backend, timeout_s):
            result = fn(*args)
    except FillScopeInputError as e:
        return ("input-error", {"input_name": e.input_name, "problem": e.problem, "fix": e.fix})
    except Exception as e:  # noqa: BLE001 - handed back to the driver, which raises it unless a rank refused an input
        return ("error", e)
    return ("ok", result if rank == 0 else None)


class RankActor:
    """One rank (a Ray actor's class, wrapped by ray.remote when a group starts)."""

    def __init__(self, threads: int):
        import torch

        torch.set_num_threads(threads)

    def address(self) -> tuple[str, int]:
        return rank_address()

    def run(self, rank: int, settings: tuple, fn, args):
        return run_rank(rank, settings, fn, args)


def raise_rank_errors(outcomes: list) -> object:
    """Rank 0's result; or the first rank's input error raised again as itself, before any rank's other error (a
    peer lost because that rank left); or the first other error."""
    for status, value in outcomes:
        if status == "input-error":
            raise FillScopeInputError(**value)
    for status, value in outcomes:
        if status == "error":
            raise value
    return outcomes[0][1]


def run_on_ray_ranks(fn, world_size: int, *args, gpus: bool | None = None, threads: int = 1,
                     timeout_s: float = 600.0):
    """`fn(*args)` on `world_size` Ray actors in one process group; rank 0's result. Ray must be initialised
    (ray.init). gpus: one GPU a rank and nccl (None: when the cluster has a GPU for every rank), else gloo and
    `threads` CPU threads a rank."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise FillScopeInputError("world_size", f"is {world_size!r}.", "use a whole number of ranks, 1 or more.")
    have = ray.cluster_resources()
    if gpus is None:
        gpus = have.get("GPU", 0) >= world_size
    need, kind = (world_size, "GPU") if gpus else (world_size * threads, "CPU")
    if have.get(kind, 0) < need:
        raise FillScopeInputError("parallel", f"is {world_size}: {need:g} {kind}(s) are needed and the Ray cluster has "
                                  f"{have.get(kind, 0):g}.", f"use a degree the cluster can hold, or add {kind}s.")
    bundle = {"GPU": 1, "CPU": 0} if gpus else {"CPU": threads}
    group = placement_group([dict(bundle) for _ in range(world_size)], strategy="PACK")
    actors = []
    try:
        ray.get(group.ready(), timeout=timeout_s)
        remote = ray.remote(RankActor)
        actors = [remote.options(num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0),
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote(threads)
                  for i in range(world_size)]
        address, port = ray.get(actors[0].address.remote(), timeout=timeout_s)
        settings = (world_size, address, port, "nccl" if gpus else "gloo", float(timeout_s))
        outcomes = ray.get([a.run.remote(rank, settings, fn, args) for rank, a in enumerate(actors)])
        return raise_rank_errors(outcomes)
    finally:
        for a in actors:
            ray.kill(a)
        remove_placement_group(group)
