"""Running a batch in this process, one job after the other.

`run_job(job, cache, out_dir)` is one job whole: the image and mask read and prepared (a bad input fails before any
model loads), the stack from the `ModelCache` (loaded once, resident for the next jobs), the family's `run` with the
job's options, paste-back with the prepared mask as the graphs' Paste Back does, then DIR/<id>.png (8-bit as
ComfyUI's image saver writes it) and DIR/<id>.shapes.json (the tensors the run observed, schema fillscope.shapes/1,
plus the job), each written to a temporary file and moved into place, so a killed run leaves no half file.
`run_batch` keys every job (manifest.job_key), skips those that finished with the same key and whose image exists,
runs the rest (jobs on the same stack one after another) and appends one line a finished job to DIR/batch.jsonl.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..errors import FillScopeInputError
from ..masks import paste_back, prepare_image_and_mask
from ..trace.records import ShapeRecorder, shapes_document
from .images import load_image, load_mask
from .manifest import TOKENIZERS, Job, job_fingerprint, job_key, mask_options, sampler_options

LOG = "batch.jsonl"
TABLES = {"flux-fill": "flux_fill", "sd3-controlnet": "sd3_controlnet", "klein-4b": "klein", "klein-9b": "klein"}
PNG_COMPRESS_LEVEL = 4  # ComfyUI's image saver's


@dataclass
class JobResult:
    id: str
    key: str
    status: str  # "ok" | "error"
    seconds: float
    error: str | None = None
    png: str | None = None
    shapes: str | None = None
    worker: str | None = None  # where it ran, on Ray ("node <id8> pid <pid>"); None in this process
    attempts: int = 1  # on Ray: >1 when a worker died under it and it ran again elsewhere
    tiles: list | None = None  # a tiled job's tile records (TiledResult.records; on Ray spread: + "worker")

    def line(self) -> dict:
        """The job's line in batch.jsonl."""
        line = {"id": self.id, "key": self.key, "status": self.status, "seconds": round(self.seconds, 3),
                "error": self.error}
        if self.worker is not None:
            line["worker"] = self.worker
        if self.attempts != 1:
            line["attempts"] = self.attempts
        if self.tiles is not None:
            line["tiles"] = self.tiles
        return line


@dataclass
class JobOutput:
    """A finished job before anything is written: its result and its files (name in DIR -> bytes). Ray workers
    return this, so the driver is the one writer of DIR whatever node ran the job."""

    result: JobResult
    files: dict

    def write(self, out_dir) -> JobResult:
        """The files into `out_dir` (each whole or not at all), image first: a job's line is appended only after."""
        out_dir = Path(out_dir)
        paths = {}
        for name, data in self.files.items():
            write_atomic(out_dir / name, data)
            paths[name] = str(out_dir / name)
        r = self.result
        if r.status == "ok":
            r.png, r.shapes = paths.get(f"{r.id}.png"), paths.get(f"{r.id}.shapes.json")
        return r


# --- models -----------------------------------------------------------------------------------------------------------

def component_loaders(family: str, tokenizers: dict) -> dict:
    """The family's loader of each component (what its load_stack calls), for stacks whose components come from
    different sources."""
    from .. import text as text_ops
    from .. import vae as vae_ops
    from ..pipelines import flux_fill, klein, sd3_controlnet

    clip, t5 = tokenizers.get("clip"), tokenizers.get("t5")
    if family == "flux-fill":
        return {"clip_l": partial(text_ops.load_clip_l, tokenizer_fallback=clip),
                "t5": partial(text_ops.load_t5, tokenizer_fallback=t5),
                "transformer": flux_fill.load_flux_fill_transformer, "vae": partial(vae_ops.load_vae, kind="flux")}
    if family == "sd3-controlnet":
        return {"clip_l": partial(text_ops.load_clip_l, tokenizer_fallback=clip),
                "clip_g": partial(text_ops.load_clip_g, tokenizer_fallback=clip),
                "t5": partial(text_ops.load_t5, tokenizer_fallback=t5),
                "transformer": sd3_controlnet.load_sd3_transformer,
                "controlnet": sd3_controlnet.load_sd3_controlnet, "vae": partial(vae_ops.load_vae, kind="sd3")}
    qwen = tokenizers.get("qwen")
    return {"qwen3": partial(text_ops.load_qwen3, variant=klein.VARIANTS[family], tokenizer_fallback=qwen),
            "transformer": partial(klein.load_klein_transformer, variant=family),
            "vae": partial(vae_ops.load_vae, kind="flux2")}


