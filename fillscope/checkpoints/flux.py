"""FLUX.1 transformers (BFL or diffusers keys): the config and the variant their shapes say."""

from __future__ import annotations

from ..specs import shipped_config
from .shapes import Keys, apply_hints, hints_for


def flux_info(k: Keys, hints: dict, layout: str):
    """(in_channels, config, description of the variant) of a FLUX.1 transformer in BFL or diffusers keys."""
    hints = hints_for(hints, "flux_fill_transformer")
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
    config = apply_hints(config, hints)
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
