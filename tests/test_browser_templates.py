"""FillScope's templates in ComfyUI's own template browser (frontend 1.32.9, headless chromium): exactly one card
per UI workflow (ComfyUI 0.3.75 lists every *.json of a pack's example_workflows, example, examples, workflow and
workflows folders, so the API twins live in api_workflows/), each with its thumbnail (<name>.jpg next to the JSON),
each loading without missing nodes or models and with one prompt box per prompt; on a server without the weights, a
real-weight workflow opens the frontend's Missing Models dialog listing its declared files; and a loader added by hand
starts on a real model file, with its advanced inputs flagged.

Needs playwright and a system chromium, like test_browser_canvas.py (skipped without them outside CI, a failure in CI).
On the pinned frontend; test_browser_frontends.py loads every template on the newest frontend and in Nodes 2.0 too.
"""

from __future__ import annotations

import json
import sys
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


def load_template(cp: ComfyPage, name: str, n_nodes: int, attempts: int = 3) -> None:
    """Open the pack's templates and click `name`'s card until its graph is on the canvas: on a loaded machine a
    click can land while the card list is still re-rendering (its thumbnails arrive), and nothing loads. A template
    that never loads still fails, after `attempts` clicks."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(attempts):
        open_pack_templates(cp)
        cp.page.locator(f'[data-testid="template-workflow-{name}"]').click()
        try:
            cp.page.wait_for_function("(n) => window.app.graph.nodes.length === n", arg=n_nodes, timeout=30_000)
            return
        except PlaywrightTimeout:
            if attempt == attempts - 1:
                raise


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
    load_template(cp, name, len(ui["nodes"]))
    # the template browser closes itself after the click; on a loaded machine that takes longer than a fixed pause
    cp.page.wait_for_function("() => !document.querySelector('.p-dialog [data-testid^=\"template-workflow-\"]')",
                              timeout=30_000)
    cp.page.wait_for_timeout(500)  # a missing-nodes or missing-models dialog would open by now
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
    cp = bare_page
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    declared = ui["models"]
    assert declared and all(m["url"].startswith("https://huggingface.co/") and m["name"].endswith(".safetensors")
                            for m in declared), declared
    cp.page.evaluate("() => window.app.graph.clear()")
    open_pack_templates(cp)
    cp.page.locator(f'[data-testid="template-workflow-{name}"]').click()
    cp.wait_dialog("Missing Models", timeout=20)
    cp.page.wait_for_function("() => document.querySelectorAll('.p-dialog .comfy-missing-models [role=option]').length > 0")
    cp.page.wait_for_timeout(300)
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
