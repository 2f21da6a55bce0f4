"""Tiled sampling (issue 23, fillscope/tiled/) on the three families' tiny fp32 models and on FLUX Fill's meta
weights: an image that fits in one tile gives exactly the untiled run + paste-back; on a grid of tiles every pixel
outside the mask is the source's, tiles away from the mask are not sampled, progress counts tiles x steps and a
raising callback stops the run; the seam error against the untiled run is measured and printed (thresholds come
with real figures); at 6144x4096 the production FLUX Fill runs every tile at 4096 tokens and gives the full size."""

from __future__ import annotations

import math
import time

import pytest
import torch
from tiny_flux import build_tiny_flux_fill_folder
from tiny_klein import build_tiny_klein_folder
from tiny_models import comfy_tokenizer_dirs, outside_is_source, tokenizers_available
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

from fillscope import bounds, masks
from fillscope.compositing.tiles import ciede2000, seam_bands
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import flux_fill, klein, sd3_controlnet
from fillscope.tiled import run_tiled

PROMPT = "a red brick fireplace in a living room"
SMALL = bounds.Range(64, 4096)  # tiny models: 64 px tiles
STEPS = 2
# each family's own `run` and the options it is given, tiled or not
FAMILIES = {
    "flux-fill": (flux_fill, {"guidance": 30.0}),
    "sd3-controlnet-inpaint": (sd3_controlnet, {"negative_prompt": "blurry", "cfg": 4.0}),
    "klein": (klein, {}),
}


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiled")
    out = {
        "flux-fill": flux_fill.load_stack(build_tiny_flux_fill_folder(root / "flux", seed=0),
                                          tokenizer_folders=(None, None), dtype="fp32", device="cpu"),
        "sd3-controlnet-inpaint": sd3_controlnet.load_stack(
            build_tiny_sd3_folder(root / "sd3", seed=0), controlnet=build_tiny_sd3_controlnet_folder(root / "cn", seed=0),
            tokenizer_folders=(None, None), dtype="fp32", device="cpu"),
    }
    if tokenizers_available():  # klein's Qwen3 tokenizer comes from ComfyUI's files
        out["klein"] = klein.load_stack(str(build_tiny_klein_folder(root / "klein", seed=0, distilled=True)),
                                        tokenizer_folders=(None,), dtype="fp32", device="cpu")
    return out


def stack_of(stacks, family):
    if family not in stacks:
        pytest.skip("ComfyUI tokenizer files not found (klein's Qwen3 tokenizer)")
    return stacks[family]


def picture(height, width, seed=3):
    """A smooth picture with some texture (a seam shows on it), [1,H,W,3]."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, height)[:, None, None]
    xs = torch.linspace(0, 1, width)[None, :, None]
    base = torch.cat([xs.expand(height, width, 1), ys.expand(height, width, 1), (0.5 * (xs + ys)).expand(height, width, 1)], -1)
    return (0.8 * base + 0.2 * torch.rand(height, width, 3, generator=g)).clamp(0, 1).unsqueeze(0)


def untiled(family, stack, image, mask, seed=11):
    """The family's untiled run + paste-back, as the sampler node and paste-back give it."""
    pipeline, kw = FAMILIES[family]
    prepared = masks.prepare_image_and_mask(image, mask)
    done = pipeline.run(stack, PROMPT, prepared, steps=STEPS, seed=seed, **kw)
    return masks.paste_back(done.image, prepared.source, prepared.paste_mask)


def tiled(family, stack, image, mask, seed=11, **extra):
    return run_tiled(family, stack, PROMPT, image, mask, tile=64, overlap=0.25, seed=seed, steps=STEPS,
                     tile_range=SMALL, **FAMILIES[family][1], **extra)


