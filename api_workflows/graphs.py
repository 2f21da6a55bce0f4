"""The shipped workflows, defined once; `python api_workflows/graphs.py --object-info URL|FILE` writes each as an
API-format file here in api_workflows/ (headless: POST /prompt, `comfy run`) and a UI-format file in
example_workflows/ (the canvas and ComfyUI's template browser), so the two stay the same graph. The UI format needs
each node's widget order, which it reads from ComfyUI's /object_info; it adds what only the canvas shows: coloured
groups, a read-me Note (notes.py) and the model files the Missing Models dialog offers.

Only example_workflows/ may hold workflow JSON: ComfyUI 0.3.75 lists every *.json in a custom node's
example_workflows, example, examples, workflow and workflows folders as a template, so the API twins live here.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import notes

HERE = Path(__file__).parent  # the API files (and this generator): a folder ComfyUI's template scan does not read
EXAMPLES = HERE.parent / "example_workflows"  # the UI files: what ComfyUI's template browser lists
NOTE_TYPES = ("Note", "MarkdownNote")  # the frontend's own nodes: on the canvas only, never sent to the server
# Group title -> colour (LiteGraph's group palette, as ComfyUI's own templates use it)
GROUP_COLORS = {"Load models": "#3f789e", "Prompt": "#8A8", "Image and mask": "#b58b2a", "Sample": "#a1309b",
                "Output": "#b06634", "Trace": "#a1309b"}


@dataclass
class Node:
    id: int
    type: str
    inputs: dict  # widget values, or (node_id, output_slot) links
    pos: tuple = (0, 0)  # graph units: only the order in its group (x, then y); layout() places the node
    title: str | None = None
    size: tuple = (320, 160)  # width; the height is a floor only where content cannot size the node (node_height)
    models: list = field(default_factory=list)  # files the canvas offers to download (properties.models)


@dataclass
class Graph:
    name: str
    description: str
    nodes: list = field(default_factory=list)
    groups: list = field(default_factory=list)  # (title, [node ids]): coloured boxes on the canvas (GROUP_COLORS)
    note: str = ""  # the read-me (markdown) on the canvas: downloads, or what a meta workflow shows
    node_columns: dict = field(default_factory=dict)  # group title -> [[node ids]]: its node columns (arrangement)

def _loader(node_id, type_, source, dtype, pos, device="auto", models=(), **extra):
    return Node(node_id, type_, {"source": source, **extra, "dtype": dtype, "device": device, "placeholder_seed": 0}, pos,
                size=(360, 130), models=list(models))


# Published single files: part -> (ComfyUI model folder, file name, URL). A loader's source is "<folder>/<name>"; the
# model dicts are ComfyUI's template format (name, url, directory), on the loader and in the workflow's `models`.
# The URLs are the ones ComfyUI's own templates and examples give (Comfy-Org's repackaged copies: downloadable
# without a Hugging Face login), and the file name at the end of each URL is the name the loader's source reads (the
# Missing Models dialog saves a download under `name`). Files only a gated repository publishes are in GATED: each
# template's note names them (notes.gated_line).
FLUX_FILL_FILES = {
    # Comfy-Org/workflow_templates templates/flux_fill_inpaint_example.json (DualCLIPLoader, UNETLoader, VAELoader)
    "clip_l": ("text_encoders", "clip_l.safetensors",
               "https://huggingface.co/comfyanonymous/flux_text_encoders/resolve/main/clip_l.safetensors"),
    "t5": ("text_encoders", "t5xxl_fp16.safetensors",
           "https://huggingface.co/comfyanonymous/flux_text_encoders/resolve/main/t5xxl_fp16.safetensors"),
    "transformer": ("diffusion_models", "flux1-fill-dev.safetensors",
                    "https://huggingface.co/Comfy-Org/flux1-dev/resolve/main/split_files/diffusion_models/"
                    "flux1-fill-dev.safetensors"),
    "vae": ("vae", "ae.safetensors",
            "https://huggingface.co/Comfy-Org/Lumina_Image_2.0_Repackaged/resolve/main/split_files/vae/ae.safetensors"),
}
# Text encoders: comfyanonymous/ComfyUI_examples sd3/README.md ("the text encoder files ... from SD3, Flux or other
# models": clip_l, clip_g, t5xxl_fp16 in Comfy-Org/stable-diffusion-3.5-fp8). sd3_medium.safetensors is published only
# by the gated stabilityai/stable-diffusion-3-medium (ComfyUI_examples sd3/README_old.md links it there).
_SD3_TE = "https://huggingface.co/Comfy-Org/stable-diffusion-3.5-fp8/resolve/main/text_encoders/"
_SD3 = "https://huggingface.co/stabilityai/stable-diffusion-3-medium/resolve/main/"
SD3_FILES = {
    "clip_l": ("text_encoders", "clip_l.safetensors", _SD3_TE + "clip_l.safetensors"),
    "clip_g": ("text_encoders", "clip_g.safetensors", _SD3_TE + "clip_g.safetensors"),
    "t5": ("text_encoders", "t5xxl_fp16.safetensors", _SD3_TE + "t5xxl_fp16.safetensors"),
    # sd3_medium.safetensors holds the MMDiT and the VAE (no text encoders): both loaders read it
    "transformer": ("checkpoints", "sd3_medium.safetensors", _SD3 + "sd3_medium.safetensors"),
    "vae": ("checkpoints", "sd3_medium.safetensors", _SD3 + "sd3_medium.safetensors"),
    # alimama-creative publishes it only as diffusion_pytorch_model.safetensors, and no ComfyUI template
    # repackages it: the one file whose URL ends in another name (RENAMED). ComfyUI_examples sd3/README_old.md says the
    # same of SD3 ControlNets ("rename it to something clear"); the dialog saves it under `name`.
    "controlnet": ("controlnet", "SD3-Controlnet-Inpainting.safetensors",
                   "https://huggingface.co/alimama-creative/SD3-Controlnet-Inpainting/resolve/main/"
                   "diffusion_pytorch_model.safetensors"),
}
# FLUX.2 [klein] 4B distilled: Comfy-Org/workflow_templates templates/image_flux2_klein_text_to_image.json (its read-me's
# model links: Comfy-Org/flux2-klein for the model and Qwen3, Comfy-Org/flux2-dev for the VAE).
KLEIN_4B_FILES = {
    "qwen3": ("text_encoders", "qwen_3_4b.safetensors",
              "https://huggingface.co/Comfy-Org/flux2-klein/resolve/main/split_files/text_encoders/qwen_3_4b.safetensors"),
    "transformer": ("diffusion_models", "flux-2-klein-4b.safetensors",
                    "https://huggingface.co/Comfy-Org/flux2-klein/resolve/main/split_files/diffusion_models/"
                    "flux-2-klein-4b.safetensors"),
    "vae": ("vae", "flux2-vae.safetensors",
            "https://huggingface.co/Comfy-Org/flux2-dev/resolve/main/split_files/vae/flux2-vae.safetensors"),
}
GATED = {"sd3_medium.safetensors"}  # file names whose only published copy is in a gated repository
RENAMED = {"SD3-Controlnet-Inpainting.safetensors"}  # file names the dialog saves under a name its URL does not end in


def published(files) -> tuple[dict, dict]:
    """({part: source entry}, {part: [model dict]}) of published single files."""
    sources = {part: f"{folder}/{name}" for part, (folder, name, _) in files.items()}
    models = {part: [{"name": name, "url": url, "directory": folder}] for part, (folder, name, url) in files.items()}
    return sources, models


klein_files = published  # the name issue 11 gave it
META_SOURCES = {"clip_l": "meta", "clip_g": "meta", "t5": "meta", "transformer": "meta", "vae": "meta",
                "controlnet": "meta", "qwen3": "meta"}
SYNTHETIC = {"width": 1024, "height": 1024, "mask_fraction": 0.5}
FLUX_GROUPS = [("Load models", [1, 2, 3, 4]), ("Prompt", [5]), ("Image and mask", [8, 9]), ("Sample", [10])]
SD3_GROUPS = [("Load models", [1, 2, 3, 4, 5, 6]), ("Prompt", [7, 8]), ("Image and mask", [15, 16]), ("Sample", [17])]
KLEIN_GROUPS = [("Load models", [1, 2, 3]), ("Prompt", [4]), ("Image and mask", [5, 6]), ("Sample", [7])]


def flux_fill_loaders(sources, dtype, models) -> list:
    """FLUX.1 Fill's four loaders (ids 1-4: CLIP-L, T5, transformer, VAE), each offering its file for download."""
    return [
        _loader(1, "FillScopeLoadCLIPL", sources["clip_l"], dtype, (0, 0), models=models.get("clip_l", ())),
        _loader(2, "FillScopeLoadT5", sources["t5"], dtype, (0, 120), models=models.get("t5", ())),
        _loader(3, "FillScopeLoadFluxFillTransformer", sources["transformer"], dtype, (0, 240),
                models=models.get("transformer", ())),
        _loader(4, "FillScopeLoadVAE", sources["vae"], dtype, (0, 360), kind="flux", models=models.get("vae", ())),
    ]


