"""Tiled mode `shared` for FLUX.2 [klein] (MultiDiffusion, Bar-Tal et al. 2023), for its inpaint and its mask-free
edit: one sample_klein run over the whole token grid (its schedule, seeded noise, CFG, strength and, for the
inpaint, its per-step re-blend of the unmasked tokens, as untiled) whose denoiser is `windowed_klein_denoiser`:
every step it cuts the whole grid's noisy tokens into the windows of plan_tiles (planned on the model grid, so every
window lies on the token grid), runs the transformer on each window as a tile-sized image (window-local positions)
with the window's own reference tokens, and averages the windows' velocities with ramp weights at token resolution.

Inpaint (a mask): only the windows that meet the mask grown by the overlap run; the source is the first reference
(t = 10) and the re-blend target. Edit (mask None, klein's mask-free edit): the image is the first reference and
the output has its size (klein's build_edit_condition: centre-cropped to whole tokens); every window runs, so the
windows cover the whole picture. An optional `reference` IMAGE ("put this object there") follows at t = 20, whole,
in every window: it is not aligned with the picture.

The prompt is encoded once; the inpaint's condition is encoded and every result decoded by the tiled VAE (vae_tiles,
tiles of `vae_tile` px: an image up to vae_tile a side is one untiled VAE call, bit for bit; the edit's references
too); the transformer's input is one window's
tokens and the window's references at a time.
"""

from __future__ import annotations

import dataclasses
import time

from ..compositing.tiles import plan_tiles, ramp_weights
from ..decode import decode_to_image
from ..errors import FillScopeInputError
from ..masks import paste_back, prepare_image_and_mask
from ..observe import stage
from ..pipelines import klein
from ..sampling import ExternalDenoiser
from ..specs import model_config
from .result import TiledResult, drop_single_process_options, schedule_counter, window_records
from .shared_flux_fill import VAE_TILE, tiled_vae_calls, token_windows

# klein.run's options this mode takes (the edit: all but token_mask; strength must be 1, sample_klein says so)
OPTIONS = ("reference", "negative_prompt", "guidance", "model_type", "strength", "token_mask")


def _text_ids(states):
    """[B,L,4] text positions (0, 0, 0, token index) for Qwen3 states [B,L,D], as KleinText.text_ids."""
    import torch

    b, length, _ = states.shape
    ids = torch.zeros(b, length, 4, dtype=torch.long, device=states.device)
    ids[..., 3] = torch.arange(length, device=states.device)
    return ids


