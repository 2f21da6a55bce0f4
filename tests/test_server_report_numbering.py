"""The Shapes Report saves the run's image with its report under one number (nodes/inspect.py
save_images_with_report), so a user can tell which report belongs to which image.

ComfyUI's folder_paths.get_save_image_path numbers a prefix one past the highest `<name>_<digits>_.<ext>` in the
folder, any extension. Two nodes that each ask it (Save Image, and a report with the same prefix) see the folder at
different moments of a prompt, so their numbers drift apart; the Shapes Report with its `images` input asks once and
writes `<name>_00002_.png`, `.json`, `.html` and `.txt` together.

A real ComfyUI server (tests/comfy_server.py, the session's) runs FillScope Synthetic Image + Mask -> Shapes Report
(images and shapes wired): a Save Image with the same prefix runs first (its image takes number 1), then two prompts
are queued back to back before either finishes; each gives one image and one report with the same number (2, 3),
the PNG carries the prompt as Save Image's does, and the report's JSON and page name their image.
"""

from __future__ import annotations

import json
import re

import pytest
from PIL import Image

pytestmark = pytest.mark.server

PREFIX = "numbering/inpaint"
NUMBERED = re.compile(r"inpaint_(\d{5})_\.(\w+)")


def report_graph(width: int, height: int, fraction: float) -> dict:
    return {
        "img": {"class_type": "FillScopeSyntheticImageMask",
                "inputs": {"width": width, "height": height, "mask_fraction": fraction}},
        "report": {"class_type": "FillScopeShapesReport",
                   "inputs": {"shapes": ["img", 2], "images": ["img", 0], "filename_prefix": PREFIX}},
    }


def save_image_graph() -> dict:
    return {"img": {"class_type": "FillScopeSyntheticImageMask", "inputs": {"width": 40, "height": 24, "mask_fraction": 0.2}},
            "save": {"class_type": "SaveImage", "inputs": {"images": ["img", 0], "filename_prefix": PREFIX}}}


def numbers(folder) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for f in folder.iterdir():
        m = NUMBERED.fullmatch(f.name)
        assert m, f"unexpected file {f.name}"
        out.setdefault(int(m.group(1)), set()).add(m.group(2))
    return out


def test_queued_runs_give_image_and_report_the_same_number(comfy_server):
    server = comfy_server
    folder = server.output_dir / "numbering"
    # a Save Image with the same prefix first: ComfyUI's own count, number 1
    first = server.run(save_image_graph(), timeout=120)
    assert first["outputs"]["save"]["images"][0]["filename"] == "inpaint_00001_.png"

    # two prompts in the queue at once (new sizes: nothing comes from ComfyUI's cache)
    sizes = [(64, 48, 0.5), (80, 32, 0.25)]
    pids = [server.queue(report_graph(*s)) for s in sizes]
    entries = [server.wait(pid, timeout=120) for pid in pids]

    for n, (entry, (w, h, _)) in enumerate(zip(entries, sizes), start=2):
        ui = entry["outputs"]["report"]
        stem = f"inpaint_{n:05}_"
        assert [i["filename"] for i in ui["images"]] == [stem + ".png"], ui["images"]
        assert [f["filename"] for f in ui["fillscope_report"]] == [stem + ".json", stem + ".html"]
        assert {f["subfolder"] for f in ui["fillscope_report"] + ui["images"]} == {"numbering"}
        with Image.open(folder / (stem + ".png")) as png:
            assert png.size == (w, h)
            assert json.loads(png.info["prompt"])["report"]["class_type"] == "FillScopeShapesReport"
        report = json.loads((folder / (stem + ".json")).read_text())
        assert report["images"] == [stem + ".png"]
        page = (folder / (stem + ".html")).read_text()
        assert f'<code class="image-file">{stem}.png</code>' in page
        print(f"run {n - 1}: {stem}.png {w}x{h} + {stem}.json/.html/.txt")

    assert numbers(folder) == {1: {"png"}, 2: {"png", "json", "html", "txt"}, 3: {"png", "json", "html", "txt"}}

    # ComfyUI's own counter counts the report's files too: the next Save Image takes 4, never a report's number
    after = server.run(save_image_graph() | {"img": {"class_type": "FillScopeSyntheticImageMask",
                                                     "inputs": {"width": 40, "height": 24, "mask_fraction": 0.3}}},
                       timeout=120)
    assert after["outputs"]["save"]["images"][0]["filename"] == "inpaint_00004_.png"