def flux_fill_graph(name, description, *, sources, dtype, prompt, steps, image_nodes, output_nodes, note,
                    models=None) -> Graph:
    """Loaders -> prompt -> condition -> sampler -> decode, with the image source and outputs supplied."""
    models = models or {}
    nodes = [
        *flux_fill_loaders(sources, dtype, models),
        Node(5, "FillScopeFluxPrompt", {"clip_l": (1, 0), "t5": (2, 0), "text": prompt, "max_length": 512}, (380, 0),
             size=(400, 220)),
        *image_nodes,
        Node(9, "FillScopeFluxFillCondition",
             {"vae": (4, 0), "image": (8, 0), "mask": (8, 1), "invert_mask": False, "threshold": 0.5, "grow": 0,
              "feather": 0, "size_mode": "pad"},
             (760, 260), size=(320, 260)),
        Node(10, "FillScopeFluxFillSampler",
             {"transformer": (3, 0), "flux_text": (5, 0), "condition": (9, 0), "seed": 0, "steps": steps,
              "guidance": 30.0, "denoise": 1.0},
             (1140, 120), size=(320, 260)),
        Node(11, "FillScopeVAEDecode", {"vae": (4, 0), "latent": (10, 0)}, (1520, 120), size=(320, 100)),
        *output_nodes,
    ]
    outputs = [11] + [n.id for n in output_nodes]
    return Graph(name, description, nodes, FLUX_GROUPS + [("Output", outputs)], note)


def sd3_controlnet_graph(name, description, *, sources, dtype, prompt, negative, steps, image_nodes, output_nodes,
                         note, models=None) -> Graph:
    """Loaders -> one SD3 Prompt for the prompt and one for the negative -> 17-channel condition -> CFG sampler with
    the inpainting ControlNet -> decode, with the image source and outputs supplied."""
    models = models or {}
    nodes = [
        _loader(1, "FillScopeLoadCLIPL", sources["clip_l"], dtype, (0, 0), models=models.get("clip_l", ())),
        _loader(2, "FillScopeLoadCLIPG", sources["clip_g"], dtype, (0, 120), models=models.get("clip_g", ())),
        _loader(3, "FillScopeLoadT5", sources["t5"], dtype, (0, 240), models=models.get("t5", ())),
        _loader(4, "FillScopeLoadSD3Transformer", sources["transformer"], dtype, (0, 360), variant="sd3-medium",
                models=models.get("transformer", ())),
        _loader(5, "FillScopeLoadSD3InpaintControlNet", sources["controlnet"], dtype, (0, 480),
                models=models.get("controlnet", ())),
        _loader(6, "FillScopeLoadVAE", sources["vae"], dtype, (0, 600), kind="sd3", models=models.get("vae", ())),
        Node(7, "FillScopeSD3Prompt", {"clip_l": (1, 0), "clip_g": (2, 0), "t5": (3, 0), "text": prompt}, (380, 0),
             title="SD3 Prompt (positive)", size=(400, 200)),
        Node(8, "FillScopeSD3Prompt", {"clip_l": (1, 0), "clip_g": (2, 0), "t5": (3, 0), "text": negative}, (380, 190),
             title="SD3 Prompt (negative)", size=(400, 200)),
        *image_nodes,
        Node(16, "FillScopeSD3InpaintCondition",
             {"vae": (6, 0), "image": (15, 0), "mask": (15, 1), "invert_mask": False, "threshold": 0.5, "grow": 0,
              "feather": 0, "size_mode": "pad"},
             (760, 440), size=(320, 260)),
        Node(17, "FillScopeSD3ControlNetInpaintSampler",
             {"transformer": (4, 0), "controlnet": (5, 0), "positive": (7, 0), "negative": (8, 0), "condition": (16, 0),
              "seed": 0, "steps": steps, "cfg": 7.0, "control_scale": 0.95, "control_start": 0.0, "control_end": 1.0,
              "shift": 3.0, "denoise": 1.0, "residual_mapping": "one_to_one"},
             (1140, 120), size=(340, 420)),
        Node(18, "FillScopeVAEDecode", {"vae": (6, 0), "latent": (17, 0)}, (1540, 120), size=(320, 100)),
        *output_nodes,
    ]
    outputs = [18] + [n.id for n in output_nodes]
    return Graph(name, description, nodes, SD3_GROUPS + [("Output", outputs)], note)


def load_image(node_id, pos) -> Node:
    return Node(node_id, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, pos, size=(320, 360))


def inpaint_outputs(first, decode, sampler, name, x=1900) -> list:
    """Paste Back -> the Shapes Report of the whole graph, which saves the image too: image and report under one
    number (<name>_00007_.png beside <name>_00007_.html), where a Save Image beside it would count on its own."""
    return [
        Node(first, "FillScopePasteBack", {"generated": (decode, 0), "latent": (sampler, 0)}, (x, 120), size=(320, 100)),
        report(first + 2, first, name, (x + 220, 120), images=(first, 0)),
    ]


def report(node_id, shapes_of, name, pos=(1900, 120), images=None) -> Node:
    """A Shapes Report of `shapes_of`'s record; with `images` it saves that IMAGE beside its report, one number for
    both (it then shows the image, so it gets a Save Image's size)."""
    inputs = {"shapes": (shapes_of, 1), "filename_prefix": f"fillscope/{name}"}
    if images is None:
        return Node(node_id, "FillScopeShapesReport", inputs, pos, size=(320, 120))
    return Node(node_id, "FillScopeShapesReport", {**inputs, "images": images}, pos, size=(400, 470))


_FLUX_SOURCES, _FLUX_MODELS = published(FLUX_FILL_FILES)
_SD3_SOURCES, _SD3_MODELS = published(SD3_FILES)
_KLEIN_SOURCES, _KLEIN_MODELS = published(KLEIN_4B_FILES)

GRAPHS = [
    flux_fill_graph(
        "flux_fill_meta_trace",
        "FLUX.1 Fill, full production topology on meta weights, 1 step: every boundary shape, any size, on any CPU.",
        sources=META_SOURCES, dtype="bf16", prompt="a red brick fireplace", steps=1,
        image_nodes=[Node(8, "FillScopeSyntheticImageMask", dict(SYNTHETIC), (380, 260), size=(320, 140))],
        output_nodes=[report(12, 11, "flux_fill_meta_trace")],
        note=notes.meta("FLUX.1 Fill [dev] on meta weights: every boundary shape", notes.SHAPES),
    ),
    flux_fill_graph(
        "flux_fill_inpaint",
        "FLUX.1 Fill [dev] inpainting with the published single files (flux1-fill-dev, clip_l, t5xxl_fp16, ae), bf16, "
        "1024x1024, guidance 30, 28 steps; paste-back keeps unmasked pixels exact. Load an RGBA image whose "
        "transparent area is the hole, or paint a mask in the mask editor.",
        sources=_FLUX_SOURCES, models=_FLUX_MODELS, dtype="bf16", prompt="a red brick fireplace", steps=28,
        image_nodes=[load_image(8, (380, 260))],
        output_nodes=inpaint_outputs(12, 11, 10, "flux_fill_inpaint"),
        note=notes.real_weights(
            "FLUX.1 Fill [dev] inpainting: 28 steps, guidance 30, bf16 (about 34 GB of weights; 12-16 GB cards: set "
            "storage = fp8_e4m3fn on the T5 and transformer loaders, under Show Advanced)",
            FLUX_FILL_FILES.values(), gated=GATED),
    ),
    sd3_controlnet_graph(
        "sd3_controlnet_meta_trace",
        "SD3-medium + alimama inpainting ControlNet, full production topology on meta weights, 1 step with CFG: "
        "every boundary shape, any size, on any CPU.",
        sources=META_SOURCES, dtype="bf16", prompt="a red brick fireplace", negative="", steps=1,
        image_nodes=[Node(15, "FillScopeSyntheticImageMask", dict(SYNTHETIC), (380, 440), size=(320, 140))],
        output_nodes=[report(19, 18, "sd3_controlnet_meta_trace")],
        note=notes.meta("SD3-medium + inpainting ControlNet on meta weights: every boundary shape", notes.SHAPES),
    ),
    sd3_controlnet_graph(
        "sd3_controlnet_inpaint",
        "SD3-medium + alimama-creative SD3 inpainting ControlNet with the published single files (sd3_medium, "
        "clip_l, clip_g, t5xxl_fp16, the ControlNet), bf16, 1024x1024, 28 steps, CFG 7, control scale 0.95, 1:1 "
        "residual mapping; paste-back keeps unmasked pixels exact.",
        sources=_SD3_SOURCES, models=_SD3_MODELS, dtype="bf16", prompt="a red brick fireplace",
        negative="blurry, low quality", steps=28,
        image_nodes=[load_image(15, (380, 440))],
        output_nodes=inpaint_outputs(19, 18, 17, "sd3_controlnet_inpaint"),
        note=notes.real_weights(
            "SD3-medium + alimama inpainting ControlNet: 28 steps, CFG 7 against the negative prompt, control scale "
            "0.95, bf16", SD3_FILES.values(),
            gated=GATED, extra="The ControlNet is published as `diffusion_pytorch_model.safetensors`: the Missing "
            "Models dialog saves it under the workflow's name; by hand, save it in `models/controlnet/` as "
            "`SD3-Controlnet-Inpainting.safetensors` (FillScope reads what a file is from its header, so any name "
            "works; this one matches the workflow)."),
    ),
]


