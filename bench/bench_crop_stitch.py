"""Benchmark: crop and stitch against a whole-image run, for a 4096x3072 photo with a small mask.

(A) crop and stitch: fillscope/compositing/crop.py crop_for_inpaint at its defaults (1024 px long side, context
    factor 1.5, padding 32) -> FLUX.1 Fill at the crop's size -> stitch back into the 4096x3072 photo;
(B) the whole image: FLUX.1 Fill on the 4096x3072 photo (what you get without cropping), then paste-back.
The mask is one 600x440 px rectangle off-centre (lower right); with the defaults its box is 968x726 px and the
crop 1024x768.

1. Production FLUX.1 Fill on the meta device (production configs, bf16, batch 1; the same meta stack as
   bench_memory_policies / the trace nodes): the transformer's input shape for A and B (observed at the
   sampler's `transformer.input`), FLOPs of one denoiser step and of the VAE encode / decode (count_flops:
   counted on meta), and the estimated peak memory of one denoiser step, the VAE encode and the VAE decode
   (estimate_peak_memory: estimated on meta; weights counted as resident for the whole stage). No production
   times: a time would need an assumed throughput; the FLOP ratios are what carries over.
2. Tiny FLUX.1 Fill (tests/tiny_flux.py folder, fp32, CPU, torch.set_num_threads(1)), measured: end to end
   (text encode, fill condition = VAE encode, 2 sampler steps, VAE decode, stitch / paste-back; A includes
   crop_for_inpaint), per stage, crop_for_inpaint and stitch alone at 4096x3072 (median of 3), and the peak RSS
   each run added (VmHWM reset through /proc/self/clear_refs before each run). B at 4096x3072 with the tiny
   model took 365 s and added 7.9 GiB of RSS on the 2-core bench machine (the tiny VAE's 32-channel convolutions
   at full resolution, and its mid-block attention over 196,608 latent positions, which grows with the square of
   the pixels; bench/RESULTS.md), so by default B runs the same photo at 2048x1536 (half each side, the mask
   scaled with it; ~1 min) and says so; FILLSCOPE_BENCH_WHOLE_SIZE=4096x3072 runs it at full size (~7 min for
   the whole script).
3. Pixels outside the mask: bit-identical to the photo after stitch (A) and after paste-back (B), checked on
   every pixel whose mask is 0.

Run from the repo root: .venv/bin/python bench/bench_crop_stitch.py
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

sys.path.insert(0, str(bl.REPO))

import torch  # noqa: E402

PHOTO_W, PHOTO_H = 4096, 3072
MASK_W, MASK_H = 600, 440  # with the crop defaults: box 968x726 -> crop 1024x768 (3072 tokens)
MASK_TOP, MASK_LEFT = 1900, 2700  # off-centre: lower right
TARGET = 1024  # crop_for_inpaint's target_long_side (its default; FLUX.1 Fill's native size)
STEPS = 2
SEED = 0
GUIDANCE = 30.0
PROMPT = "a wooden bench in a park"
THREADS = bl.bench_threads()
REPEATS = 3  # crop_for_inpaint / stitch alone
TOKEN_TARGET = 4096  # FLUX.1's calibrated resolution range ends at 4096 tokens (1024x1024)
GIB = 2**30


def whole_size() -> tuple[int, int]:
    """(width, height) of B's tiny run: 2048x1536 unless FILLSCOPE_BENCH_WHOLE_SIZE=WxH says otherwise."""
    text = os.environ.get("FILLSCOPE_BENCH_WHOLE_SIZE", "2048x1536")
    w, h = (int(x) for x in text.lower().split("x"))
    return w, h


def photo_and_mask(width: int, height: int):
    """A deterministic photo-like image [1,H,W,3] (gradients, texture, noise) and the off-centre rectangle mask
    [1,H,W], both scaled with the photo (mask at 4096x3072: 600x440 at top 1900, left 2700)."""
    g = torch.Generator().manual_seed(7)
    ys = torch.linspace(0, 1, height)[:, None].expand(height, width)
    xs = torch.linspace(0, 1, width)[None, :].expand(height, width)
    texture = 0.5 + 0.5 * torch.sin(xs * 97.0) * torch.cos(ys * 61.0)
    image = torch.stack([xs, ys, texture], dim=-1)[None] * 0.8 + 0.2 * torch.rand(1, height, width, 3, generator=g)
    sx, sy = width / PHOTO_W, height / PHOTO_H
    top, left = round(MASK_TOP * sy), round(MASK_LEFT * sx)
    mask = torch.zeros(1, height, width)
    mask[:, top : top + round(MASK_H * sy), left : left + round(MASK_W * sx)] = 1.0
    return image.contiguous(), mask


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def rss_reset() -> int:
    """Reset this process's peak RSS (VmHWM = VmRSS, Linux >= 4.0) and return the RSS now; -1 if unavailable."""
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return bl.proc_status(os.getpid())["VmRSS"]
    except (OSError, KeyError):
        return -1


