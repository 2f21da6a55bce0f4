"""How many whole-image copies a large image costs in FLUX Fill Tiled Inpaint's path (issue 35: a 16384x16384 image
got the server killed), measured on the tiny fp32 FLUX Fill on the CPU.

Each size runs in its own subprocess (this script with --child): the node's input checks on the IMAGE and MASK
(fillscope.pixels.require_finite, whose one sum decides the finite case, as nodes/base.py's pixel check), then fillscope.tiled.run_tiled in mode independent (tile
1024, overlap 0.15, 1 step) and the node's hand-back (`.float().cpu()`), on a picture of side N with a 256x256 hole
near its top-left corner (so one tile is planned and sampled: the tiles' own working set stays that of one 1024 px tile at every size).
The peak RSS of the run (ru_maxrss, the child's lifetime peak) less the RSS before it (model loaded, image and mask
built), divided by the bytes of the float32 image [1,N,N,3], is the number of whole-image copies the run held at
once at its peak (the mask, a quarter of the image's bytes, counts as 0.25). The tile's own working set is measured
apart (the same run at 1024, where the whole image is one tile) and subtracted: copies = (rise(N) - rise(1024)) /
image bytes(N) at N > 1024.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from _benchlib import bench_threads, environment_lines, quiet_libraries, run_main, table  # noqa: E402
from bench_tiled import build_tiny_folders, picture, tiny_stack, vm_rss  # noqa: E402

GIB = 2**30
SIZES = (1024, 2048, 4096, 8192)
HOLE, CORNER = 256, 64  # the hole near the top-left corner: one tile (the first) is planned at every size


def child(size: int, folders: dict) -> dict:
    import gc
    import resource

    import torch

    torch.set_num_threads(bench_threads())
    quiet_libraries(all_warnings=True)
    from fillscope.pixels import require_finite
    from fillscope.tiled import run_tiled

    stack = tiny_stack("flux-fill", folders["flux-fill"])
    image = picture(size, size)
    mask = torch.zeros(1, size, size)
    mask[:, CORNER:CORNER + HOLE, CORNER:CORNER + HOLE] = 1
    gc.collect()
    before = vm_rss()
    started = time.perf_counter()
    require_finite("image", image)  # the node's input checks (nodes/base.py: the same sum first)
    require_finite("mask", mask)
    done = run_tiled("flux-fill", stack, "a red brick fireplace", image, mask, tile=1024, overlap=0.15, seed=0, steps=1,
                     guidance=30.0)
    out = done.image.float().cpu()  # the node's hand-back
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"size": size, "seconds": seconds, "rise": peak - before, "image_bytes": image.numel() * 4,
            "tiles": len(done.tiles), "out": list(out.shape)}


def run_child(size: int, folders: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(size), json.dumps(folders)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"size {size} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="image sides (px); 1024 first")
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(int(args.child[0]), json.loads(args.child[1]))))
        return 0
    sizes = sorted(set(args.sizes) | {1024})
    with tempfile.TemporaryDirectory() as tmp:
        folders = build_tiny_folders(Path(tmp))
        results = [run_child(size, folders) for size in sizes]
    base = results[0]["rise"]
    rows = []
    for r in results:
        copies = (r["rise"] - base) / r["image_bytes"] if r["size"] > 1024 else None
        rows.append([f"{r['size']}", str(r["tiles"]), f"{r['seconds']:.1f}", f"{r['image_bytes'] / GIB:.3f}",
                     f"{r['rise'] / GIB:.2f}", f"{copies:.2f}" if copies is not None else "(the tile's own)"])
    print("\n".join(environment_lines()))
    print(table(rows, ["side", "tiles run", "s", "image GiB", "peak rise GiB", "whole-image copies"]))
    return 0


if __name__ == "__main__":
    run_main(main, "bench_image_copies")
