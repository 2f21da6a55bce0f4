"""Tiled sampling's mode "shared" (issue 23, fillscope/tiled/shared_flux_fill.py: MultiDiffusion for FLUX.1 Fill) on the tiny fp32
FLUX Fill and on its meta weights: an image that fits in one window gives exactly the untiled run + paste-back;
on a grid of windows every pixel outside the mask is the source's, the transformer runs only the windows that meet
the grown mask, one window's tokens a call, every step; the seam error against the untiled run is printed next to
mode "independent"'s on the same inputs; at full size the production transformer sees one 1024 px window a call."""

from __future__ import annotations

import math
import time

import pytest
import torch
from tiny_flux import build_tiny_flux_fill_folder
from tiny_models import comfy_tokenizer_dirs, outside_is_source

from fillscope import bounds, masks
from fillscope.compositing.tiles import ciede2000, seam_bands
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import flux_fill
from fillscope.tiled import run_tiled

PROMPT = "a red brick fireplace in a living room"
SMALL = bounds.Range(64, 4096)  # tiny models: 64 px tiles
STEPS = 2
GUIDANCE = 30.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("shared") / "flux", seed=0)
    return flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")


def picture(height, width, seed=3):
    """A smooth picture with some texture (a seam shows on it), [1,H,W,3] (as test_tiled_sampling's)."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, height)[:, None, None]
    xs = torch.linspace(0, 1, width)[None, :, None]
    base = torch.cat([xs.expand(height, width, 1), ys.expand(height, width, 1),
                      (0.5 * (xs + ys)).expand(height, width, 1)], -1)
    return (0.8 * base + 0.2 * torch.rand(height, width, 3, generator=g)).clamp(0, 1).unsqueeze(0)


def untiled(stack, image, mask, seed=11):
    prepared = masks.prepare_image_and_mask(image, mask)
    done = flux_fill.run(stack, PROMPT, prepared, steps=STEPS, seed=seed, guidance=GUIDANCE)
    return masks.paste_back(done.image, prepared.source, prepared.paste_mask)


def tiled(stack, image, mask, mode="shared", seed=11, **extra):
    return run_tiled("flux-fill", stack, PROMPT, image, mask, tile=64, overlap=0.25, mode=mode, seed=seed,
                     steps=STEPS, tile_range=SMALL, guidance=GUIDANCE, **extra)


def record_transformer_inputs(transformer):
    """The hidden_states shape of every call of the real transformer module (a forward pre-hook)."""
    shapes = []
    handle = transformer.model.register_forward_pre_hook(
        lambda _m, _args, kwargs: shapes.append(list(kwargs["hidden_states"].shape)), with_kwargs=True)
    return shapes, handle


def test_an_image_that_fits_in_one_window_gives_exactly_the_untiled_result(stack):
    image = picture(40, 56)  # off the 16 px grid: the whole image is padded to 64x48, one window of that grid
    mask = torch.zeros(1, 40, 56)
    mask[:, 8:30, 12:44] = 1
    shapes, handle = record_transformer_inputs(stack["transformer"])
    try:
        done = tiled(stack, image, mask)
    finally:
        handle.remove()
    assert [t.box for t in done.tiles] == [(0, 0, 64, 48)]  # on the model grid
    assert shapes == [[1, 12, 384]] * STEPS  # 4x3 tokens, the untiled run's input
    # one window: weight exactly 1, the untiled img_ids, the sampler's own transformer call -> bit for bit
    assert torch.equal(done.image, untiled(stack, image, mask))


def test_only_windows_meeting_the_grown_mask_run_one_window_a_call_and_outside_the_mask_is_the_source(stack):
    height, width = 96, 160  # tile 64, overlap 0.25: window columns at x 0, 48, 96; rows at y 0, 32
    image = picture(height, width)
    mask = torch.zeros(1, height, width)
    mask[:, 4:24, 4:28] = 1  # window 0; grown by the overlap (16 px) it reaches window 3 (rows from y 32)
    shapes, handle = record_transformer_inputs(stack["transformer"])
    progress, seen = [], {}
    try:
        done = tiled(stack, image, mask, callback=lambda step, total: progress.append((step, total)),
                     observe=lambda name, t: seen.__setitem__(name, t))
    finally:
        handle.remove()
    assert [r["index"] for r in done.records] == [0, 3]
    assert [r["calls"] for r in done.records] == [STEPS, STEPS]  # two windows a step, of six
    assert shapes == [[1, 16, 384]] * (2 * STEPS)  # 64x64 px = 4x4 tokens of 16 px: one window's tokens a call
    assert progress == [(k, 2 * STEPS) for k in range(1, 2 * STEPS + 1)]  # windows x steps
    outside = mask[0] == 0
    assert torch.equal(done.image[0][outside], image[0][outside])
    assert not torch.equal(done.image[0][~outside], image[0][~outside])  # the mask was sampled
    # the latents no window covers (x from 64 px = latent column 8) were carried to the condition's masked-image
    # latents (the source's there), not left as noise: float rounding of the Euler steps apart
    far = (seen["latent.unpacked"] - seen["masked_image_latents"])[..., 8:].abs().max()
    print(f"\nlatents outside every window vs the masked-image latents: max abs diff {float(far):.2e}")
    assert far < 1e-5
    assert seen["tile 0 transformer.input"].shape == (1, 16, 384)
    assert seen["denoiser.input"].shape == (1, 60, 384)  # the sampler's whole grid: 6x10 tokens, cut into windows

    mask[:, 12:84, 20:140] = 1  # across every window border: all six run every step
    shapes.clear()
    shapes, handle = record_transformer_inputs(stack["transformer"])
    try:
        done = tiled(stack, image, mask)
    finally:
        handle.remove()
    assert [r["calls"] for r in done.records] == [STEPS] * 6
    assert shapes == [[1, 16, 384]] * (6 * STEPS)
    assert torch.equal(done.image[0][mask[0] == 0], image[0][mask[0] == 0])


def test_seam_error_of_shared_and_independent_against_the_untiled_run_is_printed(stack):
    height, width = 96, 160
    image = picture(height, width)
    mask = torch.zeros(1, height, width)
    mask[:, 12:84, 20:140] = 1
    whole = untiled(stack, image, mask)
    inside = mask[0] > 0
    figures = {}
    for mode in ("independent", "shared"):
        done = tiled(stack, image, mask, mode=mode)
        band = seam_bands(done.tiles, height, width, 4) & inside  # the same boxes in both modes (160x96 is on grid)
        de = ciede2000(done.image[0], whole[0])  # [H,W] float64
        figures[mode] = (float(de[band].mean()), float(de[inside & ~band].mean()), int(band.sum()))
    print("\nFLUX Fill tiny, 6 windows of 64 px, overlap 0.25, mean dE00 vs the untiled run: "
          + "; ".join(f"{m}: seam band (4 px, {n} px) {s:.2f}, rest of the mask {r:.2f}"
                      for m, (s, r, n) in figures.items()))
    assert all(math.isfinite(v) for s, r, _ in figures.values() for v in (s, r))
    # shared samples the whole latent from the untiled run's own noise draw; only each token's attention span (one
    # window, not the whole image) differs, so it stays close to the untiled run, seams included (measured 0.23 in
    # the band, 0.26 elsewhere). independent draws each tile's own noise, so on this random tiny model each tile is
    # another picture (measured ~30 everywhere): the figure says how far from the untiled result, not a seam step.
    shared_seam, shared_rest, _ = figures["shared"]
    assert shared_seam < 1.0 and shared_seam < 1.5 * shared_rest
    assert shared_seam < figures["independent"][0]


def test_shared_mode_refuses_a_stack_of_another_family_and_options_before_sampling(stack):
    image, mask = picture(96, 160), torch.ones(1, 96, 160)
    shapes, handle = record_transformer_inputs(stack["transformer"])
    try:
        for family, kw, name in (("sd3-controlnet", {}, "stack"), ("klein", {}, "stack"),
                                 ("flux-fill", {"step_cache": "first-block"}, "step_cache"),
                                 ("flux-fill", {"parallel": 2}, "parallel"),
                                 ("flux-fill", {"cfg": 4.0}, "cfg")):
            with pytest.raises(FillScopeInputError) as e:
                run_tiled(family, stack, PROMPT, image, mask, tile=64, overlap=0.25, mode="shared", seed=0,
                          steps=1, tile_range=SMALL, **kw)
            assert e.value.input_name == name
    finally:
        handle.remove()
    assert shapes == []


@pytest.fixture(scope="module")
def meta_stack():
    return flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


# 6144x4096 only: a 2048x2048 case ran the same code with the same assertions (on meta only shapes are checked) at 8
# windows x 2 steps against this one's 5 x 2; what it alone had, windows overlapping by half a tile, is covered with
# values by the tiny runs above (64 px windows every 32 / 48 px); and a square image cannot show a swapped H and W
@pytest.mark.parametrize("height, width", [(4096, 6144)])
def test_flux_fill_meta_shared_runs_every_window_at_4096_tokens_and_gives_the_full_size(meta_stack, height, width):
    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, 500:800, 500:900] = 1  # across the windows at the top left
    mask[:, height - 300:height - 100, width - 500:width - 100] = 1  # inside the bottom right corner's
    shapes, handle = record_transformer_inputs(meta_stack["transformer"])
    started = time.perf_counter()
    try:
        done = run_tiled("flux-fill", meta_stack, "a red brick fireplace", image, mask, tile=1024, overlap=0.15,
                         mode="shared", seed=0, steps=2)
    finally:
        handle.remove()
    seconds = time.perf_counter() - started
    kept = [r["index"] for r in done.records]
    print(f"\nFLUX Fill meta {width}x{height} shared: {len(kept)} windows kept {kept}, "
          f"{len(shapes)} transformer calls, {seconds:.1f} s")
    assert len(shapes) == 2 * len(kept) > 0
    assert all(s == [1, 4096, 384] for s in shapes)  # one 1024x1024 window's tokens, never the whole grid's
    assert all(r["transformer_input"] == [1, 4096, 384] and r["calls"] == 2 for r in done.records)
    assert list(done.image.shape) == [1, height, width, 3]
    assert outside_is_source(done.image, image, mask)