def rss_growth(before: int) -> int | None:
    """Peak RSS since rss_reset() minus the RSS at the reset, or None if unavailable."""
    if before < 0:
        return None
    try:
        return bl.proc_status(os.getpid())["VmHWM"] - before
    except (OSError, KeyError):
        return None


def kept_exact(result, source, mask) -> tuple[bool, int]:
    """(every pixel whose mask is 0 equals the source bit for bit, how many such pixels)."""
    keep = mask[..., None].expand_as(source) == 0
    n = int((mask == 0).sum())
    return bool(torch.equal(result[keep], source[keep])), n


# ---- 1. production FLUX.1 Fill on meta ------------------------------------------------------------------------


def meta_side(stack, prepared) -> dict:
    """Transformer input shape, FLOPs and estimated peaks of one side on the meta stack."""
    from fillscope.pipelines import flux_fill
    from fillscope.trace.cost import count_flops, estimate_peak_memory

    seen = {}

    def observe(name, t):
        if name == "transformer.input":
            seen[name] = list(t.shape)

    done = flux_fill.run(stack, PROMPT, prepared, steps=1, observe=observe)
    out = {"input": seen["transformer.input"], "latent_info": done.latent.info}
    for label, _, fn in flux_fill.stages(stack, PROMPT, prepared, done)[1:]:  # VAE encode, denoiser step, VAE decode
        out[label] = {"flops": count_flops(fn)[0], "mem": estimate_peak_memory(fn)}
    return out


def meta_figures(crop_prepared, whole_prepared) -> tuple[dict, dict, float]:
    t = time.perf_counter()
    stack = bl.load_stack("flux-fill", "meta", dtype="bf16")
    a = meta_side(stack, crop_prepared)
    print(f"[crop] meta A done ({time.perf_counter() - t:.1f} s since the stack build began)", flush=True)
    b = meta_side(stack, whole_prepared)
    secs = time.perf_counter() - t
    print(f"[crop] meta B done ({secs:.1f} s)", flush=True)
    del stack
    gc.collect()
    return a, b, secs


# ---- 2. tiny FLUX.1 Fill, measured ---------------------------------------------------------------------------


def tiny_stack(folder):
    from fillscope import text, vae
    from fillscope.pipelines import flux_fill

    kw = dict(dtype="fp32", device="cpu")
    return {
        "clip_l": text.load_clip_l(folder, **kw),
        "t5": text.load_t5(folder, **kw),
        "transformer": flux_fill.load_flux_fill_transformer(folder, **kw),
        "vae": vae.load_vae(folder, **kw),
    }


def run_crop_and_stitch(stack, image, mask) -> dict:
    """A: crop, FLUX Fill at the crop's size, stitch back. Per-stage times under their function names."""
    from fillscope import masks
    from fillscope.compositing.crop import crop_for_inpaint, stitch
    from fillscope.pipelines import flux_fill

    timings: dict = {}
    t0 = time.perf_counter()
    timings["crop_for_inpaint"], crop = timed(lambda: crop_for_inpaint(image, mask, target_long_side=TARGET))
    timings["prepare_image_and_mask"], prepared = timed(lambda: masks.prepare_image_and_mask(crop.image, crop.mask))
    done = flux_fill.run(stack, PROMPT, prepared, steps=STEPS, guidance=GUIDANCE, seed=SEED, timings=timings)
    timings["stitch"], stitched = timed(lambda: stitch(done.image, crop.record))
    timings["total"] = time.perf_counter() - t0
    return {"timings": timings, "image": stitched.image, "crop": crop, "generated": done.image,
            "kept_reported": stitched.kept_pixels}


