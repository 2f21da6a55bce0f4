"""The tiled VAE (fillscope/vae_tiles.py) wired into tiled sampling's mode "shared" (issue 23: shared_flux_fill.py,
shared_sd3.py, shared_klein.py, keyword `vae_tile`): at full size on the meta device no encoder or decoder call sees
more than one VAE tile plus its context, and the result has the full size; on the tiny fp32 FLUX Fill an image up to
vae_tile a side gives exactly the whole-image VAE's result, and a smaller vae_tile runs the tiled path (several
encoder calls, none of the whole image) with every pixel outside the mask the source's; a bad vae_tile is refused
by name before any model runs."""

from __future__ import annotations

import time

import pytest
import torch
from tiny_flux import build_tiny_flux_fill_folder
from tiny_klein import qwen_bpe_dir
from tiny_models import comfy_tokenizer_dirs, outside_is_source

from fillscope import bounds
from fillscope import vae as vae_ops
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import flux_fill, klein, sd3_controlnet
from fillscope.tiled import run_tiled
from fillscope.vae_tiles import DEFAULT_CONTEXT

PROMPT = "a red brick fireplace in a living room"
SMALL = bounds.Range(64, 4096)  # tiny models: 64 px sampler windows
FAMILY_KWARGS = {"flux-fill": {"guidance": 30.0}, "sd3-controlnet": {"negative_prompt": "", "cfg": 7.0},
                 "klein": {}}


def record_vae_sides(vae):
    """Every encoder / decoder call's input [B,C,h,w] -> (h, w), by forward pre-hooks on the VAE's own modules
    (pixels for the encoder; the raw latent, /8 for all three families' VAEs, for the decoder)."""
    sides = {"encoder": [], "decoder": []}
    handles = [getattr(vae.model, name).register_forward_pre_hook(
        lambda _m, args, seen=seen: seen.append(tuple(args[0].shape[-2:]))) for name, seen in sides.items()]
    return sides, handles


def count_calls(module):
    calls = []
    return calls, module.register_forward_pre_hook(lambda *_a, **_k: calls.append(1), with_kwargs=True)


# ---- full size on the meta device --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flux_meta():
    return flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


@pytest.fixture(scope="module")
def sd3_meta():
    return sd3_controlnet.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


@pytest.fixture(scope="module")
def klein_meta():
    return klein.load_stack("meta", tokenizer_folders=(qwen_bpe_dir(),), variant="klein-4b")


