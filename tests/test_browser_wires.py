"""Shapes on every link of ComfyUI's own "Flux Inpaint" template (flux_fill_inpaint_example from the installed
comfyui_workflow_templates, its loaders swapped for tiny builds of ComfyUI's own classes: tests/comfy_templates.py)
on both frontends (the pinned 1.32.9 and the newest, browser.NEWEST_FRONTEND), in headless chromium: the page loads
the workflow, queues it from the canvas, and web/fillscope_wires.js labels each link from the wire recorder's records
(websocket `fillscope.wires`), with the text the record gives; the labels stay when the page switches to Nodes 2.0
(setting Comfy.VueNodes.Enabled, live) and come back after a reload (from /history and /fillscope/wires); the setting
FillScope.Wires.ShapesOnLinks switches them off. A shape failure (SD3's CLIP into the same graph) turns the labels of
the links its explanation blames red and opens the explanation's panel (websocket `fillscope.explain`). Screenshots
of the labelled links under test-artifacts/browser/wires.

One server per frontend with tests/comfy_nodes (the session's test-nodes server for 1.32.9; one started here for the
newest, ComfyUI's --front-end-root). Needs playwright and a system chromium (skipped without them outside CI, a
failure in CI)."""

from __future__ import annotations

import sys
from pathlib import Path

import comfy_templates as ct
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import VUE_NODES, ComfyPage, http_json, require_browser, require_newest_frontend  # noqa: E402

pytestmark = pytest.mark.server

SHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser" / "wires"
TEMPLATE = "flux_fill_inpaint_example"
SETTING = "FillScope.Wires.ShapesOnLinks"
DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}

LINKS_JS = """() => {
  const g = window.app.graph, out = [];
  const links = g.links instanceof Map ? [...g.links.values()] : Object.values(g.links || {});
  for (const l of links) if (l) out.push(l.id);
  return out.sort((a, b) => a - b);
}"""
LABELS_JS = "() => window.FillScope.wires.labels()"


@pytest.fixture(scope="module")
def newest_server():
    from comfy_server import ServerWithTestNodes

    server = ServerWithTestNodes(front_end_root=require_newest_frontend())
    try:
        server.start()
        server.install(ct.prepare)
        yield server
    finally:
        server.cleanup()


def expected_label(output: dict) -> str:
    """The start of a link's label, from the record as /fillscope/wires gives it (web/fillscope_wires.js labelOf)."""
    value = output["values"][0]
    if output["type"] in ("MODEL", "CLIP", "VAE"):
        return str(value["facts"].get("diffusion model", value["facts"].get("class")))
    first = value["tensors"][0]
    return "[" + ",".join(map(str, first["shape"])) + "] " + DTYPES.get(first["dtype"], first["dtype"])


def labelled(cp, records: dict) -> dict:
    """{link id: label text} drawn now, each checked against its record; every link of the graph has one."""
    cp.fit_view()
    cp.page.wait_for_function("(n) => window.FillScope.wires.labels().length >= n", arg=len(ct.links(TEMPLATE)),
                              timeout=20_000)
    labels = {label["link"]: label["text"] for label in cp.page.evaluate(LABELS_JS)}
    assert sorted(labels) == cp.page.evaluate(LINKS_JS)
    ui_links = {link[0]: (str(link[1]), link[2]) for link in ct.ui_template(TEMPLATE)["links"]}
    for link_id, text in labels.items():
        source, slot = ui_links[link_id]
        assert text.startswith(expected_label(records[source]["outputs"][slot])), (link_id, text)
    return labels


