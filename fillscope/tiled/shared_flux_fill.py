"""Tiled mode `shared` for FLUX.1 Fill (MultiDiffusion, Bar-Tal et al. 2023): one sampler run over the whole latent
grid (sample_flux_fill: its schedule, seeded noise, guidance and Euler steps as untiled) whose denoiser is
`windowed_flux_denoiser`: every step it cuts the whole grid's tokens into the windows of plan_tiles (planned on the
model grid, so every window lies on the token grid), runs FillScope's transformer on each window that meets the
grown mask (each seen as a tile-sized image: window-local positions) and averages the windows' velocities with
ramp weights at token resolution, so neighbouring tiles agree while they are sampled. The prompt is encoded once;
the whole image's condition is encoded and the result decoded by the tiled VAE (vae_tiles, tiles of `vae_tile` px:
an image up to vae_tile a side is one untiled VAE call, bit for bit); the transformer's input is one window's
tokens at a time.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

from .. import bounds
from .. import vae as vae_ops
from ..compositing.tiles import Tile, plan_tiles, ramp_weights
from ..decode import decode_to_image
from ..errors import FillScopeInputError
from ..masks import paste_back, prepare_image_and_mask
from ..observe import stage
from ..pipelines import flux_fill
from ..sampling import ExternalDenoiser
from ..specs import FLUX_PATCH, flux_image_ids
from ..vae_tiles import decode_tiled, encode_tiled
from .result import TiledResult, drop_single_process_options, schedule_counter, window_records

VAE_TILE = 1024  # px: the shared modes' default VAE tile; an image up to this a side is encoded / decoded whole
VAE_OVERLAP = 0.125  # vae_tiles' own default blend
VAE_TILE_MULTIPLE = 16  # px: every family's token side (FLUX.1 / SD3 8 px x 2x2 patch, klein's 16 px patch)


def tiled_vae_calls(vae, vae_tile) -> tuple:
    """(encode, decode) for a shared mode's whole-image condition and result: vae_tiles.encode_tiled / decode_tiled
    with tiles of `vae_tile` px (pixels [B,3,H,W] -> latents [B,C,H/s,W/s] and back, as vae.encode / vae.decode),
    so the VAE's working set is one tile (+ its context) whatever the image's size; the decode assembles the whole
    image on the CPU (decode_to_image moves it there anyway), on meta on the meta device. `vae_tile` is checked
    against bounds.TILED['tile'] and a multiple of 16 px (and of the VAE's downscale), refused by name before
    anything runs."""
    problem = bounds.number_problem(vae_tile, bounds.TILED["tile"])
    multiple = math.lcm(VAE_TILE_MULTIPLE, vae_ops.latent_format(vae).downscale)  # 16 for all published VAEs
    if problem or vae_tile % multiple:
        raise FillScopeInputError("vae_tile", f"{vae_tile!r} {problem or f'is not a multiple of {multiple} px'}.",
                                  f"set vae_tile to a multiple of {multiple} from {bounds.TILED['tile']} px "
                                  f"({VAE_TILE} by default: an image up to that size a side is encoded whole).")
    vae_tile = bounds.whole_value(vae_tile)  # 1024.0 (a whole number) -> 1024: tiles are whole pixels
    out_device = None if str(getattr(vae, "device", "")) == "meta" else "cpu"
    return (functools.partial(encode_tiled, tile=vae_tile, overlap=VAE_OVERLAP),
            functools.partial(decode_tiled, tile=vae_tile, overlap=VAE_OVERLAP, out_device=out_device))


def token_windows(tiles: list, token_px: int) -> list:
    """The tiles' boxes in token units (pixels / token_px): the windows the shared mode cuts from the token grid.
    plan_tiles on the model grid puts every box on that grid; a box off it is refused (it would cut a token)."""
    out = []
    for t in tiles:
        if any(v % token_px for v in t.box):
            raise FillScopeInputError("tiles", f"tile {t.index}'s box {t.box} is not on the {token_px} px token grid.",
                                      "plan the tiles on the model grid (its sides are multiples of one token).")
        out.append(Tile(t.index, tuple(v // token_px for v in t.box), t.row, t.col))
    return out


def windowed_flux_denoiser(transformer, text, windows: list, token_grid: tuple, *, on_call=None):
    """FLUX Fill's denoiser over overlapping windows (MultiDiffusion), as an ExternalDenoiser for sample_flux_fill:
    `call(tokens, t, guidance, text, grid)` gets the whole latent grid's tokens [B,N,384] (N = th x tw tokens, row
    major, `token_grid` = (th, tw)); each window of `windows` (Tiles in token units, token_windows) is cut out
    [B,n,384], run through `transformer` (FillScope's own Component: flux_fill.transformer_velocity, the sampler's
    own call; or an ExternalDenoiser, called with the window's latent grid) and its velocity [B,n,64] added with
    its ramp weight (ramp_weights over the windows at token resolution: 1 where one window alone covers, summing
    to 1 where they overlap); the weighted sum is the whole grid's velocity.

    Window-local positions: each window gets img_ids (0, row, col) from (0, 0), as if it were a tile-sized image
    (MultiDiffusion runs each window as the model's native-size image). FLUX's RoPE would compute positions for the
    whole grid, but FLUX.1 is published for images of 0.1 to 2 MP (2 MP is about 1448x1448 px, 90x90 tokens): the
    rows and columns of a large image (a 6144 px side is 384 token columns) lie past the positions it was trained
    on. The windows' tokens still sit at their own place in the whole latent, where their velocities are added.

    Tokens no window covers (farther than the overlap from the mask: plan_tiles keeps only windows meeting the grown
    mask) get the velocity that carries them straight to the condition's masked-image latents (the source's latents
    there): v = (x - c) / sigma, so x_t = sigma n + (1 - sigma) c stays on that line and the last Euler step lands
    on c. sample_flux_fill does not hold unmasked latents to the source (only a soft mask does), so whatever is
    returned there is sampled into the latent; paste-back then restores the source's pixels outside the mask
    exactly, whatever the velocity, so this choice changes no pixel outside the mask. It matters for the VAE decode
    of the masked pixels: the decoder's convolutions and its mid-block attention read neighbouring latents, and
    zeros would leave pure noise beside the windows (denoise 1); the source's latents are what the untiled model
    reproduces there from its condition.

    `on_call(window, velocity_input, velocity, seconds)` after each window call (records, progress, observe)."""
    import torch

    weights = ramp_weights(windows, *token_grid)  # [h, w] float32 per window
    own = not isinstance(transformer, ExternalDenoiser)
    th, tw = token_grid
    ids = {}

    def call(tokens, t, guidance, text_pair, grid):
        if tuple(grid) != (th * FLUX_PATCH, tw * FLUX_PATCH):
            raise FillScopeInputError("grid", f"the sampler's latent grid {grid} is not the windows' "
                                      f"{(th * FLUX_PATCH, tw * FLUX_PATCH)}.", "plan the windows on this image.")
        b, n, width = tokens.shape
        grid_tokens = tokens.view(b, th, tw, width)
        out, covered = None, torch.zeros(th, tw, dtype=torch.bool, device=tokens.device)
        for window, weight in zip(windows, weights):
            x0, y0, x1, y1 = window.box
            piece = grid_tokens[:, y0:y1, x0:x1].reshape(b, (y1 - y0) * (x1 - x0), width)
            wh, ww = (y1 - y0) * FLUX_PATCH, (x1 - x0) * FLUX_PATCH  # the window's latent grid
            started = time.perf_counter()
            if own:
                if (wh, ww) not in ids:
                    ids[(wh, ww)] = flux_image_ids(wh, ww, device=tokens.device, dtype=tokens.dtype)
                txt_ids = text.txt_ids.to(device=tokens.device, dtype=tokens.dtype)
                velocity = flux_fill.transformer_velocity(transformer.model, piece, t, guidance, text_pair,
                                                          txt_ids, ids[(wh, ww)])
            else:
                velocity = transformer.call(piece, t, guidance, text_pair, (wh, ww))
            seconds = time.perf_counter() - started
            if out is None:
                out = torch.zeros(b, th, tw, velocity.shape[-1], device=tokens.device, dtype=torch.float32)
            w = weight.to(device=tokens.device)[None, :, :, None]
            out[:, y0:y1, x0:x1] += velocity.float().view(b, y1 - y0, x1 - x0, -1) * w
            covered[y0:y1, x0:x1] = True
            if on_call is not None:
                on_call(window, piece, velocity, seconds)
        c_width = out.shape[-1]  # noisy width 4C: the condition starts with the masked latents, 4C wide
        x, c = grid_tokens[..., :c_width].float(), grid_tokens[..., c_width:2 * c_width].float()
        to_source = (x - c) / t.float().view(b, 1, 1, 1)
        out = torch.where(covered[None, :, :, None], out, to_source)
        return out.view(b, n, c_width).to(tokens.dtype)

    if own:
        device, dtype, schedule = transformer.device, transformer.model.dtype, None
    else:
        device, dtype, schedule = transformer.device, transformer.dtype, transformer.schedule
    return ExternalDenoiser(call=call, config=transformer.config, device=device, dtype=dtype,
                            input_name=getattr(transformer, "input_name", "transformer"), schedule=schedule)


def run_shared(stack, prompt, image, mask, *, tile, overlap, seed, steps, callback, observe, options, tile_range,
                **family_kwargs) -> TiledResult:
    """Mode `shared` for FLUX Fill (module docstring): the prompt encoded once, the whole image's condition built by
    the tiled VAE encode (`vae_tile` px tiles, family_kwargs; tiled_vae_calls), one sample_flux_fill over the
    whole latent with windowed_flux_denoiser, the tiled VAE decode, paste-back through the whole image's mask.
    Progress counts windows x steps (a raising callback stops the run between two window calls)."""
    drop_single_process_options(family_kwargs)
    timings, place = family_kwargs.pop("timings", None), family_kwargs.pop("place", None)
    vae_tile = family_kwargs.pop("vae_tile", VAE_TILE)
    unknown = sorted(set(family_kwargs) - {"guidance", "denoise"})
    if unknown:
        raise FillScopeInputError(unknown[0], "is no option of FLUX Fill's tiled mode 'shared'.",
                                  "give only guidance and denoise (and vae_tile, timings, place).")
    vae_encode, vae_decode = tiled_vae_calls(stack["vae"], vae_tile)
    whole = prepare_image_and_mask(image, mask, size_mode="pad", **options)  # masked_fill too: one condition
    source = whole.source
    grid_h, grid_w = whole.image.shape[-2:]
    clip_l, t5, transformer, vae = (stack[name] for name in flux_fill.COMPONENTS)
    token_px = vae_ops.latent_format(vae).downscale * FLUX_PATCH
    # planned on the model grid (a multiple of one token): every window's start and end lie on the token grid
    tiles = plan_tiles(grid_h, grid_w, tile=tile, overlap=overlap, multiple=token_px, mask=whole.mask[:, 0],
                       tile_range=tile_range)
    notes = [f"{len(tiles)} window(s) of {tile} px, overlap {overlap:g}, mode shared"] + whole.notes
    if not tiles:
        return TiledResult(source.clone(), [], [], notes, whole.warnings)
    windows = token_windows(tiles, token_px)
    records = window_records(tiles, whole.mask)
    state = {"calls": 0, "steps": steps}

    def on_call(window, piece, velocity, seconds):
        r = records[window.index]
        if r["calls"] == 0:
            r["transformer_input"], r["tokens"] = list(piece.shape), int(piece.shape[1])
            if observe is not None:
                observe(f"tile {window.index} transformer.input", piece)
                observe(f"tile {window.index} transformer.output", velocity)
        r["calls"] += 1
        r["seconds"] = round(r["seconds"] + seconds, 3)
        state["calls"] += 1
        if callback is not None:
            callback(state["calls"], state["steps"] * len(windows))

    def sampler_observe(name, tensor):
        # the sampler's "transformer" is the windowed denoiser: its input is the whole grid's, never the model's
        if observe is not None:
            observe(name.replace("transformer.", "denoiser.") if name.startswith("transformer.") else name, tensor)

    with stage("encode_prompt", [clip_l, t5], timings=timings, place=place):
        flux_text = flux_fill.encode_prompt(clip_l, t5, prompt, observe=sampler_observe)
    with stage("build_fill_condition", [vae], timings=timings, place=place):
        condition = flux_fill.build_fill_condition(vae, whole, observe=sampler_observe, encode=vae_encode)
    with stage("sample_flux_fill", [transformer], timings=timings, place=place):
        denoiser = windowed_flux_denoiser(transformer, flux_text, windows, (grid_h // token_px, grid_w // token_px),
                                          on_call=on_call)
        denoiser = dataclasses.replace(denoiser, schedule=schedule_counter(transformer, state))
        # the schedule of the image size the transformer sees: the largest window's (whole-grid mu at 6144x4096 is ~17)
        latent = flux_fill.sample_flux_fill(denoiser, flux_text, condition, steps=steps, seed=seed,
                                            observe=sampler_observe,
                                            schedule_tokens=max(w.height * w.width for w in windows), **family_kwargs)
    with stage("decode_to_image", [vae], timings=timings, place=place):
        decoded = decode_to_image(vae, latent, observe=sampler_observe, decode=vae_decode)
    return TiledResult(paste_back(decoded, source, whole.paste_mask), tiles, [records[t.index] for t in tiles],
                       notes, whole.warnings)


__all__ = ["VAE_TILE", "run_shared", "tiled_vae_calls", "token_windows", "windowed_flux_denoiser"]
