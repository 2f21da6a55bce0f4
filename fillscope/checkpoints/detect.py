"""What a .safetensors file is, from its header alone: `sniff(path)` reads the header (header.py) and `classify`
sorts it by key patterns and shapes into the components it holds (each a `Part` with its key prefix, on-disk
layout and the config its shapes say) or, for a file FillScope does not load, what it is and which kind of
loader takes it (info.OTHER_LOADERS keys)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..errors import FillScopeInputError
from ..specs import shipped_config
from .flux import flux_info
from .header import read_header, require_file
from .info import RUNS_ONLY, CheckpointInfo, Part, describe_dtype
from .info import elsewhere as _elsewhere
from .info import loads as _loads
from .klein import flux2_family, llm_encoder
from .sd3 import sd3_info
from .shapes import Keys, apply_hints, hints_for, read_hints
from .text_encoders import clip_info, clip_part, t5_part, text_encoder_parts
from .vae import vae_parts

# The kinds classify gives a file whose tensors it does not recognise: neither a model FillScope loads nor one it can
# name, so nothing says which loader the file is for (component_kinds: None).
UNRECOGNISED = ("unknown", "unknown_checkpoint")

LOADS_ONLY = ("it loads FLUX.1 Fill, SD3/SD3.5, the alimama inpainting ControlNet, their 16-channel VAEs, "
              "CLIP-L / CLIP-G / T5-XXL, and FLUX.2 [klein] 4B/9B with Qwen3-4B/8B and the FLUX.2 VAE")


def sniff(path, input_name: str = "source") -> CheckpointInfo:
    """What a .safetensors file is, from its header. Cached per (path, size, mtime)."""
    path = Path(path)
    require_file(path, input_name)
    st = path.stat()
    try:
        # the path as named, links kept: a model-folder link into a Hugging Face cache points at a blob without a
        # suffix, and the suffix check belongs to the name the user chose
        return _sniff_cached(str(path.absolute()), st.st_size, st.st_mtime_ns)
    except FillScopeInputError as e:
        raise FillScopeInputError(input_name, e.problem, e.fix) from None


def component_kinds(info: CheckpointInfo) -> frozenset | None:
    """The component kinds a file's parts load as (specs.COMPONENTS keys: the FillScope loaders of those kinds take
    it); empty for a file recognised as something FillScope does not load (a LoRA, an SDXL checkpoint, a FLUX.1 [dev]
    transformer, a T5-base); None when its tensors are not recognised at all."""
    if info.kind in UNRECOGNISED:
        return None
    return frozenset(p.component for p in info.parts)


@lru_cache(maxsize=256)
def _sniff_cached(path: str, size: int, mtime: int) -> CheckpointInfo:
    tensors, metadata = read_header(Path(path))
    kind, what, parts, take_with, why = classify(tensors, read_hints(metadata), metadata)
    return CheckpointInfo(Path(path), size, tensors, metadata, kind, what, parts, take_with, why)


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


def classify(tensors: dict, hints: dict | None = None, metadata: dict | None = None):
    """(kind, what, parts, take_with, why) of a header: take_with as in CheckpointInfo, why says why FillScope does
    not load the file ("" when it does)."""
    hints = hints or {}
    metadata = metadata or {}
    lora = _lora_kind(tensors)
    if lora:
        return _elsewhere("lora", f"{lora} ({len(tensors)} tensors)", "lora", "FillScope loads base models only")
    dm = "model.diffusion_model."
    if any(x.startswith(dm) for x in tensors):
        return _whole_checkpoint(tensors, hints, dm)
    for family in (_transformer, _unet, _vae, _text_encoder):
        found = family(tensors, hints, metadata)
        if found is not None:
            return found
    dtype = describe_dtype(tensors)
    first = ", ".join(sorted(tensors)[:3])
    return _elsewhere(UNRECOGNISED[0], f"not a model FillScope recognises ({len(tensors)} tensors, {dtype}; first keys: {first})",
                      "none", LOADS_ONLY)


def _whole_checkpoint(tensors: dict, hints: dict, dm: str):
    """model.diffusion_model.* and friends: SD1/SD2/SDXL (named), SD3 and FLUX (with their bundled parts)."""
    keys = list(tensors)
    dtype = describe_dtype(tensors)
    k = Keys(tensors, dm)
    found = flux2_family(tensors, hints, dm)
    if found is not None:
        return found
    if k.has("input_blocks.0.0.weight"):
        if k.has("label_emb.0.0.weight") or any(x.startswith("conditioner.embedders.1.") for x in keys):
            return _elsewhere("sdxl_checkpoint", f"an SDXL checkpoint (UNet + VAE + CLIP-L + CLIP-G, {dtype})",
                              "checkpoint", RUNS_ONLY)
        ver = "SD2.x" if any(x.startswith("cond_stage_model.model.") for x in keys) else "SD1.x"
        return _elsewhere("sd1_checkpoint", f"a Stable Diffusion {ver} checkpoint (UNet + VAE + CLIP, {dtype})",
                          "checkpoint", RUNS_ONLY)
    parts: list[Part] = []
    names: list[str] = []
    if k.has("joint_blocks.0.x_block.attn.qkv.weight"):
        config, variant, title, details = sd3_info(k, hints, "sai")
        parts.append(Part("sd3_transformer", dm, "sai", f"the {title} (SAI format: {details})", config,
                          notes=[f"variant {variant} (from the weights)"]))
        names.append(f"MMDiT ({details})")
        family = title.replace("Stable Diffusion ", "SD").replace(" MMDiT-X", "").replace(" MMDiT", "")
        vae_kind = "sd3_vae"
    elif k.has("double_blocks.0.img_attn.qkv.weight") and k.has("img_in.weight"):
        cin, config, variant, details, notes = flux_info(k, hints, "bfl")
        if cin == 384:
            parts.append(Part("flux_fill_transformer", dm, "bfl", f"the {variant} ({details})", config, notes=notes))
        names.append(variant.split(" (")[0])
        family = "FLUX.1"
        vae_kind = "flux_vae"
    else:
        return _elsewhere(UNRECOGNISED[1], f"a checkpoint of a model FillScope does not know ({len(keys)} tensors, "
                          f"{dtype})", "checkpoint")
    vae_parts(tensors, hints, "first_stage_model.", parts, names, only=vae_kind)
    vae_parts(tensors, hints, "vae.", parts, names, only=vae_kind)
    text_encoder_parts(tensors, hints, "text_encoders.", parts, names)
    what = f"a{'n' if family.startswith('SD') else ''} {family} checkpoint ({' + '.join(names)}; {dtype})"
    if family == "FLUX.1" and not any(p.component == "flux_fill_transformer" for p in parts):
        what = f"a FLUX.1 checkpoint whose transformer is the {names[0]} ({dtype})"
    kind = "sd3_checkpoint" if family.startswith("SD") else "flux_checkpoint"
    return _loads(kind, what, parts) if parts else _elsewhere(kind, what, "checkpoint")


def _transformer(tensors: dict, hints: dict, metadata: dict):
    """FLUX.1 (BFL or diffusers keys), FLUX.2 [klein] (klein.py; FLUX.2 [dev], Z-Image, Qwen-Image named), Chroma
    (named), SD3 MMDiTs and SD3 ControlNets."""
    keys = list(tensors)
    dtype = describe_dtype(tensors)
    k0 = Keys(tensors)
    found = flux2_family(tensors, hints)
    if found is not None:
        return found
    if any(x.startswith("distilled_guidance_layer.") for x in keys):
        return _elsewhere("chroma_transformer", f"a Chroma transformer ({dtype})", "diffusion_model")
    for layout, sig in (("bfl", "double_blocks.0.img_attn.qkv.weight"), ("diffusers", "single_transformer_blocks.0.proj_mlp.weight")):
        if k0.has(sig) and (k0.has("img_in.weight") or k0.has("x_embedder.weight")):
            if k0.has("controlnet_x_embedder.weight") or any(x.startswith("controlnet_blocks.") for x in keys):
                return _elsewhere("flux_controlnet", f"a FLUX ControlNet ({dtype})", "controlnet")
            cin, config, variant, details, notes = flux_info(k0, hints, layout)
            what = f"a{'n' if variant[0] in 'AEIOU' else ''} {variant} ({details}, {dtype})"
            if cin == 384:
                return _loads("flux_transformer", what, [Part("flux_fill_transformer", "", layout, what, config, notes=notes)])
            return _elsewhere("flux_other_transformer", what, "diffusion_model",
                              "FillScope has no loader for FLUX.1 text-to-image, Kontext, Canny or Depth")
    if k0.has("joint_blocks.0.x_block.attn.qkv.weight"):
        config, variant, title, details = sd3_info(k0, hints, "sai")
        what = f"the {title} (SAI format without text encoders or VAE: {details}, {dtype})"
        return _loads("sd3_transformer", what, [Part("sd3_transformer", "", "sai", what, config,
                                                     notes=[f"variant {variant} (from the weights)"])])
    if k0.has("pos_embed_input.proj.weight") or k0.has("controlnet_blocks.0.weight"):
        return _sd3_controlnet(k0, hints, dtype)
    if k0.has("transformer_blocks.0.attn.add_q_proj.weight") and k0.has("pos_embed.proj.weight"):
        config, variant, title, details = sd3_info(k0, hints, "diffusers")
        what = f"the {title} (diffusers keys: {details}, {dtype})"
        return _loads("sd3_transformer", what, [Part("sd3_transformer", "", "diffusers", what, config,
                                                     notes=[f"variant {variant} (from the weights)"])])
    return None


def _sd3_controlnet(k0: Keys, hints: dict, dtype: str):
    if not k0.has("pos_embed.proj.weight"):
        return _elsewhere("sd3_controlnet_other", f"an SD3.5 ControlNet without its own patch embedding (blur/canny/depth; "
                          f"{dtype})", "controlnet")
    config, variant, title, details = sd3_info(k0, hints, "diffusers", "sd3_controlnet")
    total = k0.shape("pos_embed_input.proj.weight")[1] if k0.has("pos_embed_input.proj.weight") else config["in_channels"]
    extra = total - config["in_channels"]
    base = shipped_config("sd3_controlnet")
    config = {**base, **{x: v for x, v in config.items() if x in base or x in ("qk_norm", "dual_attention_layers")}}
    config["num_layers"] = k0.count("controlnet_blocks.") or k0.count("transformer_blocks.")
    config["extra_conditioning_channels"] = extra
    if not config.get("qk_norm"):
        config.pop("qk_norm", None)
    config = apply_hints(config, hints_for(hints, "sd3_controlnet"))
    if extra == 1:
        what = (f"the SD3 inpainting ControlNet (alimama-creative layout, diffusers keys: {config['num_layers']} blocks, "
                f"{total} = {config['in_channels']} latent + 1 mask input channels, {dtype})")
        return _loads("sd3_controlnet", what, [Part("sd3_controlnet", "", "diffusers", what, config)])
    return _elsewhere("sd3_controlnet_other", f"an SD3 ControlNet with {total} input channels (e.g. InstantX Canny/Pose/"
                      f"Tile; the inpainting ControlNet has {config['in_channels']} + 1 mask), {dtype}", "controlnet")


def _unet(tensors: dict, hints: dict, metadata: dict):
    k0 = Keys(tensors)
    if k0.has("input_blocks.0.0.weight"):
        what = "an SDXL UNet" if k0.has("label_emb.0.0.weight") else "an SD1.x/SD2.x UNet"
        return _elsewhere("unet", f"{what} ({describe_dtype(tensors)})", "diffusion_model", RUNS_ONLY)
    return None


def _vae(tensors: dict, hints: dict, metadata: dict):
    dtype = describe_dtype(tensors)
    parts, names = [], []
    for prefix in ("", "first_stage_model.", "vae."):
        vae_parts(tensors, hints, prefix, parts, names, metadata=metadata)
        if parts or names:
            break
    if parts:
        keys = "LDM" if parts[0].layout == "ldm" else "diffusers"
        if parts[0].component == "flux2_vae":
            return _loads("flux2_vae", f"the FLUX.2 VAE ({keys} keys, 32 latent channels with BatchNorm statistics, {dtype})", parts)
        what = f"a 16-channel FLUX/SD3 VAE ({keys} keys, {dtype})"
        if len(parts) == 1:
            which = "FLUX" if parts[0].component == "flux_vae" else "SD3"
            what = f"the {which} VAE ({keys} keys, {dtype})"
        return _loads("vae16", what, parts)
    if names:  # a VAE of another latent width
        return _elsewhere("vae_other", f"{names[0]} ({dtype})", "vae")
    return None


def _text_encoder(tensors: dict, hints: dict, metadata: dict):
    """CLIP (transformers or OpenCLIP keys), T5 encoders of every size, decoder-only LLM encoders (klein.py: Qwen3
    loads, the others are named), CLIP vision."""
    dtype = describe_dtype(tensors)
    k0 = Keys(tensors)
    for base in ("text_model.", ""):
        if k0.has(base + "embeddings.token_embedding.weight") and k0.has(base + "encoder.layers.0.self_attn.q_proj.weight"):
            return _clip(k0, base, hints, dtype)
    if k0.has("transformer.resblocks.0.attn.in_proj_weight") or k0.has("model.transformer.resblocks.0.attn.in_proj_weight"):
        return _elsewhere("open_clip", f"an OpenCLIP-format text encoder ({dtype})", "text_encoder",
                          "FillScope reads CLIP in transformers keys: clip_l.safetensors / clip_g.safetensors")
    if k0.has("encoder.block.0.layer.0.SelfAttention.q.weight"):
        return _t5(k0, hints, dtype, scaled="scaled_fp8" in tensors)
    found = llm_encoder(tensors, hints)
    if found is not None:
        return found
    if any(x.startswith("vision_model.") for x in tensors):
        return _elsewhere("clip_vision", f"a CLIP vision encoder ({dtype})", "clip_vision")
    return None


def _clip(k0: Keys, base: str, hints: dict, dtype: str):
    vocab, hidden, layers, *_ = clip_info(k0, base, hints)
    size = f"{layers} layers, width {hidden}, {dtype}"
    if (hidden, layers) == (768, 12):
        what = f"a CLIP-L text encoder ({size})"
        return _loads("clip_l", what, [clip_part("clip_l", k0, base, hints, what)])
    if (hidden, layers) == (1280, 32):
        what = f"a CLIP-G (OpenCLIP bigG) text encoder ({size})"
        return _loads("clip_g", what, [clip_part("clip_g", k0, base, hints, what)])
    if hidden in (1024,) or layers in (23, 24):
        return _elsewhere("clip_h", f"a CLIP-H (OpenCLIP ViT-H, SD2.x) text encoder ({size})", "text_encoder")
    if hidden in (768, 1280):
        return _elsewhere("clip_other", f"a CLIP text encoder of width {hidden} with {layers} layers ({dtype})",
                          "text_encoder")
    what = f"a CLIP text encoder ({size}; neither CLIP-L's 768 nor CLIP-G's 1280)"
    note = f"width {hidden} matches neither CLIP-L (768) nor CLIP-G (1280): loaded with this loader's architecture"
    return _loads("clip", what, [clip_part("clip_l", k0, base, hints, what, [note]),
                                 clip_part("clip_g", k0, base, hints, what, [note])])


def _t5(k0: Keys, hints: dict, dtype: str, scaled: bool):
    q = k0.shape("encoder.block.0.layer.0.SelfAttention.q.weight")
    d_model, layers = q[1], k0.count("encoder.block.")
    gated = k0.has("encoder.block.0.layer.1.DenseReluDense.wi_0.weight")
    store = dtype + (", scaled" if scaled else "")
    if k0.has("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"):
        return _elsewhere("umt5", f"a UMT5 encoder (width {d_model}, e.g. Wan's umt5-xxl; {dtype})", "text_encoder")
    if not gated:
        return _elsewhere("t5_v1", f"a T5 v1.0 encoder (width {d_model}, not gated; FLUX and SD3 use T5 v1.1; {dtype})",
                          "text_encoder")
    if d_model == 4096 and layers == 24:
        what = f"a T5-XXL v1.1 encoder ({layers} layers, width {d_model}, {store})"
        return _loads("t5_xxl", what, [t5_part(k0, hints, what)])
    named = {512: "T5-small", 768: "T5-base", 1024: "T5-large", 2048: "T5-XL"}
    if d_model in named:
        return _elsewhere("t5_other", f"a {named[d_model]} encoder (width {d_model}; FLUX and SD3 need T5-XXL, 4096; "
                          f"{dtype})", "text_encoder")
    what = f"a T5 v1.1 encoder ({layers} layers, width {d_model}, {store}; not T5-XXL's 4096)"
    notes = [f"width {d_model} is not T5-XXL's 4096: loaded with the T5-XXL architecture at this size"]
    return _loads("t5", what, [t5_part(k0, hints, what, notes)])
