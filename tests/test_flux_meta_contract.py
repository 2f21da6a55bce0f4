"""FLUX.1 Fill on the meta device: the full production topology gives every boundary shape of
REFERENCE.md section 1, and the parameter totals of section 3 under both counting conventions."""

from __future__ import annotations

import pytest
import torch

from fillscope import flux_fill, masks, text, vae
from fillscope.weights import count_parameters
from fillscope.trace.summary import FLUX_FILL_SEED_1024
from tiny_flux import comfy_tokenizer_dirs

EXPECTED_1024 = FLUX_FILL_SEED_1024  # REFERENCE.md section 1, the seed trace's shapes


@pytest.fixture(scope="module")
def meta_stack():
    clip_dir, t5_dir = comfy_tokenizer_dirs()
    return {
        "clip_l": text.load_clip_l("meta", tokenizer_fallback=clip_dir),
        "t5": text.load_t5("meta", tokenizer_fallback=t5_dir),
        "transformer": flux_fill.load_flux_fill_transformer("meta"),
        "vae": vae.load_vae("meta"),
    }


def run_meta(stack, height, width):
    seen = {}

    def observe(name, t):
        seen[name] = list(t.shape)

    clip = text.encode_clip_l(stack["clip_l"], "a red brick fireplace")
    t5 = text.encode_t5(stack["t5"], "a red brick fireplace")
    seen["clip_l.pooled"] = list(clip.pooled.shape)
    seen["t5.hidden"] = list(t5.hidden.shape)
    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, height // 4 : height // 2, width // 4 : width // 2] = 1
    prepared = masks.prepare_image_and_mask(image, mask)
    cond = flux_fill.build_fill_condition(stack["vae"], prepared, observe=observe)
    out = flux_fill.sample_flux_fill(
        stack["transformer"], text.flux_text_condition(t5, clip), cond, steps=1, observe=observe
    )
    result = flux_fill.decode_to_image(stack["vae"], out, observe=observe)
    return seen, result


def test_every_flux_boundary_matches_the_contract_at_1024(meta_stack):
    seen, image = run_meta(meta_stack, 1024, 1024)
    for name, shape in EXPECTED_1024.items():
        assert seen[name] == shape, name
    assert list(image.shape) == [1, 1024, 1024, 3]


def test_768x1344_gives_4032_tokens(meta_stack):
    seen, image = run_meta(meta_stack, 1344, 768)
    assert seen["fill_condition"] == [1, 4032, 320]
    assert seen["transformer.input"] == [1, 4032, 384]
    assert seen["transformer.output"] == [1, 4032, 64]
    assert seen["img_ids"] == [4032, 3]
    assert seen["masked_image_latents"] == [1, 16, 168, 96]
    assert seen["decoded_image"] == [1, 3, 1344, 768]
    assert list(image.shape) == [1, 1344, 768, 3]


def test_parameter_totals_match_both_conventions(meta_stack):
    counts = {k: count_parameters(c.model) for k, c in meta_stack.items()}
    assert counts["transformer"] == (11_902_391_360, 11_902_391_360)
    assert counts["t5"] == (4_762_310_656, 4_893_906_944)
    assert counts["vae"] == (83_819_683, 83_819_683)
    # CLIP-L as instantiated (the clip_l file's topology) includes its 768x768 text projection.
    assert counts["clip_l"][0] == 123_650_304
    clip_used = sum(p.numel() for p in text.clip_text_model(meta_stack["clip_l"].model).parameters())
    assert clip_used == 123_060_480

    # unique parameters FLUX Fill computes with (T5's tied embedding once, CLIP-L without its projection)
    unique_used = counts["transformer"][0] + counts["t5"][0] + clip_used + counts["vae"][0]
    assert unique_used == 16_871_582_179
    # the seed's convention: every instantiated parameter, the tied T5 embedding counted under both names
    seed_convention = sum(c[1] for c in counts.values())
    assert seed_convention == 17_003_768_291
