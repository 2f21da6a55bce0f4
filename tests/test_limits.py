"""Size limits known before work starts, and the notices for what is not refused (issue 10).

- SD3: the MMDiT's and the ControlNet's learned position-embedding grid (pos_embed_max_size patches a side) bounds
  the image side at pos_embed_max_size x patch x 8 px; the condition checks the shipped configs' limit before the
  VAE runs, the sampler re-checks the loaded models' own configs before its first step.
- FLUX: no hard limit (RoPE positions are computed for any grid); the resolution shift mu is extrapolated outside
  256-4096 tokens, and the sampler's info says so.
- Both: 16 px is the smallest side (one 2x2 patch of the VAE's 8x latent).
- CLIP-L / CLIP-G: the prompt's token count before truncation to 77.
"""

from __future__ import annotations

import json

import pytest
import torch

from fillscope import masks, specs, text, vae
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import flux_fill, sd3_controlnet
from fillscope.text import SD3TextCondition
from tiny_flux import build_tiny_flux_fill_folder
from tiny_models import comfy_tokenizer_dirs
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

PROMPT = "a red brick fireplace"
SD3_FIX = ("crop or scale the image to at most 3072 px a side, e.g. inpaint a crop around the masked area and "
           "composite it back into the full image, or inpaint it by tiles (SD3 ControlNet Tiled Inpaint).")


def prepared(height, width, size_mode="pad", mask_fraction=0.5):
    image, mask = masks.synthetic_image_and_mask(width, height, mask_fraction)
    return masks.prepare_image_and_mask(image, mask, size_mode=size_mode)


# ---- the limits, from the shipped configs ------------------------------------------------------------------------


def test_the_sd3_limit_is_read_from_the_shipped_configs():
    def side(name):
        cfg = json.loads((specs.CONFIG_DIR / name).read_text())
        return cfg["pos_embed_max_size"] * cfg["patch_size"] * 8

    per_variant = {v: specs.pos_embed_side_limit(specs.shipped_config("sd3_transformer", v), v).pixels
                   for v in specs.COMPONENTS["sd3_transformer"].variants}
    assert per_variant == {"sd3-medium": side("sd3_medium_transformer.json"),
                           "sd3.5-medium": side("sd35_medium_transformer.json"),
                           "sd3.5-large": side("sd35_large_transformer.json")}
    assert per_variant == {"sd3-medium": 3072, "sd3.5-medium": 6144, "sd3.5-large": 3072}
    controlnet = specs.pos_embed_side_limit(specs.shipped_config("sd3_controlnet"), "cn")
    assert controlnet.pixels == side("sd3_controlnet_inpaint.json") == 3072
    family = specs.sd3_side_limit()
    assert family.pixels == 3072 == min([*per_variant.values(), controlnet.pixels])
    assert family.explain() == ("3072x3072 px for sd3-medium, sd3.5-large and the SD3 inpainting ControlNet: "
                                "pos_embed_max_size 192 x patch 2 x 8")


def test_flux_has_no_position_embedding_limit():
    """FLUX's RoPE is computed from the ids for any grid (diffusers' FluxPosEmbed keeps no table)."""
    assert specs.pos_embed_side_limit(specs.shipped_config("flux_fill_transformer"), "flux") is None
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    assert not any(True for _ in FluxPosEmbed(10000, [16, 56, 56]).buffers())


def test_shipped_variants_are_recognised_by_their_topology():
    for v in specs.COMPONENTS["sd3_transformer"].variants:
        assert specs.shipped_variant("sd3_transformer", specs.shipped_config("sd3_transformer", v)) == v
    assert specs.shipped_variant("sd3_controlnet", specs.shipped_config("sd3_controlnet")) == "alimama-sd3-inpainting"
    assert specs.shipped_variant("sd3_transformer", {"num_layers": 3, "pos_embed_max_size": 96}) is None


# ---- SD3: the condition refuses before the VAE ----------------------------------------------------------------


@pytest.fixture(scope="module")
def meta_sd3_vae():
    return vae.load_vae("meta", kind="sd3")


