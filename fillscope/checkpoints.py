"""Single-file checkpoints (ComfyUI's model folders): what a .safetensors file is, from its header alone, and
loading one component out of it.

`sniff(path)` reads only the safetensors header (8-byte length + JSON; never the tensor data, never pickle) and
classifies the file by its key patterns and shapes. A file can hold several components (an SAI SD3 checkpoint
bundles the MMDiT, the VAE and up to three text encoders); each is a `Part` with its key prefix, on-disk layout
and the diffusers/transformers config inferred from the shapes (the shipped production config, adjusted).

`load_part(...)` builds the component on the meta device from that config, reads only the part's tensors
(straight onto the target device), checks them for NaN/inf, converts the key names (FLUX BFL keys: the plan in
`flux_bfl_plan`, widths read from the weights; SAI MMDiT keys and LDM VAE keys: diffusers' own converters),
and assigns them. fp8 weights stay fp8 and are computed layer by layer in the loader's dtype (fp8.py).

What shapes cannot tell (attention heads where no qk-norm weight gives the head width, FLUX's rope axes, the
VAE's group-norm groups) takes the real models' values (head width 64 for SD3 and CLIP, rope (16, 56, 56) for
head width 128, 32 groups); a file of other sizes (a test model) says it in its safetensors metadata under
`fillscope.config`, a JSON object of config values.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .errors import FillScopeInputError
from .specs import COMPONENTS, shipped_config

SAFE_SUFFIXES = (".safetensors", ".sft")
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle")
OTHER_SUFFIXES = {".gguf": "a GGUF quantised file", ".onnx": "an ONNX graph", ".engine": "a TensorRT engine"}
WEIGHT_SUFFIXES = SAFE_SUFFIXES + PICKLE_SUFFIXES + tuple(OTHER_SUFFIXES)
HINT_KEY = "fillscope.config"
MAX_HEADER = 256 * 1024 * 1024

# The node that loads each component (the engine does not import the node layer; these are its display names).
LOADERS = {
    "clip_l": "FillScope Load CLIP-L",
    "clip_g": "FillScope Load CLIP-G",
    "t5_xxl": "FillScope Load T5-XXL",
    "flux_fill_transformer": "FillScope Load FLUX.1 Fill Transformer",
    "flux_vae": "FillScope Load VAE (kind flux)",
    "sd3_vae": "FillScope Load VAE (kind sd3)",
    "sd3_transformer": "FillScope Load SD3 Transformer",
    "sd3_controlnet": "FillScope Load SD3 Inpaint ControlNet",
}
WANTS = {
    "clip_l": "a CLIP-L text encoder (clip_l.safetensors, or an SD3/FLUX checkpoint with bundled text encoders)",
    "clip_g": "a CLIP-G (OpenCLIP bigG) text encoder (clip_g.safetensors, or an SD3 checkpoint with bundled text encoders)",
    "t5_xxl": "a T5-XXL v1.1 encoder (t5xxl_fp16.safetensors, t5xxl_fp8_e4m3fn(_scaled).safetensors, or an SD3/FLUX "
              "checkpoint with bundled text encoders)",
    "flux_fill_transformer": "the FLUX.1 Fill [dev] transformer (flux1-fill-dev.safetensors: 384 input channels)",
    "flux_vae": "a 16-channel FLUX/SD3 VAE (ae.safetensors)",
    "sd3_vae": "a 16-channel SD3/FLUX VAE (an SD3 checkpoint's first_stage_model, or a standalone VAE file)",
    "sd3_transformer": "an SD3 / SD3.5 MMDiT (sd3_medium.safetensors, sd3.5_medium.safetensors, sd3.5_large.safetensors)",
    "sd3_controlnet": "the alimama-creative SD3 inpainting ControlNet (diffusers keys, 16 latent + 1 mask input channels)",
}
DTYPE_NAMES = {"F64": "fp64", "F32": "fp32", "F16": "fp16", "BF16": "bf16", "F8_E4M3": "fp8_e4m3fn", "F8_E5M2": "fp8_e5m2",
               "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
FP8_CODES = ("F8_E4M3", "F8_E5M2")


@dataclass(frozen=True)
class TensorInfo:
    dtype: str  # safetensors code: F32, BF16, F8_E4M3, ...
    shape: tuple


@dataclass
class Part:
    """One loadable component inside a file."""

    component: str  # COMPONENTS key
    prefix: str  # key prefix in the file ("" for a standalone file)
    layout: str  # bfl | sai | ldm | diffusers | transformers
    what: str  # human description
    config: dict  # the component's config, inferred from the shapes
    class_name: str | None = None  # when it differs from COMPONENTS[component].class_name
    notes: list = field(default_factory=list)


@dataclass
class CheckpointInfo:
    path: Path
    size: int
    tensors: dict  # name -> TensorInfo
    metadata: dict
    kind: str  # short identifier: flux_transformer, sd3_checkpoint, vae16, clip_l, t5_xxl, lora, ...
    what: str  # "a FLUX.1 Fill [dev] transformer (BFL format, ...)"
    parts: list  # [Part]
    take_with: str  # which loader / ComfyUI node takes it

    @property
    def name(self) -> str:
        return self.path.name

    def part(self, component: str) -> Part | None:
        return next((p for p in self.parts if p.component == component), None)

    def dtype_summary(self, prefix: str = "") -> str:
        counts: dict[str, int] = {}
        for k, t in self.tensors.items():
            if k.startswith(prefix):
                counts[t.dtype] = counts.get(t.dtype, 0) + _numel(t.shape)
        if not counts:
            return "no tensors"
        main = max(counts, key=counts.get)
        others = [DTYPE_NAMES.get(d, d) for d in counts if d != main and counts[d] > 0]
        return DTYPE_NAMES.get(main, main) + (f" (+ {', '.join(others)})" if others else "")


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


# ------------------------------------------------------------------------------------------------------------
# Header
# ------------------------------------------------------------------------------------------------------------


def _unreadable(input_name: str, path: Path, problem: str) -> FillScopeInputError:
    return FillScopeInputError(
        input_name,
        f"'{path.name}' could not be read: {problem}",
        "the download is probably incomplete or corrupt: re-download the file (its size should match the one "
        "published).",
    )


def refuse_unsafe_suffix(path: Path, input_name: str) -> None:
    """.ckpt/.pt/.bin/... are pickles (loading one can run code): refused by name, before anything is read."""
    suffix = path.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        raise FillScopeInputError(
            input_name,
            f"'{path.name}' is a pickled PyTorch checkpoint ({suffix}); FillScope never unpickles (loading a pickle "
            "can run arbitrary code) and loads only .safetensors files.",
            "download the .safetensors version of this model (every model FillScope runs is published as "
            "safetensors), or convert it in a trusted environment.",
        )
    if suffix in OTHER_SUFFIXES:
        raise FillScopeInputError(
            input_name, f"'{path.name}' is {OTHER_SUFFIXES[suffix]}; FillScope loads only .safetensors files.",
            "use the model's .safetensors release.",
        )
    if suffix not in SAFE_SUFFIXES:
        raise FillScopeInputError(
            input_name, f"'{path.name}' is not a .safetensors file.", "choose a .safetensors file or a diffusers folder.",
        )


def read_header(path: Path, input_name: str = "source") -> tuple[dict, dict]:
    """(tensors: name -> TensorInfo, metadata) from a safetensors header; checks the file holds the data the
    header describes (a truncated download fails here, before anything is loaded)."""
    path = Path(path)
    refuse_unsafe_suffix(path, input_name)
    if not path.is_file():
        raise FillScopeInputError(input_name, f"file '{path}' does not exist.", "choose a file listed in the menu.")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _unreadable(input_name, path, f"it is only {size} bytes long (empty or truncated).")
        if head[:2] == b"PK":
            raise FillScopeInputError(
                input_name, f"'{path.name}' is a zip archive (a pickled PyTorch checkpoint renamed to .safetensors), "
                "not a safetensors file; FillScope never unpickles.", "download the real .safetensors file.")
        if head[:1] == b"\x80":
            raise FillScopeInputError(
                input_name, f"'{path.name}' is a Python pickle renamed to .safetensors, not a safetensors file; "
                "FillScope never unpickles.", "download the real .safetensors file.")
        if head[:4] == b"GGUF":
            raise FillScopeInputError(input_name, f"'{path.name}' is a GGUF file renamed to .safetensors.",
                                      "use the model's .safetensors release.")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise _unreadable(input_name, path, f"its header says {n:,} bytes of JSON but the file holds only {size:,} "
                                                "bytes (truncated, or not a safetensors file).")
        if n > MAX_HEADER or n < 2:
            raise _unreadable(input_name, path, f"its header length {n:,} is not a safetensors header.")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except (UnicodeDecodeError, ValueError) as e:
        raise _unreadable(input_name, path, f"its header is not valid safetensors JSON ({e}).") from None
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    end = 0
    try:
        for name, entry in header.items():
            tensors[name] = TensorInfo(str(entry["dtype"]), tuple(int(s) for s in entry["shape"]))
            begin, stop = (int(x) for x in entry["data_offsets"])
            if stop < begin:
                raise ValueError(f"bad offsets for {name}")
            end = max(end, stop)
    except (KeyError, TypeError, ValueError) as e:
        raise _unreadable(input_name, path, f"its header is malformed ({e}).") from None
    if 8 + n + end > size:
        raise _unreadable(
            input_name, path,
            f"the file is truncated: its header describes {8 + n + end:,} bytes but the file has {size:,} "
            f"({(8 + n + end - size) / 2**20:,.1f} MiB missing).",
        )
    if not tensors:
        raise _unreadable(input_name, path, "it holds no tensors.")
    return tensors, dict(metadata)


def sniff(path, input_name: str = "source") -> CheckpointInfo:
    """What a .safetensors file is, from its header. Cached per (path, size, mtime)."""
    path = Path(path)
    refuse_unsafe_suffix(path, input_name)
    if not path.is_file():
        raise FillScopeInputError(input_name, f"file '{path}' does not exist.", "choose a file listed in the menu.")
    st = path.stat()
    try:
        return _sniff_cached(str(path.resolve()), st.st_size, st.st_mtime_ns)
    except FillScopeInputError as e:
        raise FillScopeInputError(input_name, e.problem, e.fix) from None


@lru_cache(maxsize=256)
def _sniff_cached(path: str, size: int, mtime: int) -> CheckpointInfo:
    tensors, metadata = read_header(Path(path))
    hints = _hints(metadata)
    kind, what, parts, take_with = classify(tensors, hints, metadata)
    return CheckpointInfo(Path(path), size, tensors, metadata, kind, what, parts, take_with)


def _hints(metadata: dict) -> dict:
    raw = metadata.get(HINT_KEY)
    if not raw:
        return {}
    try:
        hints = json.loads(raw)
        return hints if isinstance(hints, dict) else {}
    except ValueError:
        return {}


# ------------------------------------------------------------------------------------------------------------
# Classification
# ------------------------------------------------------------------------------------------------------------


class _Keys:
    """Key/shape queries over a header, relative to a prefix."""

    def __init__(self, tensors: dict, prefix: str = ""):
        self.t = tensors
        self.p = prefix

    def has(self, key: str) -> bool:
        return self.p + key in self.t

    def shape(self, key: str):
        info = self.t.get(self.p + key)
        return info.shape if info is not None else None

    def count(self, block_prefix: str) -> int:
        """Number of blocks 'block_prefix.N.' (N = 0.. max)."""
        pat = re.compile(re.escape(self.p + block_prefix) + r"(\d+)\.")
        found = {int(m.group(1)) for k in self.t if (m := pat.match(k))}
        return max(found) + 1 if found else 0

    def indices(self, pattern: str) -> list[int]:
        pat = re.compile(re.escape(self.p) + pattern)
        return sorted({int(m.group(1)) for k in self.t if (m := pat.fullmatch(k))})

    def any_startswith(self, s: str) -> bool:
        full = self.p + s
        return any(k.startswith(full) for k in self.t)


def _heads(width: int, head_dim: int | None, hints: dict, key: str = "num_attention_heads") -> tuple[int, int]:
    if key in hints:
        heads = int(hints[key])
        return heads, width // heads
    if head_dim is None:
        head_dim = int(hints.get("attention_head_dim", 64))
    if width % head_dim:
        raise ValueError(f"width {width} is not a multiple of the head width {head_dim}")
    return width // head_dim, head_dim


def _apply_hints(config: dict, hints: dict) -> dict:
    return {**config, **{k: v for k, v in hints.items() if k in config or k in _HINTABLE}}


def _hint(hints: dict, component: str) -> dict:
    """The hints for one component: `{"<component>": {...}}` entries over flat (file-wide) ones."""
    flat = {k: v for k, v in hints.items() if k not in COMPONENTS}
    own = hints.get(component)
    return {**flat, **own} if isinstance(own, dict) else flat


_HINTABLE = {"axes_dims_rope", "num_attention_heads", "attention_head_dim", "sample_size", "norm_num_groups",
             "hidden_act", "layer_norm_eps", "layer_norm_epsilon", "eos_token_id", "bos_token_id", "pad_token_id"}


def _flux_info(k: _Keys, hints: dict, layout: str):
    """(in_channels, config, description of the variant) of a FLUX.1 transformer in BFL or diffusers keys."""
    hints = _hint(hints, "flux_fill_transformer")
    if layout == "bfl":
        w_out, cin = k.shape("img_in.weight")
        head = (k.shape("double_blocks.0.img_attn.norm.query_norm.scale")
                or k.shape("single_blocks.0.norm.query_norm.scale"))[0]
        out = k.shape("final_layer.linear.weight")[0]
        n_double, n_single = k.count("double_blocks."), k.count("single_blocks.")
        joint = k.shape("txt_in.weight")[1]
        pooled = (k.shape("vector_in.in_layer.weight") or (0, 0))[1]
        guidance = k.has("guidance_in.in_layer.weight")
        mlp = (k.shape("double_blocks.0.img_mlp.0.weight") or (4 * w_out,))[0]
    else:
        w_out, cin = k.shape("x_embedder.weight")
        head = (k.shape("transformer_blocks.0.attn.norm_q.weight") or k.shape("single_transformer_blocks.0.attn.norm_q.weight"))[0]
        out = k.shape("proj_out.weight")[0]
        n_double, n_single = k.count("transformer_blocks."), k.count("single_transformer_blocks.")
        joint = k.shape("context_embedder.weight")[1]
        pooled = (k.shape("time_text_embed.text_embedder.linear_1.weight") or (0, 0))[1]
        guidance = k.has("time_text_embed.guidance_embedder.linear_1.weight")
        mlp = (k.shape("transformer_blocks.0.ff.net.0.proj.weight") or (4 * w_out,))[0]
    heads = w_out // head
    rope = hints.get("axes_dims_rope")
    if rope is None:
        rope = [16, 56, 56] if head == 128 else None
    config = {**shipped_config("flux_fill_transformer"), "in_channels": cin, "out_channels": out, "num_layers": n_double,
              "num_single_layers": n_single, "attention_head_dim": head, "num_attention_heads": heads,
              "joint_attention_dim": joint, "pooled_projection_dim": pooled, "guidance_embeds": guidance,
              "axes_dims_rope": rope}
    config = _apply_hints(config, hints)
    notes = []
    if mlp != 4 * w_out:
        notes.append(f"MLP width {mlp} is not 4 x {w_out} (diffusers' FluxTransformer2DModel assumes 4x)")
    if cin == 384:
        variant = "FLUX.1 Fill [dev] transformer"
    elif cin == 64:
        variant = ("FLUX.1 [dev] text-to-image or FLUX.1 Kontext [dev] transformer (64 input channels; the two have "
                   "the same shapes)" if guidance else "FLUX.1 [schnell] text-to-image transformer (64 input channels)")
    elif cin == 128:
        variant = "FLUX.1 Canny/Depth [dev] transformer (128 input channels)"
    else:
        variant = f"FLUX.1-architecture transformer with {cin} input channels"
    fmt = "BFL format" if layout == "bfl" else "diffusers keys"
    return cin, config, variant, f"{fmt}: {n_double} double + {n_single} single blocks, width {w_out}", notes


def _sd3_info(k: _Keys, hints: dict, layout: str, component: str = "sd3_transformer"):
    """(config, variant title, details) of an SD3/SD3.5 MMDiT in SAI (joint_blocks) or diffusers keys."""
    hints = _hint(hints, component)
    if layout == "sai":
        w, cin, patch, _ = k.shape("x_embedder.proj.weight")
        depth = k.count("joint_blocks.")
        out = k.shape("final_layer.linear.weight")[0] // (patch * patch)
        ln_q = k.shape("joint_blocks.0.x_block.attn.ln_q.weight")
        attn2 = k.indices(r"joint_blocks\.(\d+)\.x_block\.attn2\.qkv\.weight")
        joint_in = k.shape("context_embedder.weight")
        pooled = k.shape("y_embedder.mlp.0.weight")[1]
        pos = k.shape("pos_embed")
    else:
        w, cin, patch, _ = k.shape("pos_embed.proj.weight")
        depth = k.count("transformer_blocks.")
        out = k.shape("proj_out.weight")[0] // (patch * patch) if k.has("proj_out.weight") else cin
        ln_q = k.shape("transformer_blocks.0.attn.norm_q.weight")
        attn2 = k.indices(r"transformer_blocks\.(\d+)\.attn2\.to_q\.weight")
        joint_in = k.shape("context_embedder.weight")
        pooled = k.shape("time_text_embed.text_embedder.linear_1.weight")[1]
        pos = k.shape("pos_embed.pos_embed")
    heads, head_dim = _heads(w, ln_q[0] if ln_q else None, hints)
    if attn2:
        variant, title = "sd3.5-medium", "Stable Diffusion 3.5 Medium MMDiT-X"
    elif ln_q:
        variant, title = "sd3.5-large", ("Stable Diffusion 3.5 Large MMDiT" if depth == 38 else "SD3.5-architecture MMDiT")
    else:
        variant, title = "sd3-medium", ("Stable Diffusion 3 Medium MMDiT" if depth == 24 else "SD3-architecture MMDiT")
    config = {**shipped_config("sd3_transformer", variant), "in_channels": cin, "out_channels": out, "patch_size": patch,
              "num_layers": depth, "attention_head_dim": head_dim, "num_attention_heads": heads,
              "joint_attention_dim": joint_in[1], "caption_projection_dim": joint_in[0], "pooled_projection_dim": pooled}
    if pos is not None:
        config["pos_embed_max_size"] = round(math.sqrt(pos[1]))
    config["qk_norm"] = "rms_norm" if ln_q else None
    if attn2:
        config["dual_attention_layers"] = attn2
    else:
        config.pop("dual_attention_layers", None)
    config = _apply_hints(config, hints)
    details = f"{depth} blocks, width {w}" + (", qk RMSNorm" if ln_q else "") + (f", dual attention in {len(attn2)} blocks" if attn2 else "")
    return config, variant, title, details


def _vae_info(k: _Keys, hints: dict, layout: str):
    hints = _hint(hints, "flux_vae")
    if layout == "ldm":
        n = k.count("encoder.down.")
        blocks = [k.shape(f"encoder.down.{i}.block.0.conv1.weight")[0] for i in range(n)]
        layers = k.count("encoder.down.0.block.")
        attn = k.has("encoder.mid.attn_1.q.weight")
    else:
        n = k.count("encoder.down_blocks.")
        blocks = [k.shape(f"encoder.down_blocks.{i}.resnets.0.conv1.weight")[0] for i in range(n)]
        layers = k.count("encoder.down_blocks.0.resnets.")
        attn = k.any_startswith("encoder.mid_block.attentions.0.")
    latent = k.shape("decoder.conv_in.weight")[1]
    config = {**shipped_config("flux_vae"), "block_out_channels": blocks, "layers_per_block": layers,
              "down_block_types": ["DownEncoderBlock2D"] * n, "up_block_types": ["UpDecoderBlock2D"] * n,
              "in_channels": k.shape("encoder.conv_in.weight")[1], "out_channels": k.shape("decoder.conv_out.weight")[0],
              "latent_channels": latent, "use_quant_conv": k.has("quant_conv.weight"),
              "use_post_quant_conv": k.has("post_quant_conv.weight"), "mid_block_add_attention": attn}
    return _apply_hints(config, hints), latent


def _clip_info(k: _Keys, base: str, hints: dict):
    """CLIP text encoder in transformers keys at k.p + base ('' or 'text_model.')."""
    b = _Keys(k.t, k.p + base)
    vocab, hidden = b.shape("embeddings.token_embedding.weight")
    layers = b.count("encoder.layers.")
    inter = b.shape("encoder.layers.0.mlp.fc1.weight")[0]
    max_pos = b.shape("embeddings.position_embedding.weight")[0]
    proj = k.shape("text_projection.weight") or b.shape("text_projection.weight")
    return vocab, hidden, layers, inter, max_pos, proj


def _clip_part(component: str, k: _Keys, base: str, hints: dict, what: str, notes=()) -> Part:
    hints = _hint(hints, component)
    vocab, hidden, layers, inter, max_pos, proj = _clip_info(k, base, hints)
    heads, _ = _heads(hidden, None, hints)
    config = {**shipped_config(component), "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers,
              "intermediate_size": inter, "max_position_embeddings": max_pos, "num_attention_heads": heads}
    if proj is not None:
        config["projection_dim"] = proj[0]
    config = _apply_hints(config, hints)
    cls = None if proj is not None else "CLIPTextModel"
    if proj is None:
        notes = list(notes) + ["no text projection in the file: loaded as CLIPTextModel (pooled output only; SD3 needs the projection)"]
    return Part(component, k.p, "transformers", what, config, cls, list(notes))


def _t5_part(k: _Keys, hints: dict, what: str, notes=()) -> Part:
    hints = _hint(hints, "t5_xxl")
    q = k.shape("encoder.block.0.layer.0.SelfAttention.q.weight")
    rel = k.shape("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    emb = k.shape("shared.weight") or k.shape("encoder.embed_tokens.weight")
    gated = k.has("encoder.block.0.layer.1.DenseReluDense.wi_0.weight")
    d_ff = k.shape("encoder.block.0.layer.1.DenseReluDense.wi_0.weight" if gated else "encoder.block.0.layer.1.DenseReluDense.wi.weight")[0]
    heads = rel[1]
    config = {**shipped_config("t5_xxl"), "d_model": q[1], "d_kv": q[0] // heads, "num_heads": heads, "d_ff": d_ff,
              "num_layers": k.count("encoder.block."), "vocab_size": emb[0], "relative_attention_num_buckets": rel[0],
              "feed_forward_proj": "gated-gelu" if gated else "relu"}
    config["num_decoder_layers"] = config["num_layers"]
    return Part("t5_xxl", k.p, "transformers", what, _apply_hints(config, hints), None, list(notes))


def _lora_kind(tensors: dict) -> str | None:
    keys = tensors.keys()
    if not any((".lora_" in x or "lora_unet_" in x or "lora_te" in x or ".lora." in x or "lora_A" in x) for x in keys):
        return None
    joined = " ".join(list(keys)[:2000])
    if "double_blocks" in joined or "single_transformer_blocks" in joined or "single_blocks" in joined:
        return "a FLUX LoRA"
    if "joint_blocks" in joined or "transformer_blocks" in joined:
        return "an SD3/DiT LoRA"
    if "input_blocks" in joined or "down_blocks" in joined or "lora_unet_" in joined:
        return "an SD1.x/SDXL LoRA"
    return "a LoRA"


def _describe_dtype(tensors: dict, prefix: str = "") -> str:
    return CheckpointInfo(Path("."), 0, tensors, {}, "", "", [], "").dtype_summary(prefix)


def _text_encoder_parts(tensors: dict, hints: dict, prefix: str, parts: list, names: list) -> None:
    """ComfyUI / SAI bundled text encoders: <prefix>clip_l.transformer., clip_g.transformer., t5xxl.transformer."""
    for comp, sub in (("clip_l", "clip_l.transformer."), ("clip_g", "clip_g.transformer.")):
        k = _Keys(tensors, prefix + sub)
        if k.has("text_model.embeddings.token_embedding.weight"):
            title = "CLIP-L" if comp == "clip_l" else "CLIP-G"
            parts.append(_clip_part(comp, k, "text_model.", hints, f"the bundled {title} ({_describe_dtype(tensors, k.p)})"))
            names.append(title)
    k = _Keys(tensors, prefix + "t5xxl.transformer.")
    if k.has("encoder.block.0.layer.0.SelfAttention.q.weight"):
        parts.append(_t5_part(k, hints, f"the bundled T5-XXL ({_describe_dtype(tensors, k.p)})"))
        names.append("T5-XXL")


def classify(tensors: dict, hints: dict | None = None, metadata: dict | None = None):
    """(kind, what, parts, take_with) of a header."""
    hints = hints or {}
    metadata = metadata or {}
    keys = list(tensors)
    dtype = _describe_dtype(tensors)
    k0 = _Keys(tensors)
    n = len(keys)

    lora = _lora_kind(tensors)
    if lora:
        return "lora", f"{lora} ({n} tensors)", [], "ComfyUI's LoraLoader node (FillScope loads base models only)"

    # ---- whole checkpoints (model.diffusion_model.* and friends) ----
    dm = "model.diffusion_model."
    if any(x.startswith(dm) for x in keys):
        k = _Keys(tensors, dm)
        if k.has("input_blocks.0.0.weight"):
            if k.has("label_emb.0.0.weight") or any(x.startswith("conditioner.embedders.1.") for x in keys):
                return "sdxl_checkpoint", f"an SDXL checkpoint (UNet + VAE + CLIP-L + CLIP-G, {dtype})", [], \
                    "ComfyUI's Load Checkpoint node (FillScope runs FLUX.1 Fill and SD3/SD3.5 only)"
            ver = "SD2.x" if any(x.startswith("cond_stage_model.model.") for x in keys) else "SD1.x"
            return "sd1_checkpoint", f"a Stable Diffusion {ver} checkpoint (UNet + VAE + CLIP, {dtype})", [], \
                "ComfyUI's Load Checkpoint node (FillScope runs FLUX.1 Fill and SD3/SD3.5 only)"
        parts: list[Part] = []
        names: list[str] = []
        if k.has("joint_blocks.0.x_block.attn.qkv.weight"):
            config, variant, title, details = _sd3_info(k, hints, "sai")
            parts.append(Part("sd3_transformer", dm, "sai", f"the {title} (SAI format: {details})", config,
                              notes=[f"variant {variant} (from the weights)"]))
            names.append(f"MMDiT ({details})")
            family = title.replace("Stable Diffusion ", "SD").replace(" MMDiT-X", "").replace(" MMDiT", "")
            vae_kind = "sd3_vae"
        elif k.has("double_blocks.0.img_attn.qkv.weight") and k.has("img_in.weight"):
            cin, config, variant, details, notes = _flux_info(k, hints, "bfl")
            if cin == 384:
                parts.append(Part("flux_fill_transformer", dm, "bfl", f"the {variant} ({details})", config, notes=notes))
            names.append(variant.split(" (")[0])
            family = "FLUX.1"
            vae_kind = "flux_vae"
        else:
            return "unknown_checkpoint", f"a checkpoint of a model FillScope does not know ({n} tensors, {dtype})", [], \
                "ComfyUI's Load Checkpoint node"
        _vae_parts(tensors, hints, "first_stage_model.", parts, names, only=vae_kind)
        _vae_parts(tensors, hints, "vae.", parts, names, only=vae_kind)
        _text_encoder_parts(tensors, hints, "text_encoders.", parts, names)
        what = f"a{'n' if family.startswith('SD') else ''} {family} checkpoint ({' + '.join(names)}; {dtype})"
        if family == "FLUX.1" and not any(p.component == "flux_fill_transformer" for p in parts):
            what = f"a FLUX.1 checkpoint whose transformer is the {names[0]} ({dtype})"
        take = _take_with(parts) or "ComfyUI's Load Checkpoint node"
        return ("sd3_checkpoint" if family.startswith("SD") else "flux_checkpoint"), what, parts, take

    # ---- FLUX transformers ----
    if k0.has("double_stream_modulation_img.lin.weight"):
        return "flux2_transformer", f"a FLUX.2 transformer ({dtype})", [], "ComfyUI's Load Diffusion Model node"
    if any(x.startswith("distilled_guidance_layer.") for x in keys):
        return "chroma_transformer", f"a Chroma transformer ({dtype})", [], "ComfyUI's Load Diffusion Model node"
    for layout, sig in (("bfl", "double_blocks.0.img_attn.qkv.weight"), ("diffusers", "single_transformer_blocks.0.proj_mlp.weight")):
        if k0.has(sig) and (k0.has("img_in.weight") or k0.has("x_embedder.weight")):
            if k0.has("controlnet_x_embedder.weight") or any(x.startswith("controlnet_blocks.") for x in keys):
                return "flux_controlnet", f"a FLUX ControlNet ({dtype})", [], "ComfyUI's Load ControlNet Model node"
            cin, config, variant, details, notes = _flux_info(k0, hints, layout)
            what = f"a{'n' if variant[0] in 'AEIOU' else ''} {variant} ({details}, {dtype})"
            if cin == 384:
                return "flux_transformer", what, [Part("flux_fill_transformer", "", layout, what, config, notes=notes)], \
                    LOADERS["flux_fill_transformer"]
            return "flux_other_transformer", what, [], \
                "ComfyUI's Load Diffusion Model node (FillScope has no loader for FLUX.1 text-to-image, Kontext, Canny or Depth)"

    # ---- SD3 MMDiT and the SD3 ControlNet ----
    if k0.has("joint_blocks.0.x_block.attn.qkv.weight"):
        config, variant, title, details = _sd3_info(k0, hints, "sai")
        what = f"the {title} (SAI format without text encoders or VAE: {details}, {dtype})"
        return "sd3_transformer", what, [Part("sd3_transformer", "", "sai", what, config, notes=[f"variant {variant} (from the weights)"])], \
            LOADERS["sd3_transformer"]
    if k0.has("pos_embed_input.proj.weight") or k0.has("controlnet_blocks.0.weight"):
        if not k0.has("pos_embed.proj.weight"):
            return "sd3_controlnet_other", f"an SD3.5 ControlNet without its own patch embedding (blur/canny/depth; {dtype})", [], \
                "ComfyUI's Load ControlNet Model node"
        config, variant, title, details = _sd3_info(k0, hints, "diffusers", "sd3_controlnet")
        total = k0.shape("pos_embed_input.proj.weight")[1] if k0.has("pos_embed_input.proj.weight") else config["in_channels"]
        extra = total - config["in_channels"]
        base = shipped_config("sd3_controlnet")
        config = {**base, **{x: v for x, v in config.items() if x in base or x in ("qk_norm", "dual_attention_layers")}}
        config["num_layers"] = k0.count("controlnet_blocks.") or k0.count("transformer_blocks.")
        config["extra_conditioning_channels"] = extra
        if not config.get("qk_norm"):
            config.pop("qk_norm", None)
        config = _apply_hints(config, _hint(hints, "sd3_controlnet"))
        if extra == 1:
            what = (f"the SD3 inpainting ControlNet (alimama-creative layout, diffusers keys: {config['num_layers']} blocks, "
                    f"{total} = {config['in_channels']} latent + 1 mask input channels, {dtype})")
            return "sd3_controlnet", what, [Part("sd3_controlnet", "", "diffusers", what, config)], LOADERS["sd3_controlnet"]
        return "sd3_controlnet_other", (f"an SD3 ControlNet with {total} input channels (e.g. InstantX Canny/Pose/Tile; the "
                                        f"inpainting ControlNet has {config['in_channels']} + 1 mask), {dtype}"), [], \
            "ComfyUI's Load ControlNet Model node"
    if k0.has("transformer_blocks.0.attn.add_q_proj.weight") and k0.has("pos_embed.proj.weight"):
        config, variant, title, details = _sd3_info(k0, hints, "diffusers")
        what = f"the {title} (diffusers keys: {details}, {dtype})"
        return "sd3_transformer", what, [Part("sd3_transformer", "", "diffusers", what, config, notes=[f"variant {variant} (from the weights)"])], \
            LOADERS["sd3_transformer"]

    # ---- UNets ----
    if k0.has("input_blocks.0.0.weight"):
        what = "an SDXL UNet" if k0.has("label_emb.0.0.weight") else "an SD1.x/SD2.x UNet"
        return "unet", f"{what} ({dtype})", [], "ComfyUI's Load Diffusion Model node (FillScope runs FLUX.1 Fill and SD3 only)"

    # ---- VAEs ----
    parts, names = [], []
    for prefix in ("", "first_stage_model.", "vae."):
        _vae_parts(tensors, hints, prefix, parts, names, metadata=metadata)
        if parts or names:
            break
    if parts:
        latent = 16
        what = f"a {latent}-channel FLUX/SD3 VAE ({parts[0].layout.upper() if parts[0].layout == 'ldm' else 'diffusers'} keys, {dtype})"
        if len(parts) == 1:
            which = "FLUX" if parts[0].component == "flux_vae" else "SD3"
            what = f"the {which} VAE ({'LDM' if parts[0].layout == 'ldm' else 'diffusers'} keys, {dtype})"
        return "vae16", what, parts, _take_with(parts)
    if names:  # a VAE of another latent width
        return "vae_other", f"{names[0]} ({dtype})", [], "ComfyUI's Load VAE node"

    # ---- text encoders ----
    for base in ("text_model.", ""):
        if k0.has(base + "embeddings.token_embedding.weight") and k0.has(base + "encoder.layers.0.self_attn.q_proj.weight"):
            vocab, hidden, layers, *_ = _clip_info(k0, base, hints)
            size = f"{layers} layers, width {hidden}, {dtype}"
            if (hidden, layers) == (768, 12):
                what = f"a CLIP-L text encoder ({size})"
                return "clip_l", what, [_clip_part("clip_l", k0, base, hints, what)], LOADERS["clip_l"]
            if (hidden, layers) == (1280, 32):
                what = f"a CLIP-G (OpenCLIP bigG) text encoder ({size})"
                return "clip_g", what, [_clip_part("clip_g", k0, base, hints, what)], LOADERS["clip_g"]
            if hidden in (1024,) or layers in (23, 24):
                return "clip_h", f"a CLIP-H (OpenCLIP ViT-H, SD2.x) text encoder ({size})", [], "ComfyUI's Load CLIP node"
            if hidden in (768, 1280):
                return "clip_other", f"a CLIP text encoder of width {hidden} with {layers} layers ({dtype})", [], "ComfyUI's Load CLIP node"
            what = f"a CLIP text encoder ({size}; neither CLIP-L's 768 nor CLIP-G's 1280)"
            note = f"width {hidden} matches neither CLIP-L (768) nor CLIP-G (1280): loaded with this loader's architecture"
            return "clip", what, [_clip_part("clip_l", k0, base, hints, what, [note]),
                                  _clip_part("clip_g", k0, base, hints, what, [note])], \
                f"{LOADERS['clip_l']} or {LOADERS['clip_g']}"
    if k0.has("transformer.resblocks.0.attn.in_proj_weight") or k0.has("model.transformer.resblocks.0.attn.in_proj_weight"):
        return "open_clip", f"an OpenCLIP-format text encoder ({dtype})", [], \
            "ComfyUI's Load CLIP node (FillScope reads CLIP in transformers keys: clip_l.safetensors / clip_g.safetensors)"
    if k0.has("encoder.block.0.layer.0.SelfAttention.q.weight"):
        q = k0.shape("encoder.block.0.layer.0.SelfAttention.q.weight")
        d_model, layers = q[1], k0.count("encoder.block.")
        gated = k0.has("encoder.block.0.layer.1.DenseReluDense.wi_0.weight")
        scaled = "scaled_fp8" in tensors
        store = dtype + (", scaled" if scaled else "")
        if k0.has("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"):
            return "umt5", f"a UMT5 encoder (width {d_model}, e.g. Wan's umt5-xxl; {dtype})", [], "ComfyUI's Load CLIP node"
        if not gated:
            return "t5_v1", f"a T5 v1.0 encoder (width {d_model}, not gated; FLUX and SD3 use T5 v1.1; {dtype})", [], "ComfyUI's Load CLIP node"
        if d_model == 4096 and layers == 24:
            what = f"a T5-XXL v1.1 encoder ({layers} layers, width {d_model}, {store})"
            return "t5_xxl", what, [_t5_part(k0, hints, what)], LOADERS["t5_xxl"]
        named = {512: "T5-small", 768: "T5-base", 1024: "T5-large", 2048: "T5-XL"}
        if d_model in named:
            return "t5_other", f"a {named[d_model]} encoder (width {d_model}; FLUX and SD3 need T5-XXL, 4096; {dtype})", [], \
                "ComfyUI's Load CLIP node"
        what = f"a T5 v1.1 encoder ({layers} layers, width {d_model}, {store}; not T5-XXL's 4096)"
        notes = [f"width {d_model} is not T5-XXL's 4096: loaded with the T5-XXL architecture at this size"]
        return "t5", what, [_t5_part(k0, hints, what, notes)], LOADERS["t5_xxl"]
    if k0.has("model.layers.0.self_attn.q_proj.weight") or k0.has("model.embed_tokens.weight"):
        return "llm", f"a decoder-only LLM text encoder (Llama/Qwen/Mistral-style, {dtype})", [], "ComfyUI's Load CLIP node"
    if any(x.startswith("vision_model.") for x in keys):
        return "clip_vision", f"a CLIP vision encoder ({dtype})", [], "ComfyUI's Load CLIP Vision node"
    first = ", ".join(sorted(keys)[:3])
    return "unknown", f"not a model FillScope recognises ({n} tensors, {dtype}; first keys: {first})", [], \
        ("nothing in FillScope: it loads FLUX.1 Fill, SD3/SD3.5, the alimama inpainting ControlNet, their 16-channel "
         "VAEs and CLIP-L / CLIP-G / T5-XXL")


def _vae_parts(tensors: dict, hints: dict, prefix: str, parts: list, names: list, only: str | None = None,
               metadata: dict | None = None) -> None:
    k = _Keys(tensors, prefix)
    if k.has("encoder.conv_in.weight") and k.has("decoder.conv_out.weight") and k.has("decoder.conv_in.weight"):
        layout = "ldm" if k.has("encoder.down.0.block.0.conv1.weight") else (
            "diffusers" if k.has("encoder.down_blocks.0.resnets.0.conv1.weight") else None)
        if layout is None:
            return
        config, latent = _vae_info(k, hints, layout)
        if latent != 16:
            what = {4: "an SD1.x/SDXL VAE (4 latent channels)", 32: "a FLUX.2 VAE (32 latent channels)"}.get(
                latent, f"a VAE with {latent} latent channels")
            names.append(what)
            return
        arch = str((metadata or {}).get("modelspec.architecture", "")).lower()
        if only is None and "flux" in arch:
            only = "flux_vae"
        elif only is None and ("stable-diffusion-3" in arch or "sd3" in arch):
            only = "sd3_vae"
        fmt = "LDM keys" if layout == "ldm" else "diffusers keys"
        for comp in ("flux_vae", "sd3_vae"):
            if only is not None and comp != only:
                continue
            which = "FLUX" if comp == "flux_vae" else "SD3"
            cfg = {**config, "scaling_factor": shipped_config(comp)["scaling_factor"], "shift_factor": shipped_config(comp)["shift_factor"]}
            notes = []
            if only is None:
                notes.append("the FLUX and SD3 VAEs have the same shapes and the file does not say which it is: the "
                             f"latent scale/shift ({cfg['scaling_factor']} / {cfg['shift_factor']}) follow the loader's kind ({comp[:-4]})")
            what = f"the {'bundled ' if prefix else ''}{which} VAE ({fmt})" if only else f"a 16-channel FLUX/SD3 VAE ({fmt})"
            parts.append(Part(comp, prefix, layout, what, cfg, notes=notes))
        names.append("VAE")


def _take_with(parts: list) -> str:
    loaders = list(dict.fromkeys(LOADERS[p.component] for p in parts))
    if len(loaders) > 1 and loaders[0].startswith("FillScope Load VAE") and loaders[1].startswith("FillScope Load VAE"):
        return "FillScope Load VAE (kind flux or sd3)"
    return ", ".join(loaders)


def wrong_kind_error(info: CheckpointInfo, component: str, input_name: str) -> FillScopeInputError:
    loader = LOADERS[component]
    other = {"flux_vae": "sd3_vae", "sd3_vae": "flux_vae"}.get(component)
    if other and info.part(other) is not None:
        theirs, ours = shipped_config(other), shipped_config(component)
        return FillScopeInputError(
            input_name,
            f"'{info.name}' is {info.what}; its VAE is the {COMPONENTS[other].title} (latent scale {theirs['scaling_factor']}, "
            f"shift {theirs['shift_factor']}), not the {COMPONENTS[component].title} ({ours['scaling_factor']}, "
            f"{ours['shift_factor']}) this loader's kind asks for.",
            f"set the VAE loader's kind to {other.removesuffix('_vae')}, or choose the other model's VAE file.",
        )
    return FillScopeInputError(
        input_name,
        f"'{info.name}' is {info.what}; the {loader} loader takes {WANTS[component]}.",
        f"load it with {info.take_with}.",
    )


# ------------------------------------------------------------------------------------------------------------
# FLUX BFL -> diffusers key plan
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """dst (diffusers key) <- src (file key), rows [start, stop) of dim 0 when sliced, scale/shift halves swapped."""

    src: str
    dst: str
    rows: tuple | None = None
    swap: bool = False


def flux_bfl_plan(tensors: dict, prefix: str = "") -> list[Move]:
    """The FLUX.1 BFL -> diffusers key plan, with every width read from the weights (diffusers' own converter
    hard-codes 3072). Fused qkv [3W, W] splits into q/k/v rows; single blocks' linear1 [3W + M, W] into q, k, v
    and the MLP input; the final modulation swaps its (shift, scale) halves."""
    k = _Keys(tensors, prefix)
    w = k.shape("img_in.weight")[0]
    plan: list[Move] = []

    def add(src, dst, rows=None, swap=False):
        for end in ("weight", "bias"):
            if k.has(f"{src}.{end}"):
                plan.append(Move(f"{src}.{end}", f"{dst}.{end}", rows, swap))

    def qkv(src, dsts):
        for i, d in enumerate(dsts):
            add(src, d, (i * w, (i + 1) * w))

    for i in range(k.count("double_blocks.")):
        s, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        qkv(f"{s}.img_attn.qkv", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"])
        qkv(f"{s}.txt_attn.qkv", [f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj"])
        for src, dst in (("img_attn.proj", "attn.to_out.0"), ("txt_attn.proj", "attn.to_add_out"),
                         ("img_mod.lin", "norm1.linear"), ("txt_mod.lin", "norm1_context.linear"),
                         ("img_mlp.0", "ff.net.0.proj"), ("img_mlp.2", "ff.net.2"),
                         ("txt_mlp.0", "ff_context.net.0.proj"), ("txt_mlp.2", "ff_context.net.2")):
            add(f"{s}.{src}", f"{d}.{dst}")
        for src, dst in (("img_attn.norm.query_norm", "attn.norm_q"), ("img_attn.norm.key_norm", "attn.norm_k"),
                         ("txt_attn.norm.query_norm", "attn.norm_added_q"), ("txt_attn.norm.key_norm", "attn.norm_added_k")):
            plan.append(Move(f"{s}.{src}.scale", f"{d}.{dst}.weight"))
    for i in range(k.count("single_blocks.")):
        s, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        total = k.shape(f"{s}.linear1.weight")[0]
        qkv(f"{s}.linear1", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"])
        add(f"{s}.linear1", f"{d}.proj_mlp", (3 * w, total))
        add(f"{s}.linear2", f"{d}.proj_out")
        add(f"{s}.modulation.lin", f"{d}.norm.linear")
        plan.append(Move(f"{s}.norm.query_norm.scale", f"{d}.attn.norm_q.weight"))
        plan.append(Move(f"{s}.norm.key_norm.scale", f"{d}.attn.norm_k.weight"))
    for src, dst in (("img_in", "x_embedder"), ("txt_in", "context_embedder"),
                     ("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"),
                     ("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"),
                     ("vector_in.in_layer", "time_text_embed.text_embedder.linear_1"),
                     ("vector_in.out_layer", "time_text_embed.text_embedder.linear_2"),
                     ("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"),
                     ("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"),
                     ("final_layer.linear", "proj_out")):
        add(src, dst)
    add("final_layer.adaLN_modulation.1", "norm_out.linear", swap=True)
    return [Move(prefix + m.src, m.dst, m.rows, m.swap) for m in plan]


def _swap_halves(t):
    import torch

    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


# ------------------------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------------------------

IGNORED_KEYS = re.compile(r"(^|\.)(position_ids|logit_scale)$")


def _read_tensors(info: CheckpointInfo, names: list[str], device: str, input_name: str) -> dict:
    """The named tensors, read straight onto `device`, each checked for NaN/inf."""
    from safetensors import safe_open

    from .fp8 import nonfinite_count

    out = {}
    try:
        with safe_open(str(info.path), framework="pt", device=str(device)) as f:
            for name in names:
                t = f.get_tensor(name)
                bad = nonfinite_count(t)
                if bad:
                    raise FillScopeInputError(
                        input_name,
                        f"tensor '{name}' in '{info.name}' holds {bad:,} NaN/inf values (of {t.numel():,}): the weights "
                        "are broken (a failed conversion, merge or download).",
                        "re-download the file, or use another copy of the model.",
                    )
                out[name] = t
    except FillScopeInputError:
        raise
    except Exception as e:  # SafetensorError, OSError, RuntimeError: corrupt data
        detail = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise _unreadable(input_name, info.path, f"{type(e).__name__}: {detail}") from e
    return out


def _via_uint8(convert, tensors: dict) -> dict:
    """Run a converter written for float tensors on fp8 ones (cat/chunk of fp8 is not implemented everywhere):
    fp8 tensors travel as uint8 views and come back as the file's fp8 dtype."""
    from .fp8 import is_fp8

    fp8 = {t.dtype for t in tensors.values() if is_fp8(t.dtype)}
    if not fp8:
        return convert(tensors)
    if len(fp8) > 1:
        raise ValueError("mixed fp8 formats in one file")
    (dt,) = fp8
    import torch

    out = convert({k: (v.view(torch.uint8) if v.dtype == dt else v) for k, v in tensors.items()})
    return {k: (v.view(dt) if v.dtype == torch.uint8 else v) for k, v in out.items()}


