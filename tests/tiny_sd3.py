"""Tiny SD3 + SD3 ControlNet inpainting reference for tests: deterministic diffusers-format folders plus diffusers'
own ``StableDiffusion3ControlNetInpaintingPipeline``.

A plain test utility (no pytest fixtures) on top of ``tiny_models`` (tokenizer files, the tiny VAE / CLIP / T5 base
configs, seeded construction, folder writing, shared by every family). What is SD3's own:

* ``build_tiny_sd3_folder(dst, seed)``: a complete stabilityai/stable-diffusion-3-medium-diffusers layout with tiny
  random fp32 weights that keep SD3's real rules: 24 MMDiT blocks (the last one ``context_pre_only``), 16 latent
  channels, 8x VAE with scale 1.5305 / shift 0.0609, patch 2, CLIP-L (32) ++ CLIP-G (48) zero-padded to the T5
  width (96) = joint_attention_dim, pooled = L proj ++ G proj (80), T5 sequence 256, and the REAL CLIP / T5
  tokenizers from ComfyUI (tokenizer_2 padding with "!" = id 0 like SD3's);
* ``build_tiny_sd3_controlnet_folder(dst, seed)``: the alimama-creative/SD3-Controlnet-Inpainting layout (one model
  folder) with the same dims, 23 blocks, ``extra_conditioning_channels`` 1 and its zero-initialised layers filled;
* ``load_sd3_inpaint_pipeline(...)`` / ``run_diffusers_sd3_inpaint(...)``: diffusers' pipeline on CPU in fp32 as
  the reference an engine must reproduce, optionally with a deterministic VAE encode (distribution mean);
* small helpers an engine test can compare against: ``initial_noise``, ``sd3_sigmas``,
  ``diffusers_residual_index``, ``argmax_vae_encode``.

Conventions of diffusers 0.42.1 ``StableDiffusion3ControlNetInpaintingPipeline`` (what an engine must match)
=========================================================================================================
Line numbers: P = ``diffusers/pipelines/controlnet_sd3/pipeline_stable_diffusion_3_controlnet_inpainting.py``,
CN = ``diffusers/models/controlnets/controlnet_sd3.py``, TR = ``diffusers/models/transformers/transformer_sd3.py``,
AT = ``diffusers/models/attention.py``, EMB = ``diffusers/models/embeddings.py``, IP = ``diffusers/image_processor.py``,
S = ``diffusers/schedulers/scheduling_flow_match_euler_discrete.py``, TU = ``diffusers/utils/torch_utils.py``,
V = ``diffusers/models/autoencoders/vae.py`` (all diffusers 0.42.1),
CLIP = ``transformers/models/clip/modeling_clip.py`` (transformers 5.24). Below ``vsf`` =
``2 ** (len(vae.block_out_channels) - 1)`` = 8 (P:250), H/W = requested height/width (multiples of
``vsf * patch_size`` = 16, else ValueError, P:641-648), ``h = H // 8``, ``w = W // 8``, ``N = (h/2) * (w/2)`` image
tokens, B = batch (prompts x images per prompt).

Text (P:274-328, P:331-384, P:387-578)
  * CLIP-L (tokenizer/text_encoder) and CLIP-G (tokenizer_2/text_encoder_2), same code (P:331-384):
    ``tokenizer(prompt, padding="max_length", max_length=tokenizer_max_length, truncation=True)`` (P:350-356) where
    ``tokenizer_max_length = tokenizer.model_max_length`` of the FIRST tokenizer (P:261-263; ComfyUI's file says
    8192, the tiny folder writes 77). ``text_encoder(ids, output_hidden_states=True)`` with no attention mask
    (P:366). Sequence output = ``hidden_states[-2]`` (P:370): the output of the second-to-last encoder layer, NOT
    passed through ``final_layer_norm`` (``hidden_states`` has num_layers + 1 entries, [0] = embeddings).
    ``clip_skip=k`` picks ``hidden_states[-(k + 2)]`` (P:372) for the positive prompt only; negatives always use
    [-2] (P:539, P:546). Pooled = ``output[0]`` = ``text_embeds`` (P:367) = ``text_projection`` (no bias) of
    ``final_layer_norm(last layer)`` at the EOS position (CLIP:551-570, CLIP:877-878): the first position whose id
    equals ``config.eos_token_id`` (49407), or, for a legacy config with eos_token_id 2, ``argmax(input_ids)``,
    which is the same position for tokenizer output (49407 is the largest id and argmax returns the first max).
  * Padding ids: tokenizer pads with 49407 (<|endoftext|>); SD3's tokenizer_2 pads with "!" = id 0. The real
    stabilityai repo is gated and could not be read here; a third-party copy of SD3's OpenCLIP-G tokenizer config
    (pad_token "!", "!" as special added token 0, model_max_length 77) and ComfyUI's ``SDXLClipGTokenizer``
    (``pad_with_end=False`` -> pad id 0, comfy/sdxl_clip.py:21, comfy/sd1_clip.py:503-508) agree, and it is
    the SDXL tokenizer_2 convention. It matters: CLIP attention is causal, so positions after EOS depend on the pad
    id and all 77 positions enter the joint context. The tiny folder replicates it. Side effect, also replicated:
    because "!" is a special token of tokenizer_2, a literal "!" in the prompt becomes id 0 for CLIP-G
    ("a cat!" -> [49406, 320, 2368, 0, 49407]) but "!</w>" = 256 for CLIP-L and for ComfyUI's clip_g tokenizer.
  * T5 (tokenizer_3/text_encoder_3, P:274-328): ``tokenizer_3(prompt, padding="max_length",
    max_length=max_sequence_length (256), truncation=True, add_special_tokens=True)`` (P:299-306),
    ``text_encoder_3(ids)[0]`` = last_hidden_state, NO attention mask (pads attended) (P:317). max_sequence_length
    > 512 is a ValueError (P:717-718). Without text_encoder_3 the T5 part is zeros (P:288-297).
  * Joint context (P:493-507): ``clip = cat([L_seq (B,77,768), G_seq (B,77,1280)], -1)`` (B,77,2048) (P:493),
    zero-padded on the RIGHT of the channel axis to the T5 width 4096 (P:502-504), then
    ``prompt_embeds = cat([clip, t5], dim=-2)`` -> [B, 77 + 256, 4096] (P:506). Pooled
    ``= cat([L_pooled 768, G_pooled 1280], -1)`` -> [B, 2048] (P:507). Tiny: L 32 + G 48 = 80 padded to 96,
    context [B, 333, 96], pooled [B, 80].
  * prompt_2 / prompt_3 default to prompt (P:473-477).

Negative prompt and CFG batching (P:509-566, P:1225-1227)
  * CFG is on iff ``guidance_scale > 1`` (P:892-894). The negative prompt defaults to "" (P:510) and is ENCODED
    exactly like the prompt (not zeros). Batch order is ``[negative, positive]`` for prompt_embeds and pooled
    (P:1226-1227); latents and the control image are duplicated ``cat([x] * 2)`` in the same order (P:1330,
    P:877).
  * CFG formula: ``uncond, text = noise_pred.chunk(2)``; ``noise_pred = uncond + g * (text - uncond)`` (P:1366-1367).

Control image: masked image latents + inverted mask (P:822-879, P:1230-1246)
  * PIL image: resized to (W, H) with LANCZOS (IP:497-501; a copy when the size already matches), THEN converted
    to RGB (``do_convert_rgb=True`` P:252, IP:691-692, IP:250: an RGBA image loses alpha with no compositing),
    ``np.float32 / 255`` (IP:167), NCHW (IP:188: a channels_last-strided view), ``2x - 1`` (IP:220); unlike
    FluxFillPipeline, ``repeat_interleave`` (P:849) then makes it CONTIGUOUS NCHW, which is what the VAE encodes
    (matters for bit-exactness: the two layouts differ by ~2e-5 in the tiny latents on CPU).
  * PIL mask: resized to (W, H) with LANCZOS in its own mode, then ``convert("L")`` (IP:693-694, IP:267), ``/ 255``,
    never normalised, binarised ``< 0.5 -> 0``, ``>= 0.5 -> 1`` (IP:536-537). White = repaint.
  * TENSOR inputs are passed through untouched (P:835-836, P:854-855): no resize, no [0,1] -> [-1,1] (a tensor
    image must ALREADY be in [-1, 1], despite the docstring's "[0, 1]"), no binarisation of the mask. Height and
    width are then re-derived from the control latents (P:1243-1246), so a tensor of another size silently wins
    over ``height``/``width``.
  * ``masked_image = image.clone(); masked_image[(mask > 0.5).repeat(1, 3, 1, 1)] = -1`` (P:862-863): masked pixels
    become -1 (black) in [-1, 1]; the selector is the STRICT ``> 0.5`` on the (binarised, for PIL) mask.
  * ``vae.encode(masked_image).latent_dist.sample()`` (P:866) -- a direct call, not ``retrieve_latents``, and with
    NO generator: ``mean + std * randn`` from the GLOBAL torch RNG (V:703-711; logvar clamped to [-30, 20] at
    V:694), so the stock pipeline is nondeterministic for a fixed ``generator``. encode_mode="argmax" makes this
    ``latent_dist.mode()`` = mean (see below). Then ``(z - 0.0609) * 1.5305`` (P:867), cast to the transformer dtype.
  * mask to the latent grid: ``F.interpolate(mask, size=(H // 8, W // 8))`` = mode "nearest" (P:870-872): for an
    exact 8x reduction this picks the TOP-LEFT pixel ``mask[..., 8i, 8j]`` of each 8x8 block (no averaging, no
    max). Then ``mask = 1 - mask`` (P:873): the 17th channel is 1 = keep, 0 = hole (repaint).
  * ``control_image = cat([latents 16, mask 1], dim=1)`` -> [B, 17, h, w] (P:874), duplicated under CFG (P:876-877).

Noise, generator and the order of random draws (P:791-820, P:1288-1297, TU:85-110)
  * In call order: (1) text encoding (no randomness); (2) the control-image VAE encode: in stock "sample" mode it
    draws ``randn(B, 16, h, w)`` from the GLOBAL RNG (not the generator); in "argmax" mode nothing; (3)
    ``prepare_latents``: ``randn_tensor((B, 16, h, w), generator, device, dtype=prompt_embeds.dtype)`` (P:805-818):
    the FIRST and ONLY draw from ``generator`` in both modes (with a CPU generator it is drawn on the CPU, NCHW,
    and moved, TU:85-110; a list of generators draws [1, 16, h, w] each). So the noise is exactly
    ``torch.randn((B, 16, H//8, W//8), generator=torch.Generator("cpu").manual_seed(seed))`` = ``initial_noise``.
    The scheduler's Euler step draws nothing (``stochastic_sampling`` false).
  * The initial latents ARE that noise (sigma_max = 1.0 exactly; there is no strength / image noising: the image
    enters only through the ControlNet). A given ``latents`` is used as-is and skips the draw (P:802-803).

Sigmas and timesteps for SD3 (scheduler ``shift`` 3.0, no dynamic shifting; S:127-144, S:340-391)
  * ``__init__`` already shifts its 1000-entry table: ``sigma = 3 s / (1 + 2 s)`` for ``s = (1..1000)/1000`` in
    float32 (S:127-133), so ``sigma_max = 1.0`` and ``sigma_min = 3 * 0.001 / 1.002 = 0.0029940121`` (S:143-144).
  * ``set_timesteps(steps)`` builds ``t = np.linspace(sigma_max * 1000, sigma_min * 1000, steps) / 1000`` (float64,
    S:341-347) BETWEEN THOSE ALREADY-SHIFTED ENDPOINTS and shifts AGAIN: ``sigma = 3 t / (1 + 2 t)`` (S:357), cast
    to float32 (S:372), then appends 0.0 (S:386). So each sigma is shift(grid) once, but the grid's lower end was
    already shifted: the last non-zero sigma is shift(shift(0.001)) = 0.0089285718, not 0.0029940.
  * 28 steps: sigmas = 1.0, 0.98738062, 0.97410774, 0.96012932, 0.94538748, ..., 0.19982699, 0.11090573,
    0.0089285718, 0.0. 2 steps: [1.0, 0.0089285718, 0.0]. ``sd3_sigmas(steps)`` reproduces them bit for bit.
  * ``timesteps = sigmas[:-1] * 1000`` in float32 (S:376): 1000.0, 987.38062, 974.10773, ... (2 steps: 1000.0,
    8.9285717). The transformer AND the ControlNet receive ``timestep = t.expand(batch)`` in 0..1000 (P:1332),
    embedded as-is by ``Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)`` (EMB:1354; no / 1000, no
    x 1000), plus ``text_embedder(pooled)`` (EMB:1358-1366).
  * Euler step: ``prev = float32(sample) + (sigma_next - sigma) * noise_pred`` (S:493, S:507-520), cast back to
    the model output dtype (S:526).

ControlNet call (P:1270-1273, P:1299-1352, CN:312-374)
  * ``controlnet(hidden_states=latent_model_input [2B,16,h,w], timestep, encoder_hidden_states=prompt_embeds
    [2B, 333, 4096] (the full CFG-batched joint context), pooled_projections=zeros_like(pooled) [2B, 2048],
    controlnet_cond=control_image [2B, 17, h, w], conditioning_scale=cond_scale)``. The pooled input is ZEROS
    (P:1270-1271); passing ``controlnet_pooled_projections`` as a tensor raises (``tensor or tensor``, P:1273).
    The config's ``force_zeros_for_pooled_projection`` is not read by this pipeline.
  * Keep rule (P:1300-1306): ``keep[i] = 1.0 - float(i / n < start or (i + 1) / n > end)`` for step i of n;
    ``cond_scale = controlnet_conditioning_scale * keep[i]`` (P:1334-1340). With end < 1 the ControlNet still
    RUNS on dropped steps, with scale 0.0 (its residuals are exact zeros, added anyway).
  * Inside: ``x = pos_embed(latents)`` (ControlNet's own patchify + cropped sincos, CN:326-327),
    ``temb = time_text_embed(t, zeros)`` (CN:329), ``ctx = context_embedder(prompt_embeds)`` (CN:331-332),
    ``x = x + pos_embed_input(control_image)`` (CN:335; a patchify conv 17 -> inner, kernel = stride = 2, NO
    positional embedding, CN:165-173), 23 JointTransformerBlocks (all with context output, CN:133-145), residual k
    = ``controlnet_blocks[k](x after block k) * cond_scale`` (CN:363-369) -> 23 x [2B, N, inner].

Residual mapping inside ``SD3Transformer2DModel.forward`` (TR:303-326)
  * After block i (and even when block i is in ``skip_layers``), if ``block.context_pre_only is False``:
    ``hidden_states += residuals[int(i / (len(blocks) / len(residuals)))]`` (TR:324-326). Only the LAST block
    (i = 23) is ``context_pre_only`` (TR:161) and gets none. With 24 blocks and 23 residuals,
    ``interval = 24 / 23`` and block i <- residual ``int(i / interval)``: 0<-0, 1<-0, 2<-1, 3<-2, ..., 22<-21,
    23<-none. Residual 0 is added TWICE and residual 22 NEVER (the last ControlNet block is dead weight).
    ``diffusers_residual_index`` gives this map. ComfyUI adds ``control["output"][i]`` after block i for
    i < len(outputs) (comfy/ldm/modules/diffusionmodules/mmdit.py:979-984), i.e. block i <- residual i, as did the
    diffusers 0.29/0.30 the model was released for (REFERENCE section 5). The test
    ``test_controlnet_residual_mapping_in_installed_diffusers`` proves the installed rule with forward hooks.
  * Residuals are added to the image stream only (not the context), after the block has returned
    ``(context, image)`` with its own attention and MLP updates applied (AT:681-748; the context_pre_only block
    returns context None, AT:731-732).

Output (P:1398-1406, IP:235, IP:776-779)
  * ``output_type="latent"``: latents [B, 16, h, w] as-is (scaled space).
  * otherwise ``z / 1.5305 + 0.0609`` (P:1402), ``vae.decode``, ``(x * 0.5 + 0.5).clamp(0, 1)``; "pt" returns that
    [B, 3, H, W] float tensor. No paste-back of the kept pixels and no per-step re-injection of the known region.

The encode_mode="argmax" patch
  The pipeline calls ``self.vae.encode(masked_image).latent_dist.sample()`` directly (P:866). ``argmax_vae_encode``
  wraps ``encode`` on that pipeline's VAE INSTANCE only (an instance attribute shadowing the bound method) so the
  returned distribution's ``sample`` returns ``mode()`` (= mean); it is removed on exit and
  ``run_diffusers_sd3_inpaint`` raises if the patched ``sample`` was never called. The global RNG is then untouched.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tiny_models import (
    TINY_CLIP_CONFIG,
    TINY_T5_CONFIG,
    TINY_VAE_BASE_CONFIG,
    build_components,
    cached_folder_builder,
    call_pipeline,
    check_run_modes,
    fill_if_zero,
    first_randn,
    load_kwargs,
    quiet_on_cpu,
    read_json,
    save_model_folder,
    save_pipeline_folder,
    seeded,
    swapped,
    write_clip_tokenizer,
    write_json,
    write_t5_tokenizer,
    zero_parameters,
)

# stabilityai/stable-diffusion-3-medium-diffusers scheduler/scheduler_config.json.
SD3_SCHEDULER_CONFIG: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": False,
}

SD3_VAE_SCALING_FACTOR = 1.5305
SD3_VAE_SHIFT_FACTOR = 0.0609

# Tiny widths. Real rules kept: L + G <= T5 width = joint_attention_dim (CLIP is zero-padded up to it),
# pooled = L proj + G proj, caption_projection_dim = inner dim, 24 blocks, patch 2, 16 channels.
TINY_CLIP_L_DIM = 32
TINY_CLIP_G_DIM = 48
TINY_T5_DIM = 96
TINY_HEADS, TINY_HEAD_DIM = 2, 8
TINY_INNER_DIM = TINY_HEADS * TINY_HEAD_DIM  # 16

TINY_SD3_TRANSFORMER_CONFIG: dict[str, Any] = {
    "sample_size": 32,
    "patch_size": 2,
    "in_channels": 16,
    "num_layers": 24,
    "attention_head_dim": TINY_HEAD_DIM,
    "num_attention_heads": TINY_HEADS,
    "joint_attention_dim": TINY_T5_DIM,
    "caption_projection_dim": TINY_INNER_DIM,
    "pooled_projection_dim": TINY_CLIP_L_DIM + TINY_CLIP_G_DIM,
    "out_channels": 16,
    "pos_embed_max_size": 96,  # >= 256 / 8 / 2 = 16 patches per side
}

TINY_SD3_CONTROLNET_CONFIG: dict[str, Any] = {
    **TINY_SD3_TRANSFORMER_CONFIG,
    "num_layers": 23,
    "extra_conditioning_channels": 1,
}

TINY_SD3_VAE_CONFIG: dict[str, Any] = {
    **TINY_VAE_BASE_CONFIG,
    "scaling_factor": SD3_VAE_SCALING_FACTOR,
    "shift_factor": SD3_VAE_SHIFT_FACTOR,
}

# SD3 of other widths than the published ones (the ControlNet inpainting pipeline takes them from the configs too):
# an 8-channel VAE with 3 levels (1/4), a transformer and a ControlNet of in/out_channels 8 (the ControlNet's
# condition 8 + 1 = 9).
NARROW_LATENT_CHANNELS, NARROW_VAE_LEVELS = 8, 3


def narrow_config(name: str) -> dict[str, Any]:
    """The narrow config of "transformer", "controlnet" or "vae"."""
    c, levels = NARROW_LATENT_CHANNELS, NARROW_VAE_LEVELS
    if name == "vae":
        return {**TINY_SD3_VAE_CONFIG, "latent_channels": c,
                **{k: TINY_SD3_VAE_CONFIG[k][:levels]
                   for k in ("down_block_types", "up_block_types", "block_out_channels")}}
    base = TINY_SD3_CONTROLNET_CONFIG if name == "controlnet" else TINY_SD3_TRANSFORMER_CONFIG
    return {**base, "in_channels": c, "out_channels": c}

TINY_CLIP_L_CONFIG: dict[str, Any] = {
    **TINY_CLIP_CONFIG,
    "hidden_size": TINY_CLIP_L_DIM,
    "projection_dim": TINY_CLIP_L_DIM,
    "hidden_act": "quick_gelu",
}

# OpenCLIP bigG geometry rules: gelu (not quick_gelu), projection = hidden. pad_token_id mirrors tokenizer_2's "!"
# (the text model itself never reads it: no padding_idx, no attention mask).
TINY_CLIP_G_CONFIG: dict[str, Any] = {
    **TINY_CLIP_CONFIG,
    "hidden_size": TINY_CLIP_G_DIM,
    "intermediate_size": 61,
    "projection_dim": TINY_CLIP_G_DIM,
    "hidden_act": "gelu",
    "pad_token_id": 0,
}

TINY_SD3_T5_CONFIG: dict[str, Any] = {
    **TINY_T5_CONFIG,
    "d_model": TINY_T5_DIM,
    "d_kv": 16,
    "num_heads": 4,
    "d_ff": 64,
}

# model_index.json of stabilityai/stable-diffusion-3-medium-diffusers.
SD3_MODEL_INDEX_COMPONENTS: dict[str, list[str]] = {
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModelWithProjection"],
    "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
    "text_encoder_3": ["transformers", "T5EncoderModel"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "tokenizer_3": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "SD3Transformer2DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}

T5_MAX_LENGTH = 256
CLIP_G_PAD_TOKEN, CLIP_G_PAD_ID = "!", 0
# The ControlNet's zero-initialised layers (controlnet_blocks.*, pos_embed_input.proj.*) are refilled with this std.
CONTROLNET_FILL_STD = 0.05


# ----------------------------------------------------------------------------------------------------------------
# Tiny models
# ----------------------------------------------------------------------------------------------------------------


def build_tiny_sd3_components(seed: int = 0, *, narrow: bool = False) -> dict[str, Any]:
    """Build the tiny fp32 SD3 components in memory (no tokenizers). Deterministic in ``seed``: each component is
    built under its own seed (``seed * 16 + k``, see ``tiny_models.build_components``). ``narrow``: the transformer
    and VAE of ``narrow_config``."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    transformer = narrow_config("transformer") if narrow else TINY_SD3_TRANSFORMER_CONFIG
    vae = narrow_config("vae") if narrow else TINY_SD3_VAE_CONFIG
    return build_components(
        seed,
        {
            "transformer": (1, lambda: SD3Transformer2DModel(**transformer)),
            "vae": (3, lambda: AutoencoderKL(**vae)),
            "text_encoder": (4, lambda: CLIPTextModelWithProjection(CLIPTextConfig(**TINY_CLIP_L_CONFIG))),
            "text_encoder_2": (5, lambda: CLIPTextModelWithProjection(CLIPTextConfig(**TINY_CLIP_G_CONFIG))),
            "text_encoder_3": (6, lambda: T5EncoderModel(T5Config(**TINY_SD3_T5_CONFIG))),
        },
        FlowMatchEulerDiscreteScheduler(**SD3_SCHEDULER_CONFIG),
    )


