"""Benchmark: what the tracers (fillscope.trace.modules / lines / cost) cost, and the figures they give.

1. Tiny FLUX.1 Fill (tests/tiny_flux.py's models as engine Components, 256x256, 8 steps, fp32, CPU): the engine
   run (CLIP-L, T5, VAE encode, sampler, VAE decode; tests/test_tracers.run_flux_step) untraced, under
   ModuleTracer and under LineTracer, alternating, 1 warm-up + REPEATS rounds; medians and their ratios.
   Target: module tracing < 1.15x untraced. Line tracing has no target (printed).
2. Meta full topology (production configs, 1024x1024, batch 1), FLUX.1 Fill and SD3-medium + ControlNet:
   stack build, one run untraced / under ModuleTracer / under LineTracer (one denoiser step; see
   tests/test_tracers.run_flux_step / run_sd3_step), count_flops and estimate_peak_memory of the denoiser step,
   with the figures each gives (rows / hits, TFLOP, estimated GiB).

Run from the repo root: .venv/bin/python bench/bench_tracing.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

import torch  # noqa: E402

from fillscope.trace.cost import count_flops, estimate_peak_memory  # noqa: E402
from fillscope.trace.lines import LineTracer  # noqa: E402
from fillscope.trace.modules import ModuleTracer  # noqa: E402
from test_tracers import (  # noqa: E402
    flux_denoiser_step, flux_meta_stack, flux_tiny_stack, flux_trace_models, run_flux_step, run_sd3_step,
    sd3_denoiser_step, sd3_meta_stack, split_vae,
)

THREADS = int(os.environ.get("FILLSCOPE_BENCH_THREADS", "1"))  # as bench_tiny_vs_diffusers: 1 thread, less noise
REPEATS = 5
TINY_H = TINY_W = 256
TINY_STEPS = 8
MODULE_TARGET = 1.15
META_REPEATS = 3


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def traced_module_run(models, run):
    with ModuleTracer(models) as tr:
        run()
    return tr


def traced_line_run(run):
    with LineTracer() as lt:
        run()
    return lt


def quiet_libraries() -> None:
    import diffusers.utils.logging as dlog
    import transformers.utils.logging as tlog

    for lib in (dlog, tlog):
        lib.set_verbosity_error()
        lib.disable_progress_bar()


def tiny_rows() -> tuple[list, list]:
    stack = flux_tiny_stack(0)
    models = flux_trace_models(stack)
    run = lambda: run_flux_step(stack, TINY_H, TINY_W, steps=TINY_STEPS)  # noqa: E731
    run()
    traced_module_run(models, run)
    traced_line_run(run)
    plain, mod, line = [], [], []
    for i in range(REPEATS):
        plain.append(timed(run)[0])
        dt, tr = timed(lambda: traced_module_run(models, run))
        mod.append(dt)
        dt, lt = timed(lambda: traced_line_run(run))
        line.append(dt)
        print(f"[tracing] tiny round {i + 1}/{REPEATS}: untraced {plain[-1]:.3f} s, modules {mod[-1]:.3f} s, "
              f"lines {line[-1]:.3f} s", flush=True)
    med = bl.median
    r_mod, r_line = med(mod) / med(plain), med(line) / med(plain)
    fmt = lambda xs: ", ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    rows = [
        ["tiny FLUX run, untraced", f"{med(plain):.3f} s", fmt(plain), "", ""],
        ["tiny FLUX run, ModuleTracer", f"{med(mod):.3f} s", fmt(mod), "", ""],
        ["  module tracing overhead (ratio of medians)", f"{r_mod:.3f}x",
         fmt([m / p for m, p in zip(mod, plain)]), f"< {MODULE_TARGET}x", bl.verdict(r_mod < MODULE_TARGET)],
        [f"  module rows / hits ({TINY_STEPS} transformer forwards)", f"{len(tr.rows)} / {tr.hits}", "", "", ""],
        ["tiny FLUX run, LineTracer (diffusers + transformers)", f"{med(line):.3f} s", fmt(line), "", ""],
        ["  line tracing overhead (ratio of medians)", f"{r_line:.3f}x",
         fmt([x / p for x, p in zip(line, plain)]), "", ""],
        [f"  line rows / hits ({lt.tracer}, Python {lt.python})", f"{len(lt.rows)} / {lt.hits}", "", "", ""],
    ]
    return rows, []


def meta_rows(family: str) -> tuple[list, list]:
    if family == "FLUX.1 Fill":
        build, run_one, step_of = flux_meta_stack, run_flux_step, flux_denoiser_step
        models_of = flux_trace_models
    else:
        build, run_one, step_of = sd3_meta_stack, run_sd3_step, sd3_denoiser_step
        models_of = lambda s: {k: c.model for k, c in s.items()}  # noqa: E731
    build_s, stack = timed(build)
    run = lambda: run_one(stack)  # noqa: E731
    run()  # warm-up: tokenizer caches, lazy imports
    plain = [timed(run)[0] for _ in range(META_REPEATS)]
    mod_s, tr = timed(lambda: traced_module_run(models_of(stack), run))
    line_s, lt = timed(lambda: traced_line_run(run))
    step = step_of(stack)
    flops_s, (flops, per_module) = timed(lambda: count_flops(step))
    mem_s, mem = timed(lambda: estimate_peak_memory(step))
    per = {k: v for k, v in tr.per_component().items() if k != "vae"}
    per.update(split_vae(tr))
    parts = mem["parts"]
    gib = lambda n: f"{n / 2**30:.2f} GiB"  # noqa: E731
    big = sorted(((k, v) for k, v in per_module.items() if "." not in k and k != "Global"), key=lambda kv: -kv[1])
    rows = [
        [f"meta {family}: build the stack (production configs)", f"{build_s:.2f} s", "", "", ""],
        ["  one run, untraced (median)", f"{bl.median(plain):.2f} s", ", ".join(f"{x:.2f}" for x in plain), "", ""],
        ["  one run under ModuleTracer", f"{mod_s:.2f} s", "", "", ""],
        ["    module rows / hits", f"{len(tr.rows):,} / {tr.hits:,}", "", "", ""],
    ]
    rows += [[f"      {k}", f"{v['rows']:,} / {v['hits']:,}", "", "", ""] for k, v in per.items()]
    rows += [
        ["  one run under LineTracer", f"{line_s:.2f} s", "", "", ""],
        [f"    line rows / hits ({lt.tracer}, Python {lt.python})", f"{len(lt.rows):,} / {lt.hits:,}", "", "", ""],
        ["  count_flops, one denoiser step", f"{flops_s:.2f} s", "", "", ""],
        ["    TFLOP per denoiser step", f"{flops / 1e12:.2f}",
         ", ".join(f"{k} {v / 1e12:.2f}" for k, v in big), "", ""],
        ["  estimate_peak_memory, one denoiser step", f"{mem_s:.2f} s", "", "", ""],
        ["    estimated peak (weights + activations)", gib(mem["bytes"]),
         f"parameters {gib(parts['parameters'])}, other resident {gib(parts['other_resident'])}, "
         f"activations {gib(parts['activations_peak'])}", "", ""],
    ]
    return rows, []


def main() -> int:
    watch = bl.CpuWatch()
    quiet_libraries()
    torch.set_num_threads(THREADS)
    rows, notes = tiny_rows()
    for family in ("FLUX.1 Fill", "SD3 ControlNet"):
        print(f"[tracing] meta {family} ...", flush=True)
        r, n = meta_rows(family)
        rows += r
        notes += n
    bl.print_report(
        "bench_tracing: module / line tracers, FLOP count and memory estimate (fillscope.trace)",
        [
            f"how: tiny FLUX.1 Fill ({TINY_W}x{TINY_H}, {TINY_STEPS} steps, fp32, CPU), untraced / ModuleTracer / "
            f"LineTracer alternating, 1 warm-up + {REPEATS} rounds, medians; meta stacks at 1024x1024, one run "
            f"each traced after 1 warm-up (untraced: median of {META_REPEATS}); torch.set_num_threads({THREADS})",
            "meta run = text encoders, VAE encode, ONE denoiser step (FLUX: 1 transformer forward; SD3: CFG batch 2, "
            "ControlNet + transformer once), VAE decode; FLOPs / memory of the denoiser step alone",
        ],
        rows,
        ["measurement", "value", "runs / detail", "target", "result"],
        notes + [
            "module rows/hits definition: fillscope/trace/modules.py; FLUX traces CLIP-L's text transformer (no "
            "projection), SD3 the CLIP models with their projections; VAE split by encoder.* / decoder.*.",
            "line rows/hits depend on the driver code and the tracer (sys.settrace vs sys.monitoring): not "
            "comparable across Python versions.",
            "memory is an ESTIMATE (fillscope/trace/cost.py): weights + tracked activations, no allocator overhead.",
        ],
        watch,
    )
    return 0


if __name__ == "__main__":
    bl.run_main(main, "tracing")