def klein_graph(name, description, *, sources, dtype, prompt, steps, image_nodes, condition, output_nodes, note,
                models=None) -> Graph:
    """Qwen3 + klein transformer + FLUX.2 VAE loaders -> Qwen3 encode -> inpaint or edit condition (node 6) ->
    sampler -> decode, with the image source, condition and outputs supplied."""
    models = models or {}
    nodes = [
        _loader(1, "FillScopeLoadQwen3", sources["qwen3"], dtype, (0, 0), variant="qwen3-4b", models=models.get("qwen3", ())),
        _loader(2, "FillScopeLoadKleinTransformer", sources["transformer"], dtype, (0, 120), variant="klein-4b",
                models=models.get("transformer", ())),
        _loader(3, "FillScopeLoadVAE", sources["vae"], dtype, (0, 260), kind="flux2", models=models.get("vae", ())),
        Node(4, "FillScopeQwen3Encode", {"qwen3": (1, 0), "text": prompt}, (380, 0), size=(400, 200)),
        *image_nodes,
        condition,
        Node(7, "FillScopeKleinSampler",
             {"transformer": (2, 0), "positive": (4, 0), "condition": (6, 0), "seed": 0, "steps": steps,
              "guidance": 4.0, "strength": 1.0, "model_type": "auto"},
             (1140, 120), size=(340, 300)),
        Node(8, "FillScopeVAEDecode", {"vae": (3, 0), "latent": (7, 0)}, (1520, 120), size=(320, 100)),
        *output_nodes,
    ]
    outputs = [8] + [n.id for n in output_nodes]
    return Graph(name, description, nodes, KLEIN_GROUPS + [("Output", outputs)], note)


def klein_inpaint_condition(image_node: int = 5) -> Node:
    return Node(6, "FillScopeKleinInpaintCondition",
                {"vae": (3, 0), "image": (image_node, 0), "mask": (image_node, 1), "invert_mask": False,
                 "threshold": 0.5, "grow": 0, "feather": 0, "size_mode": "pad", "token_mask": "cover"},
                (760, 260), size=(320, 300))


KLEIN_NOTE = ("klein 4B is distilled: 4 steps, no guidance (the sampler ignores `guidance`). For a base model "
              "(flux-2-klein-base-4b) set the sampler's model_type = base and wire a second Qwen3 Encode (an empty prompt) to the "
              "sampler's negative.")
GRAPHS += [
    klein_graph(
        "klein_inpaint",
        "FLUX.2 [klein] 4B (distilled) inpainting with the published single files (models/diffusion_models/"
        "flux-2-klein-4b.safetensors, models/text_encoders/qwen_3_4b.safetensors, models/vae/flux2-vae.safetensors), "
        "bf16, 1024x1024, 4 steps, no guidance; paste-back keeps unmasked pixels exact. Load an RGBA image whose "
        "transparent area is the hole, or paint a mask in the mask editor.",
        sources=_KLEIN_SOURCES, models=_KLEIN_MODELS, dtype="bf16", prompt="a red brick fireplace", steps=4,
        image_nodes=[load_image(5, (380, 260))],
        condition=klein_inpaint_condition(),
        output_nodes=inpaint_outputs(9, 8, 7, "klein_inpaint"),
        note=notes.real_weights("FLUX.2 [klein] 4B inpainting: 4 steps, bf16 (about 15 GB of weights)",
                                KLEIN_4B_FILES.values(), extra=KLEIN_NOTE, gated=GATED),
    ),
    klein_graph(
        "klein_edit",
        "FLUX.2 [klein] 4B (distilled) reference-image editing, no mask (restyle by prompt, change, combine up to three "
        "images): the published single files, bf16, the image's own size, 4 steps.",
        sources=_KLEIN_SOURCES, models=_KLEIN_MODELS, dtype="bf16",
        prompt="turn this room into a loose watercolour painting", steps=4,
        image_nodes=[load_image(5, (380, 260))],
        condition=Node(6, "FillScopeKleinEditCondition", {"vae": (3, 0), "image": (5, 0), "width": 0, "height": 0},
                       (760, 260), size=(320, 200)),
        output_nodes=[
            report(10, 8, "klein_edit", (1900, 120), images=(8, 0)),
        ],
        note=notes.real_weights(
            "FLUX.2 [klein] 4B reference-image editing: no mask, the prompt says what to change", KLEIN_4B_FILES.values(),
            extra="Wire up to three images to Klein Edit Condition (image, image_2, image_3); width / height 0 keep the "
                  "first image's size.", image=False, gated=GATED),
    ),
    klein_graph(
        "klein_inpaint_meta_trace",
        "FLUX.2 [klein] 4B inpainting, full production topology on meta weights, 4 steps: every boundary shape, any "
        "size, on any CPU.",
        sources=META_SOURCES, dtype="bf16", prompt="a red brick fireplace", steps=4,
        image_nodes=[Node(5, "FillScopeSyntheticImageMask", dict(SYNTHETIC), (380, 260), size=(320, 140))],
        condition=klein_inpaint_condition(),
        output_nodes=[report(9, 8, "klein_inpaint_meta_trace")],
        note=notes.meta("FLUX.2 [klein] 4B inpainting on meta weights: every boundary shape", notes.SHAPES),
    ),
]


# ---- compositing (issue 13): crop and stitch, outpaint -------------------------------------------------------------
PHOTO = 25  # the Load Image / Synthetic Image node of the compositing workflows (the crop or pad node takes its id slot)
CROP = {"context_factor": 1.5, "padding": 32, "target": 1024, "regions": False}
CROP_NOTE = ("Crop For Inpaint cuts a box around the mask (x1.5 context, 32 px padding) and resizes it to 1024 px on "
             "the long side, so the model runs at its native size however big the photo is; Stitch puts the result "
             "back at the photo's resolution through the feathered mask: every pixel outside the mask is the original, "
             "bit for bit. Several holes: set `regions` (one crop each, one batch). Colour seams: `tone_match` / "
             "`poisson` on Stitch (the node reports the ring's delta E before and after).")


def crop_node(node_id, photo, pos) -> Node:
    return Node(node_id, "FillScopeCropForInpaint", {"image": (photo, 0), "mask": (photo, 1), **CROP}, pos,
                size=(320, 200))


def stitch_outputs(first, decode, crop, name, x=1900) -> list:
    """Stitch -> a Shapes Report of the whole graph that saves the image under the report's number (inpaint_outputs): the stitch's record (the crop's travels with it)
    and the decode's (the model's side: the crop reaches the condition as a plain IMAGE, which carries no record)."""
    return [
        Node(first, "FillScopeStitch", {"generated": (decode, 0), "stitch": (crop, 2), "feather": 8, "tone_match": False,
                                        "poisson": False}, (x, 120), size=(320, 160)),
        Node(first + 2, "FillScopeShapesReport", {"shapes": (first, 1), "filename_prefix": f"fillscope/{name}",
                                                  "shapes_2": (decode, 1), "images": (first, 0)}, (x + 220, 120),
             size=(400, 470)),
    ]


def with_photo(graph: Graph, photo: int) -> Graph:
    """The photo node joins the "Image and mask" group, over the crop (or pad) node, the condition in a second node
    column: three nodes stacked would make the graph too tall to read at fit zoom."""
    graph.groups = [(t, ids + [photo] if t == "Image and mask" else ids) for t, ids in graph.groups]
    ids = dict(graph.groups)["Image and mask"]
    condition = next(n.id for n in graph.nodes if n.id in ids and n.type.endswith("Condition"))
    graph.node_columns["Image and mask"] = [[photo] + [k for k in ids if k not in (photo, condition)], [condition]]
    return graph


