"""The tiled nodes (nodes/tiled.py, issue 23) in a real ComfyUI 0.3.75 server on the tiny fp32 models the session
server serves (tests/conftest.py: the published single-file names the shipped workflows load): a 384x256 image with
a mask across the border of two 256 px tiles. FLUX Fill in modes independent and shared, klein (with and without a
mask) and SD3 in mode independent return an image of the input's size whose pixels outside the mask are the
source's; the node's record in /history holds each tile's box, tokens and transformer input, the Shapes Report's page
draws the tile map, the progress bar counts tiles x steps; a bad tile (or poisson in mode shared) fails clearly and
the next prompt (poisson on, mode independent) runs."""

from __future__ import annotations

import io
import json
import threading
import time

import numpy as np
import pytest
from PIL import Image
from workflow_helpers import api_node, load_api, sd3_inpaint_prompt, with_dtype

from comfy_server import ComfyExecutionError, ComfyPromptError

pytestmark = pytest.mark.server

W, H, TILE, STEPS = 384, 256, 256, 2  # tile 256, overlap 0.15: two tiles, at x 0 and 128
IMAGE = "fillscope_tiled.png"
HOLE = (slice(64, 192), slice(96, 288))  # rows, cols: across both tiles and their overlap
BOXES = [[0, 0, 256, 256], [128, 0, 384, 256]]
NODE, SAVE, REPORT = "20", "21", "22"
# each family: the shipped workflow whose loaders the graph takes, the tiled node, tokens per 256 px tile
FAMILIES = {
    "flux": ("FillScopeFluxFillTiledInpaint", 256),  # 16x16 tokens
    "sd3": ("FillScopeSD3ControlNetTiledInpaint", 256),  # 32x32 latent positions / 2x2 patches
    "klein": ("FillScopeKleinTiledInpaint", 512),  # 16x16 tokens + the tile's source as 256 reference tokens
}


