"""What every FillScope node shares: socket types, weight-source choices, the shapes output."""

from __future__ import annotations

import os
from pathlib import Path

from comfy_api.latest import io

from ..fillscope.checkpoints import PICKLE_SUFFIXES, WEIGHT_SUFFIXES, sniff
from ..fillscope.masks import prepare_image_and_mask
from ..fillscope.weights import META, PLACEHOLDER

CATEGORY = "FillScope"

# Custom socket types: a wrong wire is impossible on the canvas.
ClipL = io.Custom("FS_CLIP_L")
T5 = io.Custom("FS_T5")
FluxFillModel = io.Custom("FS_FLUX_FILL_MODEL")
Vae = io.Custom("FS_VAE")
ClipG = io.Custom("FS_CLIP_G")
SD3Model = io.Custom("FS_SD3_MODEL")
SD3ControlNet = io.Custom("FS_SD3_CONTROLNET")
ClipEmbeds = io.Custom("FS_CLIP_EMBEDS")
ClipGEmbeds = io.Custom("FS_CLIP_G_EMBEDS")
T5Embeds = io.Custom("FS_T5_EMBEDS")
FluxText = io.Custom("FS_FLUX_TEXT")
SD3Text = io.Custom("FS_SD3_TEXT")
FillCondition = io.Custom("FS_FILL_CONDITION")
SD3Condition = io.Custom("FS_SD3_CONDITION")
Latent = io.Custom("FS_LATENT")
# The sockets that carry a loaded model: a node's inputs of these types are on the device while it runs.
MODELS = (ClipL, T5, FluxFillModel, Vae, ClipG, SD3Model, SD3ControlNet)

SOURCE_META, SOURCE_PLACEHOLDER = META, PLACEHOLDER  # the engine's weight-source names
DTYPES = ["bf16", "fp16", "fp32"]
DEVICES = ["auto", "cpu", "cuda"]


def shapes_output():
    return io.String.Output("shapes", display_name="shapes", tooltip="JSON shape record (schema fillscope.shapes/1)")


def diffusers_folders() -> list[str]:
    """Diffusers-format repositories under ComfyUI's models/diffusers paths: pipeline folders (model_index.json)
    and single-model folders (config.json + safetensors, e.g. the alimama ControlNet)."""
    import folder_paths

    found = []
    for base in folder_paths.get_folder_paths("diffusers"):
        if os.path.isdir(base):
            for root, dirs, files in os.walk(base, followlinks=True):
                if "model_index.json" in files or ("config.json" in files and any(f.endswith(".safetensors") for f in files)):
                    found.append(os.path.relpath(root, base))
                    dirs[:] = []
    return sorted(set(found))


# Single files: listed as "<ComfyUI folder>/<file>" (e.g. "text_encoders/t5xxl_fp16.safetensors"), the folder being
# ComfyUI's folder_paths name (diffusion_models also covers models/unet, text_encoders models/clip). A diffusers
# folder entry never starts with one of these names followed by a weight-file name, so the two cannot clash.
# Per component: the folders listed whole, and whether checkpoints/ files that bundle the component are added.
FILE_FOLDERS = {
    "clip_l": ("text_encoders",),
    "clip_g": ("text_encoders",),
    "t5_xxl": ("text_encoders",),
    "flux_fill_transformer": ("diffusion_models",),
    "sd3_transformer": ("diffusion_models",),
    "flux_vae": ("vae",),
    "sd3_vae": ("vae",),
    "sd3_controlnet": ("controlnet",),
}
CHECKPOINT_PARTS = {"clip_l", "clip_g", "t5_xxl", "flux_fill_transformer", "sd3_transformer", "flux_vae", "sd3_vae"}
ALL_FILE_FOLDERS = ("diffusion_models", "text_encoders", "vae", "controlnet", "checkpoints")


def _weight_suffixes() -> tuple:
    return WEIGHT_SUFFIXES


def _folder_files(folder: str) -> list[str]:
    import folder_paths

    try:
        names = folder_paths.get_filename_list(folder)
    except KeyError:
        return []
    return [n.replace(os.sep, "/") for n in names if n.lower().endswith(_weight_suffixes())]


