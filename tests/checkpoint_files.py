"""Tiny single-file checkpoints in each on-disk key format, written from the tiny diffusers/transformers models of
tiny_flux.py / tiny_sd3.py. Plain test utility (no fixtures).

Key names are never hand-written: they come, at test time, from ComfyUI's own conversion maps and models
(ComfyUI 0.3.75 from $COMFYUI_PATH or <repo>/.comfyui):

* FLUX BFL keys: ``comfy.utils.flux_to_diffusers(config)``, ComfyUI's complete diffusers -> BFL map (fused qkv
  slices, ``swap_scale_shift`` on norm_out), inverted here;
* SD3 SAI keys: ``comfy.utils.mmdit_to_diffusers(config)`` (its slices assume width = depth * 64; with a tiny
  width the slice index start // length is what is used), prefixed as ComfyUI saves checkpoints
  (``comfy.supported_models.SD3().process_*_state_dict_for_saving``: model.diffusion_model.,
  first_stage_model., text_encoders.);
* VAE LDM keys: ``comfy.diffusers_convert.convert_vae_state_dict``, checked against ComfyUI's own Encoder/Decoder;
* CLIP / T5 keys: the state dicts of ComfyUI's own ``comfy.clip_model.CLIPTextModel`` and
  ``comfy.text_encoders.t5.T5`` built on the meta device with the tiny configs (standalone clip_l/clip_g/t5xxl
  files), and of ``comfy.text_encoders.sd3_clip.SD3ClipModel`` (what an SD3 checkpoint bundles);
* scaled fp8: the parameter names ComfyUI's ``comfy.ops.scaled_fp8_ops`` gives a T5 (``scale_weight`` per
  Linear) plus its ``scaled_fp8`` marker.

Values a header cannot carry for tiny widths (attention heads, FLUX rope axes) go into the safetensors metadata
under ``fillscope.config``, as FillScope reads them.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path

import torch
from safetensors.torch import save_file

from comfy_server import comfyui_path as comfyui_root
from tiny_flux import TINY_CLIP_CONFIG, TINY_T5_CONFIG, TINY_TRANSFORMER_CONFIG
from tiny_sd3 import TINY_CLIP_G_CONFIG, TINY_CLIP_L_CONFIG, TINY_HEADS, TINY_SD3_T5_CONFIG

HINT_KEY = "fillscope.config"

# What a tiny header cannot say (see fillscope/checkpoints/shapes.py): per component.
TINY_HINTS = {
    "flux_fill_transformer": {"axes_dims_rope": list(TINY_TRANSFORMER_CONFIG["axes_dims_rope"])},
    "sd3_transformer": {"num_attention_heads": TINY_HEADS},
    "sd3_controlnet": {"num_attention_heads": TINY_HEADS},
    "clip_l": {"num_attention_heads": TINY_CLIP_L_CONFIG["num_attention_heads"]},
    "clip_g": {"num_attention_heads": TINY_CLIP_G_CONFIG["num_attention_heads"]},
}


@lru_cache(maxsize=1)
def comfy():
    """ComfyUI's modules (appended to sys.path, CPU mode); FileNotFoundError when ComfyUI is missing."""
    root = comfyui_root()
    if not (root / "comfy" / "utils.py").is_file():
        raise FileNotFoundError(f"ComfyUI not found at {root}")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    import comfy.clip_model
    import comfy.diffusers_convert
    import comfy.ops
    import comfy.text_encoders.sd3_clip
    import comfy.text_encoders.t5
    import comfy.utils

    return comfy


def save(path: Path, tensors: dict, hints: dict | None = None, dtype=None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous() for k, v in tensors.items()}
    save_file(out, str(path), metadata={HINT_KEY: json.dumps(hints)} if hints else None)
    return path


