"""What the wire recorder (nodes/wires.py) keeps of a value: its tensors by path (shape, dtype, device; never their
values, so no GPU synchronisation) and short facts; a MODEL, CLIP or VAE by what ComfyUI detected and the widths that
decide what fits. A summary holds no reference to the value.

SUMMARY = {"kind", "tensors": [{"name", "shape", "dtype", "device"}], "facts": {...}}; a node's record:
{"node", "display_node", "class_type", "outputs": [{"slot", "type", "name", "is_list", "items", "values": [SUMMARY]}]}.
"""

from __future__ import annotations

import math
import sys

MAX_TENSORS = 64  # tensor rows a value's summary lists (a huge nested CONDITIONING says how many it left out)
MAX_ITEMS = 4  # values summarised of a list output (OUTPUT_IS_LIST or a node mapped over a list)
MAX_TEXT = 120  # characters of a text fact
MAX_FACT_ITEMS = 8  # items of a list fact


def record_outputs(unique_id, obj, outputs, class_type: str | None = None) -> dict:
    """The record of a node's outputs (`outputs`: one list of values per output slot, as the executor merges them;
    `obj`: the node's object or class; `class_type`: its name in the prompt, where known)."""
    types = tuple(getattr(obj, "RETURN_TYPES", ()) or ())
    names = tuple(getattr(obj, "RETURN_NAMES", ()) or ())
    is_list = tuple(getattr(obj, "OUTPUT_IS_LIST", ()) or ())
    slots = []
    for slot, values in enumerate(outputs):
        values = values if isinstance(values, (list, tuple)) else [values]
        kind = str(types[slot]) if slot < len(types) else "?"
        slots.append({"slot": slot, "type": kind, "name": str(names[slot]) if slot < len(names) else kind,
                      "is_list": bool(is_list[slot]) if slot < len(is_list) else False, "items": len(values),
                      "values": [summarize(v, kind) for v in values[:MAX_ITEMS]]})
    node_id = str(unique_id)
    return {"node": node_id, "display_node": node_id.split(".")[0], "class_type": class_type or _class_type(obj),
            "cached": False, "outputs": slots}


def _class_type(obj) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    for attr in ("NODE_ID", "node_id"):
        value = getattr(cls, attr, None)
        if isinstance(value, str) and value:
            return value
    return cls.__name__


def summarize(value, kind: str = "") -> dict:
    """A value's metadata: its tensors by path (shape, dtype, device; never their values) and short facts; MODEL,
    CLIP and VAE by what ComfyUI detected and the widths that decide what fits."""
    out = {"kind": kind or type(value).__name__, "tensors": [], "facts": {}}
    try:
        if kind in ("MODEL", "CLIP", "VAE") or is_model_like(value):
            out["facts"].update(_model_facts(value, kind))
        elif kind in PART_KINDS or hasattr(value, "control_model"):
            out["facts"].update(part_facts(value))
        else:
            if kind == "CLIP_VISION_OUTPUT" and not isinstance(value, dict):  # comfy.clip_vision.Output: attributes
                value = dict(vars(value))
            left = [MAX_TENSORS]
            _walk(out, {"IMAGE": "image", "MASK": "mask"}.get(kind, "") if is_tensor(value) else "", value, left, 0)
            if left[0] < 0:
                out["facts"]["tensors not listed"] = -left[0]
    except Exception as e:  # noqa: BLE001 (a value of a kind nobody foresaw: say so, record the rest)
        out["facts"]["unreadable"] = f"{type(e).__name__}: {e}"[:200]
    return out


def _walk(out: dict, name: str, value, left: list, depth: int) -> None:
    for path, leaf in value_leaves(value, name, depth, max_depth=5):
        if is_tensor(leaf):
            left[0] -= 1
            if left[0] >= 0:
                out["tensors"].append({"name": path or "tensor", "shape": list(leaf.shape),
                                       "dtype": str(leaf.dtype).removeprefix("torch."), "device": str(leaf.device)})
        elif len(out["facts"]) < MAX_TENSORS:
            out["facts"][path or "value"] = fact(leaf)
            if hasattr(leaf, "control_model"):  # a ControlNet applied to a CONDITIONING: the widths it takes
                out["facts"].update({f"{path} {k}": v for k, v in part_facts(leaf).items() if k != "class"})


def value_leaves(value, name: str = "", depth: int = 0, max_depth: int = 5):
    """(path, leaf) for each tensor and each other leaf inside `value`: dicts by key (`name.key`), lists and tuples
    that hold tensors or containers by index (`name[i]`), to `max_depth` levels; a list of plain values is one leaf.
    The walk the wire recorder and the Inspect node (inspect_values.record_tree) share."""
    if is_tensor(value):
        yield name, value
    elif depth < max_depth and isinstance(value, dict):
        for key, item in value.items():
            yield from value_leaves(item, f"{name}.{key}" if name else str(key), depth + 1, max_depth)
    elif depth < max_depth and isinstance(value, (list, tuple)) and any(
            is_tensor(v) or isinstance(v, (dict, list, tuple)) for v in value):
        for i, item in enumerate(value):
            yield from value_leaves(item, f"{name}[{i}]", depth + 1, max_depth)
    else:
        yield name, value