@pytest.fixture(scope="module")
def server(served_models):
    rng = np.random.default_rng(5)
    ys, xs = np.mgrid[0:H, 0:W]
    rgb = np.stack([xs * 255 // W, ys * 255 // H, (xs + ys) * 255 // (W + H)], -1) + rng.integers(0, 40, (H, W, 3))
    rgba = np.concatenate([np.clip(rgb, 0, 255), np.full((H, W, 1), 255)], -1).astype(np.uint8)
    rgba[HOLE[0], HOLE[1], 3] = 0  # transparent = repaint (LoadImage's mask is 1 - alpha)
    Image.fromarray(rgba, "RGBA").save(served_models.input_dir / IMAGE)
    return served_models


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


def loaders(family: str) -> dict:
    """The family's loader nodes of its shipped inpaint workflow, in fp32 (the tiny models' own dtype)."""
    prompt = {"flux": lambda: load_api("flux_fill_inpaint"), "sd3": sd3_inpaint_prompt,
              "klein": lambda: load_api("klein_inpaint")}[family]()
    return {k: v for k, v in with_dtype(prompt, "fp32").items() if v["class_type"].startswith("FillScopeLoad")}


def tiled_graph(info, family: str, *, mask: bool = True, prefix: str = "tiled", **inputs) -> dict:
    """Loaders -> LoadImage -> the family's tiled node (its defaults from /object_info, tile 256, 2 steps) -> Save
    Image and a Shapes Report."""
    graph = loaders(family)
    wire = {}
    for k, v in graph.items():
        kind = v["class_type"]
        name = {"FillScopeLoadCLIPL": "clip_l", "FillScopeLoadCLIPG": "clip_g", "FillScopeLoadT5": "t5",
                "FillScopeLoadVAE": "vae", "FillScopeLoadQwen3": "qwen3", "FillScopeLoadSD3InpaintControlNet":
                "controlnet"}.get(kind, "transformer")
        wire[name] = [k, 0]
    graph["8"] = {"class_type": "LoadImage", "inputs": {"image": IMAGE}}
    settings = {"prompt": "a red brick fireplace", "tile": TILE, "steps": STEPS, "seed": 1, **inputs}
    node = api_node(info, FAMILIES[family][0], image=["8", 0], **wire, **settings)
    if mask:
        node["inputs"]["mask"] = ["8", 1]
    graph[NODE] = node
    graph[SAVE] = {"class_type": "SaveImage", "inputs": {"images": [NODE, 0], "filename_prefix": f"{prefix}/image"}}
    graph[REPORT] = {"class_type": "FillScopeShapesReport",
                     "inputs": {"shapes": [NODE, 1], "filename_prefix": f"{prefix}/shapes"}}
    return graph


class Progress:
    """The server's websocket `progress` messages for one client id."""

    def __init__(self, server):
        import websocket

        self.client_id = server.new_client_id()
        self.ws = websocket.create_connection(f"ws://{server.host}:{server.port}/ws?clientId={self.client_id}",
                                              timeout=300)
        self.items: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                msg = self.ws.recv()
            except Exception:  # closed
                return
            if not msg:
                return
            if isinstance(msg, str):
                data = json.loads(msg)
                if data["type"] == "progress":
                    self.items.append(data["data"])

    def of(self, node: str, prompt_id: str) -> list[tuple[int, int]]:
        return [(d["value"], d["max"]) for d in list(self.items) if d.get("node") == node and d.get("prompt_id") == prompt_id]


def run(server, graph, timeout=600):
    """(the /history entry, the node's progress (value, max) in order) of one prompt."""
    progress = Progress(server)
    try:
        pid = server.queue(graph, client_id=progress.client_id)
        entry = server.wait(pid, timeout=timeout)
        deadline = time.monotonic() + 10  # the last messages may still be in transit when /history says done
        while time.monotonic() < deadline and not any(v == m for v, m in progress.of(NODE, pid)):
            time.sleep(0.05)
        return entry, progress.of(NODE, pid)
    finally:
        progress.ws.close()


def pixels(server, entry) -> np.ndarray:
    saved = entry["outputs"][SAVE]["images"][0]
    return np.asarray(Image.open(io.BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"]))))


def source_and_mask(server):
    rgba = np.asarray(Image.open(server.input_dir / IMAGE))
    return rgba[..., :3], rgba[..., 3] == 0


def check_run(server, entry, progress, family: str, *, mask: bool = True, steps: int = STEPS) -> dict:
    """What every tiled run must give; returns the node's record."""
    out = pixels(server, entry)
    source, hole = source_and_mask(server)
    assert out.shape == (H, W, 3)
    keep = ~hole if mask else np.zeros_like(hole)
    assert np.array_equal(out[keep], source[keep])  # every pixel outside the mask: the source's, exactly
    repaint = hole if mask else ~keep
    changed = float((out[repaint] != source[repaint]).any(-1).mean())
    assert changed > 0.5, changed  # the mask was sampled
    record = entry["outputs"][NODE]["fillscope_shapes"][0]["node"]
    tiles = record["tiles"]
    assert (tiles["width"], tiles["height"], tiles["tile"]) == (W, H, TILE)
    assert [t["box"] for t in tiles["tiles"]] == BOXES and all(t["sampled"] for t in tiles["tiles"])
    tokens = FAMILIES[family][1]
    assert [t["tokens"] for t in tiles["tiles"]] == [tokens, tokens]
    shapes = {t["name"]: t for t in record["tensors"]}
    for i in range(2):
        assert shapes[f"tile {i} transformer.input"]["provenance"] == "measured"
        assert f"box x {BOXES[i][0]}-{BOXES[i][2]}" in record["facts"][f"tile {i}"]
    assert shapes["image"]["shape"] == [1, H, W, 3] and shapes["image"]["role"] == "output"
    # the progress bar: tiles x steps, counted up to the end
    assert progress and progress[-1] == (2 * steps, 2 * steps), progress
    assert [v for v, _ in progress] == sorted(v for v, _ in progress)
    # the Shapes Report's page draws the tile map
    html = next(f for f in entry["outputs"][REPORT]["fillscope_report"] if f["filename"].endswith(".html"))
    page = server.view(html["filename"], html["subfolder"], "output").decode("utf-8")
    assert page.count('class="tilemap"') == 1 and page.count('<g class="tile"') == 2
    print(f"\n{family} {tiles['mode']}: tiles {[t['box'] for t in tiles['tiles']]}, transformer inputs "
          f"{[shapes[f'tile {i} transformer.input']['shape'] for i in range(2)]}, tile seconds "
          f"{[t['seconds'] for t in tiles['tiles']]} (measured in this run), {changed:.0%} of the repaint pixels changed")
    return record


@pytest.mark.parametrize("mode", ["independent", "shared"])
def test_flux_fill_tiled_keeps_the_source_outside_the_mask_and_records_every_tile(server, info, mode):
    entry, progress = run(server, tiled_graph(info, "flux", mode=mode, prefix=f"tiled_flux_{mode}"))
    record = check_run(server, entry, progress, "flux")
    assert record["facts"]["mode"] == mode
    shapes = {t["name"]: t for t in record["tensors"]}
    assert shapes["tile 0 transformer.input"]["shape"] == [1, 256, 384]  # 16x16 tokens, noisy 64 + condition 320
    rows = {r["tensor"]: r for r in entry["outputs"][REPORT]["fillscope_boundaries"]}
    assert rows["transformer.input"]["shape"] == [1, 256, 384]  # the family's table reads a tile's boundary
    if mode == "shared":  # one sampler over the whole latent: each window called once a step
        assert [t["calls"] for t in record["tiles"]["tiles"]] == [STEPS, STEPS]
        assert shapes["masked_image_latents"]["shape"] == [1, 16, H // 8, W // 8]  # the whole image's condition


def test_a_bad_tile_fails_clearly_and_the_next_prompt_runs(server, info):
    # within the widget's range but off the token grid: the node refuses it before any model is placed
    with pytest.raises(ComfyExecutionError) as e:
        server.run(tiled_graph(info, "flux", mode="independent", prefix="tiled_bad", tile=264), timeout=300)
    line = str(e.value).splitlines()[1]
    assert "input 'tile': is 264 px, not a multiple of 16 px" in line and "Fix: set tile to 256 or 272" in line, line
    print(f"\ntile 264 refused: {line}")
    # outside the widget's range (256 to 4096): ComfyUI refuses the prompt itself, naming the input
    for tile in (128, 4112):
        with pytest.raises(ComfyPromptError) as e:
            server.queue(tiled_graph(info, "flux", mode="independent", prefix="tiled_bad", tile=tile))
        errors = e.value.body["node_errors"][NODE]["errors"]
        assert any(err["extra_info"].get("input_name") == "tile" for err in errors), errors
        print(f"tile {tile} refused at prompt time: {errors[0]['message']}")
    # an option the mode cannot take: the engine's refusal, as the node's error
    with pytest.raises(ComfyExecutionError) as e:
        server.run(tiled_graph(info, "flux", mode="shared", poisson=True, prefix="tiled_bad"), timeout=300)
    line = str(e.value).splitlines()[1]
    assert "input 'poisson'" in line and "mode 'independent'" in line, line
    print(f"shared + poisson refused: {line}")
    # the next prompt runs (poisson on, mode independent: the seams re-solved, pixels outside the mask untouched)
    entry, progress = run(server, tiled_graph(info, "flux", mode="independent", poisson=True, prefix="tiled_after"))
    check_run(server, entry, progress, "flux")


def test_klein_tiled_inpaints_and_edits_without_a_mask(server, info):
    entry, progress = run(server, tiled_graph(info, "klein", mode="independent", prefix="tiled_klein", steps=1))
    check_run(server, entry, progress, "klein", steps=1)
    entry, progress = run(server, tiled_graph(info, "klein", mode="independent", mask=False, prefix="tiled_klein_edit",
                                              steps=1))
    record = check_run(server, entry, progress, "klein", mask=False, steps=1)
    assert any(n.startswith("no mask: the whole image is repainted") for n in record["notes"])
    # nobody drew a mask: no word of binarising one, nor of "plain text-to-image" (it is an edit of the source)
    said = record["notes"] + record.get("warnings", [])
    assert not [t for t in said if t.startswith("mask binarised") or "plain text-to-image" in t], said


def test_sd3_tiled_inpaints_in_mode_independent(server, info):
    # one step without CFG: the tiny SD3 with its ControlNet is the slowest of the three on a CPU
    entry, progress = run(server, tiled_graph(info, "sd3", mode="independent", cfg=1.0, steps=1, prefix="tiled_sd3"))
    record = check_run(server, entry, progress, "sd3", steps=1)
    assert "largest side (position-embedding grid)" in record["facts"]
    rows = {r["tensor"]: r for r in entry["outputs"][REPORT]["fillscope_boundaries"]}
    assert rows["inpaint_condition"]["shape"] == [1, 17, 32, 32]  # one 256 px tile's condition
