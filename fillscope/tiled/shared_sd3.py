"""Tiled mode `shared` for SD3 + the alimama inpainting ControlNet (MultiDiffusion, Bar-Tal et al. 2023): one
sampler run over the whole latent grid (`sample_windows`: SD3's schedule, seeded noise over the whole grid, the
ControlNet keep rule, CFG and Euler steps as sample_sd3_controlnet_inpaint) whose denoiser is
`windowed_sd3_denoiser`: every step it cuts the whole latents, and the whole condition's masked-image latents ++
keep mask, into the windows of plan_tiles (planned on the model grid: every window lies on the 2x2 patch grid), runs
the ControlNet and the MMDiT on each window that meets the grown mask (CFG batch and guidance as untiled) and
averages the windows' guided velocities with ramp weights, so neighbouring tiles agree while they are sampled.

Why this module has its own step loop and condition builder: sample_sd3_controlnet_inpaint runs the ControlNet
itself on the latents it holds (the whole grid here: more tokens than one window, and a large image's grid is
past SD3's position-embedding grid, which it refuses, as build_inpaint_condition does), and its ExternalDenoiser
hook replaces only the MMDiT. So the loop below calls the pipeline's own parts (schedule, starting point, keep
rule, text batches, residual hooks, Euler step, the checks) in the same order and arithmetic; an image that fits in
one window gives the untiled run's result bit for bit (tests/test_tiled_shared_sd3.py holds the two to that).
The prompt is encoded once; the whole image's condition is encoded and the result decoded by the tiled VAE
(vae_tiles, tiles of `vae_tile` px: an image up to vae_tile a side is one untiled VAE call, bit for bit); the
transformer and the ControlNet see one window at a time.
"""

from __future__ import annotations

import time

from .. import vae as vae_ops
from ..compositing.tiles import plan_tiles, ramp_weights
from ..decode import SampledLatent, decode_to_image
from ..errors import FillScopeInputError
from ..masks import paste_back, prepare_image_and_mask, require_grid
from ..observe import observer_or_noop, stage
from ..pipelines import sd3_controlnet
from ..sampling import (ExternalDenoiser, check_finite_settings, check_steps_and_denoise, euler_step,
                        require_finite_first_step, require_finite_result, starting_point, static_shift_sigmas)
from ..specs import model_config, pos_embed_side_limit, scheduler_config, shipped_variant
from .result import TiledResult, transformer_tokens, window_records
from .shared_flux_fill import VAE_TILE, tiled_vae_calls, token_windows

OPTIONS = ("negative_prompt", "cfg", "control_scale", "control_start", "control_end", "shift", "denoise",
           "residual_mapping")


def check_window_side(transformer, controlnet, tiles: list, downscale: int) -> None:
    """Each window is one call of the MMDiT and the ControlNet, whose learned position embeddings are cropped from
    a pos_embed_max_size grid (SD3 medium: 192 patches = 3072 px a side): the largest window side must fit in both
    (the whole image need not). Refused naming `tile`, before the prompt is encoded."""
    side = max(max(t.box[2] - t.box[0], t.box[3] - t.box[1]) for t in tiles)
    for name, comp in (("transformer", transformer), ("controlnet", controlnet)):
        config = model_config(comp)
        model = shipped_variant("sd3_controlnet" if name == "controlnet" else "sd3_transformer", config)
        limit = pos_embed_side_limit(config, model or "the loaded weights", downscale)
        if limit is not None and side > limit.pixels:
            raise FillScopeInputError("tile", f"windows of {side} px are larger than this {name}'s position-embedding "
                                              f"grid allows ({limit.explain()}).",
                                      f"set tile to at most {limit.pixels} px.")


