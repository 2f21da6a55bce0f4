"""ComfyUI's own CONDITIONING into FillScope's samplers: keep ComfyUI's CLIP loaders and prompt tools (CLIPTextEncode,
CLIPTextEncodeFlux, CLIPTextEncodeSD3, prompt stylers, ConditioningConcat ...) and sample with FillScope.

A CONDITIONING (ComfyUI 0.3.75) is a list of entries [tensor, {"pooled_output": tensor, ...}], one per encode;
ConditioningCombine joins lists, the Set* nodes add keys. ComfyUI's sampler calls the tensor `cross_attn`.

- FLUX (DualCLIPLoader type flux, then CLIPTextEncode or CLIPTextEncodeFlux): cross_attn = T5-XXL's last hidden state
  [B, L, 4096] with L = 256 for prompts up to 256 T5 tokens and longer for longer prompts (ComfyUI never truncates);
  pooled_output = CLIP-L's pooler output [B, 768], unprojected, as FLUX reads it. CLIPTextEncodeFlux and FluxGuidance
  add "guidance" (FillScope's sampler has its own guidance input: that one is used).
- SD3 (TripleCLIPLoader, or an SD3 checkpoint with its encoders, then CLIPTextEncode or CLIPTextEncodeSD3):
  cross_attn = cat(CLIP-L ++ CLIP-G penultimate states [B, 77, 2048] zero-padded to 4096, T5-XXL [B, N, 4096])
  with N = 77 for short prompts; pooled_output = CLIP-L pooler output ++ CLIP-G text_embeds [B, 2048].
  CLIPTextEncodeSD3 with empty_padding none and an empty box leaves that encoder's tokens out.
- FLUX.2 [klein] (a ComfyUI that supports klein: CLIPLoader of its Qwen3-4B / -8B file, then CLIPTextEncode):
  cross_attn = Qwen3 hidden states 9, 18, 27 concatenated per token [B, 512, 3 x hidden] (7680 / 12288: the klein
  transformers' joint_attention_dim), the chat-templated prompt padded on the right with Qwen3's pad token to 512 (and
  never truncated); pooled_output None, attention_mask the tokens' mask. ComfyUI 0.3.75 has no klein encoder: every
  Qwen3 file loads as Z-Image's (one layer, the last-but-one, 2560 wide for Qwen3-4B), which klein cannot read.

Deliberate differences from FillScope's own encoders (which follow diffusers), recorded on the node as facts:
- length: ComfyUI pads FLUX's T5 prompt to 256 tokens and SD3's to 77; FillScope (and diffusers) to 512 and 256.
  Both samplers take any length (FLUX's txt_ids follow it), but T5 attends to its padding, so the same prompt
  encodes a little differently at another padded length;
- SD3's pooled CLIP-L part: ComfyUI takes the unprojected pooler output, diffusers the projected text_embeds. SD3's
  single files carry no CLIP-L projection, and diffusers' own single-file loader fills it with the identity
  (torch.eye): with those weights the two are the same vector. A CLIP-L whose projection is not the identity gives
  different pooled vectors (the tiny test models show it).
The widths tell the families apart: 4096 + 768 is FLUX's, 4096 + 2048 SD3's; those of SD1/SD2/SDXL are named;
other widths pass with a warning (the sampler checks them against its transformer before the transformer moves).
klein's text has no pooled vector and is 3 x a Qwen3 hidden size wide: one layer's width (not a multiple of 3, or a
shipped Qwen3's hidden size) is refused.
"""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.errors import FillScopeInputError
from ..fillscope.pipelines.klein import QWEN3_MAX_LENGTH, VARIANTS, KleinText
from ..fillscope.specs import KLEIN_TEXT_LAYERS, shipped_config
from ..fillscope.text import FluxTextCondition, SD3TextCondition
from . import common as c
from .base import FillScopeNode