SYNTHETIC_PHOTO = {"width": 4096, "height": 3072, "mask_fraction": 0.1}
GRAPHS += [
    with_photo(flux_fill_graph(
        "flux_fill_crop_stitch",
        "FLUX.1 Fill [dev] on a big photo: the box around the mask is cropped, sampled at 1024 px (its native size) and "
        "stitched back at the photo's resolution; unmasked pixels exact. Published single files, bf16, 28 steps.",
        sources=_FLUX_SOURCES, models=_FLUX_MODELS, dtype="bf16", prompt="a red brick fireplace", steps=28,
        image_nodes=[load_image(PHOTO, (380, 260)), crop_node(8, PHOTO, (380, 520))],
        output_nodes=stitch_outputs(12, 11, 8, "flux_fill_crop_stitch"),
        note=notes.real_weights("FLUX.1 Fill [dev], crop and stitch: any photo size, sampled at 1024 px",
                                FLUX_FILL_FILES.values(), extra=CROP_NOTE, gated=GATED),
    ), PHOTO),
    with_photo(flux_fill_graph(
        "flux_fill_crop_stitch_meta_trace",
        "FLUX.1 Fill crop and stitch on meta weights: a 4096x3072 photo is sampled as a 1024 px crop (transformer "
        "[1, N <= 4096, 384]) and comes back 4096x3072; every boundary shape, on any CPU in seconds.",
        sources=META_SOURCES, dtype="bf16", prompt="a red brick fireplace", steps=1,
        image_nodes=[Node(PHOTO, "FillScopeSyntheticImageMask", dict(SYNTHETIC_PHOTO), (380, 260), size=(320, 140)),
                     crop_node(8, PHOTO, (380, 400))],
        output_nodes=[Node(12, "FillScopeStitch", {"generated": (11, 0), "stitch": (8, 2), "feather": 8,
                                                   "tone_match": False, "poisson": False}, (1900, 120), size=(320, 160)),
                      Node(13, "FillScopeShapesReport", {"shapes": (12, 1), "shapes_2": (11, 1),
                                                         "filename_prefix": "fillscope/flux_fill_crop_stitch_meta_trace"},
                           (1900, 300), size=(320, 120))],
        note=notes.meta("FLUX.1 Fill crop and stitch on meta weights: a 4096x3072 photo through a 1024 px crop",
                        notes.SHAPES + " The Crop and Stitch nodes show the box and the scale (\"4096x3072 photo -> "
                        "1024x768 crop\"); the sampler's table shows the transformer at the crop's size."),
    ), PHOTO),
    with_photo(flux_fill_graph(
        "flux_fill_outpaint",
        "FLUX.1 Fill [dev] outpainting: Outpaint Pad adds 256 px left and right (edge fill) and the mask of the new "
        "area; the model paints it, paste-back keeps the original pixels exact. Published single files, bf16, 28 steps.",
        sources=_FLUX_SOURCES, models=_FLUX_MODELS, dtype="bf16", prompt="a wide living room, warm light", steps=28,
        image_nodes=[load_image(PHOTO, (380, 260)),
                     Node(8, "FillScopeOutpaintPad", {"image": (PHOTO, 0), "left": 256, "top": 0, "right": 256,
                                                      "bottom": 0, "fill": "edge", "colour": "#808080", "feather": 0},
                          (380, 520), size=(320, 240))],
        output_nodes=inpaint_outputs(12, 11, 10, "flux_fill_outpaint"),
        note=notes.real_weights("FLUX.1 Fill [dev] outpainting: 256 px on each side", FLUX_FILL_FILES.values(),
                                extra="Set the four sides on Outpaint Pad (0 = none); `fill` is what the new area "
                                      "starts as (edge, a flat colour, mirror).", gated=GATED),
    ), PHOTO),
    with_photo(sd3_controlnet_graph(
        "sd3_controlnet_crop_stitch",
        "SD3-medium + alimama inpainting ControlNet on a big photo: crop around the mask, sample at 1024 px, stitch "
        "back at full resolution; unmasked pixels exact. Published single files, bf16, 28 steps, CFG 7.",
        sources=_SD3_SOURCES, models=_SD3_MODELS, dtype="bf16", prompt="a red brick fireplace",
        negative="blurry, low quality", steps=28,
        image_nodes=[load_image(PHOTO, (380, 440)), crop_node(15, PHOTO, (380, 700))],
        output_nodes=stitch_outputs(19, 18, 15, "sd3_controlnet_crop_stitch"),
        note=notes.real_weights("SD3-medium + inpainting ControlNet, crop and stitch", SD3_FILES.values(),
                                extra=CROP_NOTE, gated=GATED),
    ), PHOTO),
    with_photo(klein_graph(
        "klein_crop_stitch",
        "FLUX.2 [klein] 4B (distilled) on a big photo: crop around the mask, sample at 1024 px, stitch back at full "
        "resolution; unmasked pixels exact. Published single files, bf16, 4 steps.",
        sources=_KLEIN_SOURCES, models=_KLEIN_MODELS, dtype="bf16", prompt="a red brick fireplace", steps=4,
        image_nodes=[load_image(PHOTO, (380, 260)), crop_node(5, PHOTO, (380, 520))],
        condition=klein_inpaint_condition(),
        output_nodes=stitch_outputs(9, 8, 5, "klein_crop_stitch"),
        note=notes.real_weights("FLUX.2 [klein] 4B, crop and stitch: 4 steps, bf16", KLEIN_4B_FILES.values(),
                                extra=CROP_NOTE + " " + KLEIN_NOTE, gated=GATED),
    ), PHOTO),
]


def trace_graph(name, description, model) -> Graph:
    """Meta loaders -> the trace node, which runs one denoiser step under the tracers and writes the report."""
    if model == "flux-fill":
        loaders = [
            _loader(1, "FillScopeLoadCLIPL", "meta", "bf16", (0, 0)),
            _loader(2, "FillScopeLoadT5", "meta", "bf16", (0, 120)),
            _loader(3, "FillScopeLoadFluxFillTransformer", "meta", "bf16", (0, 240)),
            _loader(4, "FillScopeLoadVAE", "meta", "bf16", (0, 360), kind="flux"),
        ]
        trace = Node(5, "FillScopeFluxFillTrace", {"clip_l": (1, 0), "t5": (2, 0), "transformer": (3, 0), "vae": (4, 0)}, (400, 120))
        title = "FLUX.1 Fill [dev]"
    elif model == "klein-4b":
        loaders = [
            _loader(1, "FillScopeLoadQwen3", "meta", "bf16", (0, 0), variant="qwen3-4b"),
            _loader(2, "FillScopeLoadKleinTransformer", "meta", "bf16", (0, 120), variant="klein-4b"),
            _loader(3, "FillScopeLoadVAE", "meta", "bf16", (0, 260), kind="flux2"),
        ]
        trace = Node(4, "FillScopeKleinTrace", {"qwen3": (1, 0), "transformer": (2, 0), "vae": (3, 0)}, (400, 120))
        title = "FLUX.2 [klein] 4B (a klein-9b transformer and qwen3-8b trace 9B)"
    else:
        loaders = [
            _loader(1, "FillScopeLoadCLIPL", "meta", "bf16", (0, 0)),
            _loader(2, "FillScopeLoadCLIPG", "meta", "bf16", (0, 120)),
            _loader(3, "FillScopeLoadT5", "meta", "bf16", (0, 240)),
            _loader(4, "FillScopeLoadSD3Transformer", "meta", "bf16", (0, 360), variant="sd3-medium"),
            _loader(5, "FillScopeLoadSD3InpaintControlNet", "meta", "bf16", (0, 480)),
            _loader(6, "FillScopeLoadVAE", "meta", "bf16", (0, 600), kind="sd3"),
        ]
        trace = Node(7, "FillScopeSD3ControlNetTrace", {"clip_l": (1, 0), "clip_g": (2, 0), "t5": (3, 0), "transformer": (4, 0),
                                                        "controlnet": (5, 0), "vae": (6, 0)}, (400, 240))
        title = "SD3-medium + inpainting ControlNet"
    trace.inputs.update(width=1024, height=1024, prompt="a red brick fireplace", line_trace=True,
                        filename_prefix=f"fillscope/{name}")
    trace.size = (360, 320)
    groups = [("Load models", [n.id for n in loaders]), ("Trace", [trace.id])]
    return Graph(name, description, [*loaders, trace], groups,
                 notes.meta(f"{title}: the five-page architecture report", notes.REPORT))


GRAPHS += [
    trace_graph("flux_fill_trace", "FLUX.1 Fill on meta weights: one denoiser step under the module and line tracers; "
                "writes the five-page architecture report (HTML + JSON) to output/fillscope/.", "flux-fill"),
    trace_graph("sd3_controlnet_trace", "SD3-medium + inpainting ControlNet on meta weights: one CFG denoiser step under "
                "the tracers; writes the five-page architecture report to output/fillscope/.", "sd3-controlnet-inpaint"),
    trace_graph("klein_trace", "FLUX.2 [klein] 4B on meta weights: one inpaint denoiser step (noisy + reference tokens) "
                "under the tracers; writes the five-page architecture report to output/fillscope/.", "klein-4b"),
]

# ---- with ComfyUI's own nodes (issue 21): native graphs with the Inspect nodes, native loaders into FillScope ------
# ComfyUI's loaders take a bare file name from their folder (unet_name, clip_name1 ...): the same published files as
# FillScope's loaders, declared on the node whose widget value is that name (the Missing Models dialog offers it).
def _native_models(files, *parts) -> list:
    return [{"name": files[p][1], "url": files[p][2], "directory": files[p][0]} for p in parts]


NATIVE_LORA = ("loras", "Hyper-FLUX.1-dev-8steps-lora.safetensors",
               "https://huggingface.co/ByteDance/Hyper-SD/resolve/main/Hyper-FLUX.1-dev-8steps-lora.safetensors")
NATIVE_FLUX_FILES = {**FLUX_FILL_FILES, "lora": NATIVE_LORA}
PROMPT = "a red brick fireplace"


