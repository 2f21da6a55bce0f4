"""The shipped templates as a user first sees them on ComfyUI's canvas (frontend 1.32.9, headless chromium at
1600x1000, the size ComfyUI's own templates are judged at): ComfyUI's "fit view" (the '.' key, command
Comfy.Canvas.FitView: 0.75 x the viewport over the bounds of every node and group) shows every inpaint, edit,
outpaint and crop-stitch template at 40 % or more, where node text is still drawn (ComfyUI's own FLUX.1 Fill inpaint
template opens at 51 %); no two nodes overlap and every node lies inside its group, title bar included; and after a
run, when each FillScope node shows its shapes on its face (web/fillscope.js), that still holds: the layout
(api_workflows/graphs.py) reserves the room.

Needs playwright and a system chromium, like test_browser_canvas.py (skipped without them outside CI, a failure in CI).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, require_browser  # noqa: E402
from workflow_helpers import EXAMPLES, WORKFLOWS  # noqa: E402

sys.path.insert(0, str(WORKFLOWS))
import graphs  # noqa: E402

pytestmark = pytest.mark.server

SHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
VIEWPORT = (1600, 1000)
MIN_FIT_SCALE = 0.40
# The templates a user edits and runs: readable at fit zoom. Traces and meta workflows are measured too (printed).
EDIT_TEMPLATES = ["flux_fill_inpaint", "flux_fill_outpaint", "flux_fill_crop_stitch", "sd3_controlnet_inpaint",
                  "sd3_controlnet_crop_stitch", "klein_inpaint", "klein_edit", "klein_crop_stitch",
                  "flux_fill_tiled_inpaint", "klein_tiled_edit"]
NAMES = sorted(g.name for g in graphs.GRAPHS)
FIT_SCALES: dict = {}  # name -> scale, printed at the end of the module

# JS: every node's bounds (LiteGraph's boundingRect: title bar included) and size, every group's bounds and title band.
GEOMETRY_JS = """() => {
  const g = window.app.graph;
  return {scale: window.app.canvas.ds.scale,
          nodes: g.nodes.map(n => ({id: n.id, type: n.type, rect: Array.from(n.boundingRect), size: Array.from(n.size)})),
          groups: g._groups.map(gr => ({title: gr.title, rect: Array.from(gr._bounding), head: gr.titleHeight}))};
}"""


@pytest.fixture(scope="module")
def page(request):
    require_browser("browser template layout tests")
    server = request.getfixturevalue("served_models")
    with ComfyPage(server.url, viewport=VIEWPORT, settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp
    print("\nfit-view scale at 1600x1000 (ComfyUI's own FLUX.1 Fill inpaint template: 0.51)")
    for name, scale in sorted(FIT_SCALES.items()):
        print(f"  {name:36s} {scale:.3f}{'' if name in EDIT_TEMPLATES else '  (trace / meta / native)'}")


def load(cp: ComfyPage, name: str) -> dict:
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    cp.page.evaluate("() => window.app.graph.clear()")
    cp.load_workflow(ui)
    assert cp.open_dialogs() == [], cp.open_dialogs()  # every file is on the server: no Missing Models dialog
    assert cp.page.evaluate("() => window.app.graph.nodes.length") == len(ui["nodes"])
    return ui


def fit_view(cp: ComfyPage) -> dict:
    """ComfyUI's own fit view (the '.' key's command), after its 350 ms animation; the geometry then."""
    cp.page.evaluate("async () => { await window.app.extensionManager.command.execute('Comfy.Canvas.FitView'); }")
    cp.page.wait_for_timeout(800)
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


@pytest.mark.parametrize("name", NAMES)
def test_fit_view_shows_the_template_readable_with_nodes_in_their_groups(page, name):
    """Loaded as the template browser loads it, then ComfyUI's fit view: the scale it picks (an edit template at
    0.40 or more), no two nodes overlapping, each node inside its group."""
    cp = page
    load(cp, name)
    geometry = fit_view(cp)
    FIT_SCALES[name] = geometry["scale"]
    print(f"{name}: fit view at {geometry['scale']:.3f}")
    assert overlap_faults(geometry) == []
    assert inside_faults(geometry, name) == []
    if name in EDIT_TEMPLATES:
        cp.screenshot(SHOTS / f"fit_view_{name}.png")
        assert geometry["scale"] >= MIN_FIT_SCALE, (name, geometry["scale"])
    assert not cp.errors(), cp.errors()


@pytest.mark.parametrize("name", ["flux_fill_inpaint", "klein_inpaint", "klein_tiled_edit"])
def test_after_a_run_every_node_stays_inside_its_group(page, name):
    """The real-weight template, queued from the canvas on the tests' tiny stand-ins for its published files: when it
    has run, every FillScope node shows its shapes on its face (web/fillscope.js grows a node to fit them where its
    saved size is too small) and still no node sticks out of its group (the VAE loader did before) or overlaps
    another; the FillScope nodes keep the size the template saved (the room was reserved)."""
    cp = page
    # /history is kept: an earlier test may have run these loaders on this server, and a node ComfyUI serves from its
    # cache gets its table back from the history of that run (web/fillscope.js onCached)
    ui = load(cp, name)
    saved = {n["id"]: n["size"] for n in ui["nodes"]}
    fillscope = [n["id"] for n in ui["nodes"] if n["type"].startswith("FillScope")]
    pid = cp.queue()
    cp.wait_history(pid, timeout=600)
    cp.page.wait_for_function("(ids) => ids.every(id => window.FillScope.tableOf(id))", arg=fillscope,
                              timeout=60_000)
    cp.page.wait_for_timeout(500)
    geometry = fit_view(cp)
    cp.screenshot(SHOTS / f"after_run_{name}.png")
    sizes = {n["id"]: n["size"] for n in geometry["nodes"]}
    grown = {k: (saved[k], [round(v) for v in sizes[k]]) for k in fillscope if sizes[k][1] > saved[k][1] + 0.5}
    print(f"{name} after the run: fit view at {geometry['scale']:.3f}; FillScope nodes grown: {grown or 'none'}")
    assert inside_faults(geometry, name) == []
    assert overlap_faults(geometry) == []
    assert grown == {}
    assert not cp.errors(), cp.errors()