SOURCE = "from ComfyUI CONDITIONING"
INPUT = "conditioning"
FLUX, SD3, KLEIN = "FLUX", "SD3", "klein"
WIDTHS = {FLUX: (4096, 768), SD3: (4096, 2048)}  # (cross_attn channels, pooled_output channels)
FAMILIES = {
    (4096, 768): "a FLUX.1 conditioning (T5-XXL sequence + CLIP-L pooled)",
    (4096, 2048): "an SD3 / SD3.5 conditioning (CLIP-L + CLIP-G + T5-XXL)",
    (768, 768): "an SD1.x conditioning (CLIP-L alone)",
    (1024, 1024): "an SD2.x conditioning (OpenCLIP-H)",
    (2048, 1280): "an SDXL conditioning (CLIP-L + CLIP-G, no T5)",
    (1280, 1280): "an SDXL refiner conditioning (CLIP-G alone)",
}
ENCODE = {
    FLUX: "encode for FLUX: DualCLIPLoader (clip_l + t5xxl, type flux) -> CLIPTextEncode or CLIPTextEncodeFlux",
    SD3: "encode for SD3: TripleCLIPLoader (clip_l + clip_g + t5xxl, or the CLIP of an SD3 checkpoint that includes "
         "its text encoders) -> CLIPTextEncode or CLIPTextEncodeSD3",
    KLEIN: "encode for klein: FillScope Load Qwen3 -> FillScope Qwen3 Encode (klein's three layers; wire it straight to "
           "the Klein Inpaint & Edit Sampler), or, in a ComfyUI that supports FLUX.2 [klein], CLIPLoader (its Qwen3 file, klein's "
           "type) -> CLIPTextEncode",
}
ADAPTER = {FLUX: "FillScope FLUX Text from CONDITIONING", SD3: "FillScope SD3 Text from CONDITIONING",
           KLEIN: "FillScope Klein Text from CONDITIONING"}
T5_PADDING = {FLUX: (256, 512), SD3: (77, 256)}  # (ComfyUI's, FillScope's and diffusers') T5 padded length

# Keys ComfyUI's conditioning nodes set that FillScope's samplers do not apply, by what they do in ComfyUI.
REGION = ("regional conditioning (ConditioningSetArea / ConditioningSetMask): FillScope conditions the whole image, and "
          "where it repaints is the condition node's mask")
NOT_APPLIED = {
    **dict.fromkeys(("area", "strength", "set_area_to_bounds", "mask", "mask_strength"), REGION),
    **dict.fromkeys(("start_percent", "end_percent"), "a timestep range (ConditioningSetTimestepRange): FillScope "
                                                      "applies the text at every step"),
    **dict.fromkeys(("concat_latent_image", "concat_mask", "concat_image", "noise_augmentation"),
                    "inpaint latents (InpaintModelConditioning): FillScope's condition node encodes the image and mask "
                    "itself"),
    **dict.fromkeys(("control", "control_apply_to_uncond"), "a ComfyUI ControlNet (Apply ControlNet): FillScope's "
                                                            "samplers do not run it"),
    **dict.fromkeys(("attention_mask", "attention_mask_img_shape"), "T5's attention mask: FillScope's samplers let "
                                                                    "every text token take part, as diffusers does"),
    "hooks": "hooks (CLIP / model hooks): FillScope's samplers do not run them",
    "reference_latents": "reference latents (ReferenceLatent): FillScope's FLUX Fill and SD3 samplers take none",
}
NO_EFFECT = {"strength": 1.0, "start_percent": 0.0, "end_percent": 1.0}  # values that change nothing in ComfyUI either


def _fail(problem: str, fix: str):
    raise FillScopeInputError(INPUT, problem, fix)


def _shape(t) -> str:
    return str(list(t.shape)) if hasattr(t, "shape") else type(t).__name__


def _several_entries(entries: list, family: str) -> str:
    """The fix for a CONDITIONING of several entries, after what made them."""
    keys = {k for e in entries if isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[1], dict) for k in e[1]}
    if keys & {"start_percent", "end_percent"}:
        return ("FillScope applies one text condition at every step: wire the CLIPTextEncode output straight in (for an "
                "SD3 negative made of ConditioningSetTimestepRange + ConditioningZeroOut halves, use one of them: "
                "ConditioningZeroOut alone gives the empty condition).")
    if keys & {"area", "mask"}:
        return "regional prompts cannot be applied: wire one CLIPTextEncode, and paint where to repaint as the mask."
    return ("join the prompts into one entry with ConditioningConcat (one token sequence) or ConditioningAverage instead "
            f"of ConditioningCombine, or wire one {ENCODE[family].split('-> ')[-1]} output.")


