"""Tiled VAE encode and decode (issue 23): the same inputs, outputs and shapes as vae.encode / vae.decode, with the
VAE's working set bounded by one tile, so that a large image (8192 x 6144 px and more) encodes and decodes in the
memory of a 1024 px one. For the three families' VAEs alike (FLUX.1 and SD3 AutoencoderKL at /8, the FLUX.2 VAE of
klein at /16 in its normalised 2x2 patches): every tile goes through vae.encode / vae.decode, so scale, shift,
patchify and BatchNorm are applied exactly as untiled, and ComfyUI's wrapped VAE (nodes/native_vae.py) tiles too.

How (both directions):
- the tiles are planned on the latent grid (compositing.tiles.plan_tiles, in latent cells: every tile's pixel box
  starts on a multiple of the downscale s, so its encoder sees the same stride phase as the whole image's);
- each tile is run with `context` extra pixels (encode) or context / s extra latent cells (decode) on every side
  that lies inside the image, and only its centre, the planned box, is kept: the convolutions near the centre's
  edge then read the same neighbours they read in the whole image, not zero padding;
- the centres are blended with compositing.tiles.ramp_weights (computed on the latent grid; for decode each
  latent cell's weight is held over its s x s pixels), which sum to 1 wherever tiles overlap and are exactly 1
  where one tile alone covers.

What stays different from the whole-image result: the VAE's GroupNorm layers normalise with one tile's statistics
instead of the whole image's, and its mid-block self-attention (FLUX.1, SD3 and FLUX.2 all have one) attends
within the tile plus its context only. Both are global operations no tiling can reproduce exactly (diffusers'
own tiled_encode / tiled_decode have the same property); the context margin and the ramp blend keep the result
close and seam-free. An image that fits in one tile is passed to the untiled call as it is: the result is exact.

Memory: one tile of (tile + 2 x context) px a side runs at a time; the result (and, for decode, the float32
accumulator of the blend) are whole-image tensors, as the untiled call's are.
"""

from __future__ import annotations

from . import bounds
from . import vae as vae_ops
from .compositing.tiles import check_tile_settings, plan_tiles, ramp_weights
from .errors import FillScopeInputError

DEFAULT_TILE = 1024  # px: FLUX's native size; the encoder / decoder's working set at 1024 px is what untiled uses
DEFAULT_OVERLAP = 0.125  # fraction of a tile blended with its neighbour (the blend hides what context leaves)
DEFAULT_CONTEXT = 64  # px a side run but not kept: 8 latent cells of FLUX.1 / SD3, 4 of klein's /16 patches
ANY_LATENT_TILE = bounds.Range(1, 1 << 30)  # plan_tiles's own check in latent cells; the px tile is checked here


