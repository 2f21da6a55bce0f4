"""LoRA for the FLUX.1 Fill, SD3 and FLUX.2 [klein] transformers: read a LoRA file, match it to a loaded
transformer, and hand out a patched copy of it.

Reading (`read_lora`). Safetensors only: the header is read and checked first (the checkpoints package's header.py:
pickles by suffix or first bytes, GGUF and truncated files are refused before anything is loaded; nothing is ever
unpickled).
The layouts people publish:

- kohya / sd-scripts: `lora_unet_<module with _>.lora_down.weight`, `.lora_up.weight`, `.alpha`;
- BFL / ComfyUI: `diffusion_model.<module>.lora_A.weight` / `.lora_B.weight` (or lora_down / lora_up, `.alpha`),
  also under `transformer.` or PEFT's `base_model.model.`;
- diffusers / PEFT: `transformer.<diffusers module>.lora_A.weight` / `.lora_B.weight` (alpha in the file's
  `lora_adapter_metadata`, or `.alpha` keys; none means alpha = rank).

Key maps, nothing re-implemented: a diffusers module name is used as it is (dots, or kohya's underscores looked up
among the model's own module names); a BFL module name (FLUX.1 or FLUX.2, dots or underscores) goes through the
plan FillScope's single-file loader converts BFL checkpoints with (checkpoints.convert `flux_bfl_plan` /
`klein_bfl_plan`, run over the loaded model's own sizes): a fused qkv / linear1 LoRA keeps its down matrix and has
its up rows split like the weight's rows, a final modulation has its up halves swapped. diffusers' own LoRA
converters are not used for these (0.42.1): its kohya FLUX.1 converter hard-codes FLUX.1's 3072 widths (no other
size converts) and drops the final layer's alpha; its FLUX.2 kohya converter skips the modulation and final layers,
and its BFL-layout one refuses alpha keys and maps the final modulation without the scale/shift swap diffusers' own
checkpoint converter makes. XLabs FLUX.1 LoRAs go through diffusers' XLabs converter. diffusers 0.42.1 has no
converter for SD3 LoRAs in SAI/kohya naming (`joint_blocks`): those are refused; SD3 takes diffusers/PEFT names.

Matching. Every LoRA module must reach a Linear of the model with the LoRA's shapes. A module of the repeated blocks
that has no counterpart or other shapes means a LoRA for another model: refused, naming the file, what it was made
for and what this transformer takes. Outside the blocks (e.g. a FLUX.1 [dev] LoRA's img_in, 64 channels, on Fill's
384-channel x_embedder), unmatched modules are skipped and reported; text-encoder tensors and tensors of other kinds
(`.diff`, norms) are reported as not applied. DoRA and LyCORIS (LoKr, LoHa, OFT) files are refused.

Applying (`apply_loras`, `with_loras`): a forward patch, never a merge. Each patched Linear gets its factors as two
(non-persistent) buffers and a forward hook: y = x W^T + b + (x D^T) U^T, with D = the downs of every LoRA of the
stack concatenated and U = each LoRA's up x strength x alpha/rank, concatenated (scaled in fp32, then held in the
compute dtype; the two GEMMs accumulate in fp32, the addition is one torch.addmm). That equals the merged weights
W' = W + strength * alpha/rank * up @ down to rounding (fp32: below 1e-6 relative), and keeps the LoRA's own
precision where a bf16 merge would round its small delta into W. The base weights are never written, so unloading is
exact by construction: remove the patch (`LoraPatch.remove`), or drop the patched copy; nothing is kept or restored.
Strength 0 adds nothing. Several LoRAs stack (ranks concatenated). Buffers move with the model, so every memory
policy works unchanged (whole moves, sequential streaming, meta: shapes only), and so does fp8 storage: the hook adds
its term to the output of the upcast layer, so the LoRA is applied in the compute dtype and never requantised.

Copy-on-write (`with_loras`): the loaded Component is not touched (another branch of a graph may use it unpatched).
The patched Component's model is a clone of the module tree whose parameters are new Parameter objects over the same
storage (the base's CPU host copy when it has one, placement.cpu_weights), so it costs no weight memory in CPU RAM;
it is a component of its own for placement (its own device, policy record, GPU copy when resident).
"""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoints import classify, flux_bfl_plan, klein_bfl_plan, read_header
from .checkpoints.header import TensorInfo, unreadable
from .errors import FillScopeInputError
from .fp8 import enable_fp8_compute, nonfinite_count
from .models import torch_dtype
from .placement import adopt_cpu_weights, cpu_weights
from .specs import COMPONENTS
from .weights import Component

