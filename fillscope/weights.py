"""Weight sources for every component: a diffusers-format folder, `placeholder`, or `meta`.

- diffusers folder: the Hugging Face repo layout (model_index.json, transformer/, vae/, text_encoder/, ...),
  loaded offline with safetensors only.
- placeholder: the full production topology from the shipped config, built on the meta device, then
  materialised directly on the target device and filled with deterministic finite values from a seed (never
  materialised on the CPU first, so a 12B transformer can be placed straight onto a GPU).
- meta: the full production topology with no storage; forward passes compute shapes only.
- a single .safetensors file (BFL / SAI / LDM / transformers / diffusers keys): classified from its header and
  loaded by the checkpoints package.

Models are built by models.py (topology on meta, placeholder values, config checks); this module picks the source.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoints import is_single_file, load_single_file
from .errors import FillScopeInputError
from .models import (  # noqa: F401  (DTYPES, count_parameters, fill_placeholder: re-exported for callers)
    DTYPES, build_on_meta, check_component_config, check_room_for, count_parameters, fill_placeholder, key_list,
    model_class, n_tensors, torch_dtype,
)
from .requirements import check_installed
from .specs import COMPONENTS, PIPELINE_LAYOUTS, qwen3_kept_config, shipped_config

META = "meta"
PLACEHOLDER = "placeholder"

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
    "Flux2KleinInpaintPipeline": "FLUX.2 [klein] (inpaint)",
    "Flux2KleinKVPipeline": "FLUX.2 [klein] 9B-KV",
    "Flux2Pipeline": "FLUX.2 [dev] (48 heads, Mistral text encoder; FillScope runs klein 4B/9B)",
    "ZImagePipeline": "Z-Image",
    "QwenImagePipeline": "Qwen-Image",
    "QwenImageEditPipeline": "Qwen-Image-Edit",
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


def read_json_file(path: Path, input_name: str) -> dict:
    """A repository's JSON file (config.json, model_index.json) as a dict; a damaged one is refused naming the
    file and where the JSON breaks (line and column)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise FillScopeInputError(
            input_name,
            f"'{path}' is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}).",
            f"the file is damaged or was edited by hand: restore {Path(path).name} from the model's repository "
            "(download it again).",
        ) from None
    except RecursionError:  # Python's JSON reader recurses once per level: a config is a few levels deep
        raise FillScopeInputError(
            input_name, f"'{path}' nests its arrays/objects deeper than Python's JSON reader goes (about 1000 "
                        "levels), so it is not a JSON config.",
            f"restore {Path(path).name} from the model's repository (download it again).",
        ) from None
    except UnicodeDecodeError as e:
        raise FillScopeInputError(
            input_name, f"'{path}' is not a text file (byte {e.start} is not UTF-8), so it is not a JSON config.",
            f"restore {Path(path).name} from the model's repository (download it again).",
        ) from None
    except OSError as e:
        raise FillScopeInputError(
            input_name, f"'{path}' could not be read ({type(e).__name__}: {e.strerror or e}).",
            "check the file's permissions, or download it again.",
        ) from None
    if not isinstance(data, dict):
        raise FillScopeInputError(
            input_name, f"'{path}' holds a JSON {type(data).__name__}, not the object a {Path(path).name} holds.",
            f"restore {Path(path).name} from the model's repository (download it again).",
        )
    return data


def _pipeline_name(folder: Path, input_name: str) -> str | None:
    index = folder / "model_index.json"
    if index.is_file():
        return read_json_file(index, input_name).get("_class_name")
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
            "diffusers format) there, or choose its single .safetensors file, or 'placeholder' or 'meta'.",
        )
    pipeline = _pipeline_name(folder, input_name)
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


# Tensors a folder may lack or hold beyond what its config builds, whatever the config: constructor-computed
# buffers (position ids, SD3's sin-cos position table), T5's decoder and LM head (a full T5 saved as the encoder),
# CLIP's projection under a CLIPTextModel config (FLUX uses the pooled output without it). Tied copies (T5's
# encoder.embed_tokens = shared) are not reported missing by transformers in the first place.
ABSENT_OK = re.compile(r"(^|\.)position_ids$|(^|\.)pos_embed\.pos_embed$")
EXTRA_OK = re.compile(r"(^|\.)position_ids$|^(decoder|lm_head)\.|^text_projection\.weight$")