def native_flux_loaders(x=0) -> list:
    """UNETLoader flux1-fill-dev (1), DualCLIPLoader clip_l + t5xxl type flux (2), VAELoader ae (3)."""
    f = FLUX_FILL_FILES
    return [
        Node(1, "UNETLoader", {"unet_name": f["transformer"][1], "weight_dtype": "default"}, (x, 0), size=(320, 90),
             models=_native_models(f, "transformer")),
        Node(2, "DualCLIPLoader", {"clip_name1": f["clip_l"][1], "clip_name2": f["t5"][1], "type": "flux",
                                   "device": "default"}, (x, 90), size=(320, 130),
             models=_native_models(f, "clip_l", "t5")),
        Node(3, "VAELoader", {"vae_name": f["vae"][1]}, (x, 200), size=(320, 60), models=_native_models(f, "vae")),
    ]


def inspect_report(node_id, decode, name, pos) -> Node:
    """FillScope Shapes Report of a native graph: no FillScope shapes to read, it tables the records this prompt's
    Inspect Model / CLIP / VAE nodes delivered; it saves the decoded image (so it runs after the decode: the
    sampler's run and the decode are in the records) under the report's number."""
    return Node(node_id, "FillScopeShapesReport", {"filename_prefix": f"fillscope/{name}", "images": (decode, 0)}, pos,
                size=(400, 470))


def native_flux_fill_inspect() -> Graph:
    """ComfyUI's own FLUX.1 Fill inpaint graph (as ComfyUI's example draws it) with FillScope's Inspect nodes on its
    links: Inspect Model between the model chain and KSampler, Inspect CLIP / VAE after the loaders, Inspect on the
    conditioning and the latent InpaintModelConditioning makes."""
    name = "native_flux_fill_inspect"
    nodes = [
        *native_flux_loaders(),
        Node(4, "FillScopeInspectCLIP", {"clip": (2, 0)}, (200, 90), size=(260, 80)),
        Node(5, "FillScopeInspectVAE", {"vae": (3, 0)}, (200, 200), size=(260, 80)),
        Node(6, "DifferentialDiffusion", {"model": (1, 0), "strength": 1.0}, (860, 0), size=(260, 60)),
        Node(7, "FillScopeInspectModel", {"model": (6, 0), "modules": False}, (860, 60), size=(280, 80)),
        Node(8, "CLIPTextEncode", {"text": PROMPT, "clip": (4, 0)}, (380, 0), title="CLIP Text Encode (positive)",
             size=(400, 160)),
        Node(9, "CLIPTextEncode", {"text": "", "clip": (4, 0)}, (380, 130),
             title="CLIP Text Encode (negative: unused at cfg 1)", size=(400, 120)),
        Node(10, "FluxGuidance", {"conditioning": (8, 0), "guidance": 30.0}, (640, 0), size=(280, 60)),
        Node(11, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, (380, 280), size=(320, 360)),
        Node(12, "InpaintModelConditioning", {"positive": (10, 0), "negative": (9, 0), "vae": (5, 0),
                                              "pixels": (11, 0), "mask": (11, 1), "noise_mask": True},
             (640, 280), size=(300, 140)),
        Node(13, "FillScopeInspect", {"value": (12, 0)}, (860, 130), title="Inspect (positive conditioning)",
             size=(300, 80)),
        Node(14, "FillScopeInspect", {"value": (12, 2)}, (860, 200), title="Inspect (latent)", size=(300, 80)),
        Node(15, "KSampler", {"model": (7, 0), "seed": 0, "steps": 20, "cfg": 1.0, "sampler_name": "euler",
                              "scheduler": "normal", "positive": (13, 0), "negative": (12, 1),
                              "latent_image": (14, 0), "denoise": 1.0}, (1060, 0), size=(320, 300)),
        Node(16, "VAEDecode", {"samples": (15, 0), "vae": (5, 0)}, (1280, 0), size=(220, 60)),
        inspect_report(18, 16, name, (1280, 60)),
    ]
    groups = [("Load models", [1, 2, 3, 4, 5]), ("Prompt", [8, 9, 10]), ("Image and mask", [11, 12]),
              ("Sample", [6, 7, 13, 14, 15]), ("Output", [16, 18])]
    return Graph(name, "ComfyUI's own FLUX.1 Fill [dev] inpainting graph (UNETLoader, DualCLIPLoader, VAELoader, "
                 "FluxGuidance 30, InpaintModelConditioning, DifferentialDiffusion, KSampler) with FillScope's Inspect "
                 "nodes on its links: the diffusion model's boundary at every step, the tokens and encodings, the "
                 "VAE's calls, the conditioning and latent shapes; nothing downstream changes.", nodes, groups,
                 notes.native(
                     "ComfyUI's own FLUX.1 Fill inpainting, inspected",
                     notes.NATIVE_INSPECT + " " + notes.NATIVE_REPORT + " Inspect Model sits between "
                     "DifferentialDiffusion and KSampler: its table "
                     "shows the 96 input channels FLUX Fill reads (16 noisy latent + 16 masked image + 64 packed mask, "
                     "what InpaintModelConditioning concatenates) at every step.",
                     FLUX_FILL_FILES.values(),
                     extra="KSampler runs at cfg 1 (FLUX.1 is guidance-distilled): the negative prompt is not used; "
                           "the guidance is FluxGuidance's 30.", gated=GATED))


def native_sd3_inspect() -> Graph:
    """ComfyUI's own SD3-medium + alimama inpainting ControlNet graph with FillScope's Inspect nodes on its links."""
    name = "native_sd3_inspect"
    f = SD3_FILES
    nodes = [
        Node(1, "CheckpointLoaderSimple", {"ckpt_name": f["transformer"][1]}, (0, 0), size=(320, 100),
             models=_native_models(f, "transformer")),
        Node(2, "TripleCLIPLoader", {"clip_name1": f["clip_l"][1], "clip_name2": f["clip_g"][1],
                                     "clip_name3": f["t5"][1]}, (0, 110), size=(320, 110),
             models=_native_models(f, "clip_l", "clip_g", "t5")),
        Node(3, "ControlNetLoader", {"control_net_name": f["controlnet"][1]}, (0, 230), size=(320, 60),
             models=_native_models(f, "controlnet")),
        Node(4, "FillScopeInspectModel", {"model": (1, 0), "modules": False}, (200, 0), size=(280, 80)),
        Node(5, "FillScopeInspectCLIP", {"clip": (2, 0)}, (200, 110), size=(260, 80)),
        Node(6, "FillScopeInspectVAE", {"vae": (1, 2)}, (200, 230), size=(260, 80)),
        Node(7, "CLIPTextEncode", {"text": PROMPT, "clip": (5, 0)}, (380, 0), title="CLIP Text Encode (positive)",
             size=(400, 160)),
        Node(8, "CLIPTextEncode", {"text": "blurry, low quality", "clip": (5, 0)}, (380, 130),
             title="CLIP Text Encode (negative)", size=(400, 160)),
        Node(9, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, (380, 280), size=(320, 360)),
        Node(10, "ControlNetInpaintingAliMamaApply",
             {"positive": (7, 0), "negative": (8, 0), "control_net": (3, 0), "vae": (6, 0), "image": (9, 0),
              "mask": (9, 1), "strength": 0.95, "start_percent": 0.0, "end_percent": 1.0}, (640, 280), size=(320, 200)),
        Node(11, "VAEEncode", {"pixels": (9, 0), "vae": (6, 0)}, (640, 420), size=(220, 60)),
        Node(12, "SetLatentNoiseMask", {"samples": (11, 0), "mask": (9, 1)}, (640, 470), size=(220, 60)),
        Node(13, "FillScopeInspect", {"value": (10, 0)}, (860, 0), title="Inspect (positive + control)",
             size=(300, 80)),
        Node(14, "FillScopeInspect", {"value": (12, 0)}, (860, 70), title="Inspect (latent)", size=(300, 80)),
        Node(15, "KSampler", {"model": (4, 0), "seed": 0, "steps": 28, "cfg": 7.0, "sampler_name": "euler",
                              "scheduler": "sgm_uniform", "positive": (13, 0), "negative": (10, 1),
                              "latent_image": (14, 0), "denoise": 1.0}, (1060, 0), size=(320, 300)),
        Node(16, "VAEDecode", {"samples": (15, 0), "vae": (6, 0)}, (1280, 0), size=(220, 60)),
        inspect_report(18, 16, name, (1280, 60)),
    ]
    groups = [("Load models", [1, 2, 3, 4, 5, 6]), ("Prompt", [7, 8]), ("Image and mask", [9, 10, 11, 12]),
              ("Sample", [13, 14, 15]), ("Output", [16, 18])]
    return Graph(name, "ComfyUI's own SD3-medium + alimama inpainting ControlNet graph (CheckpointLoaderSimple, "
                 "TripleCLIPLoader, ControlNetLoader, ControlNetInpaintingAliMamaApply, KSampler CFG 7) with "
                 "FillScope's Inspect nodes on its links: the MMDiT's boundary at every step (the CFG batch, the "
                 "ControlNet's residuals), the tokens and encodings, the VAE's calls; nothing downstream changes.",
                 nodes, groups,
                 notes.native(
                     "ComfyUI's own SD3-medium + inpainting ControlNet, inspected",
                     notes.NATIVE_INSPECT + " " + notes.NATIVE_REPORT + " At CFG 7 Inspect Model shows two halves "
                     "per step (cond and uncond in one "
                     "batch, or two calls when the prompts' lengths differ) and the ControlNet's residuals under "
                     "`control`.",
                     SD3_FILES.values(),
                     extra=SD3_CONTROLNET_NAME_NOTE, gated=GATED))


