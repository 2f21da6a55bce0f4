"""FillScope's templates in ComfyUI's own template browser (frontend 1.32.9, headless chromium at 1600x1000): exactly
one card per UI workflow (ComfyUI 0.3.75 lists every *.json of a pack's example_workflows, example, examples, workflow
and workflows folders, so the API twins live in api_workflows/), each with its thumbnail (<name>.jpg next to the JSON),
each loading without missing nodes or models and with one prompt box per prompt; on a server without the weights, a
real-weight workflow opens the frontend's Missing Models dialog listing its declared files; and a loader added by hand
starts on a real model file, with its advanced inputs flagged.

The templates as a user first sees them (1600x1000, the size ComfyUI's own templates are judged at; these checks were
test_browser_template_layout.py's, on a page of their own: here each runs on the template its card just loaded):
ComfyUI's "fit view" (the '.' key, command Comfy.Canvas.FitView: 0.75 x the viewport over the bounds of every node and
group) shows every inpaint, edit, outpaint and crop-stitch template at 40 % or more, where node text is still drawn
(ComfyUI's own FLUX.1 Fill inpaint template opens at 51 %); no two nodes overlap and every node lies inside its group,
title bar included; and after a run, when each FillScope node shows its shapes on its face (web/fillscope.js), that
still holds: the layout (api_workflows/graphs.py) reserves the room.

Needs playwright and a system chromium, like test_browser_canvas.py (skipped without them outside CI, a failure in CI).
On the pinned frontend; test_browser_frontends.py loads every template on the newest frontend and in Nodes 2.0 too.

Time: the template browser opens once per clicked card (a card's click closes it: it cannot be reused; seven cards
are clicked, the other templates load as a click loads them, CLICKED_CARDS), on All Templates,
ComfyUI's own 186 templates; their thumbnails (80 of them over 500 kB, many animated) are answered with a 1x1 picture
on this module's pages (browser.ComfyPage.stub_core_template_thumbnails): the pack's cards and pictures, which are
what is tested, still come from the server. No fixed pauses: a card's load is over when app.loadGraphData returned
(COUNT_LOADS_JS), fit view when its animation's last frame is drawn (FIT_VIEW_JS), the Missing Models dialog when it
lists as many entries as the workflow declares.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, require_browser  # noqa: E402
from comfy_server import ComfyServer  # noqa: E402
from workflow_helpers import EXAMPLES, WORKFLOWS  # noqa: E402

sys.path.insert(0, str(WORKFLOWS))
import graphs  # noqa: E402

pytestmark = pytest.mark.server

PACK = "FillScope"  # the pack's folder name under custom_nodes: the template browser's category
SHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
NAMES = sorted(g.name for g in graphs.GRAPHS)
MIN_FIT_SCALE = 0.40
# The templates a user edits and runs: readable at fit zoom. Traces and meta workflows are measured too (printed).
EDIT_TEMPLATES = ["flux_fill_inpaint", "flux_fill_outpaint", "flux_fill_crop_stitch", "sd3_controlnet_inpaint",
                  "sd3_controlnet_crop_stitch", "klein_inpaint", "klein_edit", "klein_crop_stitch",
                  "flux_fill_tiled_inpaint", "klein_tiled_edit"]
FIT_SCALES: dict = {}  # name -> scale, printed at the end of the module
CARDS_JS = """() => [...document.querySelectorAll('.p-dialog [data-testid^="template-workflow-"]')].map(c => {
    const img = c.querySelector('img');
    return {name: c.dataset.testid.replace('template-workflow-', ''), title: (c.querySelector('h3') || {}).textContent,
            src: img && img.getAttribute('src'), loaded: !!(img && img.complete && img.naturalWidth > 0),
            width: img ? img.naturalWidth : 0, height: img ? img.naturalHeight : 0};
})"""


@pytest.fixture(scope="module")
def page(request):
    require_browser("browser template tests")
    server = request.getfixturevalue("served_models")
    with ComfyPage(server.url, viewport=(1600, 1000), settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        cp.stub_core_template_thumbnails()  # ComfyUI's own cards' pictures: not what is tested (module docstring)
        cp.page.evaluate(COUNT_LOADS_JS)
        yield cp
    print("\nfit-view scale at 1600x1000 (ComfyUI's own FLUX.1 Fill inpaint template: 0.51)")
    for name, scale in sorted(FIT_SCALES.items()):
        print(f"  {name:36s} {scale:.3f}{'' if name in EDIT_TEMPLATES else '  (trace / meta / native)'}")


# JS: every node's bounds (LiteGraph's boundingRect: title bar included) and size, every group's bounds and title band.
GEOMETRY_JS = """() => {
  const g = window.app.graph;
  return {scale: window.app.canvas.ds.scale,
          nodes: g.nodes.map(n => ({id: n.id, type: n.type, rect: Array.from(n.boundingRect), size: Array.from(n.size)})),
          groups: g._groups.map(gr => ({title: gr.title, rect: Array.from(gr._bounding), head: gr.titleHeight}))};
}"""


# JS: ComfyUI's fit view (command Comfy.Canvas.FitView: LGraphCanvas.fitViewToSelectionAnimated, DragAndScale's
# animateToBounds: one step a frame, for 350 ms of page time), awaited to its end: until 350 ms have passed since the
# command and a frame went by that left the view as it was (the animation's last frame sets the final view).
FIT_VIEW_JS = """async () => {
  const ds = window.app.canvas.ds, view = () => [ds.scale, ds.offset[0], ds.offset[1]].join(' ');
  const t0 = performance.now();
  await window.app.extensionManager.command.execute('Comfy.Canvas.FitView');
  let last = view();
  for (;;) {
    await new Promise(r => requestAnimationFrame(r));
    const now = view();
    if (now === last && performance.now() - t0 > 400) break;
    last = now;
  }
  window.app.canvas.draw(true, true);  // a frame at the final view (the nodes' bounds as drawn)
}"""


def fit_view(cp: ComfyPage) -> dict:
    """ComfyUI's own fit view (the '.' key's command), after its 350 ms animation; the geometry then."""
    cp.page.evaluate(FIT_VIEW_JS)
    return cp.page.evaluate(GEOMETRY_JS)


def members_of_groups(name: str) -> dict:
    """Group title -> node ids, as the generator groups them."""
    return {title: ids for title, ids in next(g for g in graphs.GRAPHS if g.name == name).groups}


def inside_faults(geometry: dict, name: str) -> list[str]:
    """Each node of each group (graphs.py's membership) inside that group's box, below its title band."""
    rects = {n["id"]: n["rect"] for n in geometry["nodes"]}
    groups = {g["title"]: g for g in geometry["groups"]}
    faults = []
    for title, ids in members_of_groups(name).items():
        x, y, w, h = groups[title]["rect"]
        top = y + groups[title]["head"]
        for k in ids:
            r = rects[k]
            if not (r[0] >= x and r[1] >= top and r[0] + r[2] <= x + w and r[1] + r[3] <= y + h):
                faults.append(f"node {k} {[round(v) for v in r]} sticks out of group {title!r} "
                              f"{[round(v) for v in groups[title]['rect']]}")
    return faults


def overlap_faults(geometry: dict) -> list[str]:
    rects = {n["id"]: n["rect"] for n in geometry["nodes"]}
    ids = sorted(rects)
    out = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            ra, rb = rects[a], rects[b]
            if ra[0] < rb[0] + rb[2] and rb[0] < ra[0] + ra[2] and ra[1] < rb[1] + rb[3] and rb[1] < ra[1] + ra[3]:
                out.append(f"nodes {a} and {b} overlap")
    return out


def open_pack_templates(cp: ComfyPage) -> None:
    """Workflow > Browse Templates, then the pack's entry under Extensions."""
    cp.dismiss_dialogs()
    cp.page.evaluate("async () => await window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    cp.page.locator(".p-dialog nav [role=button]", has_text=PACK).click()
    cp.page.wait_for_function(f"() => document.querySelectorAll('.p-dialog [data-testid^=\"template-workflow-\"]').length >= {len(NAMES)}")


# JS: count the app.loadGraphData calls that have returned (window.__fsLoads; installed once on the page). A card's
# click closes the template browser and then loads the template (frontend 1.32.9's loadWorkflowTemplate: closeDialog(),
# then loadGraphData), which asks for a missing-nodes or missing-models dialog at its end: the load is over when the
# count went up, whatever the machine's load (a node count is reached earlier, while loadGraphData still runs).
COUNT_LOADS_JS = """() => { if (window.__fsLoads !== undefined) return;
  window.__fsLoads = 0;
  const app = window.app, load = app.loadGraphData;
  app.loadGraphData = async function (...args) {
    try { return await load.apply(this, args); } finally { window.__fsLoads++; } }; }"""


def load_template(cp: ComfyPage, name: str, n_nodes: int, attempts: int = 3) -> None:
    """Open the pack's templates and click `name`'s card until its graph is on the canvas: on a loaded machine a
    click can land while the card list is still re-rendering (its thumbnails arrive), and nothing loads, or another
    card's template does. Either is seen at once (a graph of another size loaded, or nothing after 10 s) and
    clicked again; a template that never loads still fails, after `attempts` clicks. Returns when app.loadGraphData
    has returned (COUNT_LOADS_JS)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(attempts):
        cp.page.evaluate("() => window.app.graph.clear()")
        open_pack_templates(cp)
        before = cp.page.evaluate("() => window.__fsLoads")
        cp.page.locator(f'[data-testid="template-workflow-{name}"]').click()
        try:
            cp.page.wait_for_function("(before) => window.__fsLoads > before", arg=before,
                                      timeout=(30_000 if attempt == attempts - 1 else 10_000))
        except PlaywrightTimeout:
            if attempt == attempts - 1:
                raise
            print(f"[templates] {name}: nothing loaded after a click on its card, clicking again")
            continue
        loaded = cp.page.evaluate("() => window.app.graph.nodes.length")
        if loaded == n_nodes:
            return
        print(f"[templates] {name}: a graph of {loaded} nodes loaded, not its {n_nodes}: clicking again")
    raise AssertionError(f"the card of {name} did not load it ({attempts} clicks)")


# The cards the parametrized test clicks; it loads every other template as its card does (open_like_its_card): the
# click itself is what these and the bare server's four (test_a_real_weight_template_lists_...: flux_fill_inpaint,
# klein_inpaint, native_flux_fill_mixed, native_sd3_inspect) show, seven cards of three families, meta and native.
CLICKED_CARDS = ("sd3_controlnet_inpaint", "klein_tiled_edit", "flux_fill_meta_trace")

# JS: what a card's click does after it closed the template browser (frontend 1.32.9's loadWorkflowTemplate for a
# custom node's module): the template's JSON from /api/workflow_templates/<module>/<name>.json, then
# app.loadGraphData(json, true, true, name, {openSource: 'template'}).
LOAD_LIKE_CARD_JS = """async ([module, name]) => {
  const response = await fetch(`/api/workflow_templates/${module}/${name}.json`);
  if (!response.ok) throw new Error(`${name}: ${response.status}`);
  await window.app.loadGraphData(await response.json(), true, true, name, {openSource: 'template'}); }"""


CARDS_SHOWN_JS = "() => !!document.querySelector('.p-dialog [data-testid^=\"template-workflow-\"]')"


def close_template_browser(cp: ComfyPage) -> None:
    """The template browser closed, if it is open: its own close button (a layout dialog: Escape does not close it on
    1.32.9), else the dialog store's closeDialog for its key, as the card's click does."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(3):
        if not cp.page.evaluate(CARDS_SHOWN_JS):
            return
        cp.page.evaluate("""() => {
          const dialog = [...document.querySelectorAll('.p-dialog')].find(d =>
              d.querySelector('[data-testid^="template-workflow-"]'));
          const close = dialog && dialog.querySelector(
              '.p-dialog-close-button, button[aria-label="Close"], button[aria-label="Close dialog"], button .pi-times');
          if (close) { (close.closest('button') || close).click(); return; }
          const service = window.app.extensionManager.dialog;
          if (service && service.closeDialog) service.closeDialog({key: 'global-workflow-template-selector'}); }""")
        try:
            cp.page.wait_for_function(f"() => !({CARDS_SHOWN_JS})()", timeout=10_000)
        except PlaywrightTimeout:
            pass
    assert not cp.page.evaluate(CARDS_SHOWN_JS), "the template browser does not close"


def open_like_its_card(cp: ComfyPage, name: str) -> None:
    """`name` loaded as its card's click loads it (LOAD_LIKE_CARD_JS), from the server's template route, the
    template browser closed first (an earlier test may have left it open: the card's click closes it)."""
    cp.dismiss_dialogs()
    close_template_browser(cp)
    cp.page.evaluate("() => window.app.graph.clear()")
    cp.page.evaluate(LOAD_LIKE_CARD_JS, [PACK, name])


def prompt_boxes(cp: ComfyPage) -> list:
    """(node id, widget) of every multiline text widget on the canvas outside the read-me notes."""
    return cp.page.evaluate("""(notes) => window.app.graph.nodes.filter(n => !notes.includes(n.type)).flatMap(n =>
        (n.widgets || []).filter(w => w.type === 'customtext' || (w.options && w.options.multiline)).map(w => [n.id, w.name]))""",
                            list(graphs.NOTE_TYPES))


def test_one_card_per_ui_workflow_each_with_its_thumbnail(page):
    cp = page
    listed = cp.page.evaluate("async () => (await fetch('/api/workflow_templates')).json()")
    assert sorted(listed[PACK]) == NAMES  # the server's scan: the UI files once each, no .api twins
    fetched = {}  # the pictures the page fetched (the cards show them as blob: URLs)
    cp.page.on("response", lambda r: fetched.__setitem__(r.url.split("?")[0], r.status))
    open_pack_templates(cp)
    all_cards = cp.page.evaluate(CARDS_JS)
    assert sorted(c["name"] for c in all_cards) == NAMES, all_cards  # one card per UI workflow, no .api twins
    from PIL import Image

    for name in NAMES:  # a card loads its picture while it is in view (and may drop it after)
        card = cp.page.locator(f'[data-testid="template-workflow-{name}"]')
        card.scroll_into_view_if_needed()
        cp.page.wait_for_function("(n) => { const i = document.querySelector(`[data-testid='template-workflow-${n}'] img`);"
                                  " return i && i.complete && i.naturalWidth > 0; }", arg=name, timeout=20_000)
        c = next(c for c in cp.page.evaluate(CARDS_JS) if c["name"] == name)
        assert fetched.get(f"{cp.url}/api/workflow_templates/{PACK}/{name}.jpg") == 200, (c, fetched)
        assert c["src"].startswith("blob:"), c  # ours, fetched and shown: the default picture is a plain URL
        with Image.open(EXAMPLES / f"{name}.jpg") as thumb:
            assert (c["width"], c["height"]) == thumb.size, c
        assert c["title"] == name  # frontend 1.32: a custom template's title and description are its file name
    cp.screenshot(SHOTS / "template_browser.png")
    cp.dismiss_dialogs()
    assert not cp.errors(), cp.errors()


@pytest.mark.parametrize("name", NAMES)
def test_each_template_loads_complete_with_one_box_per_prompt(page, name):
    """The card loads the workflow as saved (CLICKED_CARDS by a click on the card; the others as the click loads
    them: the same route and the same app.loadGraphData call, a template browser open and close less each, ~2/3 of a
    card's time on frontend 1.32.9, which rebuilds the browser with ComfyUI's own templates at every open; every
    card's name and picture are test_one_card_per_ui_workflow_each_with_its_thumbnail's): every node type known, no
    missing-nodes or missing-models dialog (the session server holds every declared file, as tiny stand-ins), groups and the read-me note on the
    canvas, one prompt box per prompt. Then ComfyUI's fit view (test_browser_template_layout.py's check, on the
    template as its card loaded it): the scale it picks (an edit template at 0.40 or more), no two nodes overlapping,
    each node inside its group."""
    cp = page
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    t0 = time.monotonic()
    if name in CLICKED_CARDS:
        load_template(cp, name, len(ui["nodes"]))
    else:
        open_like_its_card(cp, name)
    load_s = time.monotonic() - t0
    # the template browser closes itself after the click; on a loaded machine that takes longer than a fixed pause
    cp.page.wait_for_function("() => !document.querySelector('.p-dialog [data-testid^=\"template-workflow-\"]')",
                              timeout=30_000)
    # a missing-nodes or missing-models dialog: app.loadGraphData asked for it before it returned (load_template
    # waited for that); fit view's animation (frames for 350 ms) lets it render
    t1 = time.monotonic()
    geometry = fit_view(cp)
    fit_s = time.monotonic() - t1
    assert cp.missing_node_types() == []
    assert cp.open_dialogs() == [], "a dialog opened on load (missing nodes or models?)"
    saved = cp.serialize()
    assert {n["id"]: n["widgets_values"] for n in saved["nodes"]} == {n["id"]: n["widgets_values"] for n in ui["nodes"]}
    assert [g["title"] for g in saved["groups"]] == [g["title"] for g in ui["groups"]]
    assert sum(n["type"] in graphs.NOTE_TYPES for n in saved["nodes"]) == 1
    graph = next(g for g in graphs.GRAPHS if g.name == name)
    boxes = prompt_boxes(cp)
    # a second box for a negative prompt: SD3 Prompt (negative) wired to `negative`, or an all-in-one node's own
    # negative_prompt (the klein tiled node's, read by base models)
    assert len(boxes) == 1 + any("negative" in n.inputs or "negative_prompt" in n.inputs for n in graph.nodes), boxes

    # the layout at fit view
    assert len(geometry["nodes"]) == len(ui["nodes"])
    FIT_SCALES[name] = geometry["scale"]
    how = "card clicked and loaded" if name in CLICKED_CARDS else "loaded as its card does"
    print(f"{name}: fit view at {geometry['scale']:.3f} ({how} in {load_s:.1f}s,"
          f" fit view {fit_s:.1f}s)")
    assert overlap_faults(geometry) == []
    assert inside_faults(geometry, name) == []
    if name in EDIT_TEMPLATES:
        cp.screenshot(SHOTS / f"fit_view_{name}.png")
        assert geometry["scale"] >= MIN_FIT_SCALE, (name, geometry["scale"])
    assert not cp.errors(), cp.errors()


# JS: a run whose step count and precision are not the point: 2 steps, fp32 weights (bf16 convolutions are ~20x
# slower than fp32 on a CPU). The faces then read fp32 where the shipped file says bf16: as many lines, as wide.
# (2 steps, not 1: test_browser_report_view.py runs flux_fill_inpaint at 1 step, fp32; the server would answer one of
# the two from its cache.)
QUICK_RUN_JS = """() => { const changed = [];
  for (const n of window.app.graph.nodes) for (const w of n.widgets || []) {
    const values = w.options && w.options.values;
    if (w.name === 'steps' && w.value !== 2) { w.value = 2; changed.push([n.id, w.name]); }
    else if (w.name === 'dtype' && Array.isArray(values) && values.includes('fp32') && w.value !== 'fp32') {
      w.value = 'fp32'; changed.push([n.id, w.name]); }
  }
  return changed; }"""


@pytest.mark.parametrize("name", ["flux_fill_inpaint", "klein_inpaint", "klein_tiled_edit"])
def test_after_a_run_every_node_stays_inside_its_group(page, name):
    """(test_browser_template_layout.py's, on this module's page.) The real-weight template, queued from the canvas on
    the tests' tiny stand-ins for its published files (2 steps, fp32: the faces' layout is the point, not the sampling):
    when it has run, every FillScope node shows its shapes on its face (web/fillscope.js grows a node to fit them
    where its saved size is too small) and still no node sticks out of its group (the VAE loader did before) or
    overlaps another; the FillScope nodes keep the size the template saved (the room was reserved)."""
    cp = page
    # /history is kept: an earlier test may have run these loaders on this server, and a node ComfyUI serves from its
    # cache gets its table back from the history of that run (web/fillscope.js onCached)
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    cp.dismiss_dialogs()
    cp.page.evaluate("() => window.app.graph.clear()")
    cp.load_workflow(ui)
    assert cp.open_dialogs() == [], cp.open_dialogs()  # every file is on the server: no Missing Models dialog
    assert cp.page.evaluate("() => window.app.graph.nodes.length") == len(ui["nodes"])
    assert any(w == "steps" for _, w in cp.page.evaluate(QUICK_RUN_JS))
    saved = {n["id"]: n["size"] for n in ui["nodes"]}
    fillscope = [n["id"] for n in ui["nodes"] if n["type"].startswith("FillScope")]
    pid = cp.queue()
    cp.wait_history(pid, timeout=600)
    cp.page.wait_for_function("(ids) => ids.every(id => window.FillScope.tableOf(id))", arg=fillscope,
                              timeout=60_000)
    geometry = fit_view(cp)  # (its frames: the grown nodes drawn)
    cp.screenshot(SHOTS / f"after_run_{name}.png")
    sizes = {n["id"]: n["size"] for n in geometry["nodes"]}
    grown = {k: (saved[k], [round(v) for v in sizes[k]]) for k in fillscope if sizes[k][1] > saved[k][1] + 0.5}
    print(f"{name} after the run: fit view at {geometry['scale']:.3f}; FillScope nodes grown: {grown or 'none'}")
    assert inside_faults(geometry, name) == []
    assert overlap_faults(geometry) == []
    assert grown == {}
    assert not cp.errors(), cp.errors()


def test_a_loader_added_by_hand_starts_on_a_model_file_with_its_advanced_inputs_hidden(page, served_models):
    """On the canvas a new loader's source is the server's default (the first menu entry holding its component, see
    test_server_flux_fill), never meta; device, placeholder_seed, memory and storage carry the `advanced` flag and are
    hidden (web/fillscope.js sets widget.advanced, which frontend 1.32.9 reads), after the face inputs, in the widget
    order saved workflows use; the new node is only as tall as its visible widgets."""
    cp = page
    info = served_models.object_info()
    for node_type in [k for k in info if k.startswith("FillScopeLoad")]:
        default = info[node_type]["input"]["required"]["source"][1]["default"]
        assert default not in ("meta", "placeholder"), node_type
        widgets = cp.page.evaluate("""(t) => { const n = window.LiteGraph.createNode(t);
            return n.widgets.map(w => [w.name, w.value, !!(w.options && w.options.advanced), n.isWidgetVisible(w),
                                       n.size[1] <= n.computeSize()[1]]); }""", node_type)
        assert all(w[3] != w[2] for w in widgets), widgets  # advanced <=> hidden
        assert all(w[4] for w in widgets), widgets
        assert widgets[0][:2] == ["source", default], widgets
        names = [w[0] for w in widgets]
        assert [w[0] for w in widgets if w[2]] == [n for n in names if n in ("device", "placeholder_seed", "memory", "storage")]
        assert names.index("dtype") < names.index("device") < names.index("placeholder_seed") < names.index("memory")
    assert not cp.errors(), cp.errors()


@pytest.fixture(scope="module")
def bare_page(page):
    """A second server with empty model folders (no tiny stand-ins), and a page on it (a second context of the
    process's chromium)."""
    with ComfyServer() as server, ComfyPage(server.url, viewport=(1600, 1000)) as cp:
        cp.stub_core_template_thumbnails()
        yield cp


MISSING_JS = """() => [...document.querySelectorAll('.p-dialog .comfy-missing-models [role=option]')].map(o => {
    const b = [...o.querySelectorAll('button')].map(b => [b.textContent.trim(), b.getAttribute('title'), b.disabled]);
    return {text: o.innerText.trim(), hint: (o.querySelector('span[title]') || {}).title, buttons: b};
})"""


@pytest.mark.parametrize("name", ["flux_fill_inpaint", "klein_inpaint", "native_flux_fill_mixed", "native_sd3_inspect"])
def test_a_real_weight_template_lists_its_missing_files_on_a_server_without_them(bare_page, name):
    """The template, loaded from its card on a server whose model folders lack its files, opens frontend 1.32.9's
    Missing Models dialog (setting Comfy.Workflow.ShowMissingModelsWarning, on by default): app.loadGraphData collects
    the workflow's top-level `models` (and each node's properties.models whose name is one of its widget values),
    looks each name up in its `directory`'s file list (/api/experiment/models/<directory>) and lists the ones not
    there as "<directory> / <name>", each with a Download button whose title is its URL (only huggingface.co,
    civitai.com URLs and .safetensors/.sft names are allowed: else the entry shows an error and no download)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    cp = bare_page
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    declared = ui["models"]
    assert declared and all(m["url"].startswith("https://huggingface.co/") and m["name"].endswith(".safetensors")
                            for m in declared), declared
    cp.page.evaluate("() => window.app.graph.clear()")
    open_pack_templates(cp)
    cp.page.locator(f'[data-testid="template-workflow-{name}"]').click()
    cp.wait_dialog("Missing Models", timeout=20)
    # the template browser closes after loadGraphData asked for the Missing Models dialog: gone before dialogs count
    cp.page.wait_for_function("() => !document.querySelector('.p-dialog [data-testid^=\"template-workflow-\"]')",
                              timeout=30_000)
    try:  # every entry rendered (a dialog that lists fewer fails the comparison below, which names them)
        cp.page.wait_for_function("(n) => document.querySelectorAll('.p-dialog .comfy-missing-models [role=option]')"
                                  ".length >= n", arg=len(declared), timeout=10_000)
    except PlaywrightTimeout:
        pass
    assert cp.page.evaluate("() => window.app.graph.nodes.length") == len(ui["nodes"])  # loaded all the same
    assert cp.missing_node_types() == []
    dialogs = cp.open_dialogs()
    assert len(dialogs) == 1, dialogs  # the missing models one only: no missing-nodes dialog
    assert "When loading the graph, the following models were not found" in dialogs[0], dialogs
    listed = cp.page.evaluate(MISSING_JS)
    assert [e["text"].splitlines()[0] for e in listed] == [f"{m['directory']} / {m['name']}" for m in declared], listed
    for entry, m in zip(listed, declared):
        assert entry["hint"] == m["url"], entry
        download = [b for b in entry["buttons"] if b[0].startswith("Download")]
        assert download and download[0][1] == m["url"] and not download[0][2], entry  # enabled, no error
        assert "Invalid directory" not in entry["text"] and "not allowed" not in entry["text"], entry
    cp.screenshot(SHOTS / f"missing_models_{name}.png")
    cp.dismiss_dialogs()
    assert cp.open_dialogs() == []
    # each entry's Download button asks the model's URL for its size (useDownload's HEAD request): offline, it fails
    offline = "console.error: Error fetching file size: TypeError: Failed to fetch"
    assert [e for e in cp.errors() if not e.startswith(offline)] == [], cp.errors()
    cp.console_errors.clear()
