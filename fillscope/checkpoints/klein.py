"""FLUX.2 [klein] single files: the transformer (BFL or diffusers keys) and the Qwen3 text encoder (ComfyUI's
qwen_3_4b / qwen_3_8b files, fp8mixed included); the FLUX.2 VAE is read in vae.py. Files met next to them are
named, not loaded: the FLUX.2 [dev] transformer (same key names, width 6144), the Z-Image and Qwen-Image
transformers, and the other decoder-only LLM encoders (Qwen2.5-VL for Qwen-Image, Mistral Small for FLUX.2 [dev],
Gemma, Llama).

Header rule for FLUX.2 transformers: img_in rows 3072 -> klein 4B, 4096 -> klein 9B, 6144 -> FLUX.2 [dev]. Distilled
and base klein have the same shapes (model_index.json's is_distilled, or the user, tells them apart).
"""

from __future__ import annotations

from ..specs import KLEIN_TEXT_LAYERS, shipped_config
from .info import RUNS_ONLY, Part, describe_dtype, elsewhere, loads
from .shapes import Keys, apply_hints, hints_for

KLEIN_WIDTHS = {3072: ("klein-4b", "FLUX.2 [klein] 4B"), 4096: ("klein-9b", "FLUX.2 [klein] 9B")}
QWEN3_WIDTHS = {2560: ("qwen3-4b", "Qwen3-4B"), 4096: ("qwen3-8b", "Qwen3-8B")}
FLUX2_DEV_WIDTH = 6144
KLEIN_ONLY = "FillScope runs FLUX.2 [klein] 4B and 9B, not FLUX.2 [dev]"
DISTILLED_NOTE = ("klein and klein base have the same shapes: whether this is the distilled model (4 steps, no CFG) or "
                  "the base model (50 steps, CFG) comes from the file's name or the user, not from its weights")


def flux2_layout(k: Keys) -> str | None:
    """'bfl' or 'diffusers' when the keys at k's prefix are a FLUX.2 transformer (global modulation layers)."""
    if k.has("double_stream_modulation_img.lin.weight"):
        return "bfl"
    if k.has("double_stream_modulation_img.linear.weight") and k.has("x_embedder.weight"):
        return "diffusers"
    return None


