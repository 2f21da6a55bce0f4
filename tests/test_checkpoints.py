"""Single-file checkpoints: tiny files in each on-disk key format (keys from ComfyUI's own maps and models, see
checkpoint_files.py) load through the engine's loaders and give the same output as the same weights from a
diffusers folder; full-size headers are classified into the shipped configs; wrong-kind, truncated, pickled and
NaN files are refused with messages naming the file and the fix; the loaders list files from ComfyUI's folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fillscope import text, vae
from fillscope.checkpoints import (
    CheckpointInfo, TensorInfo, WrongKindError, classify, flux_bfl_plan, sniff, take_with_text, wrong_kind_error,
)
from fillscope.errors import FillScopeInputError
from fillscope.models import build_on_meta
from fillscope.specs import shipped_config
from fillscope.weights import load_component

import checkpoint_files as cf  # noqa: E402  (tests/ is on sys.path: conftest.py)
from comfy_server import comfyui_path as comfyui_root  # noqa: E402
from tiny_flux import build_tiny_components  # noqa: E402
from tiny_models import comfy_tokenizer_dirs  # noqa: E402
from tiny_sd3 import (  # noqa: E402
    TINY_CLIP_G_CONFIG, TINY_CLIP_L_CONFIG, TINY_SD3_TRANSFORMER_CONFIG, build_tiny_sd3_components, build_tiny_sd3_controlnet,
)

REPO = Path(__file__).resolve().parent.parent
CODES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float8_e4m3fn: "F8_E4M3"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, comfy):
    """Tiny models, each saved as a diffusers/transformers model folder (the reference) and as single files."""
    from diffusers import SD3Transformer2DModel

    root = tmp_path_factory.mktemp("ckpt")
    flux, sd3 = build_tiny_components(0), build_tiny_sd3_components(0)
    controlnet, _ = build_tiny_sd3_controlnet(0)
    torch.manual_seed(7)
    sd35 = SD3Transformer2DModel(**{**TINY_SD3_TRANSFORMER_CONFIG, "num_layers": 4, "qk_norm": "rms_norm",
                                    "dual_attention_layers": (0, 1)}).eval()
    models = {"flux_transformer": flux["transformer"], "flux_vae": flux["vae"], "flux_clip_l": flux["text_encoder"],
              "flux_t5": flux["text_encoder_2"], "sd3_transformer": sd3["transformer"], "sd3_vae": sd3["vae"],
              "clip_l": sd3["text_encoder"], "clip_g": sd3["text_encoder_2"], "sd3_t5": sd3["text_encoder_3"],
              "controlnet": controlnet, "sd35": sd35}
    folders = {}
    for name, model in models.items():
        model.save_pretrained(root / "folders" / name, safe_serialization=True)
        folders[name] = root / "folders" / name
    h = cf.TINY_HINTS
    d = root / "files"
    files = {
        "flux_bfl": cf.save(d / "diffusion_models/flux1-fill-dev.safetensors", cf.flux_bfl_state(flux["transformer"]), h),
        "flux_diffusers": cf.save(d / "diffusion_models/flux1-fill-diffusers-keys.safetensors", flux["transformer"].state_dict(), h),
        "ae": cf.save(d / "vae/ae.safetensors", cf.vae_ldm_state(flux["vae"])),
        "clip_l": cf.save(d / "text_encoders/clip_l.safetensors", cf.clip_comfy_state(sd3["text_encoder"], TINY_CLIP_L_CONFIG), h),
        "clip_l_noproj": cf.save(d / "text_encoders/clip_l_flux.safetensors",
                                 cf.clip_comfy_state(flux["text_encoder"], TINY_CLIP_L_CONFIG, with_projection=False), h),
        "clip_l_bare": cf.save(d / "text_encoders/clip_l_tf5.safetensors", {  # transformers 5 names: no text_model.
            k: v for k, v in flux["text_encoder"].state_dict().items() if not k.endswith("position_ids")}, h),
        "clip_g": cf.save(d / "text_encoders/clip_g.safetensors", cf.clip_comfy_state(sd3["text_encoder_2"], TINY_CLIP_G_CONFIG), h),
        "t5_fp16": cf.save(d / "text_encoders/t5xxl_fp16.safetensors", cf.t5_comfy_state(flux["text_encoder_2"])[0], dtype=torch.float16),
        "t5_fp8": cf.save(d / "text_encoders/t5xxl_fp8_e4m3fn.safetensors", cf.fp8_t5_state(flux["text_encoder_2"])),
        "t5_fp8_scaled": cf.save(d / "text_encoders/t5xxl_fp8_e4m3fn_scaled.safetensors",
                                 cf.fp8_t5_state(flux["text_encoder_2"], scaled=True)),
        "sd3_full": cf.save(d / "checkpoints/sd3_medium_incl_clips.safetensors", cf.sd3_checkpoint_state(sd3), h),
        "sd3_bare": cf.save(d / "checkpoints/sd3_medium.safetensors", cf.sd3_checkpoint_state(sd3, with_text_encoders=False), h),
        "sd35": cf.save(d / "diffusion_models/sd3.5_medium_tiny.safetensors", cf.sd3_sai_state(sd35)),  # qk-norm: no hints
        "sd3_diffusers": cf.save(d / "diffusion_models/sd3_medium_diffusers_keys.safetensors", sd3["transformer"].state_dict(), h),
        "controlnet": cf.save(d / "controlnet/SD3-Controlnet-Inpainting.safetensors", controlnet.state_dict(), h),
    }
    return {"models": models, "folders": folders, "files": files, "root": root}


def _load(kind, source, **kw):
    return load_component(kind, source, dtype=kw.pop("dtype", "fp32"), device="cpu", **kw)


def _same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for k in sa:
        assert torch.equal(sa[k].float(), sb[k].float()), k


# ------------------------------------------------------------------------------------------------------------
# FLUX
# ------------------------------------------------------------------------------------------------------------


def _flux_out(model):
    from fillscope.specs import flux_image_ids

    g = torch.Generator().manual_seed(0)
    cfg = model.config
    x = torch.randn(1, 16, cfg.in_channels, generator=g)
    ctx = torch.randn(1, 8, cfg.joint_attention_dim, generator=g)
    pooled = torch.randn(1, cfg.pooled_projection_dim, generator=g)
    kw = dict(hidden_states=x, encoder_hidden_states=ctx, pooled_projections=pooled, timestep=torch.tensor([0.7]),
              img_ids=flux_image_ids(8, 8), txt_ids=torch.zeros(8, 3), guidance=torch.tensor([30.0]))
    with torch.inference_mode():
        return model(**{k: v.to(model.dtype) for k, v in kw.items()}, return_dict=False)[0]


@pytest.mark.parametrize("fmt", ["flux_bfl", "flux_diffusers"])
def test_flux_fill_single_file_matches_the_diffusers_folder(tiny, fmt):
    from fillscope.pipelines.flux_fill import load_flux_fill_transformer

    ref = load_flux_fill_transformer(tiny["folders"]["flux_transformer"], dtype="fp32", device="cpu")
    got = load_flux_fill_transformer(tiny["files"][fmt], dtype="fp32", device="cpu")
    assert got.config["in_channels"] == 384 and got.provenance.startswith("single file")
    _same_state(got.model, ref.model)
    torch.testing.assert_close(_flux_out(got.model), _flux_out(ref.model), rtol=1e-5, atol=1e-6)


def test_fp8_flux_and_sai_files_stay_fp8_and_match_their_bf16_upcast(tiny, tmp_path):
    """fp8 through both converters (the BFL plan; diffusers' SAI converter, fp8 travelling as uint8)."""
    from fillscope.fp8 import is_fp8

    models = tiny["models"]
    for kind, state, run in (("flux_fill_transformer", cf.flux_bfl_state(models["flux_transformer"]), _flux_out),
                             ("sd3_transformer", cf.sd3_sai_state(models["sd3_transformer"]), _sd3_out)):
        fp8 = {k: (v.to(torch.float8_e4m3fn) if v.dim() == 2 else v.to(torch.bfloat16)) for k, v in state.items()}
        up = {k: v.to(torch.bfloat16) for k, v in fp8.items()}
        got = _load(kind, cf.save(tmp_path / f"{kind}_fp8.safetensors", fp8, cf.TINY_HINTS), dtype="bf16")
        ref = _load(kind, cf.save(tmp_path / f"{kind}_bf16.safetensors", up, cf.TINY_HINTS), dtype="bf16")
        assert any(is_fp8(p.dtype) for p in got.model.parameters()) and got.model.dtype == torch.bfloat16
        assert "stay in fp8_e4m3fn" in got.extras["facts"]["fp8"]
        torch.testing.assert_close(run(got.model), run(ref.model), rtol=0, atol=0)


def test_flux_bfl_plan_is_comfyuis_map_inverted_at_full_size(comfy):
    """Every entry of comfy.utils.flux_to_diffusers (the real 3072-wide FLUX.1 Fill) is a move of the plan."""
    model = build_on_meta("flux_fill_transformer", dtype=torch.bfloat16)
    header = {k: TensorInfo(CODES[v.dtype], tuple(v.shape)) for k, v in cf.flux_bfl_state(model).items()}
    plan = {m.dst: m for m in flux_bfl_plan(header)}
    key_map = comfy.utils.flux_to_diffusers(cf.flux_comfy_config(model))
    present = [k for k in key_map if k in model.state_dict()]
    assert set(plan) == set(present) == set(model.state_dict())
    for dst in present:
        target, m = key_map[dst], plan[dst]
        if isinstance(target, str):
            assert (m.src, m.rows, m.swap) == (target, None, False), dst
        elif target[1] is None:
            assert (m.src, m.rows, m.swap) == (target[0], None, True), dst
        else:
            _, start, length = target[1]
            assert (m.src, m.rows, m.swap) == (target[0], (start, start + length), False), dst
    info = _info("flux1-fill-dev.safetensors", header)
    part = info.part("flux_fill_transformer")
    assert {k: part.config[k] for k in shipped_config("flux_fill_transformer")} == _listy(shipped_config("flux_fill_transformer"))


# ------------------------------------------------------------------------------------------------------------
# VAE
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["flux", "sd3"])
def test_ae_safetensors_matches_the_folder_vae(tiny, kind):
    ref = vae.load_vae(tiny["folders"]["flux_vae"], kind="flux", dtype="fp32", device="cpu")
    got = vae.load_vae(tiny["files"]["ae"], kind=kind, dtype="fp32", device="cpu")
    _same_state(got.model, ref.model)
    image = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(1)) * 2 - 1
    fmt = vae.latent_format(got)
    assert (fmt.scale, fmt.shift) == ((0.3611, 0.1159) if kind == "flux" else (1.5305, 0.0609))
    z_ref = vae.encode(ref, image)  # flux scale/shift: undo and redo with the kind's
    z = vae.encode(got, image)
    torch.testing.assert_close(z, (z_ref / 0.3611 + 0.1159 - fmt.shift) * fmt.scale)
    torch.testing.assert_close(vae.decode(got, z), vae.decode(ref, z_ref), rtol=0, atol=1e-5)
    assert any("loader's kind" in n for n in got.extras["notes"])


