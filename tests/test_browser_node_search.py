"""The FillScope nodes as a user finds and sees them in ComfyUI's own frontend (1.32.9), in headless chromium:

- the node-source badge: frontend 1.32.9 draws the pack's name above every custom node ("FillScope", from the node's
  python_module `custom_nodes.<folder>`) under its setting Comfy.NodeBadge.NodeSourceBadgeMode, whose default,
  "Hide built-in", hides it on ComfyUI's own nodes only; so the title (the display name) does not repeat it;
- the canvas' node search (double-click the canvas): 1.32.9's NodeSearchService runs Fuse over the keys `name` (the
  node id) and `display_name` only (no search aliases; ComfyUI 0.3.75 sends none, its io.Schema has no such field):
  "inpaint" must list the inpaint nodes, by the word in their display names, and "fillscope" every FillScope node, by
  their ids (FillScope...);
- a workflow saved while FillScopeLoadKleinTransformer still had its model_type widget (the third of eight widget
  values) loading into the node without it.

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the module is
skipped without them, in CI (env CI set) that is a failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, require_browser  # noqa: E402

pytestmark = pytest.mark.server

INPAINT_NODES = (  # node ids: their display names are read from the server
    "FillScopeFluxFillCondition", "FillScopeFluxFillSampler",
    "FillScopeSD3InpaintCondition", "FillScopeSD3ControlNetInpaintSampler",
    "FillScopeKleinInpaintCondition", "FillScopeKleinSampler",
    "FillScopeCropForInpaint", "FillScopeStitch", "FillScopePasteBack",
)


@pytest.fixture(scope="module")
def page(comfy_server):
    require_browser("browser node search tests")
    with ComfyPage(comfy_server.url, settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp


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


def search(cp: ComfyPage, text: str) -> list[str]:
    """Double-click the empty canvas (the search box opens), type `text`, and read the listed entries' display names
    (each entry shows the display name, then its category on a line of its own)."""
    box = cp.page.locator("canvas#graph-canvas").bounding_box()
    cp.page.mouse.dblclick(box["x"] + box["width"] * 0.75, box["y"] + box["height"] * 0.75)
    field = cp.page.locator(".comfy-vue-node-search-container input").first
    field.wait_for(state="visible", timeout=10_000)
    field.fill(text)
    cp.page.wait_for_function(
        """(text) => { const f = document.querySelector('.comfy-vue-node-search-container input');
             return f && f.value === text && document.querySelectorAll('.option-display-name').length > 0; }""",
        arg=text, timeout=10_000)
    cp.page.wait_for_timeout(300)  # the list is replaced once per keystroke: let the last one settle
    names = [t.split("\n")[0].replace("\xa0", " ").strip()
             for t in cp.page.locator(".option-display-name").all_inner_texts()]
    cp.page.keyboard.press("Escape")
    cp.page.locator(".comfy-vue-node-search-container").first.wait_for(state="hidden", timeout=10_000)
    return names


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
