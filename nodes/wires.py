"""The wire recorder: what every node of every prompt handed on, on each of its outputs, with no node inserted
(issue 33, first part: the records and their route; the canvas labels and the model calls come next).

How: ComfyUI's executor gets a node's outputs from `execution.get_output_data(prompt_id, unique_id, obj,
input_data_all, ...)`, an async function it calls by its module name; `install()` replaces it with one that awaits
the original, hands its result back as it came (the same tuple, the same objects) and, before that, writes a record
of the outputs' metadata. A record keeps no reference to a tensor or a model: shapes, dtypes, devices, classes and
the widths ComfyUI's objects carry, read without touching a tensor's values (no GPU synchronisation).

Where it stays out of the way:
- `FILLSCOPE_WIRES=off` (or 0 / false / no): nothing is patched;
- a ComfyUI whose executor has no such function, or one of another signature, or whose result is not the
  (outputs, ui, has_subgraph, has_pending_tasks) tuple: the recorder switches itself off, one log line saying what
  it did not find, and every prompt runs as without it;
- a value it cannot read: the record says so; any other failure is logged once and recording goes on for the next
  node. Nothing of a node's run waits on it.

Records: `GET /fillscope/wires?prompt_id=ID` answers {"prompt_id", "nodes": {node id: RECORD}} for the newest
MAX_PROMPTS prompts; without a prompt id, {"status", "prompts": [ids, oldest first]}.
RECORD = {"node", "display_node", "class_type", "outputs": [{"slot", "type", "name", "is_list", "items",
"values": [SUMMARY, ...]}]}; SUMMARY = {"kind", "tensors": [{"name", "shape", "dtype", "device"}], "facts": {...}}.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import sys
import threading
from collections import OrderedDict

ENV = "FILLSCOPE_WIRES"
ROUTE = "/fillscope/wires"
MAX_PROMPTS = 32  # prompts whose records the route keeps
MAX_TENSORS = 64  # tensor rows a value's summary lists (a huge nested CONDITIONING says how many it left out)
MAX_ITEMS = 4  # values summarised of a list output (OUTPUT_IS_LIST or a node mapped over a list)
MAX_TEXT = 120  # characters of a text fact
MAX_FACT_ITEMS = 8  # items of a list fact
EXPECTED = ("prompt_id", "unique_id", "obj", "input_data_all")

log = logging.getLogger("fillscope.wires")
_lock = threading.Lock()
_records: OrderedDict[str, dict] = OrderedDict()  # prompt id -> {node id: record}
_state = {"status": "not installed", "logged_failure": False, "route": False}


def status() -> str:
    return _state["status"]


def switched_off_by_env() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("off", "0", "false", "no")


def install(execution_module=None) -> str:
    """Record every node's outputs from now on (see the module's text); returns the status: "on", "off (...)"."""
    if switched_off_by_env():
        return _set_status(f"off ({ENV}={os.environ.get(ENV)})", log_it=True)
    if execution_module is None:
        # ComfyUI's executor module, which its main.py imports before the custom nodes load; never imported here
        # (outside a server, e.g. a test calling get_node_list, it would pull in ComfyUI's model management)
        execution_module = sys.modules.get("execution")
        if execution_module is None:
            return _set_status("off (ComfyUI's execution module is not loaded)")
    original = getattr(execution_module, "get_output_data", None)
    if getattr(original, "_fillscope_wires", False):  # installed already: on, or off since (a result it could not read)
        return status()
    reason = _unexpected(original)
    if reason:
        return _set_status(f"off ({reason})", log_it=True)

    @functools.wraps(original)
    async def get_output_data(prompt_id, unique_id, obj, input_data_all, *args, **kwargs):
        result = await original(prompt_id, unique_id, obj, input_data_all, *args, **kwargs)
        if _state["status"] == "on":
            _record_safely(prompt_id, unique_id, obj, result)
        return result

    get_output_data._fillscope_wires = True
    execution_module.get_output_data = get_output_data
    return _set_status("on")


def _unexpected(original) -> str | None:
    """What differs from the executor function this recorder was written against; None when nothing does."""
    if original is None:
        return "execution.get_output_data not found"
    if not inspect.iscoroutinefunction(original):
        return "execution.get_output_data is not an async function"
    try:
        names = tuple(inspect.signature(original).parameters)[:len(EXPECTED)]
    except (TypeError, ValueError):
        names = ()
    if names != EXPECTED:
        return f"execution.get_output_data takes {names}, not {EXPECTED}"
    return None


def _set_status(text: str, log_it: bool = False) -> str:
    _state["status"] = text
    if log_it:
        log.warning("[FillScope] wire recorder %s: prompts run without it", text)
    return text


def _record_safely(prompt_id, unique_id, obj, result) -> None:
    try:
        if not (isinstance(result, tuple) and len(result) == 4 and isinstance(result[0], (list, tuple))):
            _set_status("off (execution.get_output_data returned no (outputs, ui, has_subgraph, has_pending) tuple)",
                        log_it=True)
            return
        outputs, _, has_subgraph, has_pending = result
        if has_subgraph or has_pending:  # an expanded node's outputs come from its subgraph's nodes, recorded there
            return
        store(str(prompt_id), str(unique_id), record_outputs(unique_id, obj, outputs))
    except Exception as e:  # noqa: BLE001 (never fail a prompt: log once, go on)
        if not _state["logged_failure"]:
            _state["logged_failure"] = True
            log.warning("[FillScope] wire recorder could not record node %s (%s: %s); it goes on with the next node",
                        unique_id, type(e).__name__, e)


def record_outputs(unique_id, obj, outputs) -> dict:
    """The record of a node's outputs (`outputs`: one list of values per output slot, as the executor merges them)."""
    types = tuple(getattr(obj, "RETURN_TYPES", ()) or ())
    names = tuple(getattr(obj, "RETURN_NAMES", ()) or ())
    is_list = tuple(getattr(obj, "OUTPUT_IS_LIST", ()) or ())
    slots = []
    for slot, values in enumerate(outputs):
        values = values if isinstance(values, (list, tuple)) else [values]
        kind = str(types[slot]) if slot < len(types) else "?"
        slots.append({"slot": slot, "type": kind, "name": str(names[slot]) if slot < len(names) else kind,
                      "is_list": bool(is_list[slot]) if slot < len(is_list) else False, "items": len(values),
                      "values": [summarize(v, kind) for v in values[:MAX_ITEMS]]})
    node_id = str(unique_id)
    return {"node": node_id, "display_node": node_id.split(".")[0], "class_type": _class_type(obj),
            "outputs": slots}


