"""Benchmark: FillScope's FLUX.1 Fill engine vs diffusers' FluxFillPipeline on the same tiny model, same process.

Builds the tiny FLUX.1 Fill folder (tests/tiny_flux.build_tiny_flux_fill_folder: real geometry, toy widths, real
tokenizers) and loads it once for each side, outside the timing:
  (a) FillScope: masks.prepare_image_and_mask, then the pipeline's run (fillscope/pipelines/flux_fill.py: the
      same stage functions the nodes call, with a ShapeRecorder's observe as the nodes pass; no ComfyUI progress
      callback, no paste-back: diffusers has neither);
  (b) diffusers FluxFillPipeline.__call__ on a pipeline loaded once (tests/tiny_flux.run_diffusers_fill with
      pipe=..., encode_mode="argmax", output_type="pt").
Same image, mask, prompt, seed, steps and guidance; fp32 on the CPU; torch.set_num_threads fixed. One warm-up
each, then REPEATS alternating a/b pairs; medians, the ratio FillScope/diffusers (target < 1.1) and the max abs
difference between the two outputs (expected ~1e-5).

Run from the repo root: .venv/bin/python bench/bench_tiny_vs_diffusers.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

sys.path.insert(0, str(bl.REPO))

import torch  # noqa: E402

from fillscope import masks, text, vae  # noqa: E402
from fillscope.pipelines import flux_fill  # noqa: E402
from fillscope.trace.records import ShapeRecorder  # noqa: E402
from tiny_flux import build_tiny_flux_fill_folder, load_fill_pipeline, run_diffusers_fill  # noqa: E402

H = W = 256
STEPS = 8
GUIDANCE = 30.0
SEED = 42
REPEATS = 5
THREADS = bl.bench_threads()
RATIO_TARGET = 1.1
DIFF_EXPECTED = 1e-4  # "agree to ~1e-5": flagged when clearly above
PROMPT = "a red brick fireplace in a living room"


def inputs():
    g = torch.Generator().manual_seed(7)
    ys = torch.linspace(0, 1, H)[:, None].expand(H, W)
    xs = torch.linspace(0, 1, W)[None, :].expand(H, W)
    image = torch.stack([xs, ys, 0.5 * (1 - xs)], dim=-1)[None] * 0.8 + 0.2 * torch.rand(1, H, W, 3, generator=g)
    mask = torch.zeros(1, H, W)
    mask[:, H // 4 : 3 * H // 4, W // 4 : 3 * W // 4] = 1.0
    return image.contiguous(), mask


def fillscope_run(stack, image, mask, stages: dict | None = None):
    """The pipeline (fillscope/pipelines/flux_fill.py run), observed as the nodes observe it, with per-stage times."""
    timings: dict = {}
    t0 = time.perf_counter()
    prepared = masks.prepare_image_and_mask(image, mask, invert=False, threshold=0.5, grow=0, feather=0, size_mode="pad")
    timings["prepare image + mask"] = time.perf_counter() - t0
    rec = ShapeRecorder("bench")
    done = flux_fill.run(stack, PROMPT, prepared, steps=STEPS, guidance=GUIDANCE, seed=SEED, denoise=1.0,
                         observe=rec.observe, timings=timings)
    if stages is not None:
        for name, key in (("text encode (CLIP-L + T5)", "encode_prompt"), ("prepare image + mask", "prepare image + mask"),
                          ("fill condition (1 VAE encode)", "build_fill_condition"),
                          (f"sampler ({STEPS} steps)", "sample_flux_fill"), ("VAE decode", "decode_to_image")):
            stages.setdefault(name, []).append(timings[key])
    return done.image  # [1,H,W,3]


def diffusers_run(pipe, image, mask):
    # contiguous NCHW: a permuted (channels_last-strided) view makes diffusers' VAE run channels_last convolutions,
    # which on this CPU moved the output by up to 7e-5 (and changes its speed); contiguous is FillScope's layout.
    return run_diffusers_fill(
        None, image.permute(0, 3, 1, 2).contiguous(), mask[:, None], PROMPT, height=H, width=W, steps=STEPS,
        guidance_scale=GUIDANCE, seed=SEED, encode_mode="argmax", output_type="pt", pipe=pipe,
    )  # [1,3,H,W]


def instrumented_diffusers(pipe, image, mask) -> dict:
    """One extra, untimed-for-the-ratio diffusers run with its stages timed (module hooks / method wrappers),
    so its breakdown can be set against FillScope's."""
    stats: dict[str, list] = {}

    def add(name, dt):
        c = stats.setdefault(name, [0, 0.0])
        c[0] += 1
        c[1] += dt

    handles, patched = [], []
    for name, mod in (("text encoders (CLIP-L + T5)", pipe.text_encoder), ("text encoders (CLIP-L + T5)", pipe.text_encoder_2),
                      (f"transformer ({STEPS} steps)", pipe.transformer)):
        starts = []
        handles.append(mod.register_forward_pre_hook(lambda m, a, starts=starts: starts.append(time.perf_counter())))
        handles.append(mod.register_forward_hook(lambda m, a, o, starts=starts, name=name: add(name, time.perf_counter() - starts.pop())))
    for meth, name in (("encode", "VAE encode"), ("decode", "VAE decode")):
        orig = getattr(pipe.vae, meth)

        def wrapper(*a, _orig=orig, _name=name, **k):
            t = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                add(_name, time.perf_counter() - t)

        setattr(pipe.vae, meth, wrapper)
        patched.append(meth)
    try:
        t = time.perf_counter()
        diffusers_run(pipe, image, mask)
        total = time.perf_counter() - t
    finally:
        for h in handles:
            h.remove()
        for meth in patched:
            delattr(pipe.vae, meth)  # back to the class method
    stats["total (instrumented run)"] = [1, total]
    return stats