def build_tiny_sd3_controlnet(seed: int = 0, *, narrow: bool = False) -> tuple[Any, list[str]]:
    """The tiny SD3ControlNetModel in memory and the names of the zero-initialised parameters that were refilled.

    diffusers zero-initialises ``controlnet_blocks.*`` (23 Linear, weight and bias, CN:159-164) and
    ``pos_embed_input.proj.*`` (CN:165-173): left at zero every residual is exactly 0 and the control image has no
    effect. They are refilled with N(0, CONTROLNET_FILL_STD) from a generator seeded ``seed * 16 + 8``.
    """
    from diffusers import SD3ControlNetModel

    base = int(seed) * 16
    with seeded(base + 7):
        controlnet = SD3ControlNetModel(**(narrow_config("controlnet") if narrow else TINY_SD3_CONTROLNET_CONFIG))
    gen = torch.Generator("cpu").manual_seed(base + 8)
    filled = [
        f"{part}.{n}"
        for part in ("controlnet_blocks", "pos_embed_input")
        for n in fill_if_zero(getattr(controlnet, part), gen, std=CONTROLNET_FILL_STD)
    ]
    still_zero = zero_parameters(controlnet)
    if still_zero:
        raise RuntimeError(f"SD3ControlNetModel has all-zero parameters left: {still_zero}")
    controlnet.eval()
    return controlnet, filled


