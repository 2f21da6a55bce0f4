"""The key canvas cases on both frontends and in both node renderers: the pinned frontend (ComfyUI 0.3.75's
requirement, 1.32.9, in .venv) and the newest on PyPI (browser.NEWEST_FRONTEND, pinned in scripts/setup.sh, which
unpacks it under tests/.cache/frontends/; served with ComfyUI's --front-end-root), each with the litegraph canvas and
with Nodes 2.0 (setting Comfy.VueNodes.Enabled: nodes drawn as DOM elements, FillScope's canvas-drawn face in a small
canvas of its own inside them):

- the page runs the reported frontend version, with the pack's extension and every FillScope node registered;
- every template loads with every node type known, no missing-nodes or missing-models dialog (1.58.1: no issues card),
  the file's widget values, groups and node count, and no error; the pack's template browser lists one card each
  (once per frontend, TEMPLATE_BROWSER_COMBOS: the same dialog in either renderer; ComfyUI's own cards' thumbnails
  answered with a 1x1 picture, browser.ComfyPage.stub_core_template_thumbnails);
- a FillScope graph (flux_fill_meta_trace) queues from the canvas and runs; each FillScope node's face shows its key
  shape (drawn: fillText watched on the litegraph canvas, the face's own canvas in Nodes 2.0), and a click on the face
  opens the node's table;
- the FillScope sidebar tab opens the architecture viewer on the newest report, and closes again.

One server per frontend (the session's for 1.32.9; a second one on the same model folders for 1.58.1) and one page
per frontend: loaded with the litegraph canvas, then switched to Nodes 2.0 on the page (the setting, live, as a user
does). The graph runs once per frontend, on the litegraph canvas (a full-size FLUX Fill forward on meta weights:
seconds of meta kernels, which renderer queued it is not the point); Nodes 2.0 then loads the workflow anew, and its
faces are the ones web/fillscope.js restores from that run's /history entry (source "restored", shown after the nodes
were mounted: the same show() and triggerDraw a live run takes), checked as the litegraph ones are (the key shape,
drawn in the face's own canvas, a click opens the table); that its Queue would send the same prompt is checked as
app.graphToPrompt() equal to the prompt in /history. (Before 2026-12-07 each renderer ran the graph itself: two
more meta runs.) Needs playwright and a system chromium (skipped without them outside CI,
a failure in CI); the newest frontend missing (`make setup` could not download it) skips its cases outside CI and
fails them in CI.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import (  # noqa: E402
    NEWEST_FRONTEND,
    VUE_NODES,
    ComfyPage,
    http_json,
    pinned_frontend_version,
    require_browser,
    sidebar_tab_button,
)
from workflow_helpers import EXAMPLES, WORKFLOWS  # noqa: E402

sys.path.insert(0, str(WORKFLOWS))
import graphs  # noqa: E402

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parent.parent
SHOTS = REPO / "test-artifacts" / "browser" / "frontends"
PACK = "FillScope"  # the template browser's category: the pack's folder under custom_nodes
NAMES = sorted(g.name for g in graphs.GRAPHS)
TAB_ID = "fillscope-architecture"
VIEWER = ".fillscope-viewer[data-mode='sidebar']"
EMPTY_TEXT = "Run a FillScope trace node"

# example_workflows/flux_fill_meta_trace.json (api_workflows/graphs.py)
RUN_WORKFLOW = "flux_fill_meta_trace"
FILL_CONDITION = 9
SHAPES_REPORT = 12

try:
    PINNED = pinned_frontend_version()
except (OSError, RuntimeError):  # no ComfyUI here: the server fixture skips (fails in CI) with the reason
    PINNED = "pinned"
COMBOS = [(which, mode) for which in ("pinned", "newest") for mode in ("litegraph", "nodes2")]


@dataclass
class Frontend:
    cp: ComfyPage
    which: str  # "pinned" | "newest"
    version: str
    nodes2: bool
    server: object
    run: tuple | None = None  # (prompt id, /history entry) of the frontend's run of RUN_WORKFLOW (_ensure_run)
    faces_from: str = "run"  # the faces' source: "run" (this renderer queued it), "restored" (from that /history entry)


_PAGES: dict = {}  # which -> ComfyPage: one page per frontend (see fe)
_RUNS: dict = {}  # which -> (prompt id, /history entry): the run of RUN_WORKFLOW on that frontend's page (_ensure_run)


@pytest.fixture(scope="module", autouse=True)
def _pages():
    """The module's pages, closed when it ends."""
    yield _PAGES
    for cp in _PAGES.values():
        cp.close()
    _PAGES.clear()
    _RUNS.clear()


