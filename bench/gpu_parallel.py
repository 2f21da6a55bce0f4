"""GPU parallel: the speed-up of Ulysses context parallelism (fillscope/parallel/context.py) per denoiser step, on a
machine with several GPUs (not run by make bench; it needs 2 GPUs or more).

For FLUX.1 Fill and FLUX.2 [klein] 4B (production configs, placeholder weights: fillscope.weights
load_component(..., "placeholder"), bf16) at 1024x1024: one transformer call = one denoiser step (both are
guidance-distilled) with the inputs the samplers build (FLUX.1 Fill: 4096 tokens x 384 channels + 512 T5 tokens;
klein inpaint: 4096 noisy + 4096 reference tokens + 512 Qwen3 tokens), timed with CUDA events: 2 warm-up calls,
then the median of 5, at degree 1 (one GPU, no hooks) and at every degree of `valid_degrees` up to the GPU count.
Each degree is its own torchrun launch of exactly that many ranks (`python -m torch.distributed.run --standalone
--nproc_per_node d`, nccl, one GPU a rank), which this script starts itself; a rank's time is its own CUDA-event
median; the row shows the slowest rank's (every rank ends a call with the gathered output, so they agree closely).

    python3 bench/gpu_parallel.py --out $OUT/parallel          # all GPUs visible; exits 0 with a message if < 2
    python3 bench/gpu_parallel.py --device cpu --tiny           # gloo, 2 CPU ranks, tiny configs: checks the code
                                                                # path only, its times mean nothing

Writes gpu_parallel.json (every rank's times) under --out and prints a table last. Every time printed is measured
in this run; placeholder weights make the outputs meaningless, but the compute and traffic are the production
model's. The bytes the ranks exchange are computed in bench/bench_parallel.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

MODELS = ("flux-fill", "klein-4b")
TEXT_TOKENS = 512


# --- a rank (started by torch.distributed.run) --------------------------------------------------------------


def build(model: str, args, device: str):
    """The transformer (eval, no grad) and one step's inputs as the sampler passes them (batch 1)."""
    import torch

    from fillscope.pipelines.klein import token_ids
    from fillscope.specs import flux_image_ids

    latent = args.size // 8
    grid = latent // 2  # 2x2 patches: grid x grid image tokens
    text = TEXT_TOKENS if not args.tiny else 16
    gen = torch.Generator("cpu").manual_seed(0)  # the same inputs on every rank
    if args.tiny:
        from diffusers import Flux2Transformer2DModel, FluxTransformer2DModel

        dtype = torch.float32
        torch.manual_seed(0)  # the same weights on every rank
        if model == "flux-fill":
            from tiny_flux import TINY_TRANSFORMER_CONFIG as cfg

            net = FluxTransformer2DModel(**cfg)
        else:
            from tiny_klein import TINY_TRANSFORMER_CONFIG as cfg

            net = Flux2Transformer2DModel(**cfg)
        net = net.to(device).eval()
    else:
        from fillscope.weights import load_component

        dtype = torch.bfloat16
        kind, variant = ("flux_fill_transformer", None) if model == "flux-fill" else ("klein_transformer", "klein-4b")
        net = load_component(kind, "placeholder", dtype="bf16", device=device, seed=0, variant=variant).model.eval()
    cfg = net.config

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    t = torch.full((1,), 0.5, device=device, dtype=dtype)
    if model == "flux-fill":
        inputs = dict(hidden_states=rand(1, grid * grid, cfg.in_channels),
                      encoder_hidden_states=rand(1, text, cfg.joint_attention_dim),
                      pooled_projections=rand(1, cfg.pooled_projection_dim), timestep=t,
                      guidance=torch.full((1,), 30.0, device=device, dtype=dtype),
                      img_ids=flux_image_ids(latent, latent, device=device, dtype=dtype),
                      txt_ids=torch.zeros(text, 3, device=device, dtype=dtype))
    else:  # inpaint: the noisy tokens and the source's reference tokens (t=10), as sample_klein concatenates them
        img_ids = torch.cat([token_ids(grid, grid, 0, 1, device), token_ids(grid, grid, 10, 1, device)], dim=1)
        txt_ids = torch.zeros(1, text, 4, dtype=torch.long)
        txt_ids[..., 3] = torch.arange(text)
        inputs = dict(hidden_states=rand(1, 2 * grid * grid, cfg.in_channels),
                      encoder_hidden_states=rand(1, text, cfg.joint_attention_dim), timestep=t, guidance=None,
                      img_ids=img_ids, txt_ids=txt_ids.to(device))
    tokens = (inputs["hidden_states"].shape[1], text)
    return net, inputs, tokens


def time_calls(call, device: str, warmup: int, repeats: int) -> list[float]:
    """ms of each of `repeats` calls after `warmup` calls: CUDA events on CUDA, perf_counter on the CPU."""
    import torch

    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            call()
            times.append(1000 * (time.perf_counter() - t0))
    return times


