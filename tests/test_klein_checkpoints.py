"""FLUX.2 [klein] single files: tiny files in the published key formats (BFL transformer keys from ComfyUI's own
FLUX.2 model mapped through diffusers' converter, BFL's flux2-vae layout, ComfyUI's qwen_3_*.safetensors keys and
its fp8mixed scales; see checkpoint_files.py) load through the engine into the same models as the diffusers
originals; full-size headers (meta-built production models written as sparse header-only files) are classified into
the shipped configs; FLUX.2 [dev], Qwen2.5-VL, Z-Image, Qwen-Image and the 16-channel VAEs are named and refused
with the loader that takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fillscope.checkpoints import (
    CheckpointInfo, TensorInfo, WrongKindError, classify, sniff, wrong_kind_error,
)
from fillscope.checkpoints.convert import klein_bfl_plan
from fillscope.errors import FillScopeInputError
from fillscope.models import build_on_meta
from fillscope.specs import KLEIN_TEXT_LAYERS, shipped_config
from fillscope.weights import load_component

import checkpoint_files as cf  # noqa: E402  (tests/ is on sys.path: conftest.py)

TINY_KLEIN = {"patch_size": 1, "in_channels": 128, "out_channels": None, "num_layers": 2, "num_single_layers": 2,
              "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 3 * 32,
              "timestep_guidance_channels": 256, "mlp_ratio": 3.0, "axes_dims_rope": [4, 4, 4, 4], "rope_theta": 2000,
              "eps": 1e-6, "guidance_embeds": False}  # head 16 = 4 x 4: the rope axes follow from the head width
TINY_QWEN3 = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 30,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 256,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": True}  # 30 > the 28 built
TINY_FLUX2_VAE = {"block_out_channels": [32, 32, 32, 32], "down_block_types": ["DownEncoderBlock2D"] * 4,
                  "up_block_types": ["UpDecoderBlock2D"] * 4, "layers_per_block": 1, "latent_channels": 32,
                  "norm_num_groups": 32, "sample_size": 64}  # ComfyUI's VAE converter and model assume 4 levels, 32 groups
CODES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float8_e4m3fn: "F8_E4M3",
         torch.uint8: "U8", torch.int64: "I64"}
SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1, "I64": 8}


@pytest.fixture(scope="module")
def klein(tmp_path_factory, comfy):
    """Tiny klein components (the references) and the single files ComfyUI users have, written from them."""
    from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(11)
    transformer = Flux2Transformer2DModel(**TINY_KLEIN).eval()
    vae = AutoencoderKLFlux2(**TINY_FLUX2_VAE).eval()
    with torch.no_grad():  # statistics as a trained VAE has them, not the identity
        vae.bn.running_mean.copy_(torch.randn(128) * 0.5)
        vae.bn.running_var.copy_(torch.rand(128) * 2 + 0.25)
        vae.bn.num_batches_tracked.fill_(1234)
    qwen = Qwen3ForCausalLM(Qwen3Config(**TINY_QWEN3)).eval()
    d = tmp_path_factory.mktemp("klein")
    bfl = cf.klein_bfl_state(transformer)
    qwen_state = cf.qwen3_comfy_state(qwen)
    files = {
        "bfl": cf.save(d / "diffusion_models/flux-2-klein-4b.safetensors", bfl),
        "bfl_prefixed": cf.save(d / "checkpoints/flux-2-klein-base-4b.safetensors",
                                {f"model.diffusion_model.{k}": v for k, v in bfl.items()}),
        "diffusers": cf.save(d / "diffusion_models/klein-diffusers-keys.safetensors", transformer.state_dict()),
        "bfl_fp8": cf.save(d / "diffusion_models/flux-2-klein-4b-fp8.safetensors",
                           cf.fp8_mixed(bfl, lambda k: k.startswith(("double_blocks.", "single_blocks.")))),
        "vae_bfl": cf.save(d / "vae/flux2-vae.safetensors", cf.flux2_vae_bfl_state(vae)),
        "vae_diffusers": cf.save(d / "vae/flux2-vae-diffusers-keys.safetensors", vae.state_dict()),
        "qwen": cf.save(d / "text_encoders/qwen_3_4b.safetensors", qwen_state, dtype=torch.bfloat16),
        "qwen_lm_head": cf.save(d / "text_encoders/qwen_3_8b.safetensors", cf.qwen3_comfy_state(qwen, lm_head=True)),
        "qwen_fp8": cf.save(d / "text_encoders/qwen_3_4b_fp8_mixed.safetensors",
                            cf.fp8_mixed(qwen_state, lambda k: ".mlp." in k or ".self_attn." in k)),
    }
    return {"transformer": transformer, "vae": vae, "qwen": qwen, "files": files, "root": d}


def _load(kind, source, dtype="fp32"):
    return load_component(kind, source, dtype=dtype, device="cpu")


def _same_state(model, reference):
    a, b = model.state_dict(), reference.state_dict()
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k].to(b[k].dtype), b[k]), k


def _klein_out(model):
    g = torch.Generator().manual_seed(0)
    cfg = model.config
    ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(4.0), torch.arange(4.0), torch.zeros(1),
                                     indexing="ij"), -1).reshape(-1, 4)
    kw = dict(hidden_states=torch.randn(1, 16, cfg.in_channels, generator=g),
              encoder_hidden_states=torch.randn(1, 6, cfg.joint_attention_dim, generator=g),
              timestep=torch.tensor([0.6]), img_ids=ids, txt_ids=torch.zeros(6, 4))
    with torch.inference_mode():
        return model(**{k: v.to(model.dtype) if v.is_floating_point() else v for k, v in kw.items()}, return_dict=False)[0]


def _info(name, header, metadata=None):
    kind, what, parts, take, why = classify(header, {}, metadata or {})
    return CheckpointInfo(Path(name), 0, header, metadata or {}, kind, what, parts, take, why)


def _header(sd, prefix=""):
    return {prefix + k: TensorInfo(CODES.get(v.dtype, "F32"), tuple(v.shape)) for k, v in sd.items()}


def _sparse_file(path: Path, header: dict, dtype: str = "BF16") -> Path:
    """A full-size safetensors file (floating tensors stored as `dtype`) holding only its header: the data is a
    hole of zeros (sparse, no disk)."""
    entries, offset = {}, 0
    for name, info in header.items():
        info = TensorInfo(dtype, info.shape) if info.dtype in ("F32", "F16", "BF16") else info
        n = SIZES[info.dtype]
        for s in info.shape:
            n *= s
        entries[name] = {"dtype": info.dtype, "shape": list(info.shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(entries).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + offset)
    return path


def _assert_shipped(part, kind, variant):
    want = json.loads(json.dumps(shipped_config(kind, variant)))
    assert json.loads(json.dumps({k: part.config.get(k) for k in want})) == want


# ------------------------------------------------------------------------------------------------------------
# Transformer
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("file", ["bfl", "bfl_prefixed", "diffusers"])
def test_klein_files_load_the_same_transformer_as_the_diffusers_model(klein, file):
    got = _load("klein_transformer", klein["files"][file])
    assert got.provenance.startswith("single file") and got.config["axes_dims_rope"] == [4, 4, 4, 4]
    _same_state(got.model, klein["transformer"])
    torch.testing.assert_close(_klein_out(got.model), _klein_out(klein["transformer"]), rtol=0, atol=0)
    layout = "diffusers keys" if file == "diffusers" else "BFL format"
    assert layout in sniff(klein["files"][file]).what


def test_klein_bfl_plan_is_diffusers_converter_inverted(comfy):
    """Every move of the plan is what diffusers' convert_flux2_transformer_checkpoint_to_diffusers does with that
    BFL tensor (read from tagged values), rows and (shift, scale) swap included."""
    mapping = cf.klein_bfl_map(TINY_KLEIN)
    header = {k: TensorInfo("F32", shape) for k, (shape, _) in mapping.items()}
    plan = klein_bfl_plan(header)
    assert {m.src for m in plan} == set(header)
    for m in plan:
        shape, moves = mapping[m.src]
        (pos,) = [p for dk, p in moves if dk == m.dst]
        width = shape[1] if len(shape) == 2 else 1
        rows = torch.arange(*m.rows) if m.rows else torch.arange(shape[0])
        if m.swap:
            half = shape[0] // 2
            rows = torch.cat([rows[half:], rows[:half]])
        assert torch.equal(pos, (rows[:, None] * width + torch.arange(width)).reshape(-1)), m


@pytest.mark.parametrize("variant,name", [("klein-4b", "flux-2-klein-4b.safetensors"),
                                          ("klein-9b", "flux-2-klein-base-9b.safetensors")])
def test_full_size_klein_headers_give_the_shipped_configs(comfy, tmp_path, variant, name):
    config = shipped_config("klein_transformer", variant)
    header = _header(cf.comfy_flux2(config).state_dict())
    for info in (_info(name, header), _info(name, {f"model.diffusion_model.{k}": v for k, v in header.items()}),
                 sniff(_sparse_file(tmp_path / name, header))):
        part = info.part("klein_transformer")
        _assert_shipped(part, "klein_transformer", variant)
        assert f"FLUX.2 [klein] {variant[-2:].upper()} transformer" in info.what and part.layout == "bfl"
    meta = build_on_meta("klein_transformer", config)  # the plan's names and row counts are the model's
    plan = klein_bfl_plan(header)
    want = {k: tuple(v.shape) for k, v in meta.state_dict().items()}
    assert {m.dst for m in plan} == set(want)
    for m in plan:
        rows = (m.rows[1] - m.rows[0]) if m.rows else header[m.src].shape[0]
        assert (rows, *header[m.src].shape[1:]) == want[m.dst], m


def test_klein_rope_axes_come_from_the_head_width_or_the_file_hint(tmp_path):
    """klein splits its head into 4 equal rope axes; a head width that does not split needs the axes as a hint."""
    from diffusers import Flux2Transformer2DModel

    cfg = {**TINY_KLEIN, "attention_head_dim": 12, "axes_dims_rope": [2, 2, 4, 4]}
    model = Flux2Transformer2DModel(**cfg).eval()
    with pytest.raises(FillScopeInputError) as e:
        _load("klein_transformer", cf.save(tmp_path / "klein_head12.safetensors", model.state_dict()))
    assert "heads of width 12 (FLUX.2 [klein] has 128)" in str(e.value) and '"axes_dims_rope": [32, 32, 32, 32]' in str(e.value)
    hinted = cf.save(tmp_path / "klein_head12_hinted.safetensors", model.state_dict(),
                     {"klein_transformer": {"axes_dims_rope": [2, 2, 4, 4]}})
    got = _load("klein_transformer", hinted)
    assert got.config["axes_dims_rope"] == [2, 2, 4, 4]
    torch.testing.assert_close(_klein_out(got.model), _klein_out(model), rtol=0, atol=0)


def test_flux2_dev_file_is_refused_as_not_klein(comfy, tmp_path):
    dev = cf.comfy_flux2({**shipped_config("klein_transformer"), "num_layers": 8, "num_single_layers": 48,
                          "num_attention_heads": 48, "joint_attention_dim": 15360, "guidance_embeds": True})
    path = _sparse_file(tmp_path / "flux2-dev.safetensors", _header(dev.state_dict()))
    with pytest.raises(WrongKindError) as e:
        _load("klein_transformer", path)
    msg = str(e.value)
    assert "'flux2-dev.safetensors' is the FLUX.2 [dev] transformer" in msg and "width 6144 = 48 heads x 128" in msg
    assert "not FLUX.2 [klein]" in msg and "FillScope runs FLUX.2 [klein] 4B and 9B, not FLUX.2 [dev]" in msg
    assert "load it with a diffusion-model loader outside FillScope" in msg


def test_fp8_klein_file_stays_fp8_and_matches_its_upcast(klein, tmp_path):
    """flux-2-klein-4b-fp8: float8 weights with per-tensor weight_scale (the fused qkv's one scale serves q, k and v)."""
    from safetensors.torch import load_file

    fp8 = load_file(str(klein["files"]["bfl_fp8"]))
    up = {k: (v.to(torch.bfloat16) * fp8[k[: -len("weight")] + "weight_scale"].to(torch.bfloat16)
              if v.dtype == torch.float8_e4m3fn else v) for k, v in fp8.items()
          if not k.endswith(("_scale", "comfy_quant"))}
    ref = _load("klein_transformer", cf.save(tmp_path / "klein_upcast.safetensors", up), dtype="bf16")
    got = _load("klein_transformer", klein["files"]["bfl_fp8"], dtype="bf16")
    assert got.model.transformer_blocks[0].attn.to_k.weight.dtype == torch.float8_e4m3fn
    assert "with per-tensor scales" in got.extras["facts"]["fp8"]
    torch.testing.assert_close(_klein_out(got.model), _klein_out(ref.model), rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------------------
# Qwen3 text encoder
# ------------------------------------------------------------------------------------------------------------


def _states(model, layers=KLEIN_TEXT_LAYERS):
    ids = torch.tensor([[5, 17, 3, 88, 42, 9, 1, 60]])
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    return [out.hidden_states[i].float() for i in layers]


@pytest.mark.parametrize("file", ["qwen", "qwen_lm_head"])
def test_qwen3_file_builds_the_layers_klein_reads_and_skips_the_rest(klein, file):
    got = _load("qwen3", klein["files"][file])
    assert type(got.model).__name__ == "Qwen3Model" and len(got.model.layers) == 28
    assert got.config["num_hidden_layers"] == 28 and got.model.rotary_emb.inv_freq.shape == (4,)
    facts = got.extras["facts"]["layers"]
    assert facts.startswith("28 of the file's 30 built and loaded") and "LM head never read" in facts
    ref = klein["qwen"].model
    if file == "qwen":  # the file is bf16: compare with the reference's bf16-rounded weights
        ref = type(ref)(ref.config).eval()
        ref.load_state_dict({k: v.bfloat16().float() for k, v in klein["qwen"].model.state_dict().items()})
    for a, b in zip(_states(got.model), _states(ref)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_qwen3_fp8mixed_file_stays_fp8_and_matches_its_upcast(klein, tmp_path):
    from safetensors.torch import load_file

    fp8 = load_file(str(klein["files"]["qwen_fp8"]))
    assert {k.rsplit(".", 1)[1] for k in fp8 if k.endswith(("_scale", "comfy_quant"))} == {
        "weight_scale", "input_scale", "comfy_quant"}
    up = {k: (v.to(torch.bfloat16) * fp8[k[: -len("weight")] + "weight_scale"].to(torch.bfloat16)
              if v.dtype == torch.float8_e4m3fn else v) for k, v in fp8.items()
          if not k.endswith(("_scale", "comfy_quant"))}
    ref = _load("qwen3", cf.save(tmp_path / "qwen_3_4b_upcast.safetensors", up), dtype="bf16")
    got = _load("qwen3", klein["files"]["qwen_fp8"], dtype="bf16")
    assert got.model.layers[27].mlp.down_proj.weight.dtype == torch.float8_e4m3fn
    assert got.model.embed_tokens.weight.dtype == torch.bfloat16
    assert "with per-tensor scales" in got.extras["facts"]["fp8"] and "with ComfyUI fp8 scales" in sniff(klein["files"]["qwen_fp8"]).what
    for a, b in zip(_states(got.model), _states(ref.model)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


TITLES = {"qwen3-4b": "Qwen3-4B", "qwen3-8b": "Qwen3-8B"}


@pytest.mark.parametrize("variant,lm_head", [("qwen3-4b", False), ("qwen3-8b", True)])
def test_full_size_qwen3_headers_give_the_shipped_configs(comfy, variant, lm_head):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**shipped_config("qwen3", variant)))
    state = cf.qwen3_comfy_state(model, lm_head=lm_head)
    for header in (_header(state), _header(cf.fp8_mixed(state, lambda k: ".mlp." in k))):
        info = _info(f"qwen_3_{variant[-2:]}.safetensors", header)
        _assert_shipped(info.part("qwen3"), "qwen3", variant)
        assert f"a {TITLES[variant]} text encoder (36 layers" in info.what


def test_qwen_image_encoder_is_named_and_refused(comfy, tmp_path):
    """Qwen-Image's Qwen2.5-VL-7B (ComfyUI's qwen_2.5_vl_7b.safetensors: LLM + vision tower) is not Qwen3."""
    import comfy.text_encoders.llama as llama

    vl = llama.Qwen25_7BVLI({}, torch.bfloat16, "meta", comfy.ops.disable_weight_init)
    path = _sparse_file(tmp_path / "qwen_2.5_vl_7b.safetensors", _header(vl.state_dict()))
    with pytest.raises(WrongKindError) as e:
        _load("qwen3", path)
    msg = str(e.value)
    assert "'qwen_2.5_vl_7b.safetensors' is a Qwen2.5-VL-7B vision-language model (Qwen-Image's text encoder" in msg
    assert "hidden 3584" in msg and "not Qwen3" in msg and "the FillScope Qwen3 text encoder loader takes a Qwen3-4B" in msg
    assert "load it with a text-encoder loader outside FillScope" in msg


# ------------------------------------------------------------------------------------------------------------
# FLUX.2 VAE
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("file", ["vae_bfl", "vae_diffusers"])
def test_flux2_vae_file_loads_with_its_batchnorm_statistics(klein, file):
    got = _load("flux2_vae", klein["files"][file])
    ref = klein["vae"]
    assert type(got.model).__name__ == "AutoencoderKLFlux2"
    assert torch.equal(got.model.bn.running_var, ref.bn.running_var)
    assert int(got.model.bn.num_batches_tracked) == (1234 if file == "vae_diffusers" else 0)  # BFL's file has none
    sd = {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert all(torch.equal(got.model.state_dict()[k], v) for k, v in sd.items())
    image = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(3)) * 2 - 1
    with torch.inference_mode():
        z, z_ref = got.model.encode(image).latent_dist.mode(), ref.encode(image).latent_dist.mode()
        torch.testing.assert_close(z, z_ref, rtol=0, atol=0)
        torch.testing.assert_close(got.model.decode(z).sample, ref.decode(z_ref).sample, rtol=0, atol=0)


def test_full_size_flux2_vae_header_gives_the_shipped_config(comfy):
    info = _info("flux2-vae.safetensors", _header(cf.flux2_vae_bfl_state(build_on_meta("flux2_vae"))))
    _assert_shipped(info.part("flux2_vae"), "flux2_vae", None)
    assert info.what.startswith("the FLUX.2 VAE (LDM keys, 32 latent channels")
    assert info.take_with == (("flux2_vae",),)


def test_32_channel_vae_without_batchnorm_statistics_is_not_the_flux2_vae(klein, tmp_path):
    from safetensors.torch import load_file

    sd = {k: v for k, v in load_file(str(klein["files"]["vae_bfl"])).items() if not k.startswith("bn.")}
    info = sniff(cf.save(tmp_path / "vae32.safetensors", sd))
    assert info.part("flux2_vae") is None and "without the FLUX.2 VAE's BatchNorm statistics" in info.what


# ------------------------------------------------------------------------------------------------------------
# Files on the wrong loader
# ------------------------------------------------------------------------------------------------------------


def test_klein_and_flux1_files_on_each_others_loader(klein, comfy):
    with pytest.raises(WrongKindError) as e:
        _load("flux_fill_transformer", klein["files"]["bfl"])
    msg = str(e.value)
    assert "'flux-2-klein-4b.safetensors' is the FLUX.2-architecture transformer of width 32" in msg
    assert "the FillScope FLUX.1 Fill transformer loader takes the FLUX.1 Fill [dev] transformer" in msg
    assert "load it with FillScope FLUX.2 [klein] transformer." in msg
    assert e.value.info.take_with == (("klein_transformer",),)
    fill = _header(cf.flux_bfl_state(build_on_meta("flux_fill_transformer", dtype=torch.bfloat16)))
    msg = str(wrong_kind_error(_info("flux1-fill-dev.safetensors", fill), "klein_transformer", "source"))
    assert "'flux1-fill-dev.safetensors' is a FLUX.1 Fill [dev] transformer" in msg
    assert "the FillScope FLUX.2 [klein] transformer loader takes a FLUX.2 [klein] 4B or 9B transformer" in msg
    assert "load it with FillScope FLUX.1 Fill transformer." in msg
    klein4b = _header(cf.comfy_flux2(shipped_config("klein_transformer")).state_dict())
    msg = str(wrong_kind_error(_info("flux-2-klein-4b.safetensors", klein4b), "flux_fill_transformer", "source",
                               lambda kinds: "<" + "|".join(kinds) + ">"))
    assert "is the FLUX.2 [klein] 4B transformer (BFL format: 5 double + 20 single blocks" in msg
    assert "load it with <klein_transformer>." in msg


def test_z_image_and_qwen_image_transformers_on_the_klein_loader(comfy, tmp_path):
    import comfy.ldm.lumina.model as lumina
    import comfy.ldm.qwen_image.model as qwen_image

    z_image = lumina.NextDiT(  # model_detection's Z-Image settings
        patch_size=2, in_channels=16, dim=3840, n_layers=30, n_refiner_layers=2, n_heads=30, n_kv_heads=30,
        qk_norm=True, cap_feat_dim=2560, axes_dims=[32, 48, 48], axes_lens=[1536, 512, 512], rope_theta=256.0,
        ffn_dim_multiplier=8.0 / 3.0, z_image_modulation=True, time_scale=1000.0, pad_tokens_multiple=32,
        device="meta", dtype=torch.bfloat16, operations=comfy.ops.disable_weight_init)
    qwen = qwen_image.QwenImageTransformer2DModel(device="meta", dtype=torch.bfloat16, operations=comfy.ops.disable_weight_init)
    for name, model, what in (("z_image_turbo_bf16.safetensors", z_image, "a Z-Image transformer (30 layers, width 3840"),
                              ("qwen_image_fp8_e4m3fn.safetensors", qwen, "a Qwen-Image transformer (60 blocks, width 3072")):
        path = _sparse_file(tmp_path / name, _header(model.state_dict()))
        with pytest.raises(WrongKindError) as e:
            _load("klein_transformer", path)
        msg = str(e.value)
        assert f"'{name}' is {what}" in msg and "the FillScope FLUX.2 [klein] transformer loader takes" in msg
        assert ("load it with a diffusion-model loader outside FillScope (FillScope runs FLUX.1 Fill, SD3/SD3.5 and "
                "FLUX.2 [klein] only)") in msg


def test_16_channel_vaes_and_the_flux2_vae_on_each_others_loader(klein, comfy):
    ae = _header(cf.vae_ldm_state(build_on_meta("flux_vae", dtype=torch.bfloat16)))
    msg = str(wrong_kind_error(_info("ae.safetensors", ae), "flux2_vae", "source"))
    assert "'ae.safetensors' is a 16-channel FLUX/SD3 VAE" in msg
    assert "the FillScope FLUX.2 VAE loader takes the FLUX.2 VAE (flux2-vae.safetensors: 32 latent channels" in msg
    assert "load it with FillScope FLUX VAE or FillScope SD3 VAE." in msg
    for kind in ("flux_vae", "sd3_vae"):
        with pytest.raises(WrongKindError) as e:
            _load(kind, klein["files"]["vae_bfl"])
        msg = str(e.value)
        assert "'flux2-vae.safetensors' is the FLUX.2 VAE (LDM keys, 32 latent channels" in msg
        assert "load it with FillScope FLUX.2 VAE." in msg


def test_text_encoders_on_each_others_loader(klein):
    with pytest.raises(WrongKindError) as e:
        _load("t5_xxl", klein["files"]["qwen"])
    assert "is a Qwen3 LLM text encoder (30 layers, hidden 32" in str(e.value)
    assert "load it with FillScope Qwen3 text encoder." in str(e.value)


def test_block_wise_fp8_scales_are_refused_naming_the_tensor(klein, tmp_path):
    from safetensors.torch import load_file

    sd = load_file(str(klein["files"]["qwen_fp8"]))
    key = "model.layers.0.mlp.up_proj.weight_scale"
    sd[key] = torch.ones(4, 1)
    with pytest.raises(FillScopeInputError) as e:
        _load("qwen3", cf.save(tmp_path / "qwen_blockwise.safetensors", sd), dtype="bf16")
    assert f"'{key}' holds 4 scales (a block-wise quantisation)" in str(e.value)


def test_folder_configs_of_flux2_dev_and_other_encoders_are_refused_by_name(tmp_path):
    from fillscope.errors import FillScopeInputError
    from fillscope.models import check_component_config
    from fillscope.specs import shipped_config

    klein = {**shipped_config("klein_transformer"), "_class_name": "Flux2Transformer2DModel"}
    dev = {**klein, "num_attention_heads": 48, "joint_attention_dim": 15360}
    with pytest.raises(FillScopeInputError, match=r"FLUX.2 \[dev\] transformer"):
        check_component_config("klein_transformer", dev, "transformer source", tmp_path)
    qwen_vl = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl"}
    with pytest.raises(FillScopeInputError, match="Qwen2_5_VLForConditionalGeneration"):
        check_component_config("qwen3", qwen_vl, "qwen3 source", tmp_path)
    check_component_config("klein_transformer", {**klein, "num_attention_heads": 32}, "t", tmp_path)
    check_component_config("qwen3", {"architectures": ["Qwen3ForCausalLM"]}, "q", tmp_path)