@pytest.mark.parametrize("which", ["pinned", "newest"])
def test_every_link_of_comfyuis_flux_inpaint_template_shows_its_shape_on_both_renderers(request, which):
    require_browser("the wire labels on both frontends")
    server = request.getfixturevalue({"pinned": "templates_server", "newest": "newest_server"}[which])
    http_json(server.url + "/history", {"clear": True})
    settings = {VUE_NODES: False, "Comfy.Window.UnloadConfirmation": False}
    with ComfyPage(server.url, viewport=(1600, 1000), settings=settings) as cp:
        cp.load_workflow(ct.swapped_ui(TEMPLATE))
        cp.dismiss_dialogs()
        assert cp.missing_node_types() == []
        prompt_id = cp.queue()
        assert cp.wait_executed(prompt_id, timeout=180) == "success"
        records = server.get_json(f"/fillscope/wires?prompt_id={prompt_id}")["nodes"]
        sampler_model = records["39"]["outputs"][0]  # DifferentialDiffusion's MODEL, into KSampler
        x = next(r for c in sampler_model["calls"] for r in c["rows"] if r["name"] == "x (diffusion model in)")

        litegraph = labelled(cp, records)
        assert litegraph[86].endswith("x [" + ",".join(map(str, x["shape"])) + "]")  # link 86: MODEL -> KSampler
        cp.full_detail()
        cp.center_on(31, 0.9)  # the loaders, the prompt, the conditioning and KSampler at a working zoom
        cp.screenshot(SHOTS / f"{which}-litegraph.png")

        cp.page.evaluate("async (id) => { await window.app.ui.settings.setSettingValueAsync(id, true); }", VUE_NODES)
        cp.page.wait_for_function("() => window.LiteGraph.vueNodesMode === true")
        cp.page.wait_for_timeout(500)
        assert labelled(cp, records) == litegraph
        cp.center_on(31, 0.9)
        cp.screenshot(SHOTS / f"{which}-nodes2.png")

        cp.page.evaluate("async (id) => { await window.app.ui.settings.setSettingValueAsync(id, false); }", VUE_NODES)
        cp.page.reload(wait_until="domcontentloaded")
        cp.wait_ready()
        cp.dismiss_dialogs()
        cp.page.wait_for_function("(pid) => window.FillScope.wires.promptId() === pid", arg=prompt_id,
                                  timeout=20_000)
        assert labelled(cp, records) == litegraph  # back from /history and /fillscope/wires

        cp.page.evaluate("async (id) => { await window.app.ui.settings.setSettingValueAsync(id, false); }", SETTING)
        cp.page.evaluate("() => window.app.canvas.draw(true, true)")
        assert cp.page.evaluate(LABELS_JS) == []
        cp.page.evaluate("async (id) => { await window.app.ui.settings.setSettingValueAsync(id, true); }", SETTING)
        assert cp.errors() == [], cp.errors()

        # a CLIP of another family (SD3's) into the same graph: KSampler fails on shapes; the explanation arrives
        # (websocket fillscope.explain), the links it blames turn red, the page takes it without an error
        failing = ct.swapped_ui(TEMPLATE)
        clip = next(n for n in failing["nodes"] if n["id"] == 34)
        clip["type"], clip["widgets_values"] = "NativeTemplateTestTinySD3CLIP", [ct.SD3]
        cp.load_workflow(failing)
        cp.dismiss_dialogs()
        failed_id = cp.queue()
        assert cp.wait_executed(failed_id, timeout=180) == "error"
        cp.dismiss_dialogs()
        cp.page.wait_for_function("(pid) => window.FillScope.wires.explanation()?.prompt_id === pid", arg=failed_id)
        explanation = cp.page.evaluate("() => window.FillScope.wires.explanation()")
        assert explanation["fix"].startswith("the CONDITIONING on 'positive' is 4096 wide")
        panel = cp.page.wait_for_selector("#fillscope-explain-panel .fillscope-explain-fix", state="visible")
        assert panel.inner_text() == explanation["fix"]  # the panel beside ComfyUI's error
        cp.fit_view()
        cp.page.wait_for_function("() => window.FillScope.wires.labels().some(l => l.red)")
        red = {label["link"] for label in cp.page.evaluate(LABELS_JS) if label["red"]}
        assert red == {77, 78, 86}  # positive and negative from InpaintModelConditioning, the MODEL into KSampler
        cp.screenshot(SHOTS / f"{which}-explained.png")
        assert cp.errors() == [], cp.errors()

        # FLUX.1 dev under the same InpaintModelConditioning runs, and ComfyUI drops the inpaint condition: the
        # warning arrives when the prompt ends (a record sent again) and marks the wires out of that node with a ⚠
        dev = ct.swapped_ui(TEMPLATE)
        loader = next(n for n in dev["nodes"] if n["type"] == "NativeFillTestTinyFluxFill")
        loader["type"], loader["widgets_values"] = "ExplainTestTinyModel", ["flux_dev", 0]
        cp.load_workflow(dev)
        cp.dismiss_dialogs()
        dev_id = cp.queue()
        assert cp.wait_executed(dev_id, timeout=180) == "success"
        cp.fit_view()
        inpaint = next(str(n["id"]) for n in dev["nodes"] if n["type"] == "InpaintModelConditioning")
        out_of_it = {link[0] for link in dev["links"] if str(link[1]) == inpaint}
        cp.page.wait_for_function("(n) => window.FillScope.wires.labels().filter(l => l.text.startsWith('⚠')).length "
                                  ">= n", arg=len(out_of_it), timeout=20_000)
        warned = {label["link"] for label in cp.page.evaluate(LABELS_JS) if label["text"].startswith("⚠")}
        assert warned == out_of_it, (warned, out_of_it)
        cp.screenshot(SHOTS / f"{which}-warned.png")
        assert cp.errors() == [], cp.errors()
