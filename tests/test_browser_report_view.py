"""The FillScope sidebar shows an inpaint run's Shapes Report as its page (the boundary table a person reads, EN /
中文), not as pretty-printed JSON; the JSON stays downloadable, and with the run's image wired into the report, image
and report carry one number.

ComfyUI's own frontend (1.32.9) in headless chromium on the session's server with the tiny weights standing in for
the published files (conftest.served_models): example_workflows/flux_fill_inpaint.json is loaded, its sampler set to
one step and its loaders to fp32, Paste Back's IMAGE wired into the Shapes Report's `images` (Save Image removed: the
report saves the image), and queued from the canvas; the FillScope sidebar tab (a real click on its button) shows the
page in its sandboxed frame: the table's headers, the transformer-input and unpacked-latent rows with the shapes the
tiny model's config and the input image give, and no JSON text block; the 中文 switch turns the headers; after a page
reload the list (from /history) shows the page again.

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the module is
skipped without them, in CI (env CI set) that is a failure. Screenshot: test-artifacts/browser/report-view-*.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, http_json, require_browser  # noqa: E402
from tiny_flux import TINY_TRANSFORMER_CONFIG, TINY_VAE_CONFIG  # noqa: E402

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "example_workflows" / "flux_fill_inpaint.json"
SHOTS = REPO / "test-artifacts" / "browser"
VIEWER = ".fillscope-viewer[data-mode='sidebar']"
HEADERS_EN = ["#", "boundary", "tensor", "shape", "dtype", "provenance", "node"]
HEADERS_ZH = ["#", "边界", "张量", "形状", "数据类型", "来源", "节点"]


def _id(workflow: dict, node_type: str) -> int:
    (node,) = [n for n in workflow["nodes"] if n["type"] == node_type]
    return node["id"]


@pytest.fixture(scope="module")
def page(request):
    require_browser("browser report view tests")
    server = request.getfixturevalue("served_models")
    http_json(server.url + "/history", {"clear": True})
    with ComfyPage(server.url, viewport=(1920, 1080), settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp, server


def expected_shapes(server) -> dict:
    """The shapes the tiny model gives the input image: the VAE's latent channels and downscale (2 per down block
    but the last), the transformer's input width (from its config), FLUX's 2x2 packing."""
    with Image.open(server.input_dir / "fillscope_example.png") as im:
        width, height = im.size
    scale = 2 ** (len(TINY_VAE_CONFIG["down_block_types"]) - 1)
    c = TINY_VAE_CONFIG["latent_channels"]
    tokens = (height // scale // 2) * (width // scale // 2)
    return {"latent.unpacked": [1, c, height // scale, width // scale],
            "transformer.input": [1, tokens, TINY_TRANSFORMER_CONFIG["in_channels"]]}


def test_the_sidebar_shows_the_inpaint_report_as_its_table(page):
    cp, server = page
    wf = json.loads(WORKFLOW.read_text())
    cp.load_workflow(wf)
    assert not cp.missing_node_types()
    sampler, report = _id(wf, "FillScopeFluxFillSampler"), _id(wf, "FillScopeShapesReport")
    paste = _id(wf, "FillScopePasteBack")
    cp.set_widget(sampler, "steps", 1)
    # fp32 weights: the shapes are the point, not the precision (bf16 convolutions are ~20x slower than fp32 on a CPU)
    for node in wf["nodes"]:
        if node["type"].startswith("FillScopeLoad"):
            cp.set_widget(node["id"], "dtype", "fp32")
    # the template wires the run's image to the report (one number for both)
    linked = cp.page.evaluate("""([paste, report]) => { const g = window.app.graph;
        const r = g.getNodeById(report), slot = r.inputs.find((i) => i.name === 'images');
        if (slot?.link == null) return false;
        const link = g.links.get ? g.links.get(slot.link) : g.links[slot.link];  // a Map in newer litegraph
        return link?.origin_id === paste; }""", [paste, report])
    assert linked, "the template's Shapes Report does not take Paste Back's image"
    pid = cp.queue()
    entry = cp.wait_history(pid, timeout=300)
    assert cp.wait_executed(pid) == "success"
    ui = entry["outputs"][str(report)]
    json_file, html_file = ui["fillscope_report"]
    (image,) = ui["images"]
    stem = image["filename"].removesuffix(".png")
    assert json_file["filename"] == stem + ".json" and html_file["filename"] == stem + ".html", (ui, image)
    # the PNG carries the prompt and the canvas' workflow, as Save Image's does (dropped on ComfyUI, it reopens)
    with Image.open(server.output_dir / image["subfolder"] / image["filename"]) as png:
        workflow = json.loads(png.info["workflow"])
        assert json.loads(png.info["prompt"])[str(report)]["inputs"]["images"] == [str(paste), 0]
    assert {n["type"] for n in workflow["nodes"]} >= {"FillScopeShapesReport", "FillScopePasteBack"}

    # the sidebar tab, opened as a user does: its button in the side bar
    cp.page.click(".fillscope-architecture-tab-button")
    cp.page.wait_for_selector(f"{VIEWER} iframe.fsv-frame[data-loaded='true']", timeout=30_000)
    state = cp.page.evaluate("""(sel) => { const v = document.querySelector(sel), body = v.querySelector('.fsv-body');
        const f = body.querySelector('iframe');
        return {name: v.querySelector('.fsv-name').textContent, pre: body.querySelectorAll('pre').length,
                sandbox: f.getAttribute('sandbox'), filename: f.dataset.filename,
                json: (v.querySelector('.fsv-download-json:not([hidden])') || {}).href || null,
                item: (v.querySelector('.fsv-item[aria-current=true]') || {dataset: {}}).dataset.filename}; }""", VIEWER)
    assert state["pre"] == 0  # no JSON text block
    assert state["sandbox"] == "allow-scripts"
    assert state["filename"] == html_file["filename"] == state["item"]
    assert state["name"] == f"{html_file['subfolder']}/{html_file['filename']}"
    assert state["json"] and json_file["filename"] in state["json"]  # the JSON stays downloadable

    frame = cp.page.query_selector(f"{VIEWER} iframe.fsv-frame").content_frame()
    frame.wait_for_function("() => window.fillscopeReport && window.fillscopeReport.hosted()")
    table = frame.evaluate("""() => { const t = document.querySelector('table.shapes-table[data-table=boundaries]');
        const vis = (e) => e.getClientRects().length > 0;
        const text = (e) => [...e.querySelectorAll('.l-en, .l-zh')].filter(vis).map(x => x.textContent).join('') || e.textContent;
        return {headers: [...t.querySelectorAll('thead th')].map(text),
                rows: Object.fromEntries([...t.querySelectorAll('tbody tr')].map(r =>
                  [r.dataset.tensor, [...r.children].map(text)])),
                image: (document.querySelector('code.image-file') || {}).textContent || null,
                visibleText: document.body.innerText.slice(0, 80)}; }""")
    assert table["headers"] == HEADERS_EN
    want = expected_shapes(server)
    for tensor, shape in want.items():
        row = table["rows"][tensor]
        assert row[3] == json.dumps(shape), (tensor, row)
        assert row[5].startswith("measured"), row
    assert table["rows"]["transformer.input"][1] == "transformer input = cat(noisy 64, condition 320)"
    assert table["rows"]["latent.unpacked"][6]  # the node that measured it
    assert table["image"] == image["filename"]
    assert not table["visibleText"].lstrip().startswith("{")
    print(f"report page {html_file['filename']}: transformer.input {table['rows']['transformer.input'][3]}, "
          f"latent.unpacked {table['rows']['latent.unpacked'][3]}, image {table['image']}")

    # 中文: the same table, its headers in Chinese
    frame.click(".langs button[data-lang=zh]")
    zh = frame.evaluate("""() => [...document.querySelectorAll('table.shapes-table[data-table=boundaries] thead th')]
        .map(th => [...th.querySelectorAll('.l-zh')].map(x => x.getClientRects().length ? x.textContent : '').join(''))""")
    assert zh == HEADERS_ZH
    SHOTS.mkdir(parents=True, exist_ok=True)
    cp.screenshot(SHOTS / "report-view-sidebar.png")

    # after a page reload the list comes back from /history: the same page, not the JSON
    cp.page.reload(wait_until="domcontentloaded")
    cp.wait_ready()
    if cp.page.evaluate("() => window.app.extensionManager.sidebarTab.activeSidebarTabId !== 'fillscope-architecture'"):
        cp.page.click(".fillscope-architecture-tab-button")
    cp.page.wait_for_selector(f"{VIEWER} iframe.fsv-frame[data-filename='{html_file['filename']}'][data-loaded='true']")
    assert cp.page.evaluate("(sel) => document.querySelectorAll(sel + ' .fsv-body pre').length", VIEWER) == 0
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())