def _report_ignored(cp: ComfyPage, label: str) -> None:
    if cp.ignored_console_errors:
        jobs = sum("JobsApiError" in e for e in cp.ignored_console_errors)
        print(f"[frontends] {label}: {len(cp.ignored_console_errors)} console errors ignored"
              f" (browser.ignorable_console_error), {jobs} of them the Jobs API's 404")


@pytest.fixture(scope="module", params=COMBOS,
                ids=[f"{PINNED if w == 'pinned' else NEWEST_FRONTEND}-{m}" for w, m in COMBOS])
def fe(request):
    """A page for one frontend and renderer, pinned first (the newest frontend's server, one for the session, starts
    with its first case). One page per frontend: its first renderer is the setting it loads with, the second is
    switched on the page as a user does (Settings > Lite Graph > Modern Node Design: Comfy.VueNodes.Enabled, live),
    its graph cleared. History emptied when a frontend's page starts: the viewer and the faces restore from /history,
    its first renderer starts from none; the second one keeps the first one's run there (_ensure_run)."""
    which, mode = request.param
    require_browser("browser tests on both frontends")
    if which == "pinned":
        server, version = request.getfixturevalue("served_models"), PINNED
    else:
        server, version = request.getfixturevalue("newest_frontend_server"), NEWEST_FRONTEND
    for other in [k for k in _PAGES if k != which]:  # the other frontend is done with
        _PAGES.pop(other).close()
        _RUNS.pop(other, None)
    nodes2 = mode == "nodes2"
    t0 = time.monotonic()
    cp = _PAGES.get(which)
    if cp is None:
        http_json(server.url + "/history", {"clear": True})
        _RUNS.pop(which, None)
        settings = {VUE_NODES: nodes2, "Comfy.Window.UnloadConfirmation": False}
        cp = _PAGES[which] = ComfyPage(server.url, viewport=(1600, 1000), settings=settings).start()
        print(f"\n[frontends] {version} {mode}: page ready in {time.monotonic() - t0:.1f}s")
    else:
        cp.dismiss_dialogs()
        cp.page.evaluate("async ([id, on]) => { window.app.graph.clear();"
                         " await window.app.ui.settings.setSettingValueAsync(id, on); }", [VUE_NODES, nodes2])
        cp.page.wait_for_function("(on) => window.LiteGraph.vueNodesMode === on", arg=nodes2)
        print(f"\n[frontends] {version} {mode}: switched on the page in {time.monotonic() - t0:.1f}s")
    yield Frontend(cp, which, version, nodes2, server)
    _report_ignored(cp, f"{version} {mode}")


def _assert_no_errors(cp: ComfyPage) -> None:
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())


def _widgets_values(wf: dict) -> dict:
    # 1.58.1 serialises no widgets_values for a node without widgets (1.32.9: [])
    return {n["id"]: n.get("widgets_values") or [] for n in wf["nodes"]}


def _shot(fe: Frontend, name: str) -> None:
    fe.cp.screenshot(SHOTS / f"{fe.version}-{'nodes2' if fe.nodes2 else 'litegraph'}-{name}.png")


