"""The batch manifest: one JSON object a line, one job each.

    {"id": "kitchen-01", "family": "flux-fill", "models": "models/FLUX.1-Fill-dev", "image": "in/kitchen.png",
     "mask": "in/kitchen_mask.png", "prompt": "a red brick fireplace", "seed": 42, "steps": 28, "dtype": "bf16",
     "guidance": 30, "grow": 8}

Required: id, family (FAMILIES), models, image, mask, prompt, seed, steps, dtype. Optional: negative (the families
that take one), parallel (ranks for the one image: 1, 2, 4, 8; SD3 1 or 2), tokenizers ({"clip", "t5"} or
{"qwen"}: folders for weights that bring none), tiles ({"tile", "overlap", "mode", "poisson"}: the image by
overlapping tiles, fillscope/tiled; TILE_DEFAULTS, bounds.TILED), and any sampler or mask option by its node input name
(`valid_options`: the keyword names of the family's `run` and the mask options of masks.prepare_image_and_mask).
`models`: a diffusers folder, a single file, "placeholder" or "meta" for every component, or an object naming each
component's source (keys: the pipeline's COMPONENTS; "default" for the components not named). `mask`: a greyscale
PNG (white = repaint) or "alpha" (1 - the image's alpha). Relative paths are read from the manifest's folder.

`read_manifest` checks every line before anything runs. Problems of the manifest itself (a line that is not a JSON
object, an id missing, unsafe as a file name or used twice) always stop it; problems of one job (unknown family,
missing keys, wrong types, unknown options) stop it too unless strict=False, when that job alone fails without
running. `job_key` is what a rerun compares: the job's line and the fingerprint of the files it names.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..bounds import MASK, SAMPLERS, SEED, STEPS, TILED, number_problem, path_problem, text_problem, whole_value
from ..compositing.removal import MASKED_FILLS
from ..errors import FillScopeInputError
from ..masks import SIZE_MODES, prepare_image_and_mask
from ..parallel.cfg import CFG_DEGREES
from ..parallel.context import ULYSSES_DEGREES
from ..pipelines import PIPELINES
from ..pipelines.klein import MODEL_TYPES, TOKEN_MASKS
from ..pipelines.sd3_controlnet import RESIDUAL_MAPPINGS
from ..speed import KLEIN_STEP_CACHES, STEP_CACHES
from ..tiled import MODES as TILE_MODES
from ..tiled import SHARED as SHARED_TILED
from ..tiled import run_tiled
from ..trace.records import json_depth

SCHEMA = "fillscope.batch/1"
FAMILIES = {"flux-fill": "flux-fill", "sd3-controlnet": "sd3-controlnet-inpaint", "klein-4b": "klein-4b",
            "klein-9b": "klein-9b"}  # the manifest's family -> its name in pipelines.PIPELINES
REQUIRED = ("id", "family", "models", "image", "mask", "prompt", "seed", "steps", "dtype")
DTYPES = ("bf16", "fp16", "fp32")
TOKENIZERS = {"flux-fill": ("clip", "t5"), "sd3-controlnet": ("clip", "t5"), "klein-4b": ("qwen",),
              "klein-9b": ("qwen",)}
WEIGHT_NAMES = ("meta", "placeholder")  # sources that are no path
# run()'s keywords that are no option of the job's sampler: hooks, and `parallel` (a job's own key: its ranks)
RUN_HOOKS = ("callback", "noise", "observe", "timings", "place", "parallel")
TOP_LEVEL = {"steps": "steps", "seed": "seed", "negative_prompt": "negative"}  # run() keyword -> the job's key
FILE_OPTIONS = ("soft_mask", "reference")  # options whose value is an image file ("alpha" also for soft_mask)
MASK_NAMES = {"invert": "invert_mask"}  # prepare_image_and_mask's keyword -> the node input's name
# ranks one job may run on: Ulysses degrees (the transformer's head count is checked when it runs); SD3: CFG parallel
PARALLEL_DEGREES = {family: CFG_DEGREES if family == "sd3-controlnet" else ULYSSES_DEGREES for family in FAMILIES}
# the menu options' choices, as the node's menu offers them (step_cache: the kinds the family's transformer runs)
MENUS = {"residual_mapping": RESIDUAL_MAPPINGS, "model_type": MODEL_TYPES, "token_mask": TOKEN_MASKS,
         "size_mode": SIZE_MODES, "masked_fill": MASKED_FILLS}
STEP_CACHE_MENUS = {"flux-fill": STEP_CACHES, "klein-4b": KLEIN_STEP_CACHES, "klein-9b": KLEIN_STEP_CACHES}
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_SHOWN = 20  # problems listed in one ManifestError
MAX_FINGERPRINT_FILES = 20000
MAX_LINE_DEPTH = 8  # a job line is an object holding objects (models, tokenizers, tiles): 2 deep
# a job's `tiles` (run_tiled's settings): the keys it may hold, with the defaults of those it leaves out
TILE_DEFAULTS = {"tile": 1024, "overlap": 0.15, "mode": "independent", "poisson": False}
TILE_PX = 16  # a tile's side is a multiple of one token (compositing/tiles.TOKEN_PX)
# options a tiled job may not set: whole-image tensors a tile would get at the wrong size, a crop mode that leaves
# pixels no tile samples (run_tiled refuses them too)
NOT_TILED = ("soft_mask", "size_mode")


@dataclass
class Job:
    """One manifest line, checked and with its paths resolved. `line` is the object as written (what `job_key`
    hashes); `error`, set only by read_manifest(strict=False), is why the job fails without running."""

    id: str
    family: str
    models: dict = field(default_factory=dict)  # component -> source: a path, "meta" or "placeholder"
    image: str = ""
    mask: str = ""  # a path, or "alpha"
    prompt: str = ""
    seed: int = 0
    steps: int = 1
    dtype: str = "bf16"
    negative: str | None = None
    tokenizers: dict = field(default_factory=dict)  # "clip" / "t5" / "qwen" -> folder
    parallel: int = 1  # ranks for this one image (Ulysses for FLUX Fill / klein, CFG parallel for SD3)
    tiles: dict | None = None  # run_tiled's tile, overlap, mode, poisson (TILE_DEFAULTS filled in); None: untiled
    options: dict = field(default_factory=dict)  # node input name -> value (file options resolved)
    line: dict = field(default_factory=dict)
    line_number: int = 0
    error: str | None = None

    @property
    def pipeline(self):
        return PIPELINES[FAMILIES[self.family]]


class ManifestError(FillScopeInputError):
    """Every problem found in a manifest, each a FillScopeInputError naming its line, job and field."""

    def __init__(self, path, problems: list[FillScopeInputError]):
        self.problems = problems
        shown = "\n".join(f"  {p.input_name}: {p.problem} Fix: {p.fix}" for p in problems[:MAX_SHOWN])
        more = f"\n  ... and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
        super().__init__(str(path), f"{len(problems)} problem(s) in the manifest; nothing has run:\n{shown}{more}\n",
                         "correct those lines and run the batch again.")


def problem(line: int, job_id, name: str, text: str, fix: str) -> FillScopeInputError:
    where = f"line {line}" + (f', job "{job_id}"' if isinstance(job_id, str) else "")
    return FillScopeInputError(f'{where}, field "{name}"', text, fix)


# --- the options a family takes -------------------------------------------------------------------------------------

@functools.cache
def mask_options() -> dict[str, tuple[str, object]]:
    """Node input name -> (prepare_image_and_mask's keyword, its default)."""
    params = inspect.signature(prepare_image_and_mask).parameters.values()
    return {MASK_NAMES.get(p.name, p.name): (p.name, p.default) for p in params
            if p.kind is p.KEYWORD_ONLY and p.name != "multiple"}


@functools.cache
def sampler_options(family: str) -> dict[str, object]:
    """The family's `run` keywords a job may set (by the node inputs' names, which are the same), with defaults."""
    params = inspect.signature(PIPELINES[FAMILIES[family]].run).parameters.values()
    return {p.name: p.default for p in params
            if p.kind is p.KEYWORD_ONLY and p.name not in RUN_HOOKS and p.name not in TOP_LEVEL}


def valid_options(family: str) -> dict[str, object]:
    """Every option name a job of `family` may set -> its default."""
    return {**sampler_options(family), **{name: default for name, (_, default) in mask_options().items()}}


def option_bounds(family: str) -> dict:
    """The numeric options of `family` -> their bounds (bounds.py: the node inputs' min/max); seed and steps are
    the job's own keys."""
    return {k: v for k, v in {**MASK, **SAMPLERS[FAMILIES[family]]}.items() if k not in ("seed", "steps")}


def option_menu(family: str, name: str) -> tuple | None:
    """The choices of a menu option (the node's Combo), None for an option that is no menu."""
    return STEP_CACHE_MENUS.get(family) if name == "step_cache" else MENUS.get(name)


def _shown(value, limit: int = 60) -> str:
    """A value as a message shows it: JSON, ASCII only, at most `limit` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_problem(name: str, value, default) -> str | None:
    """Why `value` cannot stand where `default` does (None when it can): the type of the default decides."""
    if name in FILE_OPTIONS:
        return None if isinstance(value, str) and value else "must be an image path"
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, int):  # an integral float (8.0) is a whole number (bounds.number_problem)
        whole = isinstance(value, int) or isinstance(value, float) and value.is_integer()
        return None if whole and not isinstance(value, bool) else "must be a whole number"
    if isinstance(default, float) or default is None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) or (default is None and value is None)
        return None if ok else "must be a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "must be a string"
    return None


# --- one line -------------------------------------------------------------------------------------------------------

def resolve_path(value: str, base: Path) -> str:
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


def _models(family: str, value, base: Path, add) -> dict:
    components = PIPELINES[FAMILIES[family]].COMPONENTS
    fix = (f'give one source (a diffusers folder, a .safetensors file, "placeholder" or "meta") or an object with '
           f'a source for each of {", ".join(components)} ("default" for those not named).')
    if isinstance(value, str) and value:
        named = dict.fromkeys(components, value)
    elif isinstance(value, dict):
        unknown = sorted(set(value) - set(components) - {"default"})
        if unknown:
            add("models", f"names {', '.join(unknown)}, which {family} has not; its components: "
                          f"{', '.join(components)} (and default).", fix)
        missing = [c for c in components if c not in value and "default" not in value]
        if missing:
            add("models", f"names no source for {', '.join(missing)}.", fix)
        named = {c: value.get(c, value.get("default")) for c in components}
    else:
        add("models", f"is {json.dumps(value)}.", fix)
        return {}
    bad = {c: path_problem(s) for c, s in named.items() if s is not None and path_problem(s)}
    if bad:
        add("models", "the source of " + ", ".join(f"{c} {why}" for c, why in bad.items()) + ".", fix)
        return {}
    return {c: (s if s in WEIGHT_NAMES else resolve_path(s, base)) for c, s in named.items() if s is not None}


def _tokenizers(family: str, value, base: Path, add) -> dict:
    keys = TOKENIZERS[family]
    fix = f"give an object with the tokenizer folders {family} reads: {', '.join(keys)}."
    if not isinstance(value, dict):
        add("tokenizers", f"is {json.dumps(value)}, not an object.", fix)
        return {}
    unknown = sorted(set(value) - set(keys))
    if unknown:
        add("tokenizers", f"names {', '.join(unknown)}; {family} reads {', '.join(keys)}.", fix)
    bad = {k: path_problem(v) for k, v in value.items() if path_problem(v)}
    if bad:
        add("tokenizers", "holds a value that is no folder path: " + ", ".join(f"{k} {why}" for k, why in bad.items())
            + ".", fix)
        return {}
    return {k: resolve_path(v, base) for k, v in value.items() if k in keys}


def runs_poisson() -> bool:
    """Whether run_tiled takes `poisson` (Poisson blending of the tiles' seams) in this version."""
    return "poisson" in inspect.signature(run_tiled).parameters


def _tiles(family: str, value, add) -> dict | None:
    """A job's `tiles` checked (bounds.TILED, as the tiled nodes' inputs) and completed with TILE_DEFAULTS."""
    fix = ('give an object like {"tile": 1024, "overlap": 0.15, "mode": "independent", "poisson": false} '
           "(every key optional).")
    if not isinstance(value, dict):
        add("tiles", f"is {_shown(value)}, not an object.", fix)
        return None
    ok = True
    for name in sorted(set(value) - set(TILE_DEFAULTS)):
        add(f"tiles.{name}", "is no tile setting.", f"use only {', '.join(TILE_DEFAULTS)}.")
        ok = False
    tiles = {**TILE_DEFAULTS, **value}
    why = number_problem(tiles["tile"], TILED["tile"])
    if why:
        add("tiles.tile", f"is {_shown(tiles['tile'])}; it {why}.",
            f"give a tile side in px from {TILED['tile']}, a multiple of {TILE_PX} (1024: FLUX's native size).")
        ok = False
    elif tiles["tile"] % TILE_PX:
        side = tiles["tile"]
        add("tiles.tile", f"is {side} px, not a multiple of {TILE_PX} px (one token).",
            f"use {max(TILED['tile'].min, side // TILE_PX * TILE_PX)} or {-(-side // TILE_PX) * TILE_PX}.")
        ok = False
    why = number_problem(tiles["overlap"], TILED["overlap"])
    if why:
        add("tiles.overlap", f"is {_shown(tiles['overlap'])}; it {why}.",
            f"give the fraction of a tile shared with its neighbour, from {TILED['overlap']} (0.15 by default).")
        ok = False
    if tiles["mode"] not in TILE_MODES:
        add("tiles.mode", f"is {_shown(tiles['mode'])}.", f"use one of {', '.join(TILE_MODES)}.")
        ok = False
    elif tiles["mode"] == "shared" and PIPELINES[FAMILIES[family]] not in SHARED_TILED:
        shared = ", ".join(f for f, name in FAMILIES.items() if PIPELINES[name] in SHARED_TILED)
        add("tiles.mode", f"is shared, which is built for {shared} only.", f'use "independent" for {family}.')
        ok = False
    if not isinstance(tiles["poisson"], bool):
        add("tiles.poisson", f"is {_shown(tiles['poisson'])}; it must be true or false.", "give true or false.")
        ok = False
    elif tiles["poisson"] and not runs_poisson():
        add("tiles.poisson", "is true, and this FillScope's tiled run has no Poisson blending.",
            "leave poisson false (ramp-weighted blending).")
        ok = False
    elif tiles["poisson"] and tiles["mode"] == "shared":
        add("tiles.poisson", "is true in mode shared, which averages the windows every step: there is no tile seam "
                             "to solve.", 'leave poisson false in mode shared, or use mode "independent".')
        ok = False
    if not ok:
        return None
    if isinstance(tiles["overlap"], int):
        tiles["overlap"] = float(tiles["overlap"])
    tiles["tile"] = whole_value(tiles["tile"])  # 1024.0 -> 1024: the tiles are planned in whole pixels
    return tiles


def _tiled_options(job: Job, add) -> None:
    """What a tiled job may not combine with its tiles: parallel ranks and the options run_tiled refuses (the family
    options a mode shared takes are its run_shared's to check: the job fails alone when it runs)."""
    if job.parallel > 1:
        add("parallel", f"is {job.parallel}; a tiled job runs each tile in one process.",
            "remove parallel, or remove tiles (on Ray the tiles of a job spread over the workers instead).")
    for name in NOT_TILED:
        if name in job.options and not (name == "size_mode" and job.options[name] == "pad"):
            add(name, f"is {_shown(job.options[name])}; a tiled job takes no {name} (each tile would need its own).",
                f"remove {name} from this job, or remove tiles.")


def job_from_line(obj: dict, line: int = 0, base: Path | str = ".") -> tuple[Job, list[FillScopeInputError]]:
    """A Job from one parsed line, and the problems of that job (empty when it can run). The id is assumed
    checked (read_manifest does it)."""
    base = Path(base)
    job_id = obj.get("id")
    problems: list[FillScopeInputError] = []

    def add(name, text, fix):
        problems.append(problem(line, job_id, name, text, fix))

    family = obj.get("family")
    if family not in FAMILIES:
        add("family", f"{json.dumps(family)} is no family FillScope runs.", f"use one of {', '.join(FAMILIES)}.")
        family = None
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        add(missing[0], f"is missing (required: {', '.join(missing)}).", f"every job names {', '.join(REQUIRED)}.")
    checks = (("prompt", text_problem, "a string without NUL characters"), ("negative", text_problem, "a string"),
              ("image", path_problem, "an image path"), ("mask", path_problem, 'a mask image path or "alpha"'))
    for name, check, what in checks:
        why = check(obj[name]) if name in obj else None
        if why:
            add(name, f"is {_shown(obj[name])}; it {why}.", f"give {what}.")
    for name, bounds in (("seed", SEED), ("steps", STEPS)):  # the sampler nodes' seed and steps
        why = number_problem(obj[name], bounds) if name in obj else None
        if why:
            add(name, f"is {_shown(obj[name])}; it {why}.", f"give a whole number from {bounds}.")
    if obj.get("dtype", DTYPES[0]) not in DTYPES:
        add("dtype", f"is {_shown(obj['dtype'])}.", f"use one of {', '.join(DTYPES)}.")
    job = Job(id=job_id, family=family or str(obj.get("family")), line=obj, line_number=line,
              prompt=obj.get("prompt", ""), seed=whole_value(obj.get("seed", 0)),
              steps=whole_value(obj.get("steps", 1)),
              dtype=obj.get("dtype", "bf16"), negative=obj.get("negative"))
    if isinstance(obj.get("image"), str) and obj["image"]:
        job.image = resolve_path(obj["image"], base)
    if isinstance(obj.get("mask"), str) and obj["mask"]:
        job.mask = "alpha" if obj["mask"] == "alpha" else resolve_path(obj["mask"], base)
    if family is None:
        return job, problems
    pipeline = PIPELINES[FAMILIES[family]]
    if "negative" in obj and not pipeline.TAKES_NEGATIVE_PROMPT:
        add("negative", f"{family} takes no negative prompt (it runs without classifier-free guidance).",
            "remove negative from this job.")
    if "parallel" in obj:
        allowed = PARALLEL_DEGREES[family]
        if isinstance(obj["parallel"], bool) or obj["parallel"] not in allowed:
            degrees = ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}"
            add("parallel", f"is {json.dumps(obj['parallel'])}; {family} runs one image on {degrees} ranks.",
                f"use one of {', '.join(map(str, allowed))} (1: one process).")
        else:
            job.parallel = whole_value(obj["parallel"])
    if "models" in obj:
        job.models = _models(family, obj["models"], base, add)
    if "tokenizers" in obj:
        job.tokenizers = _tokenizers(family, obj["tokenizers"], base, add)
    options, bounds = valid_options(family), option_bounds(family)
    for name in sorted(set(obj) - set(REQUIRED) - {"negative", "tokenizers", "parallel", "tiles"}):
        if name not in options:
            add(name, f"is no option of {family}.", f"use one of: {', '.join(sorted(options))}.")
            continue
        value = obj[name]
        why = _type_problem(name, value, options[name])
        if why:
            add(name, f"is {_shown(value)}; it {why}.",
                f"give a value like its default, {json.dumps(options[name])}.")
            continue
        why = (path_problem(value) if name in FILE_OPTIONS else
               number_problem(value, bounds[name]) if name in bounds and value is not None else None)
        if why:
            add(name, f"is {_shown(value)}; it {why}.", f"give a value from {bounds[name]} (the node's {name})."
                if name in bounds else "give an image path.")
            continue
        menu = option_menu(family, name)
        if menu and value not in menu:
            add(name, f"is {_shown(value)}, no choice of {family}'s {name}.", f"use one of {', '.join(menu)}.")
            continue
        if name in FILE_OPTIONS and not (name == "soft_mask" and value == "alpha"):
            value = resolve_path(value, base)
        elif isinstance(options[name], float) and isinstance(value, int):
            value = float(value)  # 30 where the default is 30.0: the node would pass a float
        elif isinstance(options[name], int) and not isinstance(options[name], bool):
            value = whole_value(value)  # 8.0 where the default is 8: the node would pass an int
        job.options[name] = value
    if "tiles" in obj:
        job.tiles = _tiles(family, obj["tiles"], add)
        if job.tiles is not None:
            _tiled_options(job, add)
    return job, problems


# --- the whole manifest ---------------------------------------------------------------------------------------------

def _id_problem(obj: dict, line: int, seen: dict) -> FillScopeInputError | None:
    job_id = obj.get("id")
    fix = "give every job an id of letters, digits, '.', '_' or '-' (at most 128, starting with a letter or digit)."
    if not isinstance(job_id, str):
        text = "is missing." if "id" not in obj else f"is {json.dumps(job_id)}, not a string."
        return problem(line, None, "id", text, fix)
    if not SAFE_ID.fullmatch(job_id):
        return problem(line, None, "id", f"{json.dumps(job_id)} is not safe as a file name (DIR/<id>.png).", fix)
    folded = job_id.casefold()  # ids that differ only in case name one file on case-insensitive file systems
    if folded in seen:
        first_line, first = seen[folded]
        same = "the id" if first == job_id else f'"{first}" (the same file name on some systems)'
        return problem(line, job_id, "id", f"is used twice: line {first_line} has {same}.", "give each job its own id.")
    seen[folded] = (line, job_id)
    return None


def read_manifest(path, *, strict: bool = True, base=None) -> list[Job]:
    """Every job of a JSON-lines manifest, checked before anything runs (blank lines and lines starting with #
    are skipped). Raises ManifestError listing every problem; with strict=False a job's own problems are set on
    it (Job.error: it fails alone) and only the manifest's (JSON, ids) raise. Relative paths are read from
    `base`, by default the manifest's folder with its links resolved."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FillScopeInputError("manifest", f"'{path}' could not be read ({getattr(e, 'strerror', None) or e}).",
                                  "give the path of a JSON-lines file, one job per line.") from None
    base = path.resolve().parent if base is None else Path(base)
    jobs, fatal, seen = [], [], {}
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        depth = json_depth(raw)
        if depth > MAX_LINE_DEPTH:  # json.loads and the key's canonical JSON recurse: refuse before either runs
            fatal.append(problem(n, None, "JSON", f"nests {depth} levels deep; a job nests at most {MAX_LINE_DEPTH}.",
                                 "write one flat JSON object per line (models and tokenizers are one level deeper)."))
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            fatal.append(problem(n, None, "JSON", f"is not valid JSON ({e.msg} at column {e.colno}).",
                                 "write one JSON object per line."))
            continue
        if not isinstance(obj, dict):
            fatal.append(problem(n, None, "JSON", f"holds a JSON {type(obj).__name__}, not an object.",
                                 "write one JSON object per line."))
            continue
        bad_id = _id_problem(obj, n, seen)
        if bad_id:
            fatal.append(bad_id)
            continue
        job, problems = job_from_line(obj, n, base)
        if problems and strict:
            fatal.extend(problems)
        elif problems:
            job.error = "; ".join(str(p) for p in problems)
        jobs.append(job)
    if not jobs and not fatal:
        fatal.append(problem(0, None, "jobs", "the manifest holds no job.", "write one JSON object per line."))
    if fatal:
        raise ManifestError(path, fatal)
    return jobs


def job_paths(job: Job) -> list[tuple[str, str]]:
    """Every file or folder the job reads, as (its field, the path as the job holds it): image, mask, soft_mask and
    reference (not "alpha"), each component's model source (not "meta" / "placeholder") as "models.<component>",
    each tokenizer folder as "tokenizers.<kind>". For a caller that lets a batch read only some folders."""
    paths = [("image", job.image)] if job.image else []
    if job.mask and job.mask != "alpha":
        paths.append(("mask", job.mask))
    for name in FILE_OPTIONS:
        value = job.options.get(name)
        if isinstance(value, str) and value and not (name == "soft_mask" and value == "alpha"):
            paths.append((name, value))
    paths += [(f"models.{c}", s) for c, s in job.models.items() if s not in WEIGHT_NAMES]
    paths += [(f"tokenizers.{k}", v) for k, v in job.tokenizers.items()]
    return paths


# --- keys -------------------------------------------------------------------------------------------------------------

def path_fingerprint(source: str):
    """A file's [size, mtime_ns]; a folder's [[relative path, size, mtime_ns], ...] (links followed, at most
    MAX_FINGERPRINT_FILES); "meta" / "placeholder" as they are; "missing" for what cannot be read."""
    if source in WEIGHT_NAMES or source == "alpha":
        return source
    path = Path(source)
    try:
        if path.is_file():
            st = path.stat()
            return [st.st_size, st.st_mtime_ns]
        if path.is_dir():
            files, entries = [], 0
            for root, dirs, names in os.walk(path, followlinks=True):
                dirs.sort()
                entries += 1 + len(names)  # folders count too: a link cycle ends here
                for name in sorted(names):
                    st = os.stat(os.path.join(root, name))
                    files.append([os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/"),
                                  st.st_size, st.st_mtime_ns])
                if entries >= MAX_FINGERPRINT_FILES:
                    return files[:MAX_FINGERPRINT_FILES] + ["partial"]
            return files
    except OSError:
        pass
    return "missing"


def job_fingerprint(job: Job, memo: dict | None = None) -> dict:
    """What the job's files are now: the weights (models, tokenizers) and the inputs (image, mask, soft mask,
    reference), each by path_fingerprint. `memo` (a dict) reuses a folder's walk across the jobs of one batch."""
    memo = {} if memo is None else memo

    def fp(source):
        if source not in memo:
            memo[source] = path_fingerprint(source)
        return memo[source]

    inputs = {"image": job.image, "mask": job.mask,
              **{k: v for k, v in job.options.items() if k in FILE_OPTIONS}}
    return {"models": {c: fp(s) for c, s in sorted(job.models.items())},
            "tokenizers": {k: fp(v) for k, v in sorted(job.tokenizers.items())},
            "inputs": {k: fp(v) for k, v in sorted(inputs.items())}}


def canonical_json(obj) -> str:
    def plain(x):  # NaN / inf (which json.loads accepts) as strings: canonical JSON has none
        return repr(x) if isinstance(x, float) and not math.isfinite(x) else x

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return plain(x)

    return json.dumps(walk(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def job_key(job: Job, fingerprint) -> str:
    """sha256 of the canonical JSON of the job's line (as written) and the fingerprint of its files: a rerun skips
    a job whose key finished ok and whose image exists; an edited line, a replaced weight or input file reruns it."""
    line = job.line or {k: v for k, v in vars(job).items() if k not in ("line", "line_number", "error")}
    text = canonical_json({"schema": SCHEMA, "job": line, "fingerprint": fingerprint})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