def _scales(tensors: dict) -> tuple[dict, dict]:
    """ComfyUI's scaled fp8: (weights without the scale tensors, {weight key: scale}). `scale_input` is an
    activation scale for fp8 matmuls; computing in bf16 does not use it."""
    scales = {}
    rest = {}
    for key, t in tensors.items():
        if key.endswith("scaled_fp8") or key.endswith(".scale_input"):
            continue
        if key.endswith(".scale_weight"):
            scales[key[: -len("scale_weight")] + "weight"] = t
            continue
        rest[key] = t
    return rest, scales


def _dequantize(tensors: dict, scales: dict, dtype) -> dict:
    return {k: (v.to(dtype) * scales[k].to(dtype) if k in scales else v) for k, v in tensors.items()}


def convert_part(part: Part, tensors: dict, config: dict, dtype) -> tuple[dict, dict, list]:
    """File tensors (keys with the part's prefix) -> (model state dict, {model key: fp8 scale}, notes)."""
    notes = []
    p = part.prefix
    local = {key[len(p):]: t for key, t in tensors.items()}
    local, scales = _scales(local)
    if part.layout == "bfl":
        plan = flux_bfl_plan(local)
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
        return _via_uint8(lambda d: convert_ldm_vae_checkpoint(d, config), local), {}, notes
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