KINDS = ("flux_fill_transformer", "sd3_transformer", "klein_transformer")
DOWN, UP = "fillscope_lora_down", "fillscope_lora_up"  # the buffers of a patched Linear

_PARTS = ((".lora_down.weight", "down"), (".lora_up.weight", "up"), (".lora_A.weight", "down"),
          (".lora_B.weight", "up"), (".lora.down.weight", "down"), (".lora.up.weight", "up"),
          (".lora_A.default.weight", "down"), (".lora_B.default.weight", "up"), (".alpha", "alpha"))
_TEXT = ("lora_te", "text_encoder", "text_encoders.", "te1.", "te2.")
_NAMESPACES = (("lora_unet_", "under"), ("lora_transformer_", "under"), ("model.diffusion_model.", "dot"),
               ("diffusion_model.", "dot"), ("base_model.model.", "dot"), ("transformer.", "dot"), ("unet.", "dot"))
_DORA = "a DoRA (weight-decomposed LoRA: its magnitude vectors cannot be applied as a low-rank term)"
_NOT_LOW_RANK = {"dora_scale": _DORA, "lora_magnitude_vector": _DORA, ".lokr_": "a LyCORIS LoKr adapter",
                 ".hada_": "a LyCORIS LoHa adapter", ".oft_": "an OFT adapter"}
_BLOCK = re.compile(r"(^|[._])(transformer_blocks|single_transformer_blocks|double_blocks|single_blocks|joint_blocks)"
                    r"[._]\d+")
_FAMILY = (
    (r"(^|[._])(down_blocks|up_blocks|mid_block|input_blocks|output_blocks|middle_block)[._]",
     "an SD1.x/SDXL UNet LoRA"),
    (r"joint_blocks", "an SD3/SD3.5 LoRA in SAI/kohya naming (joint_blocks)"),
    (r"stream_modulation|to_qkv_mlp_proj|linear_in|linear_out|time_guidance_embed", "a FLUX.2 LoRA"),
    (r"img_mod|txt_mod|modulation[._]lin|proj_mlp|guidance_embedder|vector_in|single_transformer_blocks[._]\d+[._]norm",
     "a FLUX.1 LoRA"),
)
_SIZES = {("a FLUX.2 LoRA", 3072): "FLUX.2 [klein] 4B", ("a FLUX.2 LoRA", 4096): "FLUX.2 [klein] 9B",
          ("a FLUX.2 LoRA", 6144): "FLUX.2 [dev]", ("an SD3/SD3.5 LoRA", 1536): "SD3 / SD3.5 medium",
          ("an SD3/SD3.5 LoRA", 2432): "SD3.5 large"}


@dataclass
class LoraFile:
    """One LoRA file matched to one transformer: `modules` = model Linear name -> [(down [r, in], up [out, r] with
    alpha/rank folded in)], fp32 on the CPU."""

    name: str
    path: str
    layout: str
    made_for: str
    modules: dict
    ranks: list
    scales: list
    file_parameters: int
    warnings: list = field(default_factory=list)

    @property
    def held_parameters(self) -> int:
        return sum(d.numel() + u.numel() for pairs in self.modules.values() for d, u in pairs)


# ---- reading -------------------------------------------------------------------------------------------------


