"""Test-only ComfyUI nodes for tests/test_server_klein_conditioning.py (this folder is an extra custom_nodes path of the
test servers); never part of the pack.

- KleinCondTestTextToConditioning: FillScope's klein text as the CONDITIONING CLIPTextEncode makes from a Qwen3
  encoder ([[tensor, {"pooled_output": None, "attention_mask": mask}]]: ComfyUI's SDClipModel returns no pooled vector
  for a Qwen3 and its attention mask as an extra key), the tensor itself unchanged; `tokens` > 0 keeps only the first
  `tokens` tokens (a sequence shorter than 512, as no ComfyUI klein encoder gives one, to exercise the padding).
- KleinCondTestTinyZImageCLIP: ComfyUI 0.3.75's own Z-Image text encoder (comfy.text_encoders.z_image: its tokenizer,
  chat template and Qwen3 code, the last-but-one layer) on a tiny Qwen3 file in text_encoders, ComfyUI's keys: what
  CLIPLoader builds from any Qwen3 file in 0.3.75, at the tiny sizes (CLIPLoader builds Qwen3-4B's, which a tiny file
  cannot fill). The sizes go in through ComfyUI's `qwen3_4b_model_config` model option; head_dim is a class attribute
  of ComfyUI's config, not a field, so it is set on the class while the model is built and on the instance after.
"""

from __future__ import annotations

import json
import types

CATEGORY = "FillScope tests"
TRACED_VALUE = "value"  # FillScope passes its FS_* values wrapped (fillscope.trace.records.Traced)


class TextToConditioning:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"klein_text": ("FS_KLEIN_TEXT",),
                             "tokens": ("INT", {"default": 0, "min": 0, "max": 4096,
                                                "tooltip": "0: all; k: the first k tokens only"})}}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "convert"
    CATEGORY = CATEGORY

    def convert(self, klein_text, tokens):
        text = getattr(klein_text, TRACED_VALUE, klein_text)
        embeds, mask = text.embeds, text.encoded.attention_mask
        if tokens:
            embeds, mask = embeds[:, :tokens], mask[:, :tokens]
        return ([[embeds, {"pooled_output": None, "attention_mask": mask}]],)


class TinyZImageCLIP:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"file": ("STRING", {"default": "qwen_3_4b.safetensors"}),
                             "config": ("STRING", {"default": "{}", "tooltip": "JSON: the tiny Qwen3 config"})}}

    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    def load(self, file, config):
        import comfy.sd
        import comfy.text_encoders.llama as llama
        import comfy.utils
        import folder_paths
        import torch
        from comfy.text_encoders import z_image

        hf = json.loads(config)
        sizes = {k: hf[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                    "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta")}
        target = types.SimpleNamespace(clip=z_image.te(dtype_llama=torch.float32), tokenizer=z_image.ZImageTokenizer,
                                       params={})
        previous = llama.Qwen3_4BConfig.head_dim
        llama.Qwen3_4BConfig.head_dim = hf["head_dim"]
        try:
            clip = comfy.sd.CLIP(target, model_options={"qwen3_4b_model_config": sizes})
        finally:
            llama.Qwen3_4BConfig.head_dim = previous
        model = clip.cond_stage_model.qwen3_4b.transformer
        model.model.config.head_dim = hf["head_dim"]
        sd = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("text_encoders", file))
        missing, _ = clip.load_sd(sd)
        if missing:
            raise RuntimeError(f"weights missing for ComfyUI's Qwen3: {missing[:5]}")
        return (clip,)


NODE_CLASS_MAPPINGS = {
    "KleinCondTestTextToConditioning": TextToConditioning,
    "KleinCondTestTinyZImageCLIP": TinyZImageCLIP,
}