def run_whole(stack, image, mask) -> dict:
    """B: FLUX Fill on the whole image, then paste-back (as the nodes do after the decode)."""
    from fillscope import masks
    from fillscope.pipelines import flux_fill

    timings: dict = {}
    t0 = time.perf_counter()
    timings["prepare_image_and_mask"], prepared = timed(lambda: masks.prepare_image_and_mask(image, mask))
    done = flux_fill.run(stack, PROMPT, prepared, steps=STEPS, guidance=GUIDANCE, seed=SEED, timings=timings)
    timings["paste_back"], out = timed(lambda: masks.paste_back(done.image, prepared.source, prepared.paste_mask))
    timings["total"] = time.perf_counter() - t0
    return {"timings": timings, "image": out, "tokens": done.latent.info.get("tokens")}


# ---- report ---------------------------------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    if not b:
        return ""
    r = a / b
    return f"{r:.4f} (1/{1 / r:.1f})" if 0 < r < 1 else f"{r:.3f}"


def tflop(n: int) -> str:
    return f"{n / 1e12:.2f} TFLOP"


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def secs(x: float) -> str:
    return f"{x:.2f} s"


def main() -> int:
    watch = bl.CpuWatch()
    t_script = time.perf_counter()
    bl.quiet_libraries()
    torch.set_num_threads(THREADS)
    from fillscope import masks
    from fillscope.compositing.crop import crop_for_inpaint, stitch

    image, mask = photo_and_mask(PHOTO_W, PHOTO_H)
    crop = crop_for_inpaint(image, mask, target_long_side=TARGET)
    rec = crop.record
    box = rec.crops[0]
    crop_h, crop_w = rec.crop_height, rec.crop_width
    print(f"[crop] {rec.describe()} ({box.box_text()})", flush=True)

    # 1. production FLUX.1 Fill on meta
    crop_prepared = masks.prepare_image_and_mask(crop.image, crop.mask)
    whole_prepared = masks.prepare_image_and_mask(image, mask)
    ma, mb, meta_s = meta_figures(crop_prepared, whole_prepared)
    del whole_prepared
    gc.collect()

    # 2. tiny FLUX.1 Fill, measured
    bw, bh = whole_size()
    from tiny_flux import build_tiny_flux_fill_folder

    tmp = tempfile.TemporaryDirectory(prefix="fillscope-bench-")  # kept until the end: the loaded folder
    t = time.perf_counter()
    folder = build_tiny_flux_fill_folder(Path(tmp.name) / "FLUX.1-Fill-tiny", seed=0)
    stack = tiny_stack(folder)
    load_s = time.perf_counter() - t
    warm_img, warm_mask = photo_and_mask(256, 192)  # first calls: allocations, kernel choice, tokenizer caches
    run_whole(stack, warm_img, warm_mask)
    print(f"[crop] tiny folder built and loaded in {load_s:.1f} s, warm-up done", flush=True)

    r0 = rss_reset()
    a = run_crop_and_stitch(stack, image, mask)
    a_rss = rss_growth(r0)
    print(f"[crop] tiny A (crop and stitch, {PHOTO_W}x{PHOTO_H} photo -> {crop_w}x{crop_h}): "
          f"{a['timings']['total']:.2f} s", flush=True)
    a_exact, a_kept = kept_exact(a["image"], image, mask)
    a_size = tuple(a["image"].shape)

    # crop_for_inpaint and stitch alone at the full photo size, on A's generated crop
    crop_runs = [timed(lambda: crop_for_inpaint(image, mask, target_long_side=TARGET))[0] for _ in range(REPEATS)]
    stitch_runs = [timed(lambda: stitch(a["generated"], a["crop"].record))[0] for _ in range(REPEATS)]
    del a["image"], a["generated"], a["crop"]

    b_image, b_mask = (image, mask) if (bw, bh) == (PHOTO_W, PHOTO_H) else photo_and_mask(bw, bh)
    r0 = rss_reset()
    b = run_whole(stack, b_image, b_mask)
    b_rss = rss_growth(r0)
    print(f"[crop] tiny B (whole image, {bw}x{bh}): {b['timings']['total']:.2f} s", flush=True)
    b_exact, b_kept = kept_exact(b["image"], b_image, b_mask)
    del b["image"], stack
    tmp.cleanup()
    full_b = (bw, bh) == (PHOTO_W, PHOTO_H)

    # ---- table ----
    at, bt = a["timings"], b["timings"]
    a_tok, b_tok = ma["input"][1], mb["input"][1]
    meta_p = "observed on meta"
    counted = "counted on meta (count_flops)"
    estimated = "estimated on meta (estimate_peak_memory)"
    measured = f"measured (CPU, fp32, {THREADS} thread{'s' if THREADS > 1 else ''})"
    b_label = "" if full_b else f" [B at {bw}x{bh}]"
    rows = [
        ["PRODUCTION FLUX.1 Fill (meta, bf16, batch 1)", "", "", "", "", "", ""],
        ["  model input size", f"{crop_w}x{crop_h}", f"{PHOTO_W}x{PHOTO_H}",
         ratio(crop_w * crop_h, PHOTO_W * PHOTO_H), "crop_for_inpaint's record", "", ""],
        ["  transformer input [B, N, C]", str(ma["input"]), str(mb["input"]), ratio(a_tok, b_tok), meta_p,
         f"A: N <= {TOKEN_TARGET}", bl.verdict(a_tok <= TOKEN_TARGET)],
        ["  resolution shift mu (calibrated 256-4096 tokens)",
         f"{ma['latent_info']['mu']:.3f}" + (" extrapolated" if ma["latent_info"]["mu_extrapolated"] else ""),
         f"{mb['latent_info']['mu']:.3f}" + (" extrapolated" if mb["latent_info"]["mu_extrapolated"] else ""),
         "", "computed (sampler info)", "", ""],
        ["  denoiser, FLOPs per step", tflop(ma["denoiser step"]["flops"]), tflop(mb["denoiser step"]["flops"]),
         ratio(ma["denoiser step"]["flops"], mb["denoiser step"]["flops"]), counted, "", ""],
        ["  VAE encode (fill condition), FLOPs", tflop(ma["VAE encode"]["flops"]), tflop(mb["VAE encode"]["flops"]),
         ratio(ma["VAE encode"]["flops"], mb["VAE encode"]["flops"]), counted, "", ""],
        ["  VAE decode, FLOPs", tflop(ma["VAE decode"]["flops"]), tflop(mb["VAE decode"]["flops"]),
         ratio(ma["VAE decode"]["flops"], mb["VAE decode"]["flops"]), counted, "", ""],
    ]
    for label, what in (("denoiser step", "denoiser, 1 step"), ("VAE encode", "VAE encode"),
                        ("VAE decode", "VAE decode")):
        ea, eb = ma[label]["mem"], mb[label]["mem"]
        rows.append([f"  {what}: est. peak (weights + activations)", gib(ea["bytes"]), gib(eb["bytes"]),
                     ratio(ea["bytes"], eb["bytes"]), estimated, "", ""])
        aa, ab = ea["parts"]["activations_peak"], eb["parts"]["activations_peak"]
        rows.append(["    of which activations", gib(aa), gib(ab), ratio(aa, ab), estimated, "", ""])
    rows += [
        [f"TINY FLUX.1 Fill, {STEPS} steps{b_label}", "", "", "", "", "", ""],
        ["  end to end (A: crop .. stitch; B: prepare .. paste-back)", secs(at["total"]), secs(bt["total"]),
         ratio(at["total"], bt["total"]), measured, "", ""],
        ["    text encode (CLIP-L + T5)", secs(at["encode_prompt"]), secs(bt["encode_prompt"]), "", measured, "", ""],
        ["    fill condition (VAE encode)", secs(at["build_fill_condition"]), secs(bt["build_fill_condition"]),
         ratio(at["build_fill_condition"], bt["build_fill_condition"]), measured, "", ""],
        [f"    sampler ({STEPS} steps)", secs(at["sample_flux_fill"]), secs(bt["sample_flux_fill"]),
         ratio(at["sample_flux_fill"], bt["sample_flux_fill"]), measured, "", ""],
        ["    VAE decode", secs(at["decode_to_image"]), secs(bt["decode_to_image"]),
         ratio(at["decode_to_image"], bt["decode_to_image"]), measured, "", ""],
        ["    crop_for_inpaint / prepare image + mask", f"{secs(at['crop_for_inpaint'])} / "
         f"{secs(at['prepare_image_and_mask'])}", f"- / {secs(bt['prepare_image_and_mask'])}", "", measured, "", ""],
        ["    stitch / paste-back", secs(at["stitch"]), secs(bt["paste_back"]), "", measured, "", ""],
        [f"  crop_for_inpaint alone, {PHOTO_W}x{PHOTO_H} (median of {REPEATS})", secs(bl.median(crop_runs)), "", "",
         measured, "", ""],
        [f"  stitch alone, {PHOTO_W}x{PHOTO_H} (median of {REPEATS})", secs(bl.median(stitch_runs)), "", "",
         measured, "", ""],
        ["  peak RSS added by the run", gib(a_rss) if a_rss is not None else "n/a",
         gib(b_rss) if b_rss is not None else "n/a",
         ratio(a_rss, b_rss) if a_rss and b_rss else "", "measured (/proc VmHWM after a reset)", "", ""],
        ["CHECKS", "", "", "", "", "", ""],
        ["  output size", f"{a_size[2]}x{a_size[1]}", f"{bw}x{bh}", "", "measured", f"A: {PHOTO_W}x{PHOTO_H}",
         bl.verdict((a_size[2], a_size[1]) == (PHOTO_W, PHOTO_H))],
        ["  pixels outside the mask bit-identical", f"{'yes' if a_exact else 'NO'} ({a_kept:,} px)",
         f"{'yes' if b_exact else 'NO'} ({b_kept:,} px)", "", "measured (torch.equal)", "yes",
         bl.verdict(a_exact and b_exact)],
    ]
    notes = [
        "meta peaks count every weight the stage reads as resident for the whole stage (transformer 22.17 GiB "
        "bf16 in the denoiser step); not included: kernel workspaces, allocator rounding, CUDA context "
        "(fillscope/trace/cost.py). Attention is one aten.scaled_dot_product_attention op on meta, booked without "
        "a score matrix (as the flash / efficient CUDA kernels run it).",
        "no production time is printed: it would need an assumed throughput; the FLOP ratios are what carries "
        "over to a GPU (the denoiser runs `steps` times, the VAE once each way).",
        "the text encoders are the same for A and B (prompt only) and are not in the meta rows.",
    ]
    if not full_b:
        notes.append(
            f"tiny B ran the same photo at {bw}x{bh} ({bw * bh / (PHOTO_W * PHOTO_H):.0%} of the pixels, mask "
            f"scaled with it), not {PHOTO_W}x{PHOTO_H}: at full size the tiny B took 365 s and added 7.9 GiB of RSS "
            f"here (the VAE's mid-block attention over 196,608 latent positions grows with the square of the pixels), "
            f"too long for this bench; the tiny A/B ratios "
            f"therefore understate the saving (FILLSCOPE_BENCH_WHOLE_SIZE={PHOTO_W}x{PHOTO_H} runs it at full size).")
    notes.append(f"stitch reported {a['kept_reported']:,} kept pixels (its own count: paste mask == 0).")
    bl.print_report(
        f"bench_crop_stitch: crop and stitch vs whole image, {PHOTO_W}x{PHOTO_H} photo, {MASK_W}x{MASK_H} px mask",
        [
            f"how: (A) crop_for_inpaint(target_long_side={TARGET}, context_factor 1.5, padding 32) -> FLUX.1 Fill at "
            f"the crop's size -> stitch(feather 8); (B) FLUX.1 Fill on the whole image -> paste_back",
            f"crop: {rec.describe()} ({box.box_text()}); mask {MASK_W}x{MASK_H} at (top {MASK_TOP}, left {MASK_LEFT})",
            f"meta: production configs via load_stack('flux-fill', 'meta', dtype='bf16'), one run of each side "
            f"({meta_s:.1f} s with the stack build)",
            f"tiny: tests/tiny_flux.py folder, fp32, CPU, torch.set_num_threads({THREADS}), {STEPS} steps, guidance "
            f"{GUIDANCE}, seed {SEED}, 1 warm-up at 256x192, then A once and B once; folder build + load {load_s:.1f} s",
            f"script wall: {time.perf_counter() - t_script:.0f} s",
        ],
        rows,
        ["what", "A: crop and stitch", "B: whole image", "A/B", "provenance", "target", "result"],
        notes,
        watch,
    )
    return 0


if __name__ == "__main__":
    bl.run_main(main, "crop")
