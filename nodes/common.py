"""What every FillScope node shares: socket types, weight-source choices, the shapes output."""

from __future__ import annotations

import os
from pathlib import Path

from comfy_api.latest import io

from ..fillscope.trace.records import ShapeRecorder, Traced, format_record, merge_trails, shapes_document, shapes_json

CATEGORY = "FillScope"

# Custom socket types: a wrong wire is impossible on the canvas.
ClipL = io.Custom("FS_CLIP_L")
T5 = io.Custom("FS_T5")
FluxFillModel = io.Custom("FS_FLUX_FILL_MODEL")
Vae = io.Custom("FS_VAE")
ClipEmbeds = io.Custom("FS_CLIP_EMBEDS")
T5Embeds = io.Custom("FS_T5_EMBEDS")
FluxText = io.Custom("FS_FLUX_TEXT")
FillCondition = io.Custom("FS_FILL_CONDITION")
Latent = io.Custom("FS_LATENT")

SOURCE_META = "meta"
SOURCE_PLACEHOLDER = "placeholder"
DTYPES = ["bf16", "fp16", "fp32"]
DEVICES = ["auto", "cpu", "cuda"]


def shapes_output():
    return io.String.Output("shapes", display_name="shapes", tooltip="JSON shape record (schema fillscope.shapes/1)")


def diffusers_folders() -> list[str]:
    """Diffusers-format repos (folders with model_index.json) under ComfyUI's models/diffusers paths."""
    import folder_paths

    found = []
    for base in folder_paths.get_folder_paths("diffusers"):
        if os.path.isdir(base):
            for root, dirs, files in os.walk(base, followlinks=True):
                if "model_index.json" in files:
                    found.append(os.path.relpath(root, base))
                    dirs[:] = []
    return sorted(set(found))


def source_options() -> list[str]:
    return diffusers_folders() + [SOURCE_PLACEHOLDER, SOURCE_META]


def source_input(tooltip: str):
    return io.Combo.Input(
        "source",
        options=source_options(),
        default=SOURCE_META,
        tooltip=tooltip
        + " A diffusers-format folder under models/diffusers, 'placeholder' (full topology, deterministic values,"
        " needs the memory of the real model) or 'meta' (full topology, shapes only, no memory).",
    )


def resolve_source(source: str) -> str:
    """'meta'/'placeholder' or the absolute folder path of a models/diffusers entry; refuses paths outside
    the model folders."""
    if source in (SOURCE_META, SOURCE_PLACEHOLDER):
        return source
    import folder_paths

    bases = [os.path.realpath(b) for b in folder_paths.get_folder_paths("diffusers")]
    for base in bases:
        path = os.path.realpath(os.path.join(base, source))
        if os.path.commonpath([path, base]) == base and os.path.isdir(path):
            return path
    return os.path.join(bases[0], source) if bases else source


def validate_source(source: str) -> bool | str:
    if source in (SOURCE_META, SOURCE_PLACEHOLDER):
        return True
    import folder_paths

    bases = [os.path.realpath(b) for b in folder_paths.get_folder_paths("diffusers")]
    for base in bases:
        path = os.path.realpath(os.path.join(base, source))
        if os.path.commonpath([path, base]) != base:
            return (
                f"[FillScope] input 'source': '{source}' points outside ComfyUI's models/diffusers folders. "
                "Fix: choose a folder listed in the menu, or 'placeholder' / 'meta'."
            )
        if os.path.isdir(path):
            return True
    return (
        f"[FillScope] input 'source': model folder '{source}' was not found under models/diffusers "
        f"({', '.join(bases) or 'no diffusers folder configured'}). Fix: put the diffusers-format repository "
        "there (e.g. models/diffusers/FLUX.1-Fill-dev) and press Refresh, or choose 'placeholder' or 'meta'."
    )


def tokenizer_folder(kind: str) -> Path:
    """ComfyUI's own tokenizer files, used when the weights carry none (placeholder, meta)."""
    import comfy.utils  # comfy is a namespace package: locate it through a module inside it

    root = Path(comfy.utils.__file__).parent
    return root / ("sd1_tokenizer" if kind == "clip" else "text_encoders/t5_tokenizer")


def finish(recorder: ShapeRecorder, inputs: tuple, *values, wrap: tuple = ()) -> io.NodeOutput:
    """NodeOutput of (values..., shapes): values at the indices in `wrap` travel as Traced with the trail;
    the shapes JSON and its text go to the node's ui (canvas and /history)."""
    record = recorder.finish()
    trail = merge_trails(*[i for i in inputs if isinstance(i, Traced)])
    out_trail = trail + [record]
    outs = [Traced(v, out_trail) if i in wrap else v for i, v in enumerate(values)]
    doc = shapes_document(record, trail)
    text = format_record(record)
    return io.NodeOutput(*outs, shapes_json(record, trail), ui={"text": [text], "fillscope_shapes": [doc]})


def progress_callback(total: int):
    """Per-step progress for ComfyUI's bar; also the interrupt point (raises when the user cancels)."""
    import comfy.model_management
    import comfy.utils

    bar = comfy.utils.ProgressBar(total)

    def callback(step: int, steps: int):
        comfy.model_management.throw_exception_if_processing_interrupted()
        bar.update_absolute(step, steps)

    return callback
