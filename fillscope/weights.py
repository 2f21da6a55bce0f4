"""Weight sources for every component: a diffusers-format folder, `placeholder`, or `meta`.

- diffusers folder: the Hugging Face repo layout (model_index.json, transformer/, vae/, text_encoder/, ...),
  loaded offline with safetensors only.
- placeholder: the full production topology from the shipped config, built on the meta device, then
  materialised directly on the target device and filled with deterministic finite values from a seed (never
  materialised on the CPU first, so a 12B transformer can be placed straight onto a GPU).
- meta: the full production topology with no storage; forward passes compute shapes only.
- a single .safetensors file from ComfyUI's model folders (BFL / SAI / LDM / transformers / diffusers keys):
  classified from its header and loaded by checkpoints.py.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import FillScopeInputError
from .specs import COMPONENTS, PIPELINE_LAYOUTS, shipped_config

META = "meta"
PLACEHOLDER = "placeholder"

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

# What each diffusers pipeline repo is, so that a folder of another model gets a useful error.
KNOWN_PIPELINES = {
    "FluxFillPipeline": "FLUX.1 Fill [dev]",
    "FluxPipeline": "FLUX.1 [dev]/[schnell] text-to-image",
    "FluxKontextPipeline": "FLUX.1 Kontext",
    "StableDiffusion3Pipeline": "Stable Diffusion 3",
    "StableDiffusionXLPipeline": "SDXL",
    "StableDiffusionPipeline": "Stable Diffusion 1.x/2.x",
    "StableDiffusion3Img2ImgPipeline": "Stable Diffusion 3 (img2img)",
    "StableDiffusion3InpaintPipeline": "Stable Diffusion 3 (inpaint)",
    "StableDiffusion3ControlNetPipeline": "Stable Diffusion 3 + ControlNet",
    "StableDiffusion3ControlNetInpaintingPipeline": "Stable Diffusion 3 + inpainting ControlNet",
    "Flux2KleinPipeline": "FLUX.2 [klein]",
}


@dataclass
class Component:
    """A loaded model with what is known about where its weights came from."""

    kind: str
    model: object  # torch.nn.Module
    source: str  # "meta", "placeholder" or the folder path
    provenance: str  # e.g. "meta (no storage)", "placeholder seed=0", "diffusers folder <path>"
    device: str
    dtype: str
    config: dict = field(default_factory=dict)
    tokenizer: object | None = None
    extras: dict = field(default_factory=dict)

    @property
    def is_meta(self) -> bool:
        return self.device == "meta"


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise FillScopeInputError("dtype", f"unknown dtype {name!r}.", f"use one of {', '.join(DTYPES)}.")
    return getattr(torch, DTYPES[name])


def resolve_device(device: str, source: str) -> str:
    """'auto' -> cuda when available else cpu; meta weights always run on the meta device."""
    if source == META:
        return "meta"
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise FillScopeInputError("device", "CUDA was requested but no CUDA device is available.", "set device to auto or cpu.")
    return device


def _model_class(kind: str, class_name: str | None = None):
    spec = COMPONENTS[kind]
    name = class_name or spec.class_name
    if spec.library == "diffusers":
        import diffusers

        return getattr(diffusers, name)
    import transformers

    return getattr(transformers, name)


def _transformers_config(kind: str, config: dict):
    import transformers

    if kind in ("clip_l", "clip_g"):
        return transformers.CLIPTextConfig(**config)
    if kind == "t5_xxl":
        return transformers.T5Config(**config)
    raise KeyError(kind)


def build_on_meta(kind: str, config: dict | None = None, dtype=None, class_name: str | None = None):
    """The component's full topology on the meta device (no storage, ~0.1 s even for the 12B transformer),
    created directly in `dtype`, except the modules a model class keeps in fp32 (T5's `wo` under fp16).
    `class_name` overrides the component's class (e.g. CLIPTextModel for a CLIP file without projection)."""
    import torch

    config = dict(config or shipped_config(kind))
    cls = _model_class(kind, class_name)
    previous = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            if COMPONENTS[kind].library == "diffusers":
                model = cls.from_config(config)
            else:
                model = cls(_transformers_config(kind, config))
    finally:
        torch.set_default_dtype(previous)
    if dtype == torch.float16:
        keep = getattr(model, "_keep_in_fp32_modules", None) or []
        for name, module in model.named_modules():
            if any(name.endswith(k) or f".{k}." in f".{name}." for k in keep):
                module.to(torch.float32)
    return model.eval().requires_grad_(False)


def _dtype_kwarg() -> str:
    """diffusers >= 0.42 takes `dtype` (torch_dtype still works there but warns); older releases torch_dtype."""
    try:
        from diffusers.utils import deprecation_utils

        return "dtype" if hasattr(deprecation_utils, "_TORCH_DTYPE_DEPRECATION_MESSAGE") else "torch_dtype"
    except ImportError:
        return "torch_dtype"


def _is_norm_weight(name: str, shape) -> bool:
    leaf = name.rsplit(".", 2)
    return len(shape) == 1 and name.endswith("weight") and any("norm" in part for part in leaf[:-1])


def fill_placeholder(model, seed: int, device: str) -> None:
    """Materialise a meta-built model on `device` and fill it deterministically: weights uniform in
    +-1/sqrt(fan_in) (keeps activations finite through deep stacks), norm scales 1, biases 0. Each tensor's
    stream is seeded from (seed, its qualified name), so the values do not depend on build order or device
    count."""
    import torch

    ties = _tied_groups(model)
    model.to_empty(device=device)  # materialises each name separately: ties (T5's shared embedding) break here
    _retie(model, ties)
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
                _fill_buffer(module, name, buf, f"{module_name}.{name}", device)


def _tied_groups(model) -> list[list[str]]:
    """Names that share one Parameter (e.g. T5's shared / encoder.embed_tokens), each group in order."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def _retie(model, groups: list[list[str]]) -> None:
    for first, *others in groups:
        owner, _, leaf = first.rpartition(".")
        param = getattr(model.get_submodule(owner) if owner else model, leaf)
        for name in others:
            mod, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(mod) if mod else model, leaf, param)


def _fill_buffer(module, name: str, buf, qualified: str, device) -> None:
    """Buffers are not weights: they get the value the module's own constructor computes."""
    import torch

    if name.endswith("position_ids"):
        buf.copy_(torch.arange(buf.shape[-1], device=device).expand_as(buf))
    elif name == "pos_embed" and hasattr(module, "base_size") and hasattr(module, "interpolation_scale"):
        # diffusers' PatchEmbed (SD3, the SD3 ControlNet): a fixed 2-D sin-cos grid of pos_embed_max_size^2 tokens
        from diffusers.models.embeddings import get_2d_sincos_pos_embed

        grid = module.pos_embed_max_size or int(buf.shape[1] ** 0.5)
        table = get_2d_sincos_pos_embed(buf.shape[-1], grid, base_size=module.base_size,
                                        interpolation_scale=module.interpolation_scale, output_type="pt")
        buf.copy_(table.reshape(buf.shape).to(buf.dtype))
    else:
        raise RuntimeError(f"placeholder weights: no rule to initialise buffer {qualified}")


def _pipeline_name(folder: Path) -> str | None:
    index = folder / "model_index.json"
    if index.is_file():
        try:
            return json.loads(index.read_text()).get("_class_name")
        except (OSError, json.JSONDecodeError):
            return None
    return None


def _repositories_with(kind: str) -> str:
    names = [KNOWN_PIPELINES.get(p, p) for p, layout in PIPELINE_LAYOUTS.items() if kind in layout]
    return ", ".join(dict.fromkeys(names))


def locate_component(kind: str, folder: Path, input_name: str) -> tuple[Path, Path | None]:
    """(model folder, tokenizer folder or None) of a component in a diffusers repository, or in a single-model
    folder (config.json at the top, e.g. the alimama ControlNet repository). Errors name the folder, what it
    is, and what to do."""
    spec = COMPONENTS[kind]
    if not folder.is_dir():
        raise FillScopeInputError(
            input_name,
            f"model folder '{folder}' does not exist.",
            f"put a repository that has the {spec.title} ({_repositories_with(kind) or 'its own repository'}, "
            "diffusers format) under ComfyUI/models/diffusers/, or its single .safetensors file in the matching "
            "ComfyUI model folder, or choose 'placeholder' or 'meta'.",
        )
    pipeline = _pipeline_name(folder)
    if pipeline is not None:
        layout = PIPELINE_LAYOUTS.get(pipeline, {})
        if kind not in layout:
            what = KNOWN_PIPELINES.get(pipeline, pipeline)
            same_class = [k for k in layout if COMPONENTS[k].class_name == spec.class_name]
            has = f" (it has the {COMPONENTS[same_class[0]].title})" if same_class else ""
            fix = f"select a repository that has one: {_repositories_with(kind) or spec.title}."
            if same_class and kind.endswith("_vae"):
                fix = f"set the VAE loader's kind to {same_class[0].removesuffix('_vae')}, or select a repository with the {spec.title}."
            raise FillScopeInputError(
                input_name,
                f"'{folder.name}' is a {what} repository (model_index.json says {pipeline}), which has no {spec.title}{has}.",
                fix,
            )
        model_sub, tok_sub = layout[kind]
        sub, tokenizer = folder / model_sub, (folder / tok_sub if tok_sub else None)
    elif (folder / "config.json").is_file():
        sub, tokenizer = folder, (folder / "tokenizer" if (folder / "tokenizer").is_dir() else None)
    else:
        raise FillScopeInputError(
            input_name,
            f"'{folder}' has neither model_index.json (a pipeline repository) nor config.json (a model folder).",
            "download the whole repository in diffusers format.",
        )
    if not (sub / "config.json").is_file():
        raise FillScopeInputError(
            input_name,
            f"'{folder}' has no {sub.relative_to(folder) if sub != folder else '.'}/config.json, so it is not a "
            "complete diffusers repository.",
            "download the whole repository (model_index.json and every component folder).",
        )
    if not any(sub.glob("*.safetensors")):
        found = sorted(p.name for p in sub.iterdir() if p.suffix in {".bin", ".pt", ".ckpt", ".pth"})
        raise FillScopeInputError(
            input_name,
            f"'{sub}' holds no .safetensors weights" + (f" (found {', '.join(found)}; FillScope never unpickles)." if found else "."),
            "use the repository's safetensors files.",
        )
    return sub, tokenizer


def _safetensors_shape(sub: Path, key: str):
    """A tensor's shape from a safetensors header, without reading the data."""
    from safetensors import safe_open

    for path in sorted(sub.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            if key in f.keys():
                return list(f.get_slice(key).get_shape())
    return None


def load_from_folder(kind: str, sub: Path, dtype: str, device: str, input_name: str):
    """(model, config) of a component folder, loaded offline from safetensors."""
    config = json.loads((sub / "config.json").read_text())
    overrides = {}
    if kind == "sd3_controlnet":
        # the extra conditioning channels (the mask) are what the weights say, whatever the config claims
        shape = _safetensors_shape(sub, "pos_embed_input.proj.weight")
        if shape is not None:
            overrides["extra_conditioning_channels"] = shape[1] - config.get("in_channels", 16)
            config = {**config, **overrides}
    check_component_config(kind, config, input_name, sub)
    spec = COMPONENTS[kind]
    td = torch_dtype(dtype)
    try:
        if spec.library == "diffusers":
            cls = _model_class(kind, config.get("_class_name"))
            model = cls.from_pretrained(sub, local_files_only=True, use_safetensors=True, **{_dtype_kwarg(): td}, **overrides)
        else:
            arch = (config.get("architectures") or [spec.class_name])[0]
            cls = _model_class(kind, arch)
            model = cls.from_pretrained(sub, dtype=td, local_files_only=True, use_safetensors=True)
    except Exception as e:
        # safetensors raises its own SafetensorError (no common base with OSError): matched by name
        if not isinstance(e, (OSError, ValueError, RuntimeError)) and type(e).__name__ != "SafetensorError":
            raise
        raise _unreadable(input_name, sub, e) from e
    if spec.library == "diffusers":
        _match_dtypes(model, build_on_meta(kind, config, dtype=td, class_name=type(model).__name__))
    return model.to(device).eval().requires_grad_(False), config


def _match_dtypes(model, reference) -> None:
    """Give every parameter and buffer the dtype it has in `reference` (the same model built on meta in the
    requested dtype). diffusers' from_pretrained assigns the file's tensors as they are when the model's first
    state-dict entry already has the file's dtype (SD3 and its ControlNet start with the fp32 pos_embed buffer),
    so an fp16 or fp32 folder would otherwise stay fp16/fp32 whatever dtype was asked for."""
    want = {n: t.dtype for n, t in list(reference.named_parameters()) + list(reference.named_buffers())}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        dt = want.get(name)
        if dt is not None and t.is_floating_point() and t.dtype != dt:
            t.data = t.data.to(dt)


def _unreadable(input_name: str, sub: Path, error: Exception) -> FillScopeInputError:
    detail = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
    return FillScopeInputError(
        input_name,
        f"the weights in '{sub}' could not be read ({type(error).__name__}: {detail}).",
        "the download is probably incomplete or corrupt: download that folder's .safetensors files again.",
    )


def check_component_config(kind: str, config: dict, input_name: str, where: Path) -> None:
    """Refuse a component whose config is another model's (e.g. the FLUX.1 [dev] transformer on the Fill
    loader, or the FLUX VAE where SD3's is needed)."""
    spec = COMPONENTS[kind]
    cls = config.get("_class_name") or (config.get("architectures") or [None])[0]
    if spec.library == "diffusers" and cls != spec.class_name:
        raise FillScopeInputError(input_name, f"'{where}' holds a {cls}, not the {spec.title}.", f"select a folder with the {spec.title}.")
    if kind == "flux_fill_transformer" and config.get("in_channels") != 384:
        raise FillScopeInputError(
            input_name,
            f"'{where}' is a FLUX transformer with in_channels {config.get('in_channels')} (FLUX.1 Fill has 384), "
            "not the FLUX.1 Fill transformer.",
            "select the FLUX.1-Fill-dev repository.",
        )
    if kind in ("flux_vae", "sd3_vae"):
        if config.get("latent_channels") != 16:
            raise FillScopeInputError(
                input_name, f"'{where}' is a VAE with {config.get('latent_channels')} latent channels; {spec.title} has 16.",
                "select the repository's vae/ folder.",
            )
        want = shipped_config(kind)["scaling_factor"]
        if abs(config.get("scaling_factor", want) - want) > 1e-6:
            other = "sd3" if kind == "flux_vae" else "flux"
            raise FillScopeInputError(
                input_name,
                f"'{where}' has latent scaling {config.get('scaling_factor')}, the {other.upper()} VAE's, not the {spec.title}'s ({want}).",
                f"set the VAE loader's kind to {other}, or select the matching repository.",
            )
    if kind == "sd3_controlnet" and config.get("extra_conditioning_channels", 0) != 1:
        raise FillScopeInputError(
            input_name,
            f"'{where}' is an SD3 ControlNet with {config.get('extra_conditioning_channels', 0)} extra conditioning "
            "channels; the inpainting ControlNet has 1 (the mask).",
            "select the alimama-creative SD3-Controlnet-Inpainting folder.",
        )


def load_component(
    kind: str,
    source: str | Path,
    *,
    dtype: str = "bf16",
    device: str = "auto",
    seed: int = 0,
    input_name: str = "source",
    variant: str | None = None,
) -> Component:
    """Load one component from a weight source ('meta', 'placeholder', a diffusers folder path or a single
    .safetensors file). `variant` picks the shipped config for meta/placeholder (e.g. sd3.5-large); a folder
    brings its own config, a file the one its shapes say."""
    source_str = str(source)
    dev = resolve_device(device, source_str)
    td = torch_dtype(dtype)
    spec = COMPONENTS[kind]
    if variant is not None and variant not in spec.variants:
        raise FillScopeInputError("variant", f"{variant!r} is not a {spec.title} variant.", f"use one of {', '.join(spec.variants)}.")
    if source_str in (META, PLACEHOLDER):
        config = shipped_config(kind, variant)
        model = build_on_meta(kind, config, dtype=td)
        if source_str == META:
            return Component(kind, model, META, "meta (full topology, no storage)", "meta", dtype, config)
        fill_placeholder(model, seed, dev)
        return Component(kind, model, PLACEHOLDER, f"placeholder (deterministic, seed={seed})", dev, dtype, config)
    from .checkpoints import is_single_file, load_single_file

    if is_single_file(source_str):
        model, config, provenance, facts, notes = load_single_file(kind, source_str, dtype=dtype, device=dev,
                                                                   input_name=input_name)
        comp = Component(kind, model, source_str, provenance, dev, dtype, config)
        comp.extras.update(tokenizer_folder=None, facts=facts, notes=notes)
        if variant is not None and kind == "sd3_transformer":
            inferred = next((n for n in notes if n.startswith("variant ")), "")
            if inferred and variant not in inferred.split():
                comp.extras["notes"] = notes + [f"variant input '{variant}' ignored: the file brings its own topology"]
        return comp
    folder = Path(source_str)
    sub, tokenizer = locate_component(kind, folder, input_name)
    model, config = load_from_folder(kind, sub, dtype, dev, input_name)
    comp = Component(kind, model, source_str, f"diffusers folder {folder.name}", dev, dtype, config)
    comp.extras["tokenizer_folder"] = tokenizer
    return comp


def count_parameters(model) -> tuple[int, int]:
    """(unique, tie-counted) parameter counts: a tied tensor counts once in the first, once per name in the second."""
    unique = sum(p.numel() for p in model.parameters())
    tie_counted = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    return unique, tie_counted