def whole_condition(vae, whole, observe=None, *, encode=None) -> sd3_controlnet.InpaintCondition:
    """build_inpaint_condition's tensors for the whole prepared image, without its side check (the windows are
    checked instead: check_window_side): repaint pixels -> -1, VAE mean -> [B,C,H/8,W/8] ++ keep mask (nearest)
    -> control [B,C+1,H/8,W/8]. The same operations in the same order, so one window's run equals the untiled one.
    `encode(vae, pixels)`: the VAE encode (None: vae.encode; run_shared gives vae_tiles.encode_tiled)."""
    import torch
    import torch.nn.functional as F

    observe = observer_or_noop(observe)
    if vae.kind != "sd3_vae":
        raise FillScopeInputError("vae", "the SD3 ControlNet needs the SD3 VAE (scale 1.5305, shift 0.0609).",
                                  "set the VAE loader's kind to sd3.")
    fmt = vae_ops.latent_format(vae)
    require_grid(whole, fmt.downscale, f"this VAE ({vae_ops.describe_widths(vae)})")
    image, mask = whole.image, whole.mask  # [B,3,H,W] in [-1,1], [B,1,H,W] 1 = repaint
    masked = image.clone()
    masked[(mask > 0.5).expand_as(masked)] = -1.0
    latents = (encode or vae_ops.encode)(vae, masked)  # [B,16,H/8,W/8]
    lh, lw = latents.shape[-2:]
    keep = 1.0 - F.interpolate(mask.to(device=latents.device, dtype=latents.dtype), size=(lh, lw))
    control = torch.cat([latents, keep], dim=1)  # [B,17,H/8,W/8]
    observe("masked_image", masked)
    observe("masked_image_latents", latents)
    observe("keep_mask.latent", keep)
    observe("inpaint_condition", control)
    return sd3_controlnet.InpaintCondition(prepared=whole, vae=vae, control=control)


def windowed_sd3_denoiser(transformer, controlnet, passes: list, windows: list, latent_grid: tuple, *, cfg: float,
                          residual_mapping: str = "one_to_one", on_call=None):
    """SD3 + ControlNet's denoiser over overlapping windows (MultiDiffusion): `velocity(latents, t, scale, sigma)`
    gets the whole grid's latents [B,C,h,w] (`latent_grid` = (h, w)), t the timestep (1000 x sigma, 0-dim), scale the
    ControlNet's scale this step, sigma (0-dim) and returns the guided velocity [B,C,h,w] in the latents' dtype.
    `passes`: the untiled sampler's (context [n,L,D], pooled [n,P], control [n,C+1,h,w], the ControlNet's pooled
    zeros) per text batch (negative first under CFG). Each window of `windows` (Tiles in latent cells) is cut from
    the latents and from each pass's control, run as the untiled `predict` runs (the ControlNet's residuals, then
    the MMDiT with them added; one batch [2B] for CFG), guided (uncond + cfg (text - uncond), cfg > 1) and added with
    its ramp weight (ramp_weights over the windows at latent-cell resolution: 1 where one window alone covers,
    summing to 1 where they overlap; a window's tokens are 2x2 cells, its velocity is per cell).

    Window-local positions: each window is called as the tile-sized image it is, so the MMDiT and the ControlNet crop
    their learned position embeddings (pos_embed_max_size a side, cropped around the centre for a call's size) for
    the window's size: every window gets the positions of a native-size image (1024 px: the centre 64x64 patches).
    Whole-grid positions do not exist past the grid (3072 px a side for SD3 medium), and below it a window near the
    image's edge would read the grid's outer positions, which SD3 (trained around 1024 px) hardly saw.

    Latent cells no window covers (farther than the overlap from the mask: plan_tiles keeps only the windows
    meeting the grown mask) get the velocity that carries them straight to the condition's masked-image latents
    (there: the source's latents, the mask being far away): v = (x - c) / sigma, so x stays on the line
    sigma n + (1 - sigma) c and SD3's last Euler step (to sigma 0) lands on c. Paste-back restores every pixel
    outside the mask exactly whatever is sampled there, so this changes no pixel outside the mask; it matters for the
    VAE decode of the masked pixels beside them, whose convolutions and mid-block attention read neighbouring
    latents: noise left there (denoise 1) would bleed into the decoded mask; the source's latents are what the untiled
    model reproduces there from its condition.

    `on_call(window, x_in, velocity, residuals, seconds)` after each window (its passes and guidance): the window's
    MMDiT input [n,C,h',w'], raw velocity (negative first), the last pass's residuals."""
    import torch

    model, cnet = transformer.model, controlnet.model
    weights = ramp_weights(windows, *latent_grid)  # [h, w] float32 per window
    h, w = latent_grid

    def predict(x_in, t, scale, context, pooled, control, cnet_pooled):
        """sample_sd3_controlnet_inpaint's `predict` for FillScope's own transformer, on one window."""
        timestep = t.expand(x_in.shape[0])
        residuals = []
        if scale != 0.0:
            residuals = cnet(hidden_states=x_in, timestep=timestep, encoder_hidden_states=context,
                             pooled_projections=cnet_pooled, controlnet_cond=control, conditioning_scale=scale,
                             return_dict=False)[0]  # 23 x [n, tokens, width]
        hooks = sd3_controlnet.one_to_one_hooks(model, residuals) if residual_mapping == "one_to_one" else []
        try:
            velocity = model(hidden_states=x_in, timestep=timestep, encoder_hidden_states=context,
                             pooled_projections=pooled,
                             block_controlnet_hidden_states=(residuals or None) if residual_mapping == "diffusers"
                             else None, return_dict=False)[0]
        finally:
            for hook in hooks:
                hook.remove()
        return velocity, residuals

    def velocity(latents, t, scale, sigma):
        if tuple(latents.shape[-2:]) != (h, w):
            raise FillScopeInputError("latents", f"the sampler's latent grid {tuple(latents.shape[-2:])} is not the "
                                      f"windows' {(h, w)}.", "plan the windows on this image.")
        b = latents.shape[0]
        out = torch.zeros(latents.shape, device=latents.device, dtype=torch.float32)
        covered = torch.zeros(h, w, dtype=torch.bool, device=latents.device)
        for window, weight in zip(windows, weights):
            x0, y0, x1, y1 = window.box
            whole = (x0, y0, x1, y1) == (0, 0, w, h)  # the untiled run's own tensors: no copy
            piece = latents if whole else latents[:, :, y0:y1, x0:x1].contiguous()
            started = time.perf_counter()
            outputs = []
            for context, pooled, control, cnet_pooled in passes:
                n = context.shape[0] // b
                x_in = torch.cat([piece] * n) if n > 1 else piece  # [2B,C,h',w'] in a CFG batch
                part = control if whole else control[:, :, y0:y1, x0:x1].contiguous()
                v, residuals = predict(x_in, t, scale, context, pooled, part, cnet_pooled)
                outputs.append(v)
            raw = outputs[0] if len(outputs) == 1 else torch.cat(outputs)  # negative first
            guided = raw
            if cfg > 1.0:
                uncond, text = raw.chunk(2)
                guided = uncond + cfg * (text - uncond)
            seconds = time.perf_counter() - started
            out[:, :, y0:y1, x0:x1] += guided.float() * weight.to(device=latents.device)[None, None]
            covered[y0:y1, x0:x1] = True
            if on_call is not None:
                on_call(window, x_in, raw, residuals, seconds)
        c = passes[-1][2][:b, :-1]  # the condition's masked-image latents [B,C,h,w]
        to_source = (latents.float() - c.float()) / sigma.float()
        return torch.where(covered[None, None], out, to_source).to(latents.dtype)

    return velocity


