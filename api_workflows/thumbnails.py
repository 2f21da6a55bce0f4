"""The template browser's thumbnails (example_workflows/<name>.jpg), each made from a real run of its workflow.

    .venv/bin/python api_workflows/thumbnails.py [--out example_workflows] [--only NAME ...]

ComfyUI's frontend (1.32) shows a custom node's template with the picture `<name>.jpg` next to `<name>.json` (its title
and description are the file name; there is no other field for them). This script starts a real ComfyUI server (the
test helper tests/comfy_server.py) with the tiny random models the tests use standing in for the published files
(tests/conftest.py serve_tiny_models), opens ComfyUI's own frontend in headless chromium (tests/browser.py), and for
each template in example_workflows/:

- a trace workflow (a trace node writes the five-page report): queues it and shoots page 1 of the report it wrote
  (fillscope/trace/report/screenshot.py): the model's macro architecture with the shape on every edge;
- every other workflow: loads it as the template browser does, queues it from the canvas and shoots the canvas after
  the run, every FillScope node showing the shapes it measured (meta workflows: full-size shapes on meta weights;
  real-weight workflows: the tiny stand-ins, so the image itself is noise; the picture is of the graph);
- a native_* workflow (ComfyUI's own loaders, which cannot load tiny files): loads it the same way, but queues, for
  the page's client, its API twin with the loaders swapped for the tiny stand-ins of tests/native_templates.py
  (same node ids, so the canvas shows the run on the template's own nodes, loaders as shipped); the server has the
  test-only nodes of tests/comfy_nodes for it (comfy_server.ServerWithTestNodes).

Needs playwright and Debian's chromium (no browser is downloaded), like the browser tests. Deterministic graphs, but
the pictures are not byte-identical between runs (timings are shown); they are committed, not compared.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLES = REPO / "example_workflows"
TESTS = REPO / "tests"
SIZE = 640  # px, the longer side; the browser's cards show the centre square (object-cover)
QUALITY = 80
MIDDLE = ("Prompt", "Image and mask", "Sample")  # the groups a canvas thumbnail shows

# The tiny SD3 transformer reads a wider T5 than the tiny FLUX one behind text_encoders/t5xxl_fp16.safetensors; with
# real weights one file serves both. For the SD3 workflow the file holds the tiny SD3 T5 while it runs.
T5_FILE = "text_encoders/t5xxl_fp16.safetensors"


def to_jpg(png: bytes, out: Path, crop_square: bool = True) -> Path:
    from PIL import Image

    im = Image.open(io.BytesIO(png)).convert("RGB")
    if crop_square:
        side = min(im.size)
        left, top = (im.width - side) // 2, (im.height - side) // 2
        im = im.crop((left, top, left + side, top + side))
    im.thumbnail((SIZE, SIZE), Image.Resampling.LANCZOS)
    im.save(out, "JPEG", quality=QUALITY, optimize=True, progressive=True)
    return out


def sd3_t5(models: Path, on: bool) -> None:
    """Put the tiny SD3 T5 (on) or the tiny FLUX T5 (off) behind text_encoders/t5xxl_fp16.safetensors."""
    import torch

    import checkpoint_files as cf
    from tiny_flux import build_tiny_components
    from tiny_sd3 import build_tiny_sd3_components

    t5 = (build_tiny_sd3_components(0) if on else build_tiny_components(0))["text_encoder_3" if on else "text_encoder_2"]
    cf.save(models / T5_FILE, cf.t5_comfy_state(t5)[0], dtype=torch.float16)


def report_page1(server, entry: dict, out: Path, browser) -> Path:
    """Page 1 of the report a trace node wrote (its HTML in the server's output folder)."""
    from fillscope.trace.report.screenshot import screenshot_report

    saved = [f for o in entry["outputs"].values() for f in o.get("fillscope_report", [])]
    html = next(f for f in saved if f["filename"].endswith(".html"))
    path = server.output_dir / html["subfolder"] / html["filename"]
    with tempfile.TemporaryDirectory() as tmp:
        shots = screenshot_report(path, tmp, "page", viewport=(1000, 1000), optimize=False, browser=browser)
        return to_jpg(shots[0].read_bytes(), out)


def queue_for_page(cp, prompt: dict) -> str:
    """POST /prompt with the page's client id: the page gets the run's websocket events as for its own Queue."""
    from browser import http_json

    client = cp.page.evaluate("() => window.comfyAPI.api.api.clientId")
    answer = http_json(f"{cp.url}/prompt", {"prompt": prompt, "client_id": client})
    if answer.get("node_errors") or "prompt_id" not in answer:
        raise RuntimeError(f"queue failed: {json.dumps(answer)[:2000]}")
    return answer["prompt_id"]


def canvas_after_run(cp, name: str, out: Path, prompt: dict | None = None) -> Path:
    """The template loaded as the browser loads it, run from the canvas (or `prompt` queued for the page), the whole
    graph in view."""
    cp.page.evaluate("async (n) => { const r = await fetch(`/api/workflow_templates/FillScope/${n}.json`);"
                     " await window.app.loadGraphData(await r.json(), true, true, n); }", name)
    cp.page.wait_for_timeout(500)
    cp.dismiss_dialogs()
    cp.free_cache()
    pid = cp.queue() if prompt is None else queue_for_page(cp, prompt)
    cp.wait_history(pid, timeout=600)
    cp.wait_executed(pid, timeout=120)
    cp.full_detail()
    cp.page.wait_for_timeout(500)
    # the middle of the graph, centred: the Prompt, Image and mask and Sample groups as the file draws them (graphs.py
    # reserves the room the shape tables take after a run: the nodes stay inside their groups)
    cp.page.evaluate("""(titles) => {
        const g = window.app.graph, c = window.app.canvas, el = c.canvas;
        const bs = g.groups.filter(x => titles.includes(x.title)).map(x => x._bounding || x.bounding);
        const x0 = Math.min(...bs.map(b => b[0])) - 40, y0 = Math.min(...bs.map(b => b[1])) - 40;
        const x1 = Math.max(...bs.map(b => b[0] + b[2])) + 40, y1 = Math.max(...bs.map(b => b[1] + b[3])) + 40;
        const w = el.clientWidth, h = el.clientHeight, scale = Math.min(w / (x1 - x0), h / (y1 - y0));
        c.ds.scale = scale;
        c.ds.offset[0] = (w / scale - (x1 - x0)) / 2 - x0;
        c.ds.offset[1] = (h / scale - (y1 - y0)) / 2 - y0;
        c.setDirty(true, true); }""", list(MIDDLE))
    cp.page.wait_for_timeout(500)
    return to_jpg(cp.page.locator("#graph-canvas").screenshot(), out, crop_square=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(EXAMPLES))
    ap.add_argument("--only", nargs="*", help="template names (default: every example_workflows/*.json)")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(TESTS), str(REPO)]
    import native_templates
    from browser import ComfyPage
    from comfy_server import ServerWithTestNodes
    from conftest import serve_tiny_models

    names = args.only or sorted(p.stem for p in EXAMPLES.glob("*.json"))
    out = Path(args.out)
    with ServerWithTestNodes() as server:
        serve_tiny_models(server, server.models_dir)
        # the native templates' LoRA and SD3 folder; their ControlNet only while native_sd3_inspect runs (the
        # FillScope SD3 templates read another tiny ControlNet under the same file name)
        native_templates.prepare(server.models_dir, controlnet=False)
        with ComfyPage(server.url, viewport=(1600, 900)) as cp:
            # the canvas alone: focus mode (no menus), no zoom buttons (the p-buttongroup over the canvas), no stats
            cp.page.evaluate("async () => await window.app.extensionManager.command.execute('Workspace.ToggleFocusMode')")
            cp.page.add_style_tag(content="span.p-buttongroup { display: none !important; }")
            cp.page.evaluate("() => { window.app.canvas.show_info = false; }")
            for name in names:
                ui = json.loads((EXAMPLES / f"{name}.json").read_text())
                trace = any(n["type"].endswith("Trace") for n in ui["nodes"])
                sd3 = name.startswith("sd3_") and not trace
                native = name.startswith("native_")
                controlnet = server.models_dir / native_templates.CONTROLNET[0] / native_templates.CONTROLNET[1]
                kept = controlnet.read_bytes() if native else None
                if sd3:
                    sd3_t5(server.models_dir, True)
                if native:
                    native_templates.write_controlnet(server.models_dir)
                try:
                    if trace:
                        api = json.loads((HERE / f"{name}.api.json").read_text())
                        path = report_page1(server, server.run(api, timeout=900), out / f"{name}.jpg", cp.browser)
                    elif native:
                        path = canvas_after_run(cp, name, out / f"{name}.jpg", native_templates.swapped(name))
                    else:
                        path = canvas_after_run(cp, name, out / f"{name}.jpg")
                finally:
                    if sd3:
                        sd3_t5(server.models_dir, False)
                    if native:
                        controlnet.write_bytes(kept)
                print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path} "
                      f"({path.stat().st_size // 1024} KiB)")
            errors = cp.errors()
    if errors:
        print("page errors:\n" + "\n".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
