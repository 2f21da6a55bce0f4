"""Weight sources: placeholder values are deterministic and finite on the full topology; folders of the wrong
model or without safetensors are refused with a message naming the folder and the fix."""

from __future__ import annotations

import json

import pytest
import torch

from fillscope import vae
from fillscope.errors import FillScopeInputError
from fillscope.weights import load_component


def test_placeholder_vae_is_full_topology_deterministic_and_finite():
    a = load_component("flux_vae", "placeholder", dtype="fp32", device="cpu", seed=3)
    b = load_component("flux_vae", "placeholder", dtype="fp32", device="cpu", seed=3)
    c = load_component("flux_vae", "placeholder", dtype="fp32", device="cpu", seed=4)
    assert sum(p.numel() for p in a.model.parameters()) == 83_819_683
    for (name, pa), (_, pb) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.model.encoder.conv_in.weight, c.model.encoder.conv_in.weight)
    image = torch.rand(1, 3, 32, 32) * 2 - 1
    z = vae.encode(a, image)
    assert z.shape == (1, 16, 4, 4)
    assert torch.isfinite(vae.decode(a, z)).all()


def test_fp16_t5_keeps_its_wo_projections_in_fp32():
    t5 = load_component("t5_xxl", "meta", dtype="fp16")
    wo = {p.dtype for n, p in t5.model.named_parameters() if n.endswith("wo.weight")}
    rest = {p.dtype for n, p in t5.model.named_parameters() if not n.endswith("wo.weight")}
    assert wo == {torch.float32} and rest == {torch.float16}


def repo_with(tmp_path, pipeline="FluxFillPipeline"):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    return repo


def test_missing_folder_names_the_fix(tmp_path):
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", tmp_path / "nope", dtype="fp32", device="cpu")
    assert "does not exist" in str(e.value) and "diffusers format" in str(e.value) and "'placeholder'" in str(e.value)


def test_pickled_weights_are_refused(tmp_path):
    sub = repo_with(tmp_path) / "vae"
    sub.mkdir()
    (sub / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", "latent_channels": 16}))
    (sub / "diffusion_pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", tmp_path / "repo", dtype="fp32", device="cpu")
    assert "never unpickles" in str(e.value) and "diffusion_pytorch_model.bin" in str(e.value)


def test_text_to_image_transformer_is_refused_by_the_fill_loader(tmp_path):
    sub = repo_with(tmp_path) / "transformer"
    sub.mkdir()
    (sub / "config.json").write_text(json.dumps({"_class_name": "FluxTransformer2DModel", "in_channels": 64}))
    (sub / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_fill_transformer", tmp_path / "repo", dtype="fp32", device="cpu")
    assert "in_channels 64" in str(e.value) and "FLUX.1-Fill-dev" in str(e.value)


def test_cuda_request_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # runs (never skips) on a CUDA machine too
    with pytest.raises(FillScopeInputError, match="no CUDA device"):
        load_component("flux_vae", "placeholder", dtype="fp32", device="cuda")


def test_truncated_safetensors_in_a_folder_is_a_clear_error(tmp_path):
    from safetensors.torch import save_file

    from fillscope.specs import shipped_config

    sub = repo_with(tmp_path) / "vae"
    sub.mkdir()
    (sub / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", **shipped_config("flux_vae")}))
    save_file({"encoder.conv_in.weight": torch.zeros(128, 3, 3, 3)}, str(sub / "diffusion_pytorch_model.safetensors"))
    data = (sub / "diffusion_pytorch_model.safetensors").read_bytes()
    (sub / "diffusion_pytorch_model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(FillScopeInputError) as e:
        load_component("flux_vae", tmp_path / "repo", dtype="fp32", device="cpu")
    assert "could not be read" in str(e.value) and "download" in str(e.value)


def test_flux_vae_is_refused_where_the_sd3_vae_is_asked_for(tmp_path):
    from fillscope.specs import shipped_config

    sub = repo_with(tmp_path, "StableDiffusion3Pipeline") / "vae"
    sub.mkdir()
    (sub / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", **shipped_config("flux_vae")}))
    (sub / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    with pytest.raises(FillScopeInputError) as e:
        load_component("sd3_vae", tmp_path / "repo", dtype="fp32", device="cpu")
    assert "0.3611" in str(e.value) and "kind to flux" in str(e.value)


def test_a_flux_repository_has_no_clip_g(tmp_path):
    repo_with(tmp_path)
    with pytest.raises(FillScopeInputError) as e:
        load_component("clip_g", tmp_path / "repo", dtype="fp32", device="cpu")
    assert "which has no CLIP-G" in str(e.value) and "Stable Diffusion 3" in str(e.value)


def test_placeholder_buffers_get_the_values_the_constructor_computes():
    from diffusers import SD3ControlNetModel, SD3Transformer2DModel

    from fillscope.models import build_on_meta, fill_placeholder
    from tiny_sd3 import TINY_SD3_CONTROLNET_CONFIG, TINY_SD3_TRANSFORMER_CONFIG

    for kind, cls, cfg in (("sd3_transformer", SD3Transformer2DModel, TINY_SD3_TRANSFORMER_CONFIG),
                           ("sd3_controlnet", SD3ControlNetModel, TINY_SD3_CONTROLNET_CONFIG)):
        model = build_on_meta(kind, dict(cfg), dtype=torch.float32)
        fill_placeholder(model, 0, "cpu")
        reference = dict(cls.from_config(dict(cfg)).named_buffers())
        for name, buf in model.named_buffers():
            assert torch.equal(buf, reference[name]), (kind, name)


def test_placeholder_keeps_tied_weights_tied():
    from transformers import T5Config

    from fillscope.models import build_on_meta, count_parameters, fill_placeholder

    cfg = {"vocab_size": 64, "d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 1, "num_heads": 4,
           "feed_forward_proj": "gated-gelu", "is_encoder_decoder": False}
    model = build_on_meta("t5_xxl", T5Config(**cfg).to_dict(), dtype=torch.float32)
    before = count_parameters(model)
    fill_placeholder(model, 0, "cpu")
    assert model.shared.weight is model.encoder.embed_tokens.weight
    assert count_parameters(model) == before and before[0] < before[1]