def load_stack(job: Job, device: str = "auto") -> dict:
    """The job's stack: the pipeline's own load_stack when every component (SD3: but the ControlNet) has one
    source, else component by component."""
    pipeline, sources = job.pipeline, job.models
    kw = {"dtype": job.dtype, "device": device}
    folders = tuple(job.tokenizers.get(k) for k in TOKENIZERS[job.family])
    extra = {"variant": job.family} if job.family.startswith("klein") else {}
    shared = {s for c, s in sources.items() if c != "controlnet"}
    if len(shared) == 1:
        if "controlnet" in sources:
            extra["controlnet"] = sources["controlnet"]
        return pipeline.load_stack(shared.pop(), tokenizer_folders=folders, **extra, **kw)
    loaders = component_loaders(job.family, job.tokenizers)
    return {name: loaders[name](sources[name], **kw) for name in pipeline.COMPONENTS}


def stack_key(job: Job) -> tuple:
    """What a job's stack is made of: jobs with the same key share one loaded stack."""
    return (job.family, tuple(sorted(job.models.items())), tuple(sorted(job.tokenizers.items())), job.dtype)


def _release_memory() -> None:
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class ModelCache:
    """Stacks kept resident between jobs, keyed by (family, sources, tokenizers, dtype, device); at most
    `max_resident`, the least recently used dropped first. `loads` lists the keys loaded, in order. A stack whose
    load was refused (FillScopeInputError: a missing folder, a wrong file) is refused again without a second try."""

    def __init__(self, max_resident: int = 1, device: str = "auto"):
        if not isinstance(max_resident, int) or max_resident < 1:
            raise FillScopeInputError("max_resident", f"is {max_resident!r}.", "keep at least 1 stack resident.")
        if device == "cuda":
            from ..weights import resolve_device

            resolve_device(device, "")  # refuses when no CUDA device is there
        self.max_resident, self.device = max_resident, device
        self.loads: list[tuple] = []
        self._stacks: OrderedDict = OrderedDict()
        self._refused: dict[tuple, FillScopeInputError] = {}

    def key(self, job: Job) -> tuple:
        return (*stack_key(job), self.device)

    def __len__(self) -> int:
        return len(self._stacks)

    def __contains__(self, job: Job) -> bool:
        return self.key(job) in self._stacks

    def stack(self, job: Job) -> tuple[dict, float]:
        """(the job's stack, the seconds its load took: 0 when it was resident)."""
        key = self.key(job)
        if key in self._stacks:
            self._stacks.move_to_end(key)
            return self._stacks[key], 0.0
        if key in self._refused:
            raise self._refused[key]
        while len(self._stacks) >= self.max_resident:
            self._stacks.popitem(last=False)
            _release_memory()
        start = time.perf_counter()
        try:
            stack = load_stack(job, self.device)
        except FillScopeInputError as e:
            self._refused[key] = e
            raise
        self.loads.append(key)
        self._stacks[key] = stack
        return stack, time.perf_counter() - start

    def clear(self) -> None:
        self._stacks.clear()
        _release_memory()


# --- outputs ----------------------------------------------------------------------------------------------------------

def write_atomic(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all: written to a temporary file beside it, then moved into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def png_bytes(image, text: dict | None = None) -> bytes:
    """IMAGE [H,W,3] 0..1 as an 8-bit PNG, converted as ComfyUI's image saver does (255 * x, clipped, truncated)."""
    import numpy as np
    from PIL import Image, PngImagePlugin

    pixels = np.clip(255.0 * image.cpu().numpy(), 0, 255).astype(np.uint8)
    info = PngImagePlugin.PngInfo()
    for k, v in (text or {}).items():
        info.add_text(k, v)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", pnginfo=info, compress_level=PNG_COMPRESS_LEVEL)
    return buffer.getvalue()


def describe_error(e: BaseException) -> str:
    """The text batch.jsonl keeps: a FillScopeInputError as it reads (input, problem, fix); anything else with its
    type and where it was raised."""
    if isinstance(e, FillScopeInputError):
        return str(e)
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(e).__name__}: {str(e)[:2000]}{where}"


