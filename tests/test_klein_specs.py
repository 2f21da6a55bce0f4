"""FLUX.2 [klein]'s shipped configs (the first step of issue 11): built on the meta device through the engine's
own model building, they give the published parameter counts, and the three components fit one another (the
encoder's stacked layers = the transformer's context width; the VAE's patchified latent = its input channels)."""

from __future__ import annotations

import pytest

from fillscope.models import build_on_meta, count_parameters
from fillscope.specs import COMPONENTS, PIPELINE_LAYOUTS, shipped_config

# REFERENCE.md section 3 (meta builds of diffusers 0.42.1's Flux2Transformer2DModel)
PUBLISHED_TRANSFORMER_PARAMS = {"klein-4b": 3_875_544_576, "klein-9b": 9_078_581_248}
ENCODER_FOR = {"klein-4b": "qwen3-4b", "klein-9b": "qwen3-8b"}
STACKED_LAYERS = 3  # hidden_states 9, 18 and 27


@pytest.mark.parametrize("variant", sorted(PUBLISHED_TRANSFORMER_PARAMS))
def test_klein_transformer_config_gives_the_published_parameter_count(variant):
    model = build_on_meta("klein_transformer", shipped_config("klein_transformer", variant))
    unique, _ = count_parameters(model)
    assert unique == PUBLISHED_TRANSFORMER_PARAMS[variant]
    assert type(model).__name__ == "Flux2Transformer2DModel"


@pytest.mark.parametrize("variant", sorted(ENCODER_FOR))
def test_the_encoder_stack_is_as_wide_as_the_transformer_context(variant):
    transformer = shipped_config("klein_transformer", variant)
    encoder = shipped_config("qwen3", ENCODER_FOR[variant])
    assert STACKED_LAYERS * encoder["hidden_size"] == transformer["joint_attention_dim"]
    assert encoder["num_hidden_layers"] > 27  # layer 27 is read
    model = build_on_meta("qwen3", encoder)
    assert type(model).__name__ == "Qwen3Model" and not hasattr(model, "lm_head")
    assert model.config.hidden_size == encoder["hidden_size"]


def test_the_vae_latent_patchified_is_the_transformer_input():
    vae = shipped_config("flux2_vae")
    patch_h, patch_w = vae["patch_size"]
    for variant in PUBLISHED_TRANSFORMER_PARAMS:
        assert vae["latent_channels"] * patch_h * patch_w == shipped_config("klein_transformer", variant)["in_channels"]
    model = build_on_meta("flux2_vae")
    assert type(model).__name__ == "AutoencoderKLFlux2" and model.bn.num_features == 128


def test_klein_repositories_map_to_the_three_components():
    for pipeline in ("Flux2KleinPipeline", "Flux2KleinInpaintPipeline"):
        layout = PIPELINE_LAYOUTS[pipeline]
        assert set(layout) == {"qwen3", "klein_transformer", "flux2_vae"} <= set(COMPONENTS)
        assert layout["qwen3"] == ("text_encoder", "tokenizer")
