"""GPU check: peak CUDA memory and speed of the FLUX.1 Fill graph under each memory policy
(fillscope/placement.py), full production topology with placeholder weights, bf16, 1024x1024.

Policies as the nodes apply them (each component placed with `placement.in_use` for its own stage):
keep (everything resident), auto (left resident until FillScope's budget needs the room: the transformer goes back
for the VAE decode), offload (back to pinned CPU memory after every use), sequential (every component streamed
module by module from pinned CPU memory). Moves are by pointer from pinned host copies (fillscope/placement.py). Peak = max_memory_allocated over
the whole graph (text encoders, VAE encode, N steps, VAE decode) after the components start where the policy
leaves them. `--tiny` runs the code path on the tiny test folder on the CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("out/gpu_memory"))
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    from fillscope import masks, placement
    from fillscope.pipelines import flux_fill
    from _benchlib import load_stack

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if args.tiny:
        from tiny_flux import build_tiny_flux_fill_folder

        stack = load_stack("flux-fill", str(build_tiny_flux_fill_folder(Path("/tmp/gpu_memory_tiny"))), dtype="fp32", device="cpu")
    else:
        stack = load_stack("flux-fill", "placeholder", dtype="bf16", device=dev)
    image, mask = masks.synthetic_image_and_mask(args.size, args.size, 0.5)
    results = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
               "size": args.size, "steps": args.steps, "policies": {}}

    def graph(policy):
        timings = {}
        prepared = masks.prepare_image_and_mask(image, mask)
        flux_fill.run(stack, "a red brick fireplace", prepared, steps=args.steps, timings=timings,
                      place=placement.placer(dev, policy))  # stage by stage under the policy, as the nodes place them
        return {"text": timings["encode_prompt"], "condition": timings["build_fill_condition"],
                "sampler": timings["sample_flux_fill"], "decode": timings["decode_to_image"]}

    def measure(policy, label=None):
        # start where the policy leaves components between uses
        for comp in stack.values():
            if policy == "keep":
                placement.move(comp, dev)
            else:  # the loaders leave every other policy's weights in CPU memory (pinned on first use)
                placement.send_back(comp, "cpu")
        if cuda:
            torch.cuda.empty_cache()
        graph(policy)  # warm-up (and leaves components where the policy keeps them)
        walls, stage_runs = [], []
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        resident_before = torch.cuda.memory_allocated() if cuda else None
        for _ in range(2):
            t0 = time.perf_counter()
            stage_runs.append(graph(policy))
            walls.append(time.perf_counter() - t0)
        results["policies"][label or policy] = {
            "wall_s": statistics.median(walls),
            "stages_s": {k: round(statistics.median(r[k] for r in stage_runs), 4) for k in stage_runs[0]},
            "sampler_ms_per_step": 1000 * statistics.median(r["sampler"] for r in stage_runs) / args.steps,
            "resident_before_bytes": resident_before,
            "peak_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        }

    for policy in ("keep", "auto", "offload", "sequential"):
        try:
            measure(policy)
        except Exception:  # report and go on: the other policies still measure
            import traceback

            results["policies"][policy] = {"error": traceback.format_exc()[-2000:]}
            print(f"--- {policy} failed ---\n{results['policies'][policy]['error']}")

    results["pinned_host_bytes"] = placement._pinned_total
    try:  # the loaders' storage = fp8_e4m3fn on T5 and the transformer, then the default policy again
        from fillscope.fp8 import store_blocks_in_fp8

        for key in ("t5", "transformer"):
            placement.send_back(stack[key], "cpu")
            results.setdefault("fp8_storage", {})[key] = store_blocks_in_fp8(stack[key])
        measure("auto", "auto + fp8 storage")
    except Exception:
        import traceback

        results["policies"]["auto + fp8 storage"] = {"error": traceback.format_exc()[-2000:]}
        print(f"--- auto + fp8 storage failed ---\n{results['policies']['auto + fp8 storage']['error']}")
    (args.out / "gpu_memory.json").write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in results.items() if k != "policies"}))
    print(f"{'policy':<19} {'peak GiB':>9} {'resident between uses GiB':>26} {'graph s':>8} {'sampler ms/step':>16}")
    for policy, r in results["policies"].items():
        if "error" in r:
            print(f"{policy:<19} failed (see above)")
            continue
        peak = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**30:.2f}"
        res = "-" if r["resident_before_bytes"] is None else f"{r['resident_before_bytes'] / 2**30:.2f}"
        print(f"{policy:<19} {peak:>9} {res:>26} {r['wall_s']:>8.3f} {r['sampler_ms_per_step']:>16.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
