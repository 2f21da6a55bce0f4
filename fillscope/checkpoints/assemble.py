"""Building one component out of a single file: the model is built on meta from the config the file's shapes say
(models.py), only the part's tensors are read (straight onto the target device) and checked for NaN/inf, their
names converted (convert.py) and assigned without a copy; ties and buffers are restored. fp8 weights stay fp8
and are computed layer by layer in the loader's dtype (fp8.py)."""

from __future__ import annotations

from ..errors import FillScopeInputError
from ..fp8 import enable_fp8_compute, is_fp8, nonfinite_count, report_compute_dtype
from ..models import (
    build_on_meta, check_component_config, fill_buffer, key_list, n_tensors, retie, tied_groups, torch_dtype,
)
from ..specs import COMPONENTS, qwen3_kept_config
from .convert import IGNORED_KEYS, UNUSED_QUANT_SUFFIXES, WEIGHT_SCALE_SUFFIXES, convert_part
from .detect import sniff
from .header import DTYPE_NAMES, FP8_CODES, unreadable
from .info import CheckpointInfo, Part
from .klein import qwen3_skipped
from .shapes import HINT_KEY
from .wrong_kind import wrong_kind_error


def load_single_file(kind: str, path, *, dtype: str, device: str, input_name: str):
    """(model, config, provenance, facts, notes) of component `kind` from a single .safetensors file; a file
    without that component raises WrongKindError."""
    info = sniff(path, input_name)
    part = info.part(kind)
    if part is None:
        raise wrong_kind_error(info, kind, input_name)
    model, config, facts, notes = load_part(info, part, dtype=dtype, device=device, input_name=input_name)
    facts = {"file": f"{info.name} ({info.size / 2**30:.2f} GiB, {info.dtype_summary(part.prefix)})",
             "file holds": info.what, **({"part": f"{part.prefix}* ({part.layout} keys)"} if part.prefix else
                                         {"layout": f"{part.layout} keys"}), **facts}
    return model, config, f"single file {info.name}", facts, notes


CPU_ALIGNMENT = 64  # bytes: what torch's CPU allocator gives every tensor


def _read_tensors(info: CheckpointInfo, names: list[str], device: str, input_name: str) -> dict:
    """The named tensors, read straight onto `device`, each checked for NaN/inf."""
    from safetensors import safe_open

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
                if t.device.type == "cpu" and t.data_ptr() % CPU_ALIGNMENT:
                    # safetensors 0.8 hands out CPU tensors in place in the file (8-byte aligned offsets); CPU kernels
                    # take another path on such memory: the same weights gave outputs differing in the last bit from
                    # the model built in memory (measured, tests/test_klein_checkpoints.py). A copy is aligned.
                    t = t.clone()
                out[name] = t
    except FillScopeInputError:
        raise
    except Exception as e:  # SafetensorError, OSError, RuntimeError: corrupt data
        detail = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise unreadable(input_name, info.path, f"{type(e).__name__}: {detail}") from e
    return out


def _model_key_map(model) -> dict:
    """Normalised name (no 'text_model.' wrapper) -> the model's state-dict name."""
    out = {}
    for name in model.state_dict().keys():
        out[name.removeprefix("text_model.")] = name
    return out


def _to_model_names(info: CheckpointInfo, part: Part, model, state: dict, ties: list, input_name: str) -> dict:
    """The converted tensors under the model's own names; refuses a file that lacks tensors or has extra ones.
    Legitimately absent: tied copies (T5's encoder.embed_tokens = shared) and buffers (the constructor computes
    them: position ids, SD3's sin-cos table); legitimately extra: IGNORED_KEYS (position_ids, CLIP's logit_scale).
    The config is the one the file's own shapes say, so a gap is the file's: incomplete, or another variant."""
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
            what.append(f"lacks {n_tensors(len(missing))} the model its shapes describe needs ({key_list(missing)})")
        if unexpected:
            what.append(f"has {n_tensors(len(unexpected))} the model has no place for ({key_list(unexpected)})")
        raise FillScopeInputError(
            input_name, f"'{info.name}' ({part.what}) {' and '.join(what)}.",
            "the file is incomplete or another variant of the model; use the published file (download it again).")
    return model_state


# Converted layouts (one file tensor may become several model tensors, or be merged): their tensors are matched
# by the values they hold. Legitimately extra there: an LDM VAE's training leftovers (loss.*, model_ema.*),
# ComfyUI's fp8 scales (used to dequantise), IGNORED_KEYS.
LEFTOVER_PREFIXES = ("loss.", "model_ema.")
_SCALE_SUFFIXES = WEIGHT_SCALE_SUFFIXES + UNUSED_QUANT_SUFFIXES
LDM_GROUPS = ("encoder.", "decoder.", "quant_conv.", "post_quant_conv.", "bn.")


def _counted(key: str) -> bool:
    return not (IGNORED_KEYS.search(key) or key.endswith(_SCALE_SUFFIXES) or key.startswith(LEFTOVER_PREFIXES))