def _write_clip_g_tokenizer(dst: Path) -> None:
    """SD3's tokenizer_2: CLIP-L's BPE with "!" = 0 as its padding token."""
    write_clip_tokenizer(dst, pad=(CLIP_G_PAD_TOKEN, CLIP_G_PAD_ID))


@cached_folder_builder
def build_tiny_sd3_folder(dst: Path, seed: int = 0, *, narrow: bool = False) -> Path:
    """Save a complete diffusers-format SD3 folder with tiny random fp32 weights to ``dst``.

    Layout (as stabilityai/stable-diffusion-3-medium-diffusers): model_index.json (StableDiffusion3Pipeline),
    scheduler/, text_encoder/ + text_encoder_2/ (CLIPTextModelWithProjection), text_encoder_3/ (T5EncoderModel),
    tokenizer/ + tokenizer_2/ (CLIP BPE, max length 77; tokenizer_2 pads with "!" = 0), tokenizer_3/ (T5),
    transformer/ (SD3Transformer2DModel), vae/ (AutoencoderKL). Weights as safetensors only; same ``seed`` gives
    identical weights; loads back with ``local_files_only=True`` / HF_HUB_OFFLINE=1. ``narrow``: other widths than
    the published ones (``narrow_config``). Returns ``dst``. Built once per process and arguments, then copied to
    ``dst`` (``tiny_models.cached_folder_builder``).
    """
    return save_pipeline_folder(
        dst,
        build_tiny_sd3_components(seed, narrow=narrow),
        class_name="StableDiffusion3Pipeline",
        index_components=SD3_MODEL_INDEX_COMPONENTS,
        tokenizers={
            "tokenizer": write_clip_tokenizer,
            "tokenizer_2": _write_clip_g_tokenizer,
            "tokenizer_3": write_t5_tokenizer,
        },
    )