def _apply_comfy_map(sd: dict, key_map: dict, chunk_index: bool = False) -> dict:
    """diffusers state dict -> ComfyUI/original keys through a comfy.utils *_to_diffusers map (diffusers key ->
    original key | (fused key, (dim, start, length)) | (key, None, fn)). chunk_index: take the slice position
    as start // length (mmdit_to_diffusers assumes width = depth * 64)."""
    fused: dict[str, list] = {}
    out = {}
    unmapped = [k for k in sd if k not in key_map]
    if unmapped:
        raise KeyError(f"ComfyUI's map has no entry for {unmapped[:5]}")
    for dk, target in key_map.items():
        if dk not in sd:
            continue
        t = sd[dk]
        if isinstance(target, str):
            out[target] = t
        elif target[1] is None:
            out[target[0]] = target[2](t)
        else:
            name, (dim, start, length) = target
            assert dim == 0
            fused.setdefault(name, []).append((start // length if chunk_index else start, t, length))
    for name, pieces in fused.items():
        if chunk_index:
            pieces.sort(key=lambda p: p[0])
            out[name] = torch.cat([p[1] for p in pieces], dim=0)
        else:
            rows = max(start + t.shape[0] for start, t, _ in pieces)
            first = pieces[0][1]
            full = torch.zeros((rows, *first.shape[1:]), dtype=first.dtype, device=first.device)
            for start, t, _ in pieces:
                full[start:start + t.shape[0]] = t
            out[name] = full
    return out


# ------------------------------------------------------------------------------------------------------------
# FLUX
# ------------------------------------------------------------------------------------------------------------


def flux_comfy_config(transformer) -> dict:
    cfg = transformer.config
    return {"depth": cfg.num_layers, "depth_single_blocks": cfg.num_single_layers,
            "hidden_size": cfg.num_attention_heads * cfg.attention_head_dim}


def flux_bfl_state(transformer) -> dict:
    """The FLUX transformer's weights under BFL keys (flux1-fill-dev.safetensors), via ComfyUI's map."""
    key_map = comfy().utils.flux_to_diffusers(flux_comfy_config(transformer))
    return _apply_comfy_map(dict(transformer.state_dict()), key_map)


# ------------------------------------------------------------------------------------------------------------
# SD3 MMDiT (SAI) and the SAI checkpoint
# ------------------------------------------------------------------------------------------------------------


def sd3_sai_state(transformer) -> dict:
    """The SD3 transformer's weights under SAI keys (joint_blocks...), via ComfyUI's mmdit map."""
    key_map = comfy().utils.mmdit_to_diffusers({"depth": transformer.config.num_layers})
    return _apply_comfy_map(dict(transformer.state_dict()), key_map, chunk_index=True)


def vae_ldm_state(vae) -> dict:
    """AutoencoderKL weights under LDM keys (ae.safetensors), via ComfyUI's converter; checked against
    ComfyUI's own Encoder/Decoder key names."""
    c = comfy()
    sd = c.diffusers_convert.convert_vae_state_dict(dict(vae.state_dict()))
    from comfy.ldm.modules.diffusionmodules.model import Decoder, Encoder

    cfg = vae.config
    mult = [b // cfg.block_out_channels[0] for b in cfg.block_out_channels]
    common = dict(ch=cfg.block_out_channels[0], out_ch=cfg.out_channels, ch_mult=mult, num_res_blocks=cfg.layers_per_block,
                  attn_resolutions=[], in_channels=cfg.in_channels, resolution=cfg.sample_size, z_channels=cfg.latent_channels)
    with torch.device("meta"):
        want = {f"encoder.{k}" for k in Encoder(double_z=True, **common).state_dict()}
        want |= {f"decoder.{k}" for k in Decoder(**common).state_dict()}
    if set(sd) != want:
        raise AssertionError(f"LDM VAE keys differ from ComfyUI's model: {sorted(set(sd) ^ want)[:6]}")
    return sd


def _comfy_clip_keys(config: dict) -> set:
    c = comfy()
    model = c.clip_model.CLIPTextModel(dict(config), torch.float32, "meta", c.ops.disable_weight_init)
    return set(model.state_dict())


def clip_comfy_state(model, config: dict, with_projection: bool = True) -> dict:
    """A transformers CLIP text model's weights under ComfyUI's clip_l/clip_g.safetensors keys (transformers
    names with the text_model. wrapper, as ComfyUI's CLIPTextModel has them)."""
    comfy_keys = _comfy_clip_keys(config)
    out = {}
    for k, v in model.state_dict().items():
        if k.endswith("position_ids"):
            continue
        name = k if k.startswith("text_") else "text_model." + k
        if name not in comfy_keys:
            raise AssertionError(f"{name} is not a key of ComfyUI's CLIPTextModel")
        out[name] = v
    if not with_projection:
        out.pop("text_projection.weight", None)
    missing = comfy_keys - set(out) - ({"text_projection.weight"} if "text_projection.weight" not in out else set())
    if missing:
        raise AssertionError(f"ComfyUI's CLIPTextModel has keys the file lacks: {sorted(missing)[:5]}")
    return out


def _comfy_t5_config(model) -> dict:
    cfg = model.config
    return {"num_layers": cfg.num_layers, "d_model": cfg.d_model, "d_kv": cfg.d_kv, "num_heads": cfg.num_heads,
            "d_ff": cfg.d_ff, "vocab_size": cfg.vocab_size,
            # transformers' gelu_new is the tanh approximation, ComfyUI's gelu_pytorch_tanh (names only)
            "dense_act_fn": {"gelu_new": "gelu_pytorch_tanh"}.get(cfg.dense_act_fn, cfg.dense_act_fn),
            "is_gated_act": cfg.is_gated_act, "model_type": "t5"}


def t5_comfy_state(model, scaled_fp8: bool = False) -> tuple[dict, set]:
    """A T5EncoderModel's weights under ComfyUI's t5xxl keys, and (scaled_fp8) the names ComfyUI's scaled fp8
    ops give the per-Linear scales."""
    c = comfy()
    ops = c.ops.scaled_fp8_ops(override_dtype=torch.float8_e4m3fn) if scaled_fp8 else c.ops.disable_weight_init
    comfy_model = c.text_encoders.t5.T5(_comfy_t5_config(model), torch.float32, "meta", ops)
    comfy_keys = set(comfy_model.state_dict())
    out = {k: v for k, v in model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    scale_keys = {k for k in comfy_keys if k.endswith(".scale_weight")}
    if set(out) != comfy_keys - scale_keys - {k for k in comfy_keys if k.endswith(".scale_input")}:
        raise AssertionError(f"T5 keys differ from ComfyUI's: {sorted(set(out) ^ (comfy_keys - scale_keys))[:6]}")
    return out, scale_keys


def fp8_t5_state(model, scaled: bool = False) -> dict:
    """t5xxl_fp8_e4m3fn(_scaled).safetensors: 2-D weights in float8_e4m3fn (scaled: weight / scale with the
    per-tensor scale absmax / 448 stored next to it, and the `scaled_fp8` marker), 1-D weights in fp16."""
    sd, scale_keys = t5_comfy_state(model, scaled_fp8=scaled)
    out = {}
    for k, v in sd.items():
        if v.dim() >= 2:
            scale_key = k[: -len("weight")] + "scale_weight"
            if scaled and scale_key in scale_keys:
                scale = v.abs().max().clamp(min=1e-12) / 448.0
                out[k] = (v / scale).to(torch.float8_e4m3fn)
                out[scale_key] = scale.reshape(()).float()
            else:
                out[k] = v.to(torch.float8_e4m3fn)
        else:
            out[k] = v.half()
    if scaled:
        out["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    return out


def sd3_checkpoint_state(components: dict, with_text_encoders: bool = True) -> dict:
    """sd3_medium(_incl_clips).safetensors: MMDiT + VAE (+ CLIP-L, CLIP-G, T5), prefixed as ComfyUI saves an SD3
    checkpoint; the bundled encoders under SD3ClipModel's names."""
    c = comfy()
    import comfy.supported_models as sm

    model_config = sm.SD3({"in_channels": 16, "pos_embed_scaling_factor": None})
    out = model_config.process_unet_state_dict_for_saving(sd3_sai_state(components["transformer"]))
    out.update(model_config.process_vae_state_dict_for_saving(vae_ldm_state(components["vae"])))
    if with_text_encoders:
        clip = {}
        for name, key, cfg in (("clip_l", "text_encoder", TINY_CLIP_L_CONFIG), ("clip_g", "text_encoder_2", TINY_CLIP_G_CONFIG)):
            for k, v in clip_comfy_state(components[key], cfg).items():
                clip[f"{name}.transformer.{k}"] = v
        t5, _ = t5_comfy_state(components["text_encoder_3"])
        clip.update({f"t5xxl.transformer.{k}": v for k, v in t5.items()})
        bundled = set(c.text_encoders.sd3_clip.SD3ClipModel(device="meta", dtype=torch.float16).state_dict())
        strange = [k for k in clip if k not in bundled and not k.startswith(("clip_l.transformer.text_model.encoder.layers.",
                                                                             "clip_g.transformer.text_model.encoder.layers.",
                                                                             "t5xxl.transformer.encoder.block."))]
        if strange:
            raise AssertionError(f"not keys of ComfyUI's SD3ClipModel: {strange[:5]}")
        out.update(model_config.process_clip_state_dict_for_saving(clip))
    return out


__all__ = ["TINY_CLIP_CONFIG", "TINY_T5_CONFIG", "TINY_SD3_T5_CONFIG"]
