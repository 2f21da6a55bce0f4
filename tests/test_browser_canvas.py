"""FillScope in ComfyUI's own frontend (1.32.9), in headless chromium: the shipped UI-format workflow loads with
no missing node types, saves back unchanged, runs from the canvas, and web/fillscope.js shows each FillScope node's
key shape on the node's face (drawn on the canvas, readable zoomed out with the whole graph in view) and its whole
table one click away (a dialog), as text only (a hostile prompt never becomes markup). A node ComfyUI serves from
its cache (the loaders of an SD3 run after a FLUX run) shows its table too, and after a page reload every table and
the viewer's newest report come back (from /history). Every run writes new report files (the counter advances).

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the
module is skipped without them, in CI (env CI set) that is a failure. Screenshots go to test-artifacts/browser/.
On the pinned frontend; test_browser_frontends.py runs a graph and checks the faces on the newest frontend and in
Nodes 2.0 too.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, http_json, require_browser  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "example_workflows" / "flux_fill_meta_trace.json"
SD3_WORKFLOW = REPO / "example_workflows" / "sd3_controlnet_meta_trace.json"
SHOTS = REPO / "test-artifacts" / "browser"
XSS = "<img src=x onerror=alert(1)>"

# Node ids in example_workflows/flux_fill_meta_trace.json (api_workflows/graphs.py).
PROMPT = 5  # FillScope FLUX Prompt: text, max_length
SYNTHETIC_IMAGE = 8
FILL_CONDITION = 9
SHAPES_REPORT = 12

RUNS: dict = {}  # what the module's runs left for later tests: the FLUX run's prompt id and report files

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def workflow() -> dict:
    return json.loads(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def canvas(request):
    """One chromium page on the session's ComfyUI server for the whole module (checked for a browser first, so
    a machine without one skips before starting a server). The server's history and cache are emptied first:
    the page restores tables and reports from /history, and these tests start from none."""
    require_browser("browser canvas tests")
    server = request.getfixturevalue("served_models")
    http_json(server.url + "/history", {"clear": True})
    http_json(server.url + "/free", {"free_memory": True, "unload_models": True})
    with ComfyPage(server.url, viewport=(1920, 1080), settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp


def _widgets_values(wf: dict) -> dict:
    return {n["id"]: n.get("widgets_values") for n in wf["nodes"]}


def _sizes(wf: dict) -> dict:
    return {n["id"]: list(n["size"]) for n in wf["nodes"]}


def _fillscope_ids(wf: dict) -> list[int]:
    return [n["id"] for n in wf["nodes"] if n["type"].startswith("FillScope")]


def _id_of(wf: dict, node_type: str) -> int:
    return next(n["id"] for n in wf["nodes"] if n["type"] == node_type)


# JS: a node's face: its summary widget (value, where the table came from, what the last draw showed), or null.
FACE_JS = """(id) => {
  const n = window.app.graph.getNodeById(id);
  const ws = (n.widgets || []).filter(w => w.name === 'fillscope_summary');
  if (!ws.length) return null;
  const t = window.FillScope.tableOf(id);
  return {count: ws.length, value: ws[0].value, source: t && t.source, drawn: ws[0].fsDrawn,
          serialize: ws[0].serialize, optionsSerialize: ws[0].options.serialize};
}"""

# JS: the open table dialog: its rows (cell texts), tensors, text; whether a boundary cell is cut off.
TABLE_JS = """() => {
  const d = document.querySelector('.fillscope-table-dialog');
  if (!d) return null;
  const body = d.querySelector('.fst-body').getBoundingClientRect();
  const cut = [...d.querySelectorAll('td.fs-boundary')].filter(td => {
    const r = td.getBoundingClientRect();
    return td.scrollWidth > td.clientWidth + 1 || r.right > body.right + 1 || r.left < body.left - 1;
  }).map(td => td.textContent);
  return {
    nodeId: d.dataset.nodeId, title: d.querySelector('.fst-title').textContent,
    source: d.querySelector('.fst-source').textContent,
    rows: [...d.querySelectorAll('tr.fs-row')].map(tr => [...tr.children].map(td => td.textContent)),
    tensors: [...d.querySelectorAll('tr.fs-row')].map(tr => tr.dataset.tensor),
    headers: [...d.querySelectorAll('th')].map(th => th.textContent),
    text: d.querySelector('.fst-body').textContent,
    warnings: [...d.querySelectorAll('.fs-warning')].map(x => x.textContent),
    imgs: d.querySelectorAll('img').length, cut,
  };
}"""


def _face(cp: ComfyPage, node_id: int):
    return cp.page.evaluate(FACE_JS, node_id)


def _faces(cp: ComfyPage, ids) -> dict:
    return {nid: _face(cp, nid) for nid in ids}


def _wait_faces(cp: ComfyPage, ids, source=None, timeout_ms: int = 20_000) -> dict:
    """Until every node of `ids` shows a table (from `source` when given); their faces."""
    cp.page.wait_for_function(
        """([ids, source]) => ids.every(id => { const t = window.FillScope.tableOf(id);
             return t && (!source || t.source === source); })""", arg=[list(ids), source], timeout=timeout_ms)
    return _faces(cp, ids)


def _open_table(cp: ComfyPage, node_id: int) -> dict:
    """A real mouse click on the node's face (the summary widget, drawn on the canvas); the dialog it opens."""
    cp.center_on(node_id, 1.0)  # also lets a frame draw: the widget's y is laid out
    xy = cp.page.evaluate(
        """(id) => {
          const c = window.app.canvas, n = window.app.graph.getNodeById(id);
          const w = n.widgets.find(w => w.name === 'fillscope_summary');
          const p = c.ds.convertOffsetToCanvas([n.pos[0] + n.size[0] / 2, n.pos[1] + w.y + w.computeSize()[1] / 2]);
          const r = c.canvas.getBoundingClientRect();
          return [r.left + p[0], r.top + p[1]];
        }""", node_id)
    cp.page.mouse.click(xy[0], xy[1])
    cp.page.wait_for_selector(f".fillscope-table-dialog[data-node-id='{node_id}']")
    return cp.page.evaluate(TABLE_JS)