@cached_folder_builder
def build_tiny_sd3_controlnet_folder(dst: Path, seed: int = 0, *, config_has_extra_channels: bool = True,
                                     narrow: bool = False) -> Path:
    """Save the tiny SD3 inpainting ControlNet as the alimama-creative/SD3-Controlnet-Inpainting layout: ONE model
    folder with config.json (SD3ControlNetModel) + diffusion_pytorch_model.safetensors. Same dims as the tiny
    transformer, num_layers 23, extra_conditioning_channels 1 (pos_embed_input.proj.weight [16, 17, 2, 2]).

    ``config_has_extra_channels=False`` drops ``extra_conditioning_channels`` from config.json, as a config written
    before diffusers knew the key would lack it: a plain ``from_pretrained`` then fails with a size mismatch, and
    ``load_sd3_inpaint_pipeline`` infers the channels from the weight. Returns ``dst``. Built once per process and
    arguments, then copied to ``dst`` (``tiny_models.cached_folder_builder``).
    """
    dst = save_model_folder(dst, build_tiny_sd3_controlnet(seed, narrow=narrow)[0])
    if not config_has_extra_channels:
        cfg = read_json(dst / "config.json")
        cfg.pop("extra_conditioning_channels", None)
        write_json(dst / "config.json", cfg)
    return dst


