"""Large images by overlapping tiles (issue 23), around the three inpaint families: FLUX.1 Fill, SD3 ControlNet
inpaint and FLUX.2 [klein] inpaint.

`run_tiled` checks the settings once and hands the run to its mode's module:
- independent.py: each tile sampled on its own by the family's `run` (the klein document's method), blended with
  ramp weights over the overlaps, pasted back through the whole image's mask;
- shared_flux_fill.py: mode `shared` (MultiDiffusion) for FLUX.1 Fill: one sampler over the whole latent grid whose
  denoiser averages the overlapping windows' velocities every step.
Tiles are planned by compositing/tiles.plan_tiles: only those that intersect the mask grown by the overlap. Every
pixel outside the mask is the source's, bit for bit, and an image that fits in one tile gives exactly the untiled
`run` + paste-back in both modes. result.py holds what a run returns.
"""

from __future__ import annotations

from ..compositing.tiles import Tile, check_tile_settings
from ..errors import FillScopeInputError
from ..pipelines import PIPELINES, flux_fill, klein, sd3_controlnet
from .independent import run_independent
from .shared_flux_fill import run_shared as run_shared_flux_fill
from .shared_flux_fill import token_windows, windowed_flux_denoiser
from .shared_klein import run_shared as run_shared_klein
from .shared_sd3 import run_shared as run_shared_sd3
from .result import TiledResult

MODES = ("independent", "shared")
# what a family is called here: the pipelines' own names (PIPELINES, FAMILY) and the manifest's "sd3-controlnet"
FAMILIES = {**PIPELINES, **{p.FAMILY: p for p in (flux_fill, sd3_controlnet, klein)}, "sd3-controlnet": sd3_controlnet}
MASK_OPTIONS = ("invert", "threshold", "grow", "feather", "masked_fill")
# mode shared, one module a family: run_shared(stack, prompt, image, mask, *, tile, overlap, seed, steps, callback,
# observe, options, tile_range, **family_kwargs) -> TiledResult
SHARED = {
    flux_fill: run_shared_flux_fill,
    klein: run_shared_klein,
    sd3_controlnet: run_shared_sd3,
}


# whole-image copies a tiled run holds at its peak beside its input: the result and the tiles' blend over their extent
# (and the masks, a third of an image each); bench/bench_image_copies.py measured 1.71 at 8192x8192 (tiny FLUX Fill,
# CPU, 2026-12-07; bench/RESULTS.md)
WHOLE_IMAGE_COPIES = 2


def check_room_for_image(image, input_name: str = "image") -> None:
    """Refuse, before anything is prepared, an image whose tiled run would need more of the host's memory than is
    available (fillscope.models.available_memory, MEMORY_MARGIN of it): its size, the memory it needs and what is
    free, and the fix. A meta or non-tensor image passes."""
    import torch

    from ..models import MEMORY_MARGIN, available_memory

    if not isinstance(image, torch.Tensor) or image.device.type == "meta" or image.dim() < 3:
        return
    batch, height, width = (1, *image.shape[:2]) if image.dim() == 3 else image.shape[:3]
    one = batch * height * width * 3 * 4  # float32 RGB
    need = WHOLE_IMAGE_COPIES * one
    available, where = available_memory("cpu")
    if available is None or need <= MEMORY_MARGIN * available:
        return
    gib = 2**30
    shown = f"{width}x{height}" + (f" (a batch of {batch})" if batch > 1 else "")
    raise FillScopeInputError(
        input_name,
        f"is {shown}: {one / gib:.2f} GiB as float32 RGB, and a tiled run holds {WHOLE_IMAGE_COPIES} more copies of it "
        f"(the tiles' blend and the result), {need / gib:.2f} GiB of {where}; only {available / gib:.2f} GiB is "
        f"available (FillScope keeps {1 - MEMORY_MARGIN:.0%} free), so the run did not start.",
        "scale the image down (ImageScale), or crop the part to repaint first (Crop For Inpaint, then Paste Back), or "
        "free memory (close other programs, unload other models).")


