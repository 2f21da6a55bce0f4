"""The links between ComfyUI's own nodes and FillScope's, both ways, on ComfyUI's own frontend (the pinned 1.32.9,
then the newest: browser.FRONTENDS) in headless chromium: made with LGraphNode.connect (LiteGraph's type rules, as a
drag checks them).

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

import pytest

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

# JS: nodes made by LiteGraph and linked with LGraphNode.connect; what each link became ([from the right node, to
# the right node, the link's type] or null when the rules refused it).
BUILD_JS = """() => {
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
    require_browser("browser native-link tests")
    server = frontend_server(request, request.param)
    http_json(server.url + "/free", {"free_memory": True, "unload_models": True})
    with ComfyPage(server.url, settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp


def test_comfyui_and_fillscope_nodes_link_both_ways_and_wrong_links_are_refused(page):
    cp = page
    built = cp.page.evaluate(BUILD_JS)
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