def windowed_klein_denoiser(transformer, windows: list, token_grid: tuple, *, on_call=None) -> ExternalDenoiser:
    """klein's denoiser over overlapping windows (MultiDiffusion), as an ExternalDenoiser for sample_klein:
    `call(tokens, t, guidance, text, grid, references, reference_ids, part)` gets the whole grid's noisy tokens
    [B,N,C] (N = th x tw, row major, `token_grid` = (th, tw); C = 128 published) and the condition's references
    [B,Nref,C] / ids [B,Nref,4], whose first N tokens are the picture's own on the same grid (inpaint: the source;
    edit: the image) and the rest any further reference image's. Each window of `windows` (Tiles in token units,
    token_windows) runs `transformer` (FillScope's Component: the model called as sample_klein calls it; or an
    ExternalDenoiser, called with the window's grid and references) on

        [its n noisy tokens ++ its own n reference tokens (cut at the same box) ++ the further references]

    (the transformer sees [B, 2n + Nextra, C]: tile 1024 -> 4096 + 4096 = 8192 tokens) with window-local ids
    (0, row, col, 0) and (10, row, col, 0) from (0, 0), the further references' ids as given (t = 20, ...). Its
    velocity, the first n outputs [B,n,C], is added with its ramp weight (ramp_weights at token resolution: 1 where
    one window alone covers, summing to 1 where they overlap); the weighted sum is the whole grid's velocity.

    Why each window gets its own reference tokens, not the whole picture's: a window sees the part of the picture it
    edits, at the positions of the tokens it generates, exactly as an untiled run of a tile-sized image sees its
    source (klein was trained on references aligned that way: token (row, col) of the image and of its reference are
    the same place); the whole picture's tokens at window-local positions would no longer line up with the window.
    And the token count stays bounded whatever the image's size: the whole 6144x4096 source alone is 98,304
    reference tokens, and attention grows with the square of the sequence. Window-local positions for the same
    reason as FLUX Fill's shared mode (shared_flux_fill.windowed_flux_denoiser): each window is run as a native-size
    image, inside the positions klein was trained on.

    Tokens no window covers (inpaint only: farther than the overlap from the mask) get the velocity that carries them
    to the source (the first N references): v = (x - source) / sigma. sample_klein re-blends them with the noised
    source after every step anyway (they lie outside the token mask), so this changes nothing there; it keeps the
    velocity defined everywhere. `on_call(window, model_input, output, velocity, seconds, reference_count)` after each
    window call (records, progress, observe); model_input is None for an ExternalDenoiser."""
    import torch

    weights = ramp_weights(windows, *token_grid)  # [th, tw] float32 per window
    own = not isinstance(transformer, ExternalDenoiser)
    th, tw = token_grid
    n_grid = th * tw
    ids = {}

    def call(tokens, t, guidance, text, grid, references, reference_ids, part):
        if tuple(grid) != (th, tw):
            raise FillScopeInputError("grid", f"the sampler's token grid {tuple(grid)} is not the windows' {(th, tw)}.",
                                      "plan the windows on this image.")
        b, n, width = tokens.shape
        device = tokens.device
        grid_tokens = tokens.view(b, th, tw, width)
        own_refs = references[:, :n_grid].reshape(b, th, tw, references.shape[-1])  # the picture's, on the grid
        extra, extra_ids = references[:, n_grid:], reference_ids[:, n_grid:]
        out, covered = None, torch.zeros(th, tw, dtype=torch.bool, device=device)
        for window, weight in zip(windows, weights):
            x0, y0, x1, y1 = window.box
            wh, ww = y1 - y0, x1 - x0
            piece = grid_tokens[:, y0:y1, x0:x1].reshape(b, wh * ww, width)
            refs = torch.cat([own_refs[:, y0:y1, x0:x1].reshape(b, wh * ww, -1), extra], dim=1)
            if (wh, ww) not in ids:
                ids[(wh, ww)] = klein.token_ids(wh, ww, klein.SOURCE_TIME_OFFSET, b, device)
            ref_ids = torch.cat([ids[(wh, ww)], extra_ids.to(device)], dim=1)
            started = time.perf_counter()
            if own:
                model_input = torch.cat([piece, refs], dim=1).to(transformer.model.dtype)  # [B,2n+Nextra,C]
                img_ids = torch.cat([klein.token_ids(wh, ww, 0, b, device), ref_ids], dim=1)
                output = transformer.model(hidden_states=model_input, timestep=t, guidance=None,
                                           encoder_hidden_states=text, txt_ids=_text_ids(text), img_ids=img_ids,
                                           return_dict=False)[0]  # [B,2n+Nextra,C]
                velocity = output[:, :wh * ww]  # the references' outputs are not used
            else:
                model_input = None
                velocity = output = transformer.call(piece, t, guidance, text, (wh, ww), refs, ref_ids, part)
            seconds = time.perf_counter() - started
            if out is None:
                out = torch.zeros(b, th, tw, velocity.shape[-1], device=device, dtype=torch.float32)
            w = weight.to(device=device)[None, :, :, None]
            out[:, y0:y1, x0:x1] += velocity.float().view(b, wh, ww, -1) * w
            covered[y0:y1, x0:x1] = True
            if on_call is not None:
                on_call(window, model_input, output, velocity, seconds, refs.shape[1])
        x, source = grid_tokens.float(), own_refs.float()
        to_source = (x - source) / t.float().view(b, 1, 1, 1)
        out = torch.where(covered[None, :, :, None], out, to_source)
        return out.view(b, n, -1).to(tokens.dtype)

    if own:
        config, dtype, schedule = dict(model_config(transformer)), transformer.model.dtype, None
    else:
        config, dtype, schedule = transformer.config, transformer.dtype, transformer.schedule
    return ExternalDenoiser(call=call, config=config, device=transformer.device, dtype=dtype,
                            input_name=getattr(transformer, "input_name", "transformer"), schedule=schedule)


