"""ComfyUI's own CONDITIONING into FillScope's samplers (nodes/native.py), in a real ComfyUI 0.3.75 server.

The server is the session's shared one (conftest.py `test_nodes_server`, this module's models and image written into
it) with one extra custom_nodes folder, tests/comfy_nodes, whose test-only nodes make the CONDITIONING two ways:

- ComfyUI's own encoders: NativeTestTinyCLIP builds ComfyUI's CLIP object (comfy.sd.CLIP over its FluxClipModel /
  SD3ClipModel, its tokenizers and text-model code) on the tiny folders' text encoders, and ComfyUI's core nodes
  CLIPTextEncode, CLIPTextEncodeFlux, CLIPTextEncodeSD3, FluxGuidance, ConditioningCombine, ConditioningSetArea ...
  run on it. (ComfyUI's CLIPLoader cannot load tiny files: it builds the full-size configs. SD3ClipModel needs CLIPs of
  3+ layers, its penultimate-layer option asserts it, and a T5 4096 wide, the width it pads CLIP to: the SD3 folder
  here is tiny_sd3's with those two sizes changed.)
- FillScope's own tensors: NativeTestFluxTextToConditioning / NativeTestSD3TextToConditioning put a FillScope text
  condition into the CONDITIONING structure CLIPTextEncode makes, unchanged.

Checked: FillScope's own encoding through CONDITIONING -> adapter -> sampler gives the very latent and image of the
direct wiring (same prompt); ComfyUI's encodings through the adapter give exactly the engine's latent on the same
tensors (NativeTestSave* write them); what ComfyUI's encoders make matches FillScope's encoders where the formats agree
and differs where they deliberately do not (T5 padding, SD3's pooled CLIP-L); the shapes records say where the text
came from; other families' conditionings, several entries and broken tensors are refused with the server alive.
"""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import tiny_sd3
import torch
from PIL import Image
from safetensors import safe_open
from server_checks import failed_run
from tiny_flux import build_tiny_flux_fill_folder
from tiny_models import comfy_tokenizer_dirs, swapped
from workflow_helpers import api_node

from fillscope import text as text_ops
from fillscope import vae as vae_ops
from fillscope.masks import prepare_image_and_mask
from fillscope.pipelines import flux_fill, sd3_controlnet

pytestmark = pytest.mark.server

FLUX, SD3, SD3_CN = "FLUX.1-Fill-dev", "SD3-wide-tiny", "SD3-Controlnet-wide-tiny"
DTYPE, STEPS, GUIDANCE, CFG = "fp32", 2, 30.0, 7.0
IMAGE, W, H = "native_example.png", 128, 96
PROMPT = "a red brick fireplace"
LONG = " ".join(["a cosy living room with a red brick fireplace, warm light, a wooden floor and a green armchair"] * 5)
FROM = "from ComfyUI CONDITIONING"
SEEDS = itertools.count(100)


def build_wide_sd3(diffusers: Path) -> None:
    """tiny_sd3's SD3 + inpainting ControlNet with 3-layer CLIPs and a 4096-wide T5 (what ComfyUI's SD3ClipModel
    needs), everything else as tiny_sd3 builds it."""
    def wide(config):
        return {**config, "joint_attention_dim": 4096}

    changes = {"TINY_CLIP_L_CONFIG": {**tiny_sd3.TINY_CLIP_L_CONFIG, "num_hidden_layers": 3},
               "TINY_CLIP_G_CONFIG": {**tiny_sd3.TINY_CLIP_G_CONFIG, "num_hidden_layers": 3},
               "TINY_SD3_T5_CONFIG": {**tiny_sd3.TINY_SD3_T5_CONFIG, "d_model": 4096},
               "TINY_SD3_TRANSFORMER_CONFIG": wide(tiny_sd3.TINY_SD3_TRANSFORMER_CONFIG),
               "TINY_SD3_CONTROLNET_CONFIG": wide(tiny_sd3.TINY_SD3_CONTROLNET_CONFIG)}
    with swapped(tiny_sd3, "TINY_CLIP_L_CONFIG", changes["TINY_CLIP_L_CONFIG"]), \
            swapped(tiny_sd3, "TINY_CLIP_G_CONFIG", changes["TINY_CLIP_G_CONFIG"]), \
            swapped(tiny_sd3, "TINY_SD3_T5_CONFIG", changes["TINY_SD3_T5_CONFIG"]), \
            swapped(tiny_sd3, "TINY_SD3_TRANSFORMER_CONFIG", changes["TINY_SD3_TRANSFORMER_CONFIG"]), \
            swapped(tiny_sd3, "TINY_SD3_CONTROLNET_CONFIG", changes["TINY_SD3_CONTROLNET_CONFIG"]):
        tiny_sd3.build_tiny_sd3_folder(diffusers / SD3, seed=0)
        tiny_sd3.build_tiny_sd3_controlnet_folder(diffusers / SD3_CN, seed=0)