def _unused_by_conversion(info: CheckpointInfo, part: Part, tensors: dict, state: dict, input_name: str) -> None:
    """A converted part (LDM VAE, SAI SD3) whose file tensors hold more values than the converted model tensors:
    the conversion skipped tensors the model has no place for. Refused, naming them where they can be told
    (SAI: what diffusers' converter leaves, run on shape-only tensors; LDM: keys outside the VAE's groups)."""
    import torch

    p = part.prefix
    local = {k[len(p):]: t for k, t in tensors.items() if _counted(k[len(p):])}
    in_file = sum(t.numel() for t in local.values())
    used = sum(t.numel() for t in state.values())
    if in_file <= used:
        return
    names: list = []
    if part.layout == "sai":
        from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers

        shapes = {k: torch.empty(t.shape, device="meta") for k, t in local.items()}
        try:
            convert_sd3_transformer_checkpoint_to_diffusers(shapes)
            names = sorted(shapes)  # the converter pops every tensor it uses
        except (KeyError, ValueError, IndexError, RuntimeError):
            names = []
    elif part.layout == "ldm":
        names = sorted(k for k in local if not k.startswith(LDM_GROUPS))
    which = f" ({key_list(p + n for n in names)})" if names else ""
    raise FillScopeInputError(
        input_name,
        f"'{info.name}' ({part.what}) holds {in_file - used:,} values in tensors the model built from its shapes has "
        f"no place for{which}: they would be dropped silently.",
        "the file is another variant of the model or was merged with something else; use the published file "
        "(download it again).",
    )


def load_part(info: CheckpointInfo, part: Part, *, dtype: str, device: str, input_name: str):
    """(model, config, facts, notes) of one part of a file: built on meta from the inferred config, weights read
    straight onto `device`, names converted, assigned (no copy), ties and buffers restored."""
    import torch

    kind = part.component
    config = dict(part.config)
    skip: tuple = ()
    if kind == "qwen3":  # the layers klein reads, no LM head: the file's other tensors are never read
        config = qwen3_kept_config(config)
        skip = qwen3_skipped(part, config["num_hidden_layers"])
    if kind in ("flux_fill_transformer", "klein_transformer") and config.get("axes_dims_rope") is None:
        family, axes = ("FLUX.1", "[16, 56, 56]") if kind == "flux_fill_transformer" else ("FLUX.2 [klein]", "[32, 32, 32, 32]")
        raise FillScopeInputError(
            input_name,
            f"'{info.name}' has attention heads of width {config['attention_head_dim']} ({family} has 128), so its rope "
            "axes cannot be inferred.",
            f"add the rope axes to the file's safetensors metadata under '{HINT_KEY}' (e.g. {{\"axes_dims_rope\": {axes}}}).",
        )
    spec = COMPONENTS[kind]
    class_name = part.class_name or spec.class_name
    check_component_config(kind, {"_class_name": class_name, "architectures": [class_name], **config}, input_name, info.path)
    td = torch_dtype(dtype)
    model = build_on_meta(kind, config, dtype=td, class_name=part.class_name)
    ties = tied_groups(model)
    target = {name: p for name, p in model.named_parameters()}
    target.update({name: b for name, b in model.named_buffers()})
    names = [k for k in info.tensors if k.startswith(part.prefix)] if part.prefix else [
        k for k in info.tensors if not (part.component == "t5_xxl" and k.startswith(("decoder.", "lm_head.")))]
    skipped = [k for k in names if k.startswith(skip)] if skip else []
    names = [k for k in names if not k.startswith(skip)] if skip else names
    tensors = _read_tensors(info, names, device, input_name)
    try:
        state, scales, notes = convert_part(part, tensors, config, td)
    except (KeyError, ValueError, IndexError) as e:
        raise FillScopeInputError(
            input_name, f"'{info.name}' looks like {part.what} but its tensors do not convert ({type(e).__name__}: {e}).",
            "the file is incomplete or of a variant FillScope does not know; use the published file.") from e
    if part.layout in ("ldm", "sai"):
        _unused_by_conversion(info, part, tensors, state, input_name)
    del tensors
    model_state = _to_model_names(info, part, model, state, ties, input_name)
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
    retie(model, ties)
    for module_name, module in model.named_modules():
        for bname, buf in list(module.named_buffers(recurse=False)):
            if buf.is_meta:
                new = torch.empty(buf.shape, dtype=buf.dtype, device=device)
                module._buffers[bname] = new
                fill_buffer(module, bname, new, f"{module_name}.{bname}", device)
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:
        raise FillScopeInputError(input_name, f"'{info.name}' lacks {len(left)} tensors (e.g. {left[0]}).",
                                  "use the complete published file.")
    facts = {}
    if skipped:
        facts["layers"] = (f"{config['num_hidden_layers']} of the file's {part.config['num_hidden_layers']} built and loaded "
                           f"(the hidden states FLUX.2 [klein] reads come from them); {n_tensors(len(skipped))} of later "
                           "layers and the LM head never read")
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
