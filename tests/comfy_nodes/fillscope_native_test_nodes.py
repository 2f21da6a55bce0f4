"""Test-only ComfyUI nodes for tests/test_native_conditioning.py, loaded by that module's own server (this folder is an
extra custom_nodes path in its extra_model_paths YAML); never part of the pack.

- NativeTestTinyCLIP: ComfyUI's own CLIP (comfy.sd.CLIP over ComfyUI's FluxClipModel / SD3ClipModel, its
  tokenizers and text-model code) on the text encoders of a tiny diffusers folder. The configs are ComfyUI's own, with
  the tiny sizes put in through ComfyUI's `<model_name>_model_config` model option: CLIPLoader and DualCLIPLoader
  cannot load tiny files (they build the full-size configs).
- NativeTestFluxTextToConditioning / NativeTestSD3TextToConditioning: a FillScope text condition as the
  CONDITIONING CLIPTextEncode makes ([[tensor, {"pooled_output": pooled}]]), the tensors themselves, unchanged.
- NativeTestConditioningOfShape: a CONDITIONING of zeros (or NaN) of any shape, number of entries and keys.
- NativeTestSaveConditioning / NativeTestSaveLatent: the tensors to <output>/fillscope_native/<name>.safetensors.
"""

from __future__ import annotations

import json
import os
import types

CATEGORY = "FillScope tests"
TRACED_VALUE = "value"  # FillScope passes its FS_* values wrapped (fillscope.trace.records.Traced)


def _folder(name: str) -> str:
    import folder_paths

    for base in folder_paths.get_folder_paths("diffusers"):
        if os.path.isdir(os.path.join(base, name)):
            return os.path.join(base, name)
    raise FileNotFoundError(f"no diffusers folder {name}")


def _clip_config(hf: dict) -> dict:
    keys = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "hidden_act",
            "max_position_embeddings", "eos_token_id")
    return {k: hf[k] for k in keys}


def _t5_config(hf: dict) -> dict:
    gated = hf.get("feed_forward_proj", "gated-gelu").startswith("gated-")
    return {"num_layers": hf["num_layers"], "d_model": hf["d_model"], "d_kv": hf["d_kv"], "num_heads": hf["num_heads"],
            "d_ff": hf["d_ff"], "vocab_size": hf["vocab_size"], "is_gated_act": gated, "model_type": "t5",
            "dense_act_fn": "gelu_pytorch_tanh"}  # transformers' gelu_new: the tanh approximation


class TinyCLIP:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "FLUX.1-Fill-dev"}), "kind": (["flux", "sd3"],)}}

    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    def load(self, folder, kind):
        import comfy.sd
        import comfy.utils
        import torch
        from comfy.text_encoders import flux, sd3_clip

        root = _folder(folder)
        subs = ({"clip_l": "text_encoder", "t5xxl": "text_encoder_2"} if kind == "flux" else
                {"clip_l": "text_encoder", "clip_g": "text_encoder_2", "t5xxl": "text_encoder_3"})
        options, weights = {"dtype": torch.float32}, {}
        for name, sub in subs.items():
            with open(os.path.join(root, sub, "config.json"), encoding="utf-8") as f:
                hf = json.load(f)
            options[f"{name}_model_config"] = _t5_config(hf) if name == "t5xxl" else _clip_config(hf)
            sd = comfy.utils.load_torch_file(os.path.join(root, sub, "model.safetensors"))
            if name != "t5xxl":  # transformers 5 saves CLIP without the text_model. prefix ComfyUI's keys have
                sd = {k if k.startswith("text_") else "text_model." + k: v for k, v in sd.items()}
                if "text_projection.weight" not in sd:  # FLUX's CLIP-L: never used, but not left uninitialised
                    sd["text_projection.weight"] = torch.eye(hf["hidden_size"])
            weights[name] = sd
        if kind == "flux":
            target = types.SimpleNamespace(clip=flux.flux_clip(dtype_t5=torch.float32), tokenizer=flux.FluxTokenizer,
                                           params={})
        else:
            target = types.SimpleNamespace(clip=sd3_clip.sd3_clip(dtype_t5=torch.float32),
                                           tokenizer=sd3_clip.SD3Tokenizer, params={})
        clip = comfy.sd.CLIP(target, model_options=options)
        for name, sd in weights.items():
            missing, _ = getattr(clip.cond_stage_model, name).load_sd(sd)
            if missing:
                raise RuntimeError(f"{name}: weights missing for ComfyUI's model: {missing[:5]}")
        return (clip,)


def _value(v):
    return getattr(v, TRACED_VALUE, v)


class FluxTextToConditioning:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"flux_text": ("FS_FLUX_TEXT",)}}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "convert"
    CATEGORY = CATEGORY

    def convert(self, flux_text):
        text = _value(flux_text)
        return ([[text.t5_hidden, {"pooled_output": text.pooled}]],)


class SD3TextToConditioning:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"sd3_text": ("FS_SD3_TEXT",)}}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "convert"
    CATEGORY = CATEGORY

    def convert(self, sd3_text):
        text = _value(sd3_text)
        return ([[text.context, {"pooled_output": text.pooled}]],)


class ConditioningOfShape:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "tokens": ("INT", {"default": 256, "min": 1, "max": 4096}),
            "width": ("INT", {"default": 4096, "min": 1, "max": 16384}),
            "pooled_width": ("INT", {"default": 768, "min": 0, "max": 16384, "tooltip": "0: no pooled_output"}),
            "entries": ("INT", {"default": 1, "min": 0, "max": 8}),
            "fill": (["zeros", "nan"],),
            "extra_keys": ("STRING", {"default": "{}", "tooltip": "JSON: keys added to every entry"}),
        }}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "make"
    CATEGORY = CATEGORY

    def make(self, tokens, width, pooled_width, entries, fill, extra_keys):
        import torch

        value = 0.0 if fill == "zeros" else float("nan")
        out = []
        for _ in range(entries):
            keys = dict(json.loads(extra_keys))
            if pooled_width:
                keys["pooled_output"] = torch.zeros(1, pooled_width)
            out.append([torch.full((1, tokens, width), value), keys])
        return (out,)


def _save(name: str, tensors: dict, metadata: dict) -> dict:
    import folder_paths
    from safetensors.torch import save_file

    folder = os.path.join(folder_paths.get_output_directory(), "fillscope_native")
    os.makedirs(folder, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, os.path.join(folder, f"{name}.safetensors"),
              metadata={k: json.dumps(v) for k, v in metadata.items()})
    return {}


class SaveConditioning:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"conditioning": ("CONDITIONING",), "name": ("STRING", {"default": "conditioning"})}}

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    def save(self, conditioning, name):
        import torch

        tensors, metadata = {}, {}
        for i, (tensor, keys) in enumerate(conditioning):
            tensors[f"{i}.cross_attn"] = tensor
            for key, value in keys.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"{i}.{key}"] = value
                else:
                    metadata[f"{i}.{key}"] = value
        return _save(name, tensors, metadata)


class SaveLatent:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"latent": ("FS_LATENT",), "name": ("STRING", {"default": "latent"})}}

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    def save(self, latent, name):
        return _save(name, {"latents": _value(latent).latents}, {})


NODE_CLASS_MAPPINGS = {
    "NativeTestTinyCLIP": TinyCLIP,
    "NativeTestFluxTextToConditioning": FluxTextToConditioning,
    "NativeTestSD3TextToConditioning": SD3TextToConditioning,
    "NativeTestConditioningOfShape": ConditioningOfShape,
    "NativeTestSaveConditioning": SaveConditioning,
    "NativeTestSaveLatent": SaveLatent,
}
