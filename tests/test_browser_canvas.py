"""FillScope in ComfyUI's own frontend (1.32.9), in headless chromium: the shipped UI-format workflow loads with
no missing node types, saves back unchanged, runs from the canvas, and web/fillscope.js shows each FillScope
node's shapes table on the node, as text only (a hostile prompt never becomes markup).

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the
module is skipped without them, in CI (env CI set) that is a failure. Screenshots go to test-artifacts/browser/.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, require_browser  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "workflows" / "flux_fill_meta_trace.json"
SHOTS = REPO / "test-artifacts" / "browser"
XSS = "<img src=x onerror=alert(1)>"

# Node ids in workflows/flux_fill_meta_trace.json (workflows/graphs.py).
CLIP_L_ENCODE = 5
SYNTHETIC_IMAGE = 8
FILL_CONDITION = 9
SHAPES_REPORT = 12

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def workflow() -> dict:
    return json.loads(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def canvas(request):
    """One chromium page on the session's ComfyUI server for the whole module (checked for a browser first, so
    a machine without one skips before starting a server)."""
    require_browser("browser canvas tests")
    server = request.getfixturevalue("served_models")
    with ComfyPage(server.url, viewport=(1920, 1080)) as cp:
        yield cp


def _widgets_values(wf: dict) -> dict:
    return {n["id"]: n.get("widgets_values") for n in wf["nodes"]}


def _fillscope_ids(wf: dict) -> list[int]:
    return [n["id"] for n in wf["nodes"] if n["type"].startswith("FillScope")]


# JS: what a node's FillScope widget shows, or null when it has none.
PANEL_JS = """(id) => {
  const n = window.app.graph.getNodeById(id);
  const ws = (n.widgets || []).filter(w => w.name === 'fillscope_table');
  if (!ws.length) return null;
  const e = ws[0].element;
  return {
    count: ws.length,
    connected: e.isConnected,
    rows: [...e.querySelectorAll('tr.fs-row')].map(tr => [...tr.children].map(td => td.textContent)),
    tensors: [...e.querySelectorAll('tr.fs-row')].map(tr => tr.dataset.tensor),
    text: e.textContent,
    warnings: [...e.querySelectorAll('.fs-warning')].map(x => x.textContent),
    imgs: e.querySelectorAll('img').length,
    serialize: ws[0].serialize, optionsSerialize: ws[0].options.serialize,
  };
}"""


def _panel(cp: ComfyPage, node_id: int):
    return cp.page.evaluate(PANEL_JS, node_id)


def _assert_no_errors(cp: ComfyPage) -> None:
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())


def _ensure_loaded(cp: ComfyPage, workflow: dict) -> None:
    """The tests share one page and run in file order; run alone, a test loads what it needs itself."""
    types = cp.page.evaluate("() => window.app.graph.nodes.map(n => n.type).sort()")
    if types != sorted(n["type"] for n in workflow["nodes"]):
        cp.load_workflow(workflow)


def _run(cp: ComfyPage, fresh: bool) -> tuple[str, dict]:
    if fresh:
        cp.free_cache()  # the session's server may have run this very prompt for another test
    pid = cp.queue()
    entry = cp.wait_history(pid, timeout=120)
    assert cp.wait_executed(pid) == "success"
    assert entry["status"]["status_str"] == "success"
    if fresh:
        assert cp.cached_nodes(pid) == [], "the server answered from its cache (POST /free not applied yet?)"
    return pid, entry


def test_load_workflow_no_missing_nodes(canvas, workflow):
    cp = canvas
    _assert_no_errors(cp)  # the app started cleanly with the pack's extension
    assert "FillScope.ShapesOnNodes" in cp.extension_names(), "web/fillscope.js was not loaded by the frontend"

    # The missing-nodes check itself: a node type nobody registered is reported and opens the warning dialog.
    bogus = copy.deepcopy(workflow)
    bogus["nodes"][0]["type"] = "FillScopeNoSuchNode"
    cp.load_workflow(bogus)
    assert cp.missing_node_types() == ["FillScopeNoSuchNode"]
    cp.wait_dialog("FillScopeNoSuchNode")
    cp.dismiss_dialogs()
    assert not cp.open_dialogs()
    # Whatever the frontend logged about it names the missing type; the real workflow must log nothing.
    assert all("FillScopeNoSuchNode" in e for e in cp.console_errors), cp.console_errors
    cp.console_errors.clear()

    cp.load_workflow(workflow)
    assert cp.missing_node_types() == []
    assert cp.page.evaluate("() => window.app.graph.nodes.length") == len(workflow["nodes"])
    assert cp.open_dialogs() == [], "a dialog opened on load (missing nodes/models?)"
    _assert_no_errors(cp)
    assert cp.page.evaluate("() => window.FillScope && window.FillScope.lastReport") is None

    saved = cp.serialize()
    assert _widgets_values(saved) == _widgets_values(workflow)


def test_run_shows_shapes_tables(canvas, workflow):
    cp = canvas
    _ensure_loaded(cp, workflow)
    cp.full_detail()  # DOM widgets hide below the LOD zoom; draw everything at every zoom
    t0 = time.monotonic()
    pid, entry = _run(cp, fresh=True)
    run_s = time.monotonic() - t0

    # Every FillScope node reports shapes and shows exactly one table (the synthetic image node too: its image and mask).
    shown = {}
    for nid in _fillscope_ids(workflow):
        shown[nid] = _panel(cp, nid)
    assert shown[SYNTHETIC_IMAGE] and {r[1] for r in shown[SYNTHETIC_IMAGE]["rows"]} == {"image", "mask"}
    for nid, p in shown.items():
        assert p is not None, f"node {nid}: no shapes table after the run"
        assert p["count"] == 1 and p["connected"], (nid, p)
        assert p["rows"] or "wall " in p["text"], (nid, p)  # loaders on meta weights record facts, no tensors
        assert p["serialize"] is False and p["optionsSerialize"] is False

    cond = shown[FILL_CONDITION]
    rows = {r[1]: r for r in cond["rows"]}
    assert "fill_condition" in rows, cond["rows"]
    assert rows["fill_condition"][2] == "[1, 4096, 320]"
    assert rows["fill_condition"][4] == "measured·meta"
    assert "wall " in cond["text"]

    report = shown[SHAPES_REPORT]
    assert "fill_condition" in report["tensors"] and "decoded_image" in report["tensors"]
    row = [r for r in report["rows"] if r[0] == "fill_condition"][0]
    assert row[1] == "[1, 4096, 320]" and row[3] == "measured·meta", row
    assert row[4] == "fill condition = cat(latents 64, mask 256)", row

    # The DOM rows are really in the document (what the user sees), not only on the widget objects.
    loc = cp.page.locator(".fillscope-panel tr[data-tensor='fill_condition']")
    assert loc.count() >= 2  # the condition node and the report

    # Public hook for the architecture viewer: the report file, fetchable with /view.
    last = cp.page.evaluate("() => window.FillScope.lastReport")
    assert last and last["filename"].endswith(".json") and last["type"] == "output", last
    outputs = entry["outputs"][str(SHAPES_REPORT)]
    assert outputs["fillscope_report"][0]["filename"] == last["filename"]
    doc = cp.page.evaluate(
        "async (f) => (await fetch('/view?' + new URLSearchParams(f))).json()", last)
    assert doc["schema"] == "fillscope.shapes/1" and doc["boundaries"]

    # The DOM widget is display only: the saved workflow and the prompt carry exactly the file's widget values.
    saved = cp.serialize()
    assert _widgets_values(saved) == _widgets_values(workflow)
    prompt = cp.page.evaluate("async () => (await window.app.graphToPrompt()).output")
    assert all("fillscope_table" not in n["inputs"] for n in prompt.values())

    cp.full_detail()
    cp.fit_view()
    cp.screenshot(SHOTS / "flux_fill_meta_trace_run.png")
    cp.center_on(FILL_CONDITION, 1.0)
    cp.screenshot(SHOTS / "fill_condition_node.png")
    cp.center_on(SHAPES_REPORT - 1, 1.0)
    cp.screenshot(SHOTS / "decode_and_report_nodes.png")
    # The file's layout leaves no room for the grown nodes; LiteGraph's own arrange() shows every table apart.
    cp.page.evaluate("() => window.app.graph.arrange(40)")
    cp.fit_view()
    cp.screenshot(SHOTS / "flux_fill_meta_trace_run_arranged.png")
    _assert_no_errors(cp)
    print(f"\n[browser] canvas run of flux_fill_meta_trace: {run_s:.1f}s")


def test_hostile_prompt_stays_text(canvas, workflow):
    cp = canvas
    _ensure_loaded(cp, workflow)
    if _panel(cp, FILL_CONDITION) is None:  # run alone: the first run first
        cp.full_detail()
        _run(cp, fresh=True)
    before = {nid: _panel(cp, nid) for nid in _fillscope_ids(workflow)}
    cp.set_widget(CLIP_L_ENCODE, "text", XSS)
    pid, entry = _run(cp, fresh=False)  # a re-run: what the new text changes executes again
    assert entry["prompt"][2][str(CLIP_L_ENCODE)]["inputs"]["text"] == XSS  # went to the server as text
    assert str(CLIP_L_ENCODE) in cp.executed_nodes()

    assert cp.dialogs == [], cp.dialogs  # no alert() ran
    for nid in _fillscope_ids(workflow):
        p = _panel(cp, nid)
        if before[nid] is None:
            assert p is None
            continue
        assert p["count"] == 1, f"node {nid}: table not replaced on re-execution"
        assert p["imgs"] == 0
    assert cp.page.evaluate("() => document.querySelectorAll('.fillscope-panel img').length") == 0
    assert cp.page.evaluate("() => document.querySelectorAll('[onerror]').length") == 0
    # The report re-ran (its input changed) and still shows the boundary table.
    report = _panel(cp, SHAPES_REPORT)
    assert "fill_condition" in report["tensors"]
    # The prompt shows as text in the CLIP-L node's own textarea, and is in the saved workflow as plain text.
    assert cp.page.evaluate(
        "(id) => window.app.graph.getNodeById(id).widgets.find(w => w.name === 'text').element.value",
        CLIP_L_ENCODE) == XSS
    saved = cp.serialize()
    expected = _widgets_values(workflow)
    expected[CLIP_L_ENCODE] = [XSS]
    assert _widgets_values(saved) == expected

    # The renderer with hostile data in every field it shows: text only, never markup; a message without
    # shapes falls back to its text; odd messages do not throw.
    hostile = {
        "fillscope_shapes": [{"schema": "fillscope.shapes/1", "trail": [], "node": {
            "id": "x", "node": "FillScopeCLIPLEncode", "title": XSS, "wall_s": 0.0123, "peak_cuda_bytes": 3 * 2**30,
            "tensors": [{"name": XSS, "role": "output", "shape": [1, XSS], "dtype": XSS, "device": XSS,
                         "provenance": "measured"},
                        {"name": "cfg", "role": "output", "shape": [1, 2], "dtype": "", "device": "",
                         "provenance": "static-config"}],
            "facts": {XSS: XSS}, "notes": [XSS], "warnings": [XSS]}}],
        "text": [XSS],
    }
    cp.page.evaluate("([id, m]) => window.app.graph.getNodeById(id).onExecuted(m)", [CLIP_L_ENCODE, hostile])
    p = _panel(cp, CLIP_L_ENCODE)
    assert p["count"] == 1 and p["imgs"] == 0
    assert p["rows"][0][1] == XSS and p["rows"][0][4] == "measured·" + XSS
    assert p["rows"][1][4] == "config"
    assert p["warnings"] == ["⚠ " + XSS]
    assert "peak CUDA 3.00 GiB" in p["text"] and "wall 12.3 ms" in p["text"]
    cp.center_on(CLIP_L_ENCODE, 1.0)
    cp.screenshot(SHOTS / "hostile_text.png")

    cp.page.evaluate("([id, m]) => window.app.graph.getNodeById(id).onExecuted(m)", [CLIP_L_ENCODE, {"text": [XSS]}])
    p = _panel(cp, CLIP_L_ENCODE)
    assert p["text"] == XSS and p["imgs"] == 0 and p["count"] == 1

    cp.page.evaluate(
        """([id, x]) => { const n = window.app.graph.getNodeById(id);
             n.onExecuted({}); n.onExecuted(undefined); n.onExecuted({fillscope_shapes: [null], text: 'x'});
             n.onExecuted({fillscope_boundaries: [null, {boundary: x, shape: null}]});
             n.onExecuted({fillscope_report: [{filename: 7}]}); }""",
        [CLIP_L_ENCODE, XSS],
    )
    p = _panel(cp, CLIP_L_ENCODE)
    assert p["rows"] == [["", "not observed", "", "", XSS, ""]], p["rows"]
    assert cp.page.evaluate("() => window.FillScope.lastReport.filename").endswith(".json")
    assert cp.page.evaluate("() => document.querySelectorAll('[onerror]').length") == 0
    assert cp.dialogs == []
    _assert_no_errors(cp)
