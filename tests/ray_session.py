"""One local Ray for the tests of a module that need a cluster but not one of their own (tests/test_batch_ray.py):
`connect_local()` starts it the first time (2 CPUs: two CPU workers of run_batch_on_ray) and returns the `ray`
module connected to it; later calls find it running and pay nothing. `disconnect()` stops it, for a test that must
start its own cluster (run_batch_on_ray(address="local") starts one only when this process has none, and stops it
afterwards) or join another one.

Ray's files go where HOME, RAY_TMPDIR and TMPDIR point: call these inside batch_jobs.ray_tmp_env (the conftest
fixture ray_tmp_env), whose end stops a Ray still running."""

from __future__ import annotations

LOCAL_CPUS = 2
OBJECT_STORE_BYTES = 512 * 1024**2  # fillscope.batch.cluster.LOCAL_OBJECT_STORE_BYTES: results are PNG bytes


def connect_local(num_cpus: int = LOCAL_CPUS):
    """The `ray` module connected to a local cluster of `num_cpus` CPUs: the one this process runs, else a new one."""
    import ray

    if ray.is_initialized():
        have = ray.cluster_resources().get("CPU", 0)
        if have == num_cpus and len(ray.nodes()) == 1:
            return ray
        ray.shutdown()  # another topology (a test's own cluster joined): start ours
    ray.init(num_cpus=num_cpus, object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False,
             logging_level="warning", log_to_driver=False)
    return ray


def disconnect() -> None:
    """This process connected to no Ray (the local one stopped if it ran)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def process_running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie has exited): how a test sees a Ray worker or actor gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