# --- one job ----------------------------------------------------------------------------------------------------------

def run_job(job: Job, cache: ModelCache, out_dir, *, key: str | None = None) -> JobResult:
    """One job, whole, its files written to `out_dir`; its failure (a bad input, a missing file, anything raised) is
    returned, not raised."""
    return compute_job(job, cache, key=key).write(out_dir)


def compute_job(job: Job, cache: ModelCache, *, key: str | None = None, in_group: bool = False) -> JobOutput:
    """One job, whole, its files as bytes (nothing written); a failure is returned as the result's error.
    A job with `parallel` > 1 runs on that many local ranks (spawned processes, gloo), each loading its own stack;
    `in_group`: this call is already one of those ranks (a Ray worker of a group, or a spawned rank)."""
    start = time.perf_counter()
    key = key or job_key(job, job_fingerprint(job))
    if job.error:  # a problem of its manifest line (read_manifest(strict=False))
        return JobOutput(JobResult(job.id, key, "error", 0.0, error=job.error), {})
    try:
        if job.parallel > 1 and not in_group:
            output = _compute_on_local_ranks(job, cache.device, key)
            output.result.seconds = time.perf_counter() - start  # the ranks' start included
            return output
        return _compute(job, cache, key, start, parallel=job.parallel if in_group else 1)
    except Exception as e:  # noqa: BLE001  (a job fails alone; the batch goes on)
        return JobOutput(JobResult(job.id, key, "error", time.perf_counter() - start, error=describe_error(e)), {})


def compute_on_rank(job: Job, key: str, device: str) -> JobOutput:
    """A rank function (launch.run_on_ranks): the job as one rank of its group, on a stack loaded here."""
    return compute_job(job, ModelCache(1, device), key=key, in_group=True)


def _compute_on_local_ranks(job: Job, device: str, key: str) -> JobOutput:
    from ..parallel.launch import run_on_ranks
    from ..weights import resolve_device

    if resolve_device(device, "") == "cuda":
        raise FillScopeInputError(
            "parallel", f"is {job.parallel}: a batch in this process runs a parallel job on CPU ranks only (gloo).",
            "run the batch on Ray (--ray local): one worker a GPU, and a parallel job on that many of them (nccl).")
    return run_on_ranks(compute_on_rank, job.parallel, job, key, "cpu")


def family_options(job: Job) -> dict:
    """The job's keywords for its family's `run`: its sampler options (reference and soft_mask read from their
    files) and, for a family that takes one, the negative prompt."""
    run_kw = {k: v for k, v in job.options.items() if k in sampler_options(job.family)}
    if "soft_mask" in run_kw:
        run_kw["soft_mask"] = load_mask(run_kw["soft_mask"], job.image, "soft_mask")
    if "reference" in run_kw:
        run_kw["reference"] = load_image(run_kw["reference"], "reference")[0]
    if job.pipeline.TAKES_NEGATIVE_PROMPT:
        run_kw["negative_prompt"] = job.negative or ""
    return run_kw


def tile_mask_options(job: Job) -> dict:
    """A tiled job's mask options by run_tiled's names (invert, threshold, grow, feather, masked_fill); size_mode
    is always pad there (the manifest refuses any other)."""
    return {engine: job.options[name] for name, (engine, _) in mask_options().items()
            if name in job.options and engine != "size_mode"}


def job_record(job: Job, title_suffix: str = "") -> ShapeRecorder:
    return ShapeRecorder("batch", f"{job.family} job {job.id}{title_suffix}", table=TABLES[job.family])