def latent_tiles(vae, height: int, width: int, *, tile: int, overlap: float, context: int | None,
                 tile_range=None) -> tuple:
    """The plan for an image of height x width px on `vae`'s latent grid: (s, tiles, context_cells), where s is the
    latent downscale (FLUX.1 / SD3: 8, klein: 16), `tiles` the plan_tiles boxes in latent cells (x0, y0, x1, y1)
    over [height / s, width / s], and context_cells = context / s. Checked before any model runs: `tile` (px, a
    multiple of s, within bounds.TILED['tile'] or `tile_range`), `overlap`, `context` (px, a multiple of s, >= 0;
    None = DEFAULT_CONTEXT rounded up to s) and, for more than one tile, sides that are multiples of s."""
    s = vae_ops.latent_format(vae).downscale
    check_tile_settings(tile, overlap, multiple=s, tile_range=tile_range)
    if context is None:
        context = -(-DEFAULT_CONTEXT // s) * s
    if isinstance(context, bool) or not isinstance(context, int) or context < 0 or context % s:
        raise FillScopeInputError("context", f"is {context!r}; it must be a whole number of pixels, 0 or more, and a "
                                  f"multiple of the VAE's downscale {s}.",
                                  f"set context to {DEFAULT_CONTEXT // s * s or s} (or leave it unset).")
    fits = height <= tile and width <= tile
    if not fits and (height % s or width % s):
        raise FillScopeInputError("image", f"is {width}x{height} px; a tiled VAE needs sides that are multiples of "
                                  f"{s} ({vae_ops.describe_widths(vae)}).",
                                  "pad or crop the image to the model grid first (masks.prepare_image_and_mask).")
    h, w = -(-height // s), -(-width // s)
    tiles = plan_tiles(h, w, tile=tile // s, overlap=overlap, multiple=1, tile_range=ANY_LATENT_TILE)
    return s, tiles, context // s


def _with_context(box: tuple, cells: int, h: int, w: int) -> tuple:
    """`box` (x0, y0, x1, y1) grown by `cells` on every side, kept inside [0, w] x [0, h]."""
    x0, y0, x1, y1 = box
    return max(0, x0 - cells), max(0, y0 - cells), min(w, x1 + cells), min(h, y1 + cells)


def _shape_only(vae, tensor, call):
    """`call` itself, or on the meta device (no values: equal crop shapes give equal outputs) `call` memoised by
    the crop's shape, so a full-size plan (63 tiles at 8192 x 6144, 1024 px) runs the model once per distinct
    crop shape (interior, edges, corners)."""
    if getattr(vae, "device", None) != "meta" and tensor.device.type != "meta":
        return call
    seen = {}

    def once_per_shape(crop):
        if tuple(crop.shape) not in seen:
            seen[tuple(crop.shape)] = call(crop)
        return seen[tuple(crop.shape)]

    return once_per_shape


def _check_4d(tensor, input_name: str, what: str, channels: int | None = None) -> None:
    if getattr(tensor, "dim", lambda: 0)() != 4 or (channels is not None and tensor.shape[1] != channels):
        shape = list(tensor.shape) if hasattr(tensor, "shape") else type(tensor).__name__
        raise FillScopeInputError(input_name, f"is {shape}; {what}.", f"give {what}.")


def encode_tiled(vae, pixels, *, tile: int = DEFAULT_TILE, overlap: float = DEFAULT_OVERLAP,
                 context: int | None = None, callback=None, tile_range=None):
    """vae.encode by tiles: pixels [B,3,H,W] in [-1,1] (H, W multiples of the downscale s unless the image fits in
    one tile) -> model latents [B,C,H/s,W/s] in the VAE's dtype on its device, as vae.encode returns them
    (published FLUX.1 / SD3: [B,16,H/8,W/8]; klein: [B,128,H/16,W/16]).

    `tile`: the kept tile's side in px (a multiple of s); `overlap`: the fraction of it blended with a neighbour;
    `context`: px a side encoded around each tile and dropped (module docstring); `callback(done, total)` after
    each tile; `tile_range`: the range `tile` is checked against (tiny test models: smaller tiles than
    bounds.TILED allows). An image of at most `tile` px a side is vae.encode(pixels) itself, bit for bit. On the
    meta device every tile runs on meta: the result has the right shape and no storage."""
    import torch

    _check_4d(pixels, "image", "an image batch [B,3,H,W] in [-1,1]", channels=3)
    height, width = int(pixels.shape[-2]), int(pixels.shape[-1])
    s, tiles, cells = latent_tiles(vae, height, width, tile=tile, overlap=overlap, context=context,
                                   tile_range=tile_range)
    if len(tiles) == 1:
        out = vae_ops.encode(vae, pixels)
        if callback is not None:
            callback(1, 1)
        return out
    h, w = height // s, width // s
    weights = ramp_weights(tiles, h, w)  # [th, tw] float32 per tile, on the latent grid
    run = _shape_only(vae, pixels, lambda crop: vae_ops.encode(vae, crop))
    out = None
    with torch.inference_mode():
        for done, (t, weight) in enumerate(zip(tiles, weights), start=1):
            cx0, cy0, cx1, cy1 = _with_context(t.box, cells, h, w)
            piece = run(pixels[:, :, cy0 * s:cy1 * s, cx0 * s:cx1 * s])  # [B,C,cy1-cy0,cx1-cx0]
            x0, y0, x1, y1 = t.box
            centre = piece[:, :, y0 - cy0:y1 - cy0, x0 - cx0:x1 - cx0]
            if out is None:
                out = torch.zeros(piece.shape[0], piece.shape[1], h, w, device=piece.device, dtype=torch.float32)
            out[:, :, y0:y1, x0:x1] += centre.float() * weight.to(piece.device)
            if callback is not None:
                callback(done, len(tiles))
        return out.to(piece.dtype)


def decode_tiled(vae, latents, *, tile: int = DEFAULT_TILE, overlap: float = DEFAULT_OVERLAP,
                 context: int | None = None, callback=None, tile_range=None, out_device=None):
    """vae.decode by tiles: model latents [B,C,h,w] (C the VAE's latent_format channels) -> the decoder's output
    [B,3,s*h,s*w] in [-1,1] in the VAE's dtype, as vae.decode returns it (published FLUX.1 / SD3: [B,16,h,w] ->
    [B,3,8h,8w]; klein: [B,128,h,w] -> [B,3,16h,16w]).

    `tile`, `overlap`, `context`, `callback`, `tile_range` as encode_tiled's (tile and context in output px,
    multiples of s); `out_device`: where the whole image is assembled (default: the VAE's device, as vae.decode;
    "cpu" keeps only one tile on the accelerator). Latents of at most tile / s cells a side are vae.decode(latents)
    itself, bit for bit. On the meta device: the right shape, no storage."""
    import torch

    fmt = vae_ops.latent_format(vae)
    _check_4d(latents, "latents", f"model latents [B,{fmt.channels},h,w] of {vae_ops.describe(vae)}",
              channels=fmt.channels)
    s = fmt.downscale
    h, w = int(latents.shape[-2]), int(latents.shape[-1])
    _, tiles, cells = latent_tiles(vae, h * s, w * s, tile=tile, overlap=overlap, context=context,
                                   tile_range=tile_range)
    if len(tiles) == 1:
        out = vae_ops.decode(vae, latents)
        if callback is not None:
            callback(1, 1)
        return out if out_device is None else out.to(out_device)
    weights = ramp_weights(tiles, h, w)  # latent grid; each cell's weight held over its s x s pixels below
    run = _shape_only(vae, latents, lambda crop: vae_ops.decode(vae, crop))
    out = None
    with torch.inference_mode():
        for done, (t, weight) in enumerate(zip(tiles, weights), start=1):
            cx0, cy0, cx1, cy1 = _with_context(t.box, cells, h, w)
            piece = run(latents[:, :, cy0:cy1, cx0:cx1])  # [B,3,s*(cy1-cy0),s*(cx1-cx0)]
            x0, y0, x1, y1 = t.box
            centre = piece[:, :, (y0 - cy0) * s:(y1 - cy0) * s, (x0 - cx0) * s:(x1 - cx0) * s]
            if out is None:
                device = piece.device if out_device is None else torch.device(out_device)
                out = torch.zeros(piece.shape[0], piece.shape[1], h * s, w * s, device=device, dtype=torch.float32)
            pixel_weight = weight.repeat_interleave(s, 0).repeat_interleave(s, 1).to(out.device)
            out[:, :, y0 * s:y1 * s, x0 * s:x1 * s] += centre.to(out.device).float() * pixel_weight
            if callback is not None:
                callback(done, len(tiles))
        return out.to(piece.dtype)


__all__ = ["DEFAULT_CONTEXT", "DEFAULT_OVERLAP", "DEFAULT_TILE", "decode_tiled", "encode_tiled", "latent_tiles"]
