"""Shape records: what passed through a node, measured in this run, with provenance.

Schema `fillscope.shapes/1` (the JSON every node's `shapes` output holds):

    {"schema": "fillscope.shapes/1",
     "node":  RECORD,              # this node
     "trail": [RECORD, ...]}       # the FillScope nodes upstream of it, in execution order

    RECORD = {"id", "node", "title", "wall_s", "peak_cuda_bytes" (null off CUDA),
              "tensors": [{"name", "role": input|output|internal, "shape", "dtype", "device",
                           "provenance": "measured" | "static-config" | "from <where> (<what>)"}],
              "facts": {name: value}, "notes": [...], "warnings": [...],
              "table": "flux_fill" | "sd3_controlnet",    # optional
              "geometry": {"width", "height", "grid_width", "grid_height", "mode": exact|pad|crop,
                           "top", "left"},                # optional
              "tiles": {"width", "height", "tile", "overlap", "mode",
                        "tiles": [{"index", "box", "row", "col", "sampled", "tokens", "repaint_pixels", "seconds",
                                   "calls" (mode shared)}]}}  # optional: a tiled run (nodes/tiled.py)

`table` (set by the model-specific nodes) names the boundary table the graph is summarised by
(fillscope/trace/summary.py); `geometry` (set where the mask is prepared) is where the model grid sits in the
input image, so a table can say when a size is padded or cropped; `tiles` is where a tiled run's tiles lie (the
Shapes Report page draws it as a tile map).

A tensor row is `measured` when its shape was read off a tensor that existed in this run (on cuda, cpu or
meta: `device` says which), `static-config` when it comes from a config file without running anything, and
`from <where> (<what>)` when it was read off a tensor FillScope did not make but was handed from outside (e.g.
"from ComfyUI CONDITIONING (pooled_output)": a conditioning made by another node pack's encoders).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field

SCHEMA = "fillscope.shapes/1"
MEASURED = "measured"
STATIC = "static-config"
# How deep a shapes document's arrays and objects may nest: FillScope's own nest 6 deep (document, trail, record,
# tensors, tensor, shape); Python's JSON reader, writer and repr recurse once per level and fail near 1000 levels,
# fewer inside ComfyUI's call stack.
MAX_JSON_DEPTH = 32
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def json_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest, counted without recursion (brackets inside strings do not
    count), so a text too deep for the recursive JSON reader is refused before it is read."""
    depth = deepest = 0
    for token in _JSON_TOKENS.finditer(text):
        c = token.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


class ShapeRecorder:
    """Collects one node's record; `finish()` stops the clock and reads CUDA peak memory."""

    def __init__(self, node: str, title: str | None = None, table: str | None = None):
        self.record = {
            "id": uuid.uuid4().hex[:12],
            "node": node,
            "title": title or node,
            "wall_s": None,
            "peak_cuda_bytes": None,
            "tensors": [],
            "facts": {},
            "notes": [],
            "warnings": [],
        }
        if table:
            self.record["table"] = table
        self._cuda = _cuda_available()
        if self._cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        self._t0 = time.perf_counter()

    def tensor(self, name: str, t, role: str = "output") -> None:
        self.measured(name, t.shape, dtype_name(t.dtype), t.device.type, role)

    def measured(self, name: str, shape, dtype: str, device: str, role: str = "output") -> None:
        """A shape read off a tensor of this run by someone else (e.g. the trace driver's figures)."""
        self.record["tensors"].append(
            {"name": name, "role": role, "shape": list(shape), "dtype": dtype, "device": device, "provenance": MEASURED}
        )

    def given(self, name: str, t, provenance: str, role: str = "input") -> None:
        """A tensor handed to the node from outside FillScope: its shape read off it in this run, its provenance
        naming where it came from ("from <where> (<what>)")."""
        self.record["tensors"].append({"name": name, "role": role, "shape": list(t.shape), "dtype": dtype_name(t.dtype),
                                       "device": t.device.type, "provenance": provenance})

    def observe(self, name: str, t) -> None:
        """Engine callback: a boundary tensor seen inside the node's computation."""
        self.tensor(name, t, "internal")

    def static(self, name: str, shape, dtype: str = "", role: str = "output") -> None:
        self.record["tensors"].append(
            {"name": name, "role": role, "shape": list(shape), "dtype": dtype, "device": "", "provenance": STATIC}
        )

    def geometry(self, g) -> None:
        """Where the model grid sits in the input image (fillscope.masks.Geometry): tables say when a size is padded."""
        keys = ("width", "height", "grid_width", "grid_height", "mode", "top", "left")
        self.record["geometry"] = {k: getattr(g, k) for k in keys}

    def fact(self, name: str, value) -> None:
        self.record["facts"][name] = value

    def note(self, text: str) -> None:
        self.record["notes"].append(text)

    def warn(self, text: str) -> None:
        self.record["warnings"].append(text)

    def finish(self) -> dict:
        self.record["wall_s"] = round(time.perf_counter() - self._t0, 6)
        if self._cuda:
            import torch

            self.record["peak_cuda_bytes"] = int(torch.cuda.max_memory_allocated())
        return self.record


def _cuda_available() -> bool:
    import sys

    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


@dataclass
class Traced:
    """A value passed between FillScope nodes together with the shape records of the nodes that made it."""

    value: object
    trail: list = field(default_factory=list)

    def __repr__(self) -> str:  # ComfyUI may log inputs; keep it short
        return f"Traced({type(self.value).__name__}, {len(self.trail)} records)"


def merge_trails(*traced) -> list:
    """Upstream records of several inputs, each once, in first-seen order."""
    seen, out = set(), []
    for t in traced:
        if t is None:
            continue
        for rec in t.trail:
            if rec["id"] not in seen:
                seen.add(rec["id"])
                out.append(rec)
    return out


def shapes_document(record: dict, trail: list) -> dict:
    return {"schema": SCHEMA, "node": record, "trail": trail}


def shapes_json(record: dict, trail: list) -> str:
    return json.dumps(shapes_document(record, trail), indent=1)


def format_record(record: dict) -> str:
    """A compact text table of one record, for the node's canvas text and logs."""
    lines = [f"{record['title']}  ({_fmt_time(record['wall_s'])}" + (
        f", peak CUDA {record['peak_cuda_bytes'] / 2**30:.2f} GiB" if record.get("peak_cuda_bytes") else "") + ")"]
    width = max([len(t["name"]) for t in record["tensors"]] + [4])
    for t in record["tensors"]:
        where = t["device"] if t["provenance"] == MEASURED else "config"
        lines.append(f"  {t['role'][:3]} {t['name']:<{width}} {str(t['shape']):<22} {t['dtype']:<9} {t['provenance']}:{where}")
    for k, v in record["facts"].items():
        lines.append(f"  {k}: {v}")
    lines += [f"  note: {n}" for n in record["notes"]]
    lines += [f"  WARNING: {w}" for w in record["warnings"]]
    return "\n".join(lines)


def _fmt_time(s) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"