def count_transformer_calls(stack):
    calls = []
    handle = stack["transformer"].model.register_forward_pre_hook(lambda *_: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_image_that_fits_in_one_tile_gives_exactly_the_untiled_result(stacks, family):
    stack = stack_of(stacks, family)
    image = picture(40, 56)  # not multiples of 16: the tile is padded and cropped back as the untiled run is
    mask = torch.zeros(1, 40, 56)
    mask[:, 8:30, 12:44] = 1
    done = tiled(family, stack, image, mask)
    assert [t.box for t in done.tiles] == [(0, 0, 56, 40)]
    assert torch.equal(done.image, untiled(family, stack, image, mask))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_on_3x2_tiles_pixels_outside_the_mask_are_the_source_and_the_seam_error_is_printed(stacks, family):
    stack = stack_of(stacks, family)
    height, width = 96, 160  # tile 64, overlap 0.25: columns at x 0, 48, 96; rows at y 0, 32
    image = picture(height, width)
    mask = torch.zeros(1, height, width)
    mask[:, 12:84, 20:140] = 1  # across every tile border
    observed = []
    done = tiled(family, stack, image, mask, observe=lambda name, t: observed.append(name))
    assert len(done.tiles) == 6 and all(r["sampled"] for r in done.records)
    assert outside_is_source(done.image, image, mask)
    assert {"tile 0 transformer.input", "tile 5 transformer.input"} <= set(observed)
    # 64x64 px = 4x4 tokens of 16 px; klein's inpaint also reads the tile's source as reference tokens
    tokens = 32 if family == "klein" else 16
    assert [r["tokens"] for r in done.records] == [tokens] * 6, [r["transformer_input"] for r in done.records]

    whole = untiled(family, stack, image, mask)
    band = seam_bands(done.tiles, height, width, 4) & (mask[0] > 0)
    de = ciede2000(done.image[0], whole[0])  # [H,W] float64
    seam, interior = float(de[band].mean()), float(de[(mask[0] > 0) & ~band].mean())
    print(f"\n{family}: 6 tiles, mean dE00 vs the untiled run: seam band (4 px, {int(band.sum())} px) {seam:.2f}, "
          f"rest of the mask {interior:.2f}; tile seconds {[r['seconds'] for r in done.records]}")
    assert math.isfinite(seam) and math.isfinite(interior)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_tiles_away_from_the_mask_are_not_sampled(stacks, family):
    stack = stack_of(stacks, family)
    image = picture(96, 160)
    mask = torch.zeros(1, 96, 160)
    mask[:, 4:24, 4:28] = 1  # tile 0 only; grown by the overlap (16 px) it reaches tile 3 (rows from y 32)
    calls, handle = count_transformer_calls(stack)
    try:
        untiled(family, stack, image, mask)
        per_run = len(calls)
        calls.clear()
        done = tiled(family, stack, image, mask)
    finally:
        handle.remove()
    assert [r["index"] for r in done.records] == [0, 3]
    assert [r["sampled"] for r in done.records] == [True, False]  # tile 3 holds no repaint pixel: its run skips
    assert len(calls) == per_run > 0  # one tile's steps, of six tiles
    assert torch.equal(done.image[0][mask[0] == 0], image[0][mask[0] == 0])


def test_progress_counts_tiles_times_steps_and_a_raising_callback_stops_between_steps(stacks):
    stack = stacks["flux-fill"]
    image, mask = picture(96, 160), torch.zeros(1, 96, 160)
    mask[:, 12:84, 20:140] = 1
    seen = []
    tiled("flux-fill", stack, image, mask, callback=lambda step, total: seen.append((step, total)))
    assert seen == [(k, 6 * STEPS) for k in range(1, 6 * STEPS + 1)]

    class Interrupted(Exception):
        pass

    def interrupt(step, total):
        if step == 3:  # tile 1's first step
            raise Interrupted
    calls, handle = count_transformer_calls(stack)
    try:
        with pytest.raises(Interrupted):
            tiled("flux-fill", stack, image, mask, callback=interrupt)
    finally:
        handle.remove()
    assert len(calls) == 3  # no step after the interrupt


def test_bad_settings_are_refused_before_sampling(stacks):
    stack = stacks["flux-fill"]
    image, mask = picture(96, 160), torch.ones(1, 96, 160)
    calls, handle = count_transformer_calls(stack)
    try:
        for kw, name in (({"tile": 1000}, "tile"), ({"overlap": 0.7}, "overlap"), ({"mode": "x"}, "mode"),
                         ({"soft_mask": mask}, "soft_mask"), ({"family": "sdxl"}, "family")):
            with pytest.raises(FillScopeInputError) as e:
                run_tiled(stack=stack, prompt=PROMPT, image=image, mask=mask, seed=0, steps=1,
                          **{"family": "flux-fill", "tile": 1024, "overlap": 0.15, **kw})
            assert e.value.input_name == name
    finally:
        handle.remove()
    assert calls == []


@pytest.fixture(scope="module")
def meta_stack():
    return flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def test_flux_fill_meta_at_6144x4096_runs_every_kept_tile_at_4096_tokens_and_gives_the_full_size(meta_stack):
    height, width = 4096, 6144
    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, 500:800, 500:900] = 1  # two scattered repairs: across the 4 tiles 0, 1, 7, 8; inside tile 34
    mask[:, 3500:3700, 5500:5900] = 1
    shapes = {}
    started = time.perf_counter()
    done = run_tiled("flux-fill", meta_stack, "a red brick fireplace", image, mask, tile=1024, overlap=0.15,
                     seed=0, steps=1, observe=lambda name, t: shapes.__setitem__(name, list(t.shape)))
    seconds = time.perf_counter() - started
    kept = [r["index"] for r in done.records]
    print(f"\nFLUX Fill meta 6144x4096: {len(kept)} of 35 tiles kept {kept}, {seconds:.1f} s "
          f"({[r['seconds'] for r in done.records]} s a tile)")
    assert kept == [0, 1, 7, 8, 34]
    for r in done.records:
        assert shapes[f"tile {r['index']} transformer.input"] == [1, 4096, 384]
        assert r["tokens"] == 4096 and r["transformer_input"] == [1, 4096, 384]
    assert list(done.image.shape) == [1, height, width, 3]
    assert outside_is_source(done.image, image, mask)


def test_an_image_too_big_for_the_memory_available_is_refused_with_its_size_and_both_figures(monkeypatch):
    """fillscope.tiled.check_room_for_image, as run_tiled and the tiled nodes call it before anything is prepared:
    the image's size, the memory its run needs (WHOLE_IMAGE_COPIES copies) and what is available."""
    import torch

    from fillscope.errors import FillScopeInputError
    from fillscope.models import AVAILABLE_RAM_ENV
    from fillscope.tiled import WHOLE_IMAGE_COPIES, check_room_for_image

    image = torch.zeros(1, 1024, 2048, 3)  # 24 MiB as float32 RGB: a run needs 48 MiB
    monkeypatch.setenv(AVAILABLE_RAM_ENV, str(40 * 2**20))
    with pytest.raises(FillScopeInputError) as e:
        check_room_for_image(image)
    assert str(e.value).startswith(f"[FillScope] input 'image': is 2048x1024: 0.02 GiB as float32 RGB, and a tiled run holds "
                                   f"{WHOLE_IMAGE_COPIES} more copies of it (the tiles' blend and the result), 0.05 GiB "
                                   "of CPU memory (RAM); only 0.04 GiB is available")
    monkeypatch.setenv(AVAILABLE_RAM_ENV, str(64 * 2**20))
    check_room_for_image(image)  # 48 MiB of 64: room enough
    check_room_for_image(torch.empty(1, 16384, 16384, 3, device="meta"))  # a meta image holds no memory