def main() -> int:
    watch = bl.CpuWatch()
    bl.quiet_libraries()
    torch.set_num_threads(THREADS)
    with tempfile.TemporaryDirectory(prefix="fillscope-bench-") as tmp:
        t = time.perf_counter()
        folder = build_tiny_flux_fill_folder(Path(tmp) / "FLUX.1-Fill-tiny", seed=0)
        build_s = time.perf_counter() - t
        kw = dict(dtype="fp32", device="cpu")
        t = time.perf_counter()
        stack = {
            "clip_l": text.load_clip_l(folder, **kw),
            "t5": text.load_t5(folder, **kw),
            "transformer": flux_fill.load_flux_fill_transformer(folder, **kw),
            "vae": vae.load_vae(folder, **kw),
        }
        load_a = time.perf_counter() - t
        t = time.perf_counter()
        pipe = load_fill_pipeline(folder)
        load_b = time.perf_counter() - t
        print(f"[tiny] folder built in {build_s:.1f} s; loaded once: FillScope {load_a:.2f} s, diffusers {load_b:.2f} s",
              flush=True)

        image, mask = inputs()
        stages = {}
        ta, tb, diffs = bl.alternate(
            lambda: fillscope_run(stack, image, mask, stages), lambda: diffusers_run(pipe, image, mask), REPEATS,
            lambda a, b: float((a.permute(0, 3, 1, 2).double() - b.double()).abs().max()),
            warm_up=(lambda: fillscope_run(stack, image, mask), lambda: diffusers_run(pipe, image, mask)),
            on_pair=lambda i, sa, sb, d: print(f"[tiny] pair {i + 1}/{REPEATS}: FillScope {sa:.3f} s, diffusers "
                                               f"{sb:.3f} s, max |a-b| {d:.2e}", flush=True))
        breakdown = instrumented_diffusers(pipe, image, mask)

    dmax = max(diffs)
    rows = bl.pair_rows(ta, tb, "(a) FillScope engine, node call sequence", "(b) diffusers FluxFillPipeline.__call__",
                        RATIO_TARGET)
    rows.append(bl.diff_row("max |a - b| over the outputs ([0,1] pixels)", dmax, "~1e-5", dmax < DIFF_EXPECTED))
    for name, xs in stages.items():
        rows.append([f"  (a) stage: {name}", f"{bl.median(xs) * 1e3:.1f} ms", ", ".join(f"{x * 1e3:.1f}" for x in xs),
                     "", ""])
    for name, (count, secs) in breakdown.items():
        rows.append([f"  (b) stage, 1 instrumented run: {name}", f"{secs * 1e3:.1f} ms", f"{count} call(s)", "", ""])
    bl.print_report(
        f"bench_tiny_vs_diffusers: tiny FLUX.1 Fill, {W}x{H}, {STEPS} steps, fp32, CPU, same process and folder",
        [
            f"{bl.pairs_how(REPEATS, THREADS, SEED)}, guidance {GUIDANCE}, mask = centre half; diffusers with VAE "
            "encode by the mean (encode_mode='argmax')",
            f"one-off (not targets): tiny folder build {build_s:.1f} s, FillScope load {load_a:.2f} s, "
            f"diffusers pipeline load {load_b:.2f} s",
        ],
        rows,
        bl.PAIR_HEADER,
        ["diffusers VAE-encodes the full image as well as the masked one (F:663-665, result unused at strength 1); "
         "FillScope encodes only the masked image at denoise 1.",
         "(b) stages come from one extra diffusers run with hooks, after the timed pairs; they are not in the medians."],
        watch,
    )
    return 0


if __name__ == "__main__":
    bl.run_main(main, "tiny")
