"""Large images by overlapping tiles (issue 23), around the three inpaint families: FLUX.1 Fill, SD3 ControlNet
inpaint and FLUX.2 [klein] inpaint.

`run_tiled` plans the tiles over the image (compositing/tiles.plan_tiles: only those that intersect the mask grown
by the overlap), runs the family's own `run` on each tile's crop of the image and mask with the same seed, blends
the tiles' images with ramp weights over the overlaps (tiles.ramp_weights, blend_tiles) and pastes the blend back
into the source through the whole image's mask (masks.paste_back): every pixel outside the mask is the source's,
bit for bit, and an image that fits in one tile gives exactly the untiled `run` + paste-back.

The mask is prepared once for the whole image (invert, threshold, grow, feather: a grow or feather computed per
crop would stop at the crop's edge), then each tile's crop of the prepared mask goes to prepare_image_and_mask
again with grow and feather 0 (a binary mask binarises to itself), size_mode "pad" (only a side that fits in one
tile can be off the 16 px grid: it is padded and cropped back as the untiled run does) and the caller's
masked_fill (it hides the masked pixels of each tile's view).

Modes: `independent` (each tile sampled on its own, the klein document's method); `shared` (MultiDiffusion: every
step the overlapping windows averaged) is not built yet (issue 23).

Memory: one tile's working set at a time (the blend holds the tiles' decoded images, 3 floats a pixel each, and
their weights); each tile encodes the prompt again (the family's `run` is the unit here).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .compositing.tiles import Tile, blend_tiles, check_tile_settings, plan_tiles, ramp_weights
from .errors import FillScopeInputError
from .masks import paste_back, prepare_image_and_mask
from .pipelines import PIPELINES, flux_fill, klein, sd3_controlnet

MODES = ("independent", "shared")
# what a family is called here: the pipelines' own names (PIPELINES, FAMILY) and the manifest's "sd3-controlnet"
FAMILIES = {**PIPELINES, **{p.FAMILY: p for p in (flux_fill, sd3_controlnet, klein)}, "sd3-controlnet": sd3_controlnet}
MASK_OPTIONS = ("invert", "threshold", "grow", "feather", "masked_fill")


@dataclass
class TiledResult:
    """The tiled run's image [B,H,W,3] at the input's size, the kept tiles and one record per tile (in the order
    run): index, box (x0, y0, x1, y1), row, col, repaint pixels in the tile, whether the transformer ran, the token
    count of its input (per image: FLUX Fill / klein: the sequence, klein's reference tokens included; SD3: latent
    positions / patch^2), its shape, and the tile's seconds."""

    image: object
    tiles: list
    records: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)


def _pipeline(family: str):
    if family not in FAMILIES:
        raise FillScopeInputError("family", f"{family!r} is no family tiled sampling runs.",
                                  f"use one of {', '.join(sorted(FAMILIES))}.")
    return FAMILIES[family]


def _tokens(shape, stack) -> int:
    """Tokens per image of the transformer's input: [B,N,C] -> N; SD3's latents [B,C,h,w] -> h*w / patch^2."""
    if len(shape) == 3:
        return int(shape[1])
    patch = int(stack["transformer"].config.get("patch_size", 2))
    return int(shape[2]) * int(shape[3]) // (patch * patch)


