"""Estimated peak memory of the FLUX.1 Fill and SD3 + ControlNet graphs under each memory policy, from meta
traces (no GPU needed; the GPU measurement is bench/gpu_memory.py).

Per stage (text encoders, VAE encode, one denoiser step, VAE decode) the estimator (fillscope/trace/cost.py)
gives the activation peak; the policy says which weights are resident during that stage:
keep = every component; auto = the stage's components + the denoisers (kept between uses);
offload = the stage's components only; sequential = the largest single module's own weights.
Peak = max over stages of resident weights + that stage's activation peak. Printed with provenance
"estimated on meta"; compare with bench/RESULTS.md's H200 measurements.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def largest_module_bytes(model) -> int:
    best = 0
    for module in model.modules():
        own = sum(t.numel() * t.element_size() for t in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)))
        best = max(best, own)
    return best


def stages_for(model_name, stack):
    """The graph's stages (fillscope/trace/run.py) from one untraced run's intermediates."""
    from fillscope import flux_fill, masks, sd3_inpaint, text
    from fillscope.trace.run import flux_graph_stages, sd3_condition, sd3_graph_stages

    image, mask = masks.synthetic_image_and_mask(1024, 1024, 0.5)
    prepared = masks.prepare_image_and_mask(image, mask)
    prompt = "a red brick fireplace"
    if model_name == "flux-fill":
        clip, t5 = text.encode_clip(stack["clip_l"], prompt, project=False), text.encode_t5(stack["t5"], prompt)
        flux_text = text.flux_text_condition(t5, clip)
        cond = flux_fill.build_fill_condition(stack["vae"], prepared)
        out = flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=1)
        return flux_graph_stages(stack, prompt, prepared, flux_text, cond, out)
    pos, neg = sd3_condition(stack, prompt), sd3_condition(stack, "")
    cond = sd3_inpaint.build_inpaint_condition(stack["vae"], prepared)
    out = sd3_inpaint.sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], pos, neg, cond, steps=1)
    return sd3_graph_stages(stack, prompt, "", prepared, pos, neg, cond, out)


def main() -> int:
    from fillscope.placement import DENOISERS, weight_bytes
    from fillscope.trace.cost import estimate_peak_memory
    from fillscope.trace.run import load_stack

    gib = 2**30
    print("bench_memory_policies: estimated peak memory per policy, meta full topology, bf16, 1024x1024, batch 1")
    print("provenance: estimated on meta (fillscope/trace/cost.py: weights read + peak of live activations)\n")
    for model_name in ("flux-fill", "sd3-controlnet-inpaint"):
        t0 = time.perf_counter()
        stack = load_stack(model_name, "meta", dtype="bf16")
        weights = {k: weight_bytes(c.model) for k, c in stack.items()}
        denoisers = [k for k, c in stack.items() if c.kind in DENOISERS]
        largest = max(largest_module_bytes(c.model) for c in stack.values())
        rows = []
        for label, keys, fn in stages_for(model_name, stack):
            act = estimate_peak_memory(fn)["parts"]["activations_peak"]
            rows.append((label, keys, act))
        peaks = {
            "keep": max(sum(weights.values()) + act for _, _, act in rows),
            "auto": max(sum(weights[k] for k in set(keys) | set(denoisers)) + act for _, keys, act in rows),
            "offload": max(sum(weights[k] for k in keys) + act for _, keys, act in rows),
            "sequential": max(largest + act for _, _, act in rows),
        }
        print(f"{model_name} ({time.perf_counter() - t0:.1f} s)")
        print(f"  {'stage':<15} {'weights GiB':>12} {'activations GiB':>16}")
        for label, keys, act in rows:
            print(f"  {label:<15} {sum(weights[k] for k in keys) / gib:>12.2f} {act / gib:>16.2f}")
        print(f"  {'policy':<15} {'peak GiB (estimated)':>21}")
        for policy, b in peaks.items():
            print(f"  {policy:<15} {b / gib:>21.2f}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
