"""FLUX.2 [klein] on the meta device: the full production topology (4B and 9B) gives the boundary shapes issue 11
states, at 1024x1024 and 768x1344, with and without a reference image, and the published parameter counts."""

from __future__ import annotations

import pytest
import torch
from tiny_klein import qwen_bpe_dir
from tiny_models import tokenizers_available

from fillscope import masks
from fillscope.pipelines import klein

pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

# issue 11's contract, 4B at 1024x1024 (N = (1024/16)^2 = 4096 image tokens)
EXPECTED_4B_1024 = {
    "prompt_embeds": [1, 512, 7680],
    "source_latents": [1, 128, 64, 64],
    "reference_tokens": [1, 4096, 128],
    "token_mask": [1, 4096, 1],
    "transformer.input": [1, 8192, 128],
    "transformer.output.kept": [1, 4096, 128],
    "latent.unpacked": [1, 128, 64, 64],
    "decoded_image": [1, 3, 1024, 1024],
}


@pytest.fixture(scope="module", params=["klein-4b", "klein-9b"])
def meta_stack(request):
    return request.param, klein.load_stack("meta", tokenizer_folders=(qwen_bpe_dir(),), variant=request.param)


def run_meta(stack, height, width, reference=None, steps=None):
    """The tensors' shapes a meta run observes (the last step's: every step has the same ones) and its result, with
    klein.run's default steps unless `steps` is given: a test that checks no step count runs one, not four."""
    seen = {}

    def observe(name, t):
        seen[name] = list(t.shape)

    image, mask = masks.synthetic_image_and_mask(width, height)
    prepared = masks.prepare_image_and_mask(image, mask)
    result = klein.run(stack, "put a lamp on the desk", prepared, reference=reference, observe=observe,
                       **({} if steps is None else {"steps": steps}))
    return seen, result


def test_every_boundary_matches_the_contract_at_1024(meta_stack):
    variant, stack = meta_stack
    seen, result = run_meta(stack, 1024, 1024)
    width = {"klein-4b": 7680, "klein-9b": 12288}[variant]
    for name, shape in EXPECTED_4B_1024.items():
        want = [1, 512, width] if name == "prompt_embeds" else shape
        assert seen[name] == want, name
    assert seen["transformer.output"] == [1, 8192, 128]  # the reference tokens' outputs come back too, unused
    assert seen["img_ids"] == [1, 8192, 4] and seen["txt_ids"] == [1, 512, 4]
    assert list(result.image.shape) == [1, 1024, 1024, 3]
    assert result.latent.info["steps_run"] == 4 and not result.latent.info["cfg"]  # meta defaults to distilled


def test_a_reference_image_adds_its_tokens(meta_stack):
    _, stack = meta_stack
    seen, _ = run_meta(stack, 1024, 1024, reference=torch.zeros(1, 1024, 1024, 3), steps=1)
    assert seen["transformer.input"] == [1, 12288, 128]
    assert seen["transformer.output.kept"] == [1, 4096, 128]


def test_768x1344_gives_4032_tokens(meta_stack):
    _, stack = meta_stack
    seen, result = run_meta(stack, 1344, 768, steps=1)
    assert seen["source_latents"] == [1, 128, 84, 48]
    assert seen["transformer.input"] == [1, 8064, 128]
    assert seen["transformer.output.kept"] == [1, 4032, 128]
    assert list(result.image.shape) == [1, 1344, 768, 3]


def test_meta_builds_have_the_published_transformer_sizes_and_28_encoder_layers(meta_stack):
    variant, stack = meta_stack
    params = sum(p.numel() for p in stack["transformer"].model.parameters())
    assert params == {"klein-4b": 3_875_544_576, "klein-9b": 9_078_581_248}[variant]
    assert stack["qwen3"].model.config.num_hidden_layers == 28
    assert klein.transformer_variant(stack["transformer"].config) == variant
