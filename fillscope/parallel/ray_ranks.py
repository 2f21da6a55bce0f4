"""Ranks as Ray actors: `run_on_ray_ranks(fn, world_size, *args)` calls `fn(*args)` on `world_size` actors joined
in one process group (nccl when each has a GPU, gloo on CPUs) and returns rank 0's result; the same rank functions
as launch.run_on_ranks, which starts local processes instead.

The actors are placed by a placement group (one bundle a rank, packed onto as few nodes as fit), so the ranks can
span nodes; rank 0's node address and a free port there are the group's rendezvous. An input error raised on a rank
(FillScopeInputError) is raised again here as itself.

`RayRanks(world_size)` keeps one set of actors for several runs (`with RayRanks(2) as ranks: ranks.run(fn, ...)`,
then another `ranks.run`): each run forms a new process group on the same processes (a new rendezvous port), so
the actors' start (an interpreter importing torch, and whatever the first run's functions import) is paid once; a
run whose rank refused an input or failed leaves the actors usable (every rank tears its group down). A run whose
rendezvous does not answer within `timeout_s`, or whose actor died, stops the actors: the next `run` raises. `close()` (the
block's end) stops them. run_on_ray_ranks is one run on a RayRanks of its own.
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


class RayRanks:
    """`world_size` rank actors in a placement group, kept for several runs (module docstring). Ray must be
    initialised (ray.init). gpus: one GPU a rank and nccl (None: when the cluster has a GPU for every rank), else
    gloo and `threads` CPU threads a rank; `timeout_s` bounds the group's placement, each rendezvous, each
    collective (not a run: a rank function may compute for longer)."""

    def __init__(self, world_size: int, *, gpus: bool | None = None, threads: int = 1, timeout_s: float = 600.0):
        import ray
        from ray.util.placement_group import placement_group

        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise FillScopeInputError("world_size", f"is {world_size!r}.", "use a whole number of ranks, 1 or more.")
        have = ray.cluster_resources()
        if gpus is None:
            gpus = have.get("GPU", 0) >= world_size
        need, kind = (world_size, "GPU") if gpus else (world_size * threads, "CPU")
        if have.get(kind, 0) < need:
            raise FillScopeInputError("parallel", f"is {world_size}: {need:g} {kind}(s) are needed and the Ray cluster "
                                      f"has {have.get(kind, 0):g}.", f"use a degree the cluster can hold, or add {kind}s.")
        self.world_size, self.gpus, self.threads, self.timeout_s = world_size, gpus, threads, float(timeout_s)
        self.bundle = {"GPU": 1, "CPU": 0} if gpus else {"CPU": threads}
        self.group = placement_group([dict(self.bundle) for _ in range(world_size)], strategy="PACK")
        self.actors: list = []
        self.closed = False

    def _start(self) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        try:
            ray.get(self.group.ready(), timeout=self.timeout_s)
            remote = ray.remote(RankActor)
            self.actors = [remote.options(num_cpus=self.bundle["CPU"], num_gpus=self.bundle.get("GPU", 0),
                                          scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i))
                           .remote(self.threads) for i in range(self.world_size)]
        except BaseException:
            self.close()
            raise

    def run(self, fn, *args):
        """`fn(*args)` on every rank in a new process group of the kept actors; rank 0's result (or a rank's error
        raised again: raise_rank_errors)."""
        import ray

        if self.closed:
            raise RuntimeError("these Ray ranks were closed (a run failed or timed out, or close() was called)")
        if not self.actors:
            self._start()
        try:
            address, port = ray.get(self.actors[0].address.remote(), timeout=self.timeout_s)
            settings = (self.world_size, address, port, "nccl" if self.gpus else "gloo", self.timeout_s)
            outcomes = ray.get([a.run.remote(rank, settings, fn, args) for rank, a in enumerate(self.actors)])
        except BaseException:
            self.close()  # an actor died or did not answer: none of them is trusted again
            raise
        return raise_rank_errors(outcomes)

    def close(self) -> None:
        """The actors stopped and the placement group removed (again: nothing)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        if self.closed:
            return
        self.closed = True
        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001  (already gone)
                pass
        self.actors = []
        try:
            remove_placement_group(self.group)
        except Exception:  # noqa: BLE001  (Ray disconnected meanwhile: removed with the connection)
            pass

    def __enter__(self) -> RayRanks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_on_ray_ranks(fn, world_size: int, *args, gpus: bool | None = None, threads: int = 1,
                     timeout_s: float = 600.0):
    """`fn(*args)` on `world_size` Ray actors in one process group; rank 0's result. Ray must be initialised
    (ray.init). gpus: one GPU a rank and nccl (None: when the cluster has a GPU for every rank), else gloo and
    `threads` CPU threads a rank. One run on a RayRanks of its own (started and stopped here)."""
    with RayRanks(world_size, gpus=gpus, threads=threads, timeout_s=timeout_s) as ranks:
        return ranks.run(fn, *args)
