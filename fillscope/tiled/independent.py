"""Tiled mode `independent` (the klein document's method): each tile sampled on its own by the family's `run`,
then the tiles' images blended with ramp weights over the overlaps and pasted back into the source through the
whole image's mask (every pixel outside the mask is the source's, bit for bit).

The mask is prepared once for the whole image (invert, threshold, grow, feather: a grow or feather computed per
crop would stop at the crop's edge), then each tile's crop of the prepared mask goes to prepare_image_and_mask
again with grow and feather 0 (a binary mask binarises to itself), size_mode "pad" (only a side that fits in one
tile can be off the 16 px grid: it is padded and cropped back as the untiled run does) and the caller's
masked_fill (it hides the masked pixels of each tile's view). Memory is one tile's working set at a time (the blend
holds the tiles' decoded images, 3 floats a pixel each, and their weights); each tile encodes the prompt again
(the family's `run` is the unit here).
"""

from __future__ import annotations

import time

from ..compositing.tiles import blend_tiles, plan_tiles, ramp_weights
from ..masks import paste_back, prepare_image_and_mask
from .result import TiledResult, transformer_tokens


def run_independent(pipeline, stack: dict, prompt: str, image, mask, *, tile: int, overlap: float, mode: str,
                    seed: int, steps: int, callback, observe, options: dict, tile_range, **family_kwargs) -> TiledResult:
    """Mode `independent` (fillscope/tiled/__init__.py): the family's own `run` on each tile's crop with the same
    seed, the tiles' images blended with ramp weights, pasted back through the whole image's mask."""
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
                        "tokens": transformer_tokens(shape, stack) if shape else 0, "transformer_input": shape,
                        "seconds": round(seconds, 3)})
    blended = blend_tiles(source, tiles, images, ramp_weights(tiles, height, width))
    return TiledResult(paste_back(blended, source, whole.paste_mask), tiles, records, notes, whole.warnings)


__all__ = ["run_independent"]
