"""Tiny FLUX.2 [klein] reference for tests: a deterministic repository folder in the published layout plus diffusers'
own Flux2KleinInpaintPipeline / Flux2KleinPipeline as the references an engine must reproduce.

The tiny models keep klein's real geometry: Qwen3 with more than 28 layers (the condition reads hidden states 9,
18, 27 stacked -> 3 x hidden), the real Qwen3 token ids (ComfyUI's Qwen BPE with Qwen3's special tokens and chat
template, so the vocabulary is the full 151,936), a Flux2 transformer with 128 input channels and 4-axis RoPE, and
the FLUX.2 VAE (32 latent channels at /8, 2x2 patches -> 128 at /16, BatchNorm statistics that are NOT the identity
so the normalisation is exercised). model_index.json says Flux2KleinPipeline and is_distilled as published.
`narrow=True` builds other widths than the published ones (NARROW_*), which FillScope must take from the configs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tiny_models import (
    build_components,
    cached_folder_builder,
    comfy_tokenizer_dirs,
    load_kwargs,
    quiet_on_cpu,
    save_pipeline_folder,
)

QWEN_LAYERS = 30  # more than the 28 FillScope builds: the loader must skip the rest
TINY_QWEN3_CONFIG: dict[str, Any] = {
    "vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": QWEN_LAYERS,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "hidden_act": "silu",
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": True,
    "attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643,
}
TINY_TRANSFORMER_CONFIG: dict[str, Any] = {
    "patch_size": 1, "in_channels": 128, "out_channels": None, "num_layers": 1, "num_single_layers": 2,
    "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 3 * 32,
    "timestep_guidance_channels": 256, "mlp_ratio": 3.0, "axes_dims_rope": [4, 4, 4, 4], "rope_theta": 2000,
    "eps": 1e-6, "guidance_embeds": False,
}
TINY_VAE_CONFIG: dict[str, Any] = {
    "in_channels": 3, "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "block_out_channels": [16, 16, 32, 32], "layers_per_block": 1, "act_fn": "silu", "latent_channels": 32,
    "norm_num_groups": 8, "sample_size": 64, "use_quant_conv": True, "use_post_quant_conv": True,
    "mid_block_add_attention": True, "batch_norm_eps": 1e-4, "batch_norm_momentum": 0.1, "patch_size": [2, 2],
}
# A klein of other widths than the published ones (diffusers' klein pipelines take them from the configs too): an
# 8-channel FLUX.2 VAE with 3 levels (1/4, 2x2 patches -> 32 channels at 1/8: one token is 8 px) and a transformer
# reading 8 x 2x2 = 32 channels.
NARROW_LATENT_CHANNELS, NARROW_VAE_LEVELS = 8, 3

# FLUX.2 scheduler_config.json as FillScope assumes it (FLUX.1's dynamic shifting; mu from compute_empirical_mu)
SCHEDULER_CONFIG: dict[str, Any] = {
    "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
    "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True, "time_shift_type": "exponential",
}
MODEL_INDEX_COMPONENTS: dict[str, list[str]] = {
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "Qwen3ForCausalLM"],
    "tokenizer": ["transformers", "Qwen2TokenizerFast"],
    "transformer": ["diffusers", "Flux2Transformer2DModel"],
    "vae": ["diffusers", "AutoencoderKLFlux2"],
}


def qwen_bpe_dir() -> Path:
    """ComfyUI's shipped Qwen BPE files (qwen25_tokenizer): the offline source of Qwen3's tokenizer."""
    _, t5_dir = comfy_tokenizer_dirs()
    return t5_dir.parent / "qwen25_tokenizer"


def write_qwen3_tokenizer(dst: Path) -> None:
    from fillscope.text import load_qwen3_tokenizer

    load_qwen3_tokenizer(qwen_bpe_dir()).save_pretrained(str(dst))


def build_tiny_components(seed: int = 0, qwen_hidden: int | None = None, *, narrow: bool = False) -> dict[str, Any]:
    """`qwen_hidden` builds a Qwen3 of another width (and a transformer reading 3x that): the tiny stand-in for the
    other klein size (4B: Qwen3-4B, 9B: Qwen3-8B). `narrow`: the VAE and transformer of NARROW_* widths."""
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    qwen, transformer, vae = dict(TINY_QWEN3_CONFIG), dict(TINY_TRANSFORMER_CONFIG), dict(TINY_VAE_CONFIG)
    if qwen_hidden is not None:
        qwen["hidden_size"], transformer["joint_attention_dim"] = qwen_hidden, 3 * qwen_hidden
    if narrow:
        levels = NARROW_VAE_LEVELS
        vae.update(latent_channels=NARROW_LATENT_CHANNELS, down_block_types=vae["down_block_types"][:levels],
                   up_block_types=vae["up_block_types"][:levels], block_out_channels=vae["block_out_channels"][:levels])
        transformer["in_channels"] = NARROW_LATENT_CHANNELS * 2 * 2
    out = build_components(seed, {
        "text_encoder": (1, lambda: Qwen3ForCausalLM(Qwen3Config(**qwen))),
        "transformer": (3, lambda: Flux2Transformer2DModel(**transformer)),
        "vae": (4, lambda: AutoencoderKLFlux2(**vae)),
    }, FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG))
    gen = torch.Generator("cpu").manual_seed(seed * 16 + 5)
    bn = out["vae"].bn
    with torch.no_grad():  # running statistics as a trained VAE has them, not the identity
        bn.running_mean.copy_(torch.randn(bn.running_mean.shape, generator=gen) * 0.5)
        bn.running_var.copy_(torch.rand(bn.running_var.shape, generator=gen) * 2 + 0.25)
    return out


@cached_folder_builder
def _tiny_klein_pipeline_folder(dst: Path, seed: int = 0, qwen_hidden: int | None = None,
                                narrow: bool = False) -> Path:
    """The klein folder before ``build_tiny_klein_folder`` marks it distilled or base: what the per-process cache
    keeps (the distilled and the base folder share it, ``tiny_models.cached_folder_builder``)."""
    return save_pipeline_folder(Path(dst), build_tiny_components(seed, qwen_hidden, narrow=narrow),
                                class_name="Flux2KleinPipeline",
                                index_components=MODEL_INDEX_COMPONENTS,
                                tokenizers={"tokenizer": write_qwen3_tokenizer})


def build_tiny_klein_folder(dst: Path, seed: int = 0, *, distilled: bool = True, qwen_hidden: int | None = None,
                            narrow: bool = False) -> Path:
    """A diffusers-format FLUX.2 [klein] folder of ``build_tiny_components(seed, qwen_hidden, narrow=narrow)`` at
    ``dst``, model_index.json's ``is_distilled`` = ``distilled``. Returns ``dst``."""
    import json

    folder = _tiny_klein_pipeline_folder(Path(dst), seed, qwen_hidden, narrow)
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "is_distilled": distilled}, indent=2))
    return folder


