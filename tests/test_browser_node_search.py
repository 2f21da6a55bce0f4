"""The FillScope nodes as a user finds and sees them in ComfyUI's own frontend (1.32.9), in headless chromium:

- the node-source badge: frontend 1.32.9 draws the pack's name above every custom node ("FillScope", from the node's
  python_module `custom_nodes.<folder>`) under its setting Comfy.NodeBadge.NodeSourceBadgeMode, whose default,
  "Hide built-in", hides it on ComfyUI's own nodes only; so the title (the display name) does not repeat it;
- the canvas' node search (double-click the canvas): 1.32.9's NodeSearchService runs Fuse over the keys `name` (the
  node id) and `display_name` only (no search aliases; ComfyUI 0.3.75 sends none, its io.Schema has no such field):
  "inpaint" must list the inpaint nodes, by the word in their display names, and "fillscope" every FillScope node, by
  their ids (FillScope...);
- "fill" on both frontends (1.32.9's search box and 1.58.1's new one, its default): the first FillScope entries are
  the FLUX Fill nodes, in web/fillscope_search.js's order. Both rank matches by how the query meets the id or the
  display name (a prefix before a word), then by recorded use: "fill" is a prefix of every FillScope id, so without
  that file every FillScope node ranked by its id's length and 27 came before the first FLUX Fill node;
- a workflow saved while FillScopeLoadKleinTransformer still had its model_type widget (the third of eight widget
  values) loading into the node without it.

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the module is
skipped without them, in CI (env CI set) that is a failure. The newest frontend's server is the session's
(conftest.py newest_frontend_server), skipped outside CI when `make setup` could not unpack that frontend.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import NEWEST_FRONTEND, ComfyPage, require_browser  # noqa: E402

pytestmark = pytest.mark.server

INPAINT_NODES = (  # node ids: their display names are read from the server
    "FillScopeFluxFillCondition", "FillScopeFluxFillSampler",
    "FillScopeSD3InpaintCondition", "FillScopeSD3ControlNetInpaintSampler",
    "FillScopeKleinInpaintCondition", "FillScopeKleinSampler",
    "FillScopeCropForInpaint", "FillScopeStitch", "FillScopePasteBack",
)

# what "fill" lists first among FillScope's nodes (web/fillscope_search.js FLUX_FILL_FIRST)
FLUX_FILL_FIRST = (
    "FillScopeFluxFillSampler", "FillScopeFluxFillCondition", "FillScopeLoadFluxFillTransformer",
    "FillScopeFluxFillTiledInpaint", "FillScopeFluxFillLoRA", "FillScopeFluxFillTrace", "FillScopeFluxFillCompareRun",
)


@pytest.fixture(scope="module")
def page(comfy_server):
    require_browser("browser node search tests")
    with ComfyPage(comfy_server.url, settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp


@pytest.fixture(scope="module")
def newest_page(newest_frontend_server):
    require_browser("browser node search tests")
    with ComfyPage(newest_frontend_server.url, settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp


@pytest.fixture(params=("pinned", "newest"), ids=("pinned", NEWEST_FRONTEND))
def any_page(request):
    """The pinned frontend's page (the module's), or the newest frontend's (the session's second server)."""
    return request.getfixturevalue("page" if request.param == "pinned" else "newest_page")


@pytest.fixture(scope="module")
def pack(comfy_server) -> dict[str, str]:
    """node id -> display name of the nodes of this pack (python_module of FillScopeInspect's folder)."""
    info = comfy_server.object_info()
    module = info["FillScopeInspect"]["python_module"]
    return {name: node["display_name"] for name, node in info.items() if node.get("python_module") == module}


def add_nodes(cp: ComfyPage, *types: str) -> list[int]:
    return cp.page.evaluate(
        """(types) => { const g = window.app.graph; g.clear();
             const ids = types.map((t, i) => { const n = window.LiteGraph.createNode(t); n.pos = [200 + 420 * i, 200];
                                                 g.add(n); return n.id; });
             window.app.canvas.setDirty(true, true); return ids; }""", list(types))


# The search box that a double-click on the empty canvas opens: 1.32.9's (PrimeVue autocomplete: entries
# .option-display-name, the display name then the category on a line of its own) and 1.58.1's default one
# (Comfy.NodeSearchBoxImpl "default": a dialog whose combobox controls #results-list, an entry's name its first
# span.truncate). Both replace the list a while after each keystroke (1.58.1: 100 ms debounced).
BOXES = {
    "pinned": (".comfy-vue-node-search-container input",
               "() => [...document.querySelectorAll('.option-display-name')].map(e => e.innerText.split('\\n')[0])"),
    "newest": ("input[aria-controls='results-list']",
               "() => [...document.querySelectorAll('#results-list [role=option]')]"
               ".map(e => (e.querySelector('span.truncate') || e).textContent)"),
}


def search(cp: ComfyPage, text: str) -> list[str]:
    """Double-click the empty canvas (the search box opens), type `text`, and read the listed entries' display names
    once the list has settled (the same twice, 250 ms apart)."""
    field_sel, read_js = BOXES["newest" if cp.frontend_version() == NEWEST_FRONTEND else "pinned"]
    box = cp.page.locator("canvas#graph-canvas").bounding_box()
    cp.page.mouse.dblclick(box["x"] + box["width"] * 0.75, box["y"] + box["height"] * 0.75)
    field = cp.page.locator(field_sel).first
    field.wait_for(state="visible", timeout=10_000)
    field.fill(text)
    cp.page.wait_for_function("([sel, text]) => document.querySelector(sel)?.value === text",
                              arg=[field_sel, text], timeout=10_000)
    names, deadline = None, time.monotonic() + 10
    while time.monotonic() < deadline:
        cp.page.wait_for_timeout(250)
        now = [n.replace("\xa0", " ").strip() for n in cp.page.evaluate(read_js)]
        if now and now == names:
            break
        names = now
    cp.page.keyboard.press("Escape")
    cp.page.locator(field_sel).first.wait_for(state="hidden", timeout=10_000)
    return names or []


def test_the_badge_says_fillscope_and_the_title_does_not(page, pack):
    mode = page.page.evaluate("() => window.app.ui.settings.getSettingValue('Comfy.NodeBadge.NodeSourceBadgeMode')")
    assert mode == "Hide built-in"  # the default: custom nodes' badges shown
    sampler, core = add_nodes(page, "FillScopeFluxFillSampler", "VAEDecode")
    page.page.wait_for_timeout(300)
    shown = page.page.evaluate(
        """(ids) => ids.map(id => { const n = window.app.graph.getNodeById(id);
             return {title: n.title, badges: (n.badges || []).map(b => (typeof b === 'function' ? b() : b).text)
                                                          .filter(t => t && t.trim())}; })""", [sampler, core])
    print(f"\nFLUX Fill sampler: title {shown[0]['title']!r}, badges {shown[0]['badges']}; "
          f"ComfyUI's VAEDecode: title {shown[1]['title']!r}, badges {shown[1]['badges']}")
    assert shown[0]["title"] == pack["FillScopeFluxFillSampler"] == "FLUX Fill Inpaint Sampler"
    assert "fillscope" not in shown[0]["title"].casefold()
    assert shown[0]["badges"] == ["FillScope"]
    assert shown[1]["badges"] == []  # a built-in node: no source badge
    assert not page.errors(), page.errors()


def test_searching_inpaint_lists_the_inpaint_nodes(page, pack):
    add_nodes(page)  # an empty canvas to double-click on
    listed = search(page, "inpaint")
    wanted = {pack[n] for n in INPAINT_NODES}
    print(f"\n'inpaint': {len(listed)} entries: {listed}")
    assert wanted <= set(listed), sorted(wanted - set(listed))


def test_searching_fill_lists_the_flux_fill_nodes_first_among_fillscopes(any_page, pack):
    cp = any_page
    add_nodes(cp)  # an empty canvas to double-click on
    listed = search(cp, "fill")
    ours = [name for name in listed if name in set(pack.values())]
    want = [pack[n] for n in FLUX_FILL_FIRST]
    print(f"\n{cp.frontend_version()} 'fill': {len(listed)} entries, the first FillScope ones {ours[:10]}")
    assert ours[:len(want)] == want
    assert listed.index(want[0]) == min(listed.index(n) for n in ours)
    # (1.32.9's box logs "Cannot set properties of null (setting 'value')" in its onChange when it closes, with or
    # without the pack's search file: the frontend's own; nothing may come from the pack's files)
    assert [e for e in cp.errors() if "fillscope" in e.casefold()] == []


def test_searching_fillscope_lists_every_fillscope_node(page, pack):
    add_nodes(page)
    listed = search(page, "fillscope")
    print(f"\n'fillscope': {len(listed)} entries, {len(set(listed) & set(pack.values()))} of the pack's {len(pack)}")
    assert set(pack.values()) <= set(listed), sorted(set(pack.values()) - set(listed))


# A FillScopeLoadKleinTransformer as frontend 1.32.9 saved it before its model_type widget moved to the sampler: eight
# widget values, model_type third; the inputs list names every widget (a widget's input socket).
OLD_WIDGETS = ["source", "variant", "model_type", "dtype", "device", "placeholder_seed", "memory", "storage"]
OLD_VALUES = ["meta", "klein-4b", "auto", "fp32", "cpu", 7, "offload", "as loaded"]


def old_klein_loader_workflow() -> dict:
    types = ["COMBO", "COMBO", "COMBO", "COMBO", "COMBO", "INT", "COMBO", "COMBO"]
    node = {"id": 1, "type": "FillScopeLoadKleinTransformer", "pos": [100, 100], "size": [360, 200], "flags": {},
            "order": 0, "mode": 0, "properties": {"Node name for S&R": "FillScopeLoadKleinTransformer"},
            "inputs": [{"name": n, "type": t, "widget": {"name": n}, "link": None} for n, t in zip(OLD_WIDGETS, types)],
            "outputs": [{"name": "transformer", "type": "FS_KLEIN_MODEL", "links": []},
                        {"name": "shapes", "type": "STRING", "links": []}],
            "widgets_values": OLD_VALUES}
    return {"last_node_id": 1, "last_link_id": 0, "nodes": [node], "links": [], "groups": [], "config": {},
            "extra": {}, "version": 0.4}


def test_a_workflow_saved_with_the_klein_loaders_model_type_loads_its_other_values(page):
    """Frontend 1.32.9 sets widget values by position (LGraphNode.configure; migrateWidgetsValues drops only
    forceInput values): web/fillscope.js drops the old third value, else it would land in dtype."""
    page.load_workflow(old_klein_loader_workflow())
    got = page.page.evaluate(
        """() => { const n = window.app.graph.nodes.find(n => n.type === 'FillScopeLoadKleinTransformer');
             return {widgets: Object.fromEntries(n.widgets.map(w => [w.name, w.value])),
                     inputs: (n.inputs || []).map(i => i.name)}; }""")
    print(f"\nloaded: {got}")
    want = dict(zip(OLD_WIDGETS, OLD_VALUES))
    del want["model_type"]
    assert got["widgets"] == want
    assert "model_type" not in got["inputs"]