def run_tiled(family: str, stack: dict, prompt: str, image, mask, *, tile: int, overlap: float,
              mode: str = "independent", seed: int, steps: int, callback=None, observe=None,
              mask_options: dict | None = None, tile_range=None, **family_kwargs) -> TiledResult:
    """The family's inpaint over overlapping tiles (module docstring). `image` IMAGE [B,H,W,C], `mask` MASK [B,H,W]
    (1 = repaint). `mask_options`: prepare_image_and_mask's invert, threshold, grow, feather, masked_fill, applied
    as the untiled run applies them. `callback(step, total)` counts tiles x steps (a callback that raises stops the
    run between two steps: ComfyUI's interrupt); `observe(name, tensor)` sees each tile's boundary tensors as
    "tile {index} {name}". `tile_range`: the range `tile` is checked against (bounds.TILED's by default; tiny test
    models run with smaller tiles). `family_kwargs` go to the family's `run` (guidance, cfg, reference, ...)."""
    pipeline = _pipeline(family)
    if mode not in MODES:
        raise FillScopeInputError("mode", f"unknown mode {mode!r}.", f"use one of {', '.join(MODES)}.")
    if mode == "shared":
        raise NotImplementedError("tiled sampling mode 'shared' (MultiDiffusion: the overlapping windows averaged "
                                  "every step) is not built yet (issue 23); use mode 'independent'.")
    check_tile_settings(tile, overlap, tile_range=tile_range)  # before the whole image is prepared
    options = dict(mask_options or {})
    unknown = sorted(set(options) - set(MASK_OPTIONS))
    if unknown:
        raise FillScopeInputError("mask_options", f"holds {', '.join(unknown)}, which tiles do not take.",
                                  f"give only {', '.join(MASK_OPTIONS)}.")
    for name in ("noise", "soft_mask"):  # whole-image tensors a tile's run would read at the wrong size
        if family_kwargs.get(name) is not None:
            raise FillScopeInputError(name, "is not tiled yet (issue 23): each tile would get the whole image's.",
                                      f"leave {name} unset for a tiled run.")
    if "size_mode" in family_kwargs:
        raise FillScopeInputError("size_mode", "tiles are always prepared with size_mode pad (a crop would leave "
                                  "pixels no tile samples).", "leave size_mode unset.")
    threshold = options.get("threshold", 0.5)
    masked_fill = options.pop("masked_fill", "none")
    # the whole image's mask, once (masked_fill is per tile: the model's view of each crop)
    whole = prepare_image_and_mask(image, mask, size_mode="pad", **options)
    source = whole.source  # [B,H,W,3], the exact input pixels paste-back keeps
    b, height, width, _ = source.shape
    repaint = whole.mask[:, 0, :height, :width]  # [B,H,W]: binarised / grown as the untiled run's
    tiles = plan_tiles(height, width, tile=tile, overlap=overlap, mask=repaint, tile_range=tile_range)
    notes = [f"{len(tiles)} tile(s) of {tile} px, overlap {overlap:g}, mode {mode}"] + whole.notes
    if not tiles:
        return TiledResult(source.clone(), [], [], notes, whole.warnings)

    state = {"done": 0, "per_tile": None}

    def tile_callback(step, total):
        state["per_tile"] = total
        if callback is not None:
            callback(state["done"] * total + step, len(tiles) * total)

    records, images = [], []
    for k, t in enumerate(tiles):
        x0, y0, x1, y1 = t.box
        seen = {}

        def tile_observe(name, tensor, _index=t.index, _seen=seen):
            if name == "transformer.input" and tensor is not None:
                _seen["shape"] = list(tensor.shape)
            if observe is not None:
                observe(f"tile {_index} {name}", tensor)

        crop = prepare_image_and_mask(source[:, y0:y1, x0:x1], repaint[:, y0:y1, x0:x1],
                                      threshold=0.5 if threshold > 0 else 0.0, size_mode="pad",
                                      masked_fill=masked_fill)
        started = time.perf_counter()
        done = pipeline.run(stack, prompt, crop, steps=steps, seed=seed, callback=tile_callback,
                            observe=tile_observe, **family_kwargs)
        seconds = time.perf_counter() - started
        images.append(done.image)
        state["done"] = k + 1
        shape = seen.get("shape")
        if shape is None and callback is not None:  # no repaint pixel in the tile: its run skipped sampling
            per_tile = state["per_tile"] or steps
            callback((k + 1) * per_tile, len(tiles) * per_tile)
        records.append({"index": t.index, "box": t.box, "row": t.row, "col": t.col,
                        "repaint_pixels": crop.repaint_pixels, "sampled": shape is not None,
                        "tokens": _tokens(shape, stack) if shape else 0, "transformer_input": shape,
                        "seconds": round(seconds, 3)})
    blended = blend_tiles(source, tiles, images, ramp_weights(tiles, height, width))
    return TiledResult(paste_back(blended, source, whole.paste_mask), tiles, records, notes, whole.warnings)


__all__ = ["MODES", "FAMILIES", "Tile", "TiledResult", "run_tiled"]