def _close_table(cp: ComfyPage) -> None:
    cp.page.click(".fillscope-table-dialog .fst-close")
    cp.page.wait_for_selector(".fillscope-table-dialog", state="detached")


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


def _report_file(entry: dict, node_id: int) -> dict:
    return entry["outputs"][str(node_id)]["fillscope_report"][0]


def _fetch_view(cp: ComfyPage, f: dict):
    return cp.page.evaluate("async (f) => { const r = await fetch('/view?' + new URLSearchParams(f));"
                            " return r.ok ? await r.json() : null; }", f)


# JS: draw one frame with fillText watched: every text drawn and its height on screen (CSS px).
DRAW_JS = """() => {
  const proto = CanvasRenderingContext2D.prototype, orig = proto.fillText, seen = [];
  proto.fillText = function (text, ...rest) {
    const m = this.getTransform(), px = parseFloat((/([\\d.]+)px/.exec(this.font) || [])[1]);
    seen.push([String(text), px * Math.hypot(m.a, m.b) / (window.devicePixelRatio || 1)]);
    return orig.call(this, text, ...rest);
  };
  try { window.app.canvas.draw(true, true); } finally { proto.fillText = orig; }
  return {seen, lowQuality: window.app.canvas.low_quality, scale: window.app.canvas.ds.scale};
}"""


def _fit_zoom_draw(cp: ComfyPage) -> dict:
    """The whole graph in view, zoomed out (at most 50%: the templates are laid out to fit a window at a readable
    zoom) with the frontend's default level of detail (LiteGraph draws no text below ~8 px: its low-quality mode),
    one frame drawn with fillText watched."""
    cp.page.evaluate("async () => { await window.app.ui.settings.setSettingValueAsync("
                     "'LiteGraph.Canvas.MinFontSizeForLOD', 8); }")
    cp.fit_view()
    cp.zoom_out_to(0.5)
    return cp.page.evaluate(DRAW_JS)


def test_load_workflow_no_missing_nodes(canvas, workflow):
    cp = canvas
    _assert_no_errors(cp)  # the app started cleanly with the pack's extension
    assert "FillScope.ShapesOnNodes" in cp.extension_names(), "web/fillscope.js was not loaded by the frontend"

    # The missing-nodes check itself: a node type nobody registered is reported and opens the warning dialog.
    bogus = copy.deepcopy(workflow)
    next(n for n in bogus["nodes"] if n["type"].startswith("FillScope"))["type"] = "FillScopeNoSuchNode"
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
    assert all(f is None for f in _faces(cp, _fillscope_ids(workflow)).values())  # nothing ran on this server yet

    saved = cp.serialize()
    assert _widgets_values(saved) == _widgets_values(workflow)