@pytest.fixture(scope="module")
def server(test_nodes_server):
    def prepare(server):
        diffusers = server.models_dir / "diffusers"
        build_tiny_flux_fill_folder(diffusers / FLUX, seed=0)
        build_wide_sd3(diffusers)
        server.input_dir.mkdir(parents=True, exist_ok=True)
        rgba = np.random.default_rng(0).integers(0, 256, size=(H, W, 4), dtype=np.uint8)
        rgba[..., 3] = 255
        rgba[24:72, 32:96, 3] = 0  # transparent = repaint (LoadImage mask = 1 - alpha)
        Image.fromarray(rgba, "RGBA").save(server.input_dir / IMAGE)

    with test_nodes_server.module(prepare) as server:
        yield server


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


def node(info, class_type, **inputs):  # loaders gain inputs: every required widget at its default
    return api_node(info, class_type, **inputs)


# ---- graphs ------------------------------------------------------------------------------------------------------


def flux_graph(info) -> dict:
    return {
        "f_clip": node(info, "FillScopeLoadCLIPL", source=FLUX, dtype=DTYPE),
        "f_t5": node(info, "FillScopeLoadT5", source=FLUX, dtype=DTYPE),
        "f_dit": node(info, "FillScopeLoadFluxFillTransformer", source=FLUX, dtype=DTYPE),
        "f_vae": node(info, "FillScopeLoadVAE", source=FLUX, kind="flux", dtype=DTYPE),
        "img": node(info, "LoadImage", image=IMAGE),
        "f_cond": node(info, "FillScopeFluxFillCondition", vae=["f_vae", 0], image=["img", 0], mask=["img", 1]),
    }


def flux_own_text(info, key="own", text=PROMPT) -> dict:
    return {f"{key}_l": node(info, "FillScopeCLIPLEncode", clip_l=["f_clip", 0], text=text),
            f"{key}_t5": node(info, "FillScopeT5Encode", t5=["f_t5", 0], text=text, max_length=512),
            f"{key}_text": node(info, "FillScopeFluxTextCondition", t5_embeds=[f"{key}_t5", 0], clip_embeds=[f"{key}_l", 0])}


def flux_sample(info, key, flux_text, steps=STEPS, seed=0) -> dict:
    return {key: node(info, "FillScopeFluxFillSampler", transformer=["f_dit", 0], flux_text=flux_text,
                      condition=["f_cond", 0], seed=seed, steps=steps, guidance=GUIDANCE, denoise=1.0),
            f"{key}_save": node(info, "NativeTestSaveLatent", latent=[key, 0], name=key),
            f"{key}_dec": node(info, "FillScopeVAEDecode", vae=["f_vae", 0], latent=[key, 0]),
            f"{key}_img": node(info, "SaveImage", images=[f"{key}_dec", 0], filename_prefix=f"native/{key}")}


def comfy_flux_text(info, key="cf", guidance=3.5, clip_l=PROMPT, t5xxl=PROMPT) -> dict:
    return {"clip_flux": node(info, "NativeTestTinyCLIP", folder=FLUX, kind="flux"),
            key: node(info, "CLIPTextEncodeFlux", clip=["clip_flux", 0], clip_l=clip_l, t5xxl=t5xxl, guidance=guidance)}


def sd3_graph(info) -> dict:
    return {
        "s_l": node(info, "FillScopeLoadCLIPL", source=SD3, dtype=DTYPE),
        "s_g": node(info, "FillScopeLoadCLIPG", source=SD3, dtype=DTYPE),
        "s_t5": node(info, "FillScopeLoadT5", source=SD3, dtype=DTYPE),
        "s_dit": node(info, "FillScopeLoadSD3Transformer", source=SD3, dtype=DTYPE),
        "s_cn": node(info, "FillScopeLoadSD3InpaintControlNet", source=SD3_CN, dtype=DTYPE),
        "s_vae": node(info, "FillScopeLoadVAE", source=SD3, kind="sd3", dtype=DTYPE),
        "img": node(info, "LoadImage", image=IMAGE),
        "s_cond": node(info, "FillScopeSD3InpaintCondition", vae=["s_vae", 0], image=["img", 0], mask=["img", 1]),
    }


