"""ComfyUI's own workflow templates (the installed comfyui_workflow_templates packages) as API prompts on tiny weights,
for the tests of the wire recorder (tests/test_server_wires_templates.py, tests/test_browser_wires.py).

`ui_template(name)` reads a template as shipped; `api_prompt(ui, object_info)` converts a UI workflow to the API
format as ComfyUI's frontend does when it queues one (links -> [node id, slot]; widget values in the order of the
node's inputs in /object_info, one more value after an INT with control_after_generate; notes and other nodes the
server does not know are left out); `swapped(name, object_info)` is that prompt with only what a CPU test cannot run
changed:
- the loaders, under the same node ids: UNETLoader (flux1-fill-dev) -> NativeFillTestTinyFluxFill (ComfyUI's
  FluxInpaint on the tiny FLUX Fill folder), DualCLIPLoader -> NativeTestTinyCLIP kind flux (ComfyUI's FLUX CLIP on
  that folder's CLIP-L and T5), VAELoader -> InspectTestTinyVAE (ComfyUI's VAE on that folder's VAE),
  CheckpointLoaderSimple (sd3.5) -> WiresTestTinySD3Checkpoint (ComfyUI's SD3 MMDiT, SD3 CLIP and TAESD VAE, tiny);
- KSampler's steps: STEPS (the templates' 20 take minutes on a CPU);
- EmptySD3LatentImage 1024 x 1024 -> SD3_SIZE (the tiny MMDiT's position table is 32 patches wide).
The input images the templates name (LoadImage) are written by `write_inputs` (RGBA: the alpha is LoadImage's mask).
"""

from __future__ import annotations

import importlib.resources
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

PACKAGES = {"flux_fill_inpaint_example": "comfyui_workflow_templates_media_image",
            "flux_fill_outpaint_example": "comfyui_workflow_templates_media_image",
            "sd3.5_simple_example": "comfyui_workflow_templates_media_other"}
TEMPLATES = tuple(PACKAGES)
FLUX = "FLUX.1-Fill-dev"
SD3 = "SD3-3-layer-CLIP-tiny"
STEPS = 2
SD3_SIZE = 256
INPUT_SIZE = 64  # the input images written for LoadImage: 64 x 64, a hole in the middle
WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
SWAPS = {
    "UNETLoader": lambda: {"class_type": "NativeFillTestTinyFluxFill", "inputs": {"folder": FLUX, "context_in_dim": 0}},
    "DualCLIPLoader": lambda: {"class_type": "NativeTestTinyCLIP", "inputs": {"folder": FLUX, "kind": "flux"}},
    "VAELoader": lambda: {"class_type": "InspectTestTinyVAE", "inputs": {"folder": FLUX}},
    "CheckpointLoaderSimple": lambda: {"class_type": "WiresTestTinySD3Checkpoint", "inputs": {"folder": SD3, "seed": 0}},
}


def ui_template(name: str) -> dict:
    files = importlib.resources.files(PACKAGES[name]) / "templates" / f"{name}.json"
    return json.loads(files.read_text(encoding="utf-8"))


def _is_widget(spec) -> bool:
    kind = spec[0] if isinstance(spec, (list, tuple)) and spec else spec
    return isinstance(kind, list) or kind in WIDGET_TYPES


def api_prompt(ui: dict, object_info: dict) -> dict:
    links = {link[0]: [str(link[1]), int(link[2])] for link in ui["links"]}
    prompt = {}
    for node in ui["nodes"]:
        if node.get("mode", 0) != 0 or node["type"] not in object_info:
            continue
        info = object_info[node["type"]]["input"]
        ordered = [*info.get("required", {}).items(), *info.get("optional", {}).items()]
        linked = {i["name"]: links[i["link"]] for i in node.get("inputs", []) if i.get("link") is not None}
        values = list(node.get("widgets_values") or [])
        inputs = {}
        for name, spec in ordered:
            if _is_widget(spec) and values:
                inputs[name] = values.pop(0)
                options = spec[1] if isinstance(spec, (list, tuple)) and len(spec) > 1 else {}
                if isinstance(options, dict) and options.get("control_after_generate") and values:
                    values.pop(0)  # "randomize" / "fixed": the frontend's, not an input
            if name in linked:
                inputs[name] = linked[name]
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt


