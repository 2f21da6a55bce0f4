"""The wire recorder: what every node of every prompt handed on, on each of its outputs, with no node inserted, and
what the MODEL, CLIP and VAE on a wire were called with later (issue 33).

How: ComfyUI's executor gets a node's outputs from `execution.get_output_data(prompt_id, unique_id, obj,
input_data_all, ...)`, an async function it calls by its module name; `install()` replaces it with one that
- watches the MODEL / CLIP / VAE among the node's inputs while it runs (nodes/wire_calls.py: forward hooks, removed
  when the node returns) and writes their calls onto the record of the wire that brought them, with this node's id;
- awaits the original and hands its result back as it came (the same tuple, the same objects), after writing a
  record of the outputs' metadata (nodes/wire_values.py).
Nodes ComfyUI serves from its cache run no function: `PromptExecutor.add_message` is wrapped too, and at its
`execution_cached` message the cached outputs (the very objects the prompt will use) are recorded, marked cached.
A record keeps no reference to a tensor or a model: shapes, dtypes, devices, classes and widths.

Where it stays out of the way:
- `FILLSCOPE_WIRES=off` (or 0 / false / no): nothing is patched;
- a ComfyUI whose executor has no such function, or one of another signature, or whose result is not the
  (outputs, ui, has_subgraph, has_pending_tasks) tuple: the recorder switches itself off, one log line saying what
  it did not find, and every prompt runs as without it (no add_message of the expected shape: cached nodes only
  go unrecorded, with one line);
- a value it cannot read: the record says so; any other failure is logged once and recording goes on for the next
  node. Nothing of a node's run waits on it.

Delivery: the websocket event `fillscope.wires` {prompt_id, node, record} as each record is written (the canvas
labels, web/fillscope_wires.js); `GET /fillscope/wires?prompt_id=ID` answers {"prompt_id", "status", "nodes": {node
id: RECORD}, "inspect": {node id: the Inspect nodes' measured records (nodes/live.py)}} for the newest MAX_PROMPTS
prompts; without a prompt id, {"status", "prompts": [ids, oldest first], "recorder_seconds" (its own time in this
process so far, hooks included), "nodes_recorded"}.
RECORD = {"node", "display_node", "class_type", "cached", "outputs": [{"slot", "type", "name", "is_list", "items",
"values": [SUMMARY, ...], "calls": [CALL, ...]}]} (wire_values.py, wire_calls.py).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import threading
import time
import weakref
from collections import OrderedDict

from .wire_calls import NodeWatch
from .wire_values import is_model_like, record_outputs

ENV = "FILLSCOPE_WIRES"
ROUTE = "/fillscope/wires"
EVENT = "fillscope.wires"
MAX_PROMPTS = 32  # prompts whose records the route keeps
MAX_CALLS = 16  # model-call records one wire keeps (a MODEL sampled by many nodes)
MAX_NODES = 2048  # node records one prompt keeps (memory stays bounded on a huge graph; the rest are counted)
EXPECTED = ("prompt_id", "unique_id", "obj", "input_data_all")
EXPECTED_MESSAGE = ("self", "event", "data", "broadcast")

log = logging.getLogger("fillscope.wires")
_lock = threading.Lock()
_records: OrderedDict[str, dict] = OrderedDict()  # prompt id -> {node id: record}
_state = {"status": "not installed", "logged_failure": False, "route": False, "prompt": None}
_cost = {"seconds": 0.0, "nodes": 0}  # the recorder's own time in this process (its hooks' included), nodes recorded
_producers: dict[int, tuple] = {}  # id(MODEL / CLIP / VAE) -> (weakref to it, node id, slot): who handed it on
_explanations: OrderedDict[str, dict] = OrderedDict()  # prompt id -> its failure explained (nodes/wire_explain.py)
EXPLAIN_EVENT = "fillscope.explain"
EXPLAIN_ROUTE = "/fillscope/explain"


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
        if _state["status"] != "on":
            return await original(prompt_id, unique_id, obj, input_data_all, *args, **kwargs)
        start = time.perf_counter()
        watch = _watch_safely(unique_id, input_data_all)
        spent = time.perf_counter() - start
        try:
            result = await original(prompt_id, unique_id, obj, input_data_all, *args, **kwargs)
        except BaseException:  # the node failed or was interrupted: its hooks go, what its calls got stays
            _attach_calls_safely(prompt_id, unique_id, _close_safely(watch))
            raise
        start = time.perf_counter()
        calls = _close_safely(watch)
        spent += time.perf_counter() - start + (watch.overhead if watch is not None else 0.0)
        start = time.perf_counter()
        _record_safely(prompt_id, unique_id, obj, result, calls, watch.not_loaded.warning() if watch else None)
        _cost["seconds"] += spent + time.perf_counter() - start
        _cost["nodes"] += 1
        return result

    get_output_data._fillscope_wires = True
    execution_module.get_output_data = get_output_data
    _install_cached(getattr(execution_module, "PromptExecutor", None))
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


def _install_cached(executor_class) -> None:
    """Wrap PromptExecutor.add_message: at `execution_cached`, record the outputs the cache will serve."""
    original = getattr(executor_class, "add_message", None)
    if original is None or getattr(original, "_fillscope_wires", False):
        return
    try:
        names = tuple(inspect.signature(original).parameters)[:len(EXPECTED_MESSAGE)]
    except (TypeError, ValueError):
        names = ()
    if names != EXPECTED_MESSAGE:
        log.warning("[FillScope] wire recorder: PromptExecutor.add_message takes %s, not %s; nodes served from "
                    "ComfyUI's cache go unrecorded", names, EXPECTED_MESSAGE)
        return

    @functools.wraps(original)
    def add_message(self, event, data, *args, **kwargs):
        if event == "execution_cached" and _state["status"] == "on":
            start = time.perf_counter()
            _record_cached_safely(self, data)
            _cost["seconds"] += time.perf_counter() - start
        if event == "execution_success" and _state["status"] == "on":  # before the canvas hears the prompt ended
            start = time.perf_counter()
            _warn_silent_safely(data)
            _cost["seconds"] += time.perf_counter() - start
        result = original(self, event, data, *args, **kwargs)
        if event == "execution_error" and _state["status"] == "on":  # after ComfyUI's own message and traceback
            _explain_safely(data)
        return result

    add_message._fillscope_wires = True
    executor_class.add_message = add_message


def _set_status(text: str, log_it: bool = False) -> str:
    _state["status"] = text
    if log_it:
        log.warning("[FillScope] wire recorder %s: prompts run without it", text)
    return text


def _failed(node, e: Exception) -> None:
    if not _state["logged_failure"]:
        _state["logged_failure"] = True
        log.warning("[FillScope] wire recorder could not record node %s (%s: %s); it goes on with the next node",
                    node, type(e).__name__, e)


# ---- what ran ----------------------------------------------------------------------------------------------------


def _watch_safely(unique_id, input_data_all) -> NodeWatch | None:
    """Hooks on the networks of the MODEL / CLIP / VAE inputs of the node about to run (None when it has none)."""
    try:
        watch = None
        for name, values in (input_data_all or {}).items():
            for value in values if isinstance(values, list) else [values]:
                if _is_model_like(value):
                    watch = watch or NodeWatch()
                    watch.add(str(name), value, _producer(unique_id, name, value))
        return watch
    except Exception as e:  # noqa: BLE001 (never fail a prompt)
        _failed(unique_id, e)
        return None


def _close_safely(watch: NodeWatch | None) -> list:
    if watch is None:
        return []
    try:
        return watch.close()
    except Exception as e:  # noqa: BLE001
        _failed("(hooks)", e)
        return []


def _is_model_like(value) -> bool:
    """A MODEL, CLIP, VAE (wire_values' test) or a GUIDER: what holds networks a later node may call."""
    return is_model_like(value) or hasattr(value, "model_patcher")


def _prompt():
    """The running prompt's DynamicPrompt (held weakly since its execution_cached message), or None."""
    return _state["prompt"]() if _state["prompt"] is not None else None


def _producer(unique_id, input_name, value) -> tuple[str, int] | None:
    """(node id, slot) of the wire that brought `value`: the prompt's link where the prompt is at hand, else the node
    that last handed this very object on."""
    prompt = _prompt()
    try:
        link = prompt.get_node(str(unique_id))["inputs"][input_name]
    except Exception:  # noqa: BLE001 (no prompt, no such input: fall back on the object)
        link = None
    if isinstance(link, list) and len(link) == 2:
        return str(link[0]), int(link[1])
    known = _producers.get(id(value))
    if known is not None and known[0]() is value:
        return known[1], known[2]
    return None


def _record_safely(prompt_id, unique_id, obj, result, calls: list, warning: str | None = None) -> None:
    try:
        if not (isinstance(result, tuple) and len(result) == 4 and isinstance(result[0], (list, tuple))):
            _set_status("off (execution.get_output_data returned no (outputs, ui, has_subgraph, has_pending) tuple)",
                        log_it=True)
            return
        _attach_calls_safely(prompt_id, unique_id, calls)
        prompt_id, node_id = str(prompt_id), str(unique_id)
        outputs, _, has_subgraph, has_pending = result
        if has_subgraph or has_pending:  # an expanded node's outputs come from its subgraph's nodes, recorded there
            return
        record = record_outputs(node_id, obj, outputs, _class_type_in_prompt(node_id))
        if warning:  # a silent mismatch ComfyUI only logged (NotLoaded): on the node's wires
            record["warnings"] = [warning]
        _remember_producers(node_id, outputs)
        _deliver(prompt_id, node_id, record)
    except Exception as e:  # noqa: BLE001 (never fail a prompt: log once, go on)
        _failed(unique_id, e)


def _attach_calls_safely(prompt_id, unique_id, calls: list) -> None:
    try:
        for input_name, producer, call in calls:
            _attach_call(str(prompt_id), producer, dict(call, consumer=str(unique_id), input=input_name))
    except Exception as e:  # noqa: BLE001
        _failed(unique_id, e)


def _record_cached_safely(executor, data: dict) -> None:
    """The outputs of the nodes ComfyUI will serve from its cache in this prompt, as that cache holds them."""
    try:
        cache = executor.caches.outputs
        prompt = getattr(cache, "dynprompt", None)
        _state["prompt"] = weakref.ref(prompt) if prompt is not None else None
        prompt_id = str(data.get("prompt_id"))
        import nodes as comfy_nodes  # ComfyUI's nodes module: loaded (the server runs)

        for node_id in data.get("nodes") or []:
            entry = cache.get(node_id)
            outputs = getattr(entry, "outputs", entry)
            if not isinstance(outputs, (list, tuple)):
                continue
            class_type = _class_type_in_prompt(node_id)
            class_def = comfy_nodes.NODE_CLASS_MAPPINGS.get(class_type)
            record = record_outputs(str(node_id), class_def, outputs, class_type)
            record["cached"] = True
            _remember_producers(str(node_id), outputs)
            _deliver(prompt_id, str(node_id), record)
    except Exception as e:  # noqa: BLE001
        _failed("(cached)", e)


def _class_type_in_prompt(node_id: str) -> str | None:
    prompt = _prompt()
    try:
        return str(prompt.get_node(node_id)["class_type"])
    except Exception:  # noqa: BLE001
        return None


def _remember_producers(node_id: str, outputs) -> None:
    for slot, values in enumerate(outputs):
        for value in values if isinstance(values, (list, tuple)) else [values]:
            if _is_model_like(value):
                try:
                    _producers[id(value)] = (weakref.ref(value), node_id, slot)
                except TypeError:  # an object without weak references: the prompt's links alone tell
                    pass
    if len(_producers) > 256:
        for key in [k for k, v in _producers.items() if v[0]() is None]:
            del _producers[key]


def _attach_call(prompt_id: str, producer, call: dict) -> None:
    """A model-call record onto the output record of the wire it came along (the producer's, in this prompt)."""
    if producer is None:
        return
    node_id, slot = producer
    with _lock:  # a new record in place of the old (a record once written is never changed: the route and the
        nodes = _records.get(prompt_id, {})  # websocket serialise them on another thread)
        record = nodes.get(node_id)
        if record is None or slot >= len(record["outputs"]):
            return
        if len(record["outputs"][slot].get("calls", ())) >= MAX_CALLS:
            return
        outputs = list(record["outputs"])
        outputs[slot] = dict(outputs[slot], calls=[*outputs[slot].get("calls", ()), call])
        record = nodes[node_id] = dict(record, outputs=outputs)
    _send(prompt_id, node_id, record)


def _explain_safely(error: dict) -> None:
    """A failed prompt's error explained by the wires into the failing node: kept for GET /fillscope/explain, sent as
    the websocket event `fillscope.explain`, and a few lines in the server log."""
    try:
        from .wire_explain import explain, log_lines

        prompt = _prompt()
        prompt_id = str(error.get("prompt_id"))
        explanation = explain(error, prompt, records_of(prompt_id))
        with _lock:
            _explanations[prompt_id] = explanation
            while len(_explanations) > MAX_PROMPTS:
                _explanations.popitem(last=False)
        for line in log_lines(explanation):
            log.warning(line)
        _send_event(EXPLAIN_EVENT, explanation)
    except Exception as e:  # noqa: BLE001 (ComfyUI's own error stands as it was)
        _failed("(explain)", e)


def _warn_silent_safely(data: dict) -> None:
    """The silent mismatches of a prompt that ran (nodes/wire_warnings.py) onto the records of the nodes at fault,
    re-sent, and one line each in the server log."""
    try:
        from .wire_warnings import silent_mismatches

        prompt_id = str(data.get("prompt_id"))
        for node_id, texts in silent_mismatches(_prompt(), records_of(prompt_id)).items():
            with _lock:  # a new record in place of the old, as _attach_call does
                nodes = _records.get(prompt_id, {})
                record = nodes.get(node_id)
                if record is None:
                    continue
                old = list(record.get("warnings", ()))
                record = nodes[node_id] = dict(record, warnings=old + [t for t in texts if t not in old])
            for text in texts:
                log.warning("[FillScope] wires: node %s (%s): %s", node_id, record.get("class_type"), text)
            _send(prompt_id, node_id, record)
    except Exception as e:  # noqa: BLE001
        _failed("(warnings)", e)


def _deliver(prompt_id: str, node_id: str, record: dict) -> None:
    store(prompt_id, node_id, record)
    _send(prompt_id, node_id, record)


def _send(prompt_id: str, node_id: str, record: dict) -> None:
    _send_event(EVENT, {"prompt_id": prompt_id, "node": node_id, "record": record})


def _send_event(event: str, payload: dict) -> None:
    """A websocket event to the client that queued the prompt (none for a headless prompt without a client id)."""
    instance = getattr(getattr(sys.modules.get("server"), "PromptServer", None), "instance", None)
    client = getattr(instance, "client_id", None)
    if instance is not None and client is not None:
        instance.send_sync(event, payload, client)


def store(prompt_id: str, node_id: str, record: dict) -> None:
    with _lock:
        nodes = _records.setdefault(prompt_id, {})
        _records.move_to_end(prompt_id)
        if node_id not in nodes and len(nodes) >= MAX_NODES:
            _cost["not kept"] = _cost.get("not kept", 0) + 1
            return
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
                return web.json_response({"status": status(), "prompts": list(_records),
                                          "recorder_seconds": round(_cost["seconds"], 6),
                                          "nodes_recorded": _cost["nodes"]})
        return web.json_response({"prompt_id": prompt_id, "status": status(), "nodes": records_of(prompt_id),
                                  "inspect": _inspect_records(prompt_id)})

    @server.PromptServer.instance.routes.get(EXPLAIN_ROUTE)
    async def explanation(request):
        prompt_id = request.rel_url.query.get("prompt_id", "")
        with _lock:
            found = _explanations.get(prompt_id)
        return web.json_response({"prompt_id": prompt_id, "status": status(), "explanation": found})

    _state["route"] = True


def _inspect_records(prompt_id: str) -> dict:
    """The Inspect Model / CLIP / VAE nodes' records measured after they ran (nodes/live.py), for API clients."""
    try:
        from .live import records_of as live_records

        return live_records(prompt_id)
    except Exception:  # noqa: BLE001 (outside the pack's package: none)
        return {}
