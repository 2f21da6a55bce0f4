"""Estimated peak memory of the FLUX.1 Fill, SD3 + ControlNet and FLUX.2 [klein] 4B / 9B graphs under each memory policy, from meta
traces (no GPU needed; the GPU measurement is bench/gpu_memory.py).

Per stage (text encoders, VAE encode, one denoiser step, VAE decode) the estimator (fillscope/trace/cost.py)
gives the activation peak; which weights are resident during each stage comes from replaying three prompts
through fillscope.placement.replay, the same decisions the nodes take (keep: everything; auto: what the budget
leaves; offload: the stage's components only); sequential holds the largest single module's own weights.
Peak = max over the replayed stages of resident weights + that stage's activation peak. Printed with provenance
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
    """The pipeline's stages (fillscope/pipelines/<family>.py) from one untraced one-step run's intermediates."""
    from fillscope import masks
    from fillscope.pipelines import PIPELINES

    pipeline = PIPELINES[model_name]
    image, mask = masks.synthetic_image_and_mask(1024, 1024, 0.5)
    prepared = masks.prepare_image_and_mask(image, mask)
    prompt = "a red brick fireplace"
    done = pipeline.run(stack, prompt, prepared, steps=1)
    return pipeline.stages(stack, prompt, prepared, done)


FP8_STORAGE_KINDS = ("t5_xxl", "flux_fill_transformer", "sd3_transformer", "sd3_controlnet", "qwen3",
                     "klein_transformer")


def largest_upcast_bytes(model) -> int:
    """Bytes of the largest set of fp8 weights one upcast hook (fillscope/fp8.py) holds in the compute dtype."""
    best = 0
    for module in model.modules():
        up = getattr(module, "_fillscope_fp8", None)
        if up is not None:
            best = max(best, sum(p.numel() * dtype.itemsize for p, dtype, _ in up.entries))
    return best


def stage_rows(model_name, stack):
    """(label, component keys, activation peak bytes) per stage."""
    from fillscope.trace.cost import estimate_peak_memory

    return [(label, keys, estimate_peak_memory(fn)["parts"]["activations_peak"])
            for label, keys, fn in stages_for(model_name, stack)]


def replayed_peak(stack, rows, policy):
    """(peak bytes, {prompt: bytes moved in}) over three replayed prompts: the first, one with new text and image,
    and one with a new seed only (ComfyUI re-runs just the sampler and the decode)."""
    from fillscope.placement import replay

    activation = {label: act for label, _, act in rows}
    prompt = [(label, [stack[k] for k in keys]) for label, keys, _ in rows]
    uses = prompt + prompt + prompt[-2:]
    prompt_of = [1] * len(prompt) + [2] * len(prompt) + [3, 3]
    replayed = replay(uses, policy)
    peak = max(u["resident_bytes"] + activation[u["use"]] for u in replayed)
    moved = {n: sum(u["loaded_bytes"] for u, p in zip(replayed, prompt_of) if p == n) for n in (1, 2, 3)}
    return peak, moved


def main() -> int:
    from fillscope.fp8 import store_blocks_in_fp8
    from fillscope.placement import weight_bytes
    from _benchlib import load_stack

    gib = 2**30
    print("bench_memory_policies: estimated peak memory per policy, meta full topology, bf16, 1024x1024, batch 1")
    print("provenance: estimated on meta (fillscope/trace/cost.py: weights read + peak of live activations;")
    print("            fillscope.placement.replay: which weights each policy holds, as the nodes decide it)")
    print("prompts replayed: 1 = first prompt, 2 = new text and image, 3 = same inputs, new seed (ComfyUI re-runs")
    print("only the sampler and the decode)\n")
    names = sys.argv[1:] or ["flux-fill", "sd3-controlnet-inpaint", "klein-4b", "klein-9b"]
    for model_name in names:
        t0 = time.perf_counter()
        stack = load_stack(model_name, "meta", dtype="bf16")
        weights = {k: weight_bytes(c.model) for k, c in stack.items()}
        largest = max(largest_module_bytes(c.model) for c in stack.values())
        rows = stage_rows(model_name, stack)
        results = {policy: replayed_peak(stack, rows, policy) for policy in ("keep", "auto", "offload")}
        results["sequential"] = (max(largest + act for _, _, act in rows), None)
        # the loaders' storage = fp8_e4m3fn on every component that offers it (T5 and the denoisers)
        fp8_stack = load_stack(model_name, "meta", dtype="bf16")
        for key, comp in fp8_stack.items():
            if comp.kind in FP8_STORAGE_KINDS:
                store_blocks_in_fp8(comp)
        # storage does not change the activations; one hooked module's upcast copy is live at a time on top
        # (added here: the estimator books a parameter's swapped-in data as a resident read, not an activation)
        fp8_rows = [(label, keys, act + max(largest_upcast_bytes(fp8_stack[k].model) for k in keys))
                    for label, keys, act in rows]
        for policy in ("auto", "offload"):
            results[f"{policy} + fp8 storage"] = replayed_peak(fp8_stack, fp8_rows, policy)
        print(f"{model_name} ({time.perf_counter() - t0:.1f} s)")
        print(f"  {'stage':<15} {'weights GiB':>12} {'activations GiB':>16}")
        for label, keys, act in rows:
            print(f"  {label:<15} {sum(weights[k] for k in keys) / gib:>12.2f} {act / gib:>16.2f}")
        fp8_weights = {k: weight_bytes(c.model) for k, c in fp8_stack.items()}
        print("  with fp8 storage:")
        for label, keys, act in fp8_rows:
            print(f"  {label:<15} {sum(fp8_weights[k] for k in keys) / gib:>12.2f} {act / gib:>16.2f}")
        print(f"  {'policy':<22} {'peak GiB (estimated)':>21} {'GiB moved in: prompt 1 / 2 / 3':>33}")
        for policy, (peak, moved) in results.items():
            moves = "streamed every step" if moved is None else " / ".join(f"{moved[n] / gib:.2f}" for n in (1, 2, 3))
            print(f"  {policy:<22} {peak / gib:>21.2f} {moves:>33}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
