"""Where the command line finds tokenizer folders for weights that bring none (meta, placeholder, single files):
ComfyUI's own, the folders the loader nodes use (nodes/common.py reads TOKENIZER_FOLDERS from here).

The entry points' helper (layer 6) and the one engine module that knows ComfyUI's folder layout
(tests/test_engine_layers.py exempts it by name): it imports nothing of ComfyUI, it only looks for files, in this
order: the ComfyUI the pack is installed in (the pack at <ComfyUI>/custom_nodes/<pack>, or linked there from
COMFYUI_PATH's or the bundled .comfyui's custom_nodes), COMFYUI_PATH, the bundled <pack>/.comfyui (`make setup`)."""

from __future__ import annotations

import os
from pathlib import Path

# kind ("clip", "t5", "qwen": batch/manifest.TOKENIZERS' keys) -> the folder inside ComfyUI's `comfy` package
TOKENIZER_FOLDERS = {"clip": "sd1_tokenizer", "t5": "text_encoders/t5_tokenizer",
                     "qwen": "text_encoders/qwen25_tokenizer"}  # Qwen's BPE: the engine adds Qwen3's special tokens
TOKENIZER_FILES = {"clip": ("vocab.json", "merges.txt"), "t5": ("tokenizer.json",),
                   "qwen": ("vocab.json", "merges.txt")}
PACK = Path(__file__).resolve().parent.parent  # the pack's folder (this repository)
INSTALLED_IN = "the ComfyUI the pack is installed in"


def _links_to_pack(root: Path) -> bool:
    try:
        return any(entry.resolve() == PACK for entry in (root / "custom_nodes").iterdir())
    except OSError:
        return False


def comfyui_candidates(environ=None) -> list[tuple[Path, str]]:
    """The ComfyUI folders searched, in order, each with why it is searched (no folder twice)."""
    environ = os.environ if environ is None else environ
    env = environ.get("COMFYUI_PATH") or None
    env_root = Path(env).expanduser().absolute() if env else None
    bundled = PACK / ".comfyui"
    found = []
    for pack in (Path(__file__).absolute().parent.parent, PACK):  # as the path lies, and with its links resolved
        if pack.parent.name == "custom_nodes":
            found.append((pack.parent.parent, INSTALLED_IN))
    found += [(root, INSTALLED_IN) for root in (env_root, bundled) if root is not None and _links_to_pack(root)]
    if env_root is not None:
        found.append((env_root, "COMFYUI_PATH"))
    found.append((bundled, "the bundled .comfyui"))
    seen, out = set(), []
    for root, why in found:
        key = os.path.realpath(root)
        if key not in seen:
            seen.add(key)
            out.append((root, why))
    return out


def tokenizer_folder(root: Path, kind: str) -> Path | None:
    """ComfyUI's tokenizer folder of `kind` under the ComfyUI folder `root`, None when its files are not there."""
    folder = Path(root) / "comfy" / TOKENIZER_FOLDERS[kind]
    return folder if all((folder / name).is_file() for name in TOKENIZER_FILES[kind]) else None


def find_tokenizer_folders(kinds, environ=None) -> tuple[dict[str, Path], list[str]]:
    """({kind: folder} for each of `kinds` found, the first ComfyUI that has it; the places looked at, as text for
    a message)."""
    kinds, found, looked = list(kinds), {}, []
    for root, why in comfyui_candidates(environ):
        looked.append(f"{root} ({why})")
        for kind in kinds:
            if kind not in found and (folder := tokenizer_folder(root, kind)) is not None:
                found[kind] = folder
        if len(found) == len(kinds):
            break
    return found, looked
