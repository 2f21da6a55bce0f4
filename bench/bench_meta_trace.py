"""Benchmark: the meta full-topology FLUX.1 Fill trace through FillScope's nodes in a real ComfyUI server.

Queues api_workflows/flux_fill_meta_trace.api.json (1024x1024, production configs of CLIP-L, T5-XXL, the 12B Fill
transformer and the VAE, all on the meta device) RUNS times on one fresh server (tests/comfy_server.ComfyServer).
Every run changes the sampler seed, the CLIP/T5 prompt text, the loaders' placeholder_seed and the synthetic
mask fraction, so ComfyUI's cache re-runs every node (checked through the execution_cached message).

Measured per run: wall time from POST /prompt until /history shows the prompt finished (polled every
POLL_S), the execution time between the history's execution_start and execution_success timestamps, the nodes'
own wall_s (their shape records), and the server's VmRSS / VmHWM (peak RSS) from /proc/<pid>/status.
Targets: wall < 5 s, server peak RSS < 1.5 GiB.

Run from the repo root: .venv/bin/python bench/bench_meta_trace.py
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402
from comfy_server import ComfyServer, comfyui_installed, comfyui_path  # noqa: E402

RUNS = 3
POLL_S = 0.01
WALL_TARGET_S = 5.0
RSS_TARGET = 1.5 * 2**30
WORKFLOW = bl.REPO / "api_workflows" / "flux_fill_meta_trace.api.json"
MASK_FRACTIONS = (0.5, 0.45, 0.55)


def by_class(prompt: dict, class_type: str) -> list[str]:
    return [k for k, v in prompt.items() if v["class_type"] == class_type]


def variant(base: dict, i: int) -> dict:
    p = copy.deepcopy(base)
    for cls in ("FillScopeLoadCLIPL", "FillScopeLoadT5", "FillScopeLoadFluxFillTransformer", "FillScopeLoadVAE"):
        for nid in by_class(p, cls):
            p[nid]["inputs"]["placeholder_seed"] = 100 + i
    for cls in ("FillScopeFluxPrompt", "FillScopeCLIPLEncode", "FillScopeT5Encode"):
        for nid in by_class(p, cls):
            p[nid]["inputs"]["text"] = f"a red brick fireplace, bench run {i + 1}"
    for nid in by_class(p, "FillScopeFluxFillSampler"):
        p[nid]["inputs"]["seed"] = 1000 + i
    for nid in by_class(p, "FillScopeSyntheticImageMask"):
        p[nid]["inputs"]["mask_fraction"] = MASK_FRACTIONS[i % len(MASK_FRACTIONS)]
    return p


def wait_fast(server: ComfyServer, prompt_id: str, timeout: float = 300.0) -> dict:
    deadline = time.perf_counter() + timeout
    while True:
        entry = server.history(prompt_id)
        status = entry.get("status") or {}
        if entry and (status.get("completed") or status.get("status_str") in ("success", "error")):
            return entry
        if server.proc is not None and server.proc.poll() is not None:
            raise RuntimeError(f"ComfyUI exited while running the trace:\n{server.log_text()[-5000:]}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"prompt {prompt_id} not finished after {timeout:.0f}s")
        time.sleep(POLL_S)


def messages(entry: dict) -> dict:
    return {kind: data for kind, data in entry.get("status", {}).get("messages", [])}


def main() -> int:
    if not comfyui_installed():
        print(f"[meta] ComfyUI not installed at {comfyui_path()} (run `make setup`): nothing measured")
        return 1
    watch = bl.CpuWatch()
    base = json.loads(WORKFLOW.read_text())
    server = ComfyServer()
    runs = []
    try:
        t = time.perf_counter()
        server.start()
        start_s = time.perf_counter() - t
        pid = server.proc.pid
        before = bl.proc_status(pid)
        print(f"[meta] server up in {start_s:.1f} s; before the first prompt: RSS {bl.gib(before['VmRSS'])}, "
              f"peak {bl.gib(before['VmHWM'])}", flush=True)
        for i in range(RUNS):
            prompt = variant(base, i)
            t0 = time.perf_counter()
            prompt_id = server.queue(prompt)
            entry = wait_fast(server, prompt_id)
            wall = time.perf_counter() - t0
            status = entry.get("status", {})
            if status.get("status_str") != "success":
                raise RuntimeError(f"run {i + 1} failed: {json.dumps(status, indent=1)[:5000]}")
            msgs = messages(entry)
            exec_s = (msgs["execution_success"]["timestamp"] - msgs["execution_start"]["timestamp"]) / 1000.0
            cached = list(msgs.get("execution_cached", {}).get("nodes", []))
            mem = bl.proc_status(pid)
            node_walls = {}
            for nid, out in entry.get("outputs", {}).items():
                for doc in out.get("fillscope_shapes", []):
                    rec = doc["node"]
                    if nid not in cached:
                        node_walls[f"{nid} {rec['node'].removeprefix('FillScope')}"] = rec["wall_s"]
            runs.append({"wall": wall, "exec": exec_s, "cached": cached, "mem": mem, "nodes": node_walls})
            print(f"[meta] run {i + 1}/{RUNS}: wall {wall:.2f} s, execution {exec_s:.2f} s, cached nodes "
                  f"{cached or 'none'} of {len(prompt)}, RSS {bl.gib(mem['VmRSS'])}, peak {bl.gib(mem['VmHWM'])}",
                  flush=True)
    finally:
        server.cleanup()

    walls = [r["wall"] for r in runs]
    execs = [r["exec"] for r in runs]
    peak = max(r["mem"]["VmHWM"] for r in runs)
    med = bl.median
    rows = [
        ["wall, POST /prompt -> finished (median)", f"{med(walls):.2f} s", ", ".join(f"{w:.2f}" for w in walls),
         f"< {WALL_TARGET_S:.0f} s", bl.verdict(med(walls) < WALL_TARGET_S)],
        ["wall, first run (cold: lazy diffusers/transformers import)", f"{walls[0]:.2f} s", "",
         f"< {WALL_TARGET_S:.0f} s", bl.verdict(walls[0] < WALL_TARGET_S)],
        ["execution_start -> execution_success (median)", f"{med(execs):.2f} s", ", ".join(f"{e:.2f}" for e in execs),
         "", ""],
        ["server RSS before the first prompt (baseline)", bl.gib(before["VmRSS"]), "", "", ""],
        ["server peak RSS (VmHWM) before the first prompt", bl.gib(before["VmHWM"]), "", "", ""],
        ["server peak RSS (VmHWM) after all runs", bl.gib(peak),
         ", ".join(f"{r['mem']['VmHWM'] / 2**30:.3f}" for r in runs), "< 1.5 GiB", bl.verdict(peak < RSS_TARGET)],
        ["peak RSS added by the trace (after - baseline RSS)", bl.gib(peak - before["VmRSS"]), "", "", ""],
        ["nodes served from cache", "/".join(str(len(r["cached"])) for r in runs), "per run", "0",
         bl.verdict(all(not r["cached"] for r in runs))],
    ]
    names = sorted(runs[-1]["nodes"], key=lambda n: int(n.split()[0]) if n.split()[0].isdigit() else 10**9)
    node_rows = []
    for name in names:
        vals = [r["nodes"][name] for r in runs if name in r["nodes"]]
        node_rows.append([f"  node {name} (own wall_s, median)", f"{med(vals):.3f} s",
                          ", ".join(f"{v:.3f}" for v in vals), "", ""])
    bl.print_report(
        "bench_meta_trace: FLUX.1 Fill meta trace (api_workflows/flux_fill_meta_trace.api.json) in a real ComfyUI server",
        [
            f"how: one fresh ComfyUI server (--cpu), {RUNS} prompts, each with a new sampler seed, CLIP/T5 text, "
            f"loader placeholder_seed and mask_fraction so no node is cached; median of {RUNS}; wall polled every "
            f"{POLL_S * 1000:.0f} ms; execution time from the history's message timestamps (ms)",
            f"server start-up (not a target): {start_s:.1f} s",
        ],
        rows + node_rows,
        ["measurement", "value", "runs", "target", "result"],
        ["node wall_s comes from each FillScope node's shape record (ShapeRecorder, perf_counter inside execute).",
         "the first run's loaders import diffusers/transformers (the pack imports them lazily, on first use)."],
        watch,
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:
        print(f"[meta] measurement failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