# ------------------------------------------------------------------------------------------------------------
# Text encoders
# ------------------------------------------------------------------------------------------------------------


def _clip(load, source, tok):
    comp = load(source, dtype="fp32", device="cpu", tokenizer_fallback=tok)
    return comp, text.encode_clip(comp, "a red fox in the snow, photo")


@pytest.mark.parametrize("file,folder,loader", [
    ("clip_l", "clip_l", "load_clip_l"), ("clip_l_noproj", "flux_clip_l", "load_clip_l"),
    ("clip_l_bare", "flux_clip_l", "load_clip_l"), ("clip_g", "clip_g", "load_clip_g"),
])
def test_clip_files_match_the_folder_encoders(tiny, file, folder, loader):
    clip_dir, _ = comfy_tokenizer_dirs()
    load = getattr(text, loader)
    ref, a = _clip(load, tiny["folders"][folder], clip_dir)
    got, b = _clip(load, tiny["files"][file], clip_dir)
    assert type(got.model).__name__ == type(ref.model).__name__
    for name in ("pooled", "last_hidden", "penultimate", "text_embeds"):
        x, y = getattr(b, name), getattr(a, name)
        assert (x is None) == (y is None), name
        if x is not None:
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_t5_fp16_file_matches_the_folder_encoder(tiny):
    _, t5_dir = comfy_tokenizer_dirs()
    ref = text.load_t5(tiny["folders"]["flux_t5"], dtype="fp32", device="cpu", tokenizer_fallback=t5_dir)
    got = text.load_t5(tiny["files"]["t5_fp16"], dtype="fp32", device="cpu", tokenizer_fallback=t5_dir)
    assert got.model.shared.weight is got.model.encoder.embed_tokens.weight
    with torch.no_grad():  # the file holds the fp16-rounded weights
        for p in ref.model.parameters():
            p.copy_(p.half().float())
    _same_state(got.model, ref.model)
    a, b = text.encode_t5(ref, "a red fox", max_length=32), text.encode_t5(got, "a red fox", max_length=32)
    torch.testing.assert_close(b.hidden, a.hidden, rtol=1e-5, atol=1e-6)


