"""The example image of the templates, put where their Load Image nodes look for it.

The real-weight templates' Load Image nodes name `fillscope_example.png` (api_workflows/graphs.py), which the pack
ships in api_workflows/. ComfyUI's Load Image lists and loads files from its input folder only, so without a copy
there the node is red and its preview a 404. When ComfyUI loads the pack (comfy_entrypoint in ../__init__.py) the
file is copied into folder_paths.get_input_directory() if no file of that name is there: a user's own file of that
name is never overwritten. Standard library only (no torch at start-up), and it never raises: a failure is logged
and start-up goes on.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

EXAMPLE_IMAGE = "fillscope_example.png"
SOURCE = Path(__file__).resolve().parent.parent / "api_workflows" / EXAMPLE_IMAGE


def install_example_image(input_dir: str | os.PathLike | None = None, source: str | os.PathLike = SOURCE) -> str | None:
    """Copy `source` into `input_dir` (default: ComfyUI's input folder) as fillscope_example.png unless a file (or a
    link, even a broken one) of that name is there. Returns the path written, or None: already there, or not possible
    (logged with the reason)."""
    target = None
    try:
        if input_dir is None:
            import folder_paths  # ComfyUI's: present only inside ComfyUI

            input_dir = folder_paths.get_input_directory()
        target = os.path.join(os.fspath(input_dir), EXAMPLE_IMAGE)
        if os.path.lexists(target):
            return None
        os.makedirs(input_dir, exist_ok=True)
        with open(source, "rb") as src:
            try:
                dst = open(target, "xb")  # exclusive: a file made meanwhile (another process) is left alone
            except FileExistsError:
                return None
            try:
                with dst:
                    shutil.copyfileobj(src, dst)
            except BaseException:
                os.unlink(target)  # our own partial copy only: the next start tries again
                raise
    except Exception as e:  # noqa: BLE001 - start-up must go on
        logging.warning(f"[FillScope] could not copy the example image {EXAMPLE_IMAGE} into ComfyUI's input folder "
                        f"({target or input_dir}): {type(e).__name__}: {e}. The templates' Load Image needs it there: "
                        f"copy {source} by hand, or load your own image.")
        return None
    logging.info(f"[FillScope] example image copied to {target} (the templates' Load Image opens it)")
    return target