ADVANCED_JS = """(id) => {
  const n = window.app.graph.getNodeById(id);
  const shown = () => n.widgets.filter((w) => n.isWidgetVisible(w)).map((w) => w.name);
  const bottom = () => Math.max(...n.widgets.filter((w) => n.isWidgetVisible(w)).map((w) => w.y + (w.computedHeight ?? 0)));
  window.app.canvas.draw(true, true);  // arrange(): the widgets' y and the node's height as drawn
  const before = {shown: shown(), height: n.size[1], fits: n.computeSize()[1]};
  n.toggleAdvanced();
  window.app.canvas.draw(true, true);
  const opened = {shown: shown(), height: n.size[1], bottom: bottom()};
  n.toggleAdvanced();
  window.app.canvas.draw(true, true);
  const after = {shown: shown(), height: n.size[1]};
  n.setSize([n.size[0], before.height]);  // Hide Advanced leaves the grown size (LiteGraph only expands): put it back
  window.app.canvas.draw(true, true);
  return {before, opened, after,
          advanced: n.widgets.filter((w) => w.options?.advanced).map((w) => w.name)};
}"""


def test_loader_advanced_inputs_fold_away(canvas, workflow):
    """A loader shows source and dtype; device, placeholder_seed, memory (and storage) are advanced inputs: hidden
    until the node menu's Show Advanced, and hidden ones take no room (frontend 1.32.9 stacks them otherwise)."""
    cp = canvas
    _ensure_loaded(cp, workflow)
    loader = _id_of(workflow, "FillScopeLoadFluxFillTransformer")
    r = cp.page.evaluate(ADVANCED_JS, loader)
    assert {"device", "placeholder_seed", "memory", "storage"} <= set(r["advanced"]), r
    assert r["before"]["shown"][:2] == ["source", "dtype"] and not set(r["advanced"]) & set(r["before"]["shown"]), r
    assert set(r["advanced"]) <= set(r["opened"]["shown"]), r  # Show Advanced brings them all back
    assert r["opened"]["bottom"] <= r["opened"]["height"], r  # ... and the node grows to hold them
    assert r["after"]["shown"] == r["before"]["shown"], r
    saved = cp.serialize()
    assert _widgets_values(saved) == _widgets_values(workflow)  # every widget still saved, in order