def test_t5_fp16_keeps_wo_in_fp32(tiny):
    got = _load("t5_xxl", tiny["files"]["t5_fp16"], dtype="fp16")
    dtypes = {n: p.dtype for n, p in got.model.named_parameters()}
    assert {d for n, d in dtypes.items() if n.endswith("wo.weight")} == {torch.float32}
    assert {d for n, d in dtypes.items() if not n.endswith("wo.weight")} == {torch.float16}


@pytest.mark.parametrize("file", ["t5_fp8", "t5_fp8_scaled"])
def test_fp8_t5_stays_fp8_and_matches_the_bf16_upcast_reference(tiny, file):
    from safetensors.torch import load_file

    _, t5_dir = comfy_tokenizer_dirs()
    got = text.load_t5(tiny["files"][file], dtype="bf16", device="cpu", tokenizer_fallback=t5_dir)
    model = got.model
    q = model.encoder.block[0].layer[0].SelfAttention.q.weight
    assert q.dtype == torch.float8_e4m3fn and model.shared.weight.dtype == torch.float8_e4m3fn
    assert model.dtype == torch.bfloat16 and "fp8_e4m3fn" in got.extras["facts"]["fp8"]
    # reference: the folder's model in bf16 with the file's weights upcast (times their scales)
    ref = text.load_t5(tiny["folders"]["flux_t5"], dtype="bf16", device="cpu", tokenizer_fallback=t5_dir)
    sd = load_file(str(tiny["files"][file]))
    with torch.no_grad():
        for name, p in ref.model.named_parameters():
            w = sd[name].to(torch.bfloat16)
            scale = sd.get(name[: -len("weight")] + "scale_weight")
            p.copy_(w * scale.to(torch.bfloat16) if scale is not None else w)
    a, b = text.encode_t5(ref, "a red fox", max_length=32), text.encode_t5(got, "a red fox", max_length=32)
    assert b.hidden.dtype == torch.bfloat16
    torch.testing.assert_close(b.hidden, a.hidden, rtol=1e-5, atol=1e-6)
    assert q.dtype == torch.float8_e4m3fn  # put back after the forward
    from fillscope import placement

    with placement.in_use(got, "cpu", "sequential"):  # streaming runs before the upcast hooks and after them
        streamed = text.encode_t5(got, "a red fox", max_length=32)
    assert torch.equal(streamed.hidden, b.hidden)
    assert q.dtype == torch.float8_e4m3fn


