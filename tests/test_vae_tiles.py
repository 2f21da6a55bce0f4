"""Tiled VAE encode / decode (fillscope/vae_tiles.py, issue 23) on the tiny fp32 VAEs of the three families (FLUX.1
and SD3 AutoencoderKL at /8, klein's FLUX.2 VAE at /16 in normalised 2x2 patches) and on the full-size meta VAEs:

- an image that fits in one tile is the untiled call, bit for bit;
- the tiling itself (crops with context, centres kept, ramp blend) is exact to float32 rounding on a VAE whose only
  global operations are pinned: no mid-block attention and every GroupNorm normalising with the whole image's
  statistics (recorded from the whole call), once the context covers the receptive field;
- on the real tiny VAEs (GroupNorm per tile, mid-block attention within the tile) the max / mean abs difference
  against the whole call is printed and held to diffusers' own tiled_encode / tiled_decode at the same tile size
  (the tiled VAE diffusers ships, measured in the same run);
- at full size (8192 x 6144 px, meta) the shapes are the untiled call's and no encoder / decoder call sees more
  than one tile plus its context;
- bad settings are refused before any model runs.
Peak memory, tiled vs whole, is measured in bench/bench_vae_tiles.py (a fresh process per call, ru_maxrss).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from tiny_flux import TINY_VAE_CONFIG as FLUX_VAE_CONFIG
from tiny_flux import build_tiny_components as build_tiny_flux
from tiny_klein import TINY_VAE_CONFIG as KLEIN_VAE_CONFIG
from tiny_klein import build_tiny_components as build_tiny_klein
from tiny_models import build_components
from tiny_sd3 import build_tiny_sd3_components

from fillscope import bounds
from fillscope import vae as vae_ops
from fillscope.errors import FillScopeInputError
from fillscope.vae_tiles import DEFAULT_CONTEXT, DEFAULT_TILE, decode_tiled, encode_tiled
from fillscope.weights import Component

SMALL = bounds.Range(64, 4096)  # tiny models: tiles of 64 px and up
FAMILIES = ("flux", "sd3", "klein")
KINDS = {"flux": "flux_vae", "sd3": "sd3_vae", "klein": "flux2_vae"}


def component(family: str, model) -> Component:
    return Component(KINDS[family], model, "tiny", "tiny fp32", "cpu", "fp32", dict(model.config))


@pytest.fixture(scope="module")
def vaes():
    """The tiny VAEs the families' tests use (tiny_flux / tiny_sd3 / tiny_klein builders, seed 0)."""
    return {"flux": component("flux", build_tiny_flux(0)["vae"]),
            "sd3": component("sd3", build_tiny_sd3_components(0)["vae"]),
            "klein": component("klein", build_tiny_klein(0)["vae"])}


def picture(height, width, seed=3):
    """A smooth picture with some texture, [1,3,H,W] in [-1,1] (as test_tiled_shared's, channels first)."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, height)[:, None, None]
    xs = torch.linspace(0, 1, width)[None, :, None]
    base = torch.cat([xs.expand(height, width, 1), ys.expand(height, width, 1),
                      (0.5 * (xs + ys)).expand(height, width, 1)], -1)
    image = (0.8 * base + 0.2 * torch.rand(height, width, 3, generator=g)).clamp(0, 1)
    return image.permute(2, 0, 1).unsqueeze(0) * 2 - 1


def diff(a, b) -> tuple:
    d = (a.float() - b.float()).abs()
    return d.max().item(), d.mean().item()


@pytest.mark.parametrize("family", FAMILIES)
def test_an_image_that_fits_in_one_tile_is_the_untiled_call_bit_for_bit(vaes, family):
    vae = vaes[family]
    pixels = picture(48, 64)  # klein: 3x4 patches at /16; FLUX.1 / SD3: 6x8 latents at /8
    calls = []
    whole = vae_ops.encode(vae, pixels)
    tiled = encode_tiled(vae, pixels, tile=64, context=32, tile_range=SMALL, callback=lambda *a: calls.append(a))
    assert torch.equal(tiled, whole) and calls == [(1, 1)]
    assert torch.equal(decode_tiled(vae, whole, tile=64, tile_range=SMALL), vae_ops.decode(vae, whole))
    batch = torch.cat([pixels, picture(48, 64, seed=5)])  # a batch goes through as one call too
    assert torch.equal(encode_tiled(vae, batch, tile=64, tile_range=SMALL), vae_ops.encode(vae, batch))


# ---- the tiling is exact where the VAE is local ------------------------------------------------------------------


@contextlib.contextmanager
def record_group_norm_stats(model):
    """Every GroupNorm's per-(image, group) mean and variance of one call, {module: (mean [B,G], var [B,G])}."""
    stats, handles = {}, []

    def hook(module, args, _out):
        x = args[0].float().reshape(args[0].shape[0], module.num_groups, -1)
        stats[module] = (x.mean(-1), x.var(-1, unbiased=False))

    for m in model.modules():
        if isinstance(m, torch.nn.GroupNorm):
            handles.append(m.register_forward_hook(hook))
    try:
        yield stats
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def pinned_group_norm(stats):
    """Every GroupNorm normalises with the given statistics (the whole image's) instead of its input's: the one
    global operation of a VAE without attention, pinned, so a tile computes what the whole call computes there."""
    for m, (mean, var) in stats.items():
        def forward(x, m=m, mean=mean, var=var):
            g = x.float().reshape(x.shape[0], m.num_groups, -1)
            y = ((g - mean[..., None]) / torch.sqrt(var[..., None] + m.eps)).reshape(x.shape).to(x.dtype)
            shape = (1, -1) + (1,) * (x.dim() - 2)
            return y * m.weight.view(shape) + m.bias.view(shape)
        m.forward = forward
    try:
        yield
    finally:
        for m in stats:
            del m.forward


