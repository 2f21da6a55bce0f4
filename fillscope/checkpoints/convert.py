"""File tensors -> the model's state dict: key plans and converters per on-disk layout.

FLUX.1 and FLUX.2 [klein] BFL keys: the plans in `flux_bfl_plan` / `klein_bfl_plan`, widths read from the weights;
SAI MMDiT keys and LDM VAE keys: diffusers' own converters (the FLUX.2 VAE's quant convs lifted out of encoder/decoder
first, its BatchNorm statistics kept); CLIP/T5/Qwen3 transformers keys: renamed in place. fp8 tensors stay fp8
(converters that cannot handle them see uint8 views); ComfyUI's scaled fp8 files (`scale_weight`, and the mixed-
precision `weight_scale`) bring per-tensor scales, returned separately.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..fp8 import is_fp8
from .info import Part
from .shapes import Keys

IGNORED_KEYS = re.compile(r"(^|\.)(position_ids|logit_scale)$")


@dataclass(frozen=True)
class Move:
    """dst (diffusers key) <- src (file key), rows [start, stop) of dim 0 when sliced, scale/shift halves swapped."""

    src: str
    dst: str
    rows: tuple | None = None
    swap: bool = False


class _Plan:
    """A BFL -> diffusers key plan being built over a header (`prefix` before every file key): `add` moves a
    module's weight and bias where the file has them, `qkv` splits a fused [3W, ...] module into W-row slices."""

    def __init__(self, tensors: dict, prefix: str):
        self.k = Keys(tensors, prefix)
        self.w = self.k.shape("img_in.weight")[0]
        self.prefix = prefix
        self.moves: list[Move] = []

    def add(self, src, dst, rows=None, swap=False):
        for end in ("weight", "bias"):
            if self.k.has(f"{src}.{end}"):
                self.moves.append(Move(f"{src}.{end}", f"{dst}.{end}", rows, swap))

    def qkv(self, src, dsts):
        for i, d in enumerate(dsts):
            self.add(src, d, (i * self.w, (i + 1) * self.w))

    def norm(self, src, dst):
        """An RMSNorm: BFL's `scale` is diffusers' `weight`."""
        self.moves.append(Move(f"{src}.scale", f"{dst}.weight"))

    def finish(self) -> list[Move]:
        """The final modulation (its (shift, scale) halves swapped), then every source key with the prefix."""
        self.add("final_layer.adaLN_modulation.1", "norm_out.linear", swap=True)
        return [Move(self.prefix + m.src, m.dst, m.rows, m.swap) for m in self.moves]