def native_flux_fill_mixed() -> Graph:
    """ComfyUI's loaders, LoRA and prompt feeding FillScope's FLUX Fill condition and sampler, the sampler's LATENT
    back into ComfyUI's VAEDecode."""
    name = "native_flux_fill_mixed"
    nodes = [
        *native_flux_loaders(),
        Node(4, "LoraLoaderModelOnly", {"model": (1, 0), "lora_name": NATIVE_LORA[1], "strength_model": 0.125},
             (0, 260), size=(320, 90), models=[{"name": NATIVE_LORA[1], "url": NATIVE_LORA[2],
                                                "directory": NATIVE_LORA[0]}]),
        Node(5, "CLIPTextEncode", {"text": PROMPT, "clip": (2, 0)}, (380, 0), size=(400, 160)),
        Node(6, "FillScopeFluxTextFromConditioning", {"conditioning": (5, 0)}, (640, 0), size=(320, 80)),
        Node(7, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, (380, 260), size=(320, 360)),
        Node(8, "FillScopeFluxFillCondition",
             {"vae": (3, 0), "image": (7, 0), "mask": (7, 1), "invert_mask": False, "threshold": 0.5, "grow": 0,
              "feather": 0, "size_mode": "pad"}, (640, 250), size=(320, 260)),
        Node(9, "FillScopeFluxFillSampler",
             {"model": (4, 0), "flux_text": (6, 0), "condition": (8, 0), "seed": 0, "steps": 8, "guidance": 30.0,
              "denoise": 1.0}, (860, 0), size=(320, 280)),
        Node(10, "VAEDecode", {"samples": (9, 2), "vae": (3, 0)}, (1080, 0), size=(220, 60)),
        report(12, 9, name, (1260, 0), images=(10, 0)),
    ]
    groups = [("Load models", [1, 2, 3, 4]), ("Prompt", [5, 6]), ("Image and mask", [7, 8]), ("Sample", [9]),
              ("Output", [10, 12])]
    return Graph(name, "ComfyUI's own loaders (UNETLoader flux1-fill-dev, a LoRA through LoraLoaderModelOnly, "
                 "DualCLIPLoader, VAELoader) and CLIPTextEncode feeding FillScope's FLUX Fill Inpaint Condition (ComfyUI's "
                 "VAE) and FLUX Fill Inpaint Sampler (ComfyUI's MODEL); the sampler's LATENT decoded by ComfyUI's VAEDecode; "
                 "FillScope's Shapes Report of the whole chain.", nodes, groups,
                 notes.native(
                     "ComfyUI's loaders and LoRA into FillScope's FLUX Fill nodes",
                     "ComfyUI's MODEL (with its LoRA applied by ComfyUI) is the FLUX Fill Inpaint Sampler's denoiser on its "
                     "`model` input; ComfyUI's VAE encodes the condition; CLIPTextEncode's CONDITIONING becomes "
                     "FillScope's FLUX text through **FLUX Text from CONDITIONING**; the sampler's last output is "
                     "ComfyUI's LATENT, decoded by ComfyUI's VAE Decode. FillScope's schedule, noise, guidance (30) "
                     "and condition stay; the Shapes Report tables every FillScope node's boundary.",
                     NATIVE_FLUX_FILES.values(),
                     extra="The LoRA is ByteDance's Hyper-SD 8-step LoRA for FLUX.1 [dev] at 0.125 (its recommended "
                           "strength), so the sampler runs 8 steps; it is made for FLUX.1 [dev], whose blocks FLUX.1 "
                           "Fill [dev] shares (its effect on Fill was not measured here). Any other FLUX.1 LoRA goes in "
                           "its place; without one, bypass the node and set `steps` back to 28.", gated=GATED))


SD3_CONTROLNET_NAME_NOTE = ("The ControlNet is published as `diffusion_pytorch_model.safetensors`: the Missing Models "
                            "dialog saves it under the workflow's name; by hand, save it in `models/controlnet/` as "
                            "`SD3-Controlnet-Inpainting.safetensors` (the name this workflow loads).")
NATIVE = ["native_flux_fill_inspect", "native_sd3_inspect", "native_flux_fill_mixed"]  # tests and thumbnails read it
GRAPHS += [native_flux_fill_inspect(), native_sd3_inspect(), native_flux_fill_mixed()]


# ---- large images by tiles (issue 23): the tiled nodes, all-in-one (components in, image out) ---------------------
# family -> (the tiled node, its loaders' parts in loader order, the image node's id, the tiled node's id); the ids
# follow the family's inpaint graph (flux_fill_graph: image 8, sampler 10; klein_graph: image 5, sampler 7)
TILED = {"flux-fill": ("FillScopeFluxFillTiledInpaint", ("clip_l", "t5", "transformer", "vae"), 8, 10),
         "klein": ("FillScopeKleinTiledInpaint", ("qwen3", "transformer", "vae"), 5, 7)}
TILE_SETTINGS = {"tile": 1024, "overlap": 0.15}
TILED_MASK_OPTIONS = {"invert_mask": False, "threshold": 0.5, "grow": 0, "feather": 0}
# 6144x4096: 7 x 5 = 35 tiles of 1024 px at overlap 0.15. The centred mask, 10 % of each side (614x410 px), meets 9
# of them grown by the overlap (planned: the tile map's 3 x 3 around it) and lies inside one (tile 17): a meta run
# samples that one tile, not 35. A centred mask that crosses into a second tile column also reaches a third row and
# column (the tile centres do not fall on the image's): 9 tiles sampled, about 9 x 5-7 s on meta.
SYNTHETIC_TILED = {"width": 6144, "height": 4096, "mask_fraction": 0.1}


def tiled_graph(name, description, family, *, sources, dtype, prompt, steps, mode, image_node, note, models=None,
                poisson=False, mask=True, images=True, options=None) -> Graph:
    """The family's loaders -> the image source (its IMAGE and, with `mask`, its MASK) -> the tiled node (prompt,
    tiles, sampling on its face) -> a Shapes Report of its record (the tile map on its page), saving its image with
    `images`."""
    models = models or {}
    node_type, parts, image_id, tiled_id = TILED[family]
    if family == "flux-fill":
        loaders = flux_fill_loaders(sources, dtype, models)
    else:
        loaders = [
            _loader(1, "FillScopeLoadQwen3", sources["qwen3"], dtype, (0, 0), variant="qwen3-4b",
                    models=models.get("qwen3", ())),
            _loader(2, "FillScopeLoadKleinTransformer", sources["transformer"], dtype, (0, 120), variant="klein-4b",
                    models=models.get("transformer", ())),
            _loader(3, "FillScopeLoadVAE", sources["vae"], dtype, (0, 260), kind="flux2", models=models.get("vae", ())),
        ]
    inputs = {part: (n.id, 0) for part, n in zip(parts, loaders)}
    inputs["image"] = (image_id, 0)
    if mask:
        inputs["mask"] = (image_id, 1)
    inputs.update(prompt=prompt, **TILE_SETTINGS, mode=mode, poisson=poisson, seed=0, steps=steps, **(options or {}),
                  **TILED_MASK_OPTIONS)
    tiled = Node(tiled_id, node_type, inputs, (760, 120), size=(360, 420))
    out = report(tiled_id + 2, tiled_id, name, (1140, 120), images=(tiled_id, 0) if images else None)
    nodes = [*loaders, image_node, tiled, out]
    groups = [("Load models", [n.id for n in loaders]), ("Image and mask", [image_id]), ("Sample", [tiled_id]),
              ("Output", [out.id])]
    return Graph(name, description, nodes, groups, note)


