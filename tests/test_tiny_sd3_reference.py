"""Tests for tests/tiny_sd3.py: the tiny SD3 + inpainting-ControlNet folders and the diffusers reference run.

Besides checking the folders and the pipeline run, these tests pin the conventions written in tiny_sd3's module
docstring (text context rules, control image, draw order, sigmas, ControlNet call, residual mapping, CFG, decode)
against what diffusers' StableDiffusion3ControlNetInpaintingPipeline really does, so the docstring an engine is
matched against stays exact.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_sd3
from tiny_models import run_offline, tokenizers_available

H, W = 48, 64  # multiples of 16: latent grid 6x8, 3x4 = 12 tokens
PROMPT = "a photo of a cat"
NEG = "blurry"

# outside CI only: under CI=true conftest.py turns this skip into a failure (`make setup` installs .comfyui)
pytestmark = pytest.mark.skipif(
    not tokenizers_available(),
    reason="ComfyUI tokenizer files not found (set COMFYUI_PATH or install .comfyui)",
)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """The tiny models are overhead-bound: with 2 intra-op threads on a loaded 2-core machine a 1-step run takes
    0.6-3 s instead of 0.13 s (OpenMP threads waiting on each other). One thread for this module, restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny_sd3")
    sd3 = tiny_sd3.build_tiny_sd3_folder(root / "sd3", seed=0)
    cn = tiny_sd3.build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0)
    return sd3, cn


@pytest.fixture(scope="module")
def pipe(folders):
    return tiny_sd3.load_sd3_inpaint_pipeline(*folders)


@pytest.fixture(scope="module")
def inputs():
    from PIL import Image

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8), mode="RGB")
    m = np.zeros((H, W), np.uint8)
    m[16:40, 20:52] = (
        255  # columns 20..23 are in block column 2 whose top-left pixel (col 16) is 0
    )
    m[0:8, 0:8] = 100  # below 0.5 after /255: binarised to "keep"
    m[40:48, 56:64] = 200  # above 0.5: "repaint"
    return image, Image.fromarray(m, mode="L")


def _run(pipe, inputs, **kw):
    image, mask = inputs
    args = {
        "height": H,
        "width": W,
        "steps": 2,
        "guidance_scale": 7.0,
        "controlnet_conditioning_scale": 0.95,
        "seed": 7,
    }
    args.update(kw)
    negative = args.pop("negative_prompt", NEG)
    prompt = args.pop("prompt", PROMPT)
    return tiny_sd3.run_diffusers_sd3_inpaint(
        None, None, image, mask, prompt, negative, pipe=pipe, **args
    )


