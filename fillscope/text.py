"""Text encoders: CLIP-L and T5-XXL with their real tokenizers, and the FLUX text condition.

Tokenizers come from the diffusers folder when the weights do (tokenizer/, tokenizer_2/), otherwise from the
fallback tokenizer folders the caller passes (`tokenizer_fallback`: a CLIP BPE folder, a T5 folder; the node layer
passes the host's own files). Nothing is fetched from a hub.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import FillScopeInputError
from .weights import Component, load_component

CLIP_MAX_LENGTH = 77
FLUX_T5_MAX_LENGTH = 512


@lru_cache(maxsize=16)
def load_clip_tokenizer(folder: Path, pad_token: str | None = None):
    """Cached per folder: a loader node re-run (new weights, same tokenizer) does not re-read the vocabulary."""
    from transformers import CLIPTokenizer

    # ComfyUI's CLIP tokenizer config says model_max_length 8192; CLIP has 77 positions.
    # from_pretrained(folder), not CLIPTokenizer(vocab_file=...): the latter builds a 2-token vocab in transformers 5.
    extra = {"pad_token": pad_token} if pad_token else {}
    tok = CLIPTokenizer.from_pretrained(str(folder), model_max_length=CLIP_MAX_LENGTH, **extra)
    if len(tok) != 49408:
        raise RuntimeError(f"CLIP tokenizer in {folder} has {len(tok)} tokens, expected 49408")
    return tok


@lru_cache(maxsize=16)
def load_t5_tokenizer(folder: Path):
    from transformers import T5TokenizerFast

    return T5TokenizerFast.from_pretrained(str(folder))


def _tokenizer_folder(comp: Component, fallback: Path | None, input_name: str) -> tuple[Path, bool]:
    """(folder, from_repository): the repository's own tokenizer, else the caller's fallback folder."""
    own = comp.extras.get("tokenizer_folder")
    if own is not None and Path(own).is_dir():
        return Path(own), True
    if fallback is None or not Path(fallback).is_dir():
        raise FillScopeInputError(
            input_name,
            "no tokenizer found (the weights come without one, and "
            + ("no fallback tokenizer folder was given)." if fallback is None else f"the fallback tokenizer folder {fallback} is missing)."),
            "use a complete diffusers repository (it has tokenizer folders), or pass the tokenizer folders of the "
            "model family (a CLIP BPE folder with vocab.json and merges.txt, a T5 folder with tokenizer.json).",
        )
    return Path(fallback), False


def load_clip_l(source, *, dtype="bf16", device="auto", seed=0, tokenizer_fallback: Path | None = None) -> Component:
    comp = load_component("clip_l", source, dtype=dtype, device=device, seed=seed, input_name="clip_l source")
    comp.tokenizer = load_clip_tokenizer(_tokenizer_folder(comp, tokenizer_fallback, "clip_l source")[0])
    return comp


def load_clip_g(source, *, dtype="bf16", device="auto", seed=0, tokenizer_fallback: Path | None = None) -> Component:
    comp = load_component("clip_g", source, dtype=dtype, device=device, seed=seed, input_name="clip_g source")
    folder, own = _tokenizer_folder(comp, tokenizer_fallback, "clip_g source")
    # bigG pads with "!" (id 0), not with the end token: SD3's tokenizer_2 and ComfyUI's SDXL/SD3 clip_g agree.
    comp.tokenizer = load_clip_tokenizer(folder, pad_token=None if own else "!")
    return comp


def load_t5(source, *, dtype="bf16", device="auto", seed=0, tokenizer_fallback: Path | None = None) -> Component:
    comp = load_component("t5_xxl", source, dtype=dtype, device=device, seed=seed, input_name="t5 source")
    comp.tokenizer = load_t5_tokenizer(_tokenizer_folder(comp, tokenizer_fallback, "t5 source")[0])
    return comp


def clip_text_model(model):
    """The CLIP text transformer inside either CLIPTextModel or CLIPTextModelWithProjection."""
    return getattr(model, "text_model", model)


@dataclass
class ClipOutput:
    pooled: object  # [B, width] pooler_output (EOS token), what FLUX conditions on
    last_hidden: object  # [B, 77, width] after the final layer norm
    penultimate: object  # [B, 77, width] hidden_states[-2], what SD3 conditions on
    text_embeds: object | None  # [B, projection] projected pooled (SD3's pooled input); None without a projection
    input_ids: object  # [B, 77] on CPU
    encoder: str = "clip_l"
    given_tokens: int = 0  # tokens the prompt makes (start and end tokens included) before truncation to 77

    @property
    def truncated(self) -> bool:
        return self.given_tokens > CLIP_MAX_LENGTH


def tokenize(tokenizer, prompt: str, max_length: int):
    # Same call as diffusers' FLUX pipelines: pad to max_length, truncate, no attention mask to the encoder.
    return tokenizer(
        prompt, padding="max_length", max_length=max_length, truncation=True, return_tensors="pt"
    ).input_ids


def count_tokens(tokenizer, prompt: str) -> int:
    """Tokens `prompt` makes, start/end tokens included, without truncation (to report what truncation drops)."""
    return len(tokenizer(prompt, truncation=False, verbose=False).input_ids)


def encode_clip(comp: Component, prompt: str, project: bool = True) -> ClipOutput:
    """CLIP-L or CLIP-G: 77 tokens -> last hidden, penultimate hidden, pooled and (with a projection, unless
    project=False: FLUX never uses it) text_embeds."""
    import torch

    ids = tokenize(comp.tokenizer, prompt, CLIP_MAX_LENGTH)
    projection = getattr(comp.model, "text_projection", None) if project else None
    with torch.inference_mode():
        out = clip_text_model(comp.model)(ids.to(comp.device), output_hidden_states=True)
        embeds = projection(out.pooler_output) if projection is not None else None
    return ClipOutput(
        pooled=out.pooler_output,
        last_hidden=out.last_hidden_state,
        penultimate=out.hidden_states[-2],
        text_embeds=embeds,
        input_ids=ids,
        encoder=comp.kind,
        given_tokens=count_tokens(comp.tokenizer, prompt),
    )


encode_clip_l = encode_clip


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


@dataclass
class SD3TextCondition:
    """What the SD3 MMDiT reads from text: the joint context and the pooled vector."""

    context: object  # [B, 77 + T5 tokens, 4096] = (CLIP-L ++ CLIP-G penultimate, zero-padded to 4096) cat T5
    pooled: object  # [B, 2048] = CLIP-L text_embeds ++ CLIP-G text_embeds


def sd3_text_condition(clip_l: ClipOutput, clip_g: ClipOutput, t5: T5Output, observe=None) -> SD3TextCondition:
    import torch
    import torch.nn.functional as F

    for name, out, want in (("clip_l", clip_l, "clip_l"), ("clip_g", clip_g, "clip_g")):
        if out.encoder != want:
            raise FillScopeInputError(name, f"got the {out.encoder.replace('_', '-').upper()} encoding.", f"wire the {want.replace('_', '-').upper()} encode node here.")
        if out.text_embeds is None:
            raise FillScopeInputError(
                name,
                f"this {want.replace('_', '-').upper()} has no text projection (e.g. the CLIP-L of a FLUX repository); SD3's pooled vector needs it.",
                "load it from the SD3 repository (or the clip_l/clip_g file), which includes the projection.",
            )
    dtype = t5.hidden.dtype
    clip = torch.cat([clip_l.penultimate.to(dtype), clip_g.penultimate.to(dtype)], dim=-1)  # [B,77,768+1280]
    clip = F.pad(clip, (0, t5.hidden.shape[-1] - clip.shape[-1]))  # [B,77,4096]
    context = torch.cat([clip, t5.hidden], dim=-2)  # [B,77+256,4096]
    pooled = torch.cat([clip_l.text_embeds, clip_g.text_embeds], dim=-1)  # [B,2048]
    if observe is not None:
        observe("clip_lg.padded", clip)
    return SD3TextCondition(context=context, pooled=pooled)