def _model_key_map(model) -> dict:
    """Normalised name (no 'text_model.' wrapper) -> the model's state-dict name."""
    out = {}
    for name in model.state_dict().keys():
        out[name.removeprefix("text_model.")] = name
    return out


def load_part(info: CheckpointInfo, part: Part, *, dtype: str, device: str, input_name: str):
    """(model, config, facts, notes) of one part of a file: built on meta from the inferred config, weights read
    straight onto `device`, names converted, assigned (no copy), ties and buffers restored."""
    import torch

    from .fp8 import enable_fp8_compute, is_fp8, report_compute_dtype
    from .weights import _fill_buffer, _retie, _tied_groups, build_on_meta, check_component_config, torch_dtype

    kind = part.component
    config = dict(part.config)
    if kind == "flux_fill_transformer" and config.get("axes_dims_rope") is None:
        raise FillScopeInputError(
            input_name,
            f"'{info.name}' has attention heads of width {config['attention_head_dim']} (FLUX.1 has 128), so its rope "
            "axes cannot be inferred.",
            f"add the rope axes to the file's safetensors metadata under '{HINT_KEY}' (e.g. {{\"axes_dims_rope\": [16, 56, 56]}}).",
        )
    spec = COMPONENTS[kind]
    class_name = part.class_name or spec.class_name
    check_component_config(kind, {"_class_name": class_name, "architectures": [class_name], **config}, input_name, info.path)
    td = torch_dtype(dtype)
    model = build_on_meta(kind, config, dtype=td, class_name=part.class_name)
    ties = _tied_groups(model)
    target = {name: p for name, p in model.named_parameters()}
    target.update({name: b for name, b in model.named_buffers()})
    names = [k for k in info.tensors if k.startswith(part.prefix)] if part.prefix else [
        k for k in info.tensors if not (part.component == "t5_xxl" and k.startswith(("decoder.", "lm_head.")))]
    tensors = _read_tensors(info, names, device, input_name)
    try:
        state, scales, notes = convert_part(part, tensors, config, td)
    except (KeyError, ValueError, IndexError) as e:
        raise FillScopeInputError(
            input_name, f"'{info.name}' looks like {part.what} but its tensors do not convert ({type(e).__name__}: {e}).",
            "the file is incomplete or of a variant FillScope does not know; use the published file.") from e
    del tensors
    keymap = _model_key_map(model)
    model_state = {}
    unexpected = []
    for key, t in state.items():
        name = keymap.get(key.removeprefix("text_model."))
        if name is None:
            if not IGNORED_KEYS.search(key):
                unexpected.append(key)
            continue
        model_state[name] = t
    tied_others = {n for group in ties for n in group[1:]}
    params = {n for n, _ in model.named_parameters()}
    missing = [n for n in params if n not in model_state and n not in tied_others]
    if missing or unexpected:
        what = []
        if missing:
            what.append(f"lacks {len(missing)} tensors the model needs (e.g. {', '.join(missing[:3])})")
        if unexpected:
            what.append(f"has {len(unexpected)} tensors the model has no place for (e.g. {', '.join(unexpected[:3])})")
        raise FillScopeInputError(
            input_name, f"'{info.name}' ({part.what}) {' and '.join(what)}.",
            "the file is incomplete or another variant of the model; use the published file.")
    compute: dict = {}
    fp8_names = set()
    for name, t in list(model_state.items()):
        want = target[name]
        if tuple(t.shape) != tuple(want.shape):
            raise FillScopeInputError(
                input_name, f"'{info.name}': tensor {name} has shape {list(t.shape)}, the {COMPONENTS[kind].title} built "
                f"from the file's other shapes needs {list(want.shape)}.", "the file is inconsistent: re-download it.")
        if is_fp8(t.dtype) and isinstance(want, torch.nn.Parameter) and t.dim() >= 2:
            fp8_names.add(name)
            compute[name] = want.dtype
            continue
        if name in scales:
            t = t.to(want.dtype) * scales.pop(name).to(device=t.device, dtype=want.dtype)
        model_state[name] = t.to(dtype=want.dtype) if t.dtype != want.dtype else t
    try:
        model.load_state_dict(model_state, strict=False, assign=True)
    except RuntimeError as e:
        raise FillScopeInputError(input_name, f"'{info.name}' does not fit the {COMPONENTS[kind].title}: {e}",
                                  "the file is another variant; use the published file.") from e
    _retie(model, ties)
    for module_name, module in model.named_modules():
        for bname, buf in list(module.named_buffers(recurse=False)):
            if buf.is_meta:
                new = torch.empty(buf.shape, dtype=buf.dtype, device=device)
                module._buffers[bname] = new
                _fill_buffer(module, bname, new, f"{module_name}.{bname}", device)
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:
        raise FillScopeInputError(input_name, f"'{info.name}' lacks {len(left)} tensors (e.g. {left[0]}).",
                                  "use the complete published file.")
    facts = {}
    if fp8_names:
        scale_map = {n: s for n, s in scales.items() if n in fp8_names}
        stats = enable_fp8_compute(model, compute, scale_map)
        report_compute_dtype(model, td)
        fp8_kind = DTYPE_NAMES.get(next(t.dtype for k, t in info.tensors.items() if t.dtype in FP8_CODES), "fp8")
        facts["fp8"] = (f"{stats['tensors']} weight tensors ({stats['bytes'] / 2**30:.2f} GiB) stay in {fp8_kind}"
                        + (" with per-tensor scales" if scale_map else "")
                        + f", upcast to {dtype} one layer at a time ({stats['modules']} hooked modules)")
    model = model.eval().requires_grad_(False)
    notes = list(part.notes) + notes
    return model, config, facts, notes


def load_single_file(kind: str, path, *, dtype: str, device: str, input_name: str):
    """(model, config, provenance, facts, notes) of component `kind` from a single .safetensors file."""
    info = sniff(path, input_name)
    part = info.part(kind)
    if part is None:
        raise wrong_kind_error(info, kind, input_name)
    model, config, facts, notes = load_part(info, part, dtype=dtype, device=device, input_name=input_name)
    facts = {"file": f"{info.name} ({info.size / 2**30:.2f} GiB, {info.dtype_summary(part.prefix)})",
             "file holds": info.what, **({"part": f"{part.prefix}* ({part.layout} keys)"} if part.prefix else
                                         {"layout": f"{part.layout} keys"}), **facts}
    return model, config, f"single file {info.name}", facts, notes


def is_single_file(source) -> bool:
    """A file, or a path that names one by its suffix (so a missing or pickled file gets the file errors)."""
    s = str(source)
    return os.path.isfile(s) or (not os.path.isdir(s) and s.lower().endswith(WEIGHT_SUFFIXES))
