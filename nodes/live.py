"""Records that are finished after their node ran: the Inspect nodes on ComfyUI's own MODEL, CLIP and VAE hand on a
copy of their input that records each call made to it later (by KSampler, CLIPTextEncode, VAEDecode ...), so the
record is complete only when those nodes have run.

`publish(node_id, record, trail)` delivers such a record, in the form a node's ui takes (`text`,
`fillscope_shapes`), two ways:
- to the canvas: the websocket event `fillscope.live` {node, prompt_id, output} (web/fillscope.js shows it on that
  node's face as it shows an `executed` ui);
- to API clients: `GET /fillscope/live?prompt_id=ID` answers {node id: output} for that prompt (the newest
  MAX_PROMPTS prompts are kept), as /history answers for the nodes' own ui;
- to the Shapes Report (nodes/inspect.py): `records_of(prompt id)`, the records delivered so far in the prompt it
  runs in (its `after` input orders it after the sampler / decoder that completes them).

The prompt a call belongs to is read when the call is made (PromptServer.last_prompt_id), not when the Inspect node
ran: ComfyUI reuses a cached Inspect node's output in later prompts."""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..fillscope.trace.records import format_record, shapes_document

EVENT = "fillscope.live"
ROUTE = "/fillscope/live"
MAX_PROMPTS = 32  # prompts whose live records the route keeps

_lock = threading.Lock()
_records: OrderedDict[str, dict] = OrderedDict()  # prompt id -> {node id: output}
_routes_added = False


def current_prompt_id() -> str | None:
    from server import PromptServer

    return getattr(PromptServer.instance, "last_prompt_id", None)


def publish(node_id: str, record: dict, trail: list | None = None) -> dict:
    """Deliver `record` (a ShapeRecorder's finished record) as node `node_id`'s table; returns the output sent."""
    from server import PromptServer

    output = {"text": [format_record(record)], "fillscope_shapes": [shapes_document(record, trail or [])]}
    prompt_id = current_prompt_id()
    with _lock:
        nodes = _records.setdefault(prompt_id or "", {})
        _records.move_to_end(prompt_id or "")
        nodes[str(node_id)] = output
        while len(_records) > MAX_PROMPTS:
            _records.popitem(last=False)
    server = PromptServer.instance
    server.send_sync(EVENT, {"node": str(node_id), "prompt_id": prompt_id, "output": output},
                     getattr(server, "client_id", None))
    return output


def records_of(prompt_id: str) -> dict:
    """{node id: output} of the records delivered for `prompt_id` so far, in the order of their first delivery."""
    with _lock:
        return dict(_records.get(prompt_id, {}))


def add_routes() -> None:
    """GET /fillscope/live?prompt_id=ID (once per process)."""
    global _routes_added
    if _routes_added:
        return
    import sys

    server = sys.modules.get("server")  # ComfyUI's server module, imported by its main.py before the nodes load
    if getattr(getattr(server, "PromptServer", None), "instance", None) is None:  # no running server (tests)
        return
    from aiohttp import web
    from server import PromptServer

    @PromptServer.instance.routes.get(ROUTE)
    async def live_records(request):
        prompt_id = request.rel_url.query.get("prompt_id", "")
        return web.json_response(records_of(prompt_id))

    _routes_added = True
