"""Shared by tests/test_batch_ray.py and bench/bench_batch_ray.py: the batch manifest of tiny fp32 models, and
Ray's files kept in a temporary folder."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

H, W = 48, 64
RAY_ENV = ("HOME", "RAY_TMPDIR", "TMPDIR", "RAY_gcs_server_port_wait_time_s", "RAY_AUTH_MODE")


def build_batch_manifest(root: Path, steps: int = 2, counts: tuple[int, int, int] = (8, 6, 6)) -> Path:
    """root/manifest.jsonl: `counts` FLUX Fill, SD3 + ControlNet and klein 4B jobs (default 8, 6, 6: the bench's 20;
    seeds and options varied) on tiny fp32 folders built under root, one 64x48 image and mask."""
    import numpy as np
    from PIL import Image
    from tiny_flux import build_tiny_flux_fill_folder
    from tiny_klein import build_tiny_klein_folder
    from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

    root.mkdir(parents=True, exist_ok=True)
    flux = build_tiny_flux_fill_folder(root / "flux", seed=0)
    sd3 = {"default": str(build_tiny_sd3_folder(root / "sd3", seed=0)),
           "controlnet": str(build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0))}
    kl = build_tiny_klein_folder(root / "klein", seed=0)
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, size=(H, W, 3), dtype=np.uint8), "RGB").save(root / "image.png")
    mask = np.zeros((H, W), dtype=np.uint8)
    mask[8:40, 16:48] = 255
    Image.fromarray(mask, "L").save(root / "mask.png")
    common = {"image": "image.png", "mask": "mask.png", "prompt": "a red brick fireplace", "steps": steps,
              "dtype": "fp32"}
    lines = [{"id": f"flux-{i}", "family": "flux-fill", "models": str(flux), "seed": i, **common,
              "guidance": 20.0 + i} for i in range(counts[0])]
    lines += [{"id": f"sd3-{i}", "family": "sd3-controlnet", "models": sd3, "seed": 10 + i, **common,
               "negative": "blurry", "cfg": 3.0 + i / 2} for i in range(counts[1])]
    lines += [{"id": f"klein-{i}", "family": "klein-4b", "models": str(kl), "seed": 20 + i, **common,
               "grow": i % 3} for i in range(counts[2])]
    path = root / "manifest.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@contextlib.contextmanager
def ray_tmp_env():
    """HOME, RAY_TMPDIR and TMPDIR in one short new folder for the block (Ray's files, sockets and logs; its socket
    paths must stay under 108 characters); Ray stopped, the variables given back and the folder removed after."""
    import sys

    folder = Path(tempfile.mkdtemp(prefix="fsray-", dir="/tmp"))
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    for name in ("home", "ray", "tmp"):
        (folder / name).mkdir()
    os.environ.update(HOME=str(folder / "home"), RAY_TMPDIR=str(folder / "ray"), TMPDIR=str(folder / "tmp"))
    # Ray 2.60 writes a token to HOME/.ray/auth_token at a process's first local start and remembers it was done:
    # a later start in the same process under a new HOME found no token and its GCS server aborted ("Token
    # authentication is enabled but Ray couldn't find an authentication token"), which read as a 30 s port
    # timeout. These clusters live on this machine for one test module: token authentication off.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_gcs_server_port_wait_time_s"] = "120"
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    try:
        yield folder
    finally:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        tempfile.tempdir = None
        shutil.rmtree(folder, ignore_errors=True)


def closed_port() -> int:
    """A port nothing listens on (bound once, then let go)."""
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]
