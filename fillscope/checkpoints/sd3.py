"""SD3 / SD3.5 MMDiTs (SAI joint_blocks or diffusers keys) and the SD3 ControlNet's transformer half: the config
and the variant their shapes say."""

from __future__ import annotations

import math

from ..specs import shipped_config
from .shapes import Keys, apply_hints, attention_heads, hints_for


def sd3_info(k: Keys, hints: dict, layout: str, component: str = "sd3_transformer"):
    """(config, variant title, details) of an SD3/SD3.5 MMDiT in SAI (joint_blocks) or diffusers keys."""
    hints = hints_for(hints, component)
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
    heads, head_dim = attention_heads(w, ln_q[0] if ln_q else None, hints)
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
    config = apply_hints(config, hints)
    details = f"{depth} blocks, width {w}" + (", qk RMSNorm" if ln_q else "") + (f", dual attention in {len(attn2)} blocks" if attn2 else "")
    return config, variant, title, details