def _class_type(obj) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    for attr in ("NODE_ID", "node_id"):
        value = getattr(cls, attr, None)
        if isinstance(value, str) and value:
            return value
    return cls.__name__


def summarize(value, kind: str = "") -> dict:
    """A value's metadata: its tensors by path (shape, dtype, device; never their values) and short facts; MODEL,
    CLIP and VAE by what ComfyUI detected and the widths that decide what fits."""
    out = {"kind": kind or type(value).__name__, "tensors": [], "facts": {}}
    try:
        if kind in ("MODEL", "CLIP", "VAE") or _is_model_like(value):
            out["facts"].update(_model_facts(value, kind))
        else:
            left = [MAX_TENSORS]
            _walk(out, {"IMAGE": "image", "MASK": "mask"}.get(kind, "") if is_tensor(value) else "", value, left, 0)
            if left[0] < 0:
                out["facts"]["tensors not listed"] = -left[0]
    except Exception as e:  # noqa: BLE001 (a value of a kind nobody foresaw: say so, record the rest)
        out["facts"]["unreadable"] = f"{type(e).__name__}: {e}"[:200]
    return out


def _walk(out: dict, name: str, value, left: list, depth: int) -> None:
    for path, leaf in value_leaves(value, name, depth, max_depth=5):
        if is_tensor(leaf):
            left[0] -= 1
            if left[0] >= 0:
                out["tensors"].append({"name": path or "tensor", "shape": list(leaf.shape),
                                       "dtype": str(leaf.dtype).removeprefix("torch."), "device": str(leaf.device)})
        elif len(out["facts"]) < MAX_TENSORS:
            out["facts"][path or "value"] = _fact(leaf)