def test_sd3_condition_refuses_an_image_over_the_grid_before_the_vae(meta_sd3_vae, monkeypatch):
    monkeypatch.setattr(sd3_controlnet.vae_ops, "encode", lambda *a: pytest.fail("the VAE ran"))
    with pytest.raises(FillScopeInputError) as e:
        sd3_controlnet.build_inpaint_condition(meta_sd3_vae, prepared(64, 4096))
    assert str(e.value) == (
        "[FillScope] input 'image': 4096x64 is larger than SD3's position-embedding grid allows (3072x3072 px for "
        "sd3-medium, sd3.5-large and the SD3 inpainting ControlNet: pos_embed_max_size 192 x patch 2 x 8). "
        "Fix: " + SD3_FIX)


def test_sd3_padding_past_the_limit_is_refused_and_crop_is_offered(meta_sd3_vae, monkeypatch):
    monkeypatch.setattr(sd3_controlnet.vae_ops, "encode", lambda *a: pytest.fail("the VAE ran"))
    with pytest.raises(FillScopeInputError) as e:
        sd3_controlnet.build_inpaint_condition(meta_sd3_vae, prepared(3080, 64))
    assert e.value.input_name == "image"
    assert e.value.problem.startswith("64x3080 (64x3088 padded to the 16 px grid) is larger than")
    assert e.value.fix == "set size_mode to crop (it trims to 64x3072), or " + SD3_FIX
    with pytest.raises(FillScopeInputError) as e:  # 3088 crops to 3088: no use
        sd3_controlnet.build_inpaint_condition(meta_sd3_vae, prepared(3090, 64))
    assert e.value.fix == SD3_FIX


@pytest.mark.parametrize("height, width, size_mode", [(3072, 32, "pad"), (32, 3072, "pad"), (3080, 32, "crop")])
def test_sd3_condition_takes_the_limit_itself(meta_sd3_vae, height, width, size_mode):
    cond = sd3_controlnet.build_inpaint_condition(meta_sd3_vae, prepared(height, width, size_mode))
    assert max(cond.control.shape[-2:]) == 3072 // 8


# ---- SD3: the sampler re-checks the loaded models -------------------------------------------------------------


@pytest.fixture(scope="module")
def sd3(tmp_path_factory):
    """The tiny SD3 stack: transformer and ControlNet with pos_embed_max_size 96 -> 1536 px a side."""
    root = tmp_path_factory.mktemp("sd3")
    folder = build_tiny_sd3_folder(root / "sd3", seed=0)
    cn = build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0)
    stack = sd3_controlnet.load_stack(folder, controlnet=cn, tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    stack["positive"] = sd3_controlnet.encode_prompt(stack["clip_l"], stack["clip_g"], stack["t5"], PROMPT)
    return stack


def sd3_sample(stack, height, width, **kw):
    cond = sd3_controlnet.build_inpaint_condition(stack["vae"], prepared(height, width))
    return sd3_controlnet.sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], stack["positive"],
                                                        None, cond, steps=1, cfg=1.0, **kw)


def test_sd3_sampler_refuses_past_the_loaded_transformers_grid_before_any_step(sd3):
    seen, steps = [], []
    with pytest.raises(FillScopeInputError) as e:
        sd3_sample(sd3, 16, 1600, observe=lambda name, t: seen.append(name), callback=lambda i, n: steps.append(i))
    assert str(e.value) == (
        "[FillScope] input 'condition': 1600x16 is larger than this transformer's position-embedding grid allows "
        "(1536x1536 px for the loaded weights: pos_embed_max_size 96 x patch 2 x 8). Fix: crop or scale the image to "
        "at most 1536 px a side, e.g. inpaint a crop around the masked area and composite it back into the full image, "
        "or inpaint it by tiles (SD3 ControlNet Tiled Inpaint).")
    assert seen == [] and steps == []  # no noise drawn, no step run


def test_sd3_sampler_runs_at_the_loaded_grids_limit_and_at_the_smallest_size(sd3):
    assert sd3_sample(sd3, 16, 1536).latents.shape == (1, 16, 2, 192)
    out = sd3_sample(sd3, 16, 16)
    assert out.latents.shape == (1, 16, 2, 2)
    image = sd3_controlnet.decode_to_image(sd3["vae"], out)
    assert image.shape == (1, 16, 16, 3) and bool(torch.isfinite(image).all())