def _rope_axes(head: int, hints: dict):
    """klein's 4 rope axes of head/4 each ((32, 32, 32, 32) at head width 128); None when that does not split."""
    if "axes_dims_rope" in hints:
        return list(hints["axes_dims_rope"])
    return [head // 4] * 4 if head % 8 == 0 else None


def klein_info(k: Keys, hints: dict, layout: str):
    """(width, config, title, details, notes) of a FLUX.2 transformer in BFL or diffusers keys; the config is the
    shipped klein config of its width with every size its shapes say on top."""
    hints = hints_for(hints, "klein_transformer")
    if layout == "bfl":
        w, cin = k.shape("img_in.weight")
        head = (k.shape("double_blocks.0.img_attn.norm.query_norm.scale") or k.shape("single_blocks.0.norm.query_norm.scale"))[0]
        n_double, n_single = k.count("double_blocks."), k.count("single_blocks.")
        joint = k.shape("txt_in.weight")[1]
        t_in = k.shape("time_in.in_layer.weight")[1]
        guidance = k.has("guidance_in.in_layer.weight")
        mlp = (k.shape("double_blocks.0.img_mlp.2.weight") or (w, 3 * w))[1]
        out = k.shape("final_layer.linear.weight")[0]
    else:
        w, cin = k.shape("x_embedder.weight")
        head = (k.shape("transformer_blocks.0.attn.norm_q.weight") or k.shape("single_transformer_blocks.0.attn.norm_q.weight"))[0]
        n_double, n_single = k.count("transformer_blocks."), k.count("single_transformer_blocks.")
        joint = k.shape("context_embedder.weight")[1]
        t_in = k.shape("time_guidance_embed.timestep_embedder.linear_1.weight")[1]
        guidance = k.has("time_guidance_embed.guidance_embedder.linear_1.weight")
        mlp = (k.shape("transformer_blocks.0.ff.linear_out.weight") or (w, 3 * w))[1]
        out = k.shape("proj_out.weight")[0]
    variant, title = KLEIN_WIDTHS.get(w, (None, None))
    heads = w // head
    config = {**shipped_config("klein_transformer", variant), "in_channels": cin, "out_channels": None if out == cin else out,
              "num_layers": n_double, "num_single_layers": n_single, "attention_head_dim": head,
              "num_attention_heads": heads, "joint_attention_dim": joint, "timestep_guidance_channels": t_in,
              "mlp_ratio": mlp / w, "guidance_embeds": guidance, "axes_dims_rope": _rope_axes(head, hints)}
    config = apply_hints(config, hints)
    if title is None:
        title = f"FLUX.2-architecture transformer of width {w} (not a published klein size)"
    else:
        title += " transformer"
    fmt = "BFL format" if layout == "bfl" else "diffusers keys"
    details = (f"{fmt}: {n_double} double + {n_single} single blocks, width {w} = {heads} heads x {head}, "
               f"text context {joint}" + (", guidance embedding" if guidance else ""))
    notes = []
    if variant is not None:
        shipped = shipped_config("klein_transformer", variant)
        odd = [f"{key} {config[key]} (published: {shipped[key]})" for key in ("num_layers", "num_single_layers", "joint_attention_dim", "in_channels")
               if config[key] != shipped[key]]
        if odd:
            notes.append(f"not the published {title.removesuffix(' transformer')}'s sizes: " + ", ".join(odd))
        notes.append(DISTILLED_NOTE)
    return w, config, title, details, notes


def flux2_family(tensors: dict, hints: dict, prefix: str = ""):
    """The classification of a FLUX.2 transformer (klein loads; [dev] is named), a Z-Image or a Qwen-Image
    transformer at `prefix` ('' or a checkpoint's 'model.diffusion_model.'), or None."""
    k = Keys(tensors, prefix)
    dtype = describe_dtype(tensors, prefix)
    inside = " inside a checkpoint" if prefix else ""
    layout = flux2_layout(k)
    if layout is not None:
        w, config, title, details, notes = klein_info(k, hints, layout)
        what = f"the {title}{inside} ({details}, {dtype})"
        if w == FLUX2_DEV_WIDTH:
            what = (f"the FLUX.2 [dev] transformer{inside} ({details}; its text encoder is Mistral Small 3.1; {dtype}), "
                    "not FLUX.2 [klein]")
            return elsewhere("flux2_dev_transformer", what, "diffusion_model", KLEIN_ONLY)
        return loads("klein_transformer", what, [Part("klein_transformer", prefix, layout, what, config, notes=notes)])
    other = other_transformer(k)
    if other is not None:
        return elsewhere(other[0], f"{other[1]}{inside} ({dtype})", "diffusion_model", RUNS_ONLY)
    return None


def other_transformer(k: Keys):
    """(kind, what) of the Z-Image / Lumina 2 and Qwen-Image transformers (ComfyUI or diffusers keys), or None."""
    if k.has("cap_embedder.1.weight") and (k.has("x_embedder.weight") or k.has("all_x_embedder.2-1.weight")
                                          or k.any_startswith("layers.0.")):
        dim = k.shape("cap_embedder.1.weight")[0]
        layers = k.count("layers.")
        if dim == 3840:
            return "zimage_transformer", f"a Z-Image transformer ({layers} layers, width {dim})"
        if dim == 2304:
            return "lumina2_transformer", f"a Lumina Image 2.0 transformer ({layers} layers, width {dim})"
        return "nextdit_transformer", f"a Lumina-2-architecture (NextDiT) transformer ({layers} layers, width {dim})"
    if k.has("txt_norm.weight") and k.has("img_in.weight") and k.has("transformer_blocks.0.img_mod.1.weight"):
        w = k.shape("img_in.weight")[0]
        return "qwen_image_transformer", (f"a Qwen-Image transformer ({k.count('transformer_blocks.')} blocks, width {w}, "
                                          "text from Qwen2.5-VL-7B)")
    return None


# --- decoder-only LLM text encoders --------------------------------------------------------------------------


def _llm_base(k0: Keys) -> str | None:
    """The key prefix of a decoder-only LLM's body: 'model.' (ComfyUI's qwen_3_* files, CausalLM saves) or ''
    (a bare transformers model)."""
    for base in ("model.", ""):
        if k0.has(base + "layers.0.self_attn.q_proj.weight") or k0.has(base + "embed_tokens.weight"):
            return base
    return None


def llm_encoder(tensors: dict, hints: dict):
    """The classification of a decoder-only LLM text encoder: Qwen3 loads (klein's encoder; Qwen3-4B is also
    Z-Image's), the others are named the way ComfyUI tells them apart; None for a file of another kind."""
    k0 = Keys(tensors)
    base = _llm_base(k0)
    if base is None:
        return None
    dtype = describe_dtype(tensors)
    k = Keys(tensors, base)
    hidden = (k.shape("embed_tokens.weight") or k.shape("norm.weight") or (0, 0))[-1]
    layers = k.count("layers.")
    size = f"{layers} layers, hidden {hidden}"
    store = dtype + (", with ComfyUI fp8 scales" if any(x.endswith(("weight_scale", "scale_weight")) for x in tensors) else "")
    why = "FillScope's Qwen3 loader takes Qwen3-4B / Qwen3-8B (FLUX.2 [klein]'s text encoders)"
    if k0.any_startswith("visual.") or (hidden == 3584 and k.has("layers.0.self_attn.k_proj.bias")):
        what = (f"a Qwen2.5-VL-7B vision-language model (Qwen-Image's text encoder: {size}"
                + (" + a vision tower" if k0.any_startswith("visual.") else "") + f", {dtype}), not Qwen3")
        return elsewhere("qwen25_vl", what, "text_encoder", why)
    if k.has("layers.0.post_feedforward_layernorm.weight"):
        gemma = "Gemma 3" if k.has("layers.0.self_attn.q_norm.weight") else "Gemma 2"
        return elsewhere("gemma", f"a {gemma} LLM text encoder ({size}, {dtype})", "text_encoder", why)
    if k.has("layers.0.self_attn.k_proj.bias"):
        return elsewhere("qwen25", f"a Qwen2.5 LLM text encoder ({size}, {dtype}), not Qwen3", "text_encoder", why)
    if k.has("layers.0.self_attn.q_norm.weight") and k.has("layers.0.mlp.gate_proj.weight"):
        return _qwen3(k, hints, size, store)
    if hidden == 5120:
        return elsewhere("mistral3", f"a Mistral Small 3.x LLM (FLUX.2 [dev]'s text encoder: {size}, {dtype})",
                         "text_encoder", why)
    return elsewhere("llm", f"a Llama-style decoder-only LLM text encoder ({size}, {dtype})", "text_encoder", why)


def qwen3_config(k: Keys, hints: dict) -> tuple[dict, str | None]:
    """(config, shipped variant or None) of a Qwen3 body at k's prefix: every size from the shapes."""
    hints = hints_for(hints, "qwen3")
    vocab, hidden = k.shape("embed_tokens.weight")
    head = k.shape("layers.0.self_attn.q_norm.weight")[0]
    variant = QWEN3_WIDTHS.get(hidden, (None, None))[0]
    config = {**shipped_config("qwen3", variant), "vocab_size": vocab, "hidden_size": hidden,
              "num_hidden_layers": k.count("layers."), "head_dim": head,
              "num_attention_heads": k.shape("layers.0.self_attn.q_proj.weight")[0] // head,
              "num_key_value_heads": k.shape("layers.0.self_attn.k_proj.weight")[0] // head,
              "intermediate_size": k.shape("layers.0.mlp.gate_proj.weight")[0]}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # a smaller vocabulary (a test model) lacks them
        if isinstance(config.get(key), int) and config[key] >= vocab:
            config[key] = None
    return apply_hints(config, hints), variant


def _qwen3(k: Keys, hints: dict, size: str, store: str):
    config, variant = qwen3_config(k, hints)
    title = QWEN3_WIDTHS.get(config["hidden_size"], (None, None))[1]
    notes = []
    if title is None:
        title = "Qwen3 LLM"
        notes.append(f"hidden size {config['hidden_size']} is neither Qwen3-4B's 2560 (klein 4B) nor Qwen3-8B's 4096 "
                     "(klein 9B): loaded with the Qwen3 architecture at this size")
    deepest = max(KLEIN_TEXT_LAYERS)
    if config["num_hidden_layers"] <= deepest:
        notes.append(f"only {config['num_hidden_layers']} layers: FLUX.2 [klein] reads hidden states "
                     f"{', '.join(map(str, KLEIN_TEXT_LAYERS))} and needs more than {deepest}")
    what = f"a {title} text encoder ({size}, {store})"
    return loads("qwen3", what, [Part("qwen3", "", "transformers", what, config, notes=notes)])


def qwen3_skipped(part: Part, kept: int) -> tuple:
    """Key prefixes of a Qwen3 file that the model FillScope builds has no place for, never read: the layers from
    `kept` on (specs.qwen3_kept_config) and the LM head, with or without the 'model.' wrapper."""
    total = int(part.config["num_hidden_layers"])
    layers = tuple(f"{base}layers.{i}." for i in range(kept, total) for base in ("model.", ""))
    return tuple(part.prefix + p for p in layers + ("lm_head.", "model.lm_head."))