def fact(value, max_text: int = MAX_TEXT, max_items: int = MAX_FACT_ITEMS):
    """A fact's value: numbers (NaN and infinities as text: JSON has none, and the route's and /history's JSON must
    parse in a browser), text (cut to `max_text`), lists of them (their first `max_items`); anything else its type's
    name. The Inspect nodes' facts are written by it too (inspect_calls.short)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= max_text else value[:max_text - 3] + "..."
    if isinstance(value, (list, tuple)) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        items = [fact(v, max_text, max_items) for v in value[:max_items]]
        return items + [f"... ({len(value)} in all)"] if len(value) > max_items else items
    return type(value).__name__


def is_tensor(value) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only where torch was imported: never import it here
    return torch is not None and isinstance(value, torch.Tensor)


def is_model_like(value) -> bool:
    """A MODEL (ModelPatcher), CLIP or VAE: described by what ComfyUI detected, not walked."""
    return any(hasattr(value, a) for a in ("model_options", "cond_stage_model", "first_stage_model"))


def _model_facts(value, kind: str) -> dict:
    """MODEL (a ModelPatcher), CLIP and VAE as the Inspect Model / CLIP / VAE nodes describe them before a run."""
    if hasattr(value, "first_stage_model"):
        from .inspect_vae import vae_static

        return vae_static(value)
    if hasattr(value, "cond_stage_model"):
        from .inspect_clip import clip_static

        return clip_static(value)
    if hasattr(value, "model") and hasattr(value, "model_options"):
        from .inspect_model import static_facts

        facts = _Facts()
        static_facts(facts, value)
        return {**facts.record["facts"], **_detected_widths(value.model)}
    return {"class": type(value).__name__}


def _detected_widths(base) -> dict:
    """What ComfyUI's detection made of a MODEL's file (its supported_models class: SD15, SDXL, SD3, Flux,
    FluxInpaint ...) and the text width its cross-attention takes (UNets' context_dim, MMDiT's context embedder): the
    widths a shape failure is explained by (nodes/wire_explain.py)."""
    config = getattr(base, "model_config", None)
    out = {"detected": type(config).__name__} if config is not None else {}
    unet = dict(getattr(config, "unet_config", None) or {})
    embedder = (unet.get("context_embedder_config") or {}).get("params") or {}
    width = unet.get("context_dim", embedder.get("in_features"))
    if isinstance(width, int):
        out["context width"] = width
    latent_format = getattr(base, "latent_format", None)
    for attr, name in (("scale_factor", "latent scale"), ("shift_factor", "latent shift")):
        value = getattr(latent_format, attr, None)
        if isinstance(value, (int, float)):
            out[name] = value
    appended, adm = ADM_APPENDS.get(out.get("detected", "")), unet.get("adm_in_channels")
    if appended and isinstance(adm, int):
        out.update({"pooled width": adm - appended, "adm width": adm, "adm appends": appended})
    return out


# what comfy.model_base.SDXL / SDXLRefiner.encode_adm append to the pooled vector before the label embedding: six
# (height, width, crop h / w, target h / w) or five (with the aesthetic score) 256-wide embeddings
ADM_APPENDS = {"SDXL": 6 * 256, "SDXLRefiner": 5 * 256}


# the widths a ControlNet, a style model or a CLIP vision model takes, read off their first layers (ComfyUI keeps no
# config for them): what a shape failure in them is explained by
PART_KINDS = ("CONTROL_NET", "STYLE_MODEL", "CLIP_VISION")
MAX_MODULES = 4096  # modules looked through for a width (a full ControlNet has about 1,200)


def part_facts(value) -> dict:
    """CONTROL_NET: its context width (the first cross-attention key's input) and hint channels; STYLE_MODEL: the
    image-feature width it takes and the text width it gives; CLIP_VISION: its width and image size."""
    facts = {"class": type(value).__name__}
    module = getattr(value, "control_model", None)
    if module is not None:
        facts["class"] = f"{type(value).__name__} ({type(module).__name__})"
        key = _first(module, lambda name, m: name.endswith("attn2.to_k") or name.endswith("context_embedder"))
        if key is not None:
            facts["context width"] = int(key.in_features)
        hint = _first(module, lambda name, m: "hint" in name and hasattr(m, "in_channels"))
        if hint is not None:
            facts["hint channels"] = int(hint.in_channels)
        return facts
    module = getattr(value, "model", None)
    if module is not None and hasattr(value, "get_cond"):  # comfy.sd.StyleModel
        facts["class"] = f"{type(value).__name__} ({type(module).__name__})"
        layers = [m for _, m in _modules(module) if hasattr(m, "in_features")]
        if layers:
            facts["image width"], facts["text width"] = int(layers[0].in_features), int(layers[-1].out_features)
        return facts
    if module is not None and hasattr(value, "encode_image"):  # comfy.clip_vision.ClipVisionModel
        patches = _first(module, lambda name, m: hasattr(m, "out_channels") and hasattr(m, "kernel_size"))
        if patches is not None:
            facts["width"] = int(patches.out_channels)
        facts["image size"] = fact(getattr(value, "image_size", None))
    return facts


def _modules(module):
    for i, item in enumerate(module.named_modules()):
        if i >= MAX_MODULES:
            return
        yield item


def _first(module, wanted):
    return next((m for name, m in _modules(module) if wanted(name, m)), None)


class _Facts:
    """What inspect_model.static_facts writes into (a ShapeRecorder's facts, without its clock and CUDA counters)."""

    def __init__(self):
        self.record = {"facts": {}}

    def fact(self, name: str, value) -> None:
        self.record["facts"][name] = value