# ------------------------------------------------------------------------------------------------------------
# SD3 (SAI checkpoint, SD3.5) and the ControlNet
# ------------------------------------------------------------------------------------------------------------


def _sd3_out(model, controlnet=False):
    g = torch.Generator().manual_seed(0)
    cfg = model.config
    kw = dict(hidden_states=torch.randn(1, 16, 16, 16, generator=g),
              encoder_hidden_states=torch.randn(1, 10, cfg.joint_attention_dim, generator=g),
              pooled_projections=torch.randn(1, cfg.pooled_projection_dim, generator=g), timestep=torch.tensor([500.0]),
              return_dict=False)
    if controlnet:
        kw["controlnet_cond"] = torch.randn(1, 17, 16, 16, generator=g)
    kw = {k: (v.to(model.dtype) if torch.is_tensor(v) else v) for k, v in kw.items()}
    with torch.inference_mode():
        out = model(**kw)[0]
    return torch.stack(list(out)) if controlnet else out


@pytest.mark.parametrize("file", ["sd3_full", "sd3_bare"])
def test_sai_sd3_checkpoint_transformer_and_vae_match_the_folder(tiny, file):
    from fillscope.pipelines.sd3_controlnet import load_sd3_transformer

    ref = load_sd3_transformer(tiny["folders"]["sd3_transformer"], dtype="fp32", device="cpu")
    got = load_sd3_transformer(tiny["files"][file], dtype="fp32", device="cpu", variant="sd3-medium")
    _same_state(got.model, ref.model)
    torch.testing.assert_close(_sd3_out(got.model), _sd3_out(ref.model), rtol=1e-5, atol=1e-6)
    v = vae.load_vae(tiny["files"][file], kind="sd3", dtype="fp32", device="cpu")
    _same_state(v.model, _load("sd3_vae", tiny["folders"]["sd3_vae"]).model)
    with pytest.raises(FillScopeInputError, match="kind to sd3|Load VAE \\(kind sd3\\)"):
        vae.load_vae(tiny["files"][file], kind="flux", dtype="fp32", device="cpu")


def test_sd3_in_bf16_is_bf16_from_folders_and_files(tiny):
    """diffusers' from_pretrained keeps SD3's file dtype when the first state-dict entry (the fp32 pos_embed buffer)
    matches it; the folder path must still give the dtype asked for, like the file path."""
    a = _load("sd3_transformer", tiny["folders"]["sd3_transformer"], dtype="bf16")
    for file in ("sd3_bare", "sd3_diffusers"):
        b = _load("sd3_transformer", tiny["files"][file], dtype="bf16")
        assert {p.dtype for p in a.model.parameters()} == {torch.bfloat16} == {p.dtype for p in b.model.parameters()}
        _same_state(a.model, b.model)