FLUX_TILED_OPTIONS = {"guidance": 30.0, "denoise": 1.0}
KLEIN_TILED_OPTIONS = {"guidance": 4.0, "strength": 1.0, "model_type": "auto", "negative_prompt": ""}
GRAPHS += [
    tiled_graph(
        "flux_fill_tiled_inpaint",
        "FLUX.1 Fill [dev] on a large photo by overlapping 1024 px tiles (overlap 0.15): only the tiles that meet the "
        "mask are sampled, each on its own (mode independent, 4096 tokens), their overlaps re-solved in the gradient "
        "domain (poisson); unmasked pixels exact. Published single files, bf16, guidance 30, 28 steps.",
        "flux-fill", sources=_FLUX_SOURCES, models=_FLUX_MODELS, dtype="bf16", prompt=PROMPT, steps=28,
        mode="independent", poisson=True, options=FLUX_TILED_OPTIONS, image_node=load_image(8, (380, 260)),
        note=notes.real_weights("FLUX.1 Fill [dev] tiled inpaint: a large photo in 1024 px tiles, 28 steps each",
                                FLUX_FILL_FILES.values(), extra=notes.TILED_FLUX_FILL, gated=GATED),
    ),
    tiled_graph(
        "klein_tiled_edit",
        "FLUX.2 [klein] 4B (distilled) restyles a whole large photo by prompt, no mask: overlapping 1024 px tiles, "
        "each next to its own source as reference tokens (8192 tokens), averaged every step (mode shared); a "
        "4096x3072 photo is 20 tiles. Published single files, bf16, 4 steps.",
        "klein", sources=_KLEIN_SOURCES, models=_KLEIN_MODELS, dtype="bf16",
        prompt="turn this photo into a loose watercolour painting", steps=4, mode="shared", mask=False,
        options=KLEIN_TILED_OPTIONS, image_node=load_image(5, (380, 260)),
        note=notes.real_weights("FLUX.2 [klein] 4B tiled edit: restyle a whole large photo by prompt",
                                KLEIN_4B_FILES.values(), extra=notes.TILED_KLEIN_EDIT, image=False, gated=GATED),
    ),
    tiled_graph(
        "flux_fill_tiled_inpaint_meta_trace",
        "FLUX.1 Fill tiled inpaint on meta weights: a 6144x4096 Synthetic Image + Mask in 35 tiles of 1024 px, the "
        "one that holds the mask sampled at 4096 tokens ([1, 4096, 384]), the image back at 6144x4096; the tile map "
        "on the Shapes Report's page; any CPU.",
        "flux-fill", sources=META_SOURCES, dtype="bf16", prompt=PROMPT, steps=1, mode="independent",
        options=FLUX_TILED_OPTIONS, images=False,
        image_node=Node(8, "FillScopeSyntheticImageMask", dict(SYNTHETIC_TILED), (380, 260), size=(320, 140)),
        note=notes.meta("FLUX.1 Fill tiled inpaint on meta weights: a 6144x4096 image, 1024 px tiles",
                        notes.tiled_meta("FLUX.1 Fill", "4096 tokens, transformer input [1, 4096, 384]"),
                        notes.TILED_META_BLANK),
    ),
    tiled_graph(
        "klein_tiled_inpaint_meta_trace",
        "FLUX.2 [klein] 4B tiled inpaint on meta weights: a 6144x4096 Synthetic Image + Mask in 35 tiles of 1024 px, "
        "the one that holds the mask sampled at 8192 tokens (4096 image + 4096 reference: [1, 8192, 128]), the image "
        "back at 6144x4096; the tile map on the Shapes Report's page; any CPU.",
        "klein", sources=META_SOURCES, dtype="bf16", prompt=PROMPT, steps=4, mode="independent",
        options=KLEIN_TILED_OPTIONS, images=False,
        image_node=Node(5, "FillScopeSyntheticImageMask", dict(SYNTHETIC_TILED), (380, 260), size=(320, 140)),
        note=notes.meta("FLUX.2 [klein] 4B tiled inpaint on meta weights: a 6144x4096 image, 1024 px tiles",
                        notes.tiled_meta("FLUX.2 [klein] 4B", "8192 tokens (4096 of the tile, 4096 of its source as "
                                         "the reference), transformer input [1, 8192, 128]"),
                        notes.TILED_META_BLANK),
    ),
]
TILED_TEMPLATES = ["flux_fill_tiled_inpaint", "klein_tiled_edit", "flux_fill_tiled_inpaint_meta_trace",
                   "klein_tiled_inpaint_meta_trace"]  # tests read it


def compare_graph(name, description, *, sources, models, dtype, prompt, steps, run_a, run_b, note) -> Graph:
    """FLUX Fill's loaders -> two FLUX Fill Compare Run nodes (run_a, run_b: how each run is made) -> the image ->
    Compare Runs (both runs, every boundary, the record in output/fillscope/) -> a preview of the heat map."""
    loaders = flux_fill_loaders(sources, dtype, models)
    parts = {"clip_l": (1, 0), "t5": (2, 0), "transformer": (3, 0), "vae": (4, 0)}
    runs = [Node(10 + k, "FillScopeFluxFillCompareRun",
                 {**parts, "guidance": 30.0, "implementation": "fillscope", "dtype": "as loaded",
                  "storage": "as loaded", **settings}, (400, 120 + 300 * k), size=(340, 260))
            for k, settings in enumerate((run_a, run_b))]
    image = load_image(8, (400, 720))
    compare = Node(20, "FillScopeCompare", {"run_a": (10, 0), "run_b": (11, 0), "image": (8, 0), "mask": (8, 1),
                                            "prompt": prompt, "seed": 0, "steps": steps,
                                            "filename_prefix": f"fillscope/{name}"}, (800, 120), size=(400, 420))
    heat = Node(21, "PreviewImage", {"images": (20, 2)}, (1240, 120), size=(400, 470))
    groups = [("Load models", [n.id for n in loaders]), ("Sample", [10, 11]), ("Image and mask", [8]),
              ("Output", [20, 21])]
    return Graph(name, description, [*loaders, *runs, image, compare, heat], groups, note)


GRAPHS += [
    compare_graph(
        "flux_fill_compare_fp8",
        "FLUX.1 Fill [dev] run twice on one image, bf16 weights against the same weights stored in fp8 (e4m3fn, upcast "
        "a layer at a time): every boundary both runs pass compared (relative error, cosine), the first that differs "
        "named, PSNR and SSIM inside and outside the mask, the difference heat map. Published single files, 28 steps.",
        sources=_FLUX_SOURCES, models=_FLUX_MODELS, dtype="bf16", prompt=PROMPT, steps=28,
        run_a={}, run_b={"storage": "fp8_e4m3fn"},
        note=notes.real_weights("FLUX.1 Fill [dev]: what fp8 storage changes, boundary by boundary",
                                FLUX_FILL_FILES.values(), extra=notes.COMPARE_FP8, gated=GATED),
    ),
]
COMPARE_TEMPLATES = ["flux_fill_compare_fp8"]  # tests read it


def is_link(value) -> bool:
    return isinstance(value, tuple) and len(value) == 2


def to_api(graph: Graph, object_info: dict | None = None) -> dict:
    """The API format. With /object_info, a value for an input the node no longer has is left out (and said): the
    files follow the node schemas they are generated from."""
    out = {}
    for n in graph.nodes:
        inputs = {}
        info = (object_info or {}).get(n.type)
        declared = {**info["input"].get("required", {}), **info["input"].get("optional", {})} if info else None
        for k, v in n.inputs.items():
            if k == "upload":
                continue
            if declared is not None and k not in declared:
                print(f"{graph.name}: node {n.id} ({n.type}) has no input {k!r}: left out")
                continue
            inputs[k] = [str(v[0]), v[1]] if is_link(v) else v
        out[str(n.id)] = {"class_type": n.type, "inputs": inputs, "_meta": {"title": n.title or n.type}}
    return out


def widget_names(info: dict) -> list[tuple[str, dict]]:
    """Widget inputs of a node type in canvas order, with their options (from /object_info)."""
    order = info.get("input_order", {})
    spec = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
    names = list(order.get("required", [])) + list(order.get("optional", []))
    out = []
    for name in names:
        kind = spec[name][0]
        opts = spec[name][1] if len(spec[name]) > 1 else {}
        if isinstance(kind, list) or kind in ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO") or kind == "IMAGEUPLOAD":
            if opts.get("forceInput"):
                continue
            out.append((name, opts))
    return out


WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", "IMAGEUPLOAD")
SLOT_H, WIDGET_H, TITLE_H = 20, 24, 30  # LiteGraph's row heights and node title bar (frontend 1.32)
# What a FillScope node adds to its face after a run (web/fillscope.js): the shapes summary, at most three 16 px
# lines with 5 px padding above and below, plus the widget gap; a trace node also gets its report button. The
# layout reserves it up front, so a node that ran keeps its saved size and stays inside its group.
SUMMARY_H = 3 * 16 + 2 * 5 + 4
BUTTON_H = WIDGET_H
# The grid (canvas units): the space between stacked nodes (title bar to the node above) and between node columns
# in a group, a group's padding and title band (LiteGraph draws a 24 px title 1.4 x its font size high), and the
# space between groups. ComfyUI's fit view zooms to 0.75 x the viewport over everything's bounds, so the whole
# graph at 1600x1000 must stay within about 3000 x 1870 units to show at 40 %.
NODE_GAP, NODE_COLUMN_GAP, GROUP_PAD, GROUP_HEAD, GROUP_GAP, COLUMN_GAP = 20, 30, 10, 44, 30, 40
# Groups into columns, left to right (each column's groups top to bottom): loaders, then what the user edits
# (prompt, image), then the model run and what it writes.
COLUMNS = (("Load models",), ("Prompt", "Image and mask", "Trace"), ("Sample", "Output"))
def own_column(n: Node) -> bool:
    """A node that shows the image it saves (Save Image, a Shapes Report with `images`) is tall: it stands in its own
    node column on the group's right."""
    return n.type == "SaveImage" or (n.type == "FillScopeShapesReport" and "images" in n.inputs)
