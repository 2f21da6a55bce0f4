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
  Linear) plus its ``scaled_fp8`` marker;
* FLUX.2 [klein] BFL keys: the state dict of ComfyUI's own ``comfy.ldm.flux.model.Flux`` in its flux2 mode, mapped
  to diffusers' names by running diffusers' ``convert_flux2_transformer_checkpoint_to_diffusers`` on tagged values;
  the FLUX.2 VAE: ComfyUI's VAE converter, with the quant convs inside encoder/decoder as BFL's flux2-vae.safetensors
  has them, checked against ComfyUI's AutoencoderKL with its BatchNorm latent; Qwen3: the keys of ComfyUI's
  ``comfy.text_encoders.llama.Qwen3_4B``; ComfyUI's mixed-precision fp8 (``weight_scale`` / ``input_scale`` /
  ``comfy_quant`` next to a float8 weight).

Values a header cannot carry for tiny widths (attention heads, FLUX rope axes) go into the safetensors metadata
under ``fillscope.config``, as FillScope reads them.
"""

from __future__ import annotations

import json
import math
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


# ------------------------------------------------------------------------------------------------------------
# FLUX.2 [klein]: transformer (BFL keys), FLUX.2 VAE (BFL/LDM keys), Qwen3 (ComfyUI text_encoders keys)
# ------------------------------------------------------------------------------------------------------------


def comfy_flux2(config: dict, device: str = "meta"):
    """ComfyUI's own FLUX.2 model (comfy.ldm.flux.model.Flux with model_detection's flux2 settings) at the sizes of
    a diffusers Flux2Transformer2DModel config: its state dict has the BFL key names."""
    c = comfy()
    import comfy.ldm.flux.model as flux_model

    heads, head = config["num_attention_heads"], config["attention_head_dim"]
    return flux_model.Flux(
        image_model="flux2", dtype=torch.float32, device=device, operations=c.ops.disable_weight_init,
        in_channels=config["in_channels"], out_channels=config.get("out_channels") or config["in_channels"],
        vec_in_dim=None, context_in_dim=config["joint_attention_dim"], hidden_size=heads * head,
        mlp_ratio=config["mlp_ratio"], num_heads=heads, depth=config["num_layers"],
        depth_single_blocks=config["num_single_layers"], axes_dim=list(config["axes_dims_rope"]),
        theta=config["rope_theta"], patch_size=1, qkv_bias=False, guidance_embed=config["guidance_embeds"],
        global_modulation=True, mlp_silu_act=True, ops_bias=False)


_TAG = 2.0**32


def klein_bfl_map(config: dict) -> dict:
    """BFL key -> [(diffusers key, flat positions in the BFL tensor)] for a Flux2Transformer2DModel config: every
    value of ComfyUI's BFL state dict is tagged with (tensor index, position), diffusers' own converter is run on
    the tags, and where each diffusers value came from is read back."""
    from diffusers.loaders.single_file_utils import convert_flux2_transformer_checkpoint_to_diffusers

    shapes = {k: tuple(v.shape) for k, v in comfy_flux2(config).state_dict().items()}
    names = sorted(shapes)
    tagged = {n: (torch.arange(math.prod(shapes[n]), dtype=torch.float64) + i * _TAG).reshape(shapes[n])
              for i, n in enumerate(names)}
    converted = convert_flux2_transformer_checkpoint_to_diffusers(dict(tagged))
    out: dict = {n: [] for n in names}
    for dk, tag in converted.items():
        index = torch.div(tag, _TAG, rounding_mode="floor").long()
        (i,) = index.unique().tolist()
        out[names[i]].append((dk, (tag - i * _TAG).long().reshape(-1)))
    for name, moves in out.items():
        covered = torch.cat([pos for _, pos in moves]).sort().values if moves else torch.empty(0)
        if not torch.equal(covered, torch.arange(math.prod(shapes[name]))):
            raise AssertionError(f"diffusers' converter does not use every value of {name} exactly once")
    return {n: (shapes[n], moves) for n, moves in out.items()}


def klein_bfl_state(transformer) -> dict:
    """A Flux2Transformer2DModel's weights under BFL keys (flux-2-klein-*.safetensors): the inverse of diffusers'
    converter, as klein_bfl_map reads it."""
    sd = transformer.state_dict()
    plan = klein_bfl_map(dict(transformer.config))
    used = {dk for _, moves in plan.values() for dk, _ in moves}
    if used != set(sd):
        raise AssertionError(f"diffusers' converter and the model disagree: {sorted(used ^ set(sd))[:6]}")
    out = {}
    for name, (shape, moves) in plan.items():
        first = sd[moves[0][0]]
        flat = torch.empty(math.prod(shape), dtype=first.dtype)
        for dk, pos in moves:
            flat[pos] = sd[dk].reshape(-1)
        out[name] = flat.reshape(shape)
    return out


def flux2_vae_bfl_state(vae, num_batches_tracked: bool = False) -> dict:
    """An AutoencoderKLFlux2's weights as BFL's flux2-vae.safetensors has them: LDM keys (ComfyUI's converter), the
    quant convs inside encoder/decoder, the BatchNorm running statistics; checked against ComfyUI's own
    AutoencoderKL with its BatchNorm latent (after the prefix move ComfyUI makes on loading)."""
    c = comfy()
    from comfy.ldm.models.autoencoder import AutoencoderKL

    sd = {k: v for k, v in vae.state_dict().items() if num_batches_tracked or not k.endswith("num_batches_tracked")}
    ldm = c.diffusers_convert.convert_vae_state_dict(sd)
    cfg = vae.config
    ddconfig = {"double_z": True, "z_channels": cfg.latent_channels, "resolution": 256, "in_channels": cfg.in_channels,
                "out_ch": cfg.out_channels, "ch": cfg.block_out_channels[0], "num_res_blocks": cfg.layers_per_block,
                "ch_mult": [b // cfg.block_out_channels[0] for b in cfg.block_out_channels], "attn_resolutions": [],
                "dropout": 0.0, "batch_norm_latent": True}
    with torch.device("meta"):
        want = set(AutoencoderKL(ddconfig=ddconfig, embed_dim=cfg.latent_channels).state_dict())
    if not num_batches_tracked:
        want.discard("bn.num_batches_tracked")
    if set(ldm) != want:
        raise AssertionError(f"FLUX.2 VAE keys differ from ComfyUI's model: {sorted(set(ldm) ^ want)[:6]}")
    nest = {"quant_conv.": "encoder.quant_conv.", "post_quant_conv.": "decoder.post_quant_conv."}
    return {next((nest[p] + k[len(p):] for p in nest if k.startswith(p)), k): v for k, v in ldm.items()}


def qwen3_comfy_state(model, lm_head: bool = False) -> dict:
    """A transformers Qwen3 (Qwen3ForCausalLM or Qwen3Model) under the keys of ComfyUI's qwen_3_*.safetensors (the
    state dict of comfy.text_encoders.llama.Qwen3_4B, whose body is Llama2_ under 'model.', at the model's sizes),
    with the LM head when asked."""
    c = comfy()
    import comfy.text_encoders.llama as llama

    cfg = model.config
    sizes = {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                          "num_attention_heads", "num_key_value_heads", "rms_norm_eps")}
    config = llama.Qwen3_4BConfig(**sizes)
    config.head_dim = cfg.head_dim  # a class attribute of ComfyUI's config, not a field
    body = llama.Llama2_(config, device="meta", dtype=torch.float32, ops=c.ops.disable_weight_init)  # Qwen3_4B.model
    want = {"model." + k for k in body.state_dict()}
    sd = model.state_dict()
    out = {("" if k.startswith("model.") or k.startswith("lm_head.") else "model.") + k: v for k, v in sd.items()}
    head = out.pop("lm_head.weight", None)
    if set(out) != want:
        raise AssertionError(f"Qwen3 keys differ from ComfyUI's Qwen3_4B: {sorted(set(out) ^ want)[:6]}")
    if lm_head:
        out["lm_head.weight"] = (head if head is not None else sd["embed_tokens.weight"]).clone()
    return out


def fp8_mixed(state: dict, quantise) -> dict:
    """ComfyUI's mixed-precision fp8 (*_fp8mixed.safetensors): the weights `quantise(key)` picks become
    float8_e4m3fn / per-tensor `weight_scale` (absmax / 448), with an `input_scale` and a `comfy_quant` layer
    description next to them; the rest stay bf16."""
    out = {}
    for key, v in state.items():
        if key.endswith(".weight") and v.dim() == 2 and quantise(key):
            base = key[: -len("weight")]
            scale = v.abs().max().clamp(min=1e-12).float() / 448.0
            out[key] = (v.float() / scale).to(torch.float8_e4m3fn)
            out[base + "weight_scale"] = scale.reshape(())
            out[base + "input_scale"] = torch.ones(())
            out[base + "comfy_quant"] = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8)
        else:
            out[key] = v.to(torch.bfloat16) if v.is_floating_point() else v
    return out


__all__ = ["TINY_CLIP_CONFIG", "TINY_T5_CONFIG", "TINY_SD3_T5_CONFIG"]


def kohya_lora(bfl: dict, seed: int = 0, rank: int = 4, alpha: float = 8.0) -> dict:
    """A LoRA over every 2-D Linear weight (not norms) of a BFL transformer state (FLUX.1: fused qkv, linear1; klein:
    the modulations too), in kohya keys (lora_unet_<BFL module with _>, lora_down / lora_up / alpha) as LoRA files for
    FLUX are published; FillScope's LoRA nodes and ComfyUI's LoraLoaderModelOnly both map them."""
    g, out = torch.Generator().manual_seed(seed), {}
    for key in sorted(bfl):
        w = bfl[key]
        if not key.endswith(".weight") or w.dim() != 2 or "norm" in key:
            continue
        name = "lora_unet_" + key[:-7].replace(".", "_")
        out[f"{name}.lora_down.weight"] = torch.randn(rank, w.shape[1], generator=g) * 0.1
        out[f"{name}.lora_up.weight"] = torch.randn(w.shape[0], rank, generator=g) * 0.1
        out[f"{name}.alpha"] = torch.tensor(alpha)
    return out


def pack_module(submodule: str):
    """A module of the pack (e.g. "nodes.native") in this process: ComfyUI's modules on sys.path (comfy()), the pack
    imported once under a private name, as ComfyUI imports it from custom_nodes."""
    import importlib
    import importlib.util

    comfy()
    name = "fillscope_pack_under_test"
    if name not in sys.modules:
        repo = Path(__file__).resolve().parent.parent
        spec = importlib.util.spec_from_file_location(name, repo / "__init__.py", submodule_search_locations=[str(repo)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{name}.{submodule}")
