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


# the tiled nodes (nodes/tiled.py: large images by overlapping tiles)
TILED_IMAGE = ("The large image to inpaint (ComfyUI IMAGE); the output has its size. Sides need not be multiples of "
               "16: a tile that holds a whole side is padded and cropped back.")
TILED_MASK = ("1 = repaint (ComfyUI's LoadImage mask is 1 - alpha), the image's size. Only tiles that meet the mask "
              "grown by the overlap are sampled; every pixel outside it stays the source's exactly.")
TILED_MASK_KLEIN = (TILED_MASK + " Optional: without a mask every pixel is repainted, each tile next to its own source "
                    "as the reference (an edit of the whole picture).")
TILED_PROMPT = "The prompt every tile is sampled with (encoded once per tile in mode independent, once in shared)."
TILED_NEGATIVE = "The negative prompt for classifier-free guidance (an empty text is the unconditional prompt, as diffusers)."
TILE = ("A tile's side in px, a multiple of 16 (one token), 256 to 4096. 1024 is FLUX's and SD3's native size (4096 "
        "tokens); 512 as in the klein document. An image that fits in one tile is run untiled.")
OVERLAP = ("The fraction of a tile shared with its neighbour (0 to 0.5, default 0.15): the tiles' images are blended "
           "with ramp weights over it, so a wider overlap hides seams better and samples more tiles.")
TILED_MODE = ("independent: each tile sampled on its own by the family's whole pipeline, then blended (all "
              "families). shared: one sampler over the whole latent that averages the overlapping tiles' predictions "
              "every step (MultiDiffusion), so neighbours agree while they are sampled; a family the engine cannot "
              "run shared is refused with a message.")
TILED_POISSON = ("Mode independent: after the ramp blend, re-solve the tiles' overlaps in the gradient domain (Poisson, "
                 "each pixel drawn by the tile that weighs most there), so no band shows where one tile fades into "
                 "the next; only inside the mask. Off: the plain ramp blend. Mode shared refuses it (no seam).")
TILED_SEED = "The initial noise; every tile uses this seed (the same seed gives the same image)."
TILED_DENOISE = "Below 1: start each tile from the noised source image and run the last steps only."
TILED_VAE_FLUX = "The FLUX.1 VAE from Load VAE (kind flux): encodes each tile's masked image and decodes the result."
TILED_VAE_SD3 = "The SD3 VAE from Load VAE (kind sd3): encodes each tile's masked image and decodes the result."
TILED_VAE_KLEIN = "The FLUX.2 VAE from Load VAE (kind flux2): encodes each tile's source and decodes the result."