NOTE_SIZE = (460, 700)


def min_height(info: dict) -> int:
    """The height a node needs to show its sockets and its widgets but the advanced ones (web/fillscope.js hides those
    until the node menu's Show Advanced, which grows the node to hold them); a forced input is a socket."""
    spec = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
    widgets = widget_names(info)
    sockets = len(spec) - len(widgets)
    rows = 0
    for name, opts in widgets:
        if opts.get("advanced"):
            continue
        rows += 3 if opts.get("multiline") else 2 if opts.get("control_after_generate") else 1
    return max(sockets, len(info["output"]), 1) * SLOT_H + rows * WIDGET_H + 16


def node_height(n: Node, info: dict) -> int:
    """A node's height: its content, plus the run's summary (and trace button) on a FillScope node; the size the
    graph gives is kept where content cannot say what it shows (an image, a prompt box)."""
    h = min_height(info)
    fillscope = n.type.startswith("FillScope")
    if fillscope:
        h += SUMMARY_H + (BUTTON_H if n.type.endswith("Trace") else 0)
    if not fillscope or own_column(n) or any(opts.get("multiline") for _, opts in widget_names(info)):
        h = max(h, n.size[1])
    return h


def arrangement(graph: Graph) -> list[list[tuple[str, list[list[int]]]]]:
    """[column: [(group title, [node column: [node ids top to bottom]])]]: COLUMNS' order; in a group one node column
    in the graph's order (its graph units: x, then y), a node showing its image in a column of its own on the right, or the
    node columns the graph gives (Graph.node_columns)."""
    nodes = {n.id: n for n in graph.nodes}
    grouped = [k for _, ids in graph.groups for k in ids]
    loose = [k for k in nodes if k not in grouped]
    if loose or len(grouped) != len(set(grouped)):
        raise ValueError(f"{graph.name}: every node belongs to one group (outside: {loose})")
    placed = {t for col in COLUMNS for t in col}
    unknown = [t for t, _ in graph.groups if t not in placed]
    if unknown:
        raise ValueError(f"{graph.name}: groups {unknown} have no place in COLUMNS")
    columns = []
    for titles in COLUMNS:
        column = []
        for title in titles:
            ids = dict(graph.groups).get(title)
            if ids is None:
                continue
            node_cols = graph.node_columns.get(title)
            if node_cols is None:
                order = sorted(ids, key=lambda k: (nodes[k].pos[0], nodes[k].pos[1]))
                main = [k for k in order if not own_column(nodes[k])]
                node_cols = [c for c in (main, [k for k in order if own_column(nodes[k])]) if c]
            column.append((title, node_cols))
        if column:
            columns.append(column)
    return columns


def layout(graph: Graph, object_info: dict) -> tuple[dict, dict]:
    """({node id: [x, y, w, h]}, {group title: [x, y, w, h]}) on the canvas: a grid of columns of groups, each group
    as tight as its node columns allow, each node as tall as node_height."""
    nodes = {n.id: n for n in graph.nodes}
    boxes, groups = {}, {}
    x0 = 0
    for column in arrangement(graph):
        y0, width = 0, 0
        for title, node_cols in column:
            x, bottom = x0 + GROUP_PAD, y0 + GROUP_HEAD
            for ids in node_cols:
                y = y0 + GROUP_HEAD
                w = max(nodes[k].size[0] for k in ids)
                for k in ids:
                    h = node_height(nodes[k], object_info[nodes[k].type])
                    boxes[k] = [x, y + TITLE_H, nodes[k].size[0], h]
                    y += TITLE_H + h + NODE_GAP
                bottom = max(bottom, y - NODE_GAP)
                x += w + NODE_COLUMN_GAP
            groups[title] = [x0, y0, x - NODE_COLUMN_GAP + GROUP_PAD - x0, bottom + GROUP_PAD - y0]
            width = max(width, groups[title][2])
            y0 += groups[title][3] + GROUP_GAP
        x0 += width + COLUMN_GAP
    return boxes, groups


def group_boxes(graph: Graph, rects: dict) -> list[dict]:
    """The groups as LiteGraph saves them, in the graph's order."""
    return [{"id": i, "title": title, "bounding": rects[title], "color": GROUP_COLORS[title], "font_size": 24,
             "flags": {}} for i, (title, _) in enumerate(graph.groups, 1)]


def to_ui(graph: Graph, object_info: dict) -> dict:
    note = note_node(graph.note, max(n.id for n in graph.nodes) + 1) if graph.note else None
    boxes, rects = layout(graph, object_info)
    links, link_id = [], 0
    node_inputs, node_outputs = {}, {}
    for n in graph.nodes:
        info = object_info[n.type]
        node_outputs[n.id] = [
            {"name": name, "type": typ, "links": [], "slot_index": i}
            for i, (name, typ) in enumerate(zip(info["output_name"], info["output"]))
        ]
        node_inputs[n.id] = []
    for n in graph.nodes:
        info = object_info[n.type]
        spec = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
        for name, v in n.inputs.items():
            if not is_link(v):
                continue
            link_id += 1
            typ = spec[name][0]
            src, slot = v
            # a link carries its output's type (an input may take several: "FS_VAE,VAE"), as the canvas saves it
            out_type = object_info[next(m.type for m in graph.nodes if m.id == src)]["output"][slot]
            links.append([link_id, src, slot, n.id, len(node_inputs[n.id]), out_type])
            node_inputs[n.id].append({"name": name, "type": typ, "link": link_id})
            node_outputs[src][slot]["links"].append(link_id)
    nodes = [note] if note else []
    for n in graph.nodes:
        info = object_info[n.type]
        values = []
        for name, opts in widget_names(info):
            if name in n.inputs and not is_link(n.inputs[name]):
                values.append(n.inputs[name])
            elif name in n.inputs:
                continue
            else:
                values.append(opts.get("default"))
            if opts.get("control_after_generate"):
                values.append("fixed")
        if "upload" in n.inputs:  # LoadImage's upload button: a widget of the canvas only, saved after the file name
            values.append(n.inputs["upload"])
        nodes.append({
            "id": n.id,
            "type": n.type,
            "pos": boxes[n.id][:2],
            "size": boxes[n.id][2:],
            "flags": {},
            "order": len(nodes),
            "mode": 0,
            "inputs": node_inputs[n.id],
            "outputs": node_outputs[n.id],
            "properties": {"Node name for S&R": n.type, **({"models": n.models} if n.models else {})},
            "widgets_values": values,
            **({"title": n.title} if n.title else {}),
        })
    # every file once at the top as well: the canvas (frontend 1.32) offers a node's properties.models only when a
    # widget value equals the file name, and a FillScope source is "<folder>/<file>"; the workflow's own list is
    # always checked against the model folders (missing files -> the download dialog)
    files = list({m["url"]: m for n in graph.nodes for m in n.models}.values())
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, "fillscope/" + graph.name)),
        "revision": 0,
        "last_node_id": max(n["id"] for n in nodes),
        "last_link_id": link_id,
        "nodes": nodes,
        "links": links,
        "groups": group_boxes(graph, rects),
        "config": {},
        "extra": {"fillscope": {"description": graph.description}},
        "version": 0.4,
        **({"models": files} if files else {}),
    }


def note_node(text: str, node_id: int, size=NOTE_SIZE) -> dict:
    """The read-me: ComfyUI's MarkdownNote (a frontend node; links clickable), left of the loaders, its title bar
    level with the groups' tops."""
    return {"id": node_id, "type": "MarkdownNote", "pos": [-size[0] - COLUMN_GAP, TITLE_H], "size": list(size),
            "flags": {}, "order": 0, "mode": 0, "inputs": [], "outputs": [], "title": "Read me", "properties": {},
            "widgets_values": [text], "color": "#432", "bgcolor": "#653"}


def load_object_info(where: str) -> dict:
    if where.startswith("http"):
        with urllib.request.urlopen(where.rstrip("/") + "/object_info", timeout=60) as r:
            return json.loads(r.read())
    return json.loads(Path(where).read_text())


def render(graph: Graph, object_info: dict) -> tuple[str, str]:
    """(api json text, ui json text) of a graph, as committed."""
    return (json.dumps(to_api(graph, object_info), indent=2) + "\n", json.dumps(to_ui(graph, object_info), indent=2) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--object-info", required=True, help="http://127.0.0.1:8188 or a saved /object_info JSON file")
    ap.add_argument("--api-out", default=str(HERE), help="where the API files go (default: this folder)")
    ap.add_argument("--ui-out", default=str(EXAMPLES), help="where the UI files go (default: example_workflows/)")
    args = ap.parse_args(argv)
    info = load_object_info(args.object_info)
    api_out, ui_out = Path(args.api_out), Path(args.ui_out)
    ui_out.mkdir(exist_ok=True)
    for g in GRAPHS:
        api, ui = render(g, info)
        (api_out / f"{g.name}.api.json").write_text(api)
        (ui_out / f"{g.name}.json").write_text(ui)
        print(f"wrote {api_out.name}/{g.name}.api.json and {ui_out.name}/{g.name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