def local_vae(family: str) -> Component:
    """The family's tiny VAE without its mid-block attention (same config and seed otherwise)."""
    from diffusers import AutoencoderKL, AutoencoderKLFlux2

    cls, config = (AutoencoderKLFlux2, KLEIN_VAE_CONFIG) if family == "klein" else (AutoencoderKL, FLUX_VAE_CONFIG)
    model = build_components(0, {"vae": (3, lambda: cls(**{**config, "mid_block_add_attention": False}))},
                             None)["vae"]
    return component("klein" if family == "klein" else "flux", model)


@pytest.mark.parametrize("family", ("flux", "klein"))
@pytest.mark.parametrize("height,width", [(128, 512), (512, 128)])
def test_tiling_is_exact_to_rounding_on_a_local_vae_once_the_context_covers_the_receptive_field(family, height,
                                                                                                width):
    """The tiny VAE's receptive field is under 96 px (measured: with 32 px of context the difference is 1e-2..1e-1);
    with 128 px every kept centre sees what the whole call sees, so what is left is float32 rounding (convolutions
    on inputs of other sizes sum in another order): held to 1e-4 of the values' range. A strip of 4 tiles, across
    and down: the inner tiles' crops stop short of the image on both sides."""
    vae = local_vae(family)
    pixels = picture(height, width)
    whole = vae_ops.encode(vae, pixels)
    with record_group_norm_stats(vae.model) as enc_stats:
        vae_ops.encode(vae, pixels)
    with record_group_norm_stats(vae.model) as dec_stats:
        decoded = vae_ops.decode(vae, whole)
    tol_enc, tol_dec = 1e-4 * whole.abs().max().item(), 1e-4 * decoded.abs().max().item()
    with pinned_group_norm(dict(enc_stats)):
        # overlap 0 for encode (the crops and centres are what is tested), the default ramp blend for decode
        narrow = encode_tiled(vae, pixels, tile=128, overlap=0.0, context=32, tile_range=SMALL)
        tiled = encode_tiled(vae, pixels, tile=128, overlap=0.0, context=128, tile_range=SMALL)
    with pinned_group_norm(dict(dec_stats)):
        tiled_dec = decode_tiled(vae, whole, tile=128, context=128, tile_range=SMALL)
    print(f"\n{family} local VAE, {width}x{height} px, tile 128 px: encode context 32 px max "
          f"{diff(narrow, whole)[0]:.2e}; context 128 px encode max {diff(tiled, whole)[0]:.2e} (tol {tol_enc:.1e}), "
          f"decode max {diff(tiled_dec, decoded)[0]:.2e} (tol {tol_dec:.1e})")
    assert diff(tiled, whole)[0] <= tol_enc and diff(tiled_dec, decoded)[0] <= tol_dec
    assert diff(narrow, whole)[0] > tol_enc  # the context is what makes it exact, not a trivial plan


# ---- the real tiny VAEs: held to diffusers' own tiled VAE -------------------------------------------------------


