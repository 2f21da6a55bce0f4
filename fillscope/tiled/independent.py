"""Tiled mode `independent` (the klein document's method): each tile sampled on its own by the family's `run`,
then the tiles' images blended with ramp weights over the overlaps and pasted back into the source through the
whole image's mask (every pixel outside the mask is the source's, bit for bit). In three separable steps, so that
the tiles of one image can run in different processes (fillscope/batch/tiles.py: Ray workers run tiles, the driver
plans and blends); `run_independent` chains them here, tile after tile:

1. `plan_independent` (where the image is): the whole image's mask prepared once (invert, threshold, grow, feather:
   a grow or feather computed per crop would stop at the crop's edge), the tiles planned, and per kept tile a
   `TileWork` holding its own crops (copies: a tile sent to another process carries its pixels only);
2. `run_tile` (where the models are): the tile's crop prepared again with grow and feather 0 (a binary mask
   binarises to itself), size_mode "pad" (only a side that fits in one tile can be off the 16 px grid: it is
   padded and cropped back as the untiled run does) and the caller's masked_fill, then the family's `run` with the
   job's seed;
3. `blend_planned` (where the image is): the tiles' images blended with ramp weights, optionally the overlaps
   re-solved in the gradient domain (`poisson`), pasted back.

Memory is one tile's working set at a time (the blend holds the tiles' decoded images, 3 floats a pixel each, and
their weights); each tile encodes the prompt again (the family's `run` is the unit here).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..compositing.tiles import Tile, blend_and_paste, blend_tiles, check_tile_settings, plan_tiles, ramp_weights
from ..errors import FillScopeInputError
from ..masks import paste_back, prepare_image_and_mask
from .result import TiledResult, transformer_tokens

MASK_OPTIONS = ("invert", "threshold", "grow", "feather", "masked_fill")  # as run_tiled takes them
PER_IMAGE = ("noise", "soft_mask", "size_mode")  # keywords run_tiled refuses (whole-image tensors, a crop mode)


@dataclass
class TileWork:
    """One kept tile as a process that runs it needs it: its place (Tile) and its crops of the source [B,h,w,3]
    and of the whole image's prepared repaint mask [B,h,w] (own storage: pickling sends h x w pixels, not the
    whole image), with the threshold and masked_fill its crop is prepared with."""

    tile: Tile
    source: object
    repaint: object
    threshold: float
    masked_fill: str


@dataclass
class TilePlan:
    """The whole image's side of a tiled run: the source [B,H,W,3], the paste-back mask [B,H,W,1] of the whole
    image, the kept tiles (row-major) with one TileWork each, and the run's notes and warnings."""

    source: object
    paste_mask: object
    tiles: list
    works: list
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)


@dataclass
class TileOutput:
    """What one tile's run gives back: its image [B,h,w,3] (float, CPU) and its record (TiledResult.records)."""

    index: int
    image: object
    record: dict


def check_spread(tile: int, overlap: float, options: dict, family_kwargs: dict, tile_range=None) -> None:
    """What run_tiled checks before mode independent runs (its tile settings, mask options and refused keywords)."""
    check_tile_settings(tile, overlap, tile_range=tile_range)
    unknown = sorted(set(options) - set(MASK_OPTIONS))
    if unknown:
        raise FillScopeInputError("mask_options", f"holds {', '.join(unknown)}, which tiles do not take.",
                                  f"give only {', '.join(MASK_OPTIONS)}.")
    for name in PER_IMAGE:
        if family_kwargs.get(name) is not None:
            raise FillScopeInputError(name, "is not tiled: each tile would get the whole image's.",
                                      f"leave {name} unset for a tiled run.")


def plan_independent(image, mask, *, tile: int, overlap: float, options: dict | None = None,
                     tile_range=None) -> TilePlan:
    """Step 1: `image` IMAGE [B,H,W,C], `mask` MASK [B,H,W] (1 = repaint), `options` run_tiled's mask_options. The
    whole mask prepared once with size_mode pad (invert, threshold, grow, feather; masked_fill is per tile), the
    tiles that meet it planned, each tile's crops copied."""
    options = dict(options or {})
    threshold = options.get("threshold", 0.5)
    masked_fill = options.pop("masked_fill", "none")
    whole = prepare_image_and_mask(image, mask, size_mode="pad", model_image=False, **options)  # tiles crop `source`
    source = whole.source
    _, height, width, _ = source.shape
    repaint = whole.mask[:, 0, :height, :width]  # [B,H,W]
    tiles = plan_tiles(height, width, tile=tile, overlap=overlap, mask=repaint, tile_range=tile_range)
    notes = [f"{len(tiles)} tile(s) of {tile} px, overlap {overlap:g}, mode independent"] + whole.notes
    tile_threshold = 0.5 if threshold > 0 else 0.0  # a binarised mask binarises to itself; a soft one stays soft
    works = [TileWork(t, source[:, t.box[1]:t.box[3], t.box[0]:t.box[2]].clone(),
                      repaint[:, t.box[1]:t.box[3], t.box[0]:t.box[2]].clone(), tile_threshold, masked_fill)
             for t in tiles]
    return TilePlan(source, whole.paste_mask, tiles, works, notes, whole.warnings)