def read_entry(conditioning, family: str, pooled_optional: bool = False):
    """(cross_attn [B,L,W], pooled_output [B,P], the entry's other keys) of a one-entry CONDITIONING, checked.
    `pooled_optional`: a family that reads no pooled vector (klein) takes an entry whose pooled_output is None."""
    import torch

    fix = ENCODE[family] + "."
    if not isinstance(conditioning, (list, tuple)):
        _fail(f"is {type(conditioning).__name__}, not a CONDITIONING (a list of [tensor, {{'pooled_output': ...}}] "
              "entries).", fix)
    if not conditioning:
        _fail("is empty (a list of no entries): there is no text to condition on.", fix)
    if len(conditioning) > 1:
        _fail(f"holds {len(conditioning)} entries (ConditioningCombine, or a timestep range / area / hook schedule): "
              "ComfyUI's sampler blends them step by step or area by area; FillScope's samplers apply one text "
              "condition to the whole image at every step, and never pick one silently.",
              _several_entries(list(conditioning), family))
    entry = conditioning[0]
    if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], dict)):
        _fail(f"its entry is {type(entry).__name__}, not [tensor, {{...}}].", fix)
    tensor, extras = entry[0], dict(entry[1])
    pooled = extras.pop("pooled_output", None)
    if not isinstance(tensor, torch.Tensor) or tensor.ndim != 3 or not tensor.is_floating_point():
        _fail(f"its tensor (cross_attn) is {_shape(tensor)}; a text encoder gives [batch, tokens, channels].", fix)
    if pooled is None and not pooled_optional:
        _fail(f"has no pooled_output (keys: {', '.join(sorted(entry[1])) or 'none'}): it was made by an encoder without "
              f"a CLIP pooled vector (a T5-only CLIP, or another model family's text encoder), and {family} reads one.",
              fix)
    if pooled is not None:
        if not isinstance(pooled, torch.Tensor) or pooled.ndim != 2 or not pooled.is_floating_point():
            _fail(f"its pooled_output is {_shape(pooled)}; a CLIP pooled vector is [batch, channels].", fix)
        if pooled.shape[0] != tensor.shape[0] and pooled.shape[0] != 1:
            _fail(f"cross_attn has batch {tensor.shape[0]} but pooled_output {pooled.shape[0]}.", fix)
    for key, t in (("cross_attn", tensor), ("pooled_output", pooled)):
        if t is None:
            continue
        if t.device.type != "meta":
            finite = torch.isfinite(t)
            if not bool(finite.all()):
                _fail(f"its {key} holds {int(finite.numel() - finite.sum()):,} NaN or inf values of {t.numel():,}: "
                      "the encoder overflowed (T5-XXL in fp16 does on some prompts).",
                      "load the text encoders in bf16/fp32 or use the t5xxl fp8 file, and encode again.")
    return tensor, pooled, extras


def check_family(tensor, pooled, family: str, rec) -> None:
    """Refuse a conditioning whose widths are another known family's; warn on widths no family has."""
    widths = (tensor.shape[-1], pooled.shape[-1])
    want = WIDTHS[family]
    if widths == want:
        return
    layout = f"cross_attn [B, L, {widths[0]}] + pooled_output [B, {widths[1]}]"
    reads = f"{family} reads [B, L, {want[0]}] + [B, {want[1]}]"
    if widths in FAMILIES:
        other = next((f for f, w in WIDTHS.items() if w == widths), None)
        _fail(f"is {FAMILIES[widths]}: {layout}; {reads}.",
              (f"wire it to {ADAPTER[other]} and that family's sampler, or " if other else "")
              + ENCODE[family] + ".")
    rec.warn(f"{layout} are not {family}'s widths ({want[0]} + {want[1]}); the sampler checks them against its "
             "transformer before the transformer moves")