def test_sd3_sampler_names_the_controlnet_when_its_grid_is_the_smaller(monkeypatch):
    """sd3.5-medium's grid (384 patches: 6144 px) is larger than the ControlNet's (192: 3072 px): the ControlNet is
    the one that refuses a 3088 px condition (built here past the condition node's own check)."""
    transformer = sd3_controlnet.load_sd3_transformer("meta", variant="sd3.5-medium")
    controlnet = sd3_controlnet.load_sd3_controlnet("meta")
    prep = prepared(16, 3088)
    cond = sd3_controlnet.InpaintCondition(prepared=prep, vae=None, control=torch.zeros(1, 17, 2, 386, device="meta"))
    text_cond = SD3TextCondition(context=torch.zeros(1, 333, 4096, device="meta"),
                                 pooled=torch.zeros(1, 2048, device="meta"))
    with pytest.raises(FillScopeInputError) as e:
        sd3_controlnet.sample_sd3_controlnet_inpaint(transformer, controlnet, text_cond, None, cond, steps=1, cfg=1.0)
    assert e.value.input_name == "condition"
    assert e.value.problem == ("3088x16 is larger than this ControlNet's position-embedding grid allows (3072x3072 px "
                               "for alimama-sd3-inpainting: pos_embed_max_size 192 x patch 2 x 8).")


# ---- FLUX: no hard limit, the shift's calibrated range -------------------------------------------------------


def test_flux_shift_range_facts_at_the_calibrated_bounds():
    def extrapolated(n):
        return flux_fill.shift_range_facts(n)["mu_extrapolated"]

    assert flux_fill.shift_range_facts(4096)["mu_calibrated_tokens"] == "256-4096"
    assert [extrapolated(n) for n in (255, 256, 4096, 4097)] == [True, False, False, True]
    assert extrapolated(specs.flux_token_count(4096, 4096))  # 65536 tokens


@pytest.fixture(scope="module")
def flux_meta():
    return flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def test_flux_meta_run_past_1024_px_takes_the_size_and_reports_the_extrapolated_shift(flux_meta):
    done = flux_fill.run(flux_meta, PROMPT, prepared(1040, 1024), steps=1)
    info = done.latent.info
    assert info["tokens"] == 65 * 64 == 4160
    assert info["mu_extrapolated"] is True and info["mu_calibrated_tokens"] == "256-4096"
    assert info["mu"] > 1.15
    inside = flux_fill.run(flux_meta, PROMPT, prepared(1024, 1024), steps=1).latent.info
    assert inside["tokens"] == 4096 and inside["mu_extrapolated"] is False


@pytest.fixture(scope="module")
def flux(tmp_path_factory):
    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("flux") / "FLUX.1-Fill-tiny", seed=0)
    return flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")


def test_flux_runs_at_the_smallest_size(flux):
    done = flux_fill.run(flux, PROMPT, prepared(16, 16), steps=1)
    assert done.latent.info["tokens"] == 1 and done.latent.info["mu_extrapolated"] is True
    assert done.image.shape == (1, 16, 16, 3) and bool(torch.isfinite(done.image).all())


@pytest.mark.parametrize("height, width", [(15, 32), (32, 8)])
def test_below_16_px_is_refused_with_the_reason(height, width):
    image, mask = torch.rand(1, height, width, 3), torch.ones(1, height, width)
    for mode in masks.SIZE_MODES:
        with pytest.raises(FillScopeInputError) as e:
            masks.prepare_image_and_mask(image, mask, size_mode=mode)
        assert str(e.value) == (
            f"[FillScope] input 'image': is {width}x{height}; the smallest size is 16x16 (the VAE's 8x downscale, "
            "then 2x2 patches: one token is 16x16 px). Fix: use a larger image, or scale it up.")


# ---- CLIP: truncation at 77 tokens -----------------------------------------------------------------------------


@pytest.mark.parametrize("words, given, truncated", [(3, 5, False), (75, 77, False), (76, 78, True), (200, 202, True)])
def test_clip_l_counts_the_tokens_before_truncation(flux, words, given, truncated):
    out = text.encode_clip(flux["clip_l"], " ".join(["a"] * words), project=False)
    assert out.input_ids.shape == (1, 77)
    assert (out.given_tokens, out.truncated) == (given, truncated)


def test_clip_g_counts_the_tokens_before_truncation(sd3):
    out = text.encode_clip(sd3["clip_g"], "a " * 100)
    assert out.encoder == "clip_g" and out.given_tokens == 102 and out.truncated