@pytest.mark.parametrize("kind,folder", [("clip_l", "clip_l"), ("clip_g", "clip_g"), ("t5_xxl", "sd3_t5")])
def test_sai_checkpoint_bundled_text_encoders_match_the_folder(tiny, kind, folder):
    got = _load(kind, tiny["files"]["sd3_full"])
    _same_state(got.model, _load(kind, tiny["folders"][folder]).model)
    assert got.extras["facts"]["part"].startswith("text_encoders.")


def test_sd35_medium_file_infers_qk_norm_dual_attention_and_heads(tiny):
    info = sniff(tiny["files"]["sd35"])
    part = info.part("sd3_transformer")
    assert info.metadata == {}  # no hints: head width from the qk-norm weights
    assert part.config["qk_norm"] == "rms_norm" and part.config["dual_attention_layers"] == [0, 1]
    assert "3.5 Medium" in info.what
    got = _load("sd3_transformer", tiny["files"]["sd35"])
    ref = _load("sd3_transformer", tiny["folders"]["sd35"])
    torch.testing.assert_close(_sd3_out(got.model), _sd3_out(ref.model), rtol=1e-5, atol=1e-6)


def test_inpainting_controlnet_file_matches_the_folder(tiny):
    from fillscope.pipelines.sd3_controlnet import load_sd3_controlnet

    ref = load_sd3_controlnet(tiny["folders"]["controlnet"], dtype="fp32", device="cpu")
    got = load_sd3_controlnet(tiny["files"]["controlnet"], dtype="fp32", device="cpu")
    assert got.config["extra_conditioning_channels"] == 1 and got.config["num_layers"] == 23
    torch.testing.assert_close(_sd3_out(got.model, True), _sd3_out(ref.model, True), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------------------
# Full-size headers: the shapes give the shipped configs; other models give useful errors
# ------------------------------------------------------------------------------------------------------------


def _listy(cfg):
    return json.loads(json.dumps(cfg))


def _header(sd, prefix=""):
    return {prefix + k: TensorInfo(CODES.get(v.dtype, "F32"), tuple(v.shape)) for k, v in sd.items()}


def _info(name, header, metadata=None):
    kind, what, parts, take, why = classify(header, {}, metadata or {})
    return CheckpointInfo(Path(name), 0, header, metadata or {}, kind, what, parts, take, why)


def _assert_config(part, kind, variant=None):
    want = _listy(shipped_config(kind, variant))
    got = {k: part.config.get(k) for k in want}
    assert _listy(got) == want


@pytest.mark.parametrize("variant", ["sd3-medium", "sd3.5-medium", "sd3.5-large"])
def test_full_size_sai_files_give_the_shipped_sd3_configs(comfy, variant):
    model = build_on_meta("sd3_transformer", shipped_config("sd3_transformer", variant), dtype=torch.bfloat16)
    info = _info("sd3.safetensors", _header(cf.sd3_sai_state(model), "model.diffusion_model."))
    _assert_config(info.part("sd3_transformer"), "sd3_transformer", variant)
    assert {"sd3-medium": "3 Medium", "sd3.5-medium": "3.5 Medium", "sd3.5-large": "3.5 Large"}[variant] in info.what


def test_full_size_encoders_vae_and_controlnet_give_the_shipped_configs(comfy):
    cases = [
        ("clip_l", lambda m: cf.clip_comfy_state(m, shipped_config("clip_l")), "CLIP-L"),
        ("clip_g", lambda m: cf.clip_comfy_state(m, shipped_config("clip_g")), "CLIP-G"),
        ("t5_xxl", lambda m: cf.t5_comfy_state(m)[0], "T5-XXL"),
        ("flux_vae", lambda m: cf.vae_ldm_state(m), "FLUX/SD3 VAE"),
        ("sd3_controlnet", lambda m: m.state_dict(), "inpainting ControlNet"),
    ]
    for kind, to_file, what in cases:
        info = _info(f"{kind}.safetensors", _header(to_file(build_on_meta(kind, dtype=torch.bfloat16))))
        assert what in info.what, info.what
        _assert_config(info.part(kind), kind)
    fp8 = _header(cf.fp8_t5_state(build_on_meta("t5_xxl", dtype=torch.float32)))
    assert _info("t5xxl_fp8_e4m3fn.safetensors", fp8).part("t5_xxl") is not None


def _wrong(name, header, kind, describe=None):
    info = _info(name, header)
    assert info.part(kind) is None, info.what
    return info, str(wrong_kind_error(info, kind, "source", describe))


def _bracketed(kinds):  # a caller's loader names: shows where the engine puts them
    return "<" + "|".join(kinds) + ">"


def test_files_of_another_kind_name_the_file_what_it_is_and_what_loads_it(comfy):
    """The engine says what loads a file in component kinds and neutral other-loader keys; a caller's `describe`
    names them (the nodes name their own and ComfyUI's nodes: test_loader_nodes_name_the_node_that_takes_a_file)."""
    dev = build_on_meta("flux_fill_transformer", {**shipped_config("flux_fill_transformer"), "in_channels": 64,
                                                  "out_channels": 64}, dtype=torch.bfloat16)
    info, msg = _wrong("flux1-dev.safetensors", _header(cf.flux_bfl_state(dev)), "flux_fill_transformer")
    assert "'flux1-dev.safetensors' is a FLUX.1 [dev] text-to-image or FLUX.1 Kontext [dev] transformer" in msg
    assert "the FillScope FLUX.1 Fill transformer loader takes the FLUX.1 Fill [dev] transformer" in msg
    assert "load it with a diffusion-model loader outside FillScope (FillScope has no loader for FLUX.1" in msg
    assert info.take_with == (("diffusion_model",),) and "Kontext" in info.why
    _, msg = _wrong("flux1-dev.safetensors", _header(cf.flux_bfl_state(dev)), "flux_fill_transformer", _bracketed)
    assert "the <flux_fill_transformer> loader takes" in msg and "load it with <diffusion_model> (FillScope has" in msg
    clip_g = _header(cf.clip_comfy_state(build_on_meta("clip_g", dtype=torch.float16), shipped_config("clip_g")))
    info, msg = _wrong("clip_g.safetensors", clip_g, "clip_l", _bracketed)
    assert "CLIP-G (OpenCLIP bigG)" in msg and "the <clip_l> loader" in msg and "load it with <clip_g>." in msg
    assert info.take_with == (("clip_g",),) and info.why == ""
    ae = _header(cf.vae_ldm_state(build_on_meta("flux_vae", dtype=torch.bfloat16)))
    info, msg = _wrong("ae.safetensors", ae, "t5_xxl", _bracketed)
    assert "16-channel FLUX/SD3 VAE" in msg and "load it with <flux_vae|sd3_vae>." in msg
    assert "load it with FillScope FLUX VAE or FillScope SD3 VAE." in _wrong("ae.safetensors", ae, "t5_xxl")[1]
    sdxl = {"model.diffusion_model.input_blocks.0.0.weight": TensorInfo("F16", (320, 4, 3, 3)),
            "model.diffusion_model.label_emb.0.0.weight": TensorInfo("F16", (1280, 2816))}
    info, msg = _wrong("sd_xl_base_1.0.safetensors", sdxl, "sd3_transformer")
    assert "SDXL checkpoint" in msg and "a whole-checkpoint loader outside FillScope" in msg
    assert info.take_with == (("checkpoint",),)
    lora = {"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": TensorInfo("BF16", (16, 3072))}
    info, msg = _wrong("fill_lora.safetensors", lora, "flux_fill_transformer")
    assert "FLUX LoRA" in msg and info.take_with == (("lora",),)
    assert take_with_text(info, lambda kinds: None) == "a LoRA loader outside FillScope (FillScope loads base models only)"


WRONG_LOADER_CASES = [  # file, loader kind, what the file is, what loads it (engine: kinds; nodes: the node)
    ("flux_bfl", "sd3_transformer", "FLUX.1 Fill [dev] transformer", (("flux_fill_transformer",),),
     "FillScope Load FLUX.1 Fill Transformer"),
    ("t5_fp16", "clip_l", "T5 v1.1 encoder", (("t5_xxl",),), "FillScope Load T5-XXL"),
    ("controlnet", "flux_fill_transformer", "SD3 inpainting ControlNet", (("sd3_controlnet",),),
     "FillScope Load SD3 Inpaint ControlNet"),
    ("sd3_bare", "clip_g", "SD3 Medium checkpoint", (("sd3_transformer",), ("sd3_vae",)),
     "FillScope Load SD3 Transformer, FillScope Load VAE (kind sd3)"),
    ("ae", "sd3_controlnet", "FLUX/SD3 VAE", (("flux_vae", "sd3_vae"),), "FillScope Load VAE (kind flux or sd3)"),
]


def test_tiny_files_on_the_wrong_loader(tiny):
    for file, kind, what, take_with, _ in WRONG_LOADER_CASES:
        with pytest.raises(WrongKindError) as e:
            _load(kind, tiny["files"][file])
        msg = str(e.value)
        assert f"'{tiny['files'][file].name}' is" in msg and what in msg and "load it with FillScope " in msg, msg
        assert e.value.component == kind and e.value.info.take_with == take_with
        assert f"load it with {_bracketed(take_with[0])}" in str(e.value.retold(_bracketed))


def test_loader_nodes_name_the_node_that_takes_a_file(tiny):
    """What a user sees: the loader nodes reword the engine's error with their own titles and ComfyUI's nodes."""
    cases = [(str(tiny["files"][file]), kind, loader) for file, kind, _, _, loader in WRONG_LOADER_CASES]
    code = f"""
import json, sys, types
sys.path.insert(0, {str(comfyui_root())!r})
pkg = types.ModuleType("FillScope"); pkg.__path__ = [{str(REPO)!r}]; sys.modules["FillScope"] = pkg
from FillScope.fillscope.checkpoints import TensorInfo, classify, sniff, wrong_kind_error, CheckpointInfo
from FillScope.nodes import loaders as L
out = [str(wrong_kind_error(sniff(path), kind, "source").retold(L.describe_loader)) for path, kind, _ in {cases!r}]
sdxl = {{"model.diffusion_model.input_blocks.0.0.weight": TensorInfo("F16", (320, 4, 3, 3)),
        "model.diffusion_model.label_emb.0.0.weight": TensorInfo("F16", (1280, 2816))}}
info = CheckpointInfo(__import__("pathlib").Path("sd_xl_base_1.0.safetensors"), 0, sdxl, {{}}, *classify(sdxl))
out.append(str(wrong_kind_error(info, "flux_fill_transformer", "source", L.describe_loader)))
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    *msgs, sdxl = json.loads(res.stdout.strip().splitlines()[-1])
    for (path, kind, loader), msg in zip(cases, msgs):
        assert f"load it with {loader}." in msg, msg
    assert "the FillScope Load SD3 Inpaint ControlNet loader takes the alimama-creative" in msgs[-1]
    assert "the FillScope Load CLIP-L loader takes a CLIP-L text encoder" in msgs[1]
    assert ("the FillScope Load FLUX.1 Fill Transformer loader takes" in sdxl
            and "load it with ComfyUI's Load Checkpoint node (FillScope runs FLUX.1 Fill, SD3/SD3.5 and FLUX.2 [klein] only)."
            in sdxl)


# ------------------------------------------------------------------------------------------------------------
# Broken and unsafe files
# ------------------------------------------------------------------------------------------------------------


def test_truncated_and_corrupt_files_say_re_download(tiny, tmp_path):
    data = tiny["files"]["ae"].read_bytes()
    for name, blob in (("cut.safetensors", data[: len(data) // 2]), ("head.safetensors", data[:6]),
                       ("garbage.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")):
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(FillScopeInputError) as e:
            _load("flux_vae", tmp_path / name)
        assert "could not be read" in str(e.value) and "re-download" in str(e.value) and name in str(e.value)


@pytest.mark.parametrize("suffix", [".ckpt", ".pt", ".bin", ".pth"])
def test_pickled_files_are_refused_without_unpickling(tmp_path, monkeypatch, suffix):
    path = tmp_path / f"model{suffix}"
    torch.save({"w": torch.zeros(2)}, path)

    def no_unpickling(*a, **k):
        raise AssertionError("torch.load called")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(FillScopeInputError) as e:
        _load("flux_fill_transformer", path)
    assert "never unpickles" in str(e.value) and ".safetensors" in str(e.value)
    renamed = tmp_path / "renamed.safetensors"
    renamed.write_bytes(path.read_bytes())
    with pytest.raises(FillScopeInputError, match="never unpickles"):
        _load("t5_xxl", renamed)


def test_nan_weights_name_the_tensor(tiny, tmp_path):
    from safetensors.torch import load_file

    sd = load_file(str(tiny["files"]["t5_fp16"]))
    sd["encoder.block.1.layer.0.SelfAttention.k.weight"][3, 2] = float("nan")
    path = cf.save(tmp_path / "t5xxl_nan.safetensors", sd)
    with pytest.raises(FillScopeInputError) as e:
        _load("t5_xxl", path)
    assert "'encoder.block.1.layer.0.SelfAttention.k.weight'" in str(e.value) and "NaN/inf" in str(e.value)
    assert "t5xxl_nan.safetensors" in str(e.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FillScopeInputError, match="does not exist"):
        _load("flux_vae", tmp_path / "nope.safetensors")


# ------------------------------------------------------------------------------------------------------------
# Source listing (ComfyUI's folder_paths, in a subprocess)
# ------------------------------------------------------------------------------------------------------------


def test_loaders_list_files_from_the_model_folders(tiny, tmp_path):
    base = tiny["files"]["ae"].parent.parent  # files/<folder>/<name>
    (base / "diffusers" / "FLUX.1-Fill-dev").mkdir(parents=True, exist_ok=True)
    (base / "diffusers" / "FLUX.1-Fill-dev" / "model_index.json").write_text("{}")
    torch.save({}, base / "text_encoders" / "old.bin")
    outside = tmp_path / "secret.safetensors"
    outside.write_bytes(tiny["files"]["ae"].read_bytes())
    code = f"""
import json, os, sys, types
sys.path.insert(0, {str(comfyui_root())!r})
import folder_paths
base = {str(base)!r}
for name in ("diffusers", "diffusion_models", "text_encoders", "vae", "controlnet", "checkpoints"):
    folder_paths.folder_names_and_paths[name] = ([os.path.join(base, name)], folder_paths.folder_names_and_paths[name][1])
pkg = types.ModuleType("FillScope"); pkg.__path__ = [{str(REPO)!r}]; sys.modules["FillScope"] = pkg
from FillScope.nodes import common as c, loaders as L
out = {{n.NODE_ID: c.source_options(n.KINDS) for n in L.NODES}}
checks = {{s: c.validate_source(s) for s in ["FLUX.1-Fill-dev", "vae/ae.safetensors", "text_encoders/old.bin",
           "vae/../../{outside.name}", "vae/missing.safetensors", "../x", "meta"]}}
defaults = {{n.NODE_ID: L.default_source(out[n.NODE_ID], n.KINDS) for n in L.NODES}}
defaults["none"] = L.default_source(["placeholder", "meta"], ("clip_l",))
print(json.dumps({{"options": out, "checks": checks, "resolved": c.resolve_source("checkpoints/sd3_medium.safetensors"),
                  "legacy": c.resolve_source("FLUX.1-Fill-dev"), "defaults": defaults}}))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout.strip().splitlines()[-1])
    opts = data["options"]
    assert opts["FillScopeLoadFluxFillTransformer"] == [
        "FLUX.1-Fill-dev", "diffusion_models/flux1-fill-dev.safetensors", "diffusion_models/flux1-fill-diffusers-keys.safetensors",
        "placeholder", "meta"]
    t5 = opts["FillScopeLoadT5"]
    assert "text_encoders/t5xxl_fp8_e4m3fn.safetensors" in t5 and "text_encoders/old.bin" in t5
    assert "checkpoints/sd3_medium_incl_clips.safetensors" in t5 and "checkpoints/sd3_medium.safetensors" not in t5
    vae_opts = opts["FillScopeLoadVAE"]
    assert {"vae/ae.safetensors", "checkpoints/sd3_medium.safetensors", "checkpoints/sd3_medium_incl_clips.safetensors"} <= set(vae_opts)
    assert "checkpoints/sd3_medium.safetensors" in opts["FillScopeLoadSD3Transformer"]
    assert opts["FillScopeLoadSD3InpaintControlNet"][1] == "controlnet/SD3-Controlnet-Inpainting.safetensors"
    checks = data["checks"]
    assert checks["FLUX.1-Fill-dev"] is True and checks["vae/ae.safetensors"] is True and checks["meta"] is True
    assert "never unpickles" in checks["text_encoders/old.bin"]
    assert "points outside" in checks[f"vae/../../{outside.name}"] and "points outside" in checks["../x"]
    assert "not found" in checks["vae/missing.safetensors"]
    assert data["resolved"] == str(tiny["files"]["sd3_bare"]) and data["legacy"].endswith("FLUX.1-Fill-dev")
    # a new loader's source: the first entry holding its component, read from headers (the folder here is an empty
    # model_index.json: no component), never meta while one exists; meta only when there is none
    defaults = {k: tuple(v) for k, v in data["defaults"].items()}
    assert defaults["FillScopeLoadFluxFillTransformer"] == ("diffusion_models/flux1-fill-dev.safetensors", "flux_fill_transformer")
    # own folder before a checkpoint that bundles it (sd3_medium_incl_clips comes first in the menu); the tiny CLIP-G's
    # width is neither 768 nor 1280, so it fits both CLIP loaders (a real clip_g.safetensors is CLIP-G only)
    assert defaults["FillScopeLoadCLIPL"] == ("text_encoders/clip_g.safetensors", "clip_l")
    assert defaults["FillScopeLoadCLIPG"] == ("text_encoders/clip_g.safetensors", "clip_g")
    assert defaults["FillScopeLoadT5"] == ("text_encoders/t5xxl_fp16.safetensors", "t5_xxl")
    assert defaults["FillScopeLoadVAE"] == ("vae/ae.safetensors", "flux_vae")
    assert defaults["FillScopeLoadSD3Transformer"] == ("diffusion_models/sd3.5_medium_tiny.safetensors", "sd3_transformer")
    assert defaults["FillScopeLoadSD3InpaintControlNet"][0] == "controlnet/SD3-Controlnet-Inpainting.safetensors"
    assert defaults["none"] == ("meta", None)
