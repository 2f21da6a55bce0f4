"""FillScope's templates in ComfyUI's own template browser (frontend 1.32.9, headless chromium): exactly one card
per UI workflow (ComfyUI 0.3.75 lists every *.json of a pack's example_workflows, example, examples, workflow and
workflows folders, so the API twins live in api_workflows/), each with its thumbnail (<name>.jpg next to the JSON),
each loading without missing nodes or models and with one prompt box per prompt; and a loader added by hand starts on
a real model file, with its advanced inputs flagged.

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

PACK = "FillScope"  # the pack's folder name under custom_nodes: the template browser's category
SHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
NAMES = sorted(g.name for g in graphs.GRAPHS)
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
    with ComfyPage(server.url, viewport=(1600, 1000)) as cp:
        yield cp


def open_pack_templates(cp: ComfyPage) -> None:
    """Workflow > Browse Templates, then the pack's entry under Extensions."""
    cp.dismiss_dialogs()
    cp.page.evaluate("async () => await window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    cp.page.locator(".p-dialog nav [role=button]", has_text=PACK).click()
    cp.page.wait_for_function(f"() => document.querySelectorAll('.p-dialog [data-testid^=\"template-workflow-\"]').length >= {len(NAMES)}")


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
    """Clicking the card loads the workflow as saved: every node type known, no missing-nodes or missing-models
    dialog (the session server holds every declared file, as tiny stand-ins), groups and the read-me note on the
    canvas, one prompt box per prompt."""
    cp = page
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    cp.page.evaluate("() => window.app.graph.clear()")
    open_pack_templates(cp)
    cp.page.locator(f'[data-testid="template-workflow-{name}"]').click()
    cp.page.wait_for_function("(n) => window.app.graph.nodes.length === n", arg=len(ui["nodes"]))
    cp.page.wait_for_timeout(500)
    assert cp.missing_node_types() == []
    assert cp.open_dialogs() == [], "a dialog opened on load (missing nodes or models?)"
    saved = cp.serialize()
    assert {n["id"]: n["widgets_values"] for n in saved["nodes"]} == {n["id"]: n["widgets_values"] for n in ui["nodes"]}
    assert [g["title"] for g in saved["groups"]] == [g["title"] for g in ui["groups"]]
    assert sum(n["type"] in graphs.NOTE_TYPES for n in saved["nodes"]) == 1
    graph = next(g for g in graphs.GRAPHS if g.name == name)
    boxes = prompt_boxes(cp)
    assert len(boxes) == 1 + any("negative" in n.inputs for n in graph.nodes), boxes
    assert not cp.errors(), cp.errors()


def test_a_loader_added_by_hand_starts_on_a_model_file_with_its_advanced_inputs_flagged(page, served_models):
    """On the canvas a new loader's source is the server's default (the first menu entry holding its component, see
    test_server_flux_fill), never meta; device, placeholder_seed, memory and storage carry the `advanced` flag (the
    frontend hides them once it honours it: 1.32.9 keeps them on the face) after the face inputs, in the widget order
    saved workflows use."""
    cp = page
    info = served_models.object_info()
    for node_type in [k for k in info if k.startswith("FillScopeLoad")]:
        default = info[node_type]["input"]["required"]["source"][1]["default"]
        assert default not in ("meta", "placeholder"), node_type
        widgets = cp.page.evaluate("""(t) => { const n = window.LiteGraph.createNode(t);
            return n.widgets.map(w => [w.name, w.value, !!(w.options && w.options.advanced)]); }""", node_type)
        assert widgets[0][:2] == ["source", default], widgets
        names = [w[0] for w in widgets]
        assert [w[0] for w in widgets if w[2]] == [n for n in names if n in ("device", "placeholder_seed", "memory", "storage")]
        assert names.index("dtype") < names.index("device") < names.index("placeholder_seed") < names.index("memory")
    assert not cp.errors(), cp.errors()