@contextlib.contextmanager
def diffusers_tiling(model, tile_px: int):
    """diffusers' own tiled_encode / tiled_decode (AutoencoderKL, AutoencoderKLFlux2) at `tile_px`, its default
    overlap 0.25; vae.encode / vae.decode then go through them (the raw latent is /8 for all three VAEs)."""
    model.enable_tiling()
    model.tile_sample_min_size, model.tile_latent_min_size = tile_px, tile_px // 8
    try:
        yield
    finally:
        model.disable_tiling()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_large_image_is_closer_to_the_whole_call_than_diffusers_tiled_vae_at_the_same_tile(vaes, family):
    """The tiny VAEs' GroupNorm (per tile here) and mid-block attention (within the tile) are global: no tiling
    reproduces them (the local-VAE test above shows the rest is exact), and on random tiny weights they weigh far
    more than on a trained VAE, so the absolute figures are large. The bar is the tiled VAE diffusers ships, at the
    same tile size on the same image: ours (with context and ramp blend) must be at least as close, max and mean."""
    vae = vaes[family]
    pixels = picture(256, 384)
    whole = vae_ops.encode(vae, pixels)
    decoded = vae_ops.decode(vae, whole)
    ticks = []
    tiled = encode_tiled(vae, pixels, tile=128, context=64, tile_range=SMALL, callback=lambda d, n: ticks.append(d))
    tiled_dec = decode_tiled(vae, whole, tile=128, context=64, tile_range=SMALL)
    with diffusers_tiling(vae.model, 128):
        theirs_enc, theirs_dec = vae_ops.encode(vae, pixels), vae_ops.decode(vae, whole)
    assert tiled.shape == whole.shape and tiled_dec.shape == decoded.shape and tiled.dtype == whole.dtype
    assert ticks == list(range(1, len(ticks) + 1)) and len(ticks) > 1
    ours_enc, ours_dec = diff(tiled, whole), diff(tiled_dec, decoded)
    same_enc, same_dec = diff(theirs_enc, whole), diff(theirs_dec, decoded)
    print(f"\n{family} 384x256 px, abs difference to the whole call (max / mean), measured in this run:\n"
          f"  encode: ours tile 128 + context 64 {ours_enc[0]:.3f} / {ours_enc[1]:.4f}; diffusers tile 128 "
          f"{same_enc[0]:.3f} / {same_enc[1]:.4f}  (latent std {whole.std().item():.3f})\n"
          f"  decode: ours {ours_dec[0]:.3f} / {ours_dec[1]:.4f}; diffusers tile 128 {same_dec[0]:.3f} / "
          f"{same_dec[1]:.4f}  (image std {decoded.std().item():.3f})")
    assert ours_enc[0] <= same_enc[0] and ours_enc[1] <= same_enc[1]
    assert ours_dec[0] <= same_dec[0] and ours_dec[1] <= same_dec[1]


# ---- full size on the meta device --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,latent", [("flux", (16, 768, 1024)), ("sd3", (16, 768, 1024)),
                                         ("flux2", (128, 384, 512))])
def test_full_size_shapes_on_meta_with_one_tile_a_call(kind, latent):
    vae = vae_ops.load_vae("meta", kind=kind)
    pixels = torch.empty(1, 3, 6144, 8192, device="meta")
    sides = {"encoder": [], "decoder": []}
    hooks = [getattr(vae.model, name).register_forward_pre_hook(
        lambda _m, args, seen=seen: seen.append(max(args[0].shape[-2:]))) for name, seen in sides.items()]
    ticks = []
    try:
        latents = encode_tiled(vae, pixels, callback=lambda d, n: ticks.append((d, n)))
        decoded = decode_tiled(vae, latents)
    finally:
        for h in hooks:
            h.remove()
    assert latents.device.type == "meta" and tuple(latents.shape) == (1, *latent)
    assert decoded.device.type == "meta" and tuple(decoded.shape) == (1, 3, 6144, 8192)
    total = ticks[-1][1]
    assert ticks == [(i, total) for i in range(1, total + 1)] and total > 1
    s = 8192 // latent[2]
    biggest_px = max(sides["encoder"])  # encoder inputs, px
    biggest_latent = max(sides["decoder"])  # decoder inputs (the raw latent, /8 for all three)
    print(f"\n{kind}: 8192x6144 px -> {list(latents.shape)} in {total} tiles of {DEFAULT_TILE} px + {DEFAULT_CONTEXT} px "
          f"context; largest encoder input {biggest_px} px, largest decoder input {biggest_latent} latent cells")
    assert biggest_px <= DEFAULT_TILE + 2 * DEFAULT_CONTEXT
    assert biggest_latent * 8 <= DEFAULT_TILE + 2 * DEFAULT_CONTEXT
    assert s == vae_ops.latent_format(vae).downscale


# ---- refusals ----------------------------------------------------------------------------------------------------


def test_bad_settings_are_refused_before_the_model_runs(vaes):
    vae = vaes["klein"]  # /16
    pixels = picture(256, 384)
    cases = [(dict(tile=72), "tile"), (dict(tile=128, context=24), "context"), (dict(tile=128, context=-16), "context"),
             (dict(tile=128, overlap=0.9), "overlap")]
    for kwargs, name in cases:
        with pytest.raises(FillScopeInputError) as err:
            encode_tiled(vae, pixels, tile_range=SMALL, **kwargs)
        assert err.value.input_name == name
    with pytest.raises(FillScopeInputError) as err:  # more than one tile: sides on the /16 grid
        encode_tiled(vae, picture(256, 392), tile=128, tile_range=SMALL)
    assert err.value.input_name == "image"
    with pytest.raises(FillScopeInputError) as err:
        decode_tiled(vae, torch.zeros(1, 16, 8, 8), tile=128, tile_range=SMALL)
    assert err.value.input_name == "latents"
    with pytest.raises(FillScopeInputError) as err:
        encode_tiled(vae, pixels[0], tile=128, tile_range=SMALL)
    assert err.value.input_name == "image"