def read_lora(path, comp: Component, input_name: str = "lora_name") -> LoraFile:
    """A LoRA file read and matched to `comp`'s transformer (one of KINDS), or a FillScopeInputError saying why not."""
    path = Path(path)
    if comp.kind not in KINDS:
        raise FillScopeInputError(input_name, f"a {COMPONENTS[comp.kind].title} takes no LoRA here.",
                                  "connect a FLUX.1 Fill, SD3 or FLUX.2 [klein] transformer.")
    header, metadata = read_header(path, input_name)
    for marker, what in _NOT_LOW_RANK.items():
        if any(marker in k for k in header):
            raise FillScopeInputError(input_name, f"'{path.name}' is {what}; FillScope applies low-rank LoRAs "
                                      "(down/up matrices) only.", "use a plain LoRA version of it.")
    raw, layout = None, None
    if comp.kind == "flux_fill_transformer" and any(".processor." in k for k in header):
        raw = _xlabs(_load(path, input_name), path, input_name)  # XLabs: diffusers' own converter
        layout = "XLabs (converted by diffusers' FLUX LoRA loader, FluxLoraLoaderMixin.lora_state_dict)"
    groups, text, other = _group(raw if raw is not None else header)
    if not groups:
        if text:
            raise FillScopeInputError(input_name, f"'{path.name}' is a text-encoder LoRA ({len(text)} tensors, none "
                                      "for a transformer); FillScope's LoRA patches the transformer.",
                                      "choose a LoRA that holds transformer (diffusion model) tensors.")
        what = classify(header, {}, metadata)[1]
        raise FillScopeInputError(input_name, f"'{path.name}' is not a LoRA: it is {what}.",
                                  "choose a LoRA file (lora_down/lora_up or lora_A/lora_B tensors).")
    raw = _load(path, input_name) if raw is None else raw
    _require_finite(path, raw, groups, input_name)
    made_for = _describe(groups, raw)
    targets = _Targets(comp)
    lora = _match(path, comp, raw, groups, _peft_alphas(metadata), targets, made_for, input_name, layout)
    if text:
        lora.warnings.append(f"{len(text)} text-encoder tensors not applied (e.g. {text[0]}): FillScope's LoRA patches "
                             "the transformer; the prompt encoders stay as loaded")
    if other:
        lora.warnings.append(f"{len(other)} tensors that are not low-rank factors not applied (e.g. {other[0]})")
    return lora


def _group(keys) -> tuple[dict, list, list]:
    """{(namespace, module name): {"down"|"up"|"alpha": key}}, text-encoder keys, other keys."""
    groups, text, other = {}, [], []
    for key in keys:
        if key.startswith(_TEXT):
            text.append(key)
            continue
        part = next(((key[: -len(s)], p) for s, p in _PARTS if key.endswith(s)), None)
        if part is None:
            other.append(key)
            continue
        base, p = part
        ns, name = next(((kind, base[len(pre):]) for pre, kind in _NAMESPACES if base.startswith(pre)), ("dot", base))
        groups.setdefault((ns, name), {})[p] = key
    return groups, text, other


def _require_finite(path: Path, raw: dict, groups: dict, input_name: str) -> None:
    """Every factor and alpha the LoRA applies, checked for NaN/inf as checkpoint weights are (fp8.nonfinite_count),
    once per file read: a NaN there would surface at the first sampling step, looking like the model's fault."""
    for keys in groups.values():
        for key in keys.values():
            t = raw.get(key)
            bad = nonfinite_count(t) if t is not None else 0
            if bad:
                raise FillScopeInputError(
                    input_name,
                    f"tensor '{key}' in the LoRA file '{path.name}' holds {bad:,} NaN/inf values (of {t.numel():,}): "
                    "the LoRA file is broken (a diverged training run, or a failed conversion, merge or download); "
                    "the model's own weights are not at fault.",
                    "download or export the LoRA again, or choose another LoRA.",
                )


def _peft_alphas(metadata: dict):
    """alpha(module) from diffusers' `lora_adapter_metadata` (PEFT's lora_alpha, alpha_pattern), or None."""
    try:
        meta = json.loads(metadata.get("lora_adapter_metadata") or "{}")
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the JSON reader goes: no PEFT alphas
        return None
    if not isinstance(meta, dict):
        return None
    meta = {k.removeprefix("transformer."): v for k, v in meta.items()}
    alpha, patterns = meta.get("lora_alpha"), meta.get("alpha_pattern") or {}
    if alpha is None and not patterns:
        return None
    return lambda name: next((a for p, a in patterns.items() if re.fullmatch(rf"(.*\.)?{p}", name)), alpha)


class _BflLayout(dict):
    """Stands in for a BFL file header holding every tensor of this model, for a BFL key plan: `in` is always true,
    so the plan lists every move of the model's own sizes; the shapes a plan reads (the width from img_in, FLUX.1's
    single blocks' linear1 rows) come from the model."""

    def __init__(self, comp: Component):
        cfg = comp.config
        width = cfg["num_attention_heads"] * cfg["attention_head_dim"]
        super().__init__({f"double_blocks.{i}.": None for i in range(cfg["num_layers"])}
                         | {f"single_blocks.{i}.": None for i in range(cfg["num_single_layers"])})
        self.shapes = {"img_in.weight": (width, cfg.get("in_channels"))}
        if comp.kind == "flux_fill_transformer":
            for i, block in enumerate(comp.model.single_transformer_blocks):
                self.shapes[f"single_blocks.{i}.linear1.weight"] = (3 * width + block.proj_mlp.out_features, width)

    def __contains__(self, key) -> bool:
        return True

    def get(self, key, default=None):
        shape = self.shapes.get(key)
        return TensorInfo("F32", shape) if shape else default