def _checkpoints_with(kinds) -> list[str]:
    """checkpoints/ files that bundle one of `kinds` (read from their safetensors headers, cached per file)."""
    import folder_paths


    out = []
    for name in _folder_files("checkpoints"):
        path = folder_paths.get_full_path("checkpoints", name)
        if not path or not name.lower().endswith((".safetensors", ".sft")):
            continue
        try:
            info = sniff(path)
        except Exception:  # unreadable files are simply not offered here
            continue
        if any(info.part(k) is not None for k in kinds):
            out.append(name)
    return out


def file_sources(kinds) -> list[str]:
    """"<folder>/<file>" entries for the components `kinds` (a loader's component kinds)."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    folders = list(dict.fromkeys(f for k in kinds for f in FILE_FOLDERS.get(k, ())))
    out = [f"{folder}/{name}" for folder in folders for name in _folder_files(folder)]
    if any(k in CHECKPOINT_PARTS for k in kinds):
        out += [f"checkpoints/{name}" for name in _checkpoints_with(kinds)]
    return sorted(dict.fromkeys(out))


def source_options(kinds=None) -> list[str]:
    """Diffusers folders, then (for a loader's component kinds) single files, then placeholder and meta."""
    files = file_sources(kinds) if kinds else []
    return diffusers_folders() + files + [SOURCE_PLACEHOLDER, SOURCE_META]


def _split_file_source(source: str):
    """(ComfyUI folder name, relative file name) of a "<folder>/<file>" entry, else None."""
    folder, sep, rest = source.replace("\\", "/").partition("/")
    if sep and folder in ALL_FILE_FOLDERS and rest.lower().endswith(_weight_suffixes()):
        return folder, rest
    return None


def _find_in(folder: str, rest: str, exists, shown: str, choose: str) -> tuple[str | None, str | None]:
    """(absolute path of `rest` inside one of ComfyUI's `folder` paths that passes `exists`, or None; an error
    when `rest` escapes them)."""
    import folder_paths

    for base in [os.path.realpath(b) for b in folder_paths.get_folder_paths(folder)]:
        path = os.path.realpath(os.path.join(base, rest))
        if os.path.commonpath([path, base]) != base:
            return None, (f"[FillScope] input 'source': '{shown}' points outside ComfyUI's models/{folder} folders. "
                          f"Fix: choose {choose}.")
        if exists(path):
            return path, None
    return None, None


def _file_path(folder: str, rest: str) -> tuple[str | None, str | None]:
    return _find_in(folder, rest, os.path.isfile, f"{folder}/{rest}", "a file listed in the menu")


def _diffusers_path(source: str) -> tuple[str | None, str | None]:
    return _find_in("diffusers", source, os.path.isdir, source, "a folder listed in the menu, or 'placeholder' / 'meta'")


def resolve_source(source: str) -> str:
    """'meta'/'placeholder', the absolute path of a "<folder>/<file>" single file, or the absolute folder path of
    a models/diffusers entry; refuses paths outside the model folders."""
    if source in (SOURCE_META, SOURCE_PLACEHOLDER):
        return source
    import folder_paths

    split = _split_file_source(source)
    if split is not None:
        path, error = _file_path(*split)
        if error:
            raise ValueError(error)
        if path:
            return path
        bases = folder_paths.get_folder_paths(split[0])
        return os.path.join(bases[0], split[1]) if bases else split[1]
    path, error = _diffusers_path(source)
    if error:
        raise ValueError(error)
    if path:
        return path
    bases = folder_paths.get_folder_paths("diffusers")
    return os.path.join(bases[0], source) if bases else source


def validate_source(source: str) -> bool | str:
    if source in (SOURCE_META, SOURCE_PLACEHOLDER):
        return True
    import folder_paths

    split = _split_file_source(source)
    if split is not None:
        folder, rest = split

        if rest.lower().endswith(PICKLE_SUFFIXES):
            return (f"[FillScope] input 'source': '{source}' is a pickled PyTorch checkpoint; FillScope never unpickles "
                    "(loading a pickle can run arbitrary code) and loads only .safetensors files. Fix: download the "
                    ".safetensors version of this model.")
        path, error = _file_path(folder, rest)
        if error:
            return error
        if path:
            return True
        return (f"[FillScope] input 'source': file '{rest}' was not found in ComfyUI's models/{folder} folders "
                f"({', '.join(folder_paths.get_folder_paths(folder)) or 'none configured'}). Fix: put the file there and "
                "press Refresh, or choose another entry.")
    path, error = _diffusers_path(source)
    if error:
        return error
    if path:
        return True
    bases = folder_paths.get_folder_paths("diffusers")
    return (
        f"[FillScope] input 'source': model folder '{source}' was not found under models/diffusers "
        f"({', '.join(bases) or 'no diffusers folder configured'}). Fix: put the diffusers-format repository "
        "there (e.g. models/diffusers/FLUX.1-Fill-dev) and press Refresh, or a single .safetensors file into the "
        "matching model folder (diffusion_models, text_encoders, vae, controlnet, checkpoints), or choose "
        "'placeholder' or 'meta'."
    )


def source_fingerprint(source: str):
    """(name, size, mtime) of the weight files behind a source, so ComfyUI's cache notices a changed file."""
    if source in (SOURCE_META, SOURCE_PLACEHOLDER):
        return source
    try:
        path = resolve_source(source)
    except ValueError:  # validate_inputs reports it
        return source
    if os.path.isfile(path):
        st = os.stat(path)
        return (source, st.st_size, st.st_mtime_ns)
    files = []
    for root, _, names in os.walk(path, followlinks=True):
        for name in names:
            if name.endswith((".safetensors", ".json")):
                st = os.stat(os.path.join(root, name))
                files.append((os.path.relpath(os.path.join(root, name), path), st.st_size, st.st_mtime_ns))
    return (source, tuple(sorted(files)))


def mask_inputs():
    """The explicit mask options every condition node offers, with the same names and defaults."""
    return [
        io.Image.Input("image"),
        io.Mask.Input("mask", tooltip="1 = repaint (ComfyUI's LoadImage mask is 1 - alpha)."),
        io.Boolean.Input("invert_mask", default=False),
        io.Float.Input("threshold", default=0.5, min=0.0, max=1.0, step=0.01,
                       tooltip="Binarise the mask at this value (diffusers uses 0.5). 0 keeps a soft mask."),
        io.Int.Input("grow", default=0, min=0, max=256, tooltip="Dilate the mask by this many pixels."),
        io.Int.Input("feather", default=0, min=0, max=128,
                     tooltip="Paste-back edge: ramps inward over this many pixels; kept pixels stay exact."),
        io.Combo.Input("size_mode", options=["pad", "crop"], default="pad",
                       tooltip="Sides not multiples of 16: pad (edge pixels, cropped off after) or center-crop."),
    ]


def prepare_masked_input(rec, image, mask, invert_mask, threshold, grow, feather, size_mode):
    """The engine's image/mask preparation with its notes and warnings recorded on the node."""
    rec.tensor("image", image, "input")
    rec.tensor("mask", mask, "input")
    prepared = prepare_image_and_mask(
        image, mask, invert=invert_mask, threshold=threshold, grow=grow, feather=feather, size_mode=size_mode
    )
    rec.fact("repaint coverage", f"{prepared.coverage:.1%}")
    rec.geometry(prepared.geometry)
    for n in prepared.notes:
        rec.note(n)
    for w in prepared.warnings:
        rec.warn(w)
    return prepared


def record_sampler_result(rec, out, model) -> None:
    for k, v in out.info.items():
        rec.fact(k, v)
    if out.unchanged:
        rec.warn("mask is empty: sampling skipped, the source image is returned unchanged")
    if model.is_meta:
        rec.note("meta weights: shapes only, no values")


def tokenizer_folder(kind: str) -> Path:
    """ComfyUI's own tokenizer files, used when the weights carry none (placeholder, meta)."""
    import comfy.utils  # comfy is a namespace package: locate it through a module inside it

    root = Path(comfy.utils.__file__).parent
    return root / ("sd1_tokenizer" if kind == "clip" else "text_encoders/t5_tokenizer")


def progress_callback(total: int):
    """Per-step progress for ComfyUI's bar; also the interrupt point (raises when the user cancels)."""
    import comfy.model_management
    import comfy.utils

    bar = comfy.utils.ProgressBar(total)

    def callback(step: int, steps: int):
        comfy.model_management.throw_exception_if_processing_interrupted()
        bar.update_absolute(step, steps)

    return callback