def _check_options(family_kwargs: dict, options: dict, edit: bool) -> dict:
    """The options this mode takes (OPTIONS, vae_tile, timings, place; step_cache off, parallel 1), refused by name
    before anything runs; the edit takes no mask option and no token_mask (it has no mask)."""
    drop_single_process_options(family_kwargs)
    unknown = sorted(set(family_kwargs) - set(OPTIONS) - {"vae_tile", "timings", "place"})
    if unknown:
        raise FillScopeInputError(unknown[0], "is no option of klein's tiled mode 'shared'.",
                                  f"give only {', '.join(OPTIONS)} (and vae_tile, timings, place).")
    if edit:
        given = sorted(options) + (["token_mask"] if "token_mask" in family_kwargs else [])
        if given:
            raise FillScopeInputError("mask_options" if options else "token_mask",
                                      f"{', '.join(given)} given for the mask-free edit (mask None), which has no "
                                      "mask to prepare.", "leave them unset, or give a mask for the inpaint.")
    return family_kwargs


def run_shared(stack, prompt, image, mask, *, tile, overlap, seed, steps, callback, observe, options, tile_range,
               **family_kwargs) -> TiledResult:
    """Mode `shared` for klein (module docstring). `mask` MASK [B,H,W] (1 = repaint): the inpaint (klein.run's
    steps: the whole image prepared once with size_mode pad, one build_inpaint_condition, pasted back through the
    whole mask); None: the mask-free edit of `image` (klein.run_edit's steps: output at the image's size cropped to
    whole tokens, nothing pasted back). `family_kwargs`: klein.run's reference, negative_prompt, guidance,
    model_type, strength, token_mask (the edit: no token_mask, strength 1), vae_tile (px, VAE_TILE by default:
    shared_flux_fill.tiled_vae_calls), timings, place. The prompt (and a base model's negative) is encoded once;
    one sample_klein over the whole grid with windowed_klein_denoiser.

    Progress counts window calls: windows x steps (x 2 for a base model's CFG, whose cond and uncond passes each
    call every window); a callback that raises stops the run between two window calls. `observe` sees the whole
    run's tensors, the sampler's own "transformer.*" as "denoiser.*" (the whole grid's, never the model's), and each
    window's first call as "tile {index} transformer.input" [B,2n+Nextra,C] / ".output" / ".output.kept" [B,n,C].
    Records: index, box (model-grid px), row, col, repaint_pixels, sampled, tokens (the transformer's sequence,
    reference tokens included), transformer_input, calls, seconds.

    The schedule's shift mu is computed from the largest window's token count (sample_klein's schedule_tokens): the
    image size the transformer sees. The whole grid's would be ~17 at 6144x4096 and keep a 4-step schedule at sigma
    1 for three steps; an image that fits in one window gets the untiled mu."""
    edit = mask is None
    family_kwargs = _check_options(dict(family_kwargs), options, edit)
    timings, place = family_kwargs.pop("timings", None), family_kwargs.pop("place", None)
    reference = family_kwargs.pop("reference", None)
    negative_prompt = family_kwargs.pop("negative_prompt", "")
    model_type = family_kwargs.pop("model_type", "auto")
    token_mask = family_kwargs.pop("token_mask", "cover")
    vae_tile = family_kwargs.pop("vae_tile", VAE_TILE)
    missing = [name for name in klein.COMPONENTS if name not in stack]
    if missing:
        raise FillScopeInputError("stack", f"has no {', '.join(missing)}: it is not a klein stack.",
                                  f"load klein's {', '.join(klein.COMPONENTS)}.")
    qwen3, transformer, vae = (stack[name] for name in klein.COMPONENTS)
    vae_encode, vae_decode = tiled_vae_calls(vae, vae_tile)
    if isinstance(transformer, ExternalDenoiser):  # ComfyUI's own MODEL: only model_type says distilled or base
        if model_type not in klein.MODEL_TYPES:
            raise FillScopeInputError("model_type", f"unknown type {model_type!r}.",
                                      f"use one of {', '.join(klein.MODEL_TYPES)}.")
        distilled = model_type != "base"  # auto: distilled, klein.resolve_distilled's default
    else:
        distilled, _ = klein.resolve_distilled(transformer, model_type)
    guidance = family_kwargs.get("guidance", klein.BASE_GUIDANCE)
    use_cfg = guidance > 1.0 and not distilled
    whole = None if edit else prepare_image_and_mask(image, mask, size_mode="pad", **options)

    def sampler_observe(name, tensor):
        # the sampler's "transformer" is the windowed denoiser: its input is the whole grid's, never the model's
        if observe is not None:
            observe(name.replace("transformer.", "denoiser.") if name.startswith("transformer.") else name, tensor)

    with stage("encode_prompt", [qwen3], timings=timings, place=place):
        positive = klein.encode_prompt(qwen3, prompt, observe=sampler_observe)
        negative = klein.encode_prompt(qwen3, negative_prompt) if use_cfg else None
    if edit:
        with stage("build_edit_condition", [vae], timings=timings, place=place):
            refs = [image] + ([reference] if reference is not None else [])
            condition = klein.build_edit_condition(vae, refs, observe=sampler_observe, encode=vae_encode)
    else:
        with stage("build_inpaint_condition", [vae], timings=timings, place=place):
            condition = klein.build_inpaint_condition(vae, whole, reference, token_mask=token_mask,
                                                      observe=sampler_observe, encode=vae_encode)
    prepared = condition.prepared
    th, tw = condition.latent_height, condition.latent_width
    grid_h, grid_w = prepared.image.shape[-2:]
    token_px = grid_h // th
    tiles = plan_tiles(grid_h, grid_w, tile=tile, overlap=overlap, multiple=token_px,
                       mask=None if edit else prepared.mask[:, 0], tile_range=tile_range)
    notes = [f"{len(tiles)} window(s) of {tile} px, overlap {overlap:g}, mode shared"
             + (", mask-free edit" if edit else "")] + prepared.notes
    if not tiles:  # inpaint with an empty mask: the source, as the untiled run gives it
        return TiledResult(whole.source.clone(), [], [], notes, whole.warnings)
    windows = token_windows(tiles, token_px)
    records = window_records(tiles, prepared.mask)
    state = {"calls": 0, "steps": steps}

    def on_call(window, model_input, output, velocity, seconds, n_refs):
        r = records[window.index]
        if r["calls"] == 0:
            shape = list(model_input.shape) if model_input is not None else [
                velocity.shape[0], velocity.shape[1] + n_refs, velocity.shape[2]]
            r["transformer_input"], r["tokens"] = shape, int(shape[1])
            if observe is not None:
                if model_input is not None:
                    observe(f"tile {window.index} transformer.input", model_input)
                observe(f"tile {window.index} transformer.output", output)
                observe(f"tile {window.index} transformer.output.kept", velocity)
        r["calls"] += 1
        r["seconds"] = round(r["seconds"] + seconds, 3)
        state["calls"] += 1
        if callback is not None:
            callback(state["calls"], state["steps"] * len(windows) * (2 if use_cfg else 1))

    with stage("sample_klein", [transformer], timings=timings, place=place):
        denoiser = windowed_klein_denoiser(transformer, windows, (th, tw), on_call=on_call)
        denoiser = dataclasses.replace(denoiser, schedule=schedule_counter(transformer, state))
        latent = klein.sample_klein(denoiser, positive, condition, steps=steps, distilled=distilled,
                                    negative=negative, seed=seed, observe=sampler_observe,
                                    schedule_tokens=max(w.height * w.width for w in windows), **family_kwargs)
    with stage("decode_to_image", [vae], timings=timings, place=place):
        decoded = decode_to_image(vae, latent, observe=sampler_observe, decode=vae_decode)
    ordered = [records[t.index] for t in tiles]
    if edit:  # nothing of a source to keep: the decoded picture, as run_edit gives it
        return TiledResult(decoded, tiles, ordered, notes, [])
    return TiledResult(paste_back(decoded, whole.source, whole.paste_mask), tiles, ordered, notes, whole.warnings)


__all__ = ["run_shared", "windowed_klein_denoiser"]