def controlnet_extra_channels(controlnet_folder: Path) -> int:
    """``extra_conditioning_channels`` inferred from the weights: pos_embed_input.proj.weight.shape[1] - in_channels."""
    from safetensors import safe_open

    folder = Path(controlnet_folder)
    cfg = read_json(folder / "config.json")
    with safe_open(str(folder / "diffusion_pytorch_model.safetensors"), framework="pt") as f:
        shape = f.get_slice("pos_embed_input.proj.weight").get_shape()
    return int(shape[1]) - int(cfg.get("in_channels", 16))


# ----------------------------------------------------------------------------------------------------------------
# Reference run through diffusers' own StableDiffusion3ControlNetInpaintingPipeline
# ----------------------------------------------------------------------------------------------------------------


def load_sd3_inpaint_pipeline(sd3_folder: Path, controlnet_folder: Path):
    """``StableDiffusion3ControlNetInpaintingPipeline`` from the two local folders, fp32, CPU, offline.

    The ControlNet is loaded with ``extra_conditioning_channels`` inferred from its weights (so a config without the
    key loads too); the SD3 folder's model_index says StableDiffusion3Pipeline, as the real repo's does.
    """
    from diffusers import SD3ControlNetModel, StableDiffusion3ControlNetInpaintingPipeline

    controlnet = SD3ControlNetModel.from_pretrained(
        str(controlnet_folder),
        extra_conditioning_channels=controlnet_extra_channels(controlnet_folder),
        **load_kwargs(),
    )
    pipe = StableDiffusion3ControlNetInpaintingPipeline.from_pretrained(
        str(sd3_folder), controlnet=controlnet, **load_kwargs()
    )
    return quiet_on_cpu(pipe)