def sample_windows(transformer, controlnet, positive, negative, cond, windows: list, *, steps: int = 28,
                   cfg: float = 7.0, control_scale: float = 0.95, control_start: float = 0.0, control_end: float = 1.0,
                   shift: float | None = None, seed: int = 0, denoise: float = 1.0,
                   residual_mapping: str = "one_to_one", on_start=None, on_call=None, observe=None) -> SampledLatent:
    """sample_sd3_controlnet_inpaint's step loop over the whole latent grid [B,C,h,w] with windowed_sd3_denoiser in
    place of its one ControlNet + MMDiT call (module docstring): the same checks, schedule (static shift), seeded
    noise of the whole grid (or the noised source, denoise < 1), CFG text batches (negative first), ControlNet keep
    rule and Euler step. `on_start(run_steps)` before the first step; `on_call` is the denoiser's. Observed: the
    sampler's inputs as untiled, the whole grid's latents as "denoiser.input" and its guided velocity as
    "velocity.guided" (step 1), "latent"."""
    import torch

    observe = observer_or_noop(observe)
    check_finite_settings(("cfg", cfg, "a number of 1 or more (1 = off; the default is 7)"),
                          ("control_scale", control_scale, "a number from 0 to 2 (the model card's 0.95)"),
                          ("control_start", control_start, "a number from 0 to 1"),
                          ("control_end", control_end, "a number from 0 to 1"),
                          ("shift", shift, "a number above 0 (SD3: 3.0)"))
    if residual_mapping not in sd3_controlnet.RESIDUAL_MAPPINGS:
        raise FillScopeInputError("residual_mapping", f"unknown {residual_mapping!r}.",
                                  f"use one of {', '.join(sd3_controlnet.RESIDUAL_MAPPINGS)}.")
    check_steps_and_denoise(steps, denoise)
    if not 0.0 <= control_start < control_end <= 1.0:
        raise FillScopeInputError("control_start", f"start {control_start} / end {control_end} leave no step.",
                                  "use 0 <= start < end <= 1.")
    sd3_controlnet.check_widths(transformer, controlnet, cond)
    use_cfg = cfg > 1.0
    if use_cfg and negative is None:
        raise FillScopeInputError("negative", f"CFG {cfg} needs a negative condition.",
                                  "give a negative prompt (an empty one is fine), or set cfg to 1.")
    sd3_controlnet.check_text(transformer, positive, negative, cfg)
    device, dtype = transformer.device, transformer.model.dtype
    b = cond.control.shape[0]
    lh, lw = cond.control.shape[-2:]
    shift = scheduler_config("sd3")["shift"] if shift is None else shift
    c = model_config(transformer)["in_channels"]
    sigmas, noise, latents = starting_point(cond, static_shift_sigmas(steps, shift), steps, denoise, (b, c, lh, lw),
                                            seed, device, dtype)  # noise, latents: [B,16,h,w]
    run_steps = len(sigmas) - 1

    def batch(t, n):
        return t.to(device=device, dtype=dtype).expand(n, *t.shape[1:])

    passes = []
    for group in sd3_controlnet.text_batches([negative, positive] if use_cfg else [positive]):
        context = torch.cat([batch(t.context, b) for t in group])  # [2B,333,4096] under CFG
        pooled = torch.cat([batch(t.pooled, b) for t in group])  # [2B,2048]
        control = torch.cat([cond.control] * len(group)).to(device=device, dtype=dtype)  # [2B,17,h,w]
        passes.append((context, pooled, control, torch.zeros_like(pooled)))
    observe("initial_noise", noise)
    observe("sampler.context", passes[-1][0])
    observe("sampler.pooled", passes[-1][1])
    observe("control_image", passes[-1][2])
    first = {}

    def window_call(window, x_in, raw, residuals, seconds):
        if "raw" not in first:
            first.update(x_in=x_in, raw=raw, residuals=residuals)
        if on_call is not None:
            on_call(window, x_in, raw, residuals, seconds)

    denoiser = windowed_sd3_denoiser(transformer, controlnet, passes, windows, (lh, lw), cfg=cfg,
                                     residual_mapping=residual_mapping, on_call=window_call)
    on_device = sigmas.to(device)
    controlnet_steps = 0
    if on_start is not None:
        on_start(run_steps)
    with torch.inference_mode():
        for i in range(run_steps):
            t = on_device[i] * 1000.0
            scale = control_scale * sd3_controlnet.controlnet_keep(i, run_steps, control_start, control_end)
            if i == 0:
                observe("denoiser.input", latents)
            velocity = denoiser(latents, t, scale, on_device[i])
            controlnet_steps += scale != 0.0
            if i == 0:
                observe("velocity.guided", velocity)
                # the whole grid's guided velocity: every window's output reaches it (a NaN through any weight)
                require_finite_first_step("transformer", velocity, (
                    ("positive / negative", [x for p in passes for x in p[:2]], "the CLIP-L / CLIP-G / T5 text encoders"),
                    ("condition", passes[-1][2], "the VAE (masked-image latents)"),
                    ("condition", first["x_in"], "the VAE (source latents, denoise < 1)"),
                    ("controlnet", list(first["residuals"]), "the ControlNet"),
                ), component=transformer)
            latents = euler_step(latents, velocity, on_device[i], on_device[i + 1])
    require_finite_result("transformer", latents)
    observe("latent", latents)
    info = {"steps_run": run_steps, "shift": shift, "sigma_start": float(sigmas[0]), "cfg": cfg,
            "controlnet_residuals": controlnet.model.config.get("num_layers"), "controlnet_steps": controlnet_steps,
            "residual_mapping": residual_mapping, "windows": len(windows)}
    return SampledLatent(latents, cond.prepared, "sd3", info=info)


