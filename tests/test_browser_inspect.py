"""FillScope Inspect, Inspect CLIP and Inspect VAE on ComfyUI's own frontend (the pinned 1.32.9, then the newest:
browser.FRONTENDS) in headless chromium: links made with the canvas' own rules (LGraphNode.connect checks
LiteGraph's type rules, as a drag does): the Inspect node's `*` output connects to an IMAGE, LATENT, MODEL and
CONDITIONING input alike, Inspect CLIP / VAE hand on a CLIP / VAE, and the rules still refuse a wrong link from them;
the graph goes into the prompt through the Inspect nodes; LoadImage -> FillScope Inspect -> PreviewImage runs from
the canvas and the Inspect node's face shows the image's shape.

Also here, on the same pages (test_browser_native_links.py's, merged here: one page per frontend for both):
the links between ComfyUI's own nodes and FillScope's, both ways, made with LGraphNode.connect (LiteGraph's type
rules, as a drag checks them).

- ComfyUI -> FillScope: UNETLoader's MODEL -> FillScope FLUX Fill Sampler `model`; VAELoader's VAE -> FillScope FLUX
  Fill Condition `vae` and FillScope VAE Decode `vae` (sockets typed "FS_VAE,VAE"); EmptyLatentImage's and
  KSampler's LATENT -> FillScope VAE Decode `native_latent`; CLIPTextEncode's CONDITIONING -> FLUX Text from
  CONDITIONING;
- FillScope -> ComfyUI: the sampler's LATENT output (`native_latent`) -> VAEDecode `samples` and KSampler
  `latent_image`;
- refused: a CLIP into the sampler's `model`, a MODEL into FillScope VAE Decode's `vae`, FillScope's own FS_LATENT
  into ComfyUI's VAEDecode.

Then app.graphToPrompt (what the Queue button sends) carries every one of those links. The three native_* templates
load from the template browser with every node type known: tests/test_browser_templates.py parametrizes over every
template in api_workflows/graphs.py, these included.

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the module
is skipped without them, in CI (env CI set) that is a failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import (  # noqa: E402
    FRONTENDS,
    NEWEST_FRONTEND,
    ComfyPage,
    frontend_ids,
    frontend_server,
    http_json,
    require_browser,
)

pytestmark = pytest.mark.server

IMAGE, W, H = "inspect_canvas.png", 96, 64

# JS: nodes made by LiteGraph and linked with LGraphNode.connect (the canvas' type rules); what each link became.
BUILD_JS = """(image) => {
  const LG = window.LiteGraph, g = window.app.graph;
  g.clear();
  const n = {};
  const add = (key, type, x, y) => { const node = LG.createNode(type); node.pos = [x, y]; g.add(node); n[key] = node; return node; };
  add('load', 'LoadImage', 0, 0);
  const w = n.load.widgets.find(w => w.name === 'image'); w.value = image;
  add('inspect_image', 'FillScopeInspect', 350, 0);
  add('preview', 'PreviewImage', 700, 0);
  add('ckpt', 'CheckpointLoaderSimple', 0, 400);
  add('inspect_model', 'FillScopeInspect', 350, 400);
  add('inspect_clip', 'FillScopeInspectCLIP', 350, 550);
  add('inspect_vae', 'FillScopeInspectVAE', 350, 700);
  add('pos', 'CLIPTextEncode', 700, 500);
  add('neg', 'CLIPTextEncode', 700, 700);
  add('inspect_cond', 'FillScopeInspect', 1050, 500);
  add('empty', 'EmptyLatentImage', 0, 900);
  add('inspect_latent', 'FillScopeInspect', 350, 900);
  add('ksampler', 'KSampler', 1400, 400);
  add('inspect_sampled', 'FillScopeInspect', 1750, 400);
  add('decode', 'VAEDecode', 2100, 400);
  const link = (a, out, b, input) => {
    const l = n[a].connect(out, n[b], input);
    return l ? [l.origin_id === n[a].id, l.target_id === n[b].id, l.type] : null;
  };
  const links = {
    image_in: link('load', 0, 'inspect_image', 'value'),
    image_out: link('inspect_image', 0, 'preview', 'images'),
    model_in: link('ckpt', 0, 'inspect_model', 'value'),
    model_out: link('inspect_model', 0, 'ksampler', 'model'),
    clip_in: link('ckpt', 1, 'inspect_clip', 'clip'),
    clip_pos: link('inspect_clip', 0, 'pos', 'clip'),
    clip_neg: link('inspect_clip', 0, 'neg', 'clip'),
    cond_in: link('pos', 0, 'inspect_cond', 'value'),
    cond_out: link('inspect_cond', 0, 'ksampler', 'positive'),
    neg: link('neg', 0, 'ksampler', 'negative'),
    latent_in: link('empty', 0, 'inspect_latent', 'value'),
    latent_out: link('inspect_latent', 0, 'ksampler', 'latent_image'),
    sampled_in: link('ksampler', 0, 'inspect_sampled', 'value'),
    sampled_out: link('inspect_sampled', 0, 'decode', 'samples'),
    vae_in: link('ckpt', 2, 'inspect_vae', 'vae'),
    vae_out: link('inspect_vae', 0, 'decode', 'vae'),
    // the rules are in force: a CLIP is no MODEL, a VAE no LATENT
    wrong_clip: link('inspect_clip', 0, 'ksampler', 'model'),
    wrong_vae: link('inspect_vae', 0, 'decode', 'samples'),
  };
  const ids = Object.fromEntries(Object.entries(n).map(([k, v]) => [k, v.id]));
  return {links, ids};
}"""


# JS: nodes made by LiteGraph and linked with LGraphNode.connect; what each link became ([from the right node, to
# the right node, the link's type] or null when the rules refused it).
LINKS_BUILD_JS = """() => {
  const LG = window.LiteGraph, g = window.app.graph;
  g.clear();
  const n = {};
  const add = (key, type, x, y) => { const node = LG.createNode(type); node.pos = [x, y]; g.add(node); n[key] = node; };
  add('unet', 'UNETLoader', 0, 0);
  add('dual', 'DualCLIPLoader', 0, 150);
  add('vae', 'VAELoader', 0, 350);
  add('text', 'CLIPTextEncode', 350, 150);
  add('adapter', 'FillScopeFluxTextFromConditioning', 700, 150);
  add('image', 'FillScopeSyntheticImageMask', 350, 450);
  add('condition', 'FillScopeFluxFillCondition', 700, 400);
  add('sampler', 'FillScopeFluxFillSampler', 1050, 100);
  add('decode', 'VAEDecode', 1450, 0);
  add('fs_decode', 'FillScopeVAEDecode', 1450, 200);
  add('empty', 'EmptyLatentImage', 1050, 600);
  add('fs_decode_empty', 'FillScopeVAEDecode', 1450, 600);
  add('ksampler', 'KSampler', 1450, 400);
  add('fs_decode_k', 'FillScopeVAEDecode', 1850, 400);
  add('decode_fs', 'VAEDecode', 1850, 0);
  // an output by its type (the sampler's LATENT output is named native_latent, shown as "LATENT")
  const link = (a, out, b, input) => {
    const o = typeof out === 'number' ? out : n[a].outputs.findIndex(s => s.type === out);
    const l = n[a].connect(o, n[b], input);
    return l ? [l.origin_id === n[a].id, l.target_id === n[b].id, l.type] : null;
  };
  const links = {
    // ComfyUI -> FillScope
    model: link('unet', 0, 'sampler', 'model'),
    vae_condition: link('vae', 0, 'condition', 'vae'),
    vae_decode: link('vae', 0, 'fs_decode', 'vae'),
    clip_text: link('dual', 0, 'text', 'clip'),
    conditioning: link('text', 0, 'adapter', 'conditioning'),
    empty_latent: link('empty', 0, 'fs_decode_empty', 'native_latent'),
    ksampler_latent: link('ksampler', 0, 'fs_decode_k', 'native_latent'),
    // FillScope's own links of the chain
    flux_text: link('adapter', 'FS_FLUX_TEXT', 'sampler', 'flux_text'),
    image: link('image', 0, 'condition', 'image'),
    mask: link('image', 1, 'condition', 'mask'),
    condition: link('condition', 'FS_FILL_CONDITION', 'sampler', 'condition'),
    // FillScope -> ComfyUI: the sampler's LATENT (its native_latent output)
    native_decode: link('sampler', 'LATENT', 'decode', 'samples'),
    native_ksampler: link('sampler', 'LATENT', 'ksampler', 'latent_image'),
    vae_native_decode: link('vae', 0, 'decode', 'vae'),
    // the rules are in force
    wrong_clip_model: link('dual', 0, 'sampler', 'model'),
    wrong_model_vae: link('unet', 0, 'fs_decode_empty', 'vae'),
    wrong_fs_latent: link('sampler', 'FS_LATENT', 'decode_fs', 'samples'),
  };
  const ids = Object.fromEntries(Object.entries(n).map(([k, v]) => [k, v.id]));
  const outputs = Object.fromEntries(n.sampler.outputs.map((o, i) => [o.type, [i, o.name]]));
  return {links, ids, outputs};
}"""

CONNECTED = ("model", "vae_condition", "vae_decode", "clip_text", "conditioning", "empty_latent", "ksampler_latent",
             "flux_text", "image", "mask", "condition", "native_decode", "native_ksampler", "vae_native_decode")



@pytest.fixture(scope="module", params=FRONTENDS, ids=frontend_ids())
def page(request):
    """A page on the pinned frontend, then on the newest (browser.FRONTENDS: its own server)."""
    require_browser("browser Inspect and native-link tests")
    server = frontend_server(request, request.param)
    rgb = np.random.default_rng(3).integers(0, 256, size=(H, W, 3), dtype=np.uint8)
    server.input_dir.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgb, "RGB").save(server.input_dir / IMAGE)
    http_json(server.url + "/free", {"free_memory": True, "unload_models": True})
    with ComfyPage(server.url, settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp


def test_inspect_nodes_link_anywhere_on_the_real_canvas(page):
    cp = page
    built = cp.page.evaluate(BUILD_JS, IMAGE)
    links, ids = built["links"], built["ids"]
    for name in ("image_in", "image_out", "model_in", "model_out", "clip_in", "clip_pos", "clip_neg", "cond_in",
                 "cond_out", "neg", "latent_in", "latent_out", "sampled_in", "sampled_out", "vae_in", "vae_out"):
        assert links[name] is not None and links[name][:2] == [True, True], name
    assert links["wrong_clip"] is None and links["wrong_vae"] is None
    # the prompt the Queue button would send goes through the Inspect nodes
    prompt = cp.page.evaluate("async () => (await window.app.graphToPrompt()).output")
    inputs = {key: prompt[str(ids[key])]["inputs"] for key in ("preview", "ksampler", "decode", "pos")}
    assert inputs["preview"]["images"] == [str(ids["inspect_image"]), 0]
    assert inputs["ksampler"]["model"] == [str(ids["inspect_model"]), 0]
    assert inputs["ksampler"]["latent_image"] == [str(ids["inspect_latent"]), 0]
    assert inputs["ksampler"]["positive"] == [str(ids["inspect_cond"]), 0]
    assert inputs["decode"]["samples"] == [str(ids["inspect_sampled"]), 0]
    assert inputs["decode"]["vae"] == [str(ids["inspect_vae"]), 0]
    assert inputs["pos"]["clip"] == [str(ids["inspect_clip"]), 0]
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())


def test_inspect_between_loadimage_and_previewimage_runs_and_shows_the_shape(page):
    cp = page
    built = cp.page.evaluate(BUILD_JS, IMAGE)
    ids = built["ids"]
    # keep the part that can run here (no checkpoint): LoadImage -> FillScope Inspect -> PreviewImage
    cp.page.evaluate("""(keep) => { const g = window.app.graph;
        for (const node of [...g.nodes]) if (!keep.includes(node.id)) g.remove(node); }""",
                     [ids["load"], ids["inspect_image"], ids["preview"]])
    pid = cp.queue()
    entry = cp.wait_history(pid, timeout=120)
    assert cp.wait_executed(pid) == "success"
    assert entry["outputs"][str(ids["preview"])]["images"]  # the image reached PreviewImage
    cp.page.wait_for_function("(id) => !!window.FillScope.tableOf(id)", arg=ids["inspect_image"], timeout=20_000)
    face = cp.page.evaluate("""(id) => { const n = window.app.graph.getNodeById(id);
        const w = (n.widgets || []).find(w => w.name === 'fillscope_summary'); return w ? w.value : null; }""",
                            ids["inspect_image"])
    assert face is not None and f"image [1, {H}, {W}, 3]" in face, face
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())


def test_comfyui_and_fillscope_nodes_link_both_ways_and_wrong_links_are_refused(page):
    cp = page
    built = cp.page.evaluate(LINKS_BUILD_JS)
    links, ids, outputs = built["links"], built["ids"], built["outputs"]
    for name in CONNECTED:
        assert links[name] is not None and links[name][:2] == [True, True], (name, links[name])
    # the link's type: 1.32.9 types it by the input it ends in (FillScope's VAE sockets take "FS_VAE,VAE"), 1.58.1 by
    # the type both ends share (LiteGraph's commonType: "VAE")
    vae = "VAE" if cp.frontend_version() == NEWEST_FRONTEND else "FS_VAE,VAE"
    assert links["model"][2] == "MODEL" and links["vae_condition"][2] == links["vae_decode"][2] == vae
    assert links["native_decode"][2] == links["native_ksampler"][2] == "LATENT"
    assert links["empty_latent"][2] == links["ksampler_latent"][2] == "LATENT"
    assert outputs["LATENT"][0] == 2 and outputs["FS_LATENT"][0] == 0  # the last output is ComfyUI's LATENT
    assert links["wrong_clip_model"] is None and links["wrong_model_vae"] is None and links["wrong_fs_latent"] is None

    # the prompt the Queue button would send holds every link
    prompt = cp.page.evaluate("async () => (await window.app.graphToPrompt()).output")

    def inputs(key):
        return prompt[str(ids[key])]["inputs"]

    native = outputs["LATENT"][0]
    assert inputs("sampler")["model"] == [str(ids["unet"]), 0]
    assert "transformer" not in inputs("sampler")
    assert inputs("sampler")["flux_text"] == [str(ids["adapter"]), 0]
    assert inputs("sampler")["condition"] == [str(ids["condition"]), 0]
    assert inputs("condition")["vae"] == [str(ids["vae"]), 0]
    assert inputs("fs_decode")["vae"] == [str(ids["vae"]), 0]
    assert inputs("adapter")["conditioning"] == [str(ids["text"]), 0]
    assert inputs("decode")["samples"] == [str(ids["sampler"]), native]
    assert inputs("decode")["vae"] == [str(ids["vae"]), 0]
    assert inputs("ksampler")["latent_image"] == [str(ids["sampler"]), native]
    assert inputs("fs_decode_empty")["native_latent"] == [str(ids["empty"]), 0]
    assert inputs("fs_decode_k")["native_latent"] == [str(ids["ksampler"]), 0]
    assert "vae" not in inputs("fs_decode_empty") and "samples" not in inputs("decode_fs")  # the refused links
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())
