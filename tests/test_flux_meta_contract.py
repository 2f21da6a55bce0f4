"""FLUX.1 Fill on the meta device: the full production topology gives every boundary shape of
REFERENCE.md section 1, and the parameter totals of section 3 under both counting conventions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fillscope import masks, text
from fillscope.pipelines import flux_fill
from fillscope.weights import count_parameters
from tiny_models import comfy_tokenizer_dirs

# REFERENCE.md section 1: the seed trace's shapes (shared/seeds/000), the tests' own copy
EXPECTED_1024 = json.loads((Path(__file__).parent / "data" / "seed_shapes.json").read_text())["flux_fill_1024"]


def test_the_seed_contract_has_its_12_flux_boundaries_and_the_engine_copy_equals_it():
    from fillscope.trace.summary import FLUX_FILL_BOUNDARIES, FLUX_FILL_SEED_1024

    assert len(EXPECTED_1024) == 12
    assert EXPECTED_1024["fill_condition"] == [1, 4096, 320] and EXPECTED_1024["t5.hidden"] == [1, 512, 4096]
    assert [name for _, name in FLUX_FILL_BOUNDARIES] == list(EXPECTED_1024)  # the boundary table, in order
    assert FLUX_FILL_SEED_1024 == EXPECTED_1024  # `make demo` compares a run against the engine's copy


@pytest.fixture(scope="module")
def meta_stack():
    return flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def run_meta(stack, height, width):
    seen = {}

    def observe(name, t):
        seen[name] = list(t.shape)

    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, height // 4 : height // 2, width // 4 : width // 2] = 1
    prepared = masks.prepare_image_and_mask(image, mask)
    return seen, flux_fill.run(stack, "a red brick fireplace", prepared, steps=1, observe=observe).image


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
