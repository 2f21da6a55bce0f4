"""`python -m fillscope batch MANIFEST --out DIR --ray ADDRESS` against addresses where no Ray cluster answers
(fillscope/batch/reach.py): a port nothing listens on, a host name that does not resolve, a port that accepts TCP and
never answers. Each exits 2 within --connect-timeout with one message naming the address and what to check, no
traceback, nothing written. Ray never starts (the address is refused before ray.init); its files would go to the
module's temporary HOME / RAY_TMPDIR / TMPDIR (ray_tmp_env) all the same."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_jobs import closed_port

pytest.importorskip("ray", reason="ray is not installed (pip install 'fillscope[cluster]')")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def ray_home(ray_tmp_env):
    return ray_tmp_env


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    """One job whose files are never read (the batch stops at the cluster's address)."""
    root = tmp_path_factory.mktemp("hostile_cluster")
    (root / "model").mkdir()
    job = {"id": "j0", "family": "flux-fill", "models": "model", "image": "image.png", "mask": "mask.png",
           "prompt": "a chair", "seed": 0, "steps": 1, "dtype": "fp32"}
    path = root / "manifest.jsonl"
    path.write_text(json.dumps(job) + "\n")
    return path


def batch(manifest: Path, out: Path, address: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    command = [sys.executable, "-m", "fillscope", "batch", str(manifest), "--out", str(out), "--no-progress",
               "--ray", address, *extra]
    start = time.monotonic()
    res = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    return res, time.monotonic() - start


def refused(res: subprocess.CompletedProcess, out: Path, address: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert f"[FillScope] input '--ray': could not join the Ray cluster at '{address}'" in res.stderr, res.stderr
    assert " Fix: check that `ray start --head` runs on that machine" in res.stderr, res.stderr
    assert "firewall" in res.stderr and "Ray version" in res.stderr, res.stderr
    assert not (out / "batch.jsonl").exists()
    return res.stderr


def test_a_port_nothing_listens_on_exits_2_at_once(manifest, tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    res, took = batch(manifest, tmp_path / "out", address, "--connect-timeout", "2")
    assert "connection refused" in refused(res, tmp_path / "out", address)
    assert took < 30, took  # the interpreter's start and imports; no wait for the cluster


def test_a_host_name_that_does_not_resolve_exits_2(manifest, tmp_path):
    address = "no-such-host.invalid:6379"
    res, _ = batch(manifest, tmp_path / "out", address, "--connect-timeout", "2")
    stderr = refused(res, tmp_path / "out", address)
    assert "the host name 'no-such-host.invalid'" in stderr and ("does not resolve" in stderr
                                                                  or "did not resolve" in stderr), stderr


def test_a_port_that_never_answers_exits_2_after_the_connect_timeout(manifest, tmp_path, silent_port):
    port, accepted = silent_port
    address = f"127.0.0.1:{port}"
    res, took = batch(manifest, tmp_path / "out", address, "--connect-timeout", "2")
    stderr = refused(res, tmp_path / "out", address)
    assert "did not answer as a Ray cluster" in stderr and "within the connect timeout of 2 s" in stderr, stderr
    assert accepted and 2 <= took < 40, (len(accepted), took)


@pytest.mark.parametrize("value", ["0", "601", "2.5", "x"])
def test_a_connect_timeout_outside_its_range_is_refused(manifest, tmp_path, value):
    res, _ = batch(manifest, tmp_path / "out", "127.0.0.1:1", "--connect-timeout", value)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "argument --connect-timeout" in res.stderr and "1 to 600" in res.stderr, res.stderr