def test_run_shows_shapes_tables(canvas, workflow):
    cp = canvas
    _ensure_loaded(cp, workflow)
    cp.full_detail()  # DOM widgets hide below the LOD zoom; draw everything at every zoom
    t0 = time.monotonic()
    pid, entry = _run(cp, fresh=True)
    run_s = time.monotonic() - t0
    RUNS["flux"] = (pid, entry)

    # Every FillScope node reports shapes and shows exactly one face: the key shape first.
    faces = _wait_faces(cp, _fillscope_ids(workflow), "run")
    for nid, f in faces.items():
        assert f["count"] == 1 and f["value"], (nid, f)
        assert f["serialize"] is False and f["optionsSerialize"] is False
    assert faces[FILL_CONDITION]["value"].startswith("fill_condition [1, 4096, 320] bf16"), faces[FILL_CONDITION]
    assert faces[SYNTHETIC_IMAGE]["value"].splitlines()[:2] == ["image [1, 1024, 1024, 3] fp32", "mask [1, 1024, 1024]"]
    assert faces[SHAPES_REPORT]["value"].startswith("12/12 boundaries observed"), faces[SHAPES_REPORT]
    assert "params" in faces[_id_of(workflow, "FillScopeLoadCLIPL")]["value"]  # a loader on meta weights: no tensors

    # One click on the face: the whole table in a dialog.
    t = _open_table(cp, FILL_CONDITION)
    assert t["title"] == cp.page.evaluate(f"() => window.app.graph.getNodeById({FILL_CONDITION}).title")
    rows = {r[1]: r for r in t["rows"]}
    assert rows["fill_condition"][2] == "[1, 4096, 320]" and rows["fill_condition"][4] == "measured·meta", t["rows"]
    assert len(t["rows"]) == len(entry["outputs"][str(FILL_CONDITION)]["fillscope_shapes"][0]["node"]["tensors"])
    assert "wall " in t["text"] and t["source"].startswith("ran at")
    cp.screenshot(SHOTS / "fill_condition_table.png")
    _close_table(cp)

    # The Shapes Report's whole boundary table, the boundary column first and none of it cut off.
    t = _open_table(cp, SHAPES_REPORT)
    assert t["headers"][:3] == ["boundary", "tensor", "shape"], t["headers"]
    assert "fill_condition" in t["tensors"] and "decoded_image" in t["tensors"]
    assert len(t["rows"]) == len(entry["outputs"][str(SHAPES_REPORT)]["fillscope_boundaries"])
    row = [r for r in t["rows"] if r[1] == "fill_condition"][0]
    assert row[0] == "fill condition = cat(latents 64, mask 256)" and row[2] == "[1, 4096, 320]", row
    assert row[4] == "measured·meta", row
    assert t["cut"] == [], f"boundary cells cut off: {t['cut']}"
    assert "boundaries equal the seed trace's shapes" in t["text"]
    cp.screenshot(SHOTS / "shapes_report_table.png")
    cp.page.keyboard.press("Escape")
    cp.page.wait_for_selector(".fillscope-table-dialog", state="detached")

    # Public hook for the architecture viewer: the report file, fetchable with /view.
    last = cp.page.evaluate("() => window.FillScope.lastReport")
    assert last and last["filename"].endswith(".json") and last["type"] == "output", last
    assert _report_file(entry, SHAPES_REPORT)["filename"] == last["filename"]
    doc = _fetch_view(cp, last)
    assert doc["schema"] == "fillscope.shapes/1" and doc["boundaries"]

    # Display only: the saved workflow carries exactly the file's widget values and node sizes (the summary grew
    # the nodes on the canvas, not in the workflow: it is not "modified"), the prompt no summary.
    saved = cp.serialize()
    assert _widgets_values(saved) == _widgets_values(workflow)
    assert _sizes(saved) == _sizes(workflow)
    prompt = cp.page.evaluate("async () => (await window.app.graphToPrompt()).output")
    assert all("fillscope_summary" not in n["inputs"] for n in prompt.values())

    # Zoomed out with the whole graph in view the frontend draws no text of its own (low quality); each face shows
    # its key, drawn large enough to read.
    drawn = _fit_zoom_draw(cp)
    assert drawn["lowQuality"] and drawn["scale"] < 0.6, drawn["scale"]
    faces = _faces(cp, _fillscope_ids(workflow))
    for nid, f in faces.items():
        assert f["drawn"]["mode"] == "big" and f["drawn"]["screenPx"] >= 9, (nid, f["drawn"])
        assert any(text == f["drawn"]["text"] and px >= 9 for text, px in drawn["seen"]), (nid, f["drawn"])
    key = faces[FILL_CONDITION]["drawn"]["text"]
    assert key in ("fill_condition [1, 4096, 320]", "[1,4096,320]"), key
    cp.screenshot(SHOTS / "flux_fill_meta_trace_fit_zoom.png")

    cp.full_detail()
    cp.fit_view()
    cp.screenshot(SHOTS / "flux_fill_meta_trace_run.png")
    cp.center_on(FILL_CONDITION, 1.0)
    cp.screenshot(SHOTS / "fill_condition_node.png")
    cp.center_on(SHAPES_REPORT - 1, 1.0)
    cp.screenshot(SHOTS / "decode_and_report_nodes.png")
    _assert_no_errors(cp)
    print(f"\n[browser] canvas run of flux_fill_meta_trace: {run_s:.1f}s")