def run_tile(pipeline, stack: dict, prompt: str, work: TileWork, *, seed: int, steps: int, callback=None,
             observe=None, **family_kwargs) -> TileOutput:
    """Step 2: the tile's crop prepared (grow and feather 0, size_mode pad, the job's masked_fill) and run through
    `pipeline.run` with the job's seed. `observe` sees the tile's tensors as "tile {index} {name}"; `callback(step,
    total)` is the family's, for this tile alone."""
    t = work.tile
    seen = {}

    def tile_observe(name, tensor):
        if name == "transformer.input" and tensor is not None:
            seen["shape"] = list(tensor.shape)
        if observe is not None:
            observe(f"tile {t.index} {name}", tensor)

    crop = prepare_image_and_mask(work.source, work.repaint, threshold=work.threshold, size_mode="pad",
                                  masked_fill=work.masked_fill)
    started = time.perf_counter()
    done = pipeline.run(stack, prompt, crop, steps=steps, seed=seed, callback=callback, observe=tile_observe,
                        **family_kwargs)
    seconds = time.perf_counter() - started
    shape = seen.get("shape")
    record = {"index": t.index, "box": t.box, "row": t.row, "col": t.col, "repaint_pixels": crop.repaint_pixels,
              "sampled": shape is not None, "tokens": transformer_tokens(shape, stack) if shape else 0,
              "transformer_input": shape, "seconds": round(seconds, 3)}
    return TileOutput(t.index, done.image, record)


def blend_planned(plan: TilePlan, outputs: list, *, poisson: bool = False) -> TiledResult:
    """Step 3: the tiles' outputs (one per plan.tiles, in any order) blended with ramp weights into the whole image,
    with `poisson` the overlaps re-solved in the gradient domain (compositing/tile_seams.poisson_seams: each edge
    keeps the gradient of the tile that weighs most there, the ramp blend around them the boundary; one tile:
    nothing to solve), pasted back through its mask; the records in the plan's tile order."""
    if not plan.tiles:
        return TiledResult(plan.source.clone(), [], [], plan.notes, plan.warnings)
    by_index = {o.index: o for o in outputs}
    missing = [t.index for t in plan.tiles if t.index not in by_index]
    if missing:
        raise FillScopeInputError("tiles", f"tile(s) {missing} gave no image.", "run every planned tile.")
    _, height, width, _ = plan.source.shape
    images = [by_index[t.index].image for t in plan.tiles]
    weights = ramp_weights(plan.tiles, height, width)
    notes = list(plan.notes)
    if not (poisson and len(plan.tiles) > 1):  # the blend and the paste-back in one copy of the image
        return TiledResult(blend_and_paste(plan.source, plan.tiles, images, weights, plan.paste_mask), plan.tiles,
                           [by_index[t.index].record for t in plan.tiles], notes, plan.warnings)
    blended = blend_tiles(plan.source, plan.tiles, images, weights)
    if poisson:
        from ..compositing.tile_seams import poisson_seams

        started = time.perf_counter()
        blended = poisson_seams(blended, plan.tiles, images, weights, plan.paste_mask[..., 0])
        notes.append(f"poisson seams: the overlaps re-solved in the gradient domain "
                     f"({time.perf_counter() - started:.2f} s)")
    return TiledResult(paste_back(blended, plan.source, plan.paste_mask), plan.tiles,
                       [by_index[t.index].record for t in plan.tiles], notes, plan.warnings)


def run_independent(pipeline, stack: dict, prompt: str, image, mask, *, tile: int, overlap: float, seed: int,
                    steps: int, callback=None, observe=None, options: dict | None = None, tile_range=None,
                    poisson: bool = False, **family_kwargs) -> TiledResult:
    """Mode `independent` in this process (run_tiled has checked the settings): the three steps, tile after tile.
    `callback` counts tiles x steps (a tile without repaint pixels counted whole; a raising callback stops the run
    between two steps); `observe` sees each tile's tensors as "tile {index} {name}"."""
    plan = plan_independent(image, mask, tile=tile, overlap=overlap, options=options, tile_range=tile_range)
    state = {"done": 0, "per_tile": None}
    total = len(plan.works)

    def tile_callback(step, steps_per_tile):
        state["per_tile"] = steps_per_tile
        if callback is not None:
            callback(state["done"] * steps_per_tile + step, total * steps_per_tile)

    outputs = []
    for k, work in enumerate(plan.works):
        out = run_tile(pipeline, stack, prompt, work, seed=seed, steps=steps, callback=tile_callback,
                       observe=observe, **family_kwargs)
        outputs.append(out)
        state["done"] = k + 1
        if not out.record["sampled"] and callback is not None:  # its run skipped sampling: counted whole
            per_tile = state["per_tile"] or steps
            callback((k + 1) * per_tile, total * per_tile)
    return blend_planned(plan, outputs, poisson=poisson)


__all__ = ["TileOutput", "TilePlan", "TileWork", "blend_planned", "check_spread", "plan_independent", "run_tile",
           "run_independent"]