def run_shared(stack, prompt, image, mask, *, tile, overlap, seed, steps, callback, observe, options, tile_range,
               **family_kwargs) -> TiledResult:
    """Mode `shared` for SD3 + ControlNet (module docstring): the prompt (and, under CFG, the negative prompt)
    encoded once, the whole image's condition built by the tiled VAE encode, one sample_windows over the whole
    latent, the tiled VAE decode, paste-back through the whole image's mask. `family_kwargs`: OPTIONS
    (sd3_controlnet.run's, same defaults), vae_tile (px, VAE_TILE by default: tiled_vae_calls), timings, place. Progress counts windows x steps (a raising callback stops the run between two
    window calls); `observe` sees the whole run's tensors ("denoiser.input": the sampler's whole grid) and each
    window's first call as "tile {index} transformer.input" / "controlnet.residual[0]" / "transformer.output"."""
    if family_kwargs.get("parallel") not in (None, 1):
        raise FillScopeInputError("parallel", f"is {family_kwargs['parallel']!r}: tiled mode 'shared' runs its windows "
                                              "in one process.", "leave parallel unset, or use mode 'independent'.")
    family_kwargs.pop("parallel", None)
    timings, place = family_kwargs.pop("timings", None), family_kwargs.pop("place", None)
    vae_tile = family_kwargs.pop("vae_tile", VAE_TILE)
    unknown = sorted(set(family_kwargs) - set(OPTIONS))
    if unknown:
        raise FillScopeInputError(unknown[0], "is no option of SD3 ControlNet's tiled mode 'shared'.",
                                  f"give only {', '.join(OPTIONS)} (and vae_tile, timings, place).")
    negative_prompt = family_kwargs.pop("negative_prompt", "")
    cfg = family_kwargs.setdefault("cfg", 7.0)
    clip_l, clip_g, t5, transformer, controlnet, vae = (stack[name] for name in sd3_controlnet.COMPONENTS)
    vae_encode, vae_decode = tiled_vae_calls(vae, vae_tile)
    if isinstance(transformer, ExternalDenoiser):
        raise FillScopeInputError("transformer", "is a native MODEL: tiled mode 'shared' runs FillScope's own SD3 "
                                                 "transformer on each window.", "load it with FillScope's loader.")
    whole = prepare_image_and_mask(image, mask, size_mode="pad", **options)  # masked_fill too: one condition
    source = whole.source
    grid_h, grid_w = whole.image.shape[-2:]
    downscale = vae_ops.latent_format(vae).downscale
    patch = int(model_config(transformer).get("patch_size") or 2)
    # planned on the model grid (a multiple of one 2x2 patch): every window's start and end lie on the patch grid
    tiles = plan_tiles(grid_h, grid_w, tile=tile, overlap=overlap, multiple=downscale * patch, mask=whole.mask[:, 0],
                       tile_range=tile_range)
    notes = [f"{len(tiles)} window(s) of {tile} px, overlap {overlap:g}, mode shared"] + whole.notes
    if not tiles:
        return TiledResult(source.clone(), [], [], notes, whole.warnings)
    check_window_side(transformer, controlnet, tiles, downscale)
    windows = token_windows(tiles, downscale)  # in latent cells
    records = window_records(tiles, whole.mask)
    state = {"calls": 0, "steps": steps}

    def on_call(window, x_in, raw, residuals, seconds):
        r = records[window.index]
        if r["calls"] == 0:
            r["transformer_input"] = list(x_in.shape)
            r["tokens"] = transformer_tokens(x_in.shape, stack)
            if observe is not None:
                observe(f"tile {window.index} transformer.input", x_in)
                if residuals:
                    observe(f"tile {window.index} controlnet.residual[0]", residuals[0])
                observe(f"tile {window.index} transformer.output", raw)
        r["calls"] += 1
        r["seconds"] = round(r["seconds"] + seconds, 3)
        state["calls"] += 1
        if callback is not None:
            callback(state["calls"], state["steps"] * len(windows))

    def on_start(run_steps):
        state["steps"] = run_steps

    with stage("encode_prompt", [clip_l, clip_g, t5], timings=timings, place=place):
        positive = sd3_controlnet.encode_prompt(clip_l, clip_g, t5, prompt, observe=observe)
        negative = sd3_controlnet.encode_prompt(clip_l, clip_g, t5, negative_prompt) if cfg > 1.0 else None
    with stage("build_inpaint_condition", [vae], timings=timings, place=place):
        condition = whole_condition(vae, whole, observe=observe, encode=vae_encode)
    with stage("sample_sd3_controlnet_inpaint", [transformer, controlnet], timings=timings, place=place):
        latent = sample_windows(transformer, controlnet, positive, negative, condition, windows, steps=steps,
                                seed=seed, on_start=on_start, on_call=on_call, observe=observe, **family_kwargs)
    with stage("decode_to_image", [vae], timings=timings, place=place):
        decoded = decode_to_image(vae, latent, observe=observe, decode=vae_decode)
    return TiledResult(paste_back(decoded, source, whole.paste_mask), tiles, [records[t.index] for t in tiles],
                       notes, whole.warnings)


__all__ = ["check_window_side", "run_shared", "sample_windows", "whole_condition", "windowed_sd3_denoiser"]
