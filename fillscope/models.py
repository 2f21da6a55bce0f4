"""Building a component's model: its class, its full topology on the meta device, deterministic placeholder
values, shared-parameter ties and constructor-computed buffers, and the config checks every weight source runs.

Nothing here knows where weights come from (weights.py: folders and the loading entry point; the checkpoints
package: single files); both build through this module. torch, diffusers and transformers are imported inside
the functions so that importing the engine stays cheap.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from .errors import FillScopeInputError
from .requirements import check_installed
from .specs import COMPONENTS, shipped_config

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise FillScopeInputError("dtype", f"unknown dtype {name!r}.", f"use one of {', '.join(DTYPES)}.")
    return getattr(torch, DTYPES[name])


def model_class(kind: str, class_name: str | None = None):
    """The diffusers/transformers class of a component (`class_name` overrides the component's own)."""
    check_installed()  # every model is built here: the versions checked before the first class is looked up
    spec = COMPONENTS[kind]
    name = class_name or spec.class_name
    if spec.library == "diffusers":
        import diffusers

        return getattr(diffusers, name)
    import transformers

    return getattr(transformers, name)


def transformers_config(kind: str, config: dict):
    import transformers

    if kind in ("clip_l", "clip_g"):
        return transformers.CLIPTextConfig(**config)
    if kind == "t5_xxl":
        return transformers.T5Config(**config)
    if kind == "qwen3":
        return transformers.Qwen3Config(**config)
    raise KeyError(kind)


def build_on_meta(kind: str, config: dict | None = None, dtype=None, class_name: str | None = None):
    """The component's full topology on the meta device (no storage, ~0.1 s even for the 12B transformer),
    created directly in `dtype`, except the modules a model class keeps in fp32 (T5's `wo` under fp16).
    `class_name` overrides the component's class (e.g. CLIPTextModel for a CLIP file without projection)."""
    import torch

    config = dict(config or shipped_config(kind))
    cls = model_class(kind, class_name)
    previous = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            if COMPONENTS[kind].library == "diffusers":
                model = cls.from_config(config)
            else:
                model = cls(transformers_config(kind, config))
    finally:
        torch.set_default_dtype(previous)
    if dtype == torch.float16:
        keep = getattr(model, "_keep_in_fp32_modules", None) or []
        for name, module in model.named_modules():
            if any(name.endswith(k) or f".{k}." in f".{name}." for k in keep):
                module.to(torch.float32)
    return model.eval().requires_grad_(False)


def _is_norm_weight(name: str, shape) -> bool:
    leaf = name.rsplit(".", 2)
    return len(shape) == 1 and name.endswith("weight") and any("norm" in part for part in leaf[:-1])


def fill_placeholder(model, seed: int, device: str) -> None:
    """Materialise a meta-built model on `device` and fill it deterministically: weights uniform in
    +-1/sqrt(fan_in) (keeps activations finite through deep stacks), norm scales 1, biases 0. Each tensor's
    stream is seeded from (seed, its qualified name), so the values do not depend on build order or device
    count."""
    import torch

    ties = tied_groups(model)
    model.to_empty(device=device)  # materialises each name separately: ties (T5's shared embedding) break here
    retie(model, ties)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if _is_norm_weight(name, param.shape):
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                gen = torch.Generator(device=device).manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
                fan_in = max(1, param[0].numel()) if param.dim() > 1 else param.numel()
                bound = 1.0 / fan_in**0.5 if param.dim() > 1 else 0.02
                param.uniform_(-bound, bound, generator=gen)
        for module_name, module in model.named_modules():
            for name, buf in module.named_buffers(recurse=False):
                fill_buffer(module, name, buf, f"{module_name}.{name}", device)


def tied_groups(model) -> list[list[str]]:
    """Names that share one Parameter (e.g. T5's shared / encoder.embed_tokens), each group in order."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def retie(model, groups: list[list[str]]) -> None:
    for first, *others in groups:
        owner, _, leaf = first.rpartition(".")
        param = getattr(model.get_submodule(owner) if owner else model, leaf)
        for name in others:
            mod, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(mod) if mod else model, leaf, param)


def fill_buffer(module, name: str, buf, qualified: str, device) -> None:
    """Buffers are not weights: they get the value the module's own constructor computes."""
    import torch

    if name.endswith("position_ids"):
        buf.copy_(torch.arange(buf.shape[-1], device=device).expand_as(buf))
    elif name in ("inv_freq", "original_inv_freq") and hasattr(module, "rope_type") and hasattr(module, "config"):
        # transformers' rotary embedding (Qwen3): the inverse frequencies its constructor computes from the config
        if module.rope_type == "default":
            inv_freq, _ = module.compute_default_rope_parameters(module.config)
        else:
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

            inv_freq, _ = ROPE_INIT_FUNCTIONS[module.rope_type](module.config, "cpu")
        buf.copy_(inv_freq.to(buf.dtype))
    elif isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and name in ("running_mean", "running_var", "num_batches_tracked"):
        # a BatchNorm's fresh statistics (the FLUX.2 VAE's latent normalisation): mean 0, variance 1, no batches
        buf.fill_(1 if name == "running_var" else 0)
    elif name == "pos_embed" and hasattr(module, "base_size") and hasattr(module, "interpolation_scale"):
        # diffusers' PatchEmbed (SD3, the SD3 ControlNet): a fixed 2-D sin-cos grid of pos_embed_max_size^2 tokens
        from diffusers.models.embeddings import get_2d_sincos_pos_embed

        grid = module.pos_embed_max_size or int(buf.shape[1] ** 0.5)
        table = get_2d_sincos_pos_embed(buf.shape[-1], grid, base_size=module.base_size,
                                        interpolation_scale=module.interpolation_scale, output_type="pt")
        buf.copy_(table.reshape(buf.shape).to(buf.dtype))
    else:
        raise RuntimeError(f"placeholder weights: no rule to initialise buffer {qualified}")


# What a placeholder build may take: its tensors' bytes at most this share of the memory available, so the
# build never ends in an allocator error or the kernel's out-of-memory kill. Tests inject the available figure.
MEMORY_MARGIN = 0.9
AVAILABLE_RAM_ENV = "FILLSCOPE_AVAILABLE_RAM_BYTES"
AVAILABLE_VRAM_ENV = "FILLSCOPE_AVAILABLE_VRAM_BYTES"


def weight_bytes(model) -> int:
    """Bytes of a model's parameters and buffers, each tensor once (ties counted once): numel x element size of
    each tensor's own dtype, so a meta build gives what it will take once materialised."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _injected(env: str) -> int | None:
    import os

    value = os.environ.get(env, "").strip()
    if not value:
        return None
    try:
        return max(0, int(float(value)))
    except ValueError:
        return None


def available_memory(device) -> tuple[int | None, str]:
    """(bytes available for new tensors on `device`, what that memory is called); None when unknown. CPU:
    MemAvailable of /proc/meminfo, else os.sysconf; CUDA: the card's free memory plus what PyTorch's caching
    allocator holds unused. FILLSCOPE_AVAILABLE_RAM_BYTES / FILLSCOPE_AVAILABLE_VRAM_BYTES override both."""
    import os

    dev = str(device)
    if dev.startswith("cuda"):
        injected = _injected(AVAILABLE_VRAM_ENV)
        if injected is not None:
            return injected, "GPU memory"
        import torch

        index = torch.device(dev).index
        index = torch.cuda.current_device() if index is None else index
        free, _ = torch.cuda.mem_get_info(index)
        cached = torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index)
        return free + max(0, cached), f"GPU memory (cuda:{index})"
    if dev == "meta":
        return None, "no memory"
    injected = _injected(AVAILABLE_RAM_ENV)
    if injected is not None:
        return injected, "CPU memory (RAM)"
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "CPU memory (RAM)"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "CPU memory (RAM)"
    except (AttributeError, ValueError, OSError):
        return None, "CPU memory (RAM)"


def check_room_for(model, device, input_name: str, what: str, dtype_name: str | None = None) -> None:
    """Refuse to materialise `model` (built on meta) on `device` when its tensors would take more than
    MEMORY_MARGIN of the memory available there, with both figures and the fix."""
    available, where = available_memory(device)
    if available is None:
        return
    need = weight_bytes(model)
    if need <= MEMORY_MARGIN * available:
        return
    gib = 2**30
    smaller = (" or a smaller dtype (bf16 or fp16 halve fp32's memory)" if dtype_name == "fp32" else "")
    raise FillScopeInputError(
        input_name,
        f"a placeholder {what}{f' in {dtype_name}' if dtype_name else ''} needs {need / gib:.2f} GiB of {where}, but only "
        f"{available / gib:.2f} GiB is available (FillScope keeps {1 - MEMORY_MARGIN:.0%} free), so it was not built.",
        f"choose 'meta' (the full topology with shapes only, no memory){smaller}, or free memory "
        "(close other programs, unload other models).",
    )


SHOWN_KEYS = 5  # how many tensor names an error shows


def key_list(keys, sep: str = ", ") -> str:
    """The first SHOWN_KEYS of `keys` (sorted) for an error message, and how many more there are."""
    keys = sorted(keys)
    more = f"{sep}... ({len(keys) - SHOWN_KEYS} more)" if len(keys) > SHOWN_KEYS else ""
    return sep.join(keys[:SHOWN_KEYS]) + more


def n_tensors(count: int) -> str:
    return f"{count:,} tensor" + ("" if count == 1 else "s")


def count_parameters(model) -> tuple[int, int]:
    """(unique, tie-counted) parameter counts: a tied tensor counts once in the first, once per name in the second."""
    unique = sum(p.numel() for p in model.parameters())
    tie_counted = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    return unique, tie_counted


def check_component_config(kind: str, config: dict, input_name: str, where: Path) -> None:
    """Refuse a component whose config is another model's (e.g. the FLUX.1 [dev] transformer on the Fill
    loader, or the FLUX VAE where SD3's is needed)."""
    spec = COMPONENTS[kind]
    cls = config.get("_class_name") or (config.get("architectures") or [None])[0]
    if spec.library == "diffusers" and cls != spec.class_name:
        raise FillScopeInputError(input_name, f"'{where}' holds a {cls}, not the {spec.title}.", f"select a folder with the {spec.title}.")
    if kind == "flux_fill_transformer":
        # the Fill model reads more than it returns (noisy latents ++ masked latents ++ mask: published 64 + 320 = 384
        # in, 64 out); a text-to-image FLUX transformer reads what it returns. The widths themselves are checked
        # against the VAE's when sampling (flux_fill.check_widths).
        width = config.get("in_channels", 64)  # diffusers' defaults: in 64, out None = in
        out = config.get("out_channels") or width
        if width <= 2 * out:
            raise FillScopeInputError(
                input_name,
                f"'{where}' is a FLUX transformer with in_channels {width} and out_channels {out}, a text-to-image "
                "one (FLUX.1 Fill reads noisy latents + masked latents + mask: 384 in, 64 out), not the FLUX.1 Fill "
                "transformer.",
                "select the FLUX.1-Fill-dev repository.",
            )
    if kind in ("flux_vae", "sd3_vae"):
        # the latent scaling tells the FLUX VAE from SD3's (both 16 latent channels) and from other VAEs; the
        # channels are checked against the transformer's when sampling
        want = shipped_config(kind)["scaling_factor"]
        scaling = config.get("scaling_factor", want)
        if abs(scaling - want) > 1e-6:
            other = "sd3" if kind == "flux_vae" else "flux"
            if abs(scaling - shipped_config(f"{other}_vae")["scaling_factor"]) > 1e-6:
                raise FillScopeInputError(
                    input_name, f"'{where}' is a VAE with {config.get('latent_channels')} latent channels and latent "
                                f"scaling {scaling}: neither the FLUX VAE's nor SD3's ({spec.title}: {want}).",
                    "select the repository's vae/ folder.",
                )
            raise FillScopeInputError(
                input_name,
                f"'{where}' has latent scaling {config.get('scaling_factor')}, the {other.upper()} VAE's, not the {spec.title}'s ({want}).",
                f"set the VAE loader's kind to {other}, or select the matching repository.",
            )
    if kind == "klein_transformer" and config.get("num_attention_heads", 0) * config.get("attention_head_dim", 0) == 6144:
        raise FillScopeInputError(
            input_name,
            f"'{where}' is the FLUX.2 [dev] transformer (48 heads x 128, Mistral text encoder), not FLUX.2 [klein].",
            "select a klein 4B or 9B repository (black-forest-labs/FLUX.2-klein-4B, -9B, or their base models).",
        )
    if kind == "qwen3":
        arch = (config.get("architectures") or ["Qwen3ForCausalLM"])[0]
        if arch not in ("Qwen3ForCausalLM", "Qwen3Model"):
            raise FillScopeInputError(
                input_name, f"'{where}' holds a {arch} ({config.get('model_type', 'another model')}), not Qwen3.",
                "select the text_encoder of a klein repository (Qwen3-4B for klein 4B, Qwen3-8B for 9B).")
    if kind == "sd3_controlnet" and config.get("extra_conditioning_channels", 0) != 1:
        raise FillScopeInputError(
            input_name,
            f"'{where}' is an SD3 ControlNet with {config.get('extra_conditioning_channels', 0)} extra conditioning "
            "channels; the inpainting ControlNet has 1 (the mask).",
            "select the alimama-creative SD3-Controlnet-Inpainting folder.",
        )