def sd3_own_text(info, key, text) -> dict:
    return {f"{key}_l": node(info, "FillScopeCLIPLEncode", clip_l=["s_l", 0], text=text),
            f"{key}_g": node(info, "FillScopeCLIPGEncode", clip_g=["s_g", 0], text=text),
            f"{key}_t5": node(info, "FillScopeT5Encode", t5=["s_t5", 0], text=text, max_length=256),
            key: node(info, "FillScopeSD3TextCondition", clip_l_embeds=[f"{key}_l", 0],
                      clip_g_embeds=[f"{key}_g", 0], t5_embeds=[f"{key}_t5", 0])}


def sd3_sample(info, key, positive, negative, steps=STEPS) -> dict:
    return {key: node(info, "FillScopeSD3ControlNetInpaintSampler", transformer=["s_dit", 0], controlnet=["s_cn", 0],
                      positive=positive, negative=negative, condition=["s_cond", 0], seed=0, steps=steps, cfg=CFG),
            f"{key}_save": node(info, "NativeTestSaveLatent", latent=[key, 0], name=key),
            f"{key}_dec": node(info, "FillScopeVAEDecode", vae=["s_vae", 0], latent=[key, 0]),
            f"{key}_img": node(info, "SaveImage", images=[f"{key}_dec", 0], filename_prefix=f"native/{key}")}


def adapter(info, family, conditioning) -> dict:
    kind = "FillScopeFluxTextFromConditioning" if family == "flux" else "FillScopeSD3TextFromConditioning"
    return node(info, kind, conditioning=conditioning)


# ---- reading results ----------------------------------------------------------------------------------------------


