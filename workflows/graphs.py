"""The shipped workflows, defined once; `python workflows/graphs.py --object-info URL|FILE` writes each as an
API-format file (headless: POST /prompt, `comfy run`) and a UI-format file (canvas), so the two stay the
same graph. The UI format needs each node's widget order, which it reads from ComfyUI's /object_info.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
EXAMPLES = HERE.parent / "example_workflows"  # what ComfyUI's template browser lists
SPREAD = (1.75, 1.6)  # canvas units per graph unit (x, y)


@dataclass
class Node:
    id: int
    type: str
    inputs: dict  # widget values, or (node_id, output_slot) links
    pos: tuple = (0, 0)
    title: str | None = None
    size: tuple = (320, 160)
    models: list = field(default_factory=list)  # files the canvas offers to download (properties.models)


@dataclass
class Graph:
    name: str
    description: str
    nodes: list = field(default_factory=list)


def _loader(node_id, type_, source, dtype, pos, device="auto", models=(), **extra):
    return Node(node_id, type_, {"source": source, **extra, "dtype": dtype, "device": device, "placeholder_seed": 0}, pos,
                models=list(models))


def flux_fill_graph(name, description, *, source, dtype, prompt, steps, image_nodes, output_nodes) -> Graph:
    """Loaders -> text -> condition -> sampler -> decode, with the image source and outputs supplied."""
    nodes = [
        _loader(1, "FillScopeLoadCLIPL", source, dtype, (0, 0)),
        _loader(2, "FillScopeLoadT5", source, dtype, (0, 200)),
        _loader(3, "FillScopeLoadFluxFillTransformer", source, dtype, (0, 400)),
        _loader(4, "FillScopeLoadVAE", source, dtype, (0, 600), kind="flux"),
        Node(5, "FillScopeCLIPLEncode", {"clip_l": (1, 0), "text": prompt}, (380, 0)),
        Node(6, "FillScopeT5Encode", {"t5": (2, 0), "text": prompt, "max_length": 512}, (380, 220)),
        Node(7, "FillScopeFluxTextCondition", {"t5_embeds": (6, 0), "clip_embeds": (5, 0)}, (760, 100)),
        *image_nodes,
        Node(
            9,
            "FillScopeFluxFillCondition",
            {"vae": (4, 0), "image": (8, 0), "mask": (8, 1), "invert_mask": False, "threshold": 0.5, "grow": 0,
             "feather": 0, "size_mode": "pad"},
            (760, 450),
        ),
        Node(
            10,
            "FillScopeFluxFillSampler",
            {"transformer": (3, 0), "flux_text": (7, 0), "condition": (9, 0), "seed": 0, "steps": steps,
             "guidance": 30.0, "denoise": 1.0},
            (1140, 200),
        ),
        Node(11, "FillScopeVAEDecode", {"vae": (4, 0), "latent": (10, 0)}, (1520, 200)),
        *output_nodes,
    ]
    return Graph(name, description, nodes)


def sd3_controlnet_graph(name, description, *, source, controlnet_source, dtype, prompt, negative, steps,
                        image_nodes, output_nodes) -> Graph:
    """Loaders -> CLIP-L/CLIP-G/T5 for the prompt and the negative -> 17-channel condition -> CFG sampler with the
    inpainting ControlNet -> decode, with the image source and outputs supplied."""
    nodes = [
        _loader(1, "FillScopeLoadCLIPL", source, dtype, (0, 0)),
        _loader(2, "FillScopeLoadCLIPG", source, dtype, (0, 200)),
        _loader(3, "FillScopeLoadT5", source, dtype, (0, 400)),
        _loader(4, "FillScopeLoadSD3Transformer", source, dtype, (0, 600), variant="sd3-medium"),
        _loader(5, "FillScopeLoadSD3InpaintControlNet", controlnet_source, dtype, (0, 820)),
        _loader(6, "FillScopeLoadVAE", source, dtype, (0, 1020), kind="sd3"),
        Node(7, "FillScopeCLIPLEncode", {"clip_l": (1, 0), "text": prompt}, (380, 0)),
        Node(8, "FillScopeCLIPGEncode", {"clip_g": (2, 0), "text": prompt}, (380, 180)),
        Node(9, "FillScopeT5Encode", {"t5": (3, 0), "text": prompt, "max_length": 256}, (380, 360)),
        Node(10, "FillScopeSD3TextCondition", {"clip_l_embeds": (7, 0), "clip_g_embeds": (8, 0), "t5_embeds": (9, 0)}, (760, 100)),
        Node(11, "FillScopeCLIPLEncode", {"clip_l": (1, 0), "text": negative}, (380, 560), title="CLIP-L Encode (negative)"),
        Node(12, "FillScopeCLIPGEncode", {"clip_g": (2, 0), "text": negative}, (380, 740), title="CLIP-G Encode (negative)"),
        Node(13, "FillScopeT5Encode", {"t5": (3, 0), "text": negative, "max_length": 256}, (380, 920), title="T5-XXL Encode (negative)"),
        Node(14, "FillScopeSD3TextCondition", {"clip_l_embeds": (11, 0), "clip_g_embeds": (12, 0), "t5_embeds": (13, 0)}, (760, 600), title="SD3 Text Condition (negative)"),
        *image_nodes,
        Node(
            16,
            "FillScopeSD3InpaintCondition",
            {"vae": (6, 0), "image": (15, 0), "mask": (15, 1), "invert_mask": False, "threshold": 0.5, "grow": 0,
             "feather": 0, "size_mode": "pad"},
            (760, 900),
        ),
        Node(
            17,
            "FillScopeSD3ControlNetInpaintSampler",
            {"transformer": (4, 0), "controlnet": (5, 0), "positive": (10, 0), "negative": (14, 0), "condition": (16, 0),
             "seed": 0, "steps": steps, "cfg": 7.0, "control_scale": 0.95, "control_start": 0.0, "control_end": 1.0,
             "shift": 3.0, "denoise": 1.0, "residual_mapping": "one_to_one"},
            (1140, 300), size=(340, 420),
        ),
        Node(18, "FillScopeVAEDecode", {"vae": (6, 0), "latent": (17, 0)}, (1540, 300)),
        *output_nodes,
    ]
    return Graph(name, description, nodes)


GRAPHS = [
    flux_fill_graph(
        "flux_fill_meta_trace",
        "FLUX.1 Fill, full production topology on meta weights, 1 step: every boundary shape, any size, on any CPU.",
        source="meta",
        dtype="bf16",
        prompt="a red brick fireplace",
        steps=1,
        image_nodes=[Node(8, "FillScopeSyntheticImageMask", {"width": 1024, "height": 1024, "mask_fraction": 0.5}, (380, 500))],
        output_nodes=[Node(12, "FillScopeShapesReport", {"shapes": (11, 1), "filename_prefix": "fillscope/flux_fill_meta_trace"}, (1900, 200))],
    ),
    flux_fill_graph(
        "flux_fill_inpaint",
        "FLUX.1 Fill [dev] inpainting with real weights (models/diffusers/FLUX.1-Fill-dev), bf16, 1024x1024, "
        "guidance 30, 28 steps; paste-back keeps unmasked pixels exact. Load an RGBA image whose transparent "
        "area is the hole, or paint a mask in the mask editor.",
        source="FLUX.1-Fill-dev",
        dtype="bf16",
        prompt="a red brick fireplace",
        steps=28,
        image_nodes=[Node(8, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, (380, 500), size=(320, 320))],
        output_nodes=[
            Node(12, "FillScopePasteBack", {"generated": (11, 0), "latent": (10, 0)}, (1900, 100)),
            Node(13, "SaveImage", {"images": (12, 0), "filename_prefix": "fillscope/flux_fill_inpaint"}, (2280, 100), size=(400, 400)),
            Node(14, "FillScopeShapesReport", {"shapes": (12, 1), "filename_prefix": "fillscope/flux_fill_inpaint"}, (1900, 400)),
        ],
    ),
    sd3_controlnet_graph(
        "sd3_controlnet_meta_trace",
        "SD3-medium + alimama inpainting ControlNet, full production topology on meta weights, 1 step with CFG: "
        "every boundary shape, any size, on any CPU.",
        source="meta",
        controlnet_source="meta",
        dtype="bf16",
        prompt="a red brick fireplace",
        negative="",
        steps=1,
        image_nodes=[Node(15, "FillScopeSyntheticImageMask", {"width": 1024, "height": 1024, "mask_fraction": 0.5}, (380, 1120))],
        output_nodes=[Node(19, "FillScopeShapesReport", {"shapes": (18, 1), "filename_prefix": "fillscope/sd3_controlnet_meta_trace"}, (1900, 300))],
    ),
    sd3_controlnet_graph(
        "sd3_controlnet_inpaint",
        "SD3-medium + alimama-creative SD3 inpainting ControlNet with real weights (models/diffusers/"
        "stable-diffusion-3-medium-diffusers and models/diffusers/SD3-Controlnet-Inpainting), bf16, 1024x1024, "
        "28 steps, CFG 7, control scale 0.95, 1:1 residual mapping; paste-back keeps unmasked pixels exact.",
        source="stable-diffusion-3-medium-diffusers",
        controlnet_source="SD3-Controlnet-Inpainting",
        dtype="bf16",
        prompt="a red brick fireplace",
        negative="blurry, low quality",
        steps=28,
        image_nodes=[Node(15, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, (380, 1120), size=(320, 320))],
        output_nodes=[
            Node(19, "FillScopePasteBack", {"generated": (18, 0), "latent": (17, 0)}, (1900, 100)),
            Node(20, "SaveImage", {"images": (19, 0), "filename_prefix": "fillscope/sd3_controlnet_inpaint"}, (2280, 100), size=(400, 400)),
            Node(21, "FillScopeShapesReport", {"shapes": (19, 1), "filename_prefix": "fillscope/sd3_controlnet_inpaint"}, (1900, 400)),
        ],
    ),
]


# FLUX.2 [klein] 4B distilled as published: (loader, its source entry, the file the canvas offers to download). The
# entries are ComfyUI's single-file folders; each model dict is ComfyUI's template format (name, url, directory).
KLEIN_4B_FILES = {
    "qwen3": ("text_encoders", "qwen_3_4b.safetensors",
              "https://huggingface.co/Comfy-Org/z_image_turbo/resolve/main/split_files/text_encoders/qwen_3_4b.safetensors"),
    "transformer": ("diffusion_models", "flux-2-klein-4b.safetensors",
                    "https://huggingface.co/black-forest-labs/FLUX.2-klein-4B/resolve/main/flux-2-klein-4b.safetensors"),
    "vae": ("vae", "flux2-vae.safetensors",
            "https://huggingface.co/Comfy-Org/flux2-dev/resolve/main/split_files/vae/flux2-vae.safetensors"),
}


def klein_files(files=KLEIN_4B_FILES) -> tuple[dict, dict]:
    """({part: source entry}, {part: [model dict]}) of published single files."""
    sources = {part: f"{folder}/{name}" for part, (folder, name, _) in files.items()}
    models = {part: [{"name": name, "url": url, "directory": folder}] for part, (folder, name, url) in files.items()}
    return sources, models


def klein_graph(name, description, *, sources, dtype, prompt, steps, image_nodes, condition, output_nodes,
                models=None) -> Graph:
    """Qwen3 + klein transformer + FLUX.2 VAE loaders -> Qwen3 encode -> inpaint or edit condition (node 6) ->
    sampler -> decode, with the image source, condition and outputs supplied."""
    models = models or {}
    nodes = [
        _loader(1, "FillScopeLoadQwen3", sources["qwen3"], dtype, (0, 0), variant="qwen3-4b", models=models.get("qwen3", ())),
        _loader(2, "FillScopeLoadKleinTransformer", sources["transformer"], dtype, (0, 220), variant="klein-4b",
                model_type="auto", models=models.get("transformer", ())),
        _loader(3, "FillScopeLoadVAE", sources["vae"], dtype, (0, 460), kind="flux2", models=models.get("vae", ())),
        Node(4, "FillScopeQwen3Encode", {"qwen3": (1, 0), "text": prompt}, (380, 0)),
        *image_nodes,
        condition,
        Node(7, "FillScopeKleinSampler",
             {"transformer": (2, 0), "positive": (4, 0), "condition": (6, 0), "seed": 0, "steps": steps,
              "guidance": 4.0, "strength": 1.0, "model_type": "auto"},
             (1140, 200), size=(340, 300)),
        Node(8, "FillScopeVAEDecode", {"vae": (3, 0), "latent": (7, 0)}, (1520, 200)),
        *output_nodes,
    ]
    return Graph(name, description, nodes)


def klein_inpaint_condition(image_node: int = 5) -> Node:
    return Node(6, "FillScopeKleinInpaintCondition",
                {"vae": (3, 0), "image": (image_node, 0), "mask": (image_node, 1), "invert_mask": False,
                 "threshold": 0.5, "grow": 0, "feather": 0, "size_mode": "pad", "token_mask": "cover"},
                (760, 400), size=(320, 300))


_KLEIN_SOURCES, _KLEIN_MODELS = klein_files()
GRAPHS += [
    klein_graph(
        "klein_inpaint",
        "FLUX.2 [klein] 4B (distilled) inpainting with the published single files (models/diffusion_models/"
        "flux-2-klein-4b.safetensors, models/text_encoders/qwen_3_4b.safetensors, models/vae/flux2-vae.safetensors), "
        "bf16, 1024x1024, 4 steps, no guidance; paste-back keeps unmasked pixels exact. Load an RGBA image whose "
        "transparent area is the hole, or paint a mask in the mask editor.",
        sources=_KLEIN_SOURCES, models=_KLEIN_MODELS, dtype="bf16", prompt="a red brick fireplace", steps=4,
        image_nodes=[Node(5, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, (380, 400), size=(320, 320))],
        condition=klein_inpaint_condition(),
        output_nodes=[
            Node(9, "FillScopePasteBack", {"generated": (8, 0), "latent": (7, 0)}, (1900, 100)),
            Node(10, "SaveImage", {"images": (9, 0), "filename_prefix": "fillscope/klein_inpaint"}, (2280, 100), size=(400, 400)),
            Node(11, "FillScopeShapesReport", {"shapes": (9, 1), "filename_prefix": "fillscope/klein_inpaint"}, (1900, 400)),
        ],
    ),
    klein_graph(
        "klein_edit",
        "FLUX.2 [klein] 4B (distilled) reference-image editing, no mask (restyle by prompt, change, combine up to three "
        "images): the published single files, bf16, the image's own size, 4 steps.",
        sources=_KLEIN_SOURCES, models=_KLEIN_MODELS, dtype="bf16",
        prompt="turn this room into a loose watercolour painting", steps=4,
        image_nodes=[Node(5, "LoadImage", {"image": "fillscope_example.png", "upload": "image"}, (380, 400), size=(320, 320))],
        condition=Node(6, "FillScopeKleinEditCondition", {"vae": (3, 0), "image": (5, 0), "width": 0, "height": 0}, (760, 400)),
        output_nodes=[
            Node(9, "SaveImage", {"images": (8, 0), "filename_prefix": "fillscope/klein_edit"}, (1900, 100), size=(400, 400)),
            Node(10, "FillScopeShapesReport", {"shapes": (8, 1), "filename_prefix": "fillscope/klein_edit"}, (1900, 520)),
        ],
    ),
    klein_graph(
        "klein_inpaint_meta_trace",
        "FLUX.2 [klein] 4B inpainting, full production topology on meta weights, 4 steps: every boundary shape, any "
        "size, on any CPU.",
        sources={"qwen3": "meta", "transformer": "meta", "vae": "meta"}, dtype="bf16", prompt="a red brick fireplace",
        steps=4,
        image_nodes=[Node(5, "FillScopeSyntheticImageMask", {"width": 1024, "height": 1024, "mask_fraction": 0.5}, (380, 400))],
        condition=klein_inpaint_condition(),
        output_nodes=[Node(9, "FillScopeShapesReport", {"shapes": (8, 1), "filename_prefix": "fillscope/klein_inpaint_meta_trace"}, (1900, 200))],
    ),
]


def trace_graph(name, description, model) -> Graph:
    """Meta loaders -> the trace node, which runs one denoiser step under the tracers and writes the report."""
    if model == "flux-fill":
        loaders = [
            _loader(1, "FillScopeLoadCLIPL", "meta", "bf16", (0, 0)),
            _loader(2, "FillScopeLoadT5", "meta", "bf16", (0, 200)),
            _loader(3, "FillScopeLoadFluxFillTransformer", "meta", "bf16", (0, 400)),
            _loader(4, "FillScopeLoadVAE", "meta", "bf16", (0, 600), kind="flux"),
        ]
        trace = Node(5, "FillScopeFluxFillTrace", {"clip_l": (1, 0), "t5": (2, 0), "transformer": (3, 0), "vae": (4, 0)}, (400, 200))
    elif model == "klein-4b":
        loaders = [
            _loader(1, "FillScopeLoadQwen3", "meta", "bf16", (0, 0), variant="qwen3-4b"),
            _loader(2, "FillScopeLoadKleinTransformer", "meta", "bf16", (0, 220), variant="klein-4b", model_type="auto"),
            _loader(3, "FillScopeLoadVAE", "meta", "bf16", (0, 460), kind="flux2"),
        ]
        trace = Node(4, "FillScopeKleinTrace", {"qwen3": (1, 0), "transformer": (2, 0), "vae": (3, 0)}, (400, 200))
    else:
        loaders = [
            _loader(1, "FillScopeLoadCLIPL", "meta", "bf16", (0, 0)),
            _loader(2, "FillScopeLoadCLIPG", "meta", "bf16", (0, 200)),
            _loader(3, "FillScopeLoadT5", "meta", "bf16", (0, 400)),
            _loader(4, "FillScopeLoadSD3Transformer", "meta", "bf16", (0, 600), variant="sd3-medium"),
            _loader(5, "FillScopeLoadSD3InpaintControlNet", "meta", "bf16", (0, 820)),
            _loader(6, "FillScopeLoadVAE", "meta", "bf16", (0, 1020), kind="sd3"),
        ]
        trace = Node(7, "FillScopeSD3ControlNetTrace", {"clip_l": (1, 0), "clip_g": (2, 0), "t5": (3, 0), "transformer": (4, 0),
                                                        "controlnet": (5, 0), "vae": (6, 0)}, (400, 300))
    trace.inputs.update(width=1024, height=1024, prompt="a red brick fireplace", line_trace=True,
                        filename_prefix=f"fillscope/{name}")
    trace.size = (360, 320)
    return Graph(name, description, [*loaders, trace])


GRAPHS += [
    trace_graph("flux_fill_trace", "FLUX.1 Fill on meta weights: one denoiser step under the module and line tracers; "
                "writes the five-page architecture report (HTML + JSON) to output/fillscope/.", "flux-fill"),
    trace_graph("sd3_controlnet_trace", "SD3-medium + inpainting ControlNet on meta weights: one CFG denoiser step under "
                "the tracers; writes the five-page architecture report to output/fillscope/.", "sd3-controlnet-inpaint"),
    trace_graph("klein_trace", "FLUX.2 [klein] 4B on meta weights: one inpaint denoiser step (noisy + reference tokens) "
                "under the tracers; writes the five-page architecture report to output/fillscope/.", "klein-4b"),
]


def is_link(value) -> bool:
    return isinstance(value, tuple) and len(value) == 2


def to_api(graph: Graph) -> dict:
    out = {}
    for n in graph.nodes:
        inputs = {}
        for k, v in n.inputs.items():
            if k == "upload":
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


def to_ui(graph: Graph, object_info: dict) -> dict:
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
            links.append([link_id, src, slot, n.id, len(node_inputs[n.id]), typ])
            node_inputs[n.id].append({"name": name, "type": typ, "link": link_id})
            node_outputs[src][slot]["links"].append(link_id)
    nodes = []
    for order, n in enumerate(graph.nodes):
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
        nodes.append(
            {
                "id": n.id,
                "type": n.type,
                # graph coordinates are a grid; spread them so the shape tables shown after a run have room
                "pos": [round(n.pos[0] * SPREAD[0]), round(n.pos[1] * SPREAD[1])],
                "size": list(n.size),
                "flags": {},
                "order": order,
                "mode": 0,
                "inputs": node_inputs[n.id],
                "outputs": node_outputs[n.id],
                "properties": {"Node name for S&R": n.type, **({"models": n.models} if n.models else {})},
                "widgets_values": values,
                **({"title": n.title} if n.title else {}),
            }
        )
    # every file once at the top as well: the canvas (frontend 1.32) offers a node's properties.models only when a
    # widget value equals the file name, and a FillScope source is "<folder>/<file>"; the workflow's own list is
    # always checked against the model folders (missing files -> the download dialog)
    files = list({m["url"]: m for n in graph.nodes for m in n.models}.values())
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, "fillscope/" + graph.name)),
        "revision": 0,
        "last_node_id": max(n.id for n in graph.nodes),
        "last_link_id": link_id,
        "nodes": nodes,
        "links": links,
        "groups": [],
        "config": {},
        "extra": {"fillscope": {"description": graph.description}},
        "version": 0.4,
        **({"models": files} if files else {}),
    }


def load_object_info(where: str) -> dict:
    if where.startswith("http"):
        with urllib.request.urlopen(where.rstrip("/") + "/object_info", timeout=60) as r:
            return json.loads(r.read())
    return json.loads(Path(where).read_text())


def render(graph: Graph, object_info: dict) -> tuple[str, str]:
    """(api json text, ui json text) of a graph, as committed."""
    return (json.dumps(to_api(graph), indent=2) + "\n", json.dumps(to_ui(graph, object_info), indent=2) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--object-info", required=True, help="http://127.0.0.1:8188 or a saved /object_info JSON file")
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args(argv)
    info = load_object_info(args.object_info)
    out = Path(args.out)
    EXAMPLES.mkdir(exist_ok=True)
    for g in GRAPHS:
        api, ui = render(g, info)
        (out / f"{g.name}.api.json").write_text(api)
        (out / f"{g.name}.json").write_text(ui)
        (EXAMPLES / f"{g.name}.json").write_text(ui)
        print(f"wrote {g.name}.api.json, {g.name}.json and example_workflows/{g.name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
