"""Peak memory of the tiled VAE (fillscope/vae_tiles.py, issue 23) against the whole-image call, measured.

Each measurement runs in its own fresh process (`--child MODE`), so one call's peak cannot hide another's: it builds
the tiny fp32 FLUX.1 VAE of tests/tiny_flux.py (TINY_VAE_CONFIG, seed 0: 16 latent channels at /8, a mid-block
attention), makes a smooth test picture, reads its own peak resident set size (resource.getrusage ru_maxrss, which
sees torch's CPU allocations; tracemalloc does not), runs ONE call (vae.encode, vae_tiles.encode_tiled, vae.decode
or vae_tiles.decode_tiled) and reads the peak again. The figure is the growth of the peak during the call: the
call's working set above what the process already held (model, input). Prints a table and the tiled / whole
ratios; also the max / mean abs difference of the tiled result against the whole one (same run).

    .venv/bin/python bench/bench_vae_tiles.py [--size 768x1024] [--tile 256] [--context 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402  (puts tests/ on sys.path for tiny_flux)

sys.path.insert(0, str(bl.REPO))

MODES = ("encode", "encode_tiled", "decode", "decode_tiled")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(mode: str, height: int, width: int, tile: int, context: int, out: Path) -> None:
    import torch
    from diffusers import AutoencoderKL
    from tiny_flux import TINY_VAE_CONFIG

    from fillscope import bounds
    from fillscope import vae as vae_ops
    from fillscope.vae_tiles import decode_tiled, encode_tiled
    from fillscope.weights import Component

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = AutoencoderKL(**TINY_VAE_CONFIG).eval().requires_grad_(False)
    vae = Component("flux_vae", model, "tiny", "tiny fp32 (bench)", "cpu", "fp32", dict(model.config))
    ys = torch.linspace(-1, 1, height)[:, None].expand(height, width)
    xs = torch.linspace(-1, 1, width)[None, :].expand(height, width)
    g = torch.Generator().manual_seed(3)
    pixels = (torch.stack([xs, ys, 0.5 * (xs + ys)])[None] * 0.8
              + 0.2 * torch.rand(1, 3, height, width, generator=g)).clamp(-1, 1)
    latents = torch.randn(1, 16, height // 8, width // 8, generator=g) * 0.5
    small = bounds.Range(64, 4096)
    calls = {"encode": lambda: vae_ops.encode(vae, pixels),
             "encode_tiled": lambda: encode_tiled(vae, pixels, tile=tile, context=context, tile_range=small),
             "decode": lambda: vae_ops.decode(vae, latents),
             "decode_tiled": lambda: decode_tiled(vae, latents, tile=tile, context=context, tile_range=small)}
    before = peak_mib()
    started = time.perf_counter()
    result = calls[mode]()
    seconds = time.perf_counter() - started
    after = peak_mib()
    torch.save(result.contiguous(), out)
    print(json.dumps({"mode": mode, "peak_before_mib": round(before, 1), "peak_after_mib": round(after, 1),
                      "growth_mib": round(after - before, 1), "seconds": round(seconds, 2),
                      "shape": list(result.shape)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="768x1024", help="HxW px (multiples of 8)")
    parser.add_argument("--tile", type=int, default=256)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--child", choices=MODES)
    parser.add_argument("--out")
    args = parser.parse_args()
    height, width = (int(v) for v in args.size.split("x"))
    if args.child:
        child(args.child, height, width, args.tile, args.context, Path(args.out))
        return 0

    import tempfile

    import torch

    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            out = Path(tmp) / f"{mode}.pt"
            cmd = [sys.executable, __file__, "--child", mode, "--size", args.size, "--tile", str(args.tile),
                   "--context", str(args.context), "--out", str(out)]
            done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
            if done.returncode:
                print(done.stdout, done.stderr, file=sys.stderr)
                return 1
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            results[mode] = torch.load(out)
    print(f"tiny FLUX.1 VAE (tests/tiny_flux.py TINY_VAE_CONFIG, fp32, CPU), image {width}x{height} px, tile "
          f"{args.tile} px, context {args.context} px; ru_maxrss growth during one call, fresh process each; "
          f"{bl.cpu_model()}, {bl.usable_cores()} cores")
    print(f"{'call':<14}{'peak before MiB':>17}{'peak after MiB':>16}{'growth MiB':>12}{'seconds':>9}  shape")
    for r in rows:
        print(f"{r['mode']:<14}{r['peak_before_mib']:>17}{r['peak_after_mib']:>16}{r['growth_mib']:>12}"
              f"{r['seconds']:>9}  {r['shape']}")
    by = {r["mode"]: r for r in rows}
    for kind in ("encode", "decode"):
        whole, tiled = by[kind]["growth_mib"], by[f"{kind}_tiled"]["growth_mib"]
        diff = (results[f"{kind}_tiled"].float() - results[kind].float()).abs()
        print(f"{kind}: tiled / whole peak growth = {tiled} / {whole} MiB = {tiled / max(whole, 1e-9):.3f}; "
              f"tiled vs whole abs difference max {diff.max().item():.4f} mean {diff.mean().item():.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
