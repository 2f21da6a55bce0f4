"""Tooltips of the inputs several nodes share (the model sockets, the prompt text, the trace and report inputs), written
once so that every node says the same about the same input. ComfyUI's frontend shows an input's tooltip when the
pointer rests on its socket or widget; tests/test_node_schema_polish.py checks that every input of every FillScope node
has one."""

from __future__ import annotations

# the component sockets: what to wire and what the node does with it
CLIP_L = "The CLIP-L text encoder from Load CLIP-L (the pooled vector FLUX is modulated by; SD3 reads its hidden states too)."
CLIP_G = "The CLIP-G text encoder from Load CLIP-G (SD3's second CLIP: hidden states and pooled vector)."
T5 = "The T5-XXL text encoder from Load T5-XXL (the token sequence the transformer attends to)."
QWEN3 = ("The Qwen3 text encoder from Load Qwen3 (Qwen3-4B for klein 4B, Qwen3-8B for klein 9B; a repository's own "
         "text_encoder/ always fits its transformer).")
FLUX_FILL_TRANSFORMER = "The FLUX.1 Fill transformer from Load FLUX.1 Fill Transformer (or a LoRA node after it)."
SD3_TRANSFORMER = "The SD3 / SD3.5 transformer from Load SD3 Transformer (or a LoRA node after it)."
KLEIN_TRANSFORMER = "The FLUX.2 [klein] transformer from Load FLUX.2 [klein] Transformer (or a LoRA node after it)."
SD3_CONTROLNET = ("The SD3 inpainting ControlNet from Load SD3 Inpaint ControlNet: each step it turns the condition "
                  "into residuals added to the transformer's blocks.")
TRACE_VAE = "The VAE from Load VAE of the traced family (flux for FLUX.1 Fill, sd3 for SD3, flux2 for klein)."

# a LoRA node's transformer: patched in a copy, the input stays as it is for other branches
LORA_TRANSFORMER = ("The transformer to patch (a loader's, or another LoRA node's to stack LoRAs); it is not changed: "
                    "the output is a patched copy.")

# text
PROMPT = "The prompt to encode; an empty text is the unconditional (negative) prompt."
CLIP_TEXT = PROMPT + " CLIP reads 77 tokens (start and end included); longer prompts are cut with a warning."

# the text conditions' embeddings
T5_EMBEDS = "T5-XXL Encode's output: the token sequence [1, max_length, 4096]."
CLIP_L_EMBEDS = "CLIP-L Encode's output (FLUX: its pooled vector [1, 768]; SD3: its penultimate hidden state and text_embeds)."
CLIP_G_EMBEDS = "CLIP-G Encode's output: its penultimate hidden state [1, 77, 1280] and projected text_embeds [1, 1280]."

# the samplers
STEPS = "Number of denoising steps (each one transformer call, two with CFG); more is slower and usually finer."
FLUX_TEXT = "The prompt's FLUX text condition (FLUX Prompt, FLUX Text Condition or FLUX Text from CONDITIONING)."
FILL_CONDITION = "FLUX Fill Inpaint Condition's output: the masked image's latent and the mask, packed per token."
SD3_POSITIVE = "The prompt's SD3 text condition (SD3 Prompt, SD3 Text Condition or SD3 Text from CONDITIONING)."
SD3_CONDITION = "SD3 Inpaint Condition's output: the masked image's latent and the mask the ControlNet reads."
CONTROL_START = ("Fraction of the schedule at which the ControlNet starts acting (0 = from the first step); with "
                 "control_end it limits the steps that get its residuals.")
CONTROL_END = "Fraction of the schedule at which the ControlNet stops acting (1 = until the last step)."
KLEIN_POSITIVE = "The prompt's klein text condition (Qwen3 Encode or Klein Text from CONDITIONING)."

# the condition nodes' image and mask (common.mask_inputs)
IMAGE = "The source image to inpaint (ComfyUI IMAGE); its size is kept, sides not multiples of 16 follow size_mode."
INVERT_MASK = "Invert the mask before use (on: 1 = keep, for masks drawn the other way round)."

# the trace nodes
TRACE_WIDTH = "Width in px of the synthetic image the traced step runs on (padded or cropped to the model's multiple)."
TRACE_HEIGHT = "Height in px of the synthetic image the traced step runs on (padded or cropped to the model's multiple)."
TRACE_PROMPT = "The prompt the traced step encodes (its token counts appear in the report)."
TRACE_PREFIX = ("Where the report goes in ComfyUI's output folder: folders and a file name stem (a counter is added, "
                "so every run writes a new report).")
REPORT_PREFIX = ("Where the shape record goes in ComfyUI's output folder: folders and a file name stem (a counter is "
                 "added, so every run writes new .json and .txt files).")

# Synthetic Image + Mask
SYNTHETIC_WIDTH = "Width in px of the test image and its mask."
SYNTHETIC_HEIGHT = "Height in px of the test image and its mask."

