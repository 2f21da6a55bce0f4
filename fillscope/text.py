"""Text encoders: CLIP-L and T5-XXL with their real tokenizers, and the FLUX text condition.

Tokenizers come from the diffusers folder when the weights do (tokenizer/, tokenizer_2/), otherwise from
ComfyUI's own tokenizer files (comfy/sd1_tokenizer, comfy/text_encoders/t5_tokenizer), which the node layer
passes in. Nothing is fetched from a hub.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import FillScopeInputError
from .weights import META, PLACEHOLDER, Component, load_component

CLIP_MAX_LENGTH = 77
FLUX_T5_MAX_LENGTH = 512


def load_clip_tokenizer(folder: Path):
    from transformers import CLIPTokenizer

    # ComfyUI's CLIP tokenizer config says model_max_length 8192; CLIP-L has 77 positions.
    # from_pretrained(folder), not CLIPTokenizer(vocab_file=...): the latter builds a 3-token vocab in transformers 5.
    tok = CLIPTokenizer.from_pretrained(str(folder), model_max_length=CLIP_MAX_LENGTH)
    if len(tok) != 49408:
        raise RuntimeError(f"CLIP tokenizer in {folder} has {len(tok)} tokens, expected 49408")
    return tok


def load_t5_tokenizer(folder: Path):
    from transformers import T5TokenizerFast

    return T5TokenizerFast.from_pretrained(str(folder))


def _tokenizer_folder(source: str, subfolder: str, fallback: Path | None, input_name: str) -> Path:
    if source not in (META, PLACEHOLDER):
        candidate = Path(source) / subfolder
        if candidate.is_dir():
            return candidate
    if fallback is None or not Path(fallback).is_dir():
        raise FillScopeInputError(
            input_name,
            f"no tokenizer found (looked in {source}/{subfolder} and ComfyUI's tokenizer files {fallback}).",
            "use a complete diffusers repository or a ComfyUI install that ships comfy/sd1_tokenizer and "
            "comfy/text_encoders/t5_tokenizer.",
        )
    return Path(fallback)


def load_clip_l(source, *, dtype="bf16", device="auto", seed=0, tokenizer_fallback: Path | None = None) -> Component:
    comp = load_component("clip_l", source, dtype=dtype, device=device, seed=seed, input_name="clip_l source")
    comp.tokenizer = load_clip_tokenizer(_tokenizer_folder(comp.source, "tokenizer", tokenizer_fallback, "clip_l source"))
    return comp


def load_t5(source, *, dtype="bf16", device="auto", seed=0, tokenizer_fallback: Path | None = None) -> Component:
    comp = load_component("t5_xxl", source, dtype=dtype, device=device, seed=seed, input_name="t5 source")
    comp.tokenizer = load_t5_tokenizer(_tokenizer_folder(comp.source, "tokenizer_2", tokenizer_fallback, "t5 source"))
    return comp


def clip_text_model(model):
    """The CLIP text transformer inside either CLIPTextModel or CLIPTextModelWithProjection."""
    return getattr(model, "text_model", model)


@dataclass
class ClipOutput:
    pooled: object  # [B, 768] pooler_output (EOS token), what FLUX conditions on
    last_hidden: object  # [B, 77, 768]
    input_ids: object  # [B, 77] on CPU


def tokenize(tokenizer, prompt: str, max_length: int):
    # Same call as diffusers' FLUX pipelines: pad to max_length, truncate, no attention mask to the encoder.
    return tokenizer(
        prompt, padding="max_length", max_length=max_length, truncation=True, return_tensors="pt"
    ).input_ids


def encode_clip_l(comp: Component, prompt: str) -> ClipOutput:
    import torch

    ids = tokenize(comp.tokenizer, prompt, CLIP_MAX_LENGTH)
    with torch.inference_mode():
        out = clip_text_model(comp.model)(ids.to(comp.device), output_hidden_states=False)
    return ClipOutput(pooled=out.pooler_output, last_hidden=out.last_hidden_state, input_ids=ids)


@dataclass
class T5Output:
    hidden: object  # [B, max_length, 4096]
    input_ids: object  # [B, max_length] on CPU
    real_tokens: int  # tokens before padding, to report truncation


def encode_t5(comp: Component, prompt: str, max_length: int = FLUX_T5_MAX_LENGTH) -> T5Output:
    import torch

    ids = tokenize(comp.tokenizer, prompt, max_length)
    real = int((ids != comp.tokenizer.pad_token_id).sum())
    with torch.inference_mode():
        hidden = comp.model(ids.to(comp.device), output_hidden_states=False)[0]
    return T5Output(hidden=hidden, input_ids=ids, real_tokens=real)


@dataclass
class FluxTextCondition:
    """What the FLUX transformer reads from text: the T5 sequence and the CLIP-L pooled vector."""

    t5_hidden: object  # [B, 512, 4096] encoder_hidden_states
    pooled: object  # [B, 768] pooled_projections

    @property
    def txt_ids(self):
        import torch

        # FLUX text tokens all sit at position (0, 0, 0).
        return torch.zeros(self.t5_hidden.shape[1], 3, device=self.t5_hidden.device, dtype=self.t5_hidden.dtype)


def flux_text_condition(t5: T5Output, clip: ClipOutput) -> FluxTextCondition:
    return FluxTextCondition(t5_hidden=t5.hidden, pooled=clip.pooled)