def value_leaves(value, name: str = "", depth: int = 0, max_depth: int = 5):
    """(path, leaf) for each tensor and each other leaf inside `value`: dicts by key (`name.key`), lists and tuples
    that hold tensors or containers by index (`name[i]`), to `max_depth` levels; a list of plain values is one leaf.
    The walk the wire recorder and the Inspect node (inspect_values.record_tree) share."""
    if is_tensor(value):
        yield name, value
    elif depth < max_depth and isinstance(value, dict):
        for key, item in value.items():
            yield from value_leaves(item, f"{name}.{key}" if name else str(key), depth + 1, max_depth)
    elif depth < max_depth and isinstance(value, (list, tuple)) and any(
            is_tensor(v) or isinstance(v, (dict, list, tuple)) for v in value):
        for i, item in enumerate(value):
            yield from value_leaves(item, f"{name}[{i}]", depth + 1, max_depth)
    else:
        yield name, value


def _fact(value):
    """A fact's value: numbers (NaN and infinities as text: the route's JSON must parse in a browser), text (cut),
    short lists of them; anything else its type's name."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT - 3] + "..."
    if isinstance(value, (list, tuple)) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        items = [_fact(v) for v in value[:MAX_FACT_ITEMS]]
        return items + [f"... ({len(value)} in all)"] if len(value) > MAX_FACT_ITEMS else items
    return type(value).__name__


def is_tensor(value) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only where torch was imported: never import it here
    return torch is not None and isinstance(value, torch.Tensor)


def _is_model_like(value) -> bool:
    return any(hasattr(value, a) for a in ("model_options", "cond_stage_model", "first_stage_model"))


def _model_facts(value, kind: str) -> dict:
    """MODEL (a ModelPatcher), CLIP and VAE as the Inspect Model / CLIP / VAE nodes describe them before a run."""
    if hasattr(value, "first_stage_model"):
        from .inspect_vae import vae_static

        return vae_static(value)
    if hasattr(value, "cond_stage_model"):
        from .inspect_clip import clip_static

        return clip_static(value)
    if hasattr(value, "model") and hasattr(value, "model_options"):
        from .inspect_model import static_facts

        facts = _Facts()
        static_facts(facts, value)
        return facts.record["facts"]
    return {"class": type(value).__name__}


class _Facts:
    """What inspect_model.static_facts writes into (a ShapeRecorder's facts, without its clock and CUDA counters)."""

    def __init__(self):
        self.record = {"facts": {}}

    def fact(self, name: str, value) -> None:
        self.record["facts"][name] = value


def store(prompt_id: str, node_id: str, record: dict) -> None:
    with _lock:
        nodes = _records.setdefault(prompt_id, {})
        _records.move_to_end(prompt_id)
        nodes[node_id] = record
        while len(_records) > MAX_PROMPTS:
            _records.popitem(last=False)


def records_of(prompt_id: str) -> dict:
    with _lock:
        return dict(_records.get(prompt_id, {}))


def add_route() -> None:
    """GET /fillscope/wires (once per process; nothing where no ComfyUI server runs)."""
    if _state["route"]:
        return
    server = sys.modules.get("server")
    if getattr(getattr(server, "PromptServer", None), "instance", None) is None:
        return
    from aiohttp import web

    @server.PromptServer.instance.routes.get(ROUTE)
    async def wires(request):
        prompt_id = request.rel_url.query.get("prompt_id")
        if prompt_id is None:
            with _lock:
                return web.json_response({"status": status(), "prompts": list(_records)})
        return web.json_response({"prompt_id": prompt_id, "status": status(), "nodes": records_of(prompt_id)})

    _state["route"] = True