@pytest.mark.parametrize("family", ["flux-fill", "sd3-controlnet", "klein"])
def test_meta_shared_at_4096x2048_runs_the_vae_one_tile_at_a_time(family, request):
    stack = request.getfixturevalue({"flux-fill": "flux_meta", "sd3-controlnet": "sd3_meta",
                                     "klein": "klein_meta"}[family])
    height, width, vae_tile = 2048, 4096, 1024
    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, 100:200, 100:200] = 1  # inside the top left window only: one window x one step keeps meta fast
    vae = stack["vae"]
    sides, handles = record_vae_sides(vae)
    started = time.perf_counter()
    try:
        done = run_tiled(family, stack, PROMPT, image, mask, tile=1024, overlap=0.15, mode="shared", seed=0,
                         steps=1, vae_tile=vae_tile, **FAMILY_KWARGS[family])
    finally:
        for h in handles:
            h.remove()
    seconds = time.perf_counter() - started
    s = vae_ops.latent_format(vae).downscale
    context = -(-DEFAULT_CONTEXT // s) * s
    enc_px = max(max(hw) for hw in sides["encoder"])
    dec_cells = max(max(hw) for hw in sides["decoder"])
    print(f"\n{family} meta {width}x{height} shared, vae_tile {vae_tile} (+{context} px context): "
          f"{len(sides['encoder'])} distinct encoder call shape(s) {sorted(set(sides['encoder']))}, largest "
          f"{enc_px} px; {len(sides['decoder'])} decoder call(s), largest {dec_cells} latent cells; {seconds:.1f} s")
    # meta memoises by crop shape (vae_tiles._shape_only): several distinct shapes means the image was cut up
    assert len(sides["encoder"]) > 1 and len(sides["decoder"]) > 1
    assert enc_px <= vae_tile + 2 * context
    assert dec_cells * 8 <= vae_tile + 2 * context
    assert list(done.image.shape) == [1, height, width, 3]
    assert outside_is_source(done.image, image, mask)


# ---- values on the tiny fp32 FLUX Fill ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("vae_wiring") / "flux", seed=0)
    return flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")


def picture(height, width, seed=3):
    """A smooth picture with some texture, [1,H,W,3] (as test_tiled_shared's)."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, height)[:, None, None]
    xs = torch.linspace(0, 1, width)[None, :, None]
    base = torch.cat([xs.expand(height, width, 1), ys.expand(height, width, 1),
                      (0.5 * (xs + ys)).expand(height, width, 1)], -1)
    return (0.8 * base + 0.2 * torch.rand(height, width, 3, generator=g)).clamp(0, 1).unsqueeze(0)


def tiny_shared(stack, image, mask, **extra):
    return run_tiled("flux-fill", stack, PROMPT, image, mask, tile=64, overlap=0.25, mode="shared", seed=11,
                     steps=2, tile_range=SMALL, guidance=30.0, **extra)


def test_an_image_within_vae_tile_gives_exactly_the_whole_vae_result(tiny):
    height, width = 96, 160  # 3 x 2 sampler windows of 64 px; one VAE tile at any vae_tile >= 256
    image, mask = picture(height, width), torch.zeros(1, height, width)
    mask[:, 20:70, 40:120] = 1
    sides, handles = record_vae_sides(tiny["vae"])
    try:
        default = tiny_shared(tiny, image, mask)  # vae_tile 1024
        smallest = tiny_shared(tiny, image, mask, vae_tile=256)
        whole = tiny_shared(tiny, image, mask, vae_tile=4096)  # vae_tiles: one tile = vae.encode / decode itself
    finally:
        for h in handles:
            h.remove()
    assert len(default.tiles) > 1  # the sampler's windows are tiled; the VAE is not
    assert sides["encoder"] == [(height, width)] * 3 and sides["decoder"] == [(height // 8, width // 8)] * 3
    assert torch.equal(default.image, whole.image) and torch.equal(smallest.image, whole.image)


def test_a_smaller_vae_tile_runs_the_tiled_path_and_keeps_the_source_outside_the_mask(tiny):
    height, width = 256, 576  # vae_tile 256: 3 VAE tiles along x (planned on the latent grid), one along y
    image, mask = picture(height, width), torch.zeros(1, height, width)
    mask[:, 96:160, 256:320] = 1  # across the VAE tiles' first seam region
    sides, handles = record_vae_sides(tiny["vae"])
    started = time.perf_counter()
    try:
        tiled = tiny_shared(tiny, image, mask, vae_tile=256)
    finally:
        for h in handles:
            h.remove()
    tiled_seconds = time.perf_counter() - started
    tiled_sides = {k: list(v) for k, v in sides.items()}
    whole = tiny_shared(tiny, image, mask, vae_tile=4096)
    context = DEFAULT_CONTEXT
    assert len(tiled_sides["encoder"]) > 1 and len(tiled_sides["decoder"]) > 1
    assert all(h <= 256 + 2 * context and w <= 256 + 2 * context for h, w in tiled_sides["encoder"])
    assert all(w < width for _, w in tiled_sides["encoder"])
    assert all(8 * w <= 256 + 2 * context for _, w in tiled_sides["decoder"])
    assert list(tiled.image.shape) == [1, height, width, 3]
    assert outside_is_source(tiled.image, image, mask)
    inside = mask[0] > 0
    gap = (tiled.image[0][inside] - whole.image[0][inside]).abs()
    print(f"\ntiny FLUX Fill {width}x{height} shared, vae_tile 256: {len(tiled_sides['encoder'])} encoder calls "
          f"{tiled_sides['encoder']}, {len(tiled_sides['decoder'])} decoder calls; inside the mask vs whole VAE "
          f"(vae_tile 4096): max |diff| {gap.max():.4f}, mean {gap.mean():.4f} (0..1 range); {tiled_seconds:.1f} s")
    assert torch.isfinite(tiled.image).all()


# ---- refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vae_tile", [128, 4112, 1000, 1024.5, "1024", True])
def test_a_bad_vae_tile_is_refused_by_name_before_any_model_runs(tiny, vae_tile):
    image, mask = picture(96, 160), torch.zeros(1, 96, 160)
    mask[:, 20:70, 40:120] = 1
    modules = [tiny["transformer"].model, tiny["vae"].model, tiny["t5"].model, tiny["clip_l"].model]
    hooks = [count_calls(m) for m in modules]
    try:
        with pytest.raises(FillScopeInputError) as e:
            tiny_shared(tiny, image, mask, vae_tile=vae_tile)
    finally:
        for _, h in hooks:
            h.remove()
    assert e.value.input_name == "vae_tile"
    assert all(calls == [] for calls, _ in hooks)


@pytest.mark.parametrize("family", ["sd3-controlnet", "klein"])
def test_sd3_and_klein_refuse_a_bad_vae_tile_by_name(family, request):
    stack = request.getfixturevalue({"sd3-controlnet": "sd3_meta", "klein": "klein_meta"}[family])
    image, mask = torch.rand(1, 512, 512, 3), torch.ones(1, 512, 512)
    calls, handle = count_calls(stack["transformer"].model)
    try:
        with pytest.raises(FillScopeInputError) as e:
            run_tiled(family, stack, PROMPT, image, mask, tile=512, overlap=0.15, mode="shared", seed=0, steps=1,
                      vae_tile=200, **FAMILY_KWARGS[family])
    finally:
        handle.remove()
    assert e.value.input_name == "vae_tile" and calls == []