def test_hostile_prompt_stays_text(canvas, workflow):
    cp = canvas
    _ensure_loaded(cp, workflow)
    if "flux" not in RUNS:  # run alone: the first run first
        cp.full_detail()
        RUNS["flux"] = _run(cp, fresh=True)
    first_report = _report_file(RUNS["flux"][1], SHAPES_REPORT)
    cp.set_widget(PROMPT, "text", XSS)
    pid, entry = _run(cp, fresh=False)  # a re-run: what the new text changes executes again
    assert entry["prompt"][2][str(PROMPT)]["inputs"]["text"] == XSS  # went to the server as text
    assert str(PROMPT) in cp.executed_nodes()

    # The Shapes Report ran again and wrote new files: the counter advanced, the first run's file is still there.
    second_report = _report_file(entry, SHAPES_REPORT)
    assert second_report["filename"] != first_report["filename"], (first_report, second_report)
    assert _fetch_view(cp, first_report) and _fetch_view(cp, second_report)
    assert cp.page.evaluate("() => window.FillScope.lastReport.filename") == second_report["filename"]

    assert cp.dialogs == [], cp.dialogs  # no alert() ran
    for nid in _fillscope_ids(workflow):
        f = _face(cp, nid)
        assert f is not None and f["count"] == 1, f"node {nid}: face not replaced on re-execution: {f}"
    assert cp.page.evaluate("() => document.querySelectorAll('[onerror]').length") == 0
    t = _open_table(cp, SHAPES_REPORT)  # the report re-ran (its input changed) and still shows the boundary table
    assert "fill_condition" in t["tensors"] and t["imgs"] == 0
    _close_table(cp)
    # The prompt shows as text in the prompt node's own textarea, and is in the saved workflow as plain text.
    assert cp.page.evaluate(
        "(id) => window.app.graph.getNodeById(id).widgets.find(w => w.name === 'text').element.value",
        PROMPT) == XSS
    saved = cp.serialize()
    expected = _widgets_values(workflow)
    expected[PROMPT] = [XSS, 512]
    assert _widgets_values(saved) == expected

    # The renderer with hostile data in every field it shows: text only, never markup; a message without
    # shapes falls back to its text; odd messages do not throw.
    hostile = {
        "fillscope_shapes": [{"schema": "fillscope.shapes/1", "trail": [], "node": {
            "id": "x", "node": "FillScopeFluxPrompt", "title": XSS, "wall_s": 0.0123, "peak_cuda_bytes": 3 * 2**30,
            "tensors": [{"name": XSS, "role": "output", "shape": [1, XSS], "dtype": XSS, "device": XSS,
                         "provenance": "measured"},
                        {"name": "cfg", "role": "output", "shape": [1, 2], "dtype": "", "device": "",
                         "provenance": "static-config"}],
            "facts": {XSS: XSS}, "notes": [XSS], "warnings": [XSS]}}],
        "text": [XSS],
    }
    cp.page.evaluate("([id, m]) => window.app.graph.getNodeById(id).onExecuted(m)", [PROMPT, hostile])
    f = _face(cp, PROMPT)
    assert f["count"] == 1 and XSS + " [1, " + XSS + "]" in f["value"].splitlines(), f  # drawn on the canvas, as text
    assert f["value"].splitlines()[-1] == "⚠ " + XSS, f
    t = _open_table(cp, PROMPT)
    assert t["imgs"] == 0
    assert t["rows"][0][1] == XSS and t["rows"][0][4] == "measured·" + XSS
    assert t["rows"][1][4] == "config"
    assert t["warnings"] == ["⚠ " + XSS]
    assert "peak CUDA 3.00 GiB" in t["text"] and "wall 12.3 ms" in t["text"]
    cp.screenshot(SHOTS / "hostile_text.png")
    _close_table(cp)

    cp.page.evaluate("([id, m]) => window.app.graph.getNodeById(id).onExecuted(m)", [PROMPT, {"text": [XSS]}])
    assert _face(cp, PROMPT)["value"] == XSS
    t = _open_table(cp, PROMPT)
    assert t["text"] == XSS and t["imgs"] == 0
    _close_table(cp)

    cp.page.evaluate(
        """([id, x]) => { const n = window.app.graph.getNodeById(id);
             n.onExecuted({}); n.onExecuted(undefined); n.onExecuted({fillscope_shapes: [null], text: 'x'});
             n.onExecuted({fillscope_boundaries: [null, {boundary: x, shape: null}]});
             n.onExecuted({fillscope_report: [{filename: 7}]}); }""",
        [PROMPT, XSS],
    )
    t = _open_table(cp, PROMPT)
    assert t["rows"] == [[XSS, "", "not observed", "", "", ""]], t["rows"]
    _close_table(cp)
    assert _face(cp, PROMPT)["count"] == 1
    assert cp.page.evaluate("() => window.FillScope.lastReport.filename") == second_report["filename"]
    assert cp.page.evaluate("() => document.querySelectorAll('[onerror], .fillscope-table-dialog img').length") == 0
    assert cp.dialogs == []
    _assert_no_errors(cp)


