"""The `source` menus of FillScope's loaders on ComfyUI's own frontend (1.32.9) in headless chromium: a CLIP-L loader
and a FLUX.1 Fill transformer loader added on the canvas offer only the files of their kind (and the ones that cannot
tell: a pickle, a truncated download), read from the combo widget and from the drop-down list a click on it opens.

The server is this module's own, its model folders written by tests/test_source_menus.py (write_model_folders): the
text_encoders/ folder holds CLIP-L, CLIP-G, T5-XXL and Qwen3 files, diffusion_models/ FLUX.1 Fill, FLUX.2 [klein] and
SD3 transformers.

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the module
is skipped without them, in CI (env CI set) that is a failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, require_browser  # noqa: E402
from comfy_server import ComfyServer, comfyui_installed, comfyui_path  # noqa: E402
from test_source_menus import MENUS, write_model_folders  # noqa: E402

pytestmark = pytest.mark.server

LOADERS = ("FillScopeLoadCLIPL", "FillScopeLoadFluxFillTransformer")

# JS: the loaders added as a user adds them (LiteGraph.createNode + graph.add), the canvas at scale 1 with the
# origin at the top left; each node's source widget: value, options, and where it is on the page.
ADD_JS = """(types) => {
  const g = window.app.graph, canvas = window.app.canvas;
  g.clear();
  canvas.ds.scale = 1; canvas.ds.offset = [0, 0];
  const out = {};
  types.forEach((t, i) => {
    const n = window.LiteGraph.createNode(t);
    n.pos = [40 + 520 * i, 120];
    g.add(n);
    out[t] = {id: n.id};
  });
  canvas.setDirty(true, true);
  canvas.draw(true, true);
  const rect = canvas.canvas.getBoundingClientRect();
  for (const t of types) {
    const n = g.getNodeById(out[t].id);
    const w = n.widgets.find(w => w.name === 'source');
    const values = typeof w.options.values === 'function' ? w.options.values(w, n) : w.options.values;
    out[t] = {...out[t], value: w.value, values: [...values], title: n.title,
              click: [rect.left + n.pos[0] + n.size[0] / 2, rect.top + n.pos[1] + w.y + 10]};
  }
  return out;
}"""

# JS: the entries of the drop-down list open on the page (LiteGraph's context menu), as their text shows.
MENU_ENTRIES_JS = """() => [...document.querySelectorAll('.litecontextmenu .litemenu-entry')]
    .filter(e => e.offsetParent !== null).map(e => e.innerText.trim())"""
MENU_COUNT_JS = "() => document.querySelectorAll('.litecontextmenu .litemenu-entry').length"


@pytest.fixture(scope="module")
def page():
    require_browser("browser source-menu tests")
    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()} (run `make setup` or set COMFYUI_PATH)")
    server = ComfyServer()
    try:
        write_model_folders(server.models_dir)
        server.start()
        with ComfyPage(server.url, settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
            yield cp
    finally:
        server.cleanup()


def test_a_loader_added_on_the_canvas_offers_only_files_of_its_kind(page):
    cp = page
    nodes = cp.page.evaluate(ADD_JS, list(LOADERS))
    for t in LOADERS:
        assert nodes[t]["values"] == MENUS[t], t
    clip_l = nodes["FillScopeLoadCLIPL"]
    assert clip_l["value"] == "text_encoders/clip_l.safetensors"  # a new node starts on its own file
    assert not {"text_encoders/clip_g.safetensors", "text_encoders/t5xxl_fp16.safetensors",
                "text_encoders/qwen_3_4b.safetensors"} & set(clip_l["values"])
    fill = nodes["FillScopeLoadFluxFillTransformer"]
    assert fill["value"] == "diffusion_models/flux1-fill-dev.safetensors"
    assert "diffusion_models/flux-2-klein-4b.safetensors" not in fill["values"]
    assert "diffusion_models/sd3_medium_tiny.safetensors" not in fill["values"]
    # what the user sees: the drop-down list a click on the widget opens
    for t in LOADERS:
        cp.page.mouse.click(*nodes[t]["click"])
        cp.page.wait_for_function(f"({MENU_COUNT_JS})() > 0", timeout=5000)
        shown = cp.page.evaluate(MENU_ENTRIES_JS)
        cp.page.mouse.click(1500, 900)  # on the empty canvas: closes the list (the next one must not read its entries)
        cp.page.wait_for_function(f"({MENU_ENTRIES_JS})().length === 0", timeout=5000)
        assert shown == MENUS[t], (t, shown)
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())


# JS: a CLIP-L loader whose shapes go to ComfyUI's PreviewAny (a graph that can be queued), saved as the canvas saves.
SAVED_JS = """() => {
  const g = window.app.graph;
  g.clear();
  const load = window.LiteGraph.createNode('FillScopeLoadCLIPL'); load.pos = [40, 120]; g.add(load);
  const show = window.LiteGraph.createNode('PreviewAny'); show.pos = [600, 120]; g.add(show);
  load.connect(1, show, 0);
  return {id: load.id, workflow: JSON.parse(JSON.stringify(g.serialize()))};
}"""


def test_a_saved_workflow_naming_a_file_of_another_kind_keeps_it_and_says_why_it_does_not_load(page):
    """A workflow saved before the menus were sorted names the Qwen3 file on the CLIP-L loader: the canvas keeps the
    value (the frontend does not swap in another file), the prompt is queued (no "Value not in list") and the run
    stops at the loader with FillScope's wrong-file error, which the page shows."""
    cp = page
    saved = cp.page.evaluate(SAVED_JS)
    wrong = "text_encoders/qwen_3_4b.safetensors"
    node = next(n for n in saved["workflow"]["nodes"] if n["id"] == saved["id"])
    assert node["widgets_values"][0] == "text_encoders/clip_l.safetensors"
    node["widgets_values"][0] = wrong
    cp.load_workflow(saved["workflow"])
    cp.dismiss_dialogs()
    shown = cp.page.evaluate("""(id) => { const n = window.app.graph.getNodeById(id);
        const w = n.widgets.find(w => w.name === 'source'); return [w.value, w.options.values.includes(w.value)]; }""",
                             saved["id"])
    assert shown == [wrong, False]
    prompt_id = cp.queue()
    assert cp.wait_executed(prompt_id, timeout=120) == "error"
    status = cp.history(prompt_id)["status"]
    err = next(data for kind, data in status["messages"] if kind == "execution_error")
    msg = err["exception_message"].strip()
    assert err["node_type"] == "FillScopeLoadCLIPL"
    assert msg.startswith("[FillScope] input 'clip_l source': 'qwen_3_4b.safetensors' is a Qwen3 LLM text encoder")
    assert "the FillScope Load CLIP-L loader takes a CLIP-L text encoder" in msg
    assert msg.endswith("Fix: load it with FillScope Load Qwen3.")
    cp.wait_dialog("qwen_3_4b.safetensors' is a Qwen3 LLM text encoder", timeout=15)  # what the user reads
    cp.dismiss_dialogs()