def saved(server, name) -> tuple[dict, dict]:
    """(tensors, metadata) a NativeTestSave* node wrote."""
    with safe_open(str(server.output_dir / "fillscope_native" / f"{name}.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, {k: json.loads(v) for k, v in (f.metadata() or {}).items()}


def pixels(server, entry, key) -> np.ndarray:
    image = entry["outputs"][key]["images"][0]
    return np.asarray(Image.open(io.BytesIO(server.view(image["filename"], image["subfolder"], image["type"]))))


def record(entry, key) -> dict:
    return entry["outputs"][key]["fillscope_shapes"][0]


def rows(doc) -> dict:
    return {t["name"]: t for t in doc["node"]["tensors"]}


def run_error(server, prompt) -> str:
    return str(failed_run(server, prompt, timeout=600))


def assert_still_serving(server, info):
    prompt = {**flux_graph(info), **comfy_flux_text(info), "ok_text": adapter(info, "flux", ["cf", 0]),
              **flux_sample(info, "ok", ["ok_text", 0], steps=1, seed=next(SEEDS))}
    assert server.run(prompt, timeout=600)["status"]["status_str"] == "success"


def comfy_like_input(server):
    """The prepared image and mask as ComfyUI's LoadImage + FillScope's condition node (defaults) make them."""
    rgba = np.asarray(Image.open(server.input_dir / IMAGE).convert("RGBA")).astype(np.float32) / 255.0
    return prepare_image_and_mask(torch.from_numpy(rgba[..., :3]).unsqueeze(0),
                                  1.0 - torch.from_numpy(rgba[..., 3]).unsqueeze(0))


# ---- tests --------------------------------------------------------------------------------------------------------


def test_object_info_lists_both_adapters(info):
    for name, output in (("FillScopeFluxTextFromConditioning", "FS_FLUX_TEXT"),
                         ("FillScopeSD3TextFromConditioning", "FS_SD3_TEXT")):
        assert info[name]["input_order"]["required"] == ["conditioning"]
        assert info[name]["input"]["required"]["conditioning"][0] == "CONDITIONING"
        assert info[name]["output"] == [output, "STRING"]
        assert info[name]["category"] == "FillScope/text"


def test_flux_own_tensors_through_conditioning_sample_exactly_the_same(server, info):
    """FillScope's own FLUX text, put into a CONDITIONING and through ComfyUI's FluxGuidance, then the adapter: the
    sampler's latent and the decoded image are those of the direct wiring, bit for bit."""
    prompt = {**flux_graph(info), **flux_own_text(info),
              "to_cond": node(info, "NativeTestFluxTextToConditioning", flux_text=["own_text", 0]),
              "guided": node(info, "FluxGuidance", conditioning=["to_cond", 0], guidance=3.5),
              "native_text": adapter(info, "flux", ["guided", 0]),
              **flux_sample(info, "flux_direct", ["own_text", 0]), **flux_sample(info, "flux_native", ["native_text", 0]),
              "report": node(info, "FillScopeShapesReport", shapes=["flux_native", 1], filename_prefix="native/flux")}
    entry = server.run(prompt, timeout=600)
    direct, native = saved(server, "flux_direct")[0]["latents"], saved(server, "flux_native")[0]["latents"]
    assert direct.shape == (1, 16, 12, 16) and torch.equal(direct, native)
    assert np.array_equal(pixels(server, entry, "flux_direct_img"), pixels(server, entry, "flux_native_img"))

    doc = record(entry, "native_text")
    t = rows(doc)
    assert t["t5.hidden"]["shape"] == [1, 512, 32] and t["t5.hidden"]["provenance"] == f"{FROM} (cross_attn)"
    assert t["clip_l.pooled"]["shape"] == [1, 32] and t["clip_l.pooled"]["provenance"] == f"{FROM} (pooled_output)"
    assert t["txt_ids"]["shape"] == [512, 3] and t["txt_ids"]["provenance"] == "measured"
    facts = doc["node"]["facts"]
    assert facts["T5 tokens"] == 512 and facts["guidance in the CONDITIONING"] == 3.5
    assert facts["CONDITIONING keys"] == "pooled_output, guidance"
    assert any("guidance 3.5" in n and "is not used" in n for n in doc["node"]["notes"])
    assert any("not FLUX's widths" in w for w in doc["node"]["warnings"])  # tiny widths: the sampler checks them
    sampler = record(entry, "flux_native")
    assert any("guidance 30.0 (this input) is used" in n and "3.5 is not" in n for n in sampler["node"]["notes"])
    assert "FillScopeFluxTextFromConditioning" in [r["node"] for r in sampler["trail"]]
    boundaries = {r["tensor"]: r for r in entry["outputs"]["report"]["fillscope_boundaries"]}
    assert boundaries["t5.hidden"]["provenance"] == f"{FROM} (cross_attn)"
    assert boundaries["clip_l.pooled"]["provenance"] == f"{FROM} (pooled_output)"
    assert boundaries["transformer.input"]["provenance"] == "measured"


@pytest.fixture(scope="module")
def flux_engine(server):
    folder = str(server.models_dir / "diffusers" / FLUX)
    kw = dict(dtype=DTYPE, device="cpu")
    clip_dir, t5_dir = comfy_tokenizer_dirs()
    return {"transformer": flux_fill.load_flux_fill_transformer(folder, **kw),
            "vae": vae_ops.load_vae(folder, kind="flux", **kw),
            "clip_l": text_ops.load_clip_l(folder, tokenizer_fallback=clip_dir, **kw),
            "t5": text_ops.load_t5(folder, tokenizer_fallback=t5_dir, **kw)}


def test_flux_conditioning_from_comfyuis_encoder_equals_the_engine(server, info, flux_engine):
    """CLIPTextEncodeFlux (ComfyUI's FLUX CLIP on the tiny weights) -> adapter -> sampler = the engine's sampler on the
    very tensors; ComfyUI's T5 pads to 256 tokens, and its tensors are FillScope's encodings at that length."""
    prompt = {**flux_graph(info), **comfy_flux_text(info), "native_text": adapter(info, "flux", ["cf", 0]),
              "cf_save": node(info, "NativeTestSaveConditioning", conditioning=["cf", 0], name="flux_cond"),
              **flux_sample(info, "flux_comfy", ["native_text", 0])}
    entry = server.run(prompt, timeout=600)
    cond, meta = saved(server, "flux_cond")
    hidden, pooled = cond["0.cross_attn"], cond["0.pooled_output"]
    assert hidden.shape == (1, 256, 32) and pooled.shape == (1, 32) and meta == {"0.guidance": 3.5}

    text = text_ops.FluxTextCondition(t5_hidden=hidden, pooled=pooled)
    condition = flux_fill.build_fill_condition(flux_engine["vae"], comfy_like_input(server))
    ours = flux_fill.sample_flux_fill(flux_engine["transformer"], text, condition, steps=STEPS, guidance=GUIDANCE, seed=0)
    assert torch.equal(ours.latents, saved(server, "flux_comfy")[0]["latents"])

    doc = record(entry, "native_text")
    assert doc["node"]["facts"]["T5 tokens"] == 256
    assert any("pads FLUX's T5 prompt to 256" in n for n in doc["node"]["notes"])
    assert rows(record(entry, "flux_comfy"))["txt_ids"]["shape"] == [256, 3]
    # the same encoders: CLIP-L's unprojected pooler output, T5's last hidden state at 256 tokens ...
    assert torch.allclose(text_ops.encode_clip(flux_engine["clip_l"], PROMPT, project=False).pooled, pooled, atol=1e-5)
    assert torch.allclose(text_ops.encode_t5(flux_engine["t5"], PROMPT, 256).hidden, hidden, atol=1e-4)
    # ... but not FillScope's 512: T5 attends to its padding, so the real tokens' states move too
    assert (text_ops.encode_t5(flux_engine["t5"], PROMPT, 512).hidden[:, :256] - hidden).abs().max() > 1e-3


def test_sd3_own_tensors_through_conditioning_sample_exactly_the_same(server, info):
    prompt = {**sd3_graph(info), **sd3_own_text(info, "pos", PROMPT), **sd3_own_text(info, "neg", ""),
              "pos_cond": node(info, "NativeTestSD3TextToConditioning", sd3_text=["pos", 0]),
              "neg_cond": node(info, "NativeTestSD3TextToConditioning", sd3_text=["neg", 0]),
              "pos_native": adapter(info, "sd3", ["pos_cond", 0]), "neg_native": adapter(info, "sd3", ["neg_cond", 0]),
              **sd3_sample(info, "sd3_direct", ["pos", 0], ["neg", 0]),
              **sd3_sample(info, "sd3_native", ["pos_native", 0], ["neg_native", 0])}
    entry = server.run(prompt, timeout=900)
    direct, native = saved(server, "sd3_direct")[0]["latents"], saved(server, "sd3_native")[0]["latents"]
    assert direct.shape == (1, 16, 12, 16) and torch.equal(direct, native)
    assert np.array_equal(pixels(server, entry, "sd3_direct_img"), pixels(server, entry, "sd3_native_img"))
    doc = record(entry, "pos_native")
    facts, t = doc["node"]["facts"], rows(doc)
    assert facts["context tokens"] == 333 and facts["CLIP-L/G tokens (zero above channel 80)"] == 77
    assert facts["T5-XXL tokens"] == 256 and not doc["node"]["notes"]  # FillScope's own layout: nothing to note
    assert t["joint_context"]["shape"] == [1, 333, 4096] and t["joint_context"]["provenance"] == f"{FROM} (cross_attn)"
    assert t["clip_lg.padded"]["provenance"] == f"{FROM} (cross_attn tokens 0-76)"
    assert t["t5.hidden"]["shape"] == [1, 256, 4096] and t["pooled"]["shape"] == [1, 80]


@pytest.fixture(scope="module")
def sd3_engine(server):
    folder, kw = str(server.models_dir / "diffusers" / SD3), dict(dtype=DTYPE, device="cpu")
    clip_dir, t5_dir = comfy_tokenizer_dirs()
    return {"transformer": sd3_controlnet.load_sd3_transformer(folder, **kw),
            "controlnet": sd3_controlnet.load_sd3_controlnet(str(server.models_dir / "diffusers" / SD3_CN), **kw),
            "vae": vae_ops.load_vae(folder, kind="sd3", **kw),
            "clip_l": text_ops.load_clip_l(folder, tokenizer_fallback=clip_dir, **kw),
            "clip_g": text_ops.load_clip_g(folder, tokenizer_fallback=clip_dir, **kw),
            "t5": text_ops.load_t5(folder, tokenizer_fallback=t5_dir, **kw)}


def test_sd3_conditioning_from_comfyuis_encoders_equals_the_engine(server, info, sd3_engine):
    """CLIPTextEncodeSD3 (a long T5 prompt) and CLIPTextEncode("") on ComfyUI's SD3 CLIP -> adapters -> sampler = the
    engine on the very tensors; contexts of different lengths get a denoiser pass each."""
    prompt = {**sd3_graph(info), "clip_sd3": node(info, "NativeTestTinyCLIP", folder=SD3, kind="sd3"),
              "pos_c": node(info, "CLIPTextEncodeSD3", clip=["clip_sd3", 0], clip_l=PROMPT, clip_g=PROMPT, t5xxl=LONG,
                            empty_padding="none"),
              "neg_c": node(info, "CLIPTextEncode", clip=["clip_sd3", 0], text=""),
              "pos_save": node(info, "NativeTestSaveConditioning", conditioning=["pos_c", 0], name="sd3_pos"),
              "neg_save": node(info, "NativeTestSaveConditioning", conditioning=["neg_c", 0], name="sd3_neg"),
              "pos": adapter(info, "sd3", ["pos_c", 0]), "neg": adapter(info, "sd3", ["neg_c", 0]),
              **sd3_sample(info, "sd3_comfy", ["pos", 0], ["neg", 0])}
    entry = server.run(prompt, timeout=900)
    (pos, _), (neg, _) = saved(server, "sd3_pos"), saved(server, "sd3_neg")
    t5_tokens = text_ops.count_tokens(sd3_engine["t5"].tokenizer, LONG)
    assert pos["0.cross_attn"].shape == (1, 77 + t5_tokens, 4096) and neg["0.cross_attn"].shape == (1, 77 + 77, 4096)
    assert pos["0.pooled_output"].shape == neg["0.pooled_output"].shape == (1, 80)

    texts = [text_ops.SD3TextCondition(context=c["0.cross_attn"], pooled=c["0.pooled_output"]) for c in (pos, neg)]
    condition = sd3_controlnet.build_inpaint_condition(sd3_engine["vae"], comfy_like_input(server))
    ours = sd3_controlnet.sample_sd3_controlnet_inpaint(sd3_engine["transformer"], sd3_engine["controlnet"], *texts,
                                                        condition, steps=STEPS, cfg=CFG, seed=0)
    assert torch.equal(ours.latents, saved(server, "sd3_comfy")[0]["latents"])
    assert "cfg_passes" in ours.info and "cfg_passes" in record(entry, "sd3_comfy")["node"]["facts"]

    facts = record(entry, "pos")["node"]["facts"]
    assert facts["context tokens"] == 77 + t5_tokens and facts["T5-XXL tokens"] == t5_tokens
    assert facts["CLIP-L/G tokens (zero above channel 80)"] == 77
    neg_doc = record(entry, "neg")["node"]
    assert neg_doc["facts"]["T5-XXL tokens"] == 77 and any("pads SD3's T5 prompt to 77" in n for n in neg_doc["notes"])
    # ComfyUI's SD3 encoding against FillScope's encoders: the same penultimate states, T5 states and CLIP-G
    # text_embeds; CLIP-L's pooled part is the unprojected pooler output (SD3's own CLIP-L projection is the identity;
    # the tiny one's is not, so here the two differ)
    context, pooled = pos["0.cross_attn"], pos["0.pooled_output"]
    ol, og = text_ops.encode_clip(sd3_engine["clip_l"], PROMPT), text_ops.encode_clip(sd3_engine["clip_g"], PROMPT)
    assert torch.allclose(ol.penultimate, context[:, :77, :32], atol=1e-5)
    assert torch.allclose(og.penultimate, context[:, :77, 32:80], atol=1e-5) and not context[:, :77, 80:].any()
    assert torch.allclose(text_ops.encode_t5(sd3_engine["t5"], LONG, t5_tokens).hidden, context[:, 77:], atol=1e-4)
    assert torch.allclose(og.text_embeds, pooled[:, 32:], atol=1e-5)
    assert torch.allclose(ol.pooled, pooled[:, :32], atol=1e-5)
    assert not torch.allclose(ol.text_embeds, pooled[:, :32], atol=1e-3)


def fake(info, tokens, width, pooled_width, entries=1, fill="zeros", extra_keys="{}"):
    return node(info, "NativeTestConditioningOfShape", tokens=tokens, width=width, pooled_width=pooled_width,
                entries=entries, fill=fill, extra_keys=extra_keys)


ADAPTER_SAYS = "[FillScope] input 'conditioning':"
REFUSALS = [  # (adapter, conditioning nodes, the sampler that refuses (None: the adapter does), the message says)
    ("flux", lambda i: {"c": fake(i, 333, 4096, 2048)}, None,
     ["an SD3 / SD3.5 conditioning", "wire it to FillScope SD3 Text from CONDITIONING", "DualCLIPLoader"]),
    ("sd3", lambda i: {"c": fake(i, 256, 4096, 768)}, None,
     ["a FLUX.1 conditioning", "wire it to FillScope FLUX Text from CONDITIONING", "TripleCLIPLoader"]),
    ("flux", lambda i: {"c": fake(i, 77, 2048, 1280)}, None, ["an SDXL conditioning", "FLUX reads [B, L, 4096]"]),
    ("sd3", lambda i: {"c": fake(i, 77, 768, 768)}, None, ["an SD1.x conditioning", "SD3 reads [B, L, 4096]"]),
    ("flux", lambda i: {"c": fake(i, 256, 4096, 768, fill="nan")}, None, ["NaN or inf", "fp16"]),
    ("flux", lambda i: {"c": fake(i, 256, 4096, 0)}, None, ["has no pooled_output", "T5-only"]),
    ("sd3", lambda i: {"c": fake(i, 154, 4096, 2048, entries=0)}, None, ["is empty"]),
    # ComfyUI's own encoders of the other family: tiny widths no family has, so the adapter warns and the sampler
    # refuses them against its transformer's config, before the transformer moves
    ("sd3", lambda i: {**comfy_flux_text(i, key="c")}, "sd3",
     ["input 'positive'", "32 channels per token with a pooled vector of 32", "joint context [B, L, 4096]"]),
    ("flux", lambda i: {"clip_sd3": node(i, "NativeTestTinyCLIP", folder=SD3, kind="sd3"),
                        "c": node(i, "CLIPTextEncodeSD3", clip=["clip_sd3", 0], clip_l=PROMPT, clip_g=PROMPT,
                                  t5xxl=PROMPT, empty_padding="none")}, "flux",
     ["input 'flux_text'", "4096 channels per token with a pooled vector of 80", "[B, L, 32]"]),
]


@pytest.mark.parametrize("family, make, sampler, expected", REFUSALS)
def test_wrong_family_and_broken_conditionings_are_refused_with_the_server_alive(server, info, family, make, sampler,
                                                                                expected):
    prompt = {**make(info), "text": adapter(info, family, ["c", 0])}
    if sampler is None:
        prompt["report"] = node(info, "FillScopeShapesReport", shapes=["text", 1], filename_prefix="native/refused")
        expected = [ADAPTER_SAYS, *expected]
    elif sampler == "flux":
        prompt.update({**flux_graph(info), **flux_sample(info, "refused", ["text", 0], seed=next(SEEDS))})
    else:
        prompt.update({**sd3_graph(info), **sd3_sample(info, "refused", ["text", 0], ["text", 0])})
        prompt["refused"]["inputs"]["seed"] = next(SEEDS)
    message = run_error(server, prompt)
    assert "[FillScope] input '" in message and "Fix:" in message
    for part in expected:
        assert part in message, (part, message)
    assert_still_serving(server, info)


def test_several_entries_are_refused_with_the_fix(server, info):
    combined = {**comfy_flux_text(info, "c1"), **comfy_flux_text(info, "c2", t5xxl="a green armchair"),
                "both": node(info, "ConditioningCombine", conditioning_1=["c1", 0], conditioning_2=["c2", 0]),
                "text": adapter(info, "flux", ["both", 0]), **flux_graph(info),
                **flux_sample(info, "combined", ["text", 0], seed=next(SEEDS))}
    message = run_error(server, combined)
    assert "holds 2 entries" in message and "never pick one silently" in message and "ConditioningConcat" in message

    # ComfyUI's SD3 negative template: timestep-range halves of the text and of its zeroed copy, combined
    clip = {"clip_sd3": node(info, "NativeTestTinyCLIP", folder=SD3, kind="sd3"),
            "neg": node(info, "CLIPTextEncode", clip=["clip_sd3", 0], text="")}
    template = {**clip, "zero": node(info, "ConditioningZeroOut", conditioning=["neg", 0]),
                "early": node(info, "ConditioningSetTimestepRange", conditioning=["neg", 0], start=0.0, end=0.1),
                "late": node(info, "ConditioningSetTimestepRange", conditioning=["zero", 0], start=0.1, end=1.0),
                "c": node(info, "ConditioningCombine", conditioning_1=["early", 0], conditioning_2=["late", 0]),
                "text": adapter(info, "sd3", ["c", 0]), **sd3_graph(info),
                **sd3_sample(info, "template", ["text", 0], ["text", 0])}
    message = run_error(server, template)
    assert "holds 2 entries" in message and "ConditioningZeroOut alone gives the empty condition" in message

    # ConditioningZeroOut alone: accepted, said to be all zeros
    zero = {**clip, "zero": node(info, "ConditioningZeroOut", conditioning=["neg", 0]),
            "text": adapter(info, "sd3", ["zero", 0]),
            "report": node(info, "FillScopeShapesReport", shapes=["text", 1], filename_prefix="native/zero")}
    entry = server.run(zero, timeout=600)
    notes = record(entry, "text")["node"]["notes"]
    assert any("all zeros (ConditioningZeroOut)" in n for n in notes)
    assert_still_serving(server, info)


def test_keys_fillscope_does_not_apply_are_said_never_silently(server, info):
    prompt = {**comfy_flux_text(info),
              "area": node(info, "ConditioningSetArea", conditioning=["cf", 0], width=64, height=64, x=0, y=0,
                           strength=1.5),
              "range": node(info, "ConditioningSetTimestepRange", conditioning=["area", 0], start=0.0, end=1.0),
              "text": adapter(info, "flux", ["range", 0]),
              "report": node(info, "FillScopeShapesReport", shapes=["text", 1], filename_prefix="native/keys")}
    entry = server.run(prompt, timeout=600)
    doc = record(entry, "text")["node"]
    assert any("area" in w and "strength=1.5" in w and "regional conditioning" in w for w in doc["warnings"])
    assert any("start_percent=0.0 changes nothing" in n for n in doc["notes"])
    assert any("end_percent=1.0 changes nothing" in n for n in doc["notes"])
    assert "set_area_to_bounds" in doc["facts"]["CONDITIONING keys"]


def test_sd3_one_pass_each_equals_the_cfg_batch(server, sd3_engine):
    """The sampler's pass per text (contexts of different lengths) computes what the [negative, positive] batch does:
    forced on two contexts of one length, the same latents up to float rounding, negative first."""
    texts = [sd3_controlnet.encode_prompt(sd3_engine["clip_l"], sd3_engine["clip_g"], sd3_engine["t5"], p)
             for p in (PROMPT, "")]
    condition = sd3_controlnet.build_inpaint_condition(sd3_engine["vae"], comfy_like_input(server))

    def sample():
        return sd3_controlnet.sample_sd3_controlnet_inpaint(sd3_engine["transformer"], sd3_engine["controlnet"], *texts,
                                                            condition, steps=1, cfg=CFG, seed=0)

    batched = sample()
    with swapped(sd3_controlnet, "text_batches", lambda group: [[t] for t in group]):
        each = sample()
    assert "cfg_passes" not in batched.info and each.info["cfg_passes"].startswith("2 (negative 333 and positive 333")
    assert torch.allclose(batched.latents, each.latents, atol=1e-5)
    texts.reverse()
    assert not torch.allclose(sample().latents, each.latents, atol=1e-3)  # the order matters, and is kept


@pytest.fixture(scope="module")
def native():
    """nodes/native.py in this process (checkpoint_files.pack_module)."""
    import checkpoint_files

    return checkpoint_files.pack_module("nodes.native")


def execute(node_class, conditioning):
    """(the FillScope text, its shapes record) of an adapter node class driven directly."""
    out = node_class.execute(conditioning=conditioning)
    return out.args[0].value, json.loads(out.args[1])["node"]


def test_adapter_batches_ranks_and_meta_in_process(native):
    flux, sd3 = native.FluxTextFromConditioning, native.SD3TextFromConditioning
    text, rec = execute(flux, [[torch.randn(2, 256, 4096), {"pooled_output": torch.randn(1, 768)}]])
    assert text.pooled.shape == (2, 768) and torch.equal(text.pooled[0], text.pooled[1])
    assert any("repeated for the 2 prompts" in n for n in rec["notes"]) and rec["facts"]["batch"] == 2
    assert not rec["warnings"] and text.origin == {"source": "ComfyUI CONDITIONING", "guidance": None}
    for conditioning, says in (
        ([[torch.randn(2, 256, 4096), {"pooled_output": torch.randn(3, 768)}]], "batch 2 but pooled_output 3"),
        ([[torch.randn(256, 4096), {"pooled_output": torch.randn(1, 768)}]], "its tensor (cross_attn) is [256, 4096]"),
        ([[torch.randn(1, 256, 4096), {"pooled_output": torch.randn(768)}]], "its pooled_output is [768]"),
        ([torch.randn(1, 256, 4096)], "its entry is Tensor"),
        ("a prompt", "is str, not a CONDITIONING"),
    ):
        with pytest.raises(ValueError, match="input 'conditioning'") as e:
            execute(flux, conditioning)
        assert says in str(e.value), str(e.value)
    # meta tensors (shapes only): no values to check or split, the shapes pass through
    text, rec = execute(sd3, [[torch.zeros(1, 333, 4096, device="meta"), {"pooled_output": torch.zeros(1, 2048,
                                                                                                       device="meta")}]])
    assert text.context.device.type == "meta" and rec["facts"]["context tokens"] == 333
    assert "T5-XXL tokens" not in rec["facts"] and not rec["warnings"]
    # an SD3 conditioning of both encoders without T5 (CLIPTextEncodeSD3, empty t5xxl box, empty_padding none)
    clip_only = torch.nn.functional.pad(torch.randn(1, 77, 2048), (0, 2048))
    _, rec = execute(sd3, [[clip_only, {"pooled_output": torch.randn(1, 2048)}]])
    assert rec["facts"]["T5-XXL tokens"] == 0 and any("no T5 tokens" in n for n in rec["notes"])
