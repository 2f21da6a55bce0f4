"""Tiny FLUX.1 Fill reference for tests: a deterministic diffusers-format folder plus diffusers' own pipeline.

A plain test utility (no pytest fixtures) on top of ``tiny_models`` (tokenizer files, seeded construction, folder
writing, shared by every family). What is FLUX's own:

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
from pathlib import Path
from typing import Any

import torch
from tiny_models import (
    CLIP_VOCAB_SIZE,  # noqa: F401  (tests read tiny_flux.CLIP_VOCAB_SIZE)
    TINY_CLIP_CONFIG,
    TINY_T5_CONFIG,
    TINY_VAE_BASE_CONFIG,
    build_components,
    cached_folder_builder,
    call_pipeline,
    check_run_modes,
    first_randn,
    load_kwargs,
    quiet_on_cpu,
    save_pipeline_folder,
    swapped,
    write_clip_tokenizer,
    write_t5_tokenizer,
)

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

# Tiny configs: real geometry, toy widths. CLIP-L and T5 are tiny_models' base configs as they are.
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

TINY_VAE_CONFIG: dict[str, Any] = {**TINY_VAE_BASE_CONFIG, "scaling_factor": 0.3611, "shift_factor": 0.1159}

# A Fill model of other widths than the published ones (FluxFillPipeline takes them from the configs too): an
# 8-channel VAE with 3 levels (1/4), so noisy 8 x 4 = 32 ++ condition 32 + mask 4 x 4 x 4 = 64 -> in_channels 128,
# out_channels 32.
NARROW_LATENT_CHANNELS, NARROW_VAE_LEVELS = 8, 3


def narrow_configs() -> tuple[dict[str, Any], dict[str, Any]]:
    """(transformer, VAE) configs of the narrow Fill model."""
    levels, c = NARROW_VAE_LEVELS, NARROW_LATENT_CHANNELS
    vae = {**TINY_VAE_CONFIG, "latent_channels": c, "down_block_types": TINY_VAE_CONFIG["down_block_types"][:levels],
           "up_block_types": TINY_VAE_CONFIG["up_block_types"][:levels],
           "block_out_channels": TINY_VAE_CONFIG["block_out_channels"][:levels]}
    scale = 2 ** (levels - 1)
    transformer = {**TINY_TRANSFORMER_CONFIG, "in_channels": 2 * c * 4 + 4 * scale * scale, "out_channels": c * 4}
    return transformer, vae

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

T5_MAX_LENGTH = 512


# ----------------------------------------------------------------------------------------------------------------
# Tiny models
# ----------------------------------------------------------------------------------------------------------------


def build_tiny_components(seed: int = 0, *, narrow: bool = False) -> dict[str, Any]:
    """Build the tiny fp32 model components in memory (no tokenizers). Deterministic in ``seed``: each component
    is built under its own seed (``seed * 16 + k``, see ``tiny_models.build_components``). ``narrow``: the
    transformer and VAE of ``narrow_configs()``."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    transformer, vae = narrow_configs() if narrow else (TINY_TRANSFORMER_CONFIG, TINY_VAE_CONFIG)
    return build_components(
        seed,
        {
            "transformer": (1, lambda: FluxTransformer2DModel(**transformer)),
            "vae": (3, lambda: AutoencoderKL(**vae)),
            "text_encoder": (4, lambda: CLIPTextModel(CLIPTextConfig(**TINY_CLIP_CONFIG))),
            "text_encoder_2": (5, lambda: T5EncoderModel(T5Config(**TINY_T5_CONFIG))),
        },
        FlowMatchEulerDiscreteScheduler(**FLUX_FILL_SCHEDULER_CONFIG),
    )


@cached_folder_builder
def build_tiny_flux_fill_folder(dst: Path, seed: int = 0, *, narrow: bool = False) -> Path:
    """Save a complete diffusers-format FLUX.1 Fill folder with tiny random fp32 weights to ``dst``.

    Layout (as black-forest-labs/FLUX.1-Fill-dev): model_index.json, scheduler/, text_encoder/ (CLIPTextModel),
    text_encoder_2/ (T5EncoderModel), tokenizer/ (CLIP BPE: vocab.json, merges.txt, configs, max length 77),
    tokenizer_2/ (T5 tokenizer.json + configs), transformer/, vae/. Weights as safetensors only. Same ``seed``
    gives identical weights. Loads back with ``from_pretrained(dst, local_files_only=True)`` / HF_HUB_OFFLINE=1.
    ``narrow``: other widths than the published ones (``narrow_configs``). Returns ``dst``.

    Built once per process and arguments, then copied to ``dst`` (``tiny_models.cached_folder_builder``).
    """
    return save_pipeline_folder(
        dst,
        build_tiny_components(seed, narrow=narrow),
        class_name="FluxFillPipeline",
        index_components=MODEL_INDEX_COMPONENTS,
        tokenizers={"tokenizer": write_clip_tokenizer, "tokenizer_2": write_t5_tokenizer},
    )


