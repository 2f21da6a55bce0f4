"""What every FillScope node shares: socket types, weight-source choices, the shapes output."""

from __future__ import annotations

import os
from pathlib import Path

from comfy_api.latest import io

from ..fillscope import bounds  # the nodes' min/max (c.bounds), which the batch manifest checks too
from ..fillscope.checkpoints import PICKLE_SUFFIXES, SAFE_SUFFIXES, WEIGHT_SUFFIXES, sniff
from ..fillscope.checkpoints.detect import component_kinds
from ..fillscope.comfyui_tokenizers import TOKENIZER_FOLDERS  # kind -> folder in ComfyUI's comfy package
from ..fillscope.errors import FillScopeInputError
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
Qwen3 = io.Custom("FS_QWEN3")
KleinModel = io.Custom("FS_KLEIN_MODEL")
KleinText = io.Custom("FS_KLEIN_TEXT")
KleinCondition = io.Custom("FS_KLEIN_CONDITION")
# The sockets that carry a loaded model: a node's inputs of these types are on the device while it runs.
MODELS = (ClipL, T5, FluxFillModel, Vae, ClipG, SD3Model, SD3ControlNet, Qwen3, KleinModel)

SOURCE_META, SOURCE_PLACEHOLDER = META, PLACEHOLDER  # the engine's weight-source names
DTYPES = ["bf16", "fp16", "fp32"]
DEVICES = ["auto", "cpu", "cuda"]


def shapes_output():
    return io.String.Output("shapes", display_name="shapes", tooltip="JSON shape record (schema fillscope.shapes/1)")


NATIVE_LATENT_TOOLTIP = (
    "The result as ComfyUI's own LATENT, for ComfyUI's latent nodes (VAEDecode, LatentUpscale, SetLatentNoiseMask, "
    "SaveLatent, KSampler): the VAE's raw latent in ComfyUI's layout (FLUX.1 / SD3: latent / scale + shift, "
    "[B,16,H/8,W/8]; FLUX.2 [klein]: the normalised 2x2 patches [B,128,H/16,W/16]) on the model's grid (padding not "
    "cropped), with the repaint mask as noise_mask. Last output, so the links of saved workflows keep their slots.")


def output_linked(cls, slot: int) -> bool:
    """Whether output `slot` of the running node is wired to another node in the prompt (V3 hidden prompt and
    unique_id); True where the node cannot tell (a prompt without them)."""
    prompt = getattr(getattr(cls, "hidden", None), "prompt", None)
    me = getattr(getattr(cls, "hidden", None), "unique_id", None)
    if not isinstance(prompt, dict) or me is None:
        return True
    return any(isinstance(v, list) and len(v) == 2 and str(v[0]) == str(me) and v[1] == slot
               for node in prompt.values() if isinstance(node, dict) for v in (node.get("inputs") or {}).values())


def native_latent_output():
    """The samplers' last output: the result as ComfyUI's LATENT (fillscope.decode.to_comfy_latent)."""
    return io.Latent.Output("native_latent", display_name="LATENT", tooltip=NATIVE_LATENT_TOOLTIP)


# Walks over model folders (the diffusers menu, fingerprints) follow links (weights kept on another disk are the
# user's choice), enter each real directory once (links that loop, e.g. two links to "." in one folder, end
# there) and stop after WALK_MAX_ENTRIES directory entries or WALK_MAX_DEPTH levels.
WALK_MAX_DEPTH = 8
WALK_MAX_ENTRIES = 20_000
FINGERPRINT_MAX_ENTRIES = 10_000


def bounded_walk(top: str, prune=None, max_depth: int = WALK_MAX_DEPTH, max_entries: int = WALK_MAX_ENTRIES):
    """([(directory, its sub-directory names, its file names)], complete) under `top`, breadth-first in name
    order, links followed, each real directory (device, inode) entered once; `prune(directory, files)` true
    stops the descent there. complete is False when the depth or entry cap cut the walk short."""
    import collections

    out, seen, entries, complete = [], set(), 0, True
    queue = collections.deque([(top, 0)])
    while queue:
        root, depth = queue.popleft()
        try:
            st = os.stat(root)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(root) as it:
                items = sorted(it, key=lambda e: e.name)
        except OSError:  # vanished, unreadable, a dangling link or one that loops on itself
            continue
        if entries + len(items) > max_entries:
            items, complete = items[: max(0, max_entries - entries)], False
        entries += len(items)
        dirs, files = [], []
        for e in items:
            try:
                if e.is_dir():  # follows links
                    dirs.append(e.name)
                elif e.is_file():
                    files.append(e.name)
            except OSError:
                continue
        out.append((root, dirs, files))
        if not complete:
            break
        if prune is not None and prune(root, files):
            continue
        if depth >= max_depth:
            complete = complete and not dirs
            continue
        queue.extend((os.path.join(root, d), depth + 1) for d in dirs)
    return out, complete


