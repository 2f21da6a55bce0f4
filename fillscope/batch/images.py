"""A job's image files as ComfyUI's image loaders read them, so that a batch and a ComfyUI graph given the same files
compute on the same values: IMAGE [1,H,W,3] float32 0..1 (EXIF orientation applied, 16-bit 'I' images scaled by
1/255, converted to RGB, /255) and MASK [1,H,W] 1 = repaint: 1 - alpha for "alpha" (as the image loader's mask
output), the red channel of a mask file (a greyscale PNG's value; as the mask loader with channel red). A file with
several frames gives its first."""

from __future__ import annotations

from pathlib import Path

from ..errors import FillScopeInputError


def open_image(path: str, name: str):
    """The PIL image at `path`, EXIF orientation applied; a missing or unreadable file is the job's `name` input's
    fault."""
    from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

    fix = "check the path (relative paths are read from the manifest's folder) and the file."
    if not Path(path).is_file():
        raise FillScopeInputError(name, f"'{path}' does not exist.", fix)

    def lenient(fn, arg):  # as ComfyUI: a truncated file is read as far as it goes
        try:
            return fn(arg)
        except (OSError, UnidentifiedImageError, ValueError):
            previous, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, True
            try:
                return fn(arg)
            finally:
                ImageFile.LOAD_TRUNCATED_IMAGES = previous

    try:
        return lenient(ImageOps.exif_transpose, lenient(Image.open, path))
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise FillScopeInputError(name, f"'{path}' is not an image PIL can read ({type(e).__name__}: {e}).",
                                  fix) from None


def _floats(array):
    import numpy as np
    import torch

    return torch.from_numpy(np.array(array).astype(np.float32) / 255.0)


def load_image(path: str, name: str = "image"):
    """(IMAGE [1,H,W,3], the alpha mask [1,H,W] = 1 - alpha, or None when the file has no alpha)."""
    frame = open_image(path, name)
    if frame.mode == "I":
        frame = frame.point(lambda v: v * (1 / 255))
    image = _floats(frame.convert("RGB"))[None]
    if "A" in frame.getbands():
        alpha = _floats(frame.getchannel("A"))
    elif frame.mode == "P" and "transparency" in frame.info:
        alpha = _floats(frame.convert("RGBA").getchannel("A"))
    else:
        return image, None
    return image, (1.0 - alpha)[None]


def load_mask(spec: str, image_path: str, name: str = "mask"):
    """MASK [1,H,W] from a mask file's red channel (white = repaint), or "alpha": 1 - the image's alpha."""
    if spec == "alpha":
        _, alpha = load_image(image_path)
        if alpha is None:
            raise FillScopeInputError(name, f'is "alpha" but \'{image_path}\' has no alpha channel.',
                                      "give a mask file (a greyscale PNG, white = repaint), or save the image with "
                                      "the area to repaint transparent.")
        return alpha
    frame = open_image(spec, name)
    if frame.getbands() != ("R", "G", "B", "A"):
        if frame.mode == "I":
            frame = frame.point(lambda v: v * (1 / 255))
        frame = frame.convert("RGBA")
    return _floats(frame.getchannel("R"))[None]