def _ensure_run(fe: Frontend) -> tuple[str, dict]:
    """flux_fill_meta_trace on the canvas, queued with the canvas' Queue and run: once per frontend, on its page's first
    renderer. The second renderer loads the workflow anew and shows the faces web/fillscope.js restores from that
    run's /history entry (afterConfigureGraph: restoreGraph), drawn by this renderer; and the canvas' Queue here would
    send the very prompt that ran (app.graphToPrompt, compared with the one in /history)."""
    if fe.run:
        return fe.run
    cp = fe.cp
    wf = json.loads((EXAMPLES / f"{RUN_WORKFLOW}.json").read_text())
    cp.load_workflow(wf, settle_ms=0)  # no dialog checked
    if fe.which in _RUNS:
        pid, entry = _RUNS[fe.which]
        queued = cp.page.evaluate("async () => (await window.app.graphToPrompt()).output")
        assert queued == entry["prompt"][2], "this renderer would queue another prompt than the one that ran"
        fe.run, fe.faces_from = (pid, entry), "restored"
        return fe.run
    cp.free_cache()  # the server may have run this very prompt for another page: every node runs again
    pid = cp.queue()
    entry = cp.wait_history(pid, timeout=120)
    assert cp.wait_executed(pid) == "success"
    assert entry["status"]["status_str"] == "success"
    fe.run = _RUNS[fe.which] = (pid, entry)
    return fe.run


def test_only_the_jobs_api_404_is_ignored_from_the_newest_frontends_console():
    """The filter is by name: 1.58.1's two Jobs API messages for a 404 (ComfyUI 0.3.75 has no /api/jobs), nothing
    else the Jobs API or the queue could log."""
    from browser import JOBS_API_404_ERRORS, JOBS_API_PATH, ignorable_console_error

    at = "http://127.0.0.1:8188/assets/api-BA-sjSl5.js"
    for message in JOBS_API_404_ERRORS:
        assert ignorable_console_error(message + "\n    at fetchJobsRaw (" + at + ":1:30008)", at)
    for message in ("[Jobs API] Error fetching jobs: JobsApiError: Failed to fetch jobs: 500",
                    "Failed to fetch queue: TypeError: Failed to fetch",
                    "[Jobs API] Error fetching jobs: ZodError: invalid_type",
                    "Failed to fetch job detail for job 1: TypeError: Failed to fetch",
                    "Uncaught TypeError: window.FillScope is undefined"):
        assert not ignorable_console_error(message, at), message
    # the 404 responses themselves: failed loads of a path that is not an extension's file
    jobs = f"http://127.0.0.1:8188{JOBS_API_PATH}?status=in_progress,pending&limit=200&offset=0"
    assert ignorable_console_error("Failed to load resource: the server responded with a status of 404 (Not Found)", jobs)


def test_the_frontend_runs_with_the_packs_extension_and_nodes(fe):
    cp = fe.cp
    assert cp.frontend_version() == fe.version
    assert cp.vue_nodes() is fe.nodes2
    assert "FillScope.ShapesOnNodes" in cp.extension_names(), "web/fillscope.js was not loaded"
    hooks = cp.page.evaluate("() => ['openViewer', 'openTable', 'tableOf'].map(k => typeof window.FillScope[k])")
    assert hooks == ["function"] * 3
    served = sorted(k for k in fe.server.object_info() if k.startswith("FillScope"))
    registered = cp.page.evaluate(
        "() => Object.keys(window.LiteGraph.registered_node_types).filter(k => k.startsWith('FillScope')).sort()")
    assert registered == served and len(served) >= 40, (len(registered), len(served))
    _assert_no_errors(cp)


# Where the template browser is opened (once per frontend: the dialog and its cards are the same in either renderer,
# and a card's click is an app.loadGraphData of the template, which every template gets in each renderer here): the
# pinned frontend in Nodes 2.0 (test_browser_templates.py opens it on the litegraph canvas for every card), the newest
# on the litegraph canvas.
TEMPLATE_BROWSER_COMBOS = (("pinned", "nodes2"), ("newest", "litegraph"))


