"""A run definition for a comparison: one batch job (docs/batches.md: family, models, image, mask, prompt, seed,
steps, dtype and any node option, `step_cache` among them) plus how the run is made:

- `implementation`: `fillscope` (the engine's pipeline) or `diffusers` (diffusers' own pipeline on the same loaded
  components, in this process); ComfyUI's own model needs a running ComfyUI and is not a run this command makes;
- `storage`: `as loaded` or `fp8_e4m3fn` (the blocks' weights kept in float8, as the loaders' storage option);
- `attention`: a diffusers attention backend for the transformer (`native`, `_native_math`, ...; default: as
  loaded);
- `blocks`: true to capture every transformer block's output at every call;
- `memory`: a placement policy (`auto`, `keep`, `offload`, `sequential`) each stage runs under (default: the
  components stay where they were loaded): a policy moves weights, never numbers, which a comparison shows.

Run B is written as the fields it changes: what it does not set it takes from A. The job itself (image, mask,
prompt, negative prompt, seed, steps and the size they give) must be the same in both: a B that changes one is
refused naming the field, since the figures would then measure the job, not the implementation. Runs on meta
weights (shapes, no values) may differ in image and mask: comparing the shapes at two sizes is what they are for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import FillScopeInputError
from .variants import STORAGES

IMPLEMENTATIONS = ("fillscope", "diffusers")
RUN_FIELDS = {"implementation": "fillscope", "storage": "as loaded", "attention": None, "blocks": False,
              "memory": None}
JOB_FIELDS = ("image", "mask", "prompt", "negative", "seed", "steps", "family")  # the same in A and B


@dataclass
class RunSpec:
    label: str  # "A" or "B"
    job: object  # batch.manifest.Job
    implementation: str = "fillscope"
    storage: str = "as loaded"
    attention: str | None = None
    blocks: bool = False
    memory: str | None = None  # a placement policy (placement.POLICIES) each stage runs under; None: as loaded
    line: dict | None = None  # the spec as given (B: with A's fields filled in)

    def describe(self) -> str:
        parts = [self.implementation, self.job.dtype]
        if self.storage != "as loaded":
            parts.append(f"storage {self.storage}")
        cache = self.job.options.get("step_cache", "off")
        if cache != "off":
            parts.append(f"step cache {cache}")
        if self.attention:
            parts.append(f"attention {self.attention}")
        if self.memory:
            parts.append(f"memory {self.memory}")
        return ", ".join(parts)

    def summary(self) -> dict:
        """What the record (record.compare_document) says of this run."""
        return {"describe": self.describe(), "spec": self.line, "implementation": self.implementation,
                "dtype": self.job.dtype, "storage": self.storage, "attention": self.attention,
                "step_cache": self.job.options.get("step_cache", "off")}


JSON_TYPES = {"list": "an array", "str": "a string", "int": "a number", "float": "a number", "bool": "true or false",
              "NoneType": "null"}


def read_spec_text(text: str, name: str) -> tuple[dict, Path]:
    """A spec given on the command line: inline JSON (it starts with '{' or '[', or it is JSON and no file has that
    name) or a JSON file's path -> (the object, the folder its relative paths are read from). Nested deeper than a
    batch job line may be (manifest.MAX_LINE_DEPTH, counted before the JSON is read) or not an object: refused."""
    from ..batch.manifest import MAX_LINE_DEPTH
    from ..trace.records import json_depth

    stripped = text.strip()
    inline = stripped[:1] in ("{", "[") or _is_json(stripped) and not Path(text).exists()
    if inline:
        raw, base, where = text, Path("."), "inline JSON"
    else:
        path = Path(text)
        try:
            raw = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise FillScopeInputError(name, f"cannot be read: {getattr(e, 'strerror', None) or e} ({path}).",
                                      "give a JSON file's path or a JSON object such as '{\"dtype\": \"bf16\"}'.")
        base, where = path.parent, f"the file {path}"
    depth = json_depth(raw)
    if depth > MAX_LINE_DEPTH:  # json.loads recurses: refused before it runs, as a manifest line is
        raise FillScopeInputError(name, f"({where}) nests {depth} levels deep; a spec, like a batch job line, nests at "
                                        f"most {MAX_LINE_DEPTH}.",
                                  "write the run as one flat JSON object (models and tokenizers are one level deeper).")
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as e:
        raise FillScopeInputError(name, f"({where}) is not JSON: {e.msg} at line {e.lineno} column {e.colno}.",
                                  "write the run as one JSON object (docs/batches.md's job fields plus "
                                  "implementation, storage, attention, blocks).") from None
    if not isinstance(obj, dict):
        raise FillScopeInputError(name, f"({where}) is JSON but {JSON_TYPES.get(type(obj).__name__, 'a value')}, "
                                        "not an object.",
                                  "write the run as one JSON object, e.g. '{\"dtype\": \"bf16\"}' ('{}': A as it is).")
    return obj, base


def _is_json(text: str) -> bool:
    """Whether `text` is a JSON value (a number, a string, true, false, null) rather than a file name."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _run_fields(obj: dict, name: str) -> dict:
    out = {}
    for key, default in RUN_FIELDS.items():
        value = obj.get(key, default)
        if key == "implementation" and value not in IMPLEMENTATIONS:
            fix = ("ComfyUI's own model needs a running ComfyUI: compare it there (not yet offered), here choose "
                   f"one of {', '.join(IMPLEMENTATIONS)}" if value == "native"
                   else f"choose one of {', '.join(IMPLEMENTATIONS)}")
            raise FillScopeInputError(f"{name}.implementation", f"is {value!r}.", fix + ".")
        if key == "storage" and value not in STORAGES:
            raise FillScopeInputError(f"{name}.storage", f"is {value!r}.", f"choose one of {', '.join(STORAGES)}.")
        if key == "attention" and value is not None and (not isinstance(value, str) or not value.strip()
                                                          or "\x00" in value):
            raise FillScopeInputError(f"{name}.attention", f"is {value!r}.",
                                      "name a diffusers attention backend, e.g. \"native\" or \"_native_math\".")
        if key == "memory" and value is not None:
            from ..placement import POLICIES

            if value not in POLICIES:
                raise FillScopeInputError(f"{name}.memory", f"is {value!r}.",
                                          f"choose one of {', '.join(POLICIES)} (or leave it out: as loaded).")
        if key == "blocks" and not isinstance(value, bool):
            raise FillScopeInputError(f"{name}.blocks", f"is {value!r}.", "set blocks to true or false.")
        out[key] = value
    return out