class _Targets:
    """The model's Linear layers by name (dots and kohya underscores) and, for the FLUX families, by BFL name:
    BFL module -> [(Linear, rows of the fused weight or None, scale/shift halves swapped)]."""

    def __init__(self, comp: Component):
        import torch

        self.linear = {n: (m.in_features, m.out_features) for n, m in comp.model.named_modules()
                       if isinstance(m, torch.nn.Linear)}
        self.under = {n.replace(".", "_"): n for n in self.linear}
        self.bfl = {}
        if comp.kind != "sd3_transformer":
            plan = (flux_bfl_plan if comp.kind == "flux_fill_transformer" else klein_bfl_plan)(_BflLayout(comp))
            for m in plan:
                if m.src.endswith(".weight") and m.dst.endswith(".weight") and m.dst[:-7] in self.linear:
                    self.bfl.setdefault(m.src[:-7], []).append((m.dst[:-7], m.rows, m.swap))
        self.bfl_under = {k.replace(".", "_"): k for k in self.bfl}


def _destinations(ns: str, name: str, t: _Targets):
    if ns == "dot":
        return [(name, None, False)] if name in t.linear else t.bfl.get(name)
    if name in t.under:
        return [(t.under[name], None, False)]
    return t.bfl.get(t.bfl_under.get(name, ""))


def _load(path: Path, input_name: str) -> dict:
    try:
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    except Exception as e:  # a damaged file the header check let through
        raise unreadable(input_name, path, f"{type(e).__name__}: {str(e)[:200]}") from None


def _xlabs(raw: dict, path: Path, input_name: str) -> dict:
    """An XLabs FLUX.1 LoRA (`*.processor.qkv_lora1.down.weight`, ...) in diffusers names, by diffusers' converter
    (it refuses keys it does not place, so nothing is dropped unsaid), reached through the public FLUX LoRA loader:
    given a dict of XLabs keys (no kohya `.lora_down.` key), `lora_state_dict` returns exactly the converter's
    result, and the converter's own name is private."""
    from diffusers.loaders import FluxLoraLoaderMixin

    try:
        return FluxLoraLoaderMixin.lora_state_dict(dict(raw))
    except (ValueError, KeyError, AttributeError, RuntimeError) as e:
        raise FillScopeInputError(input_name, f"'{path.name}' looks like an XLabs FLUX.1 LoRA, but diffusers' XLabs "
                                  f"converter cannot read it ({type(e).__name__}: {str(e)[:160]}).",
                                  "use another export of the LoRA (kohya, BFL or diffusers keys).") from None


