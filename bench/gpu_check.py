"""GPU check: FillScope vs diffusers on the full production topology (placeholder weights, bf16, CUDA).

For FLUX.1 Fill and for SD3-medium + the alimama inpainting ControlNet, the same component objects run through
FillScope's engine (as the nodes call it) and through diffusers' own pipeline, alternating, in one process:
wall time of the whole graph (text encoders, VAE encodes, N denoiser steps, VAE decode; CUDA-synchronised),
FillScope's per-stage times, peak CUDA memory of each side, and the relative difference of the two images
(VAE encode by the mean in both; SD3 with diffusers' residual mapping so the computation is the same).
Then the five-page trace report of one FLUX Fill step measured on CUDA.

`--tiny` runs the same code on the tiny test folders on the CPU (to check the script, not to measure).
Every number printed is measured in this run; placeholder weights make the images meaningless but the
compute and memory are the production model's.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

RESULTS: dict = {}


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def peak_of(fn):
    import torch

    if not torch.cuda.is_available():
        return None
    sync()
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync()
    return torch.cuda.max_memory_allocated()


def rel_err(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def flux_part(args, device):
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxFillPipeline

    from fillscope import masks, text
    from fillscope.pipelines import flux_fill
    from fillscope.specs import flux_scheduler_config
    from _benchlib import load_stack
    from tiny_flux import argmax_vae_encode

    if args.tiny:
        from tiny_flux import build_tiny_flux_fill_folder

        src = str(build_tiny_flux_fill_folder(Path("/tmp/gpu_check_tiny_flux")))
        stack = load_stack("flux-fill", src, dtype="fp32", device=device)
    else:
        t0 = time.perf_counter()
        stack = load_stack("flux-fill", "placeholder", dtype="bf16", device=device)
        sync()
        RESULTS["flux.load_placeholder_s"] = round(time.perf_counter() - t0, 2)
    h = w = args.size
    image, mask = masks.synthetic_image_and_mask(w, h, 0.5)
    prompt = "a red brick fireplace"

    stages = {}

    def fillscope_graph():
        timings = {}
        prepared = masks.prepare_image_and_mask(image, mask)
        img = flux_fill.run(stack, prompt, prepared, steps=args.steps, guidance=30.0, seed=0, timings=timings).image
        stages.update(text=timings["encode_prompt"], condition=timings["build_fill_condition"],
                      sampler=timings["sample_flux_fill"], decode=timings["decode_to_image"])
        return img

    pipe = FluxFillPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**flux_scheduler_config()),
        vae=stack["vae"].model,
        text_encoder=text.clip_text_model(stack["clip_l"].model),
        tokenizer=stack["clip_l"].tokenizer,
        text_encoder_2=stack["t5"].model,
        tokenizer_2=stack["t5"].tokenizer,
        transformer=stack["transformer"].model,
    )
    pipe.set_progress_bar_config(disable=True)

    def diffusers_graph():
        with argmax_vae_encode():
            return pipe(prompt=prompt, image=image.permute(0, 3, 1, 2), mask_image=mask[:, None], height=h, width=w,
                        num_inference_steps=args.steps, guidance_scale=30.0,
                        generator=torch.Generator("cpu").manual_seed(0), output_type="pt").images

    fillscope_graph(), diffusers_graph()  # warm-up
    ours, theirs = [], []
    for _ in range(args.repeats):  # alternate
        ours.append(timed(fillscope_graph, 1)[0])
        theirs.append(timed(diffusers_graph, 1)[0])
    a, b = fillscope_graph(), diffusers_graph()
    RESULTS["flux"] = {
        "size": [h, w], "steps": args.steps, "dtype": str(stack["transformer"].model.dtype),
        "fillscope_s": statistics.median(ours), "diffusers_s": statistics.median(theirs),
        "ratio": statistics.median(ours) / statistics.median(theirs),
        "fillscope_runs": ours, "diffusers_runs": theirs,
        "fillscope_stages_s": {k: round(v, 4) for k, v in stages.items()},
        "sampler_per_step_s": stages["sampler"] / args.steps,
        "fillscope_peak_bytes": peak_of(fillscope_graph), "diffusers_peak_bytes": peak_of(diffusers_graph),
        "rel_err_vs_diffusers": rel_err(a.permute(0, 3, 1, 2), b),
    }
    return stack


def flux_trace_part(args, stack, out_dir):
    from fillscope.trace.report import write_report
    from fillscope.trace.run import trace_pipeline

    report = trace_pipeline("flux-fill", stack, height=args.size, width=args.size, line_trace=False, memory=True)
    html, js = write_report(report, out_dir, "flux-fill_trace_cuda")
    ev = report["evidence"]
    RESULTS["flux_trace"] = {"module_rows": ev["module"]["rows"], "module_hits": ev["module"]["hits"],
                             "flops_per_step": ev["flops"]["per_step"], "peak_memory": ev["peak_memory"],
                             "files": [html.name, js.name]}


def sd3_part(args, device):
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3ControlNetInpaintingPipeline

    from fillscope import masks
    from fillscope.pipelines import sd3_controlnet
    from fillscope.specs import scheduler_config
    from _benchlib import load_stack
    from tiny_sd3 import argmax_vae_encode

    if args.tiny:
        from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

        src = str(build_tiny_sd3_folder(Path("/tmp/gpu_check_tiny_sd3")))
        cn = str(build_tiny_sd3_controlnet_folder(Path("/tmp/gpu_check_tiny_cn")))
        stack = load_stack("sd3-controlnet-inpaint", src, controlnet=cn, dtype="fp32", device=device)
    else:
        t0 = time.perf_counter()
        stack = load_stack("sd3-controlnet-inpaint", "placeholder", dtype="bf16", device=device)
        sync()
        RESULTS["sd3.load_placeholder_s"] = round(time.perf_counter() - t0, 2)
    h = w = args.size
    image, mask = masks.synthetic_image_and_mask(w, h, 0.5)
    prompt, negative = "a red brick fireplace", "blurry"
    stages = {}

    def fillscope_graph():
        timings = {}
        prepared = masks.prepare_image_and_mask(image, mask)
        img = sd3_controlnet.run(stack, prompt, prepared, negative_prompt=negative, steps=args.steps, cfg=7.0,
                                 control_scale=0.95, seed=0, residual_mapping="diffusers", timings=timings).image
        stages.update(text=timings["encode_prompt"], condition=timings["build_inpaint_condition"],
                      sampler=timings["sample_sd3_controlnet_inpaint"], decode=timings["decode_to_image"])
        return img, prepared

    pipe = StableDiffusion3ControlNetInpaintingPipeline(
        transformer=stack["transformer"].model,
        scheduler=FlowMatchEulerDiscreteScheduler(**scheduler_config("sd3")),
        vae=stack["vae"].model,
        text_encoder=stack["clip_l"].model, tokenizer=stack["clip_l"].tokenizer,
        text_encoder_2=stack["clip_g"].model, tokenizer_2=stack["clip_g"].tokenizer,
        text_encoder_3=stack["t5"].model, tokenizer_3=stack["t5"].tokenizer,
        controlnet=stack["controlnet"].model,
    )
    pipe.set_progress_bar_config(disable=True)
    prepared = masks.prepare_image_and_mask(image, mask)

    def diffusers_graph():
        with argmax_vae_encode(pipe):
            return pipe(prompt=prompt, negative_prompt=negative, control_image=prepared.image.to(device, pipe.transformer.dtype),
                        control_mask=prepared.mask.to(device, pipe.transformer.dtype), height=h, width=w,
                        num_inference_steps=args.steps, guidance_scale=7.0, controlnet_conditioning_scale=0.95,
                        generator=torch.Generator("cpu").manual_seed(0), output_type="pt").images

    fillscope_graph(), diffusers_graph()
    ours, theirs = [], []
    for _ in range(args.repeats):
        ours.append(timed(lambda: fillscope_graph()[0], 1)[0])
        theirs.append(timed(diffusers_graph, 1)[0])
    a, b = fillscope_graph()[0], diffusers_graph()
    try:
        from fillscope.trace.report import write_report
        from fillscope.trace.run import trace_pipeline

        report = trace_pipeline("sd3-controlnet-inpaint", stack, height=h, width=w, line_trace=False, memory=True)
        write_report(report, args.out, "sd3-controlnet-inpaint_trace_cuda")
        ev = report["evidence"]
        RESULTS["sd3_trace"] = {"module_rows": ev["module"]["rows"], "module_hits": ev["module"]["hits"],
                                "flops_per_step": ev["flops"]["per_step"], "peak_memory": ev["peak_memory"]}
    except Exception:
        RESULTS["sd3_trace_error"] = traceback.format_exc()[-3000:]
    RESULTS["sd3"] = {
        "size": [h, w], "steps": args.steps, "cfg": 7.0, "dtype": str(stack["transformer"].model.dtype),
        "fillscope_s": statistics.median(ours), "diffusers_s": statistics.median(theirs),
        "ratio": statistics.median(ours) / statistics.median(theirs),
        "fillscope_runs": ours, "diffusers_runs": theirs,
        "fillscope_stages_s": {k: round(v, 4) for k, v in stages.items()},
        "sampler_per_step_s": stages["sampler"] / args.steps,
        "fillscope_peak_bytes": peak_of(lambda: fillscope_graph()), "diffusers_peak_bytes": peak_of(diffusers_graph),
        "rel_err_vs_diffusers": rel_err(a.permute(0, 3, 1, 2), b),
    }


def table() -> str:
    rows = [f"{'check':<34} {'FillScope':>11} {'diffusers':>11} {'ratio':>7} {'peak GiB (FS/diff)':>19} {'rel err':>9}"]
    for key in ("flux", "sd3"):
        r = RESULTS.get(key)
        if not r:
            rows.append(f"{key:<34} {'not run: see errors':>40}")
            continue
        peak = "-" if r["fillscope_peak_bytes"] is None else \
            f"{r['fillscope_peak_bytes'] / 2**30:.2f}/{r['diffusers_peak_bytes'] / 2**30:.2f}"
        name = f"{key} {r['size'][0]}x{r['size'][1]} {r['steps']} steps"
        rows.append(f"{name:<34} {r['fillscope_s']:>10.3f}s {r['diffusers_s']:>10.3f}s {r['ratio']:>7.3f} {peak:>19} {r['rel_err_vs_diffusers']:>9.2e}")
        rows.append(f"{'':<34} sampler {r['sampler_per_step_s'] * 1000:.1f} ms/step; stages {r['fillscope_stages_s']}")
    for key in ("flux_trace", "sd3_trace"):
        if key in RESULTS:
            t = RESULTS[key]
            rows.append(f"{key.replace('_', ' ')} (CUDA): module rows/hits {t['module_rows']}/{t['module_hits']}, "
                        f"{t['flops_per_step'] / 1e12:.1f} TFLOP/step, peak {t['peak_memory']['bytes'] / 2**30:.2f} GiB "
                        f"({t['peak_memory']['provenance']})")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("out/gpu_check"))
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import diffusers
    import torch
    import transformers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    RESULTS["env"] = {"device": torch.cuda.get_device_name() if device == "cuda" else platform.processor(),
                      "torch": torch.__version__, "diffusers": diffusers.__version__,
                      "transformers": transformers.__version__, "python": platform.python_version(),
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    errors = {}
    stack = None
    for name, fn in (("flux", lambda: flux_part(args, device)),):
        try:
            stack = fn()
        except Exception:  # keep going: every part that ran still reports
            errors[name] = traceback.format_exc()[-3000:]
    if stack is not None:
        try:
            flux_trace_part(args, stack, args.out)
        except Exception:
            errors["flux_trace"] = traceback.format_exc()[-3000:]
        del stack
        import gc

        gc.collect()
        torch.cuda.empty_cache() if device == "cuda" else None
    try:
        sd3_part(args, device)
    except Exception:
        errors["sd3"] = traceback.format_exc()[-3000:]
    RESULTS["errors"] = errors
    (args.out / "gpu_check.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    for k, v in errors.items():
        print(f"--- error in {k} ---\n{v}")
    print(json.dumps(RESULTS["env"]))
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