def rank_main(args) -> int:
    import torch
    import torch.distributed as dist

    from fillscope.parallel.context import context_parallel, valid_degrees

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    else:
        device = "cpu"
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    out = {}
    try:
        for model in args.models:
            net, inputs, tokens = build(model, args, device)
            if world not in valid_degrees(net.config):
                out[model] = {"skipped": f"degree {world} does not divide {net.config.num_attention_heads} heads"}
                continue
            def call(net=net, inputs=inputs):
                return net(**inputs, return_dict=False)[0]

            with torch.inference_mode(), context_parallel(net, world):
                times = time_calls(call, device, args.warmup, args.repeats)
            mine = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
            every = [torch.zeros_like(mine) for _ in range(world)]
            dist.all_gather(every, mine)
            out[model] = {"tokens": list(tokens), "heads": net.config.num_attention_heads,
                          "rank0_ms": times, "median_ms_per_rank": [float(x) for x in every],
                          "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device != "cpu" else None}
            del net, inputs, call
            if device != "cpu":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
        if rank == 0:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"degree_{world}.json").write_text(json.dumps(out, indent=1))
    finally:
        dist.destroy_process_group()
    return 0


# --- the launcher ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("out/gpu_parallel"))
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny configs (fp32): check the code path, not a measurement")
    ap.add_argument("--size", type=int, default=None, help="image side in px (default 1024; --tiny 128)")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-degree", type=int, default=None, help="cap the degrees (default: the GPU count; cpu: 2)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds for each degree's launch")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)  # set by the launcher for torchrun's ranks
    args = ap.parse_args()
    args.size = args.size or (128 if args.tiny else 1024)
    if args.rank:
        return rank_main(args)

    import torch

    from fillscope.parallel.context import ULYSSES_DEGREES

    if args.device == "cuda":
        gpus = torch.cuda.device_count()
        if gpus < 2:
            print(f"[gpu_parallel] {gpus} GPU(s) visible: context parallelism needs 2 or more; nothing measured.")
            return 0
        name = torch.cuda.get_device_name(0)
    else:
        gpus, name = 0, "cpu (gloo, 2 ranks)"
    cap = min(gpus or 2, args.max_degree or gpus or 2)
    degrees = [d for d in ULYSSES_DEGREES if d <= cap]  # each model skips the degrees its heads refuse
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"device": name, "gpus_visible": gpus, "torch": torch.__version__, "size": args.size,
               "tiny": args.tiny, "warmup": args.warmup, "repeats": args.repeats, "degrees": {}}
    for d in degrees:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={d}",
               str(Path(__file__).resolve()), "--rank", "--out", str(args.out), "--device", args.device,
               "--size", str(args.size), "--warmup", str(args.warmup), "--repeats", str(args.repeats),
               "--models", *args.models] + (["--tiny"] if args.tiny else [])
        log = args.out / f"degree_{d}.log"
        t0 = time.perf_counter()
        try:
            with log.open("w") as f:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout, cwd=REPO).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        wall = time.perf_counter() - t0
        part = args.out / f"degree_{d}.json"
        if rc != 0 or not part.is_file():
            results["degrees"][str(d)] = {"error": f"rc={rc}", "log_tail": log.read_text()[-3000:]}
            print(f"--- degree {d} failed (rc={rc}, {wall:.0f} s); log tail ---\n{log.read_text()[-3000:]}")
            continue
        results["degrees"][str(d)] = {"wall_s": wall, **json.loads(part.read_text())}
    (args.out / "gpu_parallel.json").write_text(json.dumps(results, indent=1))

    print(json.dumps({k: v for k, v in results.items() if k != "degrees"}))
    print("how: measured, CUDA events (cpu: perf_counter), one transformer call = one denoiser step, "
          f"{args.warmup} warm-up + median of {args.repeats}; the slowest rank's median; speed-up = degree 1 / degree d"
          + ("; --tiny: checks the code path, times mean nothing" if args.tiny else ""))
    print(f"{'model':<10} {'degree':>6} {'tokens (img+txt)':>17} {'ms/step':>9} {'speed-up':>9} {'efficiency':>11} "
          f"{'peak GiB r0':>12}  provenance")
    for model in args.models:
        base = None
        for d in degrees:
            r = results["degrees"].get(str(d), {})
            m = r.get(model)
            if m is None or "error" in r:
                print(f"{model:<10} {d:>6} {'failed (see above)':>17}")
                continue
            if "skipped" in m:
                print(f"{model:<10} {d:>6} skipped: {m['skipped']}")
                continue
            ms = max(m["median_ms_per_rank"])
            base = ms if d == 1 else base
            speed = f"{base / ms:.2f}x" if base else "-"
            eff = f"{base / ms / d:.0%}" if base else "-"
            peak = f"{m['peak_gib']:.1f}" if m.get("peak_gib") is not None else "-"
            tokens = f"{m['tokens'][0]}+{m['tokens'][1]}"
            print(f"{model:<10} {d:>6} {tokens:>17} {ms:>9.1f} {speed:>9} {eff:>11} {peak:>12}  measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
