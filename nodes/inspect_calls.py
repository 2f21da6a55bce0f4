"""What the Inspect nodes on ComfyUI's own values share (nodes/inspect_values.py, inspect_clip.py, inspect_vae.py):
the InspectNode base (no model placed; a cache key of its own), short facts of any value, and the calls recorded
after the node ran: an Inspect CLIP / VAE hands on a copy whose methods are wrapped on that copy's instance only
(`wrap_method`, the object held weakly: no reference cycle, so ComfyUI's model management frees the patcher as without
the node), and each call's record is delivered by nodes/live.py `publish` (CallLog)."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from ..fillscope.trace.records import ShapeRecorder, dtype_name
from . import common as c
from . import live
from .base import FillScopeNode
from .wire_values import fact

CATEGORY = c.CATEGORY + "/inspect"
MAX_TENSORS = 64  # tensor rows one value records at most (a batch of reference latents ...); the rest counted
MAX_FACT_ITEMS = 16  # items of a list shown in a fact
MAX_TEXT = 200  # characters of a text shown in a fact
MAX_PROMPTS = 8  # prompts whose calls an Inspect CLIP / VAE keeps (live.py keeps the delivered records)
MAX_CALLS = 64  # calls per prompt listed in a live record; later ones are counted



def _torch():
    import torch

    return torch


def is_tensor(value) -> bool:
    torch = _torch()
    return isinstance(value, torch.Tensor)


def short(value):
    """A fact's value: a tensor as its shape and dtype, anything else as the wire recorder writes it (wire_values.fact:
    numbers, NaN as text, text and lists cut, other objects by their type's name)."""
    if is_tensor(value):
        return f"tensor {list(value.shape)} {dtype_name(value.dtype)}"
    return fact(value, MAX_TEXT, MAX_FACT_ITEMS)


# ---- FillScope Inspect: any value --------------------------------------------------------------------------------


def executing_node() -> str | None:
    """The id of the node ComfyUI is running (or fingerprinting) now: its execution context."""
    try:
        from comfy_execution.utils import get_executing_context

        context = get_executing_context()
        return None if context is None else str(context.node_id)
    except Exception:
        return None


def placement_facts(obj, model) -> dict:
    """Where ComfyUI keeps a CLIP's or VAE's weights (its patcher's load and offload devices) and their count."""
    facts = {}
    patcher = getattr(obj, "patcher", None)
    if patcher is not None:
        facts["device"] = f"{patcher.load_device} (offload: {patcher.offload_device})"
    try:
        facts["parameters (unique)"] = f"{sum(p.numel() for p in model.parameters()):,}"
    except Exception:  # a model without parameters() (a stand-in): the fact is left out
        pass
    return facts


class InspectNode(FillScopeNode):
    """What the three Inspect nodes share: no model placed, and a cache key of their own."""

    places_models = False

    @classmethod
    def fingerprint_inputs(cls, **inputs):
        """The node's id (constant for the node: its output stays cached while its input does). ComfyUI 0.3.75 keys a
        node's cached output by its id only when it declares a V1 hidden UNIQUE_ID (caching.include_unique_id_in_input
        misses a V3 schema's): without this, two Inspect nodes on the same value share one output and one record,
        and a new Inspect CLIP / VAE node would hand on an old one's copy, which publishes under the old node's id."""
        return executing_node()

    @classmethod
    def call_log(cls, rec, static: dict, note: str) -> "CallLog":
        """The node's own record (what is known before any call: `static`, and `note` on what comes later) and the
        log the copy it hands on reports its calls to (Inspect CLIP / VAE)."""
        for k, v in static.items():
            rec.fact(k, v)
        rec.note(note)
        return CallLog(cls.graph_id(), (cls.SCHEMA or cls.define_schema()).node_id, cls.title, static)

    @classmethod
    def graph_id(cls) -> str:
        node = getattr(getattr(cls, "hidden", None), "unique_id", None)
        return str(node) if node is not None else (executing_node() or "")



# ---- calls recorded after the node ran (Inspect CLIP / VAE) -----------------------------------------------------


