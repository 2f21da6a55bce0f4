"""The four tiled templates (api_workflows/graphs.py, issue 23) in a real ComfyUI 0.3.75 server.

- The two meta templates' API files (flux_fill_tiled_inpaint_meta_trace, klein_tiled_inpaint_meta_trace), queued as
  shipped but at 2048x1024 on their Synthetic Image + Mask's width / height inputs (what a user changes) and at one
  step (klein's ships 4; the plan and the tokens do not depend on it): the tiles the node plans are the engine's plan
  (compositing/tiles.plan_tiles) of that image and mask, every sampled tile's measured transformer input holds at
  most one 1024 px tile's tokens (FLUX Fill 64 x 64 = 4096; klein 8192: the tile's 4096 and its source's 4096 as
  reference), the output image is the full 2048x1024, the Shapes Report's page draws one tile per planned tile.
- Their shipped default (6144x4096, mask_fraction 0.1) plans what their read-me says: 35 tiles, 9 meeting the mask
  grown by the overlap, 1 holding it (the engine's planner, no server).
- The two real-weight templates (flux_fill_tiled_inpaint, klein_tiled_edit) as shipped on the session server's tiny
  stand-ins for the published files, with a 384x256 synthetic image and tile 256 so that two tiles run (2 steps):
  the output has the input's size; outside the mask every pixel is the source's (the klein edit has no mask: every
  tile is sampled, in mode shared, once a step each).
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from PIL import Image
from workflow_helpers import WORKFLOWS, image_saver, load_api, node_id, with_dtype, with_synthetic_image

from fillscope.compositing.tiles import plan_tiles
from fillscope.masks import synthetic_image_and_mask

sys.path.insert(0, str(WORKFLOWS))
import graphs  # noqa: E402

TOKEN_PX = 16  # a token's side in px, every family (FLUX.1 8x VAE x 2x2 patches, FLUX.2 16x VAE)
# template -> (its tiled node, transformer tokens per token of the tile: klein adds the tile's source as reference)
META = {"flux_fill_tiled_inpaint_meta_trace": ("FillScopeFluxFillTiledInpaint", 1),
        "klein_tiled_inpaint_meta_trace": ("FillScopeKleinTiledInpaint", 2)}
REDUCED = (2048, 1024)  # width, height: 3 tiles of 1024 px along x, all meeting the centred mask


def planned(width: int, height: int, tiled_inputs: dict, mask_fraction: float):
    """(the tiles the engine plans for the synthetic image and mask, the indices of those holding a repaint pixel)."""
    _, mask = synthetic_image_and_mask(width, height, mask_fraction)
    tiles = plan_tiles(height, width, tile=tiled_inputs["tile"], overlap=tiled_inputs["overlap"], mask=mask)
    holding = [t.index for t in tiles if bool(mask[0, t.box[1]:t.box[3], t.box[0]:t.box[2]].any())]
    return tiles, holding


@pytest.mark.parametrize("name", sorted(META))
def test_shipped_meta_default_plans_what_its_note_says(name):
    prompt = load_api(name)
    synthetic = prompt[node_id(prompt, "FillScopeSyntheticImageMask")]["inputs"]
    tiled = prompt[node_id(prompt, META[name][0])]["inputs"]
    assert (synthetic["width"], synthetic["height"]) == (6144, 4096)
    everything = plan_tiles(synthetic["height"], synthetic["width"], tile=tiled["tile"], overlap=tiled["overlap"])
    tiles, holding = planned(synthetic["width"], synthetic["height"], tiled, synthetic["mask_fraction"])
    print(f"\n{name} default {synthetic['width']}x{synthetic['height']}: {len(everything)} tiles, {len(tiles)} meet the "
          f"grown mask {[t.index for t in tiles]}, {len(holding)} hold it {holding} (engine plan)")
    assert (len(everything), len(tiles), len(holding)) == (35, 9, 1)
    note = next(n for n in graphs.GRAPHS if n.name == name).note
    assert "35 tiles" in note and "the 9 that meet the mask" in note and "one that holds it is sampled" in note


@pytest.mark.server
@pytest.mark.parametrize("name", sorted(META))
def test_meta_template_at_2048x1024_samples_each_tile_at_one_tiles_tokens(comfy_server, name):
    node_type, per_token = META[name]
    prompt = load_api(name)
    synthetic_id, tiled_id = node_id(prompt, "FillScopeSyntheticImageMask"), node_id(prompt, node_type)
    width, height = REDUCED
    prompt[synthetic_id]["inputs"].update(width=width, height=height)
    tiled = prompt[tiled_id]["inputs"]
    tiled["steps"] = 1  # shipped: 1 (FLUX Fill), 4 (klein); a tile's tokens and the plan do not depend on it
    entry = comfy_server.run(prompt, timeout=600)
    record = entry["outputs"][tiled_id]["fillscope_shapes"][0]["node"]
    tiles, holding = planned(width, height, tiled, prompt[synthetic_id]["inputs"]["mask_fraction"])
    recorded = record["tiles"]
    assert (recorded["width"], recorded["height"], recorded["tile"]) == (width, height, tiled["tile"])
    assert [t["box"] for t in recorded["tiles"]] == [list(t.box) for t in tiles]
    sampled = [t for t in recorded["tiles"] if t["sampled"]]
    assert [t["index"] for t in sampled] == holding and sampled
    limit = (tiled["tile"] // TOKEN_PX) ** 2 * per_token  # one tile's tokens (klein: + its reference's)
    shapes = {t["name"]: t for t in record["tensors"]}
    inputs = [shapes[f"tile {t['index']} transformer.input"] for t in sampled]
    assert all(i["provenance"] == "measured" and i["device"] == "meta" for i in inputs)
    assert all(i["shape"][1] <= limit for i in inputs), [i["shape"] for i in inputs]
    assert all(t["tokens"] <= limit for t in sampled)
    out = shapes["image"]
    assert out["role"] == "output" and out["shape"] == [1, height, width, 3]
    report = node_id(prompt, "FillScopeShapesReport")
    html = next(f for f in entry["outputs"][report]["fillscope_report"] if f["filename"].endswith(".html"))
    page = comfy_server.view(html["filename"], html["subfolder"], "output").decode("utf-8")
    assert page.count('class="tilemap"') == 1 and page.count('<g class="tile"') == len(tiles)
    print(f"\n{name} at {width}x{height}: {len(sampled)} of {len(tiles)} planned tiles sampled, transformer inputs "
          f"{sorted({tuple(i['shape']) for i in inputs})} (limit {limit} tokens), {record['facts']['tile seconds']}, "
          f"output {out['shape']}")


TINY_SIZE, TINY_TILE = (384, 256), 256  # 2 tiles of 256 px at overlap 0.15 (x 0 and 128)


def saved(server, entry, prompt) -> np.ndarray:
    image = entry["outputs"][image_saver(prompt)]["images"][0]
    return np.asarray(Image.open(io.BytesIO(server.view(image["filename"], image["subfolder"], image["type"]))))


@pytest.mark.server
@pytest.mark.parametrize("name", ["flux_fill_tiled_inpaint", "klein_tiled_edit"])
def test_real_weight_tiled_template_runs_on_the_tiny_stand_ins(served_models, name):
    prompt = load_api(name)
    assert node_id(prompt, "LoadImage")  # as shipped: the user's photo on Load Image
    width, height = TINY_SIZE
    mask_fraction = 0.3
    prompt = with_synthetic_image(prompt, width, height, mask_fraction)
    tiled_id = next(k for k, v in prompt.items() if v["class_type"].endswith("TiledInpaint"))
    tiled = prompt[tiled_id]["inputs"]
    masked = "mask" in tiled
    tiled.update(tile=TINY_TILE, steps=2)
    with_dtype(prompt, "fp32")  # the tiny models' own dtype
    entry = served_models.run(prompt, timeout=600)
    out = saved(served_models, entry, prompt)
    source, mask = synthetic_image_and_mask(width, height, mask_fraction)
    source = np.clip(255.0 * source[0].numpy(), 0, 255).astype(np.uint8)  # as the Shapes Report saves an image
    assert out.shape == (height, width, 3)
    record = entry["outputs"][tiled_id]["fillscope_shapes"][0]["node"]
    recorded = record["tiles"]["tiles"]
    expected = plan_tiles(height, width, tile=TINY_TILE, overlap=tiled["overlap"],
                          mask=mask if masked else None)
    assert [t["box"] for t in recorded] == [list(t.box) for t in expected]
    if masked:
        keep = mask[0].numpy() == 0
        assert np.array_equal(out[keep], source[keep])  # every pixel outside the mask: the source's
    else:  # the edit: every tile sampled in mode shared, each window called once a step
        assert record["facts"]["mode"] == tiled["mode"] == "shared"
        assert all(t["sampled"] and t["calls"] == 2 for t in recorded), recorded
    changed = float((out != source).any(-1).mean())
    print(f"\n{name} on the tiny models, {width}x{height}, tile {TINY_TILE}: {len(recorded)} tiles "
          f"{[t['box'] for t in recorded]}, {sum(t['sampled'] for t in recorded)} sampled, "
          f"{record['facts']['tile seconds']}, {changed:.0%} of the pixels changed")