def load_pipeline(folder: Path, inpaint: bool = True):
    from diffusers import Flux2KleinInpaintPipeline, Flux2KleinPipeline

    cls = Flux2KleinInpaintPipeline if inpaint else Flux2KleinPipeline
    return quiet_on_cpu(cls.from_pretrained(str(folder), **load_kwargs()))


def run_diffusers_inpaint(pipe, *, prompt: str, image, mask, seed: int, steps: int, guidance: float = 4.0,
                          strength: float = 1.0, reference=None) -> torch.Tensor:
    """Flux2KleinInpaintPipeline on NCHW [0,1] tensors (sides multiples of 16, at most 1024^2: no resizing) ->
    the image [B,3,H,W] in [0,1]."""
    out = pipe(prompt=prompt, image=image, mask_image=mask, image_reference=reference, strength=strength,
               num_inference_steps=steps, guidance_scale=guidance, height=image.shape[-2], width=image.shape[-1],
               generator=torch.Generator("cpu").manual_seed(seed), output_type="pt")
    return out.images


def to_pil(image: torch.Tensor):
    """IMAGE [1,H,W,3] whose values are multiples of 1/255 -> PIL (Flux2KleinPipeline takes PIL images only)."""
    import numpy as np
    from PIL import Image

    pixels = (image[0] * 255).round().to(torch.uint8).numpy()
    if not torch.equal(torch.from_numpy(pixels).float() / 255, image[0]):
        raise ValueError("the image must hold multiples of 1/255 for the PIL copy to be exact")
    return Image.fromarray(np.ascontiguousarray(pixels))


def uint8_image(generator: torch.Generator, height: int, width: int) -> torch.Tensor:
    """A random IMAGE [1,H,W,3] on the 8-bit grid (values k/255), so that its PIL copy is exact."""
    return torch.randint(0, 256, (1, height, width, 3), generator=generator).float() / 255


def run_diffusers_edit(pipe, *, prompt: str, references: list, seed: int, steps: int, guidance: float = 4.0) -> torch.Tensor:
    """Flux2KleinPipeline with reference IMAGEs [1,H,W,3] (8-bit values; passed as PIL) -> [B,3,H,W] in [0,1]."""
    out = pipe(prompt=prompt, image=[to_pil(r) for r in references], num_inference_steps=steps, guidance_scale=guidance,
               generator=torch.Generator("cpu").manual_seed(seed), output_type="pt")
    return out.images
