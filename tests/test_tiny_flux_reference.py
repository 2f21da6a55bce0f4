"""Tests for tests/tiny_flux.py: the tiny FLUX.1 Fill folder and the diffusers reference run.

Besides checking the folder and the pipeline run, these tests pin the conventions written in tiny_flux's module
docstring (noise draw, mask packing, masked pixels, timesteps, guidance, output decode) against what diffusers'
FluxFillPipeline really does, so the docstring an engine is matched against stays exact.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_flux
from tiny_models import run_offline, tokenizers_available

H, W = 48, 64  # multiples of 16: latent grid 6x8, 3x4 = 12 tokens
PROMPT = "a photo of a cat"

# outside CI only: under CI=true conftest.py turns this skip into a failure (`make setup` installs .comfyui)
pytestmark = pytest.mark.skipif(
    not tokenizers_available(),
    reason="ComfyUI tokenizer files not found (set COMFYUI_PATH or install .comfyui)",
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny_flux.build_tiny_flux_fill_folder(
        tmp_path_factory.mktemp("tiny_flux_fill") / "model", seed=0
    )


@pytest.fixture(scope="module")
def pipe(folder):
    return tiny_flux.load_fill_pipeline(folder)


@pytest.fixture(scope="module")
def inputs():
    from PIL import Image

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8), mode="RGB")
    m = np.zeros((H, W), np.uint8)
    m[16:40, 20:52] = 255
    m[0:8, 0:8] = 100  # below 0.5 after /255: must be binarised to "keep"
    m[40:48, 56:64] = 200  # above 0.5: "repaint"
    return image, Image.fromarray(m, mode="L")


def _run(pipe, inputs, **kw):
    image, mask = inputs
    args = {"height": H, "width": W, "steps": 2, "guidance_scale": 30.0, "seed": 7}
    args.update(kw)
    return tiny_flux.run_diffusers_fill(None, image, mask, PROMPT, pipe=pipe, **args)


# ---------------------------------------------------------------------------------------------------------------
# folder
# ---------------------------------------------------------------------------------------------------------------


def test_folder_layout_and_configs(folder):
    index = json.loads((folder / "model_index.json").read_text())
    assert index["_class_name"] == "FluxFillPipeline"
    for name, (lib, cls) in tiny_flux.MODEL_INDEX_COMPONENTS.items():
        assert index[name] == [lib, cls]
        assert (folder / name).is_dir(), name
    for sub, weights in [
        ("transformer", "diffusion_pytorch_model.safetensors"),
        ("vae", "diffusion_pytorch_model.safetensors"),
        ("text_encoder", "model.safetensors"),
        ("text_encoder_2", "model.safetensors"),
    ]:
        assert (folder / sub / weights).is_file()
        assert (folder / sub / "config.json").is_file()
    assert not [
        p for p in folder.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt")
    ]

    sched = json.loads((folder / "scheduler" / "scheduler_config.json").read_text())
    assert sched["_class_name"] == "FlowMatchEulerDiscreteScheduler"
    for k, v in tiny_flux.FLUX_FILL_SCHEDULER_CONFIG.items():
        assert sched[k] == v, k

    vae = json.loads((folder / "vae" / "config.json").read_text())
    assert vae["latent_channels"] == 16 and len(vae["block_out_channels"]) == 4
    assert vae["use_quant_conv"] is False and vae["use_post_quant_conv"] is False
    assert vae["scaling_factor"] == 0.3611 and vae["shift_factor"] == 0.1159

    tr = json.loads((folder / "transformer" / "config.json").read_text())
    assert (tr["in_channels"], tr["out_channels"], tr["guidance_embeds"]) == (
        384,
        64,
        True,
    )
    assert sum(tr["axes_dims_rope"]) == tr["attention_head_dim"]

    te = json.loads((folder / "text_encoder" / "config.json").read_text())
    assert (te["vocab_size"], te["max_position_embeddings"], te["hidden_act"]) == (
        49408,
        77,
        "quick_gelu",
    )
    assert (te["bos_token_id"], te["eos_token_id"], te["pad_token_id"]) == (
        49406,
        49407,
        49407,
    )
    assert te["hidden_size"] == tr["pooled_projection_dim"]
    te2 = json.loads((folder / "text_encoder_2" / "config.json").read_text())
    assert (te2["vocab_size"], te2["feed_forward_proj"]) == (32128, "gated-gelu")
    assert te2["d_model"] == tr["joint_attention_dim"]


def test_build_is_deterministic_in_seed():
    a = tiny_flux.build_tiny_components(seed=0)
    b = tiny_flux.build_tiny_components(seed=0)
    c = tiny_flux.build_tiny_components(seed=1)
    for name in ("transformer", "vae", "text_encoder", "text_encoder_2"):
        sa, sb, sc = a[name].state_dict(), b[name].state_dict(), c[name].state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), name
        assert not all(torch.equal(sa[k], sc[k]) for k in sa), name
    # the caller's global RNG is left alone
    torch.manual_seed(123)
    x = torch.rand(3)
    torch.manual_seed(123)
    tiny_flux.build_tiny_components(seed=0)
    assert torch.equal(torch.rand(3), x)


def test_components_load_offline(folder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        FluxTransformer2DModel,
    )
    from transformers import (
        CLIPTextModel,
        CLIPTokenizer,
        T5EncoderModel,
        T5TokenizerFast,
    )

    tr = FluxTransformer2DModel.from_pretrained(
        folder, subfolder="transformer", local_files_only=True
    )
    vae = AutoencoderKL.from_pretrained(folder, subfolder="vae", local_files_only=True)
    FlowMatchEulerDiscreteScheduler.from_pretrained(
        folder, subfolder="scheduler", local_files_only=True
    )
    te = CLIPTextModel.from_pretrained(folder / "text_encoder", local_files_only=True)
    te2 = T5EncoderModel.from_pretrained(
        folder / "text_encoder_2", local_files_only=True
    )
    CLIPTokenizer.from_pretrained(folder / "tokenizer", local_files_only=True)
    T5TokenizerFast.from_pretrained(folder / "tokenizer_2", local_files_only=True)
    ref = tiny_flux.build_tiny_components(seed=0)
    for name, m in [
        ("transformer", tr),
        ("vae", vae),
        ("text_encoder", te),
        ("text_encoder_2", te2),
    ]:
        assert all(p.dtype == torch.float32 for p in m.parameters())
        sd, sr = m.state_dict(), ref[name].state_dict()
        assert all(torch.equal(sd[k], sr[k]) for k in sr), name
    # T5's embedding is saved once ("shared.weight"); the encoder's copy must come back tied
    assert te2.encoder.embed_tokens.weight.data_ptr() == te2.shared.weight.data_ptr()


def test_pipeline_loads_in_offline_subprocess(folder):
    """HF_HUB_OFFLINE is read when huggingface_hub is imported, so check it in a fresh interpreter, with the hub
    endpoint pointed at a dead address: any network attempt would fail."""
    code = textwrap.dedent(
        f"""
        import sys, torch
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        import tiny_flux
        pipe = tiny_flux.load_fill_pipeline({str(folder)!r})
        assert type(pipe).__name__ == "FluxFillPipeline", type(pipe)
        assert pipe.tokenizer_max_length == 77 and len(pipe.tokenizer) == 49408
        print("OK", type(pipe.tokenizer_2).__name__)
        """
    )
    assert "OK" in run_offline(code)


def test_tokenizers_real_vocab_and_lengths(pipe):
    tok, tok2 = pipe.tokenizer, pipe.tokenizer_2
    assert len(tok) == tiny_flux.CLIP_VOCAB_SIZE and tok.model_max_length == 77
    assert pipe.tokenizer_max_length == 77
    ids = tok(
        PROMPT,
        padding="max_length",
        max_length=77,
        truncation=True,
        return_tensors="pt",
    ).input_ids
    assert ids.shape == (1, 77)
    # real CLIP-L BPE ids: <|startoftext|> a photo of a cat <|endoftext|> + pad (= eos)
    assert ids[0, :7].tolist() == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert (ids[0, 7:] == 49407).all()
    long_ids = tok(
        "cat " * 200, padding="max_length", max_length=77, truncation=True
    ).input_ids
    assert len(long_ids) == 77 and long_ids[-1] == 49407

    ids2 = tok2(
        PROMPT,
        padding="max_length",
        max_length=512,
        truncation=True,
        return_tensors="pt",
    ).input_ids
    assert ids2.shape == (1, 512)
    assert len(tok2) == 32100 and ids2.max() < 32128
    assert ids2[0, :8].tolist() == [
        3,
        9,
        1202,
        13,
        3,
        9,
        1712,
        1,
    ]  # real T5 SentencePiece ids, then </s>
    assert (ids2[0, 8:] == 0).all()


def test_weights_not_degenerate(pipe):
    tr = pipe.transformer
    for name in ("proj_out.weight", "proj_out.bias", "norm_out.linear.weight"):
        assert tr.get_parameter(name).abs().max() > 0, name
    with torch.no_grad():
        prompt_embeds, pooled, text_ids = pipe.encode_prompt(
            PROMPT, prompt_2=None, max_sequence_length=512
        )
        other, pooled_other, _ = pipe.encode_prompt(
            "a red car", prompt_2=None, max_sequence_length=512
        )
        assert (
            prompt_embeds.shape == (1, 512, 32)
            and pooled.shape == (1, 32)
            and text_ids.shape == (512, 3)
        )
        assert torch.isfinite(prompt_embeds).all() and torch.isfinite(pooled).all()
        assert (pooled - pooled_other).abs().max() > 1e-3 and (
            prompt_embeds - other
        ).abs().max() > 1e-3
        g = torch.Generator().manual_seed(0)
        x = torch.randn(1, 12, 384, generator=g)
        img_ids = pipe._prepare_latent_image_ids(1, 3, 4, "cpu", torch.float32)
        out = tr(
            hidden_states=x,
            timestep=torch.tensor([0.5]),
            guidance=torch.tensor([30.0]),
            pooled_projections=pooled,
            encoder_hidden_states=prompt_embeds,
            txt_ids=text_ids,
            img_ids=img_ids,
            return_dict=False,
        )[0]
    assert out.shape == (1, 12, 64) and out.std() > 1e-2


# ---------------------------------------------------------------------------------------------------------------
# reference run
# ---------------------------------------------------------------------------------------------------------------


def test_run_from_folder_shape_and_determinism(folder, inputs):
    image, mask = inputs
    kw = {"height": H, "width": W, "steps": 2, "guidance_scale": 30.0, "seed": 3}
    a = tiny_flux.run_diffusers_fill(folder, image, mask, PROMPT, **kw)
    b = tiny_flux.run_diffusers_fill(folder, image, mask, PROMPT, **kw)
    assert a.shape == (1, 3, H, W) and a.dtype == torch.float32
    assert torch.isfinite(a).all() and a.min() >= 0 and a.max() <= 1
    assert a.std() > 1e-2  # not a flat image
    assert torch.equal(a, b)  # argmax (default): bit-identical


def test_determinism_both_encode_modes_and_seed_prompt_sensitivity(pipe, inputs):
    a = _run(pipe, inputs, encode_mode="argmax")
    b = _run(pipe, inputs, encode_mode="argmax")
    assert torch.equal(a, b)
    s1 = _run(pipe, inputs, encode_mode="sample")
    s2 = _run(pipe, inputs, encode_mode="sample")
    assert torch.isfinite(s1).all() and s1.shape == (1, 3, H, W)
    torch.testing.assert_close(
        s1, s2, rtol=0, atol=1e-6
    )  # same generator seed -> same draws
    assert (s1 - a).abs().max() > 1e-3  # the patch really changes the encode
    assert (_run(pipe, inputs, seed=8) - a).abs().max() > 1e-3
    image, mask = inputs
    other = tiny_flux.run_diffusers_fill(
        None,
        image,
        mask,
        "a red car",
        pipe=pipe,
        height=H,
        width=W,
        steps=2,
        guidance_scale=30.0,
        seed=7,
    )
    assert (other - a).abs().max() > 1e-4


def test_argmax_patch_is_scoped_and_used(pipe, inputs):
    from diffusers.pipelines.flux import pipeline_flux_fill as pff

    original = pff.retrieve_latents
    with tiny_flux.argmax_vae_encode() as stats:
        assert pff.retrieve_latents is not original
        image, mask = inputs
        pipe(
            prompt=PROMPT,
            image=image,
            mask_image=mask,
            height=H,
            width=W,
            num_inference_steps=1,
            generator=torch.Generator().manual_seed(0),
            output_type="latent",
        )
    assert pff.retrieve_latents is original
    assert (
        stats["calls"] == 2
    )  # full image (prepare_latents) + masked image (prepare_mask_latents)
    with pytest.raises(RuntimeError), tiny_flux.argmax_vae_encode():
        raise RuntimeError("boom")
    assert pff.retrieve_latents is original


def test_initial_noise_is_first_generator_draw(pipe, inputs):
    """With argmax encodes and strength 1, diffusers' initial latents == pack(randn(1,16,h,w) from the seed)."""
    ref = _run(pipe, inputs, output_type="latent")
    lat = tiny_flux.pack_latents(tiny_flux.initial_noise(7, H, W))
    assert lat.shape == (1, 12, 64)
    explicit = _run(pipe, inputs, output_type="latent", latents=lat)
    assert torch.equal(ref, explicit)
    # in stock "sample" mode the full-image encode consumes the generator first: the noise is the SECOND draw
    g = torch.Generator("cpu").manual_seed(7)
    torch.randn((1, 16, 6, 8), generator=g)  # full-image encode sample
    second = tiny_flux.pack_latents(torch.randn((1, 16, 6, 8), generator=g))
    calls, handle = _capture_transformer_calls(pipe)
    try:
        _run(pipe, inputs, steps=1, output_type="latent", encode_mode="sample")
    finally:
        handle.remove()
    assert torch.equal(calls[0]["hidden_states"][..., :64], second)


