"""SD3-medium + the alimama inpainting ControlNet on the meta device: every SD3 boundary of REFERENCE.md
section 1 at 1024x1024 and 1344x768, and the stack's parameter total under the convention section 3 names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fillscope import masks
from fillscope.pipelines import sd3_controlnet
from fillscope.weights import count_parameters
from tiny_models import comfy_tokenizer_dirs

# the shapes seed 001 shows (shared/seeds/001), the tests' own copy
SEED_1024 = json.loads((Path(__file__).parent / "data" / "seed_shapes.json").read_text())["sd3_controlnet_1024"]


def test_the_seed_contract_has_its_8_sd3_boundaries_and_the_engine_copy_equals_it():
    from fillscope.trace.summary import SD3_CONTROLNET_BOUNDARIES, SD3_CONTROLNET_SEED_1024

    assert len(SEED_1024) == 8
    assert SEED_1024["joint_context"] == [1, 333, 4096] and SEED_1024["inpaint_condition"] == [1, 17, 128, 128]
    assert set(SEED_1024) <= {name for _, name in SD3_CONTROLNET_BOUNDARIES}
    assert SD3_CONTROLNET_SEED_1024 == SEED_1024  # `make demo` compares a run against the engine's copy


@pytest.fixture(scope="module")
def meta_stack():
    return sd3_controlnet.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def run_meta(stack, height, width):
    seen = {}

    def observe(name, t):
        seen[name] = list(t.shape)

    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, height // 4 : height // 2, width // 4 : width // 2] = 1
    done = sd3_controlnet.run(stack, "a red brick fireplace", masks.prepare_image_and_mask(image, mask),
                              negative_prompt="", steps=1, observe=observe)
    return seen, done.image, done.latent


def test_every_sd3_boundary_matches_the_contract_at_1024(meta_stack):
    seen, image, out = run_meta(meta_stack, 1024, 1024)
    expected = {
        **SEED_1024,  # every shape the seed shows, and the rest of REFERENCE.md's SD3 boundaries:
        "clip_l.text_embeds": [1, 768],
        "clip_g.text_embeds": [1, 1280],
        "clip_lg.padded": [1, 77, 4096],
        "pooled": [1, 2048],
        "controlnet.residual[0]": [2, 4096, 1536],  # x2 batch under CFG
        "controlnet.residual[22]": [2, 4096, 1536],
        "transformer.output": [2, 16, 128, 128],
    }
    assert len(expected) == 15
    for name, shape in expected.items():
        assert seen[name] == shape, name
    assert out.info["controlnet_residuals"] == 23
    assert list(image.shape) == [1, 1024, 1024, 3]


def test_1344x768_gives_4032_patches(meta_stack):
    seen, image, _ = run_meta(meta_stack, 1344, 768)
    assert seen["inpaint_condition"] == [1, 17, 168, 96]
    assert seen["controlnet.residual[0]"] == [2, 4032, 1536]
    assert seen["velocity.guided"] == [1, 16, 168, 96]
    assert list(image.shape) == [1, 1344, 768, 3]


def test_parameter_total_is_the_seeds_9716387043(meta_stack):
    counts = {k: count_parameters(c.model) for k, c in meta_stack.items()}
    assert counts["transformer"][0] == 2_028_328_000
    assert counts["controlnet"][0] == 2_023_618_560
    assert counts["clip_g"][0] == 694_659_840
    assert counts["clip_l"][0] == 123_650_304
    # convention: unique parameters (T5's tied embedding once), CLIP-L and CLIP-G with their projections
    assert sum(u for u, _ in counts.values()) == 9_716_387_043
    # the pos_embed grids are buffers, not parameters (56.6M each: 192*192*1536)
    buffers = sum(b.numel() for b in meta_stack["transformer"].model.buffers())
    assert buffers == 192 * 192 * 1536