def _match(path, comp, raw, groups, peft_alpha, t: _Targets, made_for, input_name, layout=None) -> LoraFile:
    import torch

    modules, ranks, scales, params = {}, [], [], 0
    unknown, mismatched = [], []
    for (ns, name), keys in groups.items():
        if "down" not in keys or "up" not in keys:
            if set(keys) == {"alpha"}:
                continue
            missing = "up" if "down" in keys else "down"
            raise FillScopeInputError(input_name, f"'{path.name}' is damaged: module {name} has no {missing} matrix.",
                                      "download the LoRA again.")
        down, up = raw[keys["down"]].float(), raw[keys["up"]].float()
        params += down.numel() + up.numel()
        dests = _destinations(ns, name, t)
        if dests is None:
            unknown.append(name)
            continue
        rank = down.shape[0]
        fused = max((r[1] for _, r, _ in dests if r), default=None)
        if down.dim() != 2 or up.dim() != 2 or up.shape[1] != rank or (fused and up.shape[0] != fused):
            mismatched.append(f"{name}: down {list(down.shape)}, up {list(up.shape)}")
            continue
        alpha = raw[keys["alpha"]].item() if "alpha" in keys else (peft_alpha(name) if peft_alpha else None)
        scale = 1.0 if alpha is None else float(alpha) / rank
        if not math.isfinite(scale):  # a tensor alpha was checked with the factors; this one is the file's metadata
            raise FillScopeInputError(input_name, f"'{path.name}' gives module {name} the alpha {alpha!r} in its "
                                      "lora_adapter_metadata: the LoRA file is broken; the model is not at fault.",
                                      "download or export the LoRA again, or choose another LoRA.")
        for dst, rows, swap in dests:
            u = up[rows[0]:rows[1]] if rows else up
            if swap:
                u = torch.cat(u.chunk(2, dim=0)[::-1])
            if (down.shape[1], u.shape[0]) != t.linear[dst]:
                mismatched.append(f"{name} -> {dst}: LoRA {down.shape[1]} -> {u.shape[0]}, model {t.linear[dst][0]} -> "
                                  f"{t.linear[dst][1]}")
                continue
            modules.setdefault(dst, []).append((down, (u * scale).contiguous()))
        ranks.append(rank)
        scales.append(scale)
    in_blocks = [x for x in unknown + mismatched if _BLOCK.search(x.split(" ")[0])]
    if not modules or in_blocks:
        bad = in_blocks or unknown + mismatched or ["no module with both a down and an up matrix"]
        how = (f"{len(bad)} of its block modules have no counterpart in it or other shapes" if in_blocks
               else "none of its modules matches a layer of it")
        raise _wrong_model(path, comp, made_for, f"{how} (e.g. {bad[0]})", input_name)
    lora = LoraFile(path.name, str(path), layout or _layout(groups), made_for, modules, ranks, scales, params)
    if unknown:
        lora.warnings.append(f"{len(unknown)} LoRA modules outside the blocks match no layer of this transformer, not "
                             f"applied: {', '.join(unknown[:4])}" + (" ..." if len(unknown) > 4 else ""))
    if mismatched:
        lora.warnings.append(f"{len(mismatched)} LoRA modules outside the blocks have other shapes than this "
                             f"transformer's, not applied: {'; '.join(mismatched[:3])}")
    return lora


def _layout(groups) -> str:
    names = [n for _, n in groups]
    parts = {p for keys in groups.values() for p in keys}
    kinds = {ns for ns, _ in groups}
    if "under" in kinds:
        return "kohya (lora_unet_* / lora_transformer_*: lora_down, lora_up" + (", alpha)" if "alpha" in parts else ")")
    if any(n.startswith(("double_blocks", "single_blocks", "img_in", "final_layer")) for n in names):
        return "BFL / ComfyUI (diffusion_model.* module names)"
    return "diffusers / PEFT (transformer.* module names: lora_A, lora_B)"


def _describe(groups, raw) -> str:
    """What a LoRA was made for, from its module names and its most common input width."""
    from collections import Counter

    text = " ".join(n for _, n in groups)
    downs = [raw[k["down"]] for k in groups.values() if "down" in k]
    widths = Counter(int(d.shape[-1]) for d in downs if d.dim() == 2)
    width = widths.most_common(1)[0][0] if widths else None
    what = next((w for pat, w in _FAMILY if re.search(pat, text)), None)
    if what is None and re.search(r"double_blocks|single_blocks", text):
        what = "a FLUX.1 or FLUX.2 LoRA (BFL naming)"
    elif what is None and "transformer_blocks" in text:
        what = "a FLUX LoRA" if width == 3072 else "an SD3/SD3.5 LoRA"
    elif what is None:
        what = "a LoRA for a model FillScope does not know"
    size = _SIZES.get((what.split(" in ")[0], width))
    return f"{what}{f' for {size}' if size else ''}{f' (width {width})' if width else ''}"


def fits(comp: Component) -> str:
    """The LoRAs a transformer takes, in words."""
    cfg = comp.config
    width = cfg.get("num_attention_heads", 0) * cfg.get("attention_head_dim", 0)
    if comp.kind == "flux_fill_transformer":
        return f"FLUX.1 LoRAs (made for FLUX.1 [dev] or FLUX.1 Fill [dev], width {width})"
    if comp.kind == "klein_transformer":
        size = {3072: " 4B", 4096: " 9B"}.get(width, "")
        return (f"FLUX.2 [klein]{size} LoRAs (width {width}, {cfg.get('num_layers')} double + "
                f"{cfg.get('num_single_layers')} single blocks)")
    return (f"SD3/SD3.5 LoRAs in diffusers/PEFT naming for this transformer (width {width}, {cfg.get('num_layers')} "
            "joint blocks)")