def record_keys(rec, extras: dict, used: tuple = ()) -> None:
    """Every key of the entry besides pooled_output: what FillScope does with it, never silently."""
    ignored = {}
    for key, value in sorted(extras.items()):
        if key in used:
            continue
        shown = f"{key}={value}" if isinstance(value, (int, float, bool)) else key
        if key in NO_EFFECT and value == NO_EFFECT[key]:
            rec.note(f"CONDITIONING key {shown} changes nothing at this value (not applied)")
            continue
        ignored.setdefault(NOT_APPLIED.get(key, "not applied by FillScope's samplers"), []).append(shown)
    for why, keys in ignored.items():
        rec.warn(f"CONDITIONING key{'s' if len(keys) > 1 else ''} {', '.join(keys)} not applied: {why}")


def record_common(rec, tensor, extras: dict) -> None:
    rec.fact("source", "ComfyUI CONDITIONING, 1 entry")
    rec.fact("CONDITIONING keys", ", ".join(["pooled_output", *sorted(extras)]))
    rec.fact("batch", tensor.shape[0])
    if tensor.device.type != "meta" and not bool(tensor.any()):
        rec.note("cross_attn is all zeros (ConditioningZeroOut): an empty condition, not the encoding of an empty "
                 "prompt")


def expand_pooled(tensor, pooled, rec):
    if pooled.shape[0] == tensor.shape[0]:
        return pooled
    rec.note(f"pooled_output of batch 1 repeated for the {tensor.shape[0]} prompts of cross_attn")
    return pooled.expand(tensor.shape[0], -1)


def read_conditioning(rec, conditioning, family: str):
    """(cross_attn, pooled_output at cross_attn's batch, the entry's other keys) of a one-entry CONDITIONING for
    `family`: read and checked (read_entry), its widths against the family's (check_family), and recorded."""
    tensor, pooled, extras = read_entry(conditioning, family)
    check_family(tensor, pooled, family, rec)
    pooled = expand_pooled(tensor, pooled, rec)
    record_common(rec, tensor, extras)
    return tensor, pooled, extras