def _is_model_folder(root: str, files) -> bool:
    return "model_index.json" in files or ("config.json" in files and any(f.endswith(".safetensors") for f in files))


def diffusers_folders() -> list[str]:
    """Diffusers-format repositories under ComfyUI's models/diffusers paths: pipeline folders (model_index.json)
    and single-model folders (config.json + safetensors, e.g. the alimama ControlNet). Linked folders are listed;
    the walk never loops and is bounded (bounded_walk); only entries validate_source accepts are offered."""
    import logging

    import folder_paths

    found = []
    for base in folder_paths.get_folder_paths("diffusers"):
        if os.path.isdir(base):
            walked, complete = bounded_walk(base, prune=_is_model_folder)
            if not complete:
                logging.warning(f"[FillScope] models/diffusers folder '{base}' holds more than {WALK_MAX_ENTRIES:,} "
                                f"entries or folders nested deeper than {WALK_MAX_DEPTH}: the menu lists the model "
                                "folders found before that.")
            found += [os.path.relpath(root, base).replace(os.sep, "/") for root, _, files in walked
                      if _is_model_folder(root, files)]
    return sorted(n for n in set(found) if _split_file_source(n) is None and validate_source(n) is True)


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
    "qwen3": ("text_encoders",),
    "klein_transformer": ("diffusion_models",),
    "flux2_vae": ("vae",),
}
CHECKPOINT_PARTS = {"clip_l", "clip_g", "t5_xxl", "flux_fill_transformer", "sd3_transformer", "flux_vae", "sd3_vae"}
ALL_FILE_FOLDERS = ("diffusion_models", "text_encoders", "vae", "controlnet", "checkpoints")


def _folder_files(folder: str) -> list[tuple[str, str]]:
    """(name relative to the folder, path) of the weight files of one of ComfyUI's model folders; only files the
    loader finds (a dangling link is not offered). The path is the one listed, links not resolved: a link into a
    Hugging Face cache points at a blob without a suffix, and a file's suffix is its name's."""
    import folder_paths

    try:
        names = folder_paths.get_filename_list(folder)
    except KeyError:
        return []
    out = []
    for n in names:
        n = n.replace(os.sep, "/")
        if n.lower().endswith(WEIGHT_SUFFIXES) and _split_file_source(f"{folder}/{n}") == (folder, n):
            found = _file_path(folder, n)[0]  # the file the loader would load, links kept (a dangling link: None)
            if found:
                out.append((n, found))
    return out


# The menus read a file's safetensors header (never its tensor data) once per fingerprint: the header length is
# checked first, and a file whose header is longer than MENU_MAX_HEADER is not parsed for a menu (real headers are
# well under 1 MiB: a FLUX.1 transformer's is ~0.1 MiB, a whole SDXL checkpoint's ~0.3 MiB; the loader's own read
# allows header.MAX_HEADER, 256 MiB, and a 44 MiB header takes ~6 s to parse and classify), so one odd file cannot
# stall /object_info, which builds every menu: at most ~0.6 s once per file fingerprint.
MENU_MAX_HEADER = 4 * 2**20
MENU_CACHE_MAX = 20_000
_menu_kinds: dict[str, tuple] = {}  # listed path -> (size, mtime_ns, component kinds or None), see file_kinds