@contextlib.contextmanager
def argmax_vae_encode(pipe):
    """Make ``pipe.vae.encode(x).latent_dist.sample()`` return the distribution's mean, for this VAE instance only.

    Installs an instance attribute ``encode`` on ``pipe.vae`` that calls the real bound method and replaces
    ``sample`` on the returned DiagonalGaussianDistribution by ``mode()``; removed on exit. Yields a dict counting
    ``"encodes"`` and ``"samples"`` (patched ``sample`` calls).
    """
    vae = pipe.vae
    original = vae.encode
    stats = {"encodes": 0, "samples": 0}

    def _encode(x, return_dict: bool = True):
        out = original(x, return_dict=return_dict)
        dist = out.latent_dist if return_dict else out[0]

        def _sample(generator=None):
            stats["samples"] += 1
            return dist.mode()

        dist.sample = _sample
        stats["encodes"] += 1
        return out

    with swapped(vae, "encode", _encode):
        yield stats


def run_diffusers_sd3_inpaint(
    sd3_folder: Path | None,
    controlnet_folder: Path | None,
    image: Any,
    mask: Any,
    prompt: str,
    negative_prompt: str | None,
    *,
    height: int,
    width: int,
    steps: int,
    guidance_scale: float,
    controlnet_conditioning_scale: float,
    control_guidance_start: float = 0.0,
    control_guidance_end: float = 1.0,
    seed: int,
    max_sequence_length: int = T5_MAX_LENGTH,
    encode_mode: str = "argmax",
    output_type: str = "pt",
    pipe: Any = None,
    latents: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run diffusers' StableDiffusion3ControlNetInpaintingPipeline on CPU in fp32 and return its output tensor.

    ``image``/``mask``: ``control_image``/``control_mask`` (PIL images, or tensors the pipeline passes through
    untouched: image in [-1, 1], see the module docstring). ``encode_mode``: "argmax" (the masked-image encode uses
    the latent mean; deterministic) or "sample" (stock: draws from the global torch RNG). ``output_type``: "pt" ->
    [B, 3, H, W] in [0, 1]; "latent" -> [B, 16, H/8, W/8]. ``pipe``: an already loaded pipeline (skips loading).
    ``latents``: initial latents [B, 16, H/8, W/8] (skips the noise draw). Generator:
    ``torch.Generator("cpu").manual_seed(seed)``.
    """
    check_run_modes(encode_mode, output_type)
    if pipe is None:
        pipe = load_sd3_inpaint_pipeline(sd3_folder, controlnet_folder)
    return call_pipeline(
        pipe,
        argmax_vae_encode(pipe) if encode_mode == "argmax" else None,
        used="samples",
        inert="StableDiffusion3ControlNetInpaintingPipeline no longer calls vae.encode(...).latent_dist.sample()",
        seed=seed,
        prompt=prompt, negative_prompt=negative_prompt, control_image=image, control_mask=mask, height=height,
        width=width, num_inference_steps=steps, guidance_scale=guidance_scale,
        controlnet_conditioning_scale=controlnet_conditioning_scale, control_guidance_start=control_guidance_start,
        control_guidance_end=control_guidance_end, latents=latents, output_type=output_type,
        max_sequence_length=max_sequence_length,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Helpers an engine can be compared against
# ----------------------------------------------------------------------------------------------------------------


def initial_noise(seed: int, height: int, width: int, batch: int = 1) -> torch.Tensor:
    """The pipeline's initial latents: ``randn((B, 16, H//8, W//8), generator=Generator('cpu').manual_seed(seed))``
    (the generator's first and only draw, in both encode modes)."""
    return first_randn(seed, (batch, 16, int(height) // 8, int(width) // 8))


def sd3_sigmas(
    steps: int, shift: float = 3.0, num_train_timesteps: int = 1000
) -> torch.Tensor:
    """FlowMatchEulerDiscreteScheduler(shift=shift).set_timesteps(steps).sigmas, recomputed (steps + 1 values, last
    0.0): float32 table shifted in __init__, float64 linspace between its ends, shifted again, cast to float32."""
    table = (
        torch.from_numpy(
            np.linspace(1, num_train_timesteps, num_train_timesteps, dtype=np.float32)[
                ::-1
            ].copy()
        )
        / num_train_timesteps
    )
    table = shift * table / (1 + (shift - 1) * table)
    sigma_max, sigma_min = table[0].item(), table[-1].item()
    t = (
        np.linspace(
            sigma_max * num_train_timesteps, sigma_min * num_train_timesteps, steps
        )
        / num_train_timesteps
    )
    sig = shift * t / (1 + (shift - 1) * t)
    sig = torch.from_numpy(sig).to(torch.float32)
    return torch.cat([sig, torch.zeros(1)])


def diffusers_residual_index(
    block_index: int, num_blocks: int = 24, num_residuals: int = 23
) -> int | None:
    """Which ControlNet residual diffusers 0.42.1 adds after SD3 block ``block_index`` (TR:324-326); None for the
    last block (context_pre_only). 24/23: 0<-0, 1<-0, 2<-1, ..., 22<-21, 23<-None."""
    if block_index == num_blocks - 1:
        return None
    return int(block_index / (num_blocks / num_residuals))
