"""Benchmark: what the wire recorder (nodes/wires.py) costs a run of ComfyUI's own "Flux Inpaint" template.

ComfyUI's flux_fill_inpaint_example (the installed comfyui_workflow_templates), converted to an API prompt with its
loaders swapped for tiny builds of ComfyUI's own classes (tests/comfy_templates.py) and its KSampler at the
template's own 20 steps, runs on two real servers from the same files: one recording (the default), one started with
FILLSCOPE_WIRES=off (nothing patched). Each round frees both servers' models and caches (/free), then runs the prompt
once on each, alternating which goes first; the CPU time of each server process over its run is read from /proc.

Two figures:
- the recorder's own time: what its code measured of itself over the recording server's runs (GET /fillscope/wires:
  recorder_seconds, its forward hooks included), as a share of that server's CPU time for the same runs. Target:
  at most 2 %;
- end to end: the median CPU time of a run on each server and their ratio (noisy on a shared 2-core machine: the
  spread of the pairs is printed with it; no target). FILLSCOPE_BENCH_CONTROL=1 starts both servers with the
  recorder off: the ratio two equal servers give, the noise floor of that figure.

Run from the repo root: .venv/bin/python bench/bench_wires.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

ROUNDS = int(os.environ.get("FILLSCOPE_BENCH_ROUNDS", "12"))
CONTROL = os.environ.get("FILLSCOPE_BENCH_CONTROL") == "1"  # both servers off: how far apart two equal servers land
TEMPLATE = "flux_fill_inpaint_example"
TARGET = 0.02


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, every thread


def as_shipped_steps(prompt: dict, ui: dict) -> None:
    """KSampler back at the template's own steps (comfy_templates.swapped lowers them for the tests)."""
    for node in ui["nodes"]:
        if node["type"] == "KSampler":
            prompt[str(node["id"])]["inputs"]["steps"] = node["widgets_values"][2]


def main() -> int:
    import comfy_templates as ct
    from comfy_server import ServerWithTestNodes

    watch = bl.CpuWatch()
    off = dict(os.environ, FILLSCOPE_WIRES="off")
    servers = {"on": ServerWithTestNodes(env=off if CONTROL else None), "off": ServerWithTestNodes(env=off)}
    try:
        for server in servers.values():
            server.start()
            server.install(ct.prepare)
        assert servers["off"].get_json("/fillscope/wires")["status"].startswith("off")
        prompt = ct.swapped(TEMPLATE, servers["on"].object_info())
        as_shipped_steps(prompt, ct.ui_template(TEMPLATE))
        steps = next(n["inputs"]["steps"] for n in prompt.values() if n["class_type"] == "KSampler")
        for server in servers.values():  # warm-up: imports, first allocations
            server.run(prompt, timeout=600)
        cpu = {"on": [], "off": []}
        own0 = servers["on"].get_json("/fillscope/wires")
        for i in range(ROUNDS):
            order = ("on", "off") if i % 2 == 0 else ("off", "on")
            for name in order:
                server = servers[name]
                server.free()
                before = cpu_seconds(server.proc.pid)
                server.run(prompt, timeout=600)
                cpu[name].append(cpu_seconds(server.proc.pid) - before)
        own1 = servers["on"].get_json("/fillscope/wires")
    finally:
        for server in servers.values():
            server.cleanup()
    own = own1.get("recorder_seconds", 0.0) - own0.get("recorder_seconds", 0.0)
    nodes = own1.get("nodes_recorded", 0) - own0.get("nodes_recorded", 0)
    share = own / sum(cpu["on"])
    on, off = bl.median(cpu["on"]), bl.median(cpu["off"])
    first = "run, server A: FILLSCOPE_WIRES=off too (CPU s)" if CONTROL else "run, recording (CPU s)"
    rows = [
        [first, f"{on:.3f}", ", ".join(f"{x:.3f}" for x in cpu["on"]), "", ""],
        ["run, FILLSCOPE_WIRES=off (CPU s)", f"{off:.3f}", ", ".join(f"{x:.3f}" for x in cpu["off"]), "", ""],
        ["ratio on/off of the medians", f"{on / off:.3f}", ", ".join(f"{a / b:.3f}" for a, b in zip(cpu["on"], cpu["off"])),
         "(no target)", ""],
        ["recorder's own time (s, all runs)", f"{own:.4f}", f"{nodes} node runs recorded, {own / max(nodes, 1) * 1e3:.3f} ms each",
         "", ""],
        ["recorder's share of the recording runs' CPU", f"{share:.2%}", "", f"<= {TARGET:.0%}", bl.verdict(share <= TARGET)],
    ]
    bl.print_report(
        f"bench_wires: the wire recorder on ComfyUI's {TEMPLATE} (tiny stand-ins, {steps} steps, CPU)"
        + (" -- CONTROL: both servers FILLSCOPE_WIRES=off" if CONTROL else ""),
        [f"how: two servers from the same files (recording / FILLSCOPE_WIRES=off), 1 warm-up run each, then {ROUNDS} "
         "rounds of /free + one run on each (alternating first); server CPU time from /proc/<pid>/stat; the recorder's "
         "own time from GET /fillscope/wires (recorder_seconds, measured by its code, hooks included)"],
        rows, ["measure", "value", "runs", "target", "verdict"], watch=watch)
    return 0 if share <= TARGET else 1


if __name__ == "__main__":
    bl.run_main(main, "bench_wires")