def test_cached_nodes_and_reload(canvas, workflow):
    """An SD3 meta trace after the FLUX one: ComfyUI serves the CLIP-L and T5 loaders and the synthetic image from
    its cache (same class and inputs); they show the table they had. After a page reload every table comes back,
    and so does the viewer's newest report."""
    cp = canvas
    if "flux" not in RUNS:
        _ensure_loaded(cp, workflow)
        RUNS["flux"] = _run(cp, fresh=True)
    flux_outputs = RUNS["flux"][1]["outputs"]
    sd3 = json.loads(SD3_WORKFLOW.read_text())
    ids = _fillscope_ids(sd3)
    cp.load_workflow(sd3)
    assert cp.missing_node_types() == [] and cp.open_dialogs() == []
    cp.full_detail()

    pid = cp.queue()
    entry = cp.wait_history(pid, timeout=120)
    assert cp.wait_executed(pid) == "success"
    cached = sorted(int(i) for i in cp.cached_nodes(pid))
    loaders = {_id_of(sd3, t): _id_of(workflow, t) for t in ("FillScopeLoadCLIPL", "FillScopeLoadT5",
                                                              "FillScopeSyntheticImageMask")}
    assert set(loaders) <= set(cached), (cached, loaders)
    assert not set(cached) & {int(k) for k in entry["outputs"]}  # nothing ran for them: no ui from the server

    # every node that ran or was cached shows its table (a cached one as soon as /history answered)
    faces = {**_wait_faces(cp, [i for i in ids if i not in cached], "run"), **_wait_faces(cp, cached, "cached")}
    for nid in ids:
        f = faces[nid]
        assert f["count"] == 1 and f["value"], (nid, f)
        assert f["source"] == ("cached" if nid in cached else "run"), (nid, f)
    for sd3_id, flux_id in loaders.items():  # a cached node's table is the one its output was made with
        assert cp.page.evaluate("(id) => window.FillScope.tableOf(id).message", sd3_id) == flux_outputs[str(flux_id)]
    t = _open_table(cp, _id_of(sd3, "FillScopeSyntheticImageMask"))
    assert {r[1] for r in t["rows"]} == {"image", "mask"} and "cache" in t["source"], t
    _close_table(cp)
    cp.center_on(_id_of(sd3, "FillScopeLoadCLIPL"), 1.0)
    cp.screenshot(SHOTS / "sd3_after_flux_cached_loaders.png")
    before = {nid: f["value"] for nid, f in faces.items()}
    sd3_report = _report_file(entry, _id_of(sd3, "FillScopeShapesReport"))
    assert cp.page.evaluate("() => window.FillScope.lastReport") == sd3_report

    # A page reload: the frontend restores the workflow; the tables and the viewer's reports come back from /history.
    cp.page.reload(wait_until="domcontentloaded")
    cp.wait_ready()
    assert sorted(cp.page.evaluate("() => window.app.graph.nodes.map(n => n.id)")) == sorted(n["id"] for n in sd3["nodes"])
    faces = _wait_faces(cp, ids, "restored")
    assert {nid: f["value"] for nid, f in faces.items()} == before
    assert cp.page.evaluate("() => window.FillScope.lastReport") == sd3_report
    reports = cp.page.evaluate("() => window.FillScope.reports.map(r => r.filename)")
    assert reports[0] == sd3_report["filename"] and len(reports) >= 3, reports  # SD3, then the two FLUX runs
    assert _sizes(cp.serialize()) == _sizes(sd3)  # restoring does not make the workflow "modified"
    drawn = _fit_zoom_draw(cp)
    assert all(_face(cp, nid)["drawn"]["mode"] == "big" for nid in ids), drawn["scale"]
    cp.screenshot(SHOTS / "sd3_meta_trace_after_reload_fit_zoom.png")
    cp.full_detail()
    _assert_no_errors(cp)
