"""Benchmark: FillScope's import time at ComfyUI start-up (target < 0.3 s).

(a) Real server: start ComfyUI (tests/comfy_server.ComfyServer) REPEATS times and read the FillScope line of
    the "Import times for custom nodes:" block it logs. ComfyUI times exec_module of the pack's __init__,
    its pyproject/web-folder handling, comfy_entrypoint(), get_node_list() and every node's GET_SCHEMA(),
    and prints the result with one decimal (0.1 s resolution).
(b) In-process: a fresh interpreter per repeat puts the ComfyUI root on sys.path, imports comfy_api.latest and
    folder_paths first (ComfyUI has them loaded when it imports custom nodes), then times loading the pack's
    __init__ as a package, comfy_entrypoint() + get_node_list(), and the nodes' GET_SCHEMA(); it reports
    whether diffusers/transformers got imported (they must not be).

Run from the repo root: .venv/bin/python bench/bench_import_time.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402
from comfy_server import ComfyServer, comfyui_installed, comfyui_path  # noqa: E402

REPEATS = 3
TARGET_S = 0.3
PACK_DIR_NAME = "FillScope"

LINE = re.compile(r"^\s*([0-9.]+) seconds( \(IMPORT FAILED\))?: (.+?)\s*$")

CHILD = r"""
import asyncio, importlib.util, json, sys, time
comfy_root, repo = sys.argv[1], sys.argv[2]
sys.path.insert(0, comfy_root)
t = time.perf_counter()
import comfy_api.latest  # what ComfyUI has loaded before custom nodes
import folder_paths  # ditto; the loaders' GET_SCHEMA lists models/diffusers through it
pre_s = time.perf_counter() - t
before = set(sys.modules)

t0 = time.perf_counter()
spec = importlib.util.spec_from_file_location("FillScope", repo + "/__init__.py", submodule_search_locations=[repo])
mod = importlib.util.module_from_spec(spec)
sys.modules["FillScope"] = mod
spec.loader.exec_module(mod)
t1 = time.perf_counter()

async def entry():
    a = time.perf_counter()
    ext = await mod.comfy_entrypoint()
    nodes = await ext.get_node_list()
    b = time.perf_counter()
    return nodes, b - a

nodes, entry_s = asyncio.run(entry())
t2 = time.perf_counter()
for n in nodes:
    n.GET_SCHEMA()