@dataclass
class Call:
    """One call to an inspected CLIP or VAE: its rows, facts and notes, written into the live record as `<label>: ...`."""

    kind: str  # "encode", "decode": the label is "<kind> <n>", n counting this prompt's calls of that kind
    label: str = ""
    seconds: float = 0.0
    rows: list = field(default_factory=list)  # (name, shape, dtype, device, role)
    facts: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    peak_cuda_bytes: int | None = None

    def tensor(self, name: str, t, role: str = "output") -> None:
        self.rows.append((name, list(t.shape), dtype_name(t.dtype), t.device.type, role))


class CallLog:
    """The calls made to one Inspect node's CLIP or VAE, per prompt, delivered after each as the node's live record:
    the static facts of the node's own run, then every call of this prompt so far."""

    def __init__(self, node_id, schema_id: str, title: str, static: dict):
        self.node_id, self.schema_id, self.title, self.static = str(node_id), schema_id, title, dict(static)
        self._calls: OrderedDict[str, list] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, call: Call) -> None:
        try:
            prompt_id = live.current_prompt_id() or ""
            with self._lock:
                calls = self._calls.setdefault(prompt_id, [])
                self._calls.move_to_end(prompt_id)
                call.label = f"{call.kind} {1 + sum(c.kind == call.kind for c in calls)}"
                while len(self._calls) > MAX_PROMPTS:
                    self._calls.popitem(last=False)
                calls.append(call)
                record = self.record(calls)
            live.publish(self.node_id, record)
        except Exception as e:  # the call itself succeeded: its record must never break the graph
            logging.warning(f"[FillScope] {self.title} (node {self.node_id}) could not deliver its record: "
                            f"{type(e).__name__}: {e}")

    def record(self, calls: list) -> dict:
        rec = ShapeRecorder(self.schema_id, self.title)
        for k, v in self.static.items():
            rec.fact(k, v)
        rec.fact("calls", len(calls))
        for call in calls[:MAX_CALLS]:
            for name, shape, dtype, device, role in call.rows:
                rec.measured(f"{call.label}: {name}", shape, dtype, device, role)
            for k, v in call.facts.items():
                rec.fact(f"{call.label}: {k}", v)
            rec.fact(f"{call.label}: time", f"{call.seconds * 1000:.1f} ms")
            for n in call.notes:
                rec.note(f"{call.label}: {n}")
        if len(calls) > MAX_CALLS:
            rec.note(f"{len(calls) - MAX_CALLS} later calls not listed")
        record = rec.finish()
        record["wall_s"] = round(sum(c.seconds for c in calls), 6)
        peaks = [c.peak_cuda_bytes for c in calls if c.peak_cuda_bytes is not None]
        record["peak_cuda_bytes"] = max(peaks) if peaks else None
        return record


call_state = threading.local()  # the wrapped call in progress on this thread (inner calls are part of it)


def calling_node() -> str | None:
    """The node that is executing (the one that called the CLIP or VAE)."""
    return executing_node()


class CallTimer:
    """Wall time and (on CUDA) the peak allocated memory of one call."""

    def __init__(self):
        import sys

        torch = sys.modules.get("torch")
        self.cuda = bool(torch is not None and torch.cuda.is_available())
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()

    def stop(self) -> Call:
        """A Call of this one's time and peak (its kind set by the caller)."""
        call = Call("")
        call.seconds = time.perf_counter() - self.t0
        if self.cuda:
            call.peak_cuda_bytes = int(_torch().cuda.max_memory_allocated())
        return call


LOGS = "_fillscope_inspectors"  # instance attribute: the CallLogs an inspected copy reports to (chained Inspects)


def logs_of(obj) -> tuple:
    return tuple(vars(obj).get(LOGS, ()))


def wrap_method(obj, name: str, around) -> None:
    """obj.<name> (on the instance only) = around(obj, the class's method, args, kwargs); obj held weakly."""
    ref, method = weakref.ref(obj), getattr(type(obj), name)

    def wrapper(*args, **kwargs):
        self = ref()
        if self is None:
            raise ReferenceError(f"the inspected object of this {name} method is gone")
        return around(self, method, args, kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = getattr(method, "__doc__", None)
    wrapper._fillscope = True
    setattr(obj, name, wrapper)


def outermost(kind: str):
    """True for the outermost wrapped call on this thread (an encode inside an encode is part of the outer one)."""
    return getattr(call_state, kind, None) is None