def specs_from(a_obj: dict, b_obj: dict, base_a: Path = Path("."), base_b: Path = Path(".")) -> tuple:
    """(RunSpec A, RunSpec B) from the two objects: each job checked as a batch manifest line is, B completed
    from A, the job fields compared."""
    from ..batch.manifest import job_from_line

    # what B takes from A keeps A's folder: its relative paths are made absolute first
    inherited = {k: _absolute(k, v, base_a) for k, v in a_obj.items() if k not in b_obj}
    b_full = {**inherited, **b_obj}
    both_meta = all(_all_meta(o.get("models")) for o in (a_obj, b_obj if "models" in b_obj else a_obj))
    for key in JOB_FIELDS:
        if both_meta and key in ("image", "mask"):
            continue  # meta runs compare shapes: another image size is the point
        if key in b_obj and b_obj[key] != a_obj.get(key):
            raise FillScopeInputError(
                f"B.{key}", f"is {b_obj[key]!r} but A's is {a_obj.get(key)!r}: a comparison runs one job two ways.",
                f"leave {key} out of B (it takes A's), or compare two separate batch runs instead.")
    specs = []
    for label, obj, base in (("A", a_obj, base_a), ("B", b_full, base_b)):
        line = {k: v for k, v in obj.items() if k not in RUN_FIELDS}
        line.setdefault("id", f"compare-{label.lower()}")
        job, problems = job_from_line(line, 0, base)
        if problems:  # named as the spec's field: 'line 0, job "compare-a", field "seed"' -> 'A.seed'
            p = problems[0]
            field_name = p.input_name.rsplit("field ", 1)[-1].strip('"')
            raise FillScopeInputError(f"{label}.{field_name}", p.problem, p.fix)
        if job.tiles is not None or job.parallel != 1:
            raise FillScopeInputError(f"{label}.tiles" if job.tiles is not None else f"{label}.parallel",
                                      "is set: a comparison runs one image in one process, untiled.",
                                      "leave tiles and parallel out of a compare spec.")
        specs.append(RunSpec(label, job, line=obj, **_run_fields(obj, label)))
    return tuple(specs)


def check_spec_paths(*specs) -> None:
    """Every file and folder the runs read (image, mask, soft_mask, reference, each component's model source, each
    tokenizer folder: batch.manifest.job_paths) exists, checked for both runs before any model loads; else one error
    naming the first missing path's spec field (`B.models`) and listing every missing path."""
    from ..batch.manifest import job_paths

    missing = [(spec.label, field, path) for spec in specs for field, path in job_paths(spec.job)
               if not Path(path).exists()]
    if not missing:
        return
    label, field, _ = missing[0]
    shown = "; ".join(f"{lab}.{f.replace('models.', 'models ').replace('tokenizers.', 'tokenizers ')} '{p}'"
                      for lab, f, p in missing)
    what = "model sources (a diffusers folder, a .safetensors file, meta or placeholder)" \
        if field.startswith("models") else "files and folders"
    raise FillScopeInputError(f"{label}.{field.split('.')[0]}",
                              f"names what does not exist: {shown}. Nothing has loaded (both runs are checked first).",
                              f"give existing {what}; relative paths are read from the spec file's folder (inline "
                              "JSON: the current folder), and a field B leaves out is A's.")


def _all_meta(models) -> bool:
    if isinstance(models, dict):
        return bool(models) and all(v == "meta" for v in models.values())
    return models == "meta"


PATH_FIELDS = ("image", "mask", "models", "tokenizers", "reference", "soft_mask")


def _absolute(key: str, value, base: Path):
    """A path-valued field with its relative paths read from `base` (meta, placeholder and alpha stay words)."""
    from ..batch.manifest import resolve_path

    def one(v):
        if isinstance(v, str) and v not in ("meta", "placeholder", "alpha") and v:
            return resolve_path(v, base)
        return v

    if key not in PATH_FIELDS:
        return value
    return {k: one(v) for k, v in value.items()} if isinstance(value, dict) else one(value)