class FluxTextFromConditioning(FillScopeNode):
    title = "FLUX text from CONDITIONING"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxTextFromConditioning",
            display_name="FLUX Text from CONDITIONING",
            category=c.CATEGORY + "/text",
            description=(
                "ComfyUI's CONDITIONING (CLIPTextEncode / CLIPTextEncodeFlux on a FLUX CLIP) as FillScope's FLUX text: "
                "the T5-XXL sequence [1, L, 4096] and the CLIP-L pooled vector [1, 768], unchanged. One entry only; "
                "the sampler's guidance input is the guidance used."
            ),
            inputs=[io.Conditioning.Input(INPUT, tooltip="From CLIPTextEncode or CLIPTextEncodeFlux with a FLUX CLIP "
                                                         "(DualCLIPLoader: clip_l + t5xxl, type flux).")],
            outputs=[c.FluxText.Output("flux_text", display_name="flux_text"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, conditioning):
        tensor, pooled, extras = read_conditioning(rec, conditioning, FLUX)
        record_t5_length(rec, tensor.shape[1])
        guidance = extras.get("guidance")
        if guidance is not None:
            rec.fact("guidance in the CONDITIONING", guidance)
            rec.note(f"the CONDITIONING's guidance {guidance} (CLIPTextEncodeFlux / FluxGuidance) is not used: FLUX "
                     "Fill's guidance is the FLUX Fill Inpaint Sampler's guidance input (FLUX.1 Fill [dev] is tuned "
                     "for 30)")
        record_keys(rec, extras, used=("guidance",))
        keys = f"{SOURCE} (cross_attn)", f"{SOURCE} (pooled_output)"
        rec.given("t5.hidden", tensor, keys[0])
        rec.given("clip_l.pooled", pooled, keys[1])
        cond = FluxTextCondition(t5_hidden=tensor, pooled=pooled,
                                 origin={"source": "ComfyUI CONDITIONING", "guidance": guidance})
        rec.given("encoder_hidden_states", tensor, keys[0], "output")
        rec.given("pooled_projections", pooled, keys[1], "output")
        rec.tensor("txt_ids", cond.txt_ids)
        return cond


def record_t5_length(rec, tokens: int) -> None:
    theirs, ours = T5_PADDING[FLUX]
    rec.fact("T5 tokens", tokens)
    if tokens != ours:
        rec.note(f"{tokens} T5 tokens: ComfyUI pads FLUX's T5 prompt to {theirs} (longer prompts grow, never "
                 f"truncated), FillScope's T5 Encode and diffusers to {ours}; the sampler takes any length")


def split_context(context, pooled_width: int):
    """(CLIP tokens, T5 tokens) of an SD3 joint context, read off the zero padding: CLIP-L ++ CLIP-G fill the first
    pooled_width channels (768 + 1280 = 2048) and are zero above them; T5's tokens are not. None when the context
    is as wide as the pooled vector (nothing padded), all zeros, or on the meta device."""
    if context.device.type == "meta" or context.shape[-1] <= pooled_width or not bool(context.any()):
        return None
    padded = (context[0, :, pooled_width:] == 0).all(dim=-1)
    clip = int(padded.long().cumprod(0).sum())  # leading zero-padded tokens
    return clip, context.shape[1] - clip, int(padded.sum()) - clip


class SD3TextFromConditioning(FillScopeNode):
    title = "SD3 text from CONDITIONING"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3TextFromConditioning",
            display_name="SD3 Text from CONDITIONING",
            category=c.CATEGORY + "/text",
            description=(
                "ComfyUI's CONDITIONING (CLIPTextEncode / CLIPTextEncodeSD3 on an SD3 CLIP) as FillScope's SD3 text: "
                "the joint context [1, 77 + T5 tokens, 4096] and the pooled vector [1, 2048], unchanged. One entry "
                "only; use one for the prompt and one for the negative prompt."
            ),
            inputs=[io.Conditioning.Input(INPUT, tooltip="From CLIPTextEncode or CLIPTextEncodeSD3 with an SD3 CLIP "
                                                         "(TripleCLIPLoader, or an SD3 checkpoint with its encoders).")],
            outputs=[c.SD3Text.Output("sd3_text", display_name="sd3_text"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, conditioning):
        context, pooled, extras = read_conditioning(rec, conditioning, SD3)
        rec.fact("context tokens", context.shape[1])
        split = split_context(context, pooled.shape[-1])
        if split is not None:
            clip, t5, later = split
            rec.fact("CLIP-L/G tokens (zero above channel %d)" % pooled.shape[-1], clip)
            rec.fact("T5-XXL tokens", t5)
            for name, lo, n in (("clip_lg.padded", 0, clip), ("t5.hidden", clip, t5)):
                if n:
                    rec.given(name, context[:, lo:lo + n], f"{SOURCE} (cross_attn tokens {lo}-{lo + n - 1})")
            theirs, ours = T5_PADDING[SD3]
            if t5 and t5 != ours:
                rec.note(f"{t5} T5 tokens after the CLIP ones: ComfyUI pads SD3's T5 prompt to {theirs} (longer prompts "
                         f"grow), FillScope's SD3 text and diffusers to {ours}; the sampler takes any length, and a "
                         "negative of another length gets its own denoiser pass")
            if not clip:
                rec.note("no CLIP tokens: CLIPTextEncodeSD3 left CLIP-L/G out (empty boxes, empty_padding none)")
            if not t5:
                rec.note("no T5 tokens: the CLIP has no T5-XXL, or CLIPTextEncodeSD3 left it out (empty t5xxl box)")
            if later:
                rec.note(f"{later} more zero-padded tokens among the T5 ones (ConditioningConcat of SD3 conditionings?)")
        record_keys(rec, extras)
        rec.given("joint_context", context, f"{SOURCE} (cross_attn)", "output")
        rec.given("pooled", pooled, f"{SOURCE} (pooled_output)", "output")
        return SD3TextCondition(context=context, pooled=pooled, origin={"source": "ComfyUI CONDITIONING"})


# ---- FLUX.2 [klein] ------------------------------------------------------------------------------------------------

LAYERS = len(KLEIN_TEXT_LAYERS)  # klein reads Qwen3 hidden states 9, 18, 27, concatenated per token
STATES = ", ".join(map(str, KLEIN_TEXT_LAYERS))


def _title(variant: str) -> str:
    """'klein-4b' -> 'FLUX.2 [klein] 4B', 'qwen3-8b' -> 'Qwen3-8B'."""
    name, size = variant.rsplit("-", 1)
    return f"FLUX.2 [klein] {size.upper()}" if name == "klein" else f"Qwen3-{size.upper()}"


def klein_text_widths() -> dict[int, tuple[str, str, int]]:
    """{text width: (klein title, its encoder's title, the encoder's hidden size)} from FillScope's shipped configs:
    each klein transformer's joint_attention_dim, which is LAYERS x its Qwen3's hidden size."""
    widths = {}
    for variant, encoder in VARIANTS.items():
        width = shipped_config("klein_transformer", variant)["joint_attention_dim"]
        widths[width] = (_title(variant), _title(encoder), shipped_config("qwen3", encoder)["hidden_size"])
    return widths


# ComfyUI 0.3.75 has no klein text encoder: comfy/sd.py detects every Qwen3 file (q_norm weights) as TEModel.QWEN3_4B
# whatever CLIPLoader's type, and builds Z-Image's encoder (comfy/text_encoders/z_image.py: layer "hidden",
# layer_idx -2, the states out of the last-but-one layer, hidden wide); Lumina 2's Gemma encoders are single-layer too
ONE_LAYER = ("one layer's states (ComfyUI 0.3.75's CLIPLoader loads any Qwen3 file as Z-Image's text encoder, whatever "
             "its type: the last-but-one layer, {hidden} channels; Lumina 2's Gemma encoders are single-layer too)")


def check_klein_width(tensor, pooled, rec) -> None:
    """Refuse a conditioning that cannot be klein's text: another family's (a pooled vector), one layer's states, or
    a width that is not LAYERS equal layers; pass a shipped klein width, warn on any other (the sampler checks it
    against its transformer's joint_attention_dim before the transformer moves)."""
    width, widths = tensor.shape[-1], klein_text_widths()
    shipped = " or ".join(f"{w} ({t[0]}: {LAYERS} x {t[2]} from {t[1]})" for w, t in sorted(widths.items()))
    reads = f"klein reads Qwen3 hidden states {STATES} concatenated per token, {LAYERS} x hidden: {shipped}"
    if pooled is not None:  # a Qwen3 encoder gives no pooled vector (pooled_output None)
        layout = f"cross_attn [B, L, {width}] + pooled_output [B, {pooled.shape[-1]}]"
        family = FAMILIES.get((width, pooled.shape[-1]), "the conditioning of a CLIP with a pooled vector")
        other = next((f for f, w in WIDTHS.items() if w == (width, pooled.shape[-1])), None)
        _fail(f"is {family}: {layout}; {reads}, and no pooled vector.",
              (f"wire it to {ADAPTER[other]} and that family's sampler, or " if other else "") + ENCODE[KLEIN] + ".")
    single = {t[2]: (w, t) for w, t in widths.items()}
    if width in single:
        w, (model, encoder, hidden) = single[width]
        _fail(f"is [B, L, {width}], the width of one {encoder} hidden state: {ONE_LAYER.format(hidden=hidden)}; "
              f"{model} reads {LAYERS} of them concatenated ({STATES}): {LAYERS} x {hidden} = {w} channels.",
              ENCODE[KLEIN] + ".")
    if width % LAYERS:
        _fail(f"is [B, L, {width}]: {width} channels is not {LAYERS} x a hidden size, so it cannot be {LAYERS} "
              f"concatenated layers: it is {ONE_LAYER.format(hidden=width)} or another model's text. {reads}.",
              ENCODE[KLEIN] + ".")
    if width in widths:
        model, encoder, hidden = widths[width]
        rec.fact("text", f"{model}'s: {encoder} hidden states {STATES}, {LAYERS} x {hidden} = {width}")
        return
    rec.warn(f"cross_attn width {width} = {LAYERS} x {width // LAYERS} is not a shipped klein text width ({shipped}); "
             "the sampler checks it against its transformer's joint_attention_dim before the transformer moves")


def pad_klein_length(tensor, rec):
    """The sequence as ComfyUI's Flux2 model reads it (comfy/model_base.py Flux2.extra_conds): shorter than 512 tokens
    left-padded with zero tokens to 512; 512 (what klein's encoders give) and longer unchanged. The sampler's text ids
    then run 0..L-1 over the padded sequence, as ComfyUI's Flux2 builds them, so the transformer sees what ComfyUI's
    would; FillScope's own Qwen3 Encode pads on the right with Qwen3's pad-token states, as diffusers does."""
    import torch

    tokens = tensor.shape[1]
    rec.fact("text tokens (CONDITIONING)", tokens)
    if tokens < QWEN3_MAX_LENGTH:
        pad = QWEN3_MAX_LENGTH - tokens
        rec.note(f"{tokens} tokens left-padded with {pad} zero tokens to {QWEN3_MAX_LENGTH}, as ComfyUI's Flux2 model "
                 f"pads a shorter CONDITIONING (FillScope's Qwen3 Encode and diffusers give {QWEN3_MAX_LENGTH} tokens, "
                 "the prompt followed by Qwen3's pad-token states)")
        return torch.nn.functional.pad(tensor, (0, 0, pad, 0))
    if tokens > QWEN3_MAX_LENGTH:
        rec.note(f"{tokens} tokens, passed whole as ComfyUI passes them (its klein encoder never truncates); "
                 f"FillScope's Qwen3 Encode and diffusers truncate the prompt to {QWEN3_MAX_LENGTH}; the sampler takes "
                 "any length (the text ids follow it)")
    return tensor


KLEIN_KEYS = {  # keys ComfyUI's klein encoding or nodes set, said in klein's terms (record_keys has the others)
    "attention_mask": "Qwen3's padding mask, used inside the encoder: klein's transformer reads every text token, "
                      "padding included, as diffusers' and ComfyUI's Flux2 do (ComfyUI's does not apply it either)",
    "reference_latents": "reference latents (ReferenceLatent): FillScope's klein sampler takes its reference images "
                         "from the condition node (Klein Inpaint Condition's reference, Klein Edit Condition's images)",
    "guidance": "a guidance value (FluxGuidance): klein embeds no guidance; base models use the sampler's guidance "
                "input as CFG",
}


class KleinTextFromConditioning(FillScopeNode):
    title = "klein text from CONDITIONING"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeKleinTextFromConditioning",
            display_name="Klein Text from CONDITIONING",
            category=c.CATEGORY + "/text",
            description=(
                "ComfyUI's CONDITIONING (CLIPTextEncode on a FLUX.2 [klein] CLIP of a ComfyUI that supports klein) as "
                "FillScope's klein text for the Klein Inpaint & Edit Sampler's positive / negative: Qwen3 hidden states 9, 18, 27 "
                "concatenated, [1, 512, 7680] (klein 4B) / [1, 512, 12288] (klein 9B), unchanged; shorter "
                "sequences left-padded with zeros to 512 as ComfyUI's Flux2 model pads them. One entry only; a "
                "single-layer conditioning (Z-Image / Lumina 2) is refused."
            ),
            inputs=[io.Conditioning.Input(
                INPUT, tooltip="From CLIPTextEncode with a FLUX.2 [klein] CLIP (a ComfyUI that supports klein: "
                               "CLIPLoader of qwen_3_4b / qwen_3_8b as klein's type). ComfyUI 0.3.75 loads a Qwen3 "
                               "file as Z-Image's single-layer encoder, which klein cannot read.")],
            outputs=[c.KleinText.Output("klein_text", display_name="klein_text"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, conditioning):
        tensor, pooled, extras = read_entry(conditioning, KLEIN, pooled_optional=True)
        check_klein_width(tensor, pooled, rec)
        record_common(rec, tensor, extras)
        embeds = pad_klein_length(tensor, rec)
        said = [k for k in KLEIN_KEYS if k in extras]
        for key in said:
            (rec.note if key == "attention_mask" else rec.warn)(f"CONDITIONING key {key} not applied: {KLEIN_KEYS[key]}")
        record_keys(rec, extras, used=tuple(said))
        text = KleinText(embeds, None)  # no Qwen3Output: the tokens and their mask stayed in ComfyUI's encoder
        rec.given("prompt_embeds", embeds, f"{SOURCE} (cross_attn)" + (" left-padded" if embeds is not tensor else ""),
                  "output")
        rec.tensor("txt_ids", text.text_ids)
        return text


NODES = [FluxTextFromConditioning, SD3TextFromConditioning, KleinTextFromConditioning]