t3 = time.perf_counter()
new = sorted(set(sys.modules) - before)
top = sorted({m.split(".")[0] for m in new if not m.startswith("FillScope")})
print("RESULT " + json.dumps({
    "pre_s": pre_s,
    "exec_module_s": t1 - t0,
    "entrypoint_s": entry_s,
    "schema_s": t3 - t2,
    "nodes": len(nodes),
    "heavy": [m for m in ("diffusers", "transformers") if m in sys.modules],
    "torch_loaded_before": "torch" in before,
    "new_modules": len(new),
    "new_top_level": top,
}))
"""


def server_import_time(log: str) -> tuple[float | None, bool, list[str]]:
    """(seconds, failed, block lines) of the FillScope line in the 'Import times for custom nodes:' block."""
    lines = log.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "Import times for custom nodes:")
    except StopIteration:
        return None, False, []
    block = []
    for l in lines[start + 1 :]:
        m = LINE.match(l)
        if not m:
            break
        block.append(l.strip())
        path = m.group(3)
        if Path(path).name == PACK_DIR_NAME:
            return float(m.group(1)), bool(m.group(2)), block
    return None, False, block


def run_servers() -> tuple[list[float], list[float], list[str]]:
    times, starts, notes = [], [], []
    for i in range(REPEATS):
        server = ComfyServer()
        t = time.perf_counter()
        try:
            server.start()
            starts.append(time.perf_counter() - t)
            log = server.log_text()
        finally:
            server.cleanup()
        secs, failed, block = server_import_time(log)
        if secs is None:
            raise RuntimeError(
                f"server start {i + 1}: no '{PACK_DIR_NAME}' line in the 'Import times for custom nodes:' block "
                f"(block: {block}); is the pack linked into {comfyui_path() / 'custom_nodes'}? (make setup)"
            )
        if failed:
            raise RuntimeError(f"server start {i + 1}: ComfyUI reports IMPORT FAILED for FillScope: {block}")
        times.append(secs)
        print(f"[import] server start {i + 1}/{REPEATS}: FillScope {secs:.1f} s (logged), "
              f"server answered after {starts[-1]:.1f} s", flush=True)
    return times, starts, notes


def run_in_process() -> list[dict]:
    results = []
    for i in range(REPEATS):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(comfyui_path()), str(bl.REPO)],
            capture_output=True, text=True, timeout=300, cwd=str(bl.REPO),
        )
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            raise RuntimeError(f"in-process import run {i + 1} failed (rc {out.returncode}):\n{out.stdout}\n{out.stderr}")
        r = json.loads(line[len("RESULT "):])
        results.append(r)
        total = r["exec_module_s"] + r["entrypoint_s"]
        print(f"[import] in-process {i + 1}/{REPEATS}: import {r['exec_module_s'] * 1e3:.1f} ms, "
              f"entrypoint+get_node_list {r['entrypoint_s'] * 1e3:.1f} ms (sum {total * 1e3:.1f} ms), "
              f"GET_SCHEMA x{r['nodes']} {r['schema_s'] * 1e3:.1f} ms, heavy imported: {r['heavy'] or 'none'}",
              flush=True)
    return results


def main() -> int:
    if not comfyui_installed():
        print(f"[import] ComfyUI not installed at {comfyui_path()} (run `make setup`): nothing measured")
        return 1
    watch = bl.CpuWatch()
    server_times, starts, _ = run_servers()
    inproc = run_in_process()

    med = bl.median
    srv = med(server_times)
    imp = med([r["exec_module_s"] for r in inproc])
    ent = med([r["entrypoint_s"] for r in inproc])
    tot = med([r["exec_module_s"] + r["entrypoint_s"] for r in inproc])
    sch = med([r["schema_s"] for r in inproc])
    tot_sch = med([r["exec_module_s"] + r["entrypoint_s"] + r["schema_s"] for r in inproc])
    heavy = sorted({m for r in inproc for m in r["heavy"]})
    top = inproc[-1]["new_top_level"]

    rows = [
        ["server log: FillScope import time", f"{srv:.1f} s", f"{', '.join(f'{t:.1f}' for t in server_times)}",
         f"< {TARGET_S} s", bl.verdict(srv < TARGET_S)],
        ["in-process: exec_module(__init__)", f"{imp * 1e3:.1f} ms",
         ", ".join(f"{r['exec_module_s'] * 1e3:.1f}" for r in inproc), "", ""],
        ["in-process: comfy_entrypoint + get_node_list", f"{ent * 1e3:.1f} ms",
         ", ".join(f"{r['entrypoint_s'] * 1e3:.1f}" for r in inproc), "", ""],
        ["in-process: import + entrypoint + node list", f"{tot * 1e3:.1f} ms",
         ", ".join(f"{(r['exec_module_s'] + r['entrypoint_s']) * 1e3:.1f}" for r in inproc),
         f"< {TARGET_S * 1e3:.0f} ms", bl.verdict(tot < TARGET_S)],
        [f"in-process: + GET_SCHEMA of {inproc[-1]['nodes']} nodes (as ComfyUI)", f"{tot_sch * 1e3:.1f} ms",
         ", ".join(f"{(r['exec_module_s'] + r['entrypoint_s'] + r['schema_s']) * 1e3:.1f}" for r in inproc),
         f"< {TARGET_S * 1e3:.0f} ms", bl.verdict(tot_sch < TARGET_S)],
        ["in-process: diffusers/transformers imported", ", ".join(heavy) or "no", "", "no",
         bl.verdict(not heavy)],
    ]
    bl.print_report(
        "bench_import_time: FillScope import at ComfyUI start-up",
        [
            f"how: {REPEATS} real ComfyUI server starts (ComfyServer, --cpu), FillScope line of 'Import times for "
            f"custom nodes:'; {REPEATS} fresh interpreters timing the pack load in-process "
            f"(comfy_api.latest + folder_paths imported first, outside the timing); median of {REPEATS}",
            f"server start to first /object_info answer (not a target): median {med(starts):.1f} s",
        ],
        rows,
        ["measurement", "median", "runs", "target", "result"],
        [
            "ComfyUI logs import times with one decimal: '0.0 s' means under 0.05 s.",
            f"GET_SCHEMA alone: median {sch * 1e3:.1f} ms (ComfyUI calls it inside its timed section).",
            f"modules the pack load added (top level, besides FillScope): {', '.join(top) or 'none'}; "
            f"torch already loaded before: {inproc[-1]['torch_loaded_before']}.",
        ],
        watch,
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # the measurement failed: say why, exit non-zero
        print(f"[import] measurement failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