def test_every_template_loads_complete(fe):
    """Each template as its card loads it (app.loadGraphData): every node type known, no dialog or issues card, the
    file's nodes, widget values and groups; and the pack's template browser lists one card per template, and a card's
    click loads its template (TEMPLATE_BROWSER_COMBOS: once per frontend)."""
    cp = fe.cp
    t0 = time.monotonic()
    # the pinned frontend's litegraph canvas: test_browser_templates.py loads every template from its card with these
    # checks and more; here only the template browser below, as on the others
    loaded = NAMES if fe.which == "newest" or fe.nodes2 else []
    for name in loaded:
        ui = json.loads((EXAMPLES / f"{name}.json").read_text())
        cp.page.evaluate("() => window.app.graph.clear()")
        cp.load_workflow(ui, settle_ms=250)  # a missing-nodes/models dialog or issues card shows within it
        assert cp.missing_node_types() == [], name
        assert cp.open_dialogs() == [], (name, "a dialog or issues card on load (missing nodes or models?)")
        saved = cp.serialize()
        assert sorted((n["id"], n["type"]) for n in saved["nodes"]) == sorted((n["id"], n["type"]) for n in ui["nodes"])
        assert _widgets_values(saved) == _widgets_values(ui), name
        assert [g["title"] for g in saved["groups"]] == [g["title"] for g in ui["groups"]], name
        assert not cp.errors(), (name, cp.errors())
    load_s = time.monotonic() - t0
    mode = "nodes2" if fe.nodes2 else "litegraph"
    if (fe.which, mode) not in TEMPLATE_BROWSER_COMBOS:
        print(f"\n[frontends] {fe.version} {mode}: {len(loaded)} templates loaded in {load_s:.1f}s (the template"
              f" browser: on {[m for w, m in TEMPLATE_BROWSER_COMBOS if w == fe.which][0]})")
        return

    # the template browser: the pack's category lists one card per template; a click loads it (and closes the browser).
    # ComfyUI's own cards (All Templates, where it opens) get a 1x1 picture: their thumbnails are not what is tested
    cp.stub_core_template_thumbnails()
    cp.page.evaluate("() => window.app.graph.clear()")
    cp.page.evaluate("async () => await window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    cp.page.locator("[role=dialog] nav [role=button]", has_text=PACK).click()
    cards = "[role=dialog] [data-testid^='template-workflow-']"
    cp.page.wait_for_function("([sel, n]) => document.querySelectorAll(sel).length >= n", arg=[cards, len(NAMES)])
    listed = cp.page.evaluate("(sel) => [...document.querySelectorAll(sel)].map(c => c.dataset.testid)", cards)
    assert sorted(listed) == [f"template-workflow-{n}" for n in NAMES]
    ui = json.loads((EXAMPLES / f"{RUN_WORKFLOW}.json").read_text())
    cp.page.locator(f"[data-testid='template-workflow-{RUN_WORKFLOW}']").click()
    cp.page.wait_for_function("(n) => window.app.graph.nodes.length === n", arg=len(ui["nodes"]), timeout=30_000)
    cp.page.wait_for_function("(sel) => !document.querySelector(sel)", arg=cards, timeout=30_000)
    cp.stub_core_template_thumbnails(on=False)  # (a routed context is served from no HTTP cache)
    cp.page.wait_for_timeout(500)
    assert cp.missing_node_types() == [] and cp.open_dialogs() == []
    _shot(fe, "template")
    _assert_no_errors(cp)
    print(f"\n[frontends] {fe.version} {'nodes2' if fe.nodes2 else 'litegraph'}: {len(loaded)} templates loaded"
          f" in {load_s:.1f}s")


# JS: one frame of the litegraph canvas drawn with fillText watched: the texts drawn.
DRAW_JS = """() => {
  const proto = CanvasRenderingContext2D.prototype, orig = proto.fillText, seen = [];
  proto.fillText = function (text, ...rest) { seen.push(String(text)); return orig.call(this, text, ...rest); };
  try { window.app.canvas.draw(true, true); } finally { proto.fillText = orig; }
  return seen;
}"""

# JS: Nodes 2.0: the node's DOM element and the face's own canvas in it (the one canvas a FillScope node's widgets
# have: the frontend's legacy-widget component draws a canvas-drawn widget there): on screen, how many pixels drawn.
VUE_FACE_JS = """(id) => {
  const el = document.querySelector(`.lg-node[data-node-id="${id}"]`);
  if (!el) return null;
  const cs = [...el.querySelectorAll('.lg-node-widget canvas')];
  const c = cs[0], r = c && c.getBoundingClientRect();
  let drawn = 0;
  if (c && c.width && c.height) {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i]) drawn++;
  }
  return {canvases: cs.length, visible: el.getClientRects().length > 0, drawn,
          box: r ? [r.left, r.top, r.width, r.height] : null};
}"""

FACE_JS = """(id) => { const n = window.app.graph.getNodeById(id);
  const w = (n.widgets || []).find(w => w.name === 'fillscope_summary');
  const t = window.FillScope.tableOf(id);
  return w ? {value: w.value, drawn: w.fsDrawn, source: t && t.source} : null; }"""


def _click_face(fe: Frontend, node_id: int) -> dict:
    """A real mouse click on the node's face: on the litegraph canvas at the widget's place, in Nodes 2.0 on the
    face's own canvas; the table dialog it opens (rows as cell texts)."""
    cp = fe.cp
    cp.center_on(node_id, 1.0)
    if fe.nodes2:
        box = cp.page.evaluate(VUE_FACE_JS, node_id)["box"]
        x, y = box[0] + box[2] / 2, box[1] + box[3] / 2
    else:
        x, y = cp.page.evaluate(
            """(id) => { const c = window.app.canvas, n = window.app.graph.getNodeById(id);
                 const w = n.widgets.find(w => w.name === 'fillscope_summary');
                 const y = n.pos[1] + w.y + w.computeSize()[1] / 2;
                 const p = c.ds.convertOffsetToCanvas([n.pos[0] + n.size[0] / 2, y]);
                 const r = c.canvas.getBoundingClientRect(); return [r.left + p[0], r.top + p[1]]; }""", node_id)
    cp.page.mouse.click(x, y)
    cp.page.wait_for_selector(f".fillscope-table-dialog[data-node-id='{node_id}']")
    return cp.page.evaluate("""() => [...document.querySelectorAll('.fillscope-table-dialog tr.fs-row')]
                                 .map(tr => [...tr.children].map(td => td.textContent))""")


def test_a_fillscope_graph_runs_from_the_canvas_and_its_faces_show_the_shapes(fe):
    cp = fe.cp
    t0 = time.monotonic()
    pid, entry = _ensure_run(fe)
    run_s = time.monotonic() - t0
    wf = json.loads((EXAMPLES / f"{RUN_WORKFLOW}.json").read_text())
    ids = [n["id"] for n in wf["nodes"] if n["type"].startswith("FillScope")]
    cp.page.wait_for_function("(ids) => ids.every(id => window.FillScope.tableOf(id))", arg=ids)
    faces = {i: cp.page.evaluate(FACE_JS, i) for i in ids}
    assert all(f and f["value"] and f["source"] == fe.faces_from for f in faces.values()), faces
    assert faces[FILL_CONDITION]["value"].startswith("fill_condition [1, 4096, 320] bf16"), faces[FILL_CONDITION]
    assert faces[SHAPES_REPORT]["value"].startswith("12/12 boundaries observed"), faces[SHAPES_REPORT]
    report = entry["outputs"][str(SHAPES_REPORT)]["fillscope_report"][0]
    assert cp.page.evaluate("() => window.FillScope.lastReport.filename") == report["filename"]

    # what is on screen at 100%: the key shape, drawn
    cp.full_detail()
    cp.center_on(FILL_CONDITION, 1.0)
    if fe.nodes2:
        face = cp.page.evaluate(VUE_FACE_JS, FILL_CONDITION)
        assert face["visible"] and face["canvases"] == 1 and face["drawn"] > 500, face
        drawn = cp.page.evaluate(FACE_JS, FILL_CONDITION)["drawn"]
        assert "[1,4096,320]" in re.sub(r"\s", "", drawn["text"]), drawn  # (the big label or the lines: see below)
    else:
        seen = cp.page.evaluate(DRAW_JS)
        assert any("[1, 4096, 320]" in t for t in seen), [t for t in seen if "[" in t]
        assert cp.page.evaluate(FACE_JS, FILL_CONDITION)["drawn"]["mode"] == "lines"
    _shot(fe, "fill_condition_face")

    rows = _click_face(fe, FILL_CONDITION)
    assert ["fill_condition", "[1, 4096, 320]"] in [r[1:3] for r in rows], rows
    cp.page.click(".fillscope-table-dialog .fst-close")
    cp.page.wait_for_selector(".fillscope-table-dialog", state="detached")
    _assert_no_errors(cp)
    print(f"\n[frontends] {fe.version} {'nodes2' if fe.nodes2 else 'litegraph'}: canvas run {run_s:.1f}s"
          f" (faces: {fe.faces_from})")


def _panel_share(cp: ComfyPage) -> float:
    return cp.page.evaluate("""() => { const p = document.querySelector('.side-bar-panel');
        return p.getBoundingClientRect().width / p.parentElement.getBoundingClientRect().width; }""")


def test_the_fillscope_sidebar_tab_opens_the_viewer_on_the_newest_report(fe):
    cp = fe.cp
    last = cp.page.evaluate("() => window.FillScope.lastReport")
    cp.open_sidebar_tab(TAB_ID)
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='{'loaded' if last else 'empty'}']")
    text = cp.page.inner_text(VIEWER)
    if last:  # a report file of the run above (the Shapes Report's), shown
        files = [f["filename"] for f in fe.run[1]["outputs"][str(SHAPES_REPORT)]["fillscope_report"]]
        name = cp.page.inner_text(f"{VIEWER} .fsv-name")
        assert any(name.endswith(f) for f in files), (name, files)
        if name.endswith(".html"):  # the report page in the viewer's sandboxed iframe, its own script run
            cp.page.wait_for_selector(f"{VIEWER} iframe.fsv-frame[data-loaded='true']")
            frame = cp.page.query_selector(f"{VIEWER} iframe.fsv-frame").content_frame()
            frame.wait_for_selector("html.js")
            assert "fill_condition" in frame.inner_text("body")
        else:
            assert cp.page.inner_text(f"{VIEWER} pre.fsv-text").strip()
    else:
        assert EMPTY_TEXT in text
    assert _panel_share(cp) > 0.19  # at least the frontend's own share for a tab
    _shot(fe, "viewer")
    cp.page.click(sidebar_tab_button(TAB_ID))  # the button again: closed
    cp.page.wait_for_selector(VIEWER, state="detached")
    cp.page.evaluate("() => window.app.extensionManager.command.execute('FillScope.OpenArchitectureReport')")
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state]")
    cp.page.click(sidebar_tab_button(TAB_ID))
    cp.page.wait_for_selector(VIEWER, state="detached")
    _assert_no_errors(cp)