def tiled_output(job: Job, key: str, rec: ShapeRecorder, result, start: float) -> JobOutput:
    """A tiled job's files from its TiledResult: the PNG, and the shape record with the tile settings and records
    under "tiles"; the records also in the job's result (its batch.jsonl line)."""
    rec.tensor("image", result.image)
    settings = dict(job.tiles)
    rec.fact("tiles", f"{len(result.tiles)} tile(s) of {settings['tile']} px, overlap {settings['overlap']:g}, "
                      f"mode {settings['mode']}" + (", Poisson blending" if settings["poisson"] else ""))
    for note in result.notes:
        rec.note(note)
    for warning in result.warnings:
        rec.warn(warning)
    if not result.tiles:
        rec.warn("mask is empty: the source image is returned unchanged")
    record = rec.finish()
    png = png_bytes(result.image[0], {"fillscope_job": json.dumps(job.line), "fillscope_key": key})
    seconds = time.perf_counter() - start
    document = shapes_document(record, [])
    records = [{**r, "box": list(r["box"])} for r in result.records]
    document["tiles"] = {**settings, "records": records}
    document["job"] = {"id": job.id, "family": job.family, "key": key, "seconds": round(seconds, 3),
                       "manifest_line": job.line_number}
    shapes = json.dumps(document, indent=1, default=str).encode("utf-8")
    return JobOutput(JobResult(job.id, key, "ok", seconds, tiles=records),
                     {f"{job.id}.png": png, f"{job.id}.shapes.json": shapes})


def _compute_tiled(job: Job, cache: ModelCache, key: str, start: float) -> JobOutput:
    """A job with `tiles`: run_tiled on the whole image (its mask prepared there, once), in this process."""
    from ..tiled import run_tiled

    rec = job_record(job)
    image, _ = load_image(job.image)
    mask = load_mask(job.mask, job.image)
    rec.tensor("image", image, "input")
    rec.tensor("mask", mask, "input")
    run_kw = family_options(job)
    stack, load_s = cache.stack(job)
    rec.fact("stack", f"loaded in {load_s:.2f} s" if load_s else "resident")
    tiles = job.tiles
    extra = {"poisson": True} if tiles["poisson"] else {}  # run_tiled's default otherwise (older ones have none)
    result = run_tiled(job.pipeline.FAMILY, stack, job.prompt, image, mask, tile=tiles["tile"],
                       overlap=tiles["overlap"], mode=tiles["mode"], seed=job.seed, steps=job.steps,
                       observe=rec.observe, mask_options=tile_mask_options(job), **extra, **run_kw)
    return tiled_output(job, key, rec, result, start)


def _compute(job: Job, cache: ModelCache, key: str, start: float, parallel: int = 1) -> JobOutput:
    if job.tiles is not None:
        return _compute_tiled(job, cache, key, start)
    rec = job_record(job)
    image, _ = load_image(job.image)
    mask = load_mask(job.mask, job.image)
    rec.tensor("image", image, "input")
    rec.tensor("mask", mask, "input")
    mask_kw = {engine: job.options[name] for name, (engine, _) in mask_options().items() if name in job.options}
    prepared = prepare_image_and_mask(image, mask, **mask_kw)
    run_kw = family_options(job)
    rec.geometry(prepared.geometry)
    for note in prepared.notes:
        rec.note(note)
    for warning in prepared.warnings:
        rec.warn(warning)

    stack, load_s = cache.stack(job)
    rec.fact("stack", f"loaded in {load_s:.2f} s" if load_s else "resident")
    if parallel > 1:
        run_kw["parallel"] = parallel
    done = job.pipeline.run(stack, job.prompt, prepared, steps=job.steps, seed=job.seed, observe=rec.observe, **run_kw)
    out = paste_back(done.image.to(prepared.source.device), prepared.source, prepared.paste_mask)  # [1,H,W,3]
    rec.tensor("image", out)
    for name, value in done.latent.info.items():
        rec.fact(name, value)
    if done.latent.unchanged:
        rec.warn("mask is empty: the source image is returned unchanged")
    record = rec.finish()

    png = png_bytes(out[0], {"fillscope_job": json.dumps(job.line), "fillscope_key": key})
    seconds = time.perf_counter() - start
    document = shapes_document(record, [])
    document["job"] = {"id": job.id, "family": job.family, "key": key, "seconds": round(seconds, 3),
                       "manifest_line": job.line_number}
    shapes = json.dumps(document, indent=1, default=str).encode("utf-8")
    return JobOutput(JobResult(job.id, key, "ok", seconds), {f"{job.id}.png": png, f"{job.id}.shapes.json": shapes})


# --- the batch --------------------------------------------------------------------------------------------------------

