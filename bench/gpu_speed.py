"""GPU speed: the FLUX.1 Fill sampler's cost per step, FillScope with each attention backend, fused q/k/v and
regional torch.compile, against diffusers' FluxFillPipeline measured in the same run on the same component objects;
then the step caches (fillscope.speed: first-block, mag, taylorseer) as whole runs, their speed-up beside their PSNR
inside the mask against the run without a cache.

Per step = (t(N2 steps) - t(N1 steps)) / (N2 - N1): text encoding, VAE encode and set-up cancel out on both
sides, so the figure is the denoiser step alone (FillScope: `sample_flux_fill`; diffusers: the pipeline with
`output_type="latent"`). Each variant's latents are compared with FillScope's default (relative error), so a
faster variant is only worth taking if its result stays within bf16 noise. Backends a machine lacks are
reported as errors, not skipped silently. Full production topology, placeholder weights, bf16, 1024x1024.

`--tiny` runs the same code on the tiny test folder on the CPU (to check the script, not to measure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from gpu_check import rel_err, sync  # noqa: E402  (bench/ is the script's own folder)

BACKENDS = ("_native_cudnn", "_native_flash", "_native_efficient")


def per_step(run, n1: int, n2: int, repeats: int) -> dict:
    """Median wall times of `run(n)` for n1 and n2 steps (alternating), and the cost of one step."""
    t1, t2 = [], []
    for _ in range(repeats):
        for n, into in ((n1, t1), (n2, t2)):
            sync()
            t0 = time.perf_counter()
            run(n)
            sync()
            into.append(time.perf_counter() - t0)
    m1, m2 = statistics.median(t1), statistics.median(t2)
    return {"ms_per_step": 1000 * (m2 - m1) / (n2 - n1), f"s_{n1}_steps": m1, f"s_{n2}_steps": m2}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("out/gpu_speed"))
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--steps", type=int, nargs=2, default=(2, 6), metavar=("N1", "N2"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant (its compile takes minutes)")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--cache-steps", type=int, default=28,
                    help="steps of the whole runs that compare the step caches (first-block, mag, taylorseer)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxFillPipeline

    from fillscope import masks, text
    from fillscope.pipelines import flux_fill
    from fillscope.specs import flux_scheduler_config
    from _benchlib import load_stack

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    if args.tiny:
        from tiny_flux import build_tiny_flux_fill_folder

        stack = load_stack("flux-fill", str(build_tiny_flux_fill_folder(Path("/tmp/gpu_speed_tiny"))), dtype="fp32", device=dev)
    else:
        stack = load_stack("flux-fill", "placeholder", dtype="bf16", device=dev)
    n1, n2 = args.steps
    h = w = args.size
    prompt = "a red brick fireplace"
    image, mask = masks.synthetic_image_and_mask(w, h, 0.5)
    flux_text = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], prompt)
    cond = flux_fill.build_fill_condition(stack["vae"], masks.prepare_image_and_mask(image, mask))
    model = stack["transformer"].model

    def fillscope(n):
        return flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=n, guidance=30.0, seed=0).latents

    pipe = FluxFillPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**flux_scheduler_config()), vae=stack["vae"].model,
        text_encoder=text.clip_text_model(stack["clip_l"].model), tokenizer=stack["clip_l"].tokenizer,
        text_encoder_2=stack["t5"].model, tokenizer_2=stack["t5"].tokenizer, transformer=model)
    pipe.set_progress_bar_config(disable=True)

    def diffusers(n):
        return pipe(prompt=prompt, image=image.permute(0, 3, 1, 2), mask_image=mask[:, None], height=h, width=w,
                    num_inference_steps=n, guidance_scale=30.0, generator=torch.Generator("cpu").manual_seed(0),
                    output_type="latent").images

    results = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
               "size": args.size, "steps": [n1, n2], "variants": {}}
    fillscope(1), diffusers(1)  # warm-up (cuBLAS handles, allocator)
    results["variants"]["diffusers FluxFillPipeline"] = per_step(diffusers, n1, n2, args.repeats)
    results["variants"]["FillScope (native SDPA)"] = per_step(fillscope, n1, n2, args.repeats)
    reference = fillscope(n2)

    def variant(label, prepare, undo):
        try:
            t0 = time.perf_counter()
            prepare()
            fillscope(1)  # first call: compiles or picks kernels
            sync()
            first = time.perf_counter() - t0
            r = per_step(fillscope, n1, n2, args.repeats)
            r["first_call_s"] = first
            r["rel_err_vs_default"] = rel_err(fillscope(n2), reference)
            results["variants"][label] = r
        except Exception:
            results["variants"][label] = {"error": traceback.format_exc()[-1500:]}
            print(f"--- {label} failed ---\n{results['variants'][label]['error']}")
        finally:
            undo()

    for backend in BACKENDS:
        variant(f"FillScope + {backend}", lambda b=backend: model.set_attention_backend(b),
                lambda: model.set_attention_backend("native"))
    variant("FillScope + fused q/k/v", model.fuse_qkv_projections, model.unfuse_qkv_projections)
    if not args.no_compile:
        from fillscope.speed import compile_repeated_blocks

        variant("FillScope + compile_repeated_blocks", lambda: compile_repeated_blocks(model), lambda: None)

    # step caches: whole runs (what they skip depends on the step count), time and quality beside each other;
    # quality = PSNR inside the mask of the decoded image against the run without a cache
    from fillscope.speed import STEP_CACHES

    hole = cond.prepared.paste_mask[0, ..., 0] > 0.5  # [H,W]

    def whole(kind):
        sync()
        t0 = time.perf_counter()
        out = flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=args.cache_steps, guidance=30.0,
                                         seed=0, step_cache=kind)
        sync()
        seconds = time.perf_counter() - t0
        image = flux_fill.decode_to_image(stack["vae"], out)[0].float()  # [H,W,3]
        return seconds, out, image

    caches = results["step_caches"] = {"steps": args.cache_steps}
    base_s, base_out, base_img = whole("off")
    caches["off"] = {"seconds": base_s}
    for kind in STEP_CACHES[1:]:
        try:
            seconds, out, image = whole(kind)
            err = (image - base_img)[hole.to(image.device)]  # [pixels in the mask, 3]
            mse = float((err ** 2).mean())
            caches[kind] = {"seconds": seconds, "speed_up": base_s / seconds,
                            "psnr_in_mask_db": float("inf") if mse == 0 else 10 * __import__("math").log10(1 / mse),
                            "rel_err_latents": rel_err(out.latents, base_out.latents),
                            **{k: v for k, v in out.info.items() if k.startswith(("last_block", "transformer_calls"))}}
        except Exception:
            caches[kind] = {"error": traceback.format_exc()[-1500:]}
            print(f"--- step cache {kind} failed ---\n{caches[kind]['error']}")

    (args.out / "gpu_speed.json").write_text(json.dumps(results, indent=1))
    base = results["variants"]["diffusers FluxFillPipeline"]["ms_per_step"]
    print(json.dumps({k: v for k, v in results.items() if k != "variants"}))
    print(f"{'variant':<38} {'ms/step':>8} {'vs diffusers':>13} {'rel err vs default':>19} {'first call s':>13}")
    for label, r in results["variants"].items():
        if "error" in r:
            print(f"{label:<38} failed (see above)")
            continue
        err = f"{r['rel_err_vs_default']:.2e}" if "rel_err_vs_default" in r else "-"
        first = f"{r['first_call_s']:.1f}" if "first_call_s" in r else "-"
        print(f"{label:<38} {r['ms_per_step']:>8.1f} {r['ms_per_step'] / base:>13.3f} {err:>19} {first:>13}")
    print(f"\nstep caches, {caches['steps']} steps, whole runs (seconds; PSNR inside the mask against no cache)")
    print(f"{'cache':<12} {'seconds':>8} {'speed-up':>9} {'PSNR dB':>8} {'skipped calls':>14}")
    print(f"{'off':<12} {caches['off']['seconds']:>8.2f} {1.0:>9.2f} {'-':>8} {'-':>14}")
    for kind, r in caches.items():
        if kind in ("steps", "off"):
            continue
        if "error" in r:
            print(f"{kind:<12} failed (see above)")
            continue
        skipped = f"{r.get('last_block_skipped', '?')}/{r.get('transformer_calls', '?')}"
        print(f"{kind:<12} {r['seconds']:>8.2f} {r['speed_up']:>9.2f} {r['psnr_in_mask_db']:>8.1f} {skipped:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