def test_the_viewer_panel_opens_wider_than_a_plain_tab(fe):
    """1.32.9's sidebar is PrimeVue's splitter (.p-splitterpanel, flex-basis), 1.58.1's reka-ui's (panels
    [data-panel], flex-grow = their share): web/fillscope_viewer_dom.js widens both."""
    cp = fe.cp
    cp.open_sidebar_tab(TAB_ID)
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state]")
    cp.page.wait_for_timeout(200)
    share = _panel_share(cp)
    cp.page.click(sidebar_tab_button(TAB_ID))
    cp.page.wait_for_selector(VIEWER, state="detached")
    assert 0.33 < share < 0.39, share


def test_a_face_shows_the_summary_lines_at_100_percent_and_the_key_when_zoomed_out(fe):
    """The face picks its layout from the zoom: up to three lines at a readable zoom, the key alone, large, when
    zoomed out. The litegraph canvas redraws every widget each frame; Nodes 2.0 draws the face into its own canvas
    only when the widget is mounted or resized, or when its triggerDraw is called."""
    cp = fe.cp
    _ensure_run(fe)
    cp.full_detail()
    cp.center_on(FILL_CONDITION, 1.0)
    if not fe.nodes2:
        cp.page.evaluate(DRAW_JS)
    assert cp.page.evaluate(FACE_JS, FILL_CONDITION)["drawn"]["mode"] == "lines"
    cp.page.evaluate("async () => { await window.app.ui.settings.setSettingValueAsync("
                     "'LiteGraph.Canvas.MinFontSizeForLOD', 8); }")
    cp.fit_view()
    cp.zoom_out_to(0.5)
    if not fe.nodes2:
        cp.page.evaluate(DRAW_JS)
    assert cp.page.evaluate(FACE_JS, FILL_CONDITION)["drawn"]["mode"] == "big"
