"""CLIP-L / CLIP-G (transformers keys) and T5-XXL encoders, standalone or bundled in a checkpoint."""

from __future__ import annotations

from ..specs import shipped_config
from .info import Part, describe_dtype
from .shapes import Keys, apply_hints, attention_heads, hints_for


def clip_info(k: Keys, base: str, hints: dict):
    """CLIP text encoder in transformers keys at k.p + base ('' or 'text_model.')."""
    b = Keys(k.t, k.p + base)
    vocab, hidden = b.shape("embeddings.token_embedding.weight")
    layers = b.count("encoder.layers.")
    inter = b.shape("encoder.layers.0.mlp.fc1.weight")[0]
    max_pos = b.shape("embeddings.position_embedding.weight")[0]
    proj = k.shape("text_projection.weight") or b.shape("text_projection.weight")
    return vocab, hidden, layers, inter, max_pos, proj


def clip_part(component: str, k: Keys, base: str, hints: dict, what: str, notes=()) -> Part:
    hints = hints_for(hints, component)
    vocab, hidden, layers, inter, max_pos, proj = clip_info(k, base, hints)
    heads, _ = attention_heads(hidden, None, hints)
    config = {**shipped_config(component), "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers,
              "intermediate_size": inter, "max_position_embeddings": max_pos, "num_attention_heads": heads}
    if proj is not None:
        config["projection_dim"] = proj[0]
    config = apply_hints(config, hints)
    cls = None if proj is not None else "CLIPTextModel"
    if proj is None:
        notes = list(notes) + ["no text projection in the file: loaded as CLIPTextModel (pooled output only; SD3 needs the projection)"]
    return Part(component, k.p, "transformers", what, config, cls, list(notes))


def t5_part(k: Keys, hints: dict, what: str, notes=()) -> Part:
    hints = hints_for(hints, "t5_xxl")
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
    return Part("t5_xxl", k.p, "transformers", what, apply_hints(config, hints), None, list(notes))


def text_encoder_parts(tensors: dict, hints: dict, prefix: str, parts: list, names: list) -> None:
    """ComfyUI / SAI bundled text encoders: <prefix>clip_l.transformer., clip_g.transformer., t5xxl.transformer."""
    for comp, sub in (("clip_l", "clip_l.transformer."), ("clip_g", "clip_g.transformer.")):
        k = Keys(tensors, prefix + sub)
        if k.has("text_model.embeddings.token_embedding.weight"):
            title = "CLIP-L" if comp == "clip_l" else "CLIP-G"
            parts.append(clip_part(comp, k, "text_model.", hints, f"the bundled {title} ({describe_dtype(tensors, k.p)})"))
            names.append(title)
    k = Keys(tensors, prefix + "t5xxl.transformer.")
    if k.has("encoder.block.0.layer.0.SelfAttention.q.weight"):
        parts.append(t5_part(k, hints, f"the bundled T5-XXL ({describe_dtype(tensors, k.p)})"))
        names.append("T5-XXL")