class _Calls:
    """Record kwargs (pre-hook) and outputs of every call of a module; use as a context manager."""

    def __init__(self, module):
        self.module, self.kwargs, self.outputs = module, [], []

    def __enter__(self):
        def pre(_m, args, kwargs):
            self.kwargs.append(
                {k: (v.clone() if torch.is_tensor(v) else v) for k, v in kwargs.items()}
            )

        def post(_m, _args, _kwargs, out):
            self.outputs.append(out)

        self.handles = [
            self.module.register_forward_pre_hook(pre, with_kwargs=True),
            self.module.register_forward_hook(post, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


# ---------------------------------------------------------------------------------------------------------------
# folders
# ---------------------------------------------------------------------------------------------------------------


def test_folder_layout_and_configs(folders):
    sd3, cn = folders
    index = json.loads((sd3 / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusion3Pipeline"
    for name, (lib, cls) in tiny_sd3.SD3_MODEL_INDEX_COMPONENTS.items():
        assert index[name] == [lib, cls]
        assert (sd3 / name).is_dir(), name
    for sub, weights in [
        ("transformer", "diffusion_pytorch_model.safetensors"),
        ("vae", "diffusion_pytorch_model.safetensors"),
        ("text_encoder", "model.safetensors"),
        ("text_encoder_2", "model.safetensors"),
        ("text_encoder_3", "model.safetensors"),
    ]:
        assert (sd3 / sub / weights).is_file() and (
            sd3 / sub / "config.json"
        ).is_file(), sub
    for folder in (sd3, cn):
        assert not [
            p for p in folder.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt")
        ]

    sched = json.loads((sd3 / "scheduler" / "scheduler_config.json").read_text())
    assert sched["_class_name"] == "FlowMatchEulerDiscreteScheduler"
    assert (
        sched["shift"],
        sched["num_train_timesteps"],
        sched["use_dynamic_shifting"],
    ) == (3.0, 1000, False)

    vae = json.loads((sd3 / "vae" / "config.json").read_text())
    assert vae["latent_channels"] == 16 and len(vae["block_out_channels"]) == 4
    assert vae["use_quant_conv"] is False and vae["use_post_quant_conv"] is False
    assert (vae["scaling_factor"], vae["shift_factor"]) == (1.5305, 0.0609)

    tr = json.loads((sd3 / "transformer" / "config.json").read_text())
    te = json.loads((sd3 / "text_encoder" / "config.json").read_text())
    te2 = json.loads((sd3 / "text_encoder_2" / "config.json").read_text())
    te3 = json.loads((sd3 / "text_encoder_3" / "config.json").read_text())
    assert (
        tr["num_layers"],
        tr["patch_size"],
        tr["in_channels"],
        tr["out_channels"],
    ) == (24, 2, 16, 16)
    inner = tr["num_attention_heads"] * tr["attention_head_dim"]
    assert tr["caption_projection_dim"] == inner
    # SD3's rules: CLIP L ++ G fits in (and is zero-padded to) the T5 width = joint_attention_dim
    assert (
        te["hidden_size"] + te2["hidden_size"]
        <= te3["d_model"]
        == tr["joint_attention_dim"]
    )
    assert tr["pooled_projection_dim"] == te["projection_dim"] + te2["projection_dim"]
    assert tr["pos_embed_max_size"] >= 256 // 8 // 2
    assert (
        te["architectures"] == te2["architectures"] == ["CLIPTextModelWithProjection"]
    )
    assert (te["hidden_act"], te2["hidden_act"]) == ("quick_gelu", "gelu")
    assert (te3["vocab_size"], te3["feed_forward_proj"]) == (32128, "gated-gelu")

    cfg = json.loads((cn / "config.json").read_text())
    assert cfg["_class_name"] == "SD3ControlNetModel"
    assert sorted(p.name for p in cn.iterdir()) == [
        "config.json",
        "diffusion_pytorch_model.safetensors",
    ]
    assert (cfg["num_layers"], cfg["extra_conditioning_channels"]) == (23, 1)
    for k in (
        "attention_head_dim",
        "num_attention_heads",
        "joint_attention_dim",
        "caption_projection_dim",
        "pooled_projection_dim",
        "patch_size",
        "in_channels",
        "pos_embed_max_size",
        "sample_size",
    ):
        assert cfg[k] == tr[k], k
    from safetensors import safe_open

    with safe_open(
        str(cn / "diffusion_pytorch_model.safetensors"), framework="pt"
    ) as f:
        assert f.get_slice("pos_embed_input.proj.weight").get_shape() == [
            inner,
            17,
            2,
            2,
        ]
        names = list(f.keys())  # safe_open objects are not iterable
    assert (
        sum(k.startswith("controlnet_blocks.") and k.endswith(".weight") for k in names)
        == 23
    )
    assert tiny_sd3.controlnet_extra_channels(cn) == 1


def test_build_is_deterministic_in_seed():
    a = tiny_sd3.build_tiny_sd3_components(seed=0)
    b = tiny_sd3.build_tiny_sd3_components(seed=0)
    c = tiny_sd3.build_tiny_sd3_components(seed=1)
    for name in (
        "transformer",
        "vae",
        "text_encoder",
        "text_encoder_2",
        "text_encoder_3",
    ):
        sa, sb, sc = a[name].state_dict(), b[name].state_dict(), c[name].state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), name
        assert not all(torch.equal(sa[k], sc[k]) for k in sa), name
    ca, _ = tiny_sd3.build_tiny_sd3_controlnet(seed=0)
    cb, _ = tiny_sd3.build_tiny_sd3_controlnet(seed=0)
    sa, sb = ca.state_dict(), cb.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # the caller's global RNG is left alone
    torch.manual_seed(123)
    x = torch.rand(3)
    torch.manual_seed(123)
    tiny_sd3.build_tiny_sd3_controlnet(seed=0)
    assert torch.equal(torch.rand(3), x)


def test_controlnet_zero_initialised_layers_are_filled():
    from diffusers import SD3ControlNetModel

    fresh = SD3ControlNetModel(**tiny_sd3.TINY_SD3_CONTROLNET_CONFIG)
    zero = {n for n, p in fresh.named_parameters() if not torch.any(p != 0)}
    expected = {
        f"controlnet_blocks.{i}.{w}" for i in range(23) for w in ("weight", "bias")
    }
    expected |= {"pos_embed_input.proj.weight", "pos_embed_input.proj.bias"}
    assert zero == expected  # diffusers' zero_module() targets, nothing else
    cn, filled = tiny_sd3.build_tiny_sd3_controlnet(seed=0)
    assert set(filled) == expected
    assert all(torch.any(p != 0) for p in cn.parameters())
    assert cn.pos_embed_input.proj.weight.shape == (tiny_sd3.TINY_INNER_DIM, 17, 2, 2)


def test_components_load_offline(folders, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3ControlNetModel,
        SD3Transformer2DModel,
    )
    from transformers import (
        CLIPTextModelWithProjection,
        CLIPTokenizer,
        T5EncoderModel,
        T5TokenizerFast,
    )

    sd3, cn = folders
    loaded = {
        "transformer": SD3Transformer2DModel.from_pretrained(
            sd3, subfolder="transformer", local_files_only=True
        ),
        "vae": AutoencoderKL.from_pretrained(
            sd3, subfolder="vae", local_files_only=True
        ),
        "text_encoder": CLIPTextModelWithProjection.from_pretrained(
            sd3 / "text_encoder", local_files_only=True
        ),
        "text_encoder_2": CLIPTextModelWithProjection.from_pretrained(
            sd3 / "text_encoder_2", local_files_only=True
        ),
        "text_encoder_3": T5EncoderModel.from_pretrained(
            sd3 / "text_encoder_3", local_files_only=True
        ),
    }
    FlowMatchEulerDiscreteScheduler.from_pretrained(
        sd3, subfolder="scheduler", local_files_only=True
    )
    for name in ("tokenizer", "tokenizer_2"):
        CLIPTokenizer.from_pretrained(sd3 / name, local_files_only=True)
    T5TokenizerFast.from_pretrained(sd3 / "tokenizer_3", local_files_only=True)
    ref = tiny_sd3.build_tiny_sd3_components(seed=0)
    for name, m in loaded.items():
        assert all(p.dtype == torch.float32 for p in m.parameters())
        sd, sr = m.state_dict(), ref[name].state_dict()
        assert all(torch.equal(sd[k], sr[k]) for k in sr), name
    te3 = loaded["text_encoder_3"]
    assert te3.encoder.embed_tokens.weight.data_ptr() == te3.shared.weight.data_ptr()
    c = SD3ControlNetModel.from_pretrained(cn, local_files_only=True)
    cref, _ = tiny_sd3.build_tiny_sd3_controlnet(seed=0)
    assert all(torch.equal(c.state_dict()[k], v) for k, v in cref.state_dict().items())


def test_controlnet_config_without_extra_channels_key(tmp_path):
    """A config.json lacking extra_conditioning_channels: plain from_pretrained fails, the loader infers 1."""
    from diffusers import SD3ControlNetModel

    cn = tiny_sd3.build_tiny_sd3_controlnet_folder(
        tmp_path / "cn", seed=0, config_has_extra_channels=False
    )
    assert "extra_conditioning_channels" not in json.loads(
        (cn / "config.json").read_text()
    )
    with pytest.raises(
        RuntimeError, match="size mismatch for pos_embed_input.proj.weight"
    ):
        SD3ControlNetModel.from_pretrained(cn, local_files_only=True)
    assert tiny_sd3.controlnet_extra_channels(cn) == 1
    m = SD3ControlNetModel.from_pretrained(
        cn,
        local_files_only=True,
        extra_conditioning_channels=tiny_sd3.controlnet_extra_channels(cn),
    )
    assert m.pos_embed_input.proj.weight.shape[1] == 17


def test_pipeline_loads_in_offline_subprocess(folders):
    """HF_HUB_OFFLINE is read when huggingface_hub is imported: check in a fresh interpreter with a dead hub."""
    sd3, cn = folders
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        import tiny_sd3
        pipe = tiny_sd3.load_sd3_inpaint_pipeline({str(sd3)!r}, {str(cn)!r})
        assert type(pipe).__name__ == "StableDiffusion3ControlNetInpaintingPipeline", type(pipe)
        assert type(pipe.controlnet).__name__ == "SD3ControlNetModel"
        assert pipe.tokenizer_max_length == 77 and pipe.tokenizer_2.pad_token_id == 0
        print("OK")
        """
    )
    assert "OK" in run_offline(code)


def test_tokenizers_padding_and_bang(pipe):
    tok, tok2, tok3 = pipe.tokenizer, pipe.tokenizer_2, pipe.tokenizer_3
    assert (
        len(tok) == len(tok2) == 49408
        and tok.model_max_length == tok2.model_max_length == 77
    )
    kw = {"padding": "max_length", "max_length": 77, "truncation": True}
    ids = tok(PROMPT, **kw).input_ids
    ids2 = tok2(PROMPT, **kw).input_ids
    assert ids[:7] == ids2[:7] == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert set(ids[7:]) == {49407} and set(ids2[7:]) == {
        0
    }  # CLIP-L pads with EOS, CLIP-G with "!" = 0
    # "!" is a special token of tokenizer_2 only
    assert tok("a cat!").input_ids == [49406, 320, 2368, 256, 49407]
    assert tok2("a cat!").input_ids == [49406, 320, 2368, 0, 49407]
    ids3 = tok3(PROMPT, padding="max_length", max_length=256, truncation=True).input_ids
    assert (
        len(ids3) == 256
        and ids3[:8] == [3, 9, 1202, 13, 3, 9, 1712, 1]
        and set(ids3[8:]) == {0}
    )


def test_encode_prompt_joint_context_rules(pipe):
    with torch.no_grad():
        pe, npe, pooled, npooled = pipe.encode_prompt(
            PROMPT,
            None,
            None,
            do_classifier_free_guidance=True,
            negative_prompt=NEG,
            max_sequence_length=256,
        )
        assert pe.shape == npe.shape == (
            1,
            77 + 256,
            96,
        ) and pooled.shape == npooled.shape == (1, 80)

        def clip(te, tokzr, text):
            ids = tokzr(
                text,
                padding="max_length",
                max_length=77,
                truncation=True,
                return_tensors="pt",
            ).input_ids
            out = te(ids, output_hidden_states=True)
            assert len(out.hidden_states) == te.config.num_hidden_layers + 1
            return out.hidden_states[-2], out.text_embeds

        def t5(text):
            ids = pipe.tokenizer_3(
                text,
                padding="max_length",
                max_length=256,
                truncation=True,
                return_tensors="pt",
            ).input_ids
            return pipe.text_encoder_3(ids)[0]

        for text, emb, pool in [(PROMPT, pe, pooled), (NEG, npe, npooled)]:
            l_seq, l_pool = clip(pipe.text_encoder, pipe.tokenizer, text)
            g_seq, g_pool = clip(pipe.text_encoder_2, pipe.tokenizer_2, text)
            assert torch.equal(emb[:, :77, :32], l_seq) and torch.equal(
                emb[:, :77, 32:80], g_seq
            )
            assert torch.equal(
                emb[:, :77, 80:], torch.zeros(1, 77, 16)
            )  # zero-padded to the T5 width
            assert torch.equal(emb[:, 77:], t5(text))
            assert torch.equal(pool, torch.cat([l_pool, g_pool], dim=-1))
        # the default negative prompt is "" encoded, not zeros
        _, e_neg, _, e_pool = pipe.encode_prompt(
            PROMPT, None, None, do_classifier_free_guidance=True
        )
        assert e_neg.abs().max() > 0 and e_pool.abs().max() > 0
        assert torch.equal(e_neg[:, 77:], t5(""))


# ---------------------------------------------------------------------------------------------------------------
# reference run
# ---------------------------------------------------------------------------------------------------------------


def test_run_from_folders_shape_and_argmax_bit_identical(folders, inputs):
    sd3, cn = folders
    image, mask = inputs
    kw = {
        "height": H,
        "width": W,
        "steps": 2,
        "guidance_scale": 7.0,
        "controlnet_conditioning_scale": 0.95,
        "seed": 3,
    }
    a = tiny_sd3.run_diffusers_sd3_inpaint(sd3, cn, image, mask, PROMPT, NEG, **kw)
    b = tiny_sd3.run_diffusers_sd3_inpaint(sd3, cn, image, mask, PROMPT, NEG, **kw)
    assert a.shape == (1, 3, H, W) and a.dtype == torch.float32
    assert torch.isfinite(a).all() and a.min() >= 0 and a.max() <= 1
    assert a.std() > 1e-2
    assert torch.equal(a, b)  # argmax (default): bit-identical


def test_sensitivity_to_seed_prompt_controlnet_and_image(pipe, inputs):
    from PIL import Image

    def lat(inp=inputs, **kw):
        return _run(pipe, inp, steps=1, output_type="latent", **kw)

    a = lat()
    assert torch.equal(a, lat())
    assert (lat(seed=8) - a).abs().max() > 1e-3
    assert (lat(prompt="a red car") - a).abs().max() > 1e-4
    assert (lat(negative_prompt="") - a).abs().max() > 1e-4
    assert (lat(controlnet_conditioning_scale=0.0) - a).abs().max() > 1e-3
    image, mask = inputs
    flipped = Image.fromarray(np.asarray(image)[:, ::-1].copy())
    assert (lat((flipped, mask)) - a).abs().max() > 1e-4


def test_sample_mode_draws_from_global_rng_not_generator(pipe, inputs):
    """Stock mode: the masked-image encode samples from the GLOBAL RNG; the generator only draws the noise."""

    def lat(mode, global_seed):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(global_seed)
            return _run(pipe, inputs, steps=1, output_type="latent", encode_mode=mode)

    s1, s2, s3 = lat("sample", 11), lat("sample", 11), lat("sample", 12)
    assert torch.equal(s1, s2)
    assert (
        (s1 - s3).abs().max() > 1e-4
    )  # same generator seed, different global RNG -> different output
    a1, a2 = lat("argmax", 11), lat("argmax", 12)
    assert (
        torch.equal(a1, a2) and (s1 - a1).abs().max() > 1e-4
    )  # the patch really changes the encode
    # ... and in both modes the noise is the generator's first draw
    noise = tiny_sd3.initial_noise(7, H, W)
    assert noise.shape == (1, 16, 6, 8)
    for mode in ("sample", "argmax"):
        with _Calls(pipe.transformer) as calls:
            lat(mode, 0)
        assert torch.equal(calls.kwargs[0]["hidden_states"], torch.cat([noise] * 2)), (
            mode
        )


def test_argmax_patch_is_scoped_and_used(pipe, inputs):
    assert "encode" not in pipe.vae.__dict__
    image, mask = inputs
    with tiny_sd3.argmax_vae_encode(pipe) as stats:
        assert "encode" in pipe.vae.__dict__
        pipe(
            prompt=PROMPT,
            control_image=image,
            control_mask=mask,
            height=H,
            width=W,
            num_inference_steps=1,
            generator=torch.Generator().manual_seed(0),
            output_type="latent",
        )
    assert "encode" not in pipe.vae.__dict__
    assert stats == {
        "encodes": 1,
        "samples": 1,
    }  # only the masked control image is encoded
    with pytest.raises(RuntimeError, match="boom"), tiny_sd3.argmax_vae_encode(pipe):
        raise RuntimeError("boom")
    assert "encode" not in pipe.vae.__dict__


def test_control_image_rules(pipe, inputs):
    """-1 in masked pixels (binarised at 0.5), argmax encode, (z - 0.0609) * 1.5305, nearest (top-left) mask
    downsample, 1 - mask, cat, duplicated under CFG."""
    image, mask = inputs
    with _Calls(pipe.controlnet) as calls:
        _run(pipe, inputs, steps=1, output_type="latent")
    cond = calls.kwargs[0]["controlnet_cond"]
    assert cond.shape == (2, 17, H // 8, W // 8) and torch.equal(cond[0], cond[1])

    m = torch.from_numpy(np.asarray(mask).astype(np.float32) / 255.0)[None, None]
    mb = (m >= 0.5).float()
    assert mb[0, 0, 0, 0] == 0 and mb[0, 0, 47, 63] == 1  # 100 -> keep, 200 -> repaint
    x = torch.from_numpy(np.asarray(image).astype(np.float32)[None] / 255.0).permute(
        0, 3, 1, 2
    )
    # the pipeline's repeat_interleave (P:849) makes the channels_last-strided PIL tensor contiguous NCHW
    x = (2.0 * x - 1.0).repeat_interleave(1, dim=0)
    assert x.is_contiguous()
    masked = x.clone()
    masked[(mb > 0.5).repeat(1, 3, 1, 1)] = -1
    assert masked.min() == -1 and (masked == -1).sum() >= 3 * mb.sum()
    with torch.no_grad():
        z = pipe.vae.encode(masked).latent_dist.mode()
    z = (z - 0.0609) * 1.5305
    assert torch.equal(cond[:1, :16], z)  # bit for bit

    keep = 1 - mb[..., ::8, ::8]  # nearest = top-left pixel of each 8x8 block
    assert torch.equal(
        torch.nn.functional.interpolate(mb, size=(H // 8, W // 8)), mb[..., ::8, ::8]
    )
    assert torch.equal(cond[:1, 16:], keep)
    # block (2, 2) covers rows 16..23, cols 16..23: cols 20..23 are masked but its top-left pixel is not -> keep
    assert mb[0, 0, 16:24, 20:24].all() and cond[0, 16, 2, 2] == 1
    assert cond[0, 16, 3, 3] == 0  # fully inside the hole: 0 = repaint


def test_sigmas_timesteps_and_controlnet_call(pipe, inputs):
    s28 = tiny_sd3.sd3_sigmas(28)
    pipe.scheduler.set_timesteps(28)
    assert torch.equal(s28, pipe.scheduler.sigmas)
    assert s28[:5].tolist() == pytest.approx(
        [1.0, 0.98738062, 0.97410774, 0.96012932, 0.94538748], abs=1e-7
    )
    assert s28[-3:].tolist() == pytest.approx([0.11090573, 0.0089285718, 0.0], abs=1e-7)
    # the lower end is shift(shift(0.001)), i.e. the shift hits sigma_min twice
    sh = lambda s: 3 * s / (1 + 2 * s)
    assert s28[-2].item() == pytest.approx(sh(sh(0.001)), rel=1e-6)
    assert pipe.scheduler.sigma_min == pytest.approx(sh(0.001), rel=1e-6)

    with _Calls(pipe.transformer) as tr, _Calls(pipe.controlnet) as cn:
        _run(pipe, inputs, steps=2, output_type="latent", control_guidance_end=0.5)
    assert torch.equal(tiny_sd3.sd3_sigmas(2), pipe.scheduler.sigmas)
    assert torch.equal(tiny_sd3.sd3_sigmas(2), torch.tensor([1.0, 0.0089285718, 0.0]))
    for i, (tk, ck) in enumerate(zip(tr.kwargs, cn.kwargs)):
        t = pipe.scheduler.sigmas[i] * 1000
        assert torch.equal(tk["timestep"], t.expand(2)) and torch.equal(
            ck["timestep"], t.expand(2)
        )
        assert torch.equal(ck["hidden_states"], tk["hidden_states"])
        assert torch.equal(ck["encoder_hidden_states"], tk["encoder_hidden_states"])
        assert tk["encoder_hidden_states"].shape == (2, 333, 96)
        assert torch.equal(
            ck["pooled_projections"], torch.zeros(2, 80)
        )  # ControlNet pooled input: zeros
        assert tk["pooled_projections"].abs().max() > 0
        res = tk["block_controlnet_hidden_states"]
        assert len(res) == 23 and all(
            r.shape == (2, 12, tiny_sd3.TINY_INNER_DIM) for r in res
        )
    assert [
        tr.kwargs[0]["timestep"][0].item(),
        tr.kwargs[1]["timestep"][0].item(),
    ] == pytest.approx([1000.0, 8.9285717], abs=1e-4)
    # keep rule with end 0.5 over 2 steps: step 0 kept (1/2 > 0.5 is false), step 1 dropped (2/2 > 0.5)
    assert [k["conditioning_scale"] for k in cn.kwargs] == [0.95, 0.0]
    assert all(
        r.abs().max() > 0 for r in tr.kwargs[0]["block_controlnet_hidden_states"]
    )
    assert all(
        torch.equal(r, torch.zeros_like(r))
        for r in tr.kwargs[1]["block_controlnet_hidden_states"]
    )


def test_cfg_euler_step_and_output_decode(pipe, inputs):
    g = 7.0
    with _Calls(pipe.transformer) as tr:
        lat = _run(pipe, inputs, steps=2, guidance_scale=g, output_type="latent")
    img = _run(pipe, inputs, steps=2, guidance_scale=g, output_type="pt")
    sig = pipe.scheduler.sigmas
    xs = [k["hidden_states"][:1] for k in tr.kwargs] + [lat]
    for i in range(2):
        out = tr.outputs[i][0]
        uncond, text = out.chunk(2)  # batch order [negative, positive]
        pred = uncond + g * (text - uncond)
        assert torch.equal(xs[i + 1], xs[i] + (sig[i + 1] - sig[i]) * pred)
    assert lat.shape == (1, 16, H // 8, W // 8)
    with torch.no_grad():
        dec = pipe.vae.decode(lat / 1.5305 + 0.0609, return_dict=False)[0]
    assert torch.equal((dec * 0.5 + 0.5).clamp(0, 1), img)


def test_controlnet_residual_mapping_in_installed_diffusers(pipe):
    """Feed 23 distinct constant residuals (residual k = k + 1 everywhere) and read, with forward hooks, which one
    is added after each of the 24 blocks: block output -> next block's (or norm_out's) input."""
    tr = pipe.transformer
    blocks = tr.transformer_blocks
    assert len(blocks) == 24 and [b.context_pre_only for b in blocks] == [
        False
    ] * 23 + [True]
    n_tok, inner = 16, tiny_sd3.TINY_INNER_DIM  # 8x8 latent, patch 2
    residuals = [torch.full((1, n_tok, inner), float(k + 1)) for k in range(23)]

    def run(skip_layers=None):
        outs, ins = {}, {}
        handles = []
        for i, b in enumerate(blocks):
            handles.append(
                b.register_forward_pre_hook(
                    lambda _m, a, kw, i=i: ins.__setitem__(
                        i, kw["hidden_states"].clone()
                    ),
                    with_kwargs=True,
                )
            )
            handles.append(
                b.register_forward_hook(
                    lambda _m, a, o, i=i: outs.__setitem__(i, o[1].clone())
                )
            )
        handles.append(
            tr.norm_out.register_forward_pre_hook(
                lambda _m, a: ins.__setitem__(24, a[0].clone())
            )
        )
        g = torch.Generator().manual_seed(0)
        try:
            with torch.no_grad():
                tr(
                    hidden_states=torch.randn(1, 16, 8, 8, generator=g),
                    encoder_hidden_states=torch.randn(1, 5, 96, generator=g),
                    pooled_projections=torch.randn(1, 80, generator=g),
                    timestep=torch.tensor([500.0]),
                    block_controlnet_hidden_states=residuals,
                    skip_layers=skip_layers,
                    return_dict=False,
                )
        finally:
            for h in handles:
                h.remove()
        return outs, ins

    def added(before, after):
        d = after - before
        v = d.mean().item()
        assert (d - v).abs().max() < 1e-3  # a constant was added
        return v

    outs, ins = run()
    mapping = []
    for i in range(24):
        v = added(outs[i], ins[i + 1])
        mapping.append(None if abs(v) < 0.5 else round(v) - 1)
    expected = [int(i / (24 / 23)) for i in range(23)] + [None]
    assert mapping == expected
    assert mapping == [tiny_sd3.diffusers_residual_index(i) for i in range(24)]
    assert mapping[:4] == [0, 0, 1, 2] and mapping[22:] == [21, None]
    counts = Counter(m for m in mapping if m is not None)
    assert (
        counts[0] == 2 and counts[22] == 0 and all(counts[k] == 1 for k in range(1, 22))
    )
    assert mapping != list(range(23)) + [
        None
    ]  # NOT ComfyUI's / diffusers <= 0.31's block i <- residual i

    # a block listed in skip_layers is not run but still gets its residual
    outs, ins = run(skip_layers=[5])
    assert 5 not in outs and 5 not in ins
    assert round(added(outs[4], ins[6])) == (mapping[4] + 1) + (mapping[5] + 1)