def _wrong_model(path, comp, made_for, problem, input_name) -> FillScopeInputError:
    title = COMPONENTS[comp.kind].title
    if "SAI/kohya naming" in made_for and comp.kind == "sd3_transformer":
        return FillScopeInputError(
            input_name, f"'{path.name}' is {made_for}: diffusers 0.42.1 has no converter for SD3 LoRAs in that "
                        "naming, so FillScope cannot map its modules onto the SD3 transformer.",
            "use the LoRA's diffusers/PEFT export (transformer.*.lora_A / lora_B keys), or load it with ComfyUI's own "
            "SD3 model and LoRA nodes.")
    return FillScopeInputError(
        input_name, f"'{path.name}' is {made_for}, not a LoRA for this {title}: {problem}. The {title} takes "
                    f"{fits(comp)}.",
        f"choose a LoRA made for this model ({fits(comp).split(' (')[0]}); the model a LoRA was trained on is usually "
        "in its name or on its download page.")


# ---- applying ------------------------------------------------------------------------------------------------


@dataclass
class LoraPatch:
    """The forward patch on one model: removing it leaves the model exactly as it was (its weights were never
    written)."""

    modules: dict  # Linear name -> module
    handles: list

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        for m in self.modules.values():
            for name in (DOWN, UP):
                m._buffers.pop(name, None)
                m._non_persistent_buffers_set.discard(name)
        self.handles, self.modules = [], {}


def _forward_patch(module, args, kwargs, output):
    """y + (x D^T) U^T: one rank-R GEMM, then the addition fused into the second (torch.addmm, fp32 accumulation)."""
    import torch

    x = args[0] if args else kwargs["input"]
    down, up = module._buffers[DOWN], module._buffers[UP]
    h = torch.nn.functional.linear(x.to(down.dtype), down)
    flat = torch.addmm(output.reshape(-1, output.shape[-1]).to(up.dtype), h.reshape(-1, h.shape[-1]), up.t())
    return flat.view(output.shape).to(output.dtype)


def stack_factors(stack) -> dict:
    """{Linear name: (D [R, in], U [out, R])}, fp32 on the CPU, of a stack [(LoraFile, strength), ...]: each up times
    its strength, the ranks concatenated; a strength of 0 adds nothing."""
    import torch

    per = {}
    for lora, strength in stack:
        if strength == 0:
            continue
        for name, pairs in lora.modules.items():
            per.setdefault(name, []).extend((d, u * float(strength)) for d, u in pairs)
    return {n: (torch.cat([d for d, _ in p]), torch.cat([u for _, u in p], dim=1)) for n, p in per.items()}


def apply_loras(model, stack, dtype=None) -> LoraPatch:
    """Patch `model` in place with a stack [(LoraFile, strength), ...]: factors as buffers of each Linear (on its
    weight's device, in `dtype`, default the weight's) and a forward hook. `LoraPatch.remove()` undoes it."""
    import torch

    linears = dict(model.named_modules())
    if any(DOWN in m._buffers for m in linears.values()):
        raise RuntimeError("this model already carries a LoRA patch: remove it first, or patch a copy (with_loras)")
    patch = LoraPatch({}, [])
    for name, (down, up) in stack_factors(stack).items():
        m = linears[name]
        dt = dtype or m.weight.dtype
        with torch.inference_mode(m.weight.is_inference()):
            m.register_buffer(DOWN, down.to(device=m.weight.device, dtype=dt), persistent=False)
            m.register_buffer(UP, up.to(device=m.weight.device, dtype=dt), persistent=False)
        patch.handles.append(m.register_forward_hook(_forward_patch, with_kwargs=True))
        patch.modules[name] = m
    return patch


_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
               "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")


