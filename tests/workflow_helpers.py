"""Reading the shipped workflows and what a run left in /history (shared by the server tests).

API files (headless) are in api_workflows/ with their generator (graphs.py); the UI files (canvas, template browser)
only in example_workflows/, the one folder ComfyUI's template scan should list."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / "api_workflows"  # API twins + graphs.py (not a folder ComfyUI scans for templates)
EXAMPLES = REPO / "example_workflows"  # UI files: the templates

# The session server's text_encoders/t5xxl_fp16.safetensors is the tiny FLUX T5 (as wide as the tiny FLUX transformer
# reads); the tiny SD3 transformer reads a wider T5, so SD3 graphs take T5 from the tiny SD3 folder. With real weights
# one t5xxl_fp16.safetensors serves both.
SD3_TINY_T5 = "stable-diffusion-3-medium-diffusers"


def load_api(name: str) -> dict:
    return json.loads((WORKFLOWS / f"{name}.api.json").read_text())


def load_ui(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.json").read_text())


def sd3_inpaint_prompt() -> dict:
    """sd3_controlnet_inpaint as shipped, with the tiny SD3 T5 (see SD3_TINY_T5)."""
    prompt = load_api("sd3_controlnet_inpaint")
    prompt[node_id(prompt, "FillScopeLoadT5")]["inputs"]["source"] = SD3_TINY_T5
    return prompt


def with_dtype(prompt: dict, dtype: str = "fp32") -> dict:
    """The prompt with every FillScope loader's dtype set to `dtype` (in place; returned). The shipped graphs load
    bf16, which a CPU without bf16 instructions (AVX2 only) runs ~20x slower than fp32 in convolutions (the tiny VAE
    at 128x128: 21.9 s bf16, 0.9 s fp32): tests whose point is not the dtype run the tiny models in fp32."""
    for node in prompt.values():
        if node["class_type"].startswith("FillScopeLoad") and "dtype" in node["inputs"]:
            node["inputs"]["dtype"] = dtype
    return prompt


def node_id(prompt: dict, class_type: str) -> str:
    return next(k for k, v in prompt.items() if v["class_type"] == class_type)


def image_saver(prompt: dict) -> str:
    """The node that saves a template's result: its Shapes Report with `images` wired (the image and its report under
    one number; the templates have no Save Image)."""
    return next(k for k, v in prompt.items() if v["class_type"] == "FillScopeShapesReport" and "images" in v["inputs"])


def shapes_doc(entry: dict, prompt: dict, class_type: str) -> dict:
    """The shapes document a node of `class_type` left in a /history entry."""
    return entry["outputs"][node_id(prompt, class_type)]["fillscope_shapes"][0]


def tensors(doc: dict) -> dict:
    return {t["name"]: t for t in doc["node"]["tensors"]}


def with_synthetic_image(prompt: dict, width: int, height: int, mask_fraction: float) -> dict:
    """The prompt with its LoadImage replaced by a Synthetic Image + Mask node of the given size."""
    load = node_id(prompt, "LoadImage")
    prompt["90"] = {"class_type": "FillScopeSyntheticImageMask",
                    "inputs": {"width": width, "height": height, "mask_fraction": mask_fraction}}
    for node in prompt.values():
        for key, value in node["inputs"].items():
            if isinstance(value, list) and value[0] == load:
                node["inputs"][key] = ["90", value[1]]
    del prompt[load]
    return prompt


def api_node(info: dict, class_type: str, **inputs) -> dict:
    """An API-format node of `class_type` (its /object_info entry in `info`): the given inputs, every other required
    widget at its default (or the menu's first entry)."""
    values = {}
    for name, spec in info[class_type]["input"]["required"].items():
        kind, opts = spec[0], (spec[1] if len(spec) > 1 else {})
        if name in inputs:
            continue
        if "default" in opts:
            values[name] = opts["default"]
        elif isinstance(kind, list) and kind:
            values[name] = kind[0]
        elif kind == "COMBO" and opts.get("options"):
            values[name] = opts["options"][0]
    return {"class_type": class_type, "inputs": {**values, **inputs}}


# ---- FillScope's samplers on a native MODEL vs their own transformer (tests/test_server_native_*.py) ----------------

SAVED_LATENTS = "fillscope_native_fill"  # NativeFillTestSaveFSLatent's folder in the output folder (tests/comfy_nodes)


def saved_latent(server, name: str):
    """The latents NativeFillTestSaveFSLatent saved as `name`."""
    from safetensors.torch import load_file

    return load_file(str(server.output_dir / SAVED_LATENTS / f"{name}.safetensors"))["samples"]


def max_rel(a, b) -> float:
    """max |a - b| over max |b|: the relative error the equality tests hold to 1e-4."""
    return float((a - b).abs().max() / b.abs().max())


def run_saved(server, graph: dict, name: str):
    """Run `graph`, which saves its latents as `name`; those latents."""
    server.run(graph, timeout=600)
    return saved_latent(server, name)


def refusal(server, graph: dict) -> str:
    """The error of a prompt the server must refuse (ComfyExecutionError), its node's line printed as a user reads it."""
    import pytest
    from comfy_server import ComfyExecutionError

    with pytest.raises(ComfyExecutionError) as e:
        server.run(graph, timeout=600)
    print("refused:", str(e.value).splitlines()[1] if "\n" in str(e.value) else e.value)
    return str(e.value)


def wire_denoiser(g: dict, sampler: dict, node, *, native: bool, both: bool, neither: bool, lora: bool,
                  lora_name: str, transformer: str, lora_node: str, model: str = "m", before_lora=()) -> None:
    """A FillScope sampler's denoiser as the native-MODEL tests wire it into graph `g` (node ids l / l2): ComfyUI's
    MODEL from node `model` (through each (id, class_type, extra inputs) of `before_lora` in turn, the last one
    winning, then LoraLoaderModelOnly), FillScope's transformer from node `transformer` (through the family's
    `lora_node`), both (`both`) or neither (`neither`); `node(class_type, **inputs)` makes a node. The MODEL node is
    dropped when nothing reads it."""
    if native or both:
        wired = [model, 0]
        for node_id, class_type, extra in before_lora:
            g[node_id] = node(class_type, model=[model, 0], **extra)
            wired = [node_id, 0]
        if lora:
            g["l"] = node("LoraLoaderModelOnly", model=[model, 0], lora_name=lora_name, strength_model=1.0)
            wired = ["l", 0]
        sampler["model"] = wired
    if not native or both:
        wired = [transformer, 0]
        if lora:
            g["l2"] = node(lora_node, transformer=[transformer, 0], lora_name=lora_name, strength=1.0)
            wired = ["l2", 0]
        sampler["transformer"] = wired
    if neither:
        sampler.pop("model", None), sampler.pop("transformer", None)
    if "model" not in sampler:
        g.pop(model, None)