# ----------------------------------------------------------------------------------------------------------------
# Reference run through diffusers' own FluxFillPipeline
# ----------------------------------------------------------------------------------------------------------------


def load_fill_pipeline(folder: Path):
    """``FluxFillPipeline.from_pretrained(folder, dtype=float32, local_files_only=True)`` on CPU."""
    from diffusers import FluxFillPipeline

    return quiet_on_cpu(FluxFillPipeline.from_pretrained(str(folder), **load_kwargs()))


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

    with swapped(pff, "retrieve_latents", _argmax_retrieve_latents):
        yield stats


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
    max_sequence_length: int = T5_MAX_LENGTH,
    pipe: Any = None,
) -> torch.Tensor:
    """Run diffusers' own FluxFillPipeline on CPU in fp32 and return its output tensor.

    ``image``/``mask``: anything the pipeline accepts (PIL images, [0,1] NCHW tensors, ...). ``latents``: packed
    initial latents [B, N, 64] (skips the image encode and the noise draw). ``encode_mode``: "argmax" (VAE encodes
    use the distribution mean; the generator then only draws the noise) or "sample" (stock diffusers).
    ``output_type``: "pt" -> image [B, 3, H, W] in [0, 1]; "latent" -> packed latents [B, N, 64].
    ``pipe``: an already loaded pipeline (from ``load_fill_pipeline``) to skip loading; else ``folder`` is loaded.
    """
    check_run_modes(encode_mode, output_type)
    if pipe is None:
        pipe = load_fill_pipeline(folder)
    return call_pipeline(
        pipe,
        argmax_vae_encode() if encode_mode == "argmax" else None,
        used="calls",
        inert="FluxFillPipeline no longer calls pipeline_flux_fill.retrieve_latents",
        seed=seed,
        prompt=prompt, image=image, mask_image=mask, height=height, width=width, strength=strength,
        num_inference_steps=steps, guidance_scale=guidance_scale, latents=latents, output_type=output_type,
        max_sequence_length=max_sequence_length,
    )  # fmt: skip


def pack_latents(x: torch.Tensor) -> torch.Tensor:
    """[B, C, h, w] -> [B, (h/2)*(w/2), 4C], identical to FluxFillPipeline._pack_latents."""
    b, c, h, w = x.shape
    return x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), c * 4)


def initial_noise(seed: int, height: int, width: int, batch: int = 1) -> torch.Tensor:
    """The unpacked noise FluxFillPipeline draws first when VAE encodes do not consume the generator:
    ``randn((B, 16, 2*(H//16), 2*(W//16)), generator=Generator('cpu').manual_seed(seed))`` in float32 on CPU."""
    return first_randn(seed, (batch, 16, 2 * (int(height) // 16), 2 * (int(width) // 16)))


def tiny_flux_fill_job(d: Path, *, steps: int) -> dict:
    """A batch job line (docs/batches.md) on a tiny FLUX.1 Fill folder built in `d`, with a 96x64 random image and a
    rectangular mask written there (absolute paths): what the compare tests run two ways."""
    import numpy as np
    from PIL import Image

    folder = build_tiny_flux_fill_folder(d / "flux", seed=0)
    rng = np.random.default_rng(0)
    Image.fromarray((rng.random((64, 96, 3)) * 255).astype(np.uint8)).save(d / "img.png")
    m = np.zeros((64, 96), np.uint8)
    m[16:48, 24:72] = 255
    Image.fromarray(m).save(d / "mask.png")
    return {"family": "flux-fill", "models": str(folder), "image": str(d / "img.png"), "mask": str(d / "mask.png"),
            "prompt": "a red brick fireplace", "seed": 1, "steps": steps, "dtype": "fp32"}
