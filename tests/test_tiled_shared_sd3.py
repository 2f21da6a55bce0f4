"""Tiled sampling's mode "shared" for SD3 + the inpainting ControlNet (issue 23, fillscope/tiled/shared_sd3.py:
MultiDiffusion) on the tiny fp32 SD3 stack and on SD3-medium's meta weights: an image that fits in one window gives
exactly the untiled run + paste-back; on a grid of windows every pixel outside the mask is the source's, the
ControlNet and the MMDiT run only the windows that meet the grown mask, one window's latents a call, every step;
progress counts windows x steps and a raising callback stops between window calls; the seam error against the
untiled run is printed next to mode "independent"'s on the same inputs; at full size (wider than SD3-medium's
3072 px position-embedding grid) the production models see one 1024 px window (4096 tokens) a call."""

from __future__ import annotations

import math
import time

import pytest
import torch
from tiny_models import comfy_tokenizer_dirs, outside_is_source
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

from fillscope import bounds, masks
from fillscope.compositing.tiles import ciede2000, seam_bands
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import sd3_controlnet
from fillscope.tiled import run_tiled

PROMPT = "a red brick fireplace in a living room"
SMALL = bounds.Range(64, 4096)  # tiny models: 64 px tiles
STEPS = 2
OPTIONS = {"negative_prompt": "blurry", "cfg": 4.0}  # CFG on: the window's batch is [negative, positive]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny models' matrices are a few dozen wide: one thread runs them fastest, and on a shared 2-core machine
    more threads spin against each other (measured here: a shared run 4.6 s on one thread, 89 s on two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared_sd3")
    return sd3_controlnet.load_stack(build_tiny_sd3_folder(root / "sd3", seed=0),
                                     controlnet=build_tiny_sd3_controlnet_folder(root / "cn", seed=0),
                                     tokenizer_folders=(None, None), dtype="fp32", device="cpu")


def picture(height, width, seed=3):
    """A smooth picture with some texture (a seam shows on it), [1,H,W,3] (as test_tiled_sampling's)."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, height)[:, None, None]
    xs = torch.linspace(0, 1, width)[None, :, None]
    base = torch.cat([xs.expand(height, width, 1), ys.expand(height, width, 1),
                      (0.5 * (xs + ys)).expand(height, width, 1)], -1)
    return (0.8 * base + 0.2 * torch.rand(height, width, 3, generator=g)).clamp(0, 1).unsqueeze(0)


def untiled(stack, image, mask, seed=11, **extra):
    prepared = masks.prepare_image_and_mask(image, mask)
    done = sd3_controlnet.run(stack, PROMPT, prepared, steps=STEPS, seed=seed, **{**OPTIONS, **extra})
    return masks.paste_back(done.image, prepared.source, prepared.paste_mask)


def tiled(stack, image, mask, mode="shared", seed=11, **extra):
    return run_tiled("sd3-controlnet", stack, PROMPT, image, mask, tile=64, overlap=0.25, mode=mode, seed=seed,
                     steps=STEPS, tile_range=SMALL, **{**OPTIONS, **extra})


def record_inputs(stack):
    """The hidden_states shape of every call of the real MMDiT and ControlNet modules (forward pre-hooks)."""
    shapes = {"transformer": [], "controlnet": []}
    handles = [stack[name].model.register_forward_pre_hook(
        lambda _m, _args, kwargs, _name=name: shapes[_name].append(list(kwargs["hidden_states"].shape)),
        with_kwargs=True) for name in shapes]
    return shapes, handles


@pytest.mark.parametrize("extra", [{}, {"residual_mapping": "diffusers", "denoise": 0.6, "control_end": 0.5}],
                         ids=["defaults", "diffusers-mapping-denoise-control-end"])
def test_an_image_that_fits_in_one_window_gives_exactly_the_untiled_result(stack, extra):
    image = picture(40, 56)  # off the 16 px grid: the whole image is padded to 64x48, one window of that grid
    mask = torch.zeros(1, 40, 56)
    mask[:, 8:30, 12:44] = 1
    shapes, handles = record_inputs(stack)
    try:
        done = tiled(stack, image, mask, **extra)
    finally:
        for h in handles:
            h.remove()
    assert [t.box for t in done.tiles] == [(0, 0, 64, 48)]  # on the model grid
    # 64x48 px = 8x6 latent cells, [negative, positive] in one batch: the untiled run's inputs (denoise 0.6 keeps
    # both steps, int(2 - 1.2) = 0 dropped, from the noised source; control_end 0.5 keeps the ControlNet on step 1)
    assert shapes == {"transformer": [[2, 16, 6, 8]] * STEPS, "controlnet": [[2, 16, 6, 8]] * (1 if extra else STEPS)}
    assert done.records[0]["tokens"] == 12 and done.records[0]["transformer_input"] == [2, 16, 6, 8]
    # one window: weight exactly 1, the window is the whole grid, the untiled predict / CFG / Euler -> bit for bit
    assert torch.equal(done.image, untiled(stack, image, mask, **extra))


def test_only_windows_meeting_the_grown_mask_run_one_window_a_call_and_outside_the_mask_is_the_source(stack):
    height, width = 96, 160  # tile 64, overlap 0.25: window columns at x 0, 48, 96; rows at y 0, 32
    image = picture(height, width)
    mask = torch.zeros(1, height, width)
    mask[:, 4:24, 4:28] = 1  # window 0; grown by the overlap (16 px) it reaches window 3 (rows from y 32)
    shapes, handles = record_inputs(stack)
    progress, seen = [], {}
    try:
        done = tiled(stack, image, mask, callback=lambda step, total: progress.append((step, total)),
                     observe=lambda name, t: seen.__setitem__(name, t))
    finally:
        for h in handles:
            h.remove()
    assert [r["index"] for r in done.records] == [0, 3]
    assert [r["calls"] for r in done.records] == [STEPS, STEPS]  # two windows a step, of six
    assert all(r["tokens"] == 16 and r["transformer_input"] == [2, 16, 8, 8] for r in done.records)
    # 64x64 px = 8x8 latent cells = 16 patches: one window's latents a call, for the ControlNet and the MMDiT
    assert shapes == {"transformer": [[2, 16, 8, 8]] * (2 * STEPS), "controlnet": [[2, 16, 8, 8]] * (2 * STEPS)}
    assert progress == [(k, 2 * STEPS) for k in range(1, 2 * STEPS + 1)]  # windows x steps
    outside = mask[0] == 0
    assert torch.equal(done.image[0][outside], image[0][outside])
    assert not torch.equal(done.image[0][~outside], image[0][~outside])  # the mask was sampled
    # the latents no window covers (x from 64 px = latent column 8) were carried to the condition's masked-image
    # latents (the source's there), not left as noise: float rounding of the Euler steps apart
    far = (seen["latent"] - seen["masked_image_latents"])[..., 8:].abs().max()
    print(f"\nlatents outside every window vs the masked-image latents: max abs diff {float(far):.2e}")
    assert far < 1e-5
    assert seen["tile 0 transformer.input"].shape == (2, 16, 8, 8)
    assert seen["denoiser.input"].shape == (1, 16, 12, 20)  # the sampler's whole grid, cut into windows
    assert seen["control_image"].shape == (2, 17, 12, 20)  # the whole condition, encoded once

    mask[:, 12:84, 20:140] = 1  # across every window border: all six run every step
    shapes, handles = record_inputs(stack)
    try:
        done = tiled(stack, image, mask)
    finally:
        for h in handles:
            h.remove()
    assert [r["calls"] for r in done.records] == [STEPS] * 6
    assert shapes["transformer"] == [[2, 16, 8, 8]] * (6 * STEPS)
    assert torch.equal(done.image[0][mask[0] == 0], image[0][mask[0] == 0])


def test_a_raising_callback_stops_the_run_between_two_window_calls(stack):
    image = picture(96, 160)
    mask = torch.zeros(1, 96, 160)
    mask[:, 12:84, 20:140] = 1  # six windows a step
    shapes, handles = record_inputs(stack)

    class Interrupted(Exception):
        pass

    def stop_after_three(step, total):
        if step == 3:
            raise Interrupted(f"{step} of {total}")

    try:
        with pytest.raises(Interrupted, match="3 of 12"):
            tiled(stack, image, mask, callback=stop_after_three)
    finally:
        for h in handles:
            h.remove()
    assert len(shapes["transformer"]) == 3  # the fourth window never ran


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
    print("\nSD3 ControlNet tiny (measured in this run), 6 windows of 64 px, overlap 0.25, cfg 4, mean dE00 vs the "
          "untiled run: " + "; ".join(f"{m}: seam band (4 px, {n} px) {s:.2f}, rest of the mask {r:.2f}"
                                      for m, (s, r, n) in figures.items()))
    assert all(math.isfinite(v) for s, r, _ in figures.values() for v in (s, r))
    # shared samples the whole latent from the untiled run's own noise draw, with the untiled condition cut per window;
    # only each token's attention span (one window, not the whole image) and the window-local position crop differ,
    # so it stays near the untiled run (measured 3.6 in the band, 3.5 elsewhere: CFG 4 amplifies the difference the
    # span makes, FLUX Fill's guidance-distilled model shows 0.2). independent draws each tile's own noise, so on this
    # random tiny model each tile is another picture (measured ~31 everywhere). Thresholds: shared at most half of
    # independent in the band (measured ~1/9), and no step at the seams (band at most 1.5 x the rest of the mask).
    shared_seam, shared_rest, _ = figures["shared"]
    assert shared_seam < 0.5 * figures["independent"][0]
    assert shared_seam < 1.5 * shared_rest


def test_shared_mode_refuses_options_and_oversized_windows_before_sampling(stack):
    image, mask = picture(96, 160), torch.ones(1, 96, 160)
    shapes, handles = record_inputs(stack)
    try:
        for kw, name in (({"parallel": 2}, "parallel"), ({"guidance": 3.0}, "guidance"),
                         ({"cfg": float("nan")}, "cfg"), ({"residual_mapping": "nearest"}, "residual_mapping")):
            with pytest.raises(FillScopeInputError) as e:
                tiled(stack, image, mask, **kw)
            assert e.value.input_name == name
        # the tiny models' position-embedding grids are 96 patches = 1536 px a side: a 1600 px window is refused
        big, big_mask = torch.rand(1, 1600, 1600, 3), torch.ones(1, 1600, 1600)
        with pytest.raises(FillScopeInputError) as e:
            run_tiled("sd3-controlnet", stack, PROMPT, big, big_mask, tile=1600, overlap=0.25, mode="shared",
                      seed=0, steps=1, tile_range=SMALL, **OPTIONS)
        assert e.value.input_name == "tile" and "1536" in e.value.fix
    finally:
        for h in handles:
            h.remove()
    assert shapes == {"transformer": [], "controlnet": []}


@pytest.fixture(scope="module")
def meta_stack():
    return sd3_controlnet.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def test_sd3_meta_shared_past_the_position_grid_runs_every_window_at_4096_tokens(meta_stack):
    height, width = 2048, 4096  # wider than SD3-medium's 3072 px grid: the untiled run refuses it
    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    # window starts (tile 1024, overlap 0.15): x 0, 768, 1536, 2304, 3072; y 0, 512, 1024. A mask across the first
    # column border, grown by the overlap (154 px), meets 2 of the 15 windows: 2 windows x 1 step keeps meta fast
    mask[:, 100:200, 900:1000] = 1
    shapes, handles = record_inputs(meta_stack)
    started = time.perf_counter()
    try:
        done = run_tiled("sd3-controlnet", meta_stack, "a red brick fireplace", image, mask, tile=1024,
                         overlap=0.15, mode="shared", seed=0, steps=1, negative_prompt="", cfg=7.0)
    finally:
        for h in handles:
            h.remove()
    seconds = time.perf_counter() - started
    kept = [r["index"] for r in done.records]
    print(f"\nSD3 ControlNet meta {width}x{height} shared: {len(kept)} windows kept {kept} of {3 * 5}, "
          f"{len(shapes['transformer'])} MMDiT and {len(shapes['controlnet'])} ControlNet calls, {seconds:.1f} s")
    assert kept == [0, 1]
    assert len(shapes["transformer"]) == len(shapes["controlnet"]) == len(kept)
    # one 1024x1024 window, [negative, positive]: 128x128 latent cells = 4096 patches a call, never the whole grid's
    assert all(s == [2, 16, 128, 128] for s in shapes["transformer"] + shapes["controlnet"])
    assert all(r["tokens"] == 4096 and r["calls"] == 1 for r in done.records)
    assert list(done.image.shape) == [1, height, width, 3]
    assert outside_is_source(done.image, image, mask)
    with pytest.raises(FillScopeInputError) as e:  # the untiled run, for contrast: past the position grid
        sd3_controlnet.check_image_size(masks.prepare_image_and_mask(image[:, :64], mask[:, :64]))
    assert e.value.input_name == "image"
