"""Text encoding nodes: one prompt box per prompt (FLUX Prompt, SD3 Prompt; klein's Qwen3 Encode), and the stages they
are made of as separate nodes for inspection: CLIP-L, CLIP-G, T5-XXL and the FLUX and SD3 text conditions."""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.pipelines.klein import QWEN3_MAX_LENGTH, encode_prompt
from ..fillscope.pipelines.sd3_controlnet import T5_MAX_LENGTH as SD3_T5_MAX_LENGTH
from ..fillscope.text import (
    CLIP_MAX_LENGTH,
    concat_batch,
    encode_clip,
    encode_clip_l,
    encode_t5,
    flux_text_condition,
    sd3_text_condition,
    split_prompts,
)
from . import common as c
from . import tooltips as tips
from .base import FillScopeNode


class CLIPLEncode(FillScopeNode):
    title = "CLIP-L encode"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeCLIPLEncode",
            display_name="CLIP-L Encode",
            category=c.CATEGORY + "/text",
            description=(
                "Tokenises to 77 tokens and encodes with CLIP-L: pooled (EOS) vector for FLUX; penultimate hidden "
                "state and projected text_embeds for SD3."
            ),
            inputs=[c.ClipL.Input("clip_l", tooltip=tips.CLIP_L),
                    io.String.Input("text", multiline=True, default="", tooltip=tips.CLIP_TEXT)],
            outputs=[c.ClipEmbeds.Output("clip_embeds", display_name="clip_embeds"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, clip_l, text):
        out = encode_clip_l(clip_l, text)
        record_clip(rec, "clip_l", out)
        return out


def record_clip(rec, prefix, out) -> None:
    rec.tensor(f"{prefix}.input_ids", out.input_ids, "input")
    rec.tensor(f"{prefix}.last_hidden", out.last_hidden)
    rec.tensor(f"{prefix}.penultimate", out.penultimate)
    rec.tensor(f"{prefix}.pooled", out.pooled)
    if out.text_embeds is not None:
        rec.tensor(f"{prefix}.text_embeds", out.text_embeds)
    else:
        rec.note("no text projection in these weights: text_embeds (SD3's pooled input) unavailable")
    rec.fact("prompt tokens (with start/end)", f"{min(out.given_tokens, CLIP_MAX_LENGTH)} of {CLIP_MAX_LENGTH}")
    if out.truncated:
        rec.warn(f"prompt truncated to {CLIP_MAX_LENGTH} CLIP tokens ({out.given_tokens} given)")


class CLIPGEncode(FillScopeNode):
    title = "CLIP-G encode"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeCLIPGEncode",
            display_name="CLIP-G Encode",
            category=c.CATEGORY + "/text",
            description="Tokenises to 77 tokens (padded with '!') and encodes with CLIP-G: penultimate hidden state and text_embeds.",
            inputs=[c.ClipG.Input("clip_g", tooltip=tips.CLIP_G),
                    io.String.Input("text", multiline=True, default="", tooltip=tips.CLIP_TEXT)],
            outputs=[c.ClipGEmbeds.Output("clip_g_embeds", display_name="clip_g_embeds"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, clip_g, text):
        out = encode_clip(clip_g, text)
        record_clip(rec, "clip_g", out)
        return out


class T5Encode(FillScopeNode):
    title = "T5-XXL encode"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeT5Encode",
            display_name="T5-XXL Encode",
            category=c.CATEGORY + "/text",
            description="Tokenises to max_length tokens (FLUX: 512, SD3: 256) and encodes with T5-XXL.",
            inputs=[
                c.T5.Input("t5", tooltip=tips.T5),
                io.String.Input("text", multiline=True, default="",
                                tooltip=tips.PROMPT + " T5 reads up to max_length tokens; longer prompts are cut with a "
                                                      "warning."),
                io.Int.Input("max_length", default=512, min=1, max=512, tooltip="FLUX.1 [dev] uses 512, SD3 256."),
            ],
            outputs=[c.T5Embeds.Output("t5_embeds", display_name="t5_embeds"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, t5, text, max_length):
        out = encode_t5(t5, text, max_length)
        record_t5(rec, out, max_length)
        return out


def record_t5(rec, out, max_length) -> None:
    rec.tensor("t5.input_ids", out.input_ids, "input")
    rec.tensor("t5.hidden", out.hidden)
    rec.fact("prompt tokens (with EOS)", f"{out.real_tokens} of {max_length}")
    if out.real_tokens >= max_length:
        rec.warn(f"prompt truncated to {max_length} T5 tokens")


class FluxTextCondition(FillScopeNode):
    title = "FLUX text condition"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxTextCondition",
            display_name="FLUX Text Condition",
            category=c.CATEGORY + "/text",
            description="FLUX reads the T5 sequence (joint attention) and the CLIP-L pooled vector (modulation).",
            inputs=[c.T5Embeds.Input("t5_embeds", tooltip=tips.T5_EMBEDS),
                    c.ClipEmbeds.Input("clip_embeds", tooltip=tips.CLIP_L_EMBEDS)],
            outputs=[c.FluxText.Output("flux_text", display_name="flux_text"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, t5_embeds, clip_embeds):
        cond = flux_text_condition(t5_embeds, clip_embeds)
        record_flux_text(rec, cond)
        return cond


def record_flux_text(rec, cond) -> None:
    rec.tensor("encoder_hidden_states", cond.t5_hidden)
    rec.tensor("pooled_projections", cond.pooled)
    rec.tensor("txt_ids", cond.txt_ids)


class SD3TextCondition(FillScopeNode):
    title = "SD3 text condition"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3TextCondition",
            display_name="SD3 Text Condition",
            category=c.CATEGORY + "/text",
            description=(
                "SD3's joint context: CLIP-L ++ CLIP-G penultimate states (768 + 1280), zero-padded to 4096, then T5 "
                "tokens after them -> [1, 77 + 256, 4096]; pooled = L ++ G text_embeds -> [1, 2048]. Build one for "
                "the prompt and one for the negative prompt."
            ),
            inputs=[c.ClipEmbeds.Input("clip_l_embeds", tooltip=tips.CLIP_L_EMBEDS),
                    c.ClipGEmbeds.Input("clip_g_embeds", tooltip=tips.CLIP_G_EMBEDS),
                    c.T5Embeds.Input("t5_embeds", tooltip=tips.T5_EMBEDS)],
            outputs=[c.SD3Text.Output("sd3_text", display_name="sd3_text"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, clip_l_embeds, clip_g_embeds, t5_embeds):
        return sd3_condition(rec, clip_l_embeds, clip_g_embeds, t5_embeds)


def sd3_condition(rec, clip_l_embeds, clip_g_embeds, t5_embeds):
    """SD3's text condition from the three encodings, recorded."""
    cond = sd3_text_condition(clip_l_embeds, clip_g_embeds, t5_embeds, observe=rec.observe)
    rec.tensor("joint_context", cond.context)
    rec.tensor("pooled", cond.pooled)
    if t5_embeds.hidden.shape[1] != SD3_T5_MAX_LENGTH:
        rec.note(f"T5 length {t5_embeds.hidden.shape[1]} (SD3 uses {SD3_T5_MAX_LENGTH})")
    return cond


# ---- several prompts in one box (fillscope.text.split_prompts), for the three prompt boxes below ---------------

SEVERAL_PROMPTS_TOOLTIP = (
    "\n\nSeveral regions (Crop For Inpaint with regions) or images: one prompt per region, separated by a line "
    "holding only ---, in the order of the crop node's boxes: image by image, and in each image its regions top to "
    "bottom by the top edge of each hole, equal tops left to right (the crop node's notes list them in this order: "
    "region 0, region 1, ...; an image with nothing to repaint has no crop and takes no prompt). Each prompt is "
    "encoded on its own and they travel as one batch, prompt k for crop k; the sampler needs one prompt, or exactly "
    "one per crop. An empty prompt between lines --- is refused."
)


def prepare_prompts(rec, **inputs):
    """The prompt box's text split into its prompts (split_prompts) before any model is placed, so an empty prompt
    between lines --- is refused without moving weights; the number of prompts is recorded when there are several."""
    n = len(split_prompts(inputs["text"]))
    if n > 1:
        rec.fact("prompts", n)
    return inputs


class Qwen3Encode(FillScopeNode):
    title = "Qwen3 encode"
    table = "klein"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeQwen3Encode",
            display_name="Qwen3 Encode",
            category=c.CATEGORY + "/text",
            description=(
                "FLUX.2 [klein]'s text condition: the prompt in Qwen3's chat template (thinking off), padded to 512 "
                "tokens; hidden states 9, 18, 27 stacked per token -> [1, 512, 7680] (Qwen3-4B) / [1, 512, 12288] "
                "(Qwen3-8B). Wire a second one (an empty prompt) to the sampler's negative for base models."
            ),
            inputs=[c.Qwen3.Input("qwen3", tooltip=tips.QWEN3),
                    io.String.Input("text", multiline=True, default="",
                                    tooltip="The prompt: what to paint in the mask, or (edit) what to change."
                                            + SEVERAL_PROMPTS_TOOLTIP)],
            outputs=[c.KleinText.Output("klein_text", display_name="klein_text"), c.shapes_output()],
        )

    @classmethod
    def prepare(cls, rec, **inputs):
        return prepare_prompts(rec, **inputs)

    @classmethod
    def run(cls, rec, qwen3, text):
        out = encode_prompt(qwen3, text, observe=rec.observe)
        enc = out.encoded
        rec.fact("prompt tokens (chat template)", f"{min(enc.real_tokens, QWEN3_MAX_LENGTH)} of {QWEN3_MAX_LENGTH}")
        if enc.truncated:
            rec.warn(f"prompt truncated to {QWEN3_MAX_LENGTH} Qwen3 tokens ({enc.given_tokens} with the chat template)")
        return out


# ---- one prompt box per prompt: the encoders and the condition above in one node, recorded as they record ------


PROMPT_TOOLTIP = "The prompt: what to paint in the mask. Typed once; every text encoder reads it."


class FluxPrompt(FillScopeNode):
    title = "FLUX prompt"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxPrompt",
            display_name="FLUX Prompt",
            category=c.CATEGORY + "/text",
            description=(
                "One prompt box for FLUX.1 Fill: the text is encoded by CLIP-L (pooled vector, modulation) and T5-XXL "
                "(token sequence, joint attention) and joined into the FLUX text condition. The same as CLIP-L Encode + "
                "T5-XXL Encode + FLUX Text Condition, which stay available to inspect each stage on its own."
            ),
            inputs=[
                c.ClipL.Input("clip_l", tooltip=tips.CLIP_L),
                c.T5.Input("t5", tooltip=tips.T5),
                io.String.Input("text", multiline=True, default="", tooltip=PROMPT_TOOLTIP + SEVERAL_PROMPTS_TOOLTIP),
                io.Int.Input("max_length", default=512, min=1, max=512, tooltip="T5 tokens; FLUX.1 [dev] uses 512."),
            ],
            outputs=[c.FluxText.Output("flux_text", display_name="flux_text"), c.shapes_output()],
        )

    @classmethod
    def prepare(cls, rec, **inputs):
        return prepare_prompts(rec, **inputs)

    @classmethod
    def run(cls, rec, clip_l, t5, text, max_length):
        prompts = split_prompts(text)
        clip = concat_batch([encode_clip_l(clip_l, p) for p in prompts])
        record_clip(rec, "clip_l", clip)
        t5_out = concat_batch([encode_t5(t5, p, max_length) for p in prompts])
        record_t5(rec, t5_out, max_length)
        cond = flux_text_condition(t5_out, clip)
        record_flux_text(rec, cond)
        return cond


class SD3Prompt(FillScopeNode):
    title = "SD3 prompt"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3Prompt",
            display_name="SD3 Prompt",
            category=c.CATEGORY + "/text",
            description=(
                "One prompt box for SD3 / SD3.5: the text is encoded by CLIP-L, CLIP-G and T5-XXL (256 tokens) and "
                "joined into SD3's joint context [1, 333, 4096] and pooled vector [1, 2048]. Use one for the prompt and "
                "one for the negative prompt. The same as the three Encode nodes + SD3 Text Condition."
            ),
            inputs=[
                c.ClipL.Input("clip_l", tooltip=tips.CLIP_L),
                c.ClipG.Input("clip_g", tooltip=tips.CLIP_G),
                c.T5.Input("t5", tooltip=tips.T5),
                io.String.Input("text", multiline=True, default="",
                                tooltip=PROMPT_TOOLTIP + " On the sampler's negative input: what to avoid."
                                + SEVERAL_PROMPTS_TOOLTIP),
            ],
            outputs=[c.SD3Text.Output("sd3_text", display_name="sd3_text"), c.shapes_output()],
        )

    @classmethod
    def prepare(cls, rec, **inputs):
        return prepare_prompts(rec, **inputs)

    @classmethod
    def run(cls, rec, clip_l, clip_g, t5, text):
        prompts = split_prompts(text)
        clip_l_out = concat_batch([encode_clip_l(clip_l, p) for p in prompts])
        clip_g_out = concat_batch([encode_clip(clip_g, p) for p in prompts])
        record_clip(rec, "clip_l", clip_l_out)
        record_clip(rec, "clip_g", clip_g_out)
        t5_out = concat_batch([encode_t5(t5, p, SD3_T5_MAX_LENGTH) for p in prompts])
        record_t5(rec, t5_out, SD3_T5_MAX_LENGTH)
        return sd3_condition(rec, clip_l_out, clip_g_out, t5_out)


NODES = [CLIPLEncode, CLIPGEncode, T5Encode, FluxTextCondition, SD3TextCondition, Qwen3Encode, FluxPrompt, SD3Prompt]