def _clone(model, host):
    """The module tree again, sharing every tensor: new Parameter objects over the same storage (the host copy's
    CPU tensors when `host` is given), the same buffers (a LoRA patch's own left out), no forward hooks."""
    import torch

    params, modules = {}, {}

    def param(p):
        if id(p) not in params:
            with torch.inference_mode(p.is_inference()):
                params[id(p)] = torch.nn.Parameter(host.host_of(p) if host else p.data, requires_grad=p.requires_grad)
        return params[id(p)]

    def clone(m):
        if id(m) in modules:
            return modules[id(m)]
        new = modules[id(m)] = m.__class__.__new__(m.__class__)
        state = dict(m.__dict__)
        state.pop("_fillscope_fp8", None)  # fp8 upcast hooks are made again for the clone's own parameters
        state.pop("forward", None)  # an instance-level forward is a hook wrapper bound to the original module
        state.update({h: OrderedDict() for h in _HOOK_DICTS if h in state})
        state["_parameters"] = {n: None if p is None else param(p) for n, p in m._parameters.items()}
        state["_buffers"] = {n: host.buffer_slots[(id(m), n)] if host and b is not None else b
                             for n, b in m._buffers.items() if n not in (DOWN, UP)}
        state["_non_persistent_buffers_set"] = set(m._non_persistent_buffers_set) - {DOWN, UP}
        state["_modules"] = {n: None if c is None else clone(c) for n, c in m._modules.items()}
        new.__dict__.update(state)
        return new

    return clone(model)


def _fp8_plan(model) -> tuple[dict, dict]:
    """(compute dtypes, scales) by parameter name of the fp8 upcast hooks on `model` (fp8.enable_fp8_compute's)."""
    names = {id(p): n for n, p in model.named_parameters()}
    dtypes, scales = {}, {}
    for m in model.modules():
        up = getattr(m, "_fillscope_fp8", None)
        for p, dt, scale in (up.entries if up is not None else ()):
            dtypes[names[id(p)]] = dt
            if scale is not None:
                scales[names[id(p)]] = scale
    return dtypes, scales


def with_loras(comp: Component, loras) -> Component:
    """A patched copy of a transformer Component: `loras` = [(LoraFile, strength), ...] added to the stack `comp`
    already carries (a patched copy patched again keeps the earlier LoRAs). `comp` itself is not changed; the copy's
    model shares its weights' storage (copy-on-write: the patch adds buffers and hooks, never writes a weight)."""
    stack = list(comp.extras.get("lora_stack", ())) + [(lora, float(s)) for lora, s in loras]
    host = cpu_weights(comp)
    model = _clone(comp.model, host)
    dtypes, scales = _fp8_plan(comp.model)
    if dtypes:
        enable_fp8_compute(model, dtypes, scales)
    extras = {k: v for k, v in comp.extras.items() if k not in ("comfy_patcher", "host_copy", "lora_patch")}
    added = ", ".join(f"{lora.name} x{s:g}" for lora, s in loras)
    base = comp.extras.get("lora_base_provenance", comp.provenance)
    extras.update(lora_stack=stack, lora_base_provenance=base)
    view = Component(comp.kind, model, comp.source, f"{comp.provenance} + LoRA {added}",
                     "cpu" if host is not None else comp.device, comp.dtype, comp.config, comp.tokenizer, extras)
    extras["lora_patch"] = apply_loras(model, stack, torch_dtype(comp.dtype))
    if host is not None:
        adopt_cpu_weights(view)  # the shared CPU tensors (and the new factors) are its host copy: nothing pinned twice
    return view


def describe(lora: LoraFile, strength: float) -> dict:
    """The facts a node shows for one LoRA of a stack."""
    from collections import Counter

    blocks = sum(1 for n in lora.modules if _BLOCK.search(n))
    ranks, scales = sorted(set(lora.ranks)), sorted(set(round(s, 6) for s in lora.scales))
    kinds = Counter(re.sub(r"\.\d+\.", ".N.", n) for n in lora.modules).most_common()
    return {
        "lora": lora.name,
        "layout": lora.layout,
        "made for": lora.made_for,
        "strength": strength,
        "layers patched": f"{len(lora.modules)} Linear ({blocks} in the blocks, {len(lora.modules) - blocks} outside)",
        "which layers": ", ".join(f"{k} x{n}" for k, n in kinds[:12]) + (" ..." if len(kinds) > 12 else ""),
        "rank": str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]} ({len(ranks)} ranks)",
        "alpha / rank": ", ".join(f"{s:g}" for s in scales[:4]) + (" ..." if len(scales) > 4 else ""),
        "parameters in the file": f"{lora.file_parameters:,}",
        "parameters added (factors held; fused layers split)": f"{lora.held_parameters:,}",
        "applied as": "forward patch y += strength * alpha/rank * (x down^T) up^T; weights untouched",
    }
