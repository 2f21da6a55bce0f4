"""Folded (advanced) inputs stay folded in Nodes 2.0 (Comfy.VueNodes.Enabled: frontend 1.32.9's Vue node renderer).

The Vue nodes draw a node's widgets themselves (NodeWidgets: one `.lg-node-widget` row per widget, skipping only
options.hidden / canvasOnly) and read neither widget.advanced nor node.showAdvanced; web/fillscope.js folds the rows
of a FillScope node's advanced inputs (foldVueRows) and puts a show / hide toggle in the selection toolbox, since the
Vue node menu has no "Show Advanced".

In headless chromium on the session's server (the Nodes 2.0 setting is the server's per-user setting: every page
sets it itself, browser.DEFAULT_SETTINGS, so other modules do not inherit it): a FillScope loader and sampler added to
the canvas show their basic inputs and not their advanced ones (the inputs /object_info flags `advanced`), as DOM rows
of the Vue node; the toolbox toggle (a real click) shows them and folds them again, also after an input was edited
(when the frontend has replaced the node's widget data with static copies); the node is taller while they show; a
node never toggled saves no showAdvanced.

Needs playwright (Python) and a system chromium; outside CI the module is skipped without them, in CI a failure.
Screenshots: test-artifacts/browser/nodes2-*.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import VUE_NODES, ComfyPage, require_browser  # noqa: E402

pytestmark = pytest.mark.server

SHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
NODES = ("FillScopeLoadVAE", "FillScopeFluxFillSampler")
TOGGLE = ".selection-toolbox button:has(.pi-sliders-h)"
# the labels of the Vue node's rows a user sees (display: none rows have no layout box)
ROWS_JS = """(id) => [...document.querySelectorAll(`.lg-node[data-node-id="${id}"] .lg-node-widget`)]
    .filter(r => r.getClientRects().length > 0)
    .map(r => (r.querySelector('p') || r).textContent.trim())"""
HEIGHT_JS = """(id) => document.querySelector(`.lg-node[data-node-id="${id}"]`).getBoundingClientRect().height"""


@pytest.fixture(scope="module")
def page(request):
    """A page in Nodes 2.0 on the session's server: the setting is the server's, per user, but every other page sets
    it itself (browser.DEFAULT_SETTINGS turns it off), so no server of its own is needed."""
    require_browser("browser Nodes 2.0 tests")
    server = request.getfixturevalue("comfy_server")
    with ComfyPage(server.url, settings={VUE_NODES: True, "Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp, server


def inputs_of(server, node_type: str) -> tuple[list[str], list[str]]:
    """(basic, advanced) widget inputs of a node in /object_info's order."""
    info = server.object_info(node_type)[node_type]
    spec = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
    names = info["input_order"].get("required", []) + info["input_order"].get("optional", [])
    widgets = [n for n in names if isinstance(spec[n][0], list) or spec[n][0] in ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")]
    advanced = [n for n in widgets if spec[n][1].get("advanced")]
    return [n for n in widgets if n not in advanced], advanced


def rows(cp, node_id) -> list[str]:
    return cp.page.evaluate(ROWS_JS, node_id)


def click_toggle(cp, node_id) -> None:
    """Select the node with a click on its title bar, then click FillScope's toggle in the selection toolbox."""
    box = cp.page.query_selector(f'.lg-node[data-node-id="{node_id}"] [data-testid="node-title"]').bounding_box()
    cp.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    cp.page.locator(TOGGLE).click()
    cp.page.wait_for_timeout(200)


def test_advanced_inputs_stay_folded_on_vue_nodes_until_toggled(page):
    cp, server = page
    ids = cp.page.evaluate("""(types) => { const g = window.app.graph; g.clear();
        return types.map((t, i) => { const n = window.LiteGraph.createNode(t); n.pos = [300 + 450 * i, 250]; g.add(n);
                                      return n.id; }); }""", list(NODES))
    cp.page.wait_for_selector(f'.lg-node[data-node-id="{ids[-1]}"] .lg-node-widget')
    assert cp.page.evaluate("() => window.LiteGraph.vueNodesMode") is True
    for node_type, node_id in zip(NODES, ids):
        basic, advanced = inputs_of(server, node_type)
        assert advanced, node_type
        shown = rows(cp, node_id)
        assert set(basic) <= set(shown) and not set(advanced) & set(shown), (node_type, shown)
        folded_h = cp.page.evaluate(HEIGHT_JS, node_id)

        click_toggle(cp, node_id)
        unfolded = rows(cp, node_id)
        assert set(basic + advanced) <= set(unfolded), (node_type, unfolded)
        assert [r for r in unfolded if r in advanced] == advanced  # in the node's order
        unfolded_h = cp.page.evaluate(HEIGHT_JS, node_id)
        assert unfolded_h > folded_h, (node_type, folded_h, unfolded_h)
        SHOTS.mkdir(parents=True, exist_ok=True)
        cp.screenshot(SHOTS / f"nodes2-{node_type}-shown.png")

        click_toggle(cp, node_id)
        assert rows(cp, node_id) == shown
        print(f"{node_type}: folded {shown} ({folded_h:.0f} px), shown +{advanced} ({unfolded_h:.0f} px)")

    # an edit through the Vue widget (the frontend then keeps static copies of the node's widgets): still toggles
    vae = ids[0]
    cp.page.evaluate("""(id) => { const w = window.app.graph.getNodeById(id).widgets.find(w => w.name === 'dtype');
        w.value = 'fp32'; w.callback(w.value); }""", vae)
    cp.page.wait_for_function("""(id) => [...document.querySelectorAll(`.lg-node[data-node-id="${id}"] .lg-node-widget`)]
        .some(r => r.textContent.includes('fp32'))""", arg=vae)
    basic, advanced = inputs_of(server, NODES[0])
    click_toggle(cp, vae)
    assert set(advanced) <= set(rows(cp, vae))
    click_toggle(cp, vae)
    assert not set(advanced) & set(rows(cp, vae))

    # saved: the toggled nodes' showAdvanced, folded; a node never toggled saves none (as before FillScope's fold)
    untouched = cp.page.evaluate("""() => { const n = window.LiteGraph.createNode('FillScopeLoadCLIPL');
        n.pos = [300, 700]; window.app.graph.add(n); return n.id; }""")
    by_id = {n["id"]: n for n in cp.serialize()["nodes"]}
    assert by_id[ids[0]]["showAdvanced"] is False and by_id[ids[1]]["showAdvanced"] is False
    assert "showAdvanced" not in by_id[untouched]
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())