def test_latent_output_and_decode_convention(pipe, inputs):
    lat = _run(pipe, inputs, output_type="latent")
    img = _run(pipe, inputs, output_type="pt")
    assert lat.shape == (1, 12, 64)
    z = pipe._unpack_latents(lat, H, W, 8)
    # unpack by hand: inverse of pack_latents
    z_hand = lat.view(1, 3, 4, 16, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(1, 16, 6, 8)
    assert torch.equal(z, z_hand) and torch.equal(tiny_flux.pack_latents(z_hand), lat)
    with torch.no_grad():
        dec = pipe.vae.decode(z_hand / 0.3611 + 0.1159, return_dict=False)[0]
    assert torch.equal((dec * 0.5 + 0.5).clamp(0, 1), img)


class _Handles:
    def __init__(self, *handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()


def _capture_transformer_calls(pipe):
    """Record every transformer call's kwargs (pre-hook) and its output (key "out")."""
    calls = []

    def pre(module, args, kwargs):
        calls.append(
            {
                k: (v.detach().clone() if torch.is_tensor(v) else v)
                for k, v in kwargs.items()
            }
        )

    def post(module, args, kwargs, output):
        calls[-1]["out"] = output[0].detach().clone()

    tr = pipe.transformer
    return calls, _Handles(
        tr.register_forward_pre_hook(pre, with_kwargs=True),
        tr.register_forward_hook(post, with_kwargs=True),
    )


def _pil_to_model_input(image) -> torch.Tensor:
    """PIL RGB -> [1, 3, H, W] in [-1, 1], keeping diffusers' channels_last strides (see tiny_flux docstring)."""
    return (
        torch.from_numpy((np.asarray(image, dtype=np.float32) / 255.0)[None]).permute(
            0, 3, 1, 2
        )
        * 2.0
        - 1.0
    )


def test_vae_input_layout_matters(pipe, inputs):
    """The PIL path feeds the VAE a channels_last-strided tensor; a contiguous copy encodes slightly differently."""
    image, _ = inputs
    init = pipe.image_processor.preprocess(image, height=H, width=W).to(torch.float32)
    x = _pil_to_model_input(image)
    assert torch.equal(init, x) and init.stride() == x.stride() == (
        H * W * 3,
        1,
        W * 3,
        3,
    )
    with torch.no_grad():
        a = pipe.vae.encode(init).latent_dist.mode()
        b = pipe.vae.encode(x).latent_dist.mode()
        c = pipe.vae.encode(init.contiguous()).latent_dist.mode()
    assert torch.equal(a, b)
    torch.testing.assert_close(
        a, c, rtol=0, atol=1e-4
    )  # equal up to float noise, not necessarily bitwise


def test_transformer_inputs_match_documented_conventions(pipe, inputs):
    """Rebuild every transformer input from the module docstring by hand and compare with what diffusers feeds."""
    from diffusers.pipelines.flux.pipeline_flux_fill import calculate_shift

    image, mask = inputs
    steps, seed, gs = 3, 11, 30.0
    calls, handle = _capture_transformer_calls(pipe)
    try:
        _run(
            pipe,
            inputs,
            steps=steps,
            seed=seed,
            guidance_scale=gs,
            output_type="latent",
        )
    finally:
        handle.remove()
    assert len(calls) == steps

    # image: PIL -> /255 -> 2x-1 ; mask: L -> /255 -> binarise at 0.5
    x = _pil_to_model_input(image)
    m = torch.from_numpy(np.asarray(mask, dtype=np.float32) / 255.0)[None, None]
    m = (m >= 0.5).to(torch.float32)
    masked = x * (1 - m)
    assert (masked[m.expand_as(masked) == 1] == 0).all()
    with torch.no_grad():
        z = pipe.vae.encode(masked).latent_dist.mode()
    z = (z - 0.1159) * 0.3611
    cond_lat = tiny_flux.pack_latents(z)
    h, w = 2 * (H // 16), 2 * (W // 16)
    mk = m[:, 0].view(1, h, 8, w, 8).permute(0, 2, 4, 1, 3).reshape(1, 64, h, w)
    cond_mask = tiny_flux.pack_latents(mk)
    assert cond_mask.shape == (1, 12, 256)
    # channel (dy*8+dx)*4 + py*2 + px of token (r, c) is pixel (16r + 8py + dy, 16c + 8px + dx)
    r, c, dy, dx, py, px = 1, 2, 5, 3, 1, 0
    assert (
        cond_mask[0, r * 4 + c, (dy * 8 + dx) * 4 + py * 2 + px]
        == m[0, 0, 16 * r + 8 * py + dy, 16 * c + 8 * px + dx]
    )

    noise = tiny_flux.pack_latents(tiny_flux.initial_noise(seed, H, W))
    first = calls[0]["hidden_states"]
    assert first.shape == (1, 12, 384)
    assert torch.equal(first[..., :64], noise)
    assert torch.equal(first[..., 64:128], cond_lat)
    assert torch.equal(first[..., 128:], cond_mask)

    seq = (H // 8 // 2) * (W // 8 // 2)
    mu = calculate_shift(seq, 256, 4096, 0.5, 1.15)
    s = np.linspace(1.0, 1 / steps, steps).astype(np.float32)
    sig = torch.from_numpy(math.exp(mu) / (math.exp(mu) + (1 / s - 1) ** 1.0))
    assert sig[0].item() == 1.0
    for i, call in enumerate(calls):
        assert torch.equal(call["timestep"], (sig[i : i + 1] * 1000) / 1000)
        assert torch.equal(call["guidance"], torch.full([1], gs))
        assert torch.equal(call["txt_ids"], torch.zeros(512, 3))
        assert call["encoder_hidden_states"].shape == (1, 512, 32) and call[
            "pooled_projections"
        ].shape == (1, 32)
        assert torch.equal(
            call["hidden_states"][..., 64:], first[..., 64:]
        )  # condition fixed across steps
    # Euler: next = latents + (sigma_next - sigma) * prediction, in float32
    for i in range(steps - 1):
        expect = (
            calls[i]["hidden_states"][..., :64]
            + (sig[i + 1] - sig[i]) * calls[i]["out"]
        )
        assert torch.equal(calls[i + 1]["hidden_states"][..., :64], expect)
    ids = calls[0]["img_ids"]
    assert (
        ids.shape == (12, 3)
        and ids[5].tolist() == [0.0, 1.0, 1.0]
        and ids[11].tolist() == [0.0, 2.0, 3.0]
    )


def test_euler_steps_and_strength(pipe, inputs):
    # strength < 1: 4 steps at strength 0.5 -> t_start = 2, runs 2 steps of the 4-step schedule
    calls, handle = _capture_transformer_calls(pipe)
    try:
        out = _run(pipe, inputs, steps=4, strength=0.5, output_type="pt")
    finally:
        handle.remove()
    assert len(calls) == 2 and torch.isfinite(out).all() and out.shape == (1, 3, H, W)
    sched = pipe.scheduler  # state of the last run
    assert torch.equal(calls[0]["timestep"], (sched.timesteps[2:3] / 1000))
    assert sched.sigmas.shape == (5,) and sched.sigmas[-1] == 0
    assert torch.equal(
        sched.timesteps, sched.sigmas[:-1] * 1000
    )  # full 4-step schedule kept, begin index 2
    assert sched.begin_index == 2
    # start latents = sigma[2] * noise + (1 - sigma[2]) * encode(FULL image)
    image, _ = inputs
    x = _pil_to_model_input(image)
    with torch.no_grad():
        z = (pipe.vae.encode(x).latent_dist.mode() - 0.1159) * 0.3611
    sigma = sched.sigmas[2]
    start = tiny_flux.pack_latents(
        sigma * tiny_flux.initial_noise(7, H, W) + (1.0 - sigma) * z
    )
    assert torch.equal(calls[0]["hidden_states"][..., :64], start)


def test_scheduler_shift_is_inert_under_dynamic_shifting():
    from diffusers import FlowMatchEulerDiscreteScheduler

    a = FlowMatchEulerDiscreteScheduler(**tiny_flux.FLUX_FILL_SCHEDULER_CONFIG)
    b = FlowMatchEulerDiscreteScheduler(
        **{**tiny_flux.FLUX_FILL_SCHEDULER_CONFIG, "shift": 1.0}
    )
    sig = np.linspace(1.0, 1 / 28, 28)
    a.set_timesteps(28, sigmas=sig, mu=1.15)
    b.set_timesteps(28, sigmas=sig, mu=1.15)
    assert torch.equal(a.sigmas, b.sigmas) and torch.equal(a.timesteps, b.timesteps)