def finished_keys(log: Path) -> dict[str, str]:
    """id -> the key of its last ok line in batch.jsonl (lines that do not parse, e.g. cut by a kill, ignored)."""
    done: dict[str, str] = {}
    if not log.is_file():
        return done
    for raw in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and line.get("status") == "ok" and isinstance(line.get("id"), str):
            done[line["id"]] = line.get("key")
    return done


def append_line(log: Path, line: dict) -> None:
    """One line appended to batch.jsonl in one write (after a newline if a killed run left the last line cut)."""
    data = (json.dumps(line) + "\n").encode("utf-8")
    if log.is_file() and log.stat().st_size:
        with open(log, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = b"\n" + data
    with open(log, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class _Progress:
    """A tqdm bar on stderr when tqdm is installed, else a plain line a job; nothing when disabled."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.done, self.bar = total, enabled, 0, None
        if enabled and total:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="job", desc="batch", file=sys.stderr)
            except ImportError:
                pass

    def update(self, r: JobResult) -> None:
        self.done += 1
        if not self.enabled:
            return
        text = f"{r.id}: {r.status} ({r.seconds:.1f} s)" + (f": {r.error}" if r.error else "")
        if self.bar is None:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)
            return
        if r.error:
            self.bar.write(text, file=sys.stderr)
        self.bar.set_postfix_str(f"{r.id} {r.status}")
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def pending_jobs(jobs: list[Job], out_dir: Path) -> tuple[list[tuple[Job, str]], list[str]]:
    """(the jobs to run, each with its key; the ids skipped: finished before with the same key, image there)."""
    finished, memo = finished_keys(out_dir / LOG), {}
    todo, skipped = [], []
    for job in jobs:
        key = job_key(job, job_fingerprint(job, memo))
        if finished.get(job.id) == key and (out_dir / f"{job.id}.png").is_file():
            skipped.append(job.id)
        else:
            todo.append((job, key))
    return todo, skipped


def summarise(jobs: list[Job], results: list[JobResult], skipped: list[str], out_dir: Path, start: float) -> dict:
    ok = sum(r.status == "ok" for r in results)
    return {"total": len(jobs), "ran": len(results), "ok": ok, "error": len(results) - ok, "skipped": len(skipped),
            "seconds": round(time.perf_counter() - start, 3), "results": [r.line() for r in results],
            "skipped_ids": skipped, "out": str(out_dir), "log": str(out_dir / LOG)}


def run_batch(jobs: list[Job], out_dir, *, progress: bool = True, cache: ModelCache | None = None,
              device: str = "auto", max_resident: int = 1, on_result=None) -> dict:
    """Every job not finished before, in this process, one after the other (those sharing a stack together); one
    line a finished job appended to DIR/batch.jsonl; `on_result(result, done, total)` after each (the ComfyUI node's
    progress; what it raises stops the batch, finished jobs kept). Returns the summary: counts (total, ran, ok,
    error, skipped), seconds, the finished jobs' lines and the skipped ids."""
    start = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / LOG
    cache = cache if cache is not None else ModelCache(max_resident, device)
    todo, skipped = pending_jobs(jobs, out_dir)
    order: dict = {}
    for job, _ in todo:
        order.setdefault(cache.key(job), len(order))
    todo.sort(key=lambda item: order[cache.key(item[0])])  # stable: manifest order within a stack
    bar = _Progress(len(todo), progress)
    results = []
    try:
        for job, key in todo:
            result = run_job(job, cache, out_dir, key=key)
            append_line(log, result.line())
            results.append(result)
            bar.update(result)
            if on_result is not None:
                on_result(result, len(results), len(todo))
    finally:
        bar.close()
    return summarise(jobs, results, skipped, out_dir, start)


def format_summary(summary: dict) -> str:
    head = (f"{summary['total']} job(s): {summary['ok']} ok, {summary['error']} failed, {summary['skipped']} skipped "
            f"(finished before) in {summary['seconds']:.1f} s; images and shapes in {summary['out']}, one line a "
            f"finished job in {summary['log']}")
    lines = [head]
    lines += [f"  FAILED {r['id']}: {r['error']}" for r in summary["results"] if r["status"] != "ok"]
    return "\n".join(lines)