def _pipeline(family: str):
    if family not in FAMILIES:
        raise FillScopeInputError("family", f"{family!r} is no family tiled sampling runs.",
                                  f"use one of {', '.join(sorted(FAMILIES))}.")
    return FAMILIES[family]


def run_tiled(family: str, stack: dict, prompt: str, image, mask, *, tile: int, overlap: float,
              mode: str = "independent", seed: int, steps: int, callback=None, observe=None,
              mask_options: dict | None = None, tile_range=None, poisson: bool = False,
              **family_kwargs) -> TiledResult:
    """The family's inpaint over overlapping tiles (module docstring). `image` IMAGE [B,H,W,C], `mask` MASK [B,H,W]
    (1 = repaint). `mask_options`: prepare_image_and_mask's invert, threshold, grow, feather, masked_fill, applied
    as the untiled run applies them. `callback(step, total)` counts tiles x steps (a callback that raises stops the
    run between two steps: ComfyUI's interrupt); `observe(name, tensor)` sees each tile's boundary tensors as
    "tile {index} {name}". `tile_range`: the range `tile` is checked against (bounds.TILED's by default; tiny test
    models run with smaller tiles). `family_kwargs` go to the family's `run` (guidance, cfg, reference, ...).
    Mode shared (SHARED: the family's run_shared; FLUX Fill's): `family_kwargs` are guidance, denoise, timings and place; the
    callback counts windows x steps; `vae_tile` (mode shared, all three families; px, 256..4096, a multiple of 16,
    1024 by default) tiles the whole image's VAE encode and decode (vae_tiles) so their memory stays that of one
    tile: an image up to vae_tile a side is encoded and decoded whole, as untiled; observe sees the whole run's tensors, the sampler's denoiser input as
    "denoiser.input" and each window's first transformer call as "tile {index} transformer.input"/".output".
    `poisson` (mode independent only): the overlaps re-solved in the gradient domain after the ramp blend
    (compositing/tile_seams.poisson_seams); mode shared refuses it: its windows are averaged every step, so there is
    no tile seam to solve."""
    pipeline = _pipeline(family)
    missing = [name for name in pipeline.COMPONENTS if name not in stack]
    if missing:
        raise FillScopeInputError("stack", f"has no {', '.join(missing)}: it is not a {family} stack.",
                                  f"load the family's {', '.join(pipeline.COMPONENTS)}.")
    if mode not in MODES:
        raise FillScopeInputError("mode", f"unknown mode {mode!r}.", f"use one of {', '.join(MODES)}.")
    if mode == "shared" and poisson:
        raise FillScopeInputError("poisson", "mode 'shared' averages the windows every step: there is no tile seam "
                                  "to solve.", "leave poisson off in mode 'shared', or use mode 'independent'.")
    if mode != "shared" and "vae_tile" in family_kwargs:
        raise FillScopeInputError("vae_tile", "mode 'independent' encodes and decodes each tile on its own (at most "
                                  "one tile a side): there is no whole-image VAE call to tile.",
                                  "leave vae_tile unset, or use mode 'shared'.")
    if mode == "shared" and pipeline not in SHARED:
        raise FillScopeInputError("mode", f"'shared' is not built for {family} yet (issue 23).",
                                  "use mode 'independent' for this family.")
    check_tile_settings(tile, overlap, tile_range=tile_range)  # before the whole image is prepared
    check_room_for_image(image)
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
    if mode == "shared":
        return SHARED[pipeline](stack, prompt, image, mask, tile=tile, overlap=overlap, seed=seed, steps=steps,
                                callback=callback, observe=observe, options=options, tile_range=tile_range,
                                **family_kwargs)
    return run_independent(pipeline, stack, prompt, image, mask, tile=tile, overlap=overlap, seed=seed,
                           steps=steps, callback=callback, observe=observe, options=options, tile_range=tile_range,
                           poisson=poisson, **family_kwargs)


__all__ = ["MODES", "FAMILIES", "Tile", "TiledResult", "check_room_for_image", "run_tiled", "token_windows", "windowed_flux_denoiser"]