def file_kinds(path: str) -> frozenset | None:
    """The component kinds the weight file at `path` holds, as the source menus sort it (detect.component_kinds of
    its header); empty for a file recognised as another model, None when the file cannot tell: a pickled or other
    non-safetensors file (FillScope never reads those), an unreadable or corrupt header, one longer than
    MENU_MAX_HEADER, tensors FillScope does not recognise. Cached per (path, size, mtime): a changed file is read
    again, an unchanged one never twice (a file that failed to read included)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_size, st.st_mtime_ns)
    cached = _menu_kinds.get(path)
    if cached is not None and cached[:2] == key:
        return cached[2]
    kinds = None
    if path.lower().endswith(SAFE_SUFFIXES):
        try:
            with open(path, "rb") as f:
                length = int.from_bytes(f.read(8), "little")
            if length <= MENU_MAX_HEADER:
                kinds = component_kinds(sniff(path))
        except Exception:  # unreadable, truncated, not JSON, a disguised pickle: validation and the loader explain
            kinds = None
    if len(_menu_kinds) >= MENU_CACHE_MAX:  # files seen over a long session, most of them gone or changed
        _menu_kinds.clear()
    _menu_kinds[path] = (*key, kinds)
    return kinds


def _checkpoints_with(kinds) -> list[str]:
    """checkpoints/ files that bundle one of `kinds` (read from their safetensors headers: file_kinds). Only those:
    checkpoints/ holds whole SD1/SDXL/FLUX checkpoints a component loader has no use for."""
    return [name for name, path in _folder_files("checkpoints") if (file_kinds(path) or frozenset()) & set(kinds)]


def file_sources(kinds) -> list[str]:
    """"<folder>/<file>" entries for the components `kinds` (a loader's component kinds): the files of the loader's
    model folders (FILE_FOLDERS) that may hold one of them, then checkpoints/ files that bundle one.

    A file is sorted by its safetensors header (file_kinds, cached per fingerprint; only the header is read): a file
    whose header says it is another kind of model (a T5 or Qwen3 file for the CLIP-L loader, the klein transformer for
    the FLUX Fill loader, a LoRA) is not offered. A file that cannot tell stays offered, so no file goes missing from
    every menu silently and choosing it says why it does not load: a pickled .ckpt/.pt/.bin (FillScope never unpickles),
    a GGUF/ONNX file, an unreadable, truncated or corrupt header, tensors FillScope does not recognise. A saved
    workflow that names a file of another kind still loads the file's header and fails with the loader's "is ...;
    the ... loader takes ..." error (validate_source does not check the kind)."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    wanted = set(kinds)
    folders = list(dict.fromkeys(f for k in kinds for f in FILE_FOLDERS.get(k, ())))
    out = []
    for folder in folders:
        for name, path in _folder_files(folder):
            held = file_kinds(path)
            if held is None or held & wanted:
                out.append(f"{folder}/{name}")
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
    if sep and folder in ALL_FILE_FOLDERS and rest.lower().endswith(WEIGHT_SUFFIXES):
        return folder, rest
    return None


def contained_path(rest: str) -> str | None:
    """`rest` normalised ('/' separators, '.' and 'x/..' folded), or None when the string itself climbs out of
    the folder it is relative to: an absolute path, a drive ('C:'), or '..' past its start. Lexical only: a link
    inside a model folder (weights on another disk) is the user's choice and is followed when loading."""
    import posixpath
    import re

    r = rest.replace("\\", "/")
    if not r or r.startswith("/") or re.match(r"^[A-Za-z]:", r):
        return None
    norm = posixpath.normpath(r)
    if norm == ".." or norm.startswith("../"):
        return None
    return norm


def _find_in(folder: str, rest: str, exists, shown: str, choose: str) -> tuple[str | None, str | None]:
    """(absolute path of `rest` inside one of ComfyUI's `folder` paths that passes `exists`, or None; an error when
    the string `rest` escapes them, checked lexically: contained_path). Links are followed when the file is read but
    not resolved here: a link into a Hugging Face cache points at a blob named by its hash, without the
    .safetensors suffix the name in the model folder has."""
    import folder_paths

    norm = contained_path(rest)
    if norm is None:
        return None, (f"[FillScope] input 'source': '{shown}' points outside ComfyUI's models/{folder} folders "
                      f"(an absolute path, a drive or '..' climbing out). Fix: choose {choose}.")
    for base in folder_paths.get_folder_paths(folder):
        path = os.path.join(os.path.abspath(base), *norm.split("/"))
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
    problem = source_problem(source)
    if problem:
        raise FillScopeInputError("source", *problem)
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
        return os.path.join(bases[0], contained_path(split[1])) if bases else split[1]
    path, error = _diffusers_path(source)
    if error:
        raise ValueError(error)
    if path:
        return path
    bases = folder_paths.get_folder_paths("diffusers")
    return os.path.join(bases[0], contained_path(source)) if bases else source


def source_problem(source) -> tuple[str, str] | None:
    """(problem, fix) when `source` cannot name anything (not text, empty, a NUL byte), else None."""
    fix = "choose an entry of the source menu (press Refresh after adding model files), or 'placeholder' / 'meta'."
    if not isinstance(source, str):
        return f"is {type(source).__name__} {ascii(source)[:60]}, not the name of a model folder or file.", fix
    if not source.strip():
        return "is empty.", fix
    if "\x00" in source:
        return f"{ascii(source)[:80]} holds a NUL character (\\x00), which no file name can contain.", fix
    return None


def validate_source(source: str) -> bool | str:
    problem = source_problem(source)
    if problem:
        return str(FillScopeInputError("source", *problem))
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


_fingerprint_notes: dict[str, str] = {}  # resolved folder -> why its fingerprint is partial (the loader notes it)


def fingerprint_note(path: str) -> str | None:
    """Why the last fingerprint of the folder `path` covers only part of it, or None."""
    return _fingerprint_notes.get(str(path))


def source_fingerprint(source: str):
    """(name, size, mtime) of the weight files behind a source, so ComfyUI's cache notices a changed file. A
    folder's walk follows links, enters each real directory once and stops after FINGERPRINT_MAX_ENTRIES entries
    or WALK_MAX_DEPTH levels: past that the fingerprint covers the files seen so far (a note says so)."""
    if source in (SOURCE_META, SOURCE_PLACEHOLDER):
        return source
    try:
        path = resolve_source(source)
    except ValueError:  # validate_inputs reports it (FillScopeInputError is a ValueError too)
        return source
    try:
        if os.path.isfile(path):
            st = os.stat(path)
            return (source, st.st_size, st.st_mtime_ns)
    except OSError:
        return source
    walked, complete = bounded_walk(path, max_entries=FINGERPRINT_MAX_ENTRIES)
    files = []
    for root, _, names in walked:
        for name in names:
            if name.endswith((".safetensors", ".json")):
                full = os.path.join(root, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                files.append((os.path.relpath(full, path).replace(os.sep, "/"), st.st_size, st.st_mtime_ns))
    if complete:
        _fingerprint_notes.pop(path, None)
        return (source, tuple(sorted(files)))
    note = (f"model folder '{source}' holds more than {FINGERPRINT_MAX_ENTRIES:,} entries or folders nested deeper "
            f"than {WALK_MAX_DEPTH}: ComfyUI's cache watches only the {len(files)} weight/config files found before "
            "that, so a change to another file is noticed after a restart or /free")
    _fingerprint_notes[path] = note
    import logging

    logging.warning(f"[FillScope] {note}")
    return (source, "partial", tuple(sorted(files)))


def mask_inputs():
    """The explicit mask options every condition node offers, with the same names and defaults."""
    from ..fillscope.compositing.removal import MASKED_FILLS
    from . import tooltips as tips

    return [
        io.Image.Input("image", tooltip=tips.IMAGE),
        io.Mask.Input("mask", tooltip="1 = repaint (ComfyUI's LoadImage mask is 1 - alpha)."),
        io.Boolean.Input("invert_mask", default=False, tooltip=tips.INVERT_MASK),
        io.Float.Input("threshold", default=0.5, min=bounds.MASK["threshold"].min, max=bounds.MASK["threshold"].max,
                       step=0.01,
                       tooltip="Binarise the mask at this value (diffusers uses 0.5). 0 keeps a soft mask."),
        io.Int.Input("grow", default=0, min=bounds.MASK["grow"].min, max=bounds.MASK["grow"].max,
                     tooltip="Dilate the mask by this many pixels."),
        io.Int.Input("feather", default=0, min=bounds.MASK["feather"].min, max=bounds.MASK["feather"].max,
                     tooltip="Paste-back edge: ramps inward over this many pixels; kept pixels stay exact."),
        io.Combo.Input("size_mode", options=["pad", "crop"], default="pad",
                       tooltip="Sides not multiples of 16: pad (edge pixels, cropped off after) or center-crop."),
        advanced(io.Combo.Input(
            "masked_fill", options=list(MASKED_FILLS), default="none", optional=True,
            tooltip="For removal: what the model sees under the mask instead of the object (the object shown tends "
                    "to be painted back). none: the source as is; mean: one flat colour, the kept pixels' mean; "
                    "edge: the surrounding colours filled in from the mask's border; blur: a blurred wash of them. "
                    "Only the model's view changes (paste-back keeps the exact source). FLUX.2 [klein] sees it in its "
                    "reference copy of the source too; FLUX Fill and SD3 already blank the masked pixels in their "
                    "condition, so there it changes soft masks (threshold 0) and the start at denoise < 1.")),
    ]


def prepare_masked_input(rec, image, mask, invert_mask, threshold, grow, feather, size_mode, masked_fill="none"):
    """The engine's image/mask preparation with its notes and warnings recorded on the node."""
    rec.tensor("image", image, "input")
    rec.tensor("mask", mask, "input")
    prepared = prepare_image_and_mask(
        image, mask, invert=invert_mask, threshold=threshold, grow=grow, feather=feather, size_mode=size_mode,
        masked_fill=masked_fill if masked_fill is not None else "none",
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
    if model is not None and model.is_meta:  # None: a native ComfyUI MODEL (nodes/native_model.py)
        rec.note("meta weights: shapes only, no values")


def tokenizer_folder(kind: str) -> Path:
    """ComfyUI's own tokenizer files, used when the weights carry none (placeholder, meta, single files)."""
    import comfy.utils  # comfy is a namespace package: locate it through a module inside it

    return Path(comfy.utils.__file__).parent / TOKENIZER_FOLDERS[kind]


def progress_callback(total: int):
    """Per-step progress for ComfyUI's bar; also the interrupt point (raises when the user cancels)."""
    import comfy.model_management
    import comfy.utils

    bar = comfy.utils.ProgressBar(total)

    def callback(step: int, steps: int):
        comfy.model_management.throw_exception_if_processing_interrupted()
        bar.update_absolute(step, steps)

    return callback


SOFT_MASK_TOOLTIP = (
    "Optional soft mask (1 = repaint, 0 = keep; the condition image's size): differential diffusion, as ComfyUI's "
    "node. Each position follows the noised source until the schedule's position (1 at the first step, 0 at the end) "
    "falls to its value, so 0.5 keeps the source's structure for the first half of the steps.")


def soft_mask_input():
    """The samplers' optional `soft_mask` MASK input (FLUX Fill, SD3, klein): last in the list, so existing workflows'
    widget values keep their order."""
    return io.Mask.Input("soft_mask", optional=True, tooltip=SOFT_MASK_TOOLTIP)


def step_cache_inputs(kinds):
    """The samplers' advanced `step_cache` and `cache_threshold` (fillscope.speed), after every other input so saved
    workflows keep their widget values' order."""
    return [
        advanced(io.Combo.Input("step_cache", options=list(kinds), default="off", optional=True,
                                tooltip="Reuse the transformer's work of an earlier step when it changes little "
                                        "(diffusers' step caches): faster, at a quality cost the shapes report counts "
                                        "(steps whose last block was skipped). off: the sampler exactly as without.")),
        advanced(io.Float.Input("cache_threshold", default=0.05, min=bounds.STEP_CACHE["cache_threshold"].min,
                                max=bounds.STEP_CACHE["cache_threshold"].max, step=0.01, optional=True,
                                tooltip="How much change a cached step may hide: higher skips more. diffusers' "
                                        "defaults: first-block 0.05, mag 0.06; taylorseer ignores it (a full step "
                                        "every 5).")),
    ]


def check_soft_mask(rec, soft_mask, condition, to_latent) -> None:
    """Before any model is placed: the soft mask against the condition (size, batch, NaN), by the family's
    `soft_mask_latent`; the input's shape on the record (the latent grid's comes from the sampler, soft_mask.latent,
    and the fact `differential_diffusion`)."""
    if soft_mask is None:
        return
    rec.tensor("soft_mask", soft_mask, "input")
    to_latent(condition, soft_mask)


def advanced(inp):
    """An input flagged `advanced` in /object_info (ComfyUI 0.3.75's V3 inputs take no such argument; extra_dict passes
    it on). Frontend 1.32.9 copies it to the widget's options; web/fillscope.js makes the frontend honour it (the widget
    folds behind the node menu's "Show Advanced"). The widget keeps its place in widgets_values either way."""
    inp.extra_dict = {**inp.extra_dict, "advanced": True}
    return inp


def tone_inputs(optional: bool):
    """tone_match, poisson and ring_width, as Paste Back and Stitch offer them (off: the composite is exactly as
    without them)."""
    return [
        io.Boolean.Input("tone_match", default=False, optional=optional,
                         tooltip="Match the generated image's colours to the source's, measured on the kept pixels "
                                 "just outside the mask (CIELAB mean and contrast per channel, plus a smooth offset "
                                 "field for a cast that varies across the image). Off: the composite is exactly as "
                                 "without this option."),
        io.Boolean.Input("poisson", default=False, optional=optional,
                         tooltip="Gradient-domain (Poisson) blend: inside the mask the generated image's detail, "
                                 "meeting the source exactly on the mask's border (no seam); runs after tone_match. "
                                 "Can pull a colour from outside into a large flat area."),
        advanced(io.Int.Input("ring_width", default=16, min=1, max=256, optional=True,
                              tooltip="Width in px of the ring of kept pixels outside the mask on which tone_match "
                                      "measures and the delta E is reported.")),
    ]