def _weight_files(sub: Path) -> str:
    names = sorted(p.name for p in sub.glob("*.safetensors"))
    return ", ".join(f"'{n}'" for n in names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")


def _qwen3_layers_not_built(config: dict):
    """Qwen3's layers beyond those FillScope builds (qwen3_kept_config): in the files, never loaded."""
    kept = qwen3_kept_config(config)["num_hidden_layers"]
    return re.compile(r"^(model\.)?layers\.(\d+)\.").match, kept


def check_loading_info(kind: str, sub: Path, info: dict, input_name: str, config: dict | None = None) -> None:
    """Refuse a folder whose config.json and weights disagree (diffusers/transformers `output_loading_info`):
    tensors the config builds that the files lack (they would be filled with fresh random values), tensors the
    files hold that the config has no place for (silently dropped), tensors of another shape. The config is the
    one blamed: the files' tensors are what was trained."""
    missing = [k for k in info.get("missing_keys") or [] if not ABSENT_OK.search(k)]
    unexpected = [k for k in info.get("unexpected_keys") or [] if not EXTRA_OK.search(k)]
    if kind == "qwen3":
        match, kept = _qwen3_layers_not_built(config or {})
        unexpected = [k for k in unexpected if not ((m := match(k)) and int(m.group(2)) >= kept)]
    mismatched = list(info.get("mismatched_keys") or [])
    if not (missing or unexpected or mismatched):
        return
    what = []
    if missing:
        what.append(f"the config builds {n_tensors(len(missing))} the weights do not hold ({key_list(missing)})")
    if unexpected:
        what.append(f"the weights hold {n_tensors(len(unexpected))} the config has no place for ({key_list(unexpected)})")
    if mismatched:
        shown = [f"{m[0]}: weights {list(m[1])}, config {list(m[2])}" if isinstance(m, (tuple, list)) and len(m) == 3
                 else str(m[0] if isinstance(m, (tuple, list)) else m) for m in mismatched]
        what.append(f"the shapes of {n_tensors(len(mismatched))} differ between the weights and the config "
                    f"({key_list(shown, sep='; ')})")
    raise FillScopeInputError(
        input_name,
        f"'{sub / 'config.json'}' does not match the weights in {_weight_files(sub)} ({COMPONENTS[kind].title}): "
        + "; ".join(what) + ".",
        "the config.json does not match these weights: use the config that came with them, or download the "
        "repository again (its config.json and .safetensors files together).",
    )


def load_from_folder(kind: str, sub: Path, dtype: str, device: str, input_name: str):
    """(model, config) of a component folder, loaded offline from safetensors. The config must match the weights:
    every tensor the config builds is in the files and every tensor in the files is used (check_loading_info)."""
    config = read_json_file(sub / "config.json", input_name)
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
    # output_loading_info: what the library did not fill or did not use; ignore_mismatched_sizes: shape
    # mismatches are reported there too (instead of an error that blames nobody), and refused below
    checked = {"local_files_only": True, "use_safetensors": True, "output_loading_info": True,
               "ignore_mismatched_sizes": True}
    try:
        if spec.library == "diffusers":
            cls = model_class(kind, config.get("_class_name"))
            # `dtype`: every diffusers FillScope accepts takes it (fillscope/requirements.py); torch_dtype warns
            model, info = cls.from_pretrained(sub, **checked, dtype=td, **overrides)
        elif kind == "qwen3":
            # a Qwen3ForCausalLM folder loads as Qwen3Model with the layers the condition reads (qwen3_kept_config)
            kept = qwen3_kept_config(config)["num_hidden_layers"]
            model, info = model_class(kind).from_pretrained(sub, dtype=td, num_hidden_layers=kept, **checked)
        else:
            arch = (config.get("architectures") or [spec.class_name])[0]
            cls = model_class(kind, arch)
            model, info = cls.from_pretrained(sub, dtype=td, **checked)
    except Exception as e:
        # safetensors raises its own SafetensorError (no common base with OSError): matched by name
        if not isinstance(e, (OSError, ValueError, RuntimeError)) and type(e).__name__ != "SafetensorError":
            raise
        raise _unreadable(input_name, sub, e) from e
    check_loading_info(kind, sub, info, input_name, config)
    if kind == "qwen3":
        config = qwen3_kept_config(config)
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
    check_installed()  # a too-old diffusers / transformers refused by name before torch or any weight loads
    source_str = str(source)
    dev = resolve_device(device, source_str)
    td = torch_dtype(dtype)
    spec = COMPONENTS[kind]
    if variant is not None and variant not in spec.variants:
        raise FillScopeInputError("variant", f"{variant!r} is not a {spec.title} variant.", f"use one of {', '.join(spec.variants)}.")
    if source_str in (META, PLACEHOLDER):
        config = shipped_config(kind, variant)
        if kind == "qwen3":
            config = qwen3_kept_config(config)
        model = build_on_meta(kind, config, dtype=td)
        if source_str == META:
            return Component(kind, model, META, "meta (full topology, no storage)", "meta", dtype, config)
        check_room_for(model, dev, input_name, spec.title, dtype)  # before any allocation: both figures, the fix
        fill_placeholder(model, seed, dev)
        return Component(kind, model, PLACEHOLDER, f"placeholder (deterministic, seed={seed})", dev, dtype, config)
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
    if kind == "klein_transformer" and (folder / "model_index.json").is_file():
        # distilled (4 steps, no CFG) or base (CFG) cannot be told from the weights: the repository says it
        distilled = read_json_file(folder / "model_index.json", input_name).get("is_distilled")
        if isinstance(distilled, bool):
            comp.extras["is_distilled"] = distilled
    return comp
