"""Text encoders: CLIP-L, T5-XXL and Qwen3 with their real tokenizers, and the FLUX and SD3 text conditions.

Tokenizers come from the diffusers folder when the weights do (tokenizer/, tokenizer_2/), otherwise from the
fallback tokenizer folders the caller passes (`tokenizer_fallback`: a CLIP BPE folder, a T5 folder; the node layer
passes the host's own files). Nothing is fetched from a hub.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import FillScopeInputError
from .weights import Component, load_component

CLIP_MAX_LENGTH = 77
FLUX_T5_MAX_LENGTH = 512
PROMPT_SEPARATOR = "---"  # a line holding only this separates the prompts of one text (split_prompts)
_SEPARATOR_LINE = re.compile(r"^[^\S\n]*---[^\S\n]*$", re.MULTILINE)  # spaces, tabs, a \r around it allowed


# --- several prompts in one text (a prompt per region or per image) ----------------------------------------------


def split_prompts(text: str, input_name: str = "text") -> list[str]:
    """The prompts of one prompt box, in order. The rule, in one place for every family:

    - a line that holds only `---` (spaces or tabs around it allowed) separates two prompts;
    - each part between separators is stripped of the whitespace (and line breaks) around it;
    - a text without such a line is one prompt, returned exactly as given (not stripped), so a single prompt
      encodes bit for bit as it always has; "" is one (empty) prompt, as before;
    - with separators, every part must hold text: an empty part (a `---` at the start or the end, or two in a
      row) is refused, naming `input_name`, since a missing prompt would move every later prompt onto the wrong
      region.

    The encoders encode each prompt on its own and stack them along the batch (concat_batch): prompt k
    conditions image k of the batch, e.g. crop k of Crop For Inpaint with regions."""
    if not isinstance(text, str):
        raise FillScopeInputError(input_name, f"is {type(text).__name__}, not text.", "pass the prompt as a string.")
    parts = _SEPARATOR_LINE.split(text)
    if len(parts) == 1:
        return [text]
    prompts = [p.strip() for p in parts]
    empty = [k for k, p in enumerate(prompts) if not p]
    if empty:
        where = ", ".join(str(k + 1) for k in empty)
        raise FillScopeInputError(
            input_name,
            f"is split by lines {PROMPT_SEPARATOR} into {len(prompts)} prompts, but prompt{'s' if len(empty) > 1 else ''} "
            f"{where} of {len(prompts)} {'are' if len(empty) > 1 else 'is'} empty (a line {PROMPT_SEPARATOR} at the "
            "start or the end, or two in a row).",
            f"write a prompt between every two lines {PROMPT_SEPARATOR} (one per region or image, in order) or remove "
            f"the extra line {PROMPT_SEPARATOR}; a single prompt needs none.")
    return prompts


def concat_batch(parts: list):
    """The encodings of several prompts as one batch, in the prompts' order: every tensor field of the dataclass
    (ClipOutput, T5Output, Qwen3Output, FluxTextCondition, SD3TextCondition, a pipeline's own text dataclass)
    concatenated along dim 0, nested dataclasses the same way, fields that are None in every part stay None, int
    fields (token counts) take the largest (the longest prompt's: `truncated` is true when any prompt was cut);
    any other field (an encoder's name) must be the same in every part. One part is returned as it is, the same
    object: a single prompt's tensors are exactly today's."""
    import dataclasses

    import torch

    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    values = {}
    for f in dataclasses.fields(first):
        if not f.init:
            continue
        items = [getattr(p, f.name) for p in parts]
        if all(v is None for v in items):
            values[f.name] = None
        elif all(isinstance(v, torch.Tensor) for v in items):
            values[f.name] = torch.cat(items, dim=0)
        elif all(dataclasses.is_dataclass(v) for v in items):
            values[f.name] = concat_batch(items)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            values[f.name] = max(items)
        elif all(v == items[0] for v in items):
            values[f.name] = items[0]
        else:
            raise ValueError(f"{type(first).__name__}.{f.name} differs between the prompts and has no batch to join")
    return type(first)(**values)


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

    t5_hidden: object  # [B, 512, 4096] encoder_hidden_states (any length L: txt_ids follow it)
    pooled: object  # [B, 768] pooled_projections
    origin: dict | None = None  # where the tensors came from when not from FillScope's encoders (e.g. "guidance")

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
    origin: dict | None = None  # where the tensors came from when not from FillScope's encoders


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


# --- Qwen3 (FLUX.2 [klein]) ------------------------------------------------------------------------------------

QWEN3_MAX_LENGTH = 512
QWEN3_TOKENIZER_CONFIG = Path(__file__).parent / "configs" / "qwen3_tokenizer" / "tokenizer_config.json"
QWEN3_THINK_ID = 151667  # "<think>" in Qwen3's vocabulary; Qwen2.5-VL's files have "<|meta|>" there


def _is_qwen3_tokenizer_folder(folder: Path) -> bool:
    """Whether the folder's own files give id 151667 to "<think>" (tokenizer_config.json's added_tokens_decoder, or
    tokenizer.json's added_tokens as transformers 5 saves them)."""
    import json

    config, fast = folder / "tokenizer_config.json", folder / "tokenizer.json"
    if config.is_file():
        added = json.loads(config.read_text()).get("added_tokens_decoder") or {}
        if (added.get(str(QWEN3_THINK_ID)) or {}).get("content") == "<think>":
            return True
    if fast.is_file():
        added = json.loads(fast.read_text()).get("added_tokens") or []
        return any(t.get("id") == QWEN3_THINK_ID and t.get("content") == "<think>" for t in added)
    return False


@lru_cache(maxsize=8)
def load_qwen3_tokenizer(folder: Path):
    """Qwen3's tokenizer. A folder with Qwen3's own tokenizer_config.json (a klein repository's tokenizer/) loads as
    it is. Any other folder with Qwen's byte-level BPE (vocab.json + merges.txt, e.g. the Qwen2.5 tokenizer files ComfyUI ships)
    gets Qwen3's special tokens and FillScope's chat template (configs/qwen3_tokenizer) in a cached copy: the
    BPE is the same, the ids 151665-151668 are not."""
    import shutil
    import tempfile

    from transformers import AutoTokenizer

    folder = Path(folder)
    if _is_qwen3_tokenizer_folder(folder):
        return AutoTokenizer.from_pretrained(str(folder))
    missing = [n for n in ("vocab.json", "merges.txt") if not (folder / n).is_file()]
    if missing:
        raise FillScopeInputError(
            "qwen3 tokenizer", f"'{folder}' has no {' or '.join(missing)} (Qwen's byte-level BPE files).",
            "use the klein repository's tokenizer/ folder, or a folder with Qwen's vocab.json and merges.txt.")
    # assembled in a folder that goes once the tokenizer is read (it keeps nothing open there): 4.5 MB a load was
    # left in the temporary folder for as long as the machine ran
    with tempfile.TemporaryDirectory(prefix="fillscope-qwen3-tokenizer-") as assembled:
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(folder / name, Path(assembled) / name)
        shutil.copyfile(QWEN3_TOKENIZER_CONFIG, Path(assembled) / "tokenizer_config.json")
        return AutoTokenizer.from_pretrained(assembled)


def load_qwen3(source, *, dtype="bf16", device="auto", seed=0, variant: str | None = None,
               tokenizer_fallback: Path | None = None) -> Component:
    """Qwen3-4B or -8B (variant for meta/placeholder), built with the layers klein reads (specs.qwen3_kept_config)."""
    comp = load_component("qwen3", source, dtype=dtype, device=device, seed=seed, input_name="qwen3 source",
                          variant=variant)
    comp.tokenizer = load_qwen3_tokenizer(_tokenizer_folder(comp, tokenizer_fallback, "qwen3 source")[0])
    return comp


def qwen3_chat_text(tokenizer, prompt: str) -> str:
    """One user turn, thinking off, as diffusers' klein pipelines render it through the tokenizer's chat template:
    '<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'."""
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)


@dataclass
class Qwen3Output:
    embeds: object  # [B, 512, 3*hidden]: hidden_states 9, 18, 27 stacked per token (7680 for 4B, 12288 for 8B)
    input_ids: object  # [B, 512] on CPU
    attention_mask: object  # [B, 512] on CPU: 1 for the chat text, 0 for padding
    real_tokens: int  # chat-template tokens before padding (over 512: truncated)
    given_tokens: int = 0  # tokens the templated prompt makes without truncation

    @property
    def truncated(self) -> bool:
        return self.given_tokens > self.input_ids.shape[1]


@contextmanager
def _shapes_only_attention(comp: Component):
    """On the meta device transformers' mask builders read tensor values (to choose a kernel), which meta tensors
    do not have: for the call, attention runs through an implementation registered without a mask builder (the
    same SDPA kernel, no mask: shapes only). Real devices are untouched."""
    if not comp.is_meta:
        yield
        return
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("fillscope_shapes_only", sdpa_attention_forward)
    config = comp.model.config
    previous = config._attn_implementation
    config._attn_implementation = "fillscope_shapes_only"
    try:
        yield
    finally:
        config._attn_implementation = previous


def encode_qwen3(comp: Component, prompt: str, max_length: int = QWEN3_MAX_LENGTH, layers=None) -> Qwen3Output:
    """FLUX.2 [klein]'s text condition: the chat-templated prompt padded to 512 tokens (the attention mask used
    inside Qwen3 only), hidden states `layers` stacked -> [B,512,len(layers)*hidden], as diffusers does."""
    import torch

    from .specs import KLEIN_TEXT_LAYERS

    layers = tuple(layers or KLEIN_TEXT_LAYERS)
    built = comp.config.get("num_hidden_layers", max(layers))
    if max(layers) > built:
        raise FillScopeInputError("qwen3", f"the encoder has {built} layers; klein reads hidden state {max(layers)}.",
                                  "load the Qwen3-4B / Qwen3-8B encoder of the klein repository.")
    text = qwen3_chat_text(comp.tokenizer, prompt)
    batch = comp.tokenizer(text, return_tensors="pt", padding="max_length", truncation=True, max_length=max_length)
    given = len(comp.tokenizer(text, truncation=False, verbose=False).input_ids)
    with torch.inference_mode():
        with _shapes_only_attention(comp):
            out = comp.model(input_ids=batch.input_ids.to(comp.device),
                             attention_mask=None if comp.is_meta else batch.attention_mask.to(comp.device),
                             output_hidden_states=True, use_cache=False)
        stacked = torch.stack([out.hidden_states[k] for k in layers], dim=1)  # [B,3,512,hidden]
        b, n, seq, hidden = stacked.shape
        embeds = stacked.permute(0, 2, 1, 3).reshape(b, seq, n * hidden)  # [B,512,3*hidden]
    return Qwen3Output(embeds=embeds, input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       real_tokens=int(batch.attention_mask.sum()), given_tokens=given)