def swapped(name: str, object_info: dict) -> dict:
    prompt = api_prompt(ui_template(name), object_info)
    for node in prompt.values():
        if node["class_type"] in SWAPS:
            node.update(SWAPS[node["class_type"]]())
        elif node["class_type"] == "KSampler":
            node["inputs"]["steps"] = STEPS
        elif node["class_type"] == "EmptySD3LatentImage":
            node["inputs"].update(width=SD3_SIZE, height=SD3_SIZE)
    return prompt


UI_SWAPS = {"UNETLoader": ("NativeFillTestTinyFluxFill", [FLUX, 0]), "DualCLIPLoader": ("NativeTestTinyCLIP", [FLUX, "flux"]),
            "VAELoader": ("InspectTestTinyVAE", [FLUX]), "CheckpointLoaderSimple": ("WiresTestTinySD3Checkpoint", [SD3, 0])}


def swapped_ui(name: str) -> dict:
    """The template as a UI workflow with the changes `swapped` makes (for the canvas: a page queues it itself)."""
    ui = ui_template(name)
    for node in ui["nodes"]:
        if node["type"] in UI_SWAPS:
            node["type"], node["widgets_values"] = UI_SWAPS[node["type"]][0], list(UI_SWAPS[node["type"]][1])
        elif node["type"] == "KSampler":
            node["widgets_values"][2] = STEPS
            node["widgets_values"][1] = "fixed"
        elif node["type"] == "EmptySD3LatentImage":
            node["widgets_values"][:2] = [SD3_SIZE, SD3_SIZE]
    return ui


def links(name: str) -> list[tuple[str, int, str, str, str]]:
    """(from node, slot, to node, input name, type) of each link of the template as shipped."""
    ui = ui_template(name)
    names = {(str(n["id"]), i.get("link")): i["name"] for n in ui["nodes"] for i in n.get("inputs", [])}
    return [(str(a), int(s), str(b), names[(str(b), link_id)], kind) for link_id, a, s, b, _, kind in ui["links"]]


def input_images(name: str) -> list[str]:
    return [n["widgets_values"][0] for n in ui_template(name)["nodes"] if n["type"] == "LoadImage"]


def write_inputs(input_dir: Path) -> None:
    """The templates' LoadImage files: a 64 x 64 RGBA picture whose alpha is 0 in a 24 x 24 square (the mask)."""
    import numpy as np
    from PIL import Image

    rgba = np.zeros((INPUT_SIZE, INPUT_SIZE, 4), np.uint8)
    yy, xx = np.mgrid[:INPUT_SIZE, :INPUT_SIZE]
    rgba[..., 0], rgba[..., 1], rgba[..., 2] = xx * 4, yy * 4, 128
    rgba[..., 3] = 255
    rgba[20:44, 20:44, 3] = 0
    for name in TEMPLATES:
        for file in input_images(name):
            Image.fromarray(rgba, "RGBA").save(Path(input_dir) / file)


def prepare(server) -> None:
    """The tiny FLUX Fill and SD3 folders the swapped loaders read, the tiny FLUX Fill's LoRA (native_templates.LORA)
    and the templates' input images (a server's ServerWithTestNodes.install, tests/conftest.py's templates_server)."""
    import native_templates as nt
    from tiny_flux import build_tiny_flux_fill_folder

    from safetensors.torch import save_file

    diffusers = Path(server.models_dir) / "diffusers"
    build_tiny_flux_fill_folder(diffusers / FLUX, seed=0)
    nt.build_sd3_folder(diffusers / SD3)
    lora = Path(server.models_dir) / nt.LORA[0] / nt.LORA[1]  # the tiny FLUX Fill's kohya LoRA, as native_templates
    lora.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in nt.kohya_lora().items()}, str(lora))
    Path(server.input_dir).mkdir(parents=True, exist_ok=True)
    write_inputs(server.input_dir)