def _double_blocks(p: _Plan, family: tuple) -> None:
    """The double blocks, FLUX.1 and FLUX.2 alike: the fused img/txt qkv split into q/k/v rows, the attention
    projections, then the family's own (src, dst) moves (modulation, MLP), then the four q/k norms."""
    for i in range(p.k.count("double_blocks.")):
        s, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        p.qkv(f"{s}.img_attn.qkv", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"])
        p.qkv(f"{s}.txt_attn.qkv", [f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj"])
        for src, dst in (("img_attn.proj", "attn.to_out.0"), ("txt_attn.proj", "attn.to_add_out")) + family:
            p.add(f"{s}.{src}", f"{d}.{dst}")
        for src, dst in (("img_attn.norm.query_norm", "attn.norm_q"), ("img_attn.norm.key_norm", "attn.norm_k"),
                         ("txt_attn.norm.query_norm", "attn.norm_added_q"), ("txt_attn.norm.key_norm", "attn.norm_added_k")):
            p.norm(f"{s}.{src}", f"{d}.{dst}")


def flux_bfl_plan(tensors: dict, prefix: str = "") -> list[Move]:
    """The FLUX.1 BFL -> diffusers key plan, with every width read from the weights (diffusers' own converter
    hard-codes 3072). Fused qkv [3W, W] splits into q/k/v rows; single blocks' linear1 [3W + M, W] into q, k, v
    and the MLP input; the final modulation swaps its (shift, scale) halves."""
    p = _Plan(tensors, prefix)
    _double_blocks(p, (("img_mod.lin", "norm1.linear"), ("txt_mod.lin", "norm1_context.linear"),
                       ("img_mlp.0", "ff.net.0.proj"), ("img_mlp.2", "ff.net.2"),
                       ("txt_mlp.0", "ff_context.net.0.proj"), ("txt_mlp.2", "ff_context.net.2")))
    for i in range(p.k.count("single_blocks.")):
        s, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        total = p.k.shape(f"{s}.linear1.weight")[0]
        p.qkv(f"{s}.linear1", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"])
        p.add(f"{s}.linear1", f"{d}.proj_mlp", (3 * p.w, total))
        p.add(f"{s}.linear2", f"{d}.proj_out")
        p.add(f"{s}.modulation.lin", f"{d}.norm.linear")
        p.norm(f"{s}.norm.query_norm", f"{d}.attn.norm_q")
        p.norm(f"{s}.norm.key_norm", f"{d}.attn.norm_k")
    for src, dst in (("img_in", "x_embedder"), ("txt_in", "context_embedder"),
                     ("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"),
                     ("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"),
                     ("vector_in.in_layer", "time_text_embed.text_embedder.linear_1"),
                     ("vector_in.out_layer", "time_text_embed.text_embedder.linear_2"),
                     ("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"),
                     ("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"),
                     ("final_layer.linear", "proj_out")):
        p.add(src, dst)
    return p.finish()


def klein_bfl_plan(tensors: dict, prefix: str = "") -> list[Move]:
    """The FLUX.2 BFL -> diffusers (Flux2Transformer2DModel) key plan, as diffusers'
    convert_flux2_transformer_checkpoint_to_diffusers does it, with the widths read from the weights: the double
    blocks' fused qkv [3W, W] splits into q/k/v rows; the single blocks' linear1 (qkv + SwiGLU input) and linear2
    stay fused (diffusers keeps them fused too); the final modulation swaps its (shift, scale) halves."""
    p = _Plan(tensors, prefix)
    _double_blocks(p, (("img_mlp.0", "ff.linear_in"), ("img_mlp.2", "ff.linear_out"),
                       ("txt_mlp.0", "ff_context.linear_in"), ("txt_mlp.2", "ff_context.linear_out")))
    for i in range(p.k.count("single_blocks.")):
        s, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        p.add(f"{s}.linear1", f"{d}.attn.to_qkv_mlp_proj")
        p.add(f"{s}.linear2", f"{d}.attn.to_out")
        p.norm(f"{s}.norm.query_norm", f"{d}.attn.norm_q")
        p.norm(f"{s}.norm.key_norm", f"{d}.attn.norm_k")
    for src, dst in (("img_in", "x_embedder"), ("txt_in", "context_embedder"),
                     ("time_in.in_layer", "time_guidance_embed.timestep_embedder.linear_1"),
                     ("time_in.out_layer", "time_guidance_embed.timestep_embedder.linear_2"),
                     ("guidance_in.in_layer", "time_guidance_embed.guidance_embedder.linear_1"),
                     ("guidance_in.out_layer", "time_guidance_embed.guidance_embedder.linear_2"),
                     ("double_stream_modulation_img.lin", "double_stream_modulation_img.linear"),
                     ("double_stream_modulation_txt.lin", "double_stream_modulation_txt.linear"),
                     ("single_stream_modulation.lin", "single_stream_modulation.linear"),
                     ("final_layer.linear", "proj_out")):
        p.add(src, dst)
    return p.finish()


def _swap_halves(t):
    import torch

    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


def _via_uint8(convert, tensors: dict) -> dict:
    """Run a converter written for float tensors on fp8 ones (cat/chunk of fp8 is not implemented everywhere):
    fp8 tensors travel as uint8 views and come back as the file's fp8 dtype."""
    fp8 = {t.dtype for t in tensors.values() if is_fp8(t.dtype)}
    if not fp8:
        return convert(tensors)
    if len(fp8) > 1:
        raise ValueError("mixed fp8 formats in one file")
    (dt,) = fp8
    import torch

    out = convert({k: (v.view(torch.uint8) if v.dtype == dt else v) for k, v in tensors.items()})
    return {k: (v.view(dt) if v.dtype == torch.uint8 else v) for k, v in out.items()}


# ComfyUI's fp8 files: per-tensor weight scales (scaled fp8: `x.scale_weight`; mixed precision, e.g. the
# *_fp8mixed text encoders: `x.weight_scale`), and entries that computing in bf16 does not use (activation scales
# for fp8 matmuls, the scaled-fp8 marker, the mixed-precision layer descriptions).
WEIGHT_SCALE_SUFFIXES = (".scale_weight", ".weight_scale")
UNUSED_QUANT_SUFFIXES = ("scaled_fp8", ".scale_input", ".input_scale", ".comfy_quant")


def _scales(tensors: dict) -> tuple[dict, dict]:
    """ComfyUI's scaled fp8: (weights without the scale tensors, {weight key: scale}). Only per-tensor scales are
    read: block-wise ones (and NVFP4's second-level `weight_scale_2`) are refused."""
    scales = {}
    rest = {}
    for key, t in tensors.items():
        if key.endswith(UNUSED_QUANT_SUFFIXES):
            continue
        if key.endswith(".weight_scale_2"):
            raise ValueError(f"'{key}' is a second-level (NVFP4) weight scale; FillScope reads float8 weights with "
                             "per-tensor scales only")
        suffix = next((x for x in WEIGHT_SCALE_SUFFIXES if key.endswith(x)), None)
        if suffix is not None:
            if t.numel() != 1:
                raise ValueError(f"'{key}' holds {t.numel()} scales (a block-wise quantisation); FillScope reads "
                                 "float8 weights with per-tensor scales only")
            scales[key[: -len(suffix)] + ".weight"] = t
            continue
        rest[key] = t
    return rest, scales


def lift_quant_convs(tensors: dict) -> dict:
    """The FLUX.2 VAE file keeps its quant convs inside encoder/decoder (BFL layout); the LDM converter wants them
    at the top, as FLUX.1's ae.safetensors has them (ComfyUI moves them the same way)."""
    moves = {"encoder.quant_conv.": "quant_conv.", "decoder.post_quant_conv.": "post_quant_conv."}
    out = {}
    for key, t in tensors.items():
        old = next((o for o in moves if key.startswith(o)), None)
        out[moves[old] + key[len(old):] if old else key] = t
    return out


def _dequantize(tensors: dict, scales: dict, dtype) -> dict:
    return {k: (v.to(dtype) * scales[k].to(dtype) if k in scales else v) for k, v in tensors.items()}


def convert_part(part: Part, tensors: dict, config: dict, dtype) -> tuple[dict, dict, list]:
    """File tensors (keys with the part's prefix) -> (model state dict, {model key: fp8 scale}, notes)."""
    notes = []
    p = part.prefix
    local = {key[len(p):]: t for key, t in tensors.items()}
    local, scales = _scales(local)
    if part.layout == "bfl":
        plan = klein_bfl_plan(local) if part.component == "klein_transformer" else flux_bfl_plan(local)
        out, out_scales = {}, {}
        for m in plan:
            t = local[m.src]
            if m.rows is not None:
                t = t[m.rows[0]:m.rows[1]]
            if m.swap:
                t = _via_uint8(lambda d: {"x": _swap_halves(d["x"])}, {"x": t})["x"]
            out[m.dst] = t
            if m.src in scales:
                out_scales[m.dst] = scales[m.src]
        used = {m.src for m in plan}
        extra = sorted(set(local) - used)
        return out, out_scales, ([f"ignored {len(extra)} tensors the diffusers model has no place for (e.g. {extra[0]})"] if extra else [])
    if part.layout == "sai":
        from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers

        if scales:
            local = _dequantize(local, scales, dtype)
            notes.append("scaled fp8 weights dequantised to the loader's dtype at load")
        return _via_uint8(lambda d: convert_sd3_transformer_checkpoint_to_diffusers(dict(d)), local), {}, notes
    if part.layout == "ldm":
        from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

        if scales:
            local = _dequantize(local, scales, dtype)
        local = lift_quant_convs(local)
        out = _via_uint8(lambda d: convert_ldm_vae_checkpoint(d, config), local)
        out.update({k: t for k, t in local.items() if k.startswith("bn.")})  # the FLUX.2 VAE's latent statistics
        return out, {}, notes
    if part.component == "qwen3":
        # ComfyUI's qwen_3_*.safetensors (and CausalLM saves) wrap the body in 'model.'; Qwen3Model has no wrapper
        return ({k.removeprefix("model."): t for k, t in local.items() if not IGNORED_KEYS.search(k)},
                {k.removeprefix("model."): v for k, v in scales.items()}, notes)
    if part.component in ("clip_l", "clip_g"):
        out = {}
        for key, t in local.items():
            if IGNORED_KEYS.search(key):
                continue
            out[key.removeprefix("text_model.")] = t
        return out, {k.removeprefix("text_model."): v for k, v in scales.items()}, notes
    if part.component == "t5_xxl":
        out = {}
        dropped = 0
        for key, t in local.items():
            if key.startswith(("decoder.", "lm_head.")):
                dropped += 1
                continue
            out[key] = t
        if "shared.weight" not in out and "encoder.embed_tokens.weight" in out:
            out["shared.weight"] = out.pop("encoder.embed_tokens.weight")
            if "encoder.embed_tokens.weight" in scales:
                scales["shared.weight"] = scales.pop("encoder.embed_tokens.weight")
        else:
            out.pop("encoder.embed_tokens.weight", None)
        if dropped:
            notes.append(f"ignored the file's {dropped} decoder tensors (FLUX and SD3 use the encoder only)")
        return out, scales, notes
    out = {k: v for k, v in local.items() if not IGNORED_KEYS.search(k)}
    return out, scales, notes
