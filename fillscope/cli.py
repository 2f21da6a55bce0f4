"""Command line: `python -m fillscope.cli demo-summary --port N --out out/` reads a ComfyUI server's /history
after the demo workflow ran and writes the FLUX shape table (text + JSON) measured in that run;
`python -m fillscope.cli trace MODEL --weights meta` traces one denoiser step (weights without tokenizers, meta and
placeholder, take ComfyUI's tokenizer folders, found by comfyui_tokenizers, or the folders of --clip-tokenizer DIR
--t5-tokenizer DIR for FLUX Fill and SD3, `--qwen-tokenizer DIR` for klein-4b / klein-9b); every argument is
checked as the node input it mirrors (bounds.py); `python -m fillscope batch MANIFEST.jsonl --out DIR` runs a
JSON-lines manifest of inpainting jobs in this process, or on Ray with --ray local|ADDRESS (fillscope/batch: DIR/<id>.png, DIR/<id>.shapes.json,
DIR/batch.jsonl; exit 0 all ok, 1 some failed, 2 a manifest error)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import urllib.request
from pathlib import Path

from .batch.manifest import TOKENIZERS, WEIGHT_NAMES, ManifestError, problem, read_manifest
from .batch.reach import CONNECT_TIMEOUT_S
from .batch.runner import ModelCache, format_summary, run_batch
from .bounds import BATCH, TRACE, Range, number_problem, path_problem, text_problem
from .comfyui_tokenizers import find_tokenizer_folders
from .errors import FillScopeInputError
from .pipelines import PIPELINES
from .trace.report import write_report
from .trace.run import trace_pipeline
from .trace.summary import SD3_CONTROLNET_BOUNDARIES, all_records, boundaries_for, boundary_rows, format_rows


# --- arguments: checked as the node inputs they mirror are (bounds.py), refused with exit 2 and one line -----------

class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (no usage block): `PROG: error: argument --size: ...`."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the arguments)\n")


def whole_number(bounds: Range, what: str):
    """An argparse type: a whole number within `bounds` (`what` names the node input it mirrors); written as an
    integral float (4.0, 1e3) too, as bounds.number_problem takes one."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                value = None
            if value is None or not value.is_integer():
                raise argparse.ArgumentTypeError(
                    f"{text!r} is not a whole number; give one from {bounds} ({what})") from None
        why = number_problem(value, bounds)
        if why:
            raise argparse.ArgumentTypeError(f"{text} {why} ({what})")
        return int(value)

    return parse


SIZE = re.compile(r"\s*(\d{1,18})\s*[xX]\s*(\d{1,18})\s*")


def image_size(text: str) -> tuple[int, int]:
    """An argparse type: `WIDTHxHEIGHT`, each within the trace nodes' width and height (bounds.TRACE)."""
    match = SIZE.fullmatch(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT: give two whole numbers, e.g. 1024x1024")
    width, height = int(match[1]), int(match[2])
    for name, value in (("width", width), ("height", height)):
        why = number_problem(value, TRACE[name])
        if why:
            raise argparse.ArgumentTypeError(f"{text}: the {name}, {value}, {why} (the trace nodes' {name})")
    return width, height


def text_arg(text: str) -> str:
    """An argparse type: text a prompt may hold (no NUL, no lone surrogate: an undecodable byte of the command
    line arrives as one)."""
    why = text_problem(text)
    if why:
        raise argparse.ArgumentTypeError(f"{ascii(text)[:60]} {why}")
    return text


def path_arg(text: str) -> Path:
    """An argparse type: a path (not empty, no NUL)."""
    why = path_problem(text)
    if why:
        raise argparse.ArgumentTypeError(f"the path {ascii(text)[:60]} {why}")
    return Path(text)


def source_arg(text: str) -> str:
    """An argparse type: a weight source (a path, or meta / placeholder), kept as text."""
    return str(path_arg(text)) if text not in WEIGHT_NAMES else text


def out_folder(path: Path) -> None:
    """--out must be a folder (it is made when missing): refused when it, or a folder above it, is a file."""
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            what = "names a file" if parent == path else f"lies under '{parent}', a file"
            raise FillScopeInputError("--out", f"'{path}' {what}; it must be a folder (made when missing).",
                                      "give a folder path for the outputs.")
        if parent.exists():
            return


def refused(e: Exception) -> int:
    """A bad input or an unreadable file: its one message on stderr, exit code 2."""
    print(os_message(e) if isinstance(e, OSError) else e, file=sys.stderr)
    return 2


def os_message(e: OSError) -> str:
    """An OSError as one line: what failed and on which path, without the errno number."""
    where = " ".join(f"'{f}'" for f in (e.filename, e.filename2) if f)
    return f"[FillScope] {e.strerror or e}" + (f": {where}" if where else "")


def fetch_json(url: str):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def latest_fillscope_run(history: dict) -> tuple[str, dict]:
    """The newest finished prompt whose outputs hold FillScope shape records."""
    runs = [(pid, e) for pid, e in history.items()
            if any("fillscope_shapes" in o or "fillscope_boundaries" in o for o in e.get("outputs", {}).values())]
    if not runs:
        raise SystemExit("no FillScope run found in /history: did the workflow run?")
    runs.sort(key=lambda item: max((m[1].get("timestamp", 0) for m in item[1].get("status", {}).get("messages", [])), default=0))
    return runs[-1]


def demo_summary(port: int, out: Path, host: str = "127.0.0.1") -> int:
    base = f"http://{host}:{port}"
    pid, entry = latest_fillscope_run(fetch_json(base + "/history"))
    if entry.get("status", {}).get("status_str") != "success":
        raise SystemExit(f"prompt {pid} did not succeed: {json.dumps(entry.get('status'))[:2000]}")
    docs = [o["fillscope_shapes"][0] for o in entry["outputs"].values() if "fillscope_shapes" in o]
    sd3 = boundaries_for(docs) is SD3_CONTROLNET_BOUNDARIES
    stem, title = ("sd3_controlnet_shapes", "SD3 ControlNet inpainting") if sd3 else ("flux_fill_shapes", "FLUX.1 Fill")
    rows = boundary_rows(docs)
    records = all_records(docs)
    out.mkdir(parents=True, exist_ok=True)
    table = format_rows(rows)
    header = (f"{title} boundary shapes, measured by FillScope in ComfyUI prompt {pid} "
              f"({len(records)} node records; provenance per row)")
    (out / f"{stem}.txt").write_text(header + "\n\n" + table + "\n")
    (out / f"{stem}.json").write_text(json.dumps(
        {"prompt_id": pid, "server": base, "boundaries": rows, "records": records}, indent=1))
    print(header)
    print()
    print(table)
    print(f"\nwrote {out / (stem + '.txt')} and {out / (stem + '.json')}")
    missing = [r["boundary"] for r in rows if r["shape"] is None]
    if missing:
        print(f"missing boundaries: {missing}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m fillscope")  # the package runs cli.main (__main__.py)
    sub = ap.add_subparsers(dest="command", required=True)
    ds = sub.add_parser("demo-summary", help="write the shape table of the newest FillScope run on a server")
    ds.add_argument("--port", type=whole_number(Range(1, 65535), "a TCP port"), default=8188)
    ds.add_argument("--host", type=text_arg, default="127.0.0.1")
    ds.add_argument("--out", type=path_arg, default=Path("out"))
    tr = sub.add_parser("trace", help="trace one denoiser step of a stack and write the five-page report")
    tr.add_argument("model", choices=list(PIPELINES))
    tr.add_argument("--weights", type=source_arg, default="meta", help="meta, placeholder, or a diffusers repository folder")
    tr.add_argument("--controlnet", type=source_arg, default=None, help="SD3: the ControlNet folder (default: same as --weights)")
    tr.add_argument("--size", type=image_size, default=(1024, 1024), metavar="WIDTHxHEIGHT",
                    help=f"the image size, each side {TRACE['width']} (as the trace nodes; default 1024x1024)")
    tr.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    tr.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    tr.add_argument("--prompt", type=text_arg, default="a red brick fireplace")
    tr.add_argument("--no-line-trace", action="store_true", help="skip the line-level tracer (faster)")
    tr.add_argument("--clip-tokenizer", type=path_arg, default=None, metavar="DIR",
                    help="CLIP BPE tokenizer folder (vocab.json, merges.txt), for weights that bring none (meta, "
                         "placeholder); default: ComfyUI's own (the ComfyUI the pack is in, COMFYUI_PATH, .comfyui)")
    tr.add_argument("--t5-tokenizer", type=path_arg, default=None, metavar="DIR",
                    help="T5 tokenizer folder (tokenizer.json), for weights that bring none (meta, placeholder); "
                         "default: ComfyUI's own")
    tr.add_argument("--qwen-tokenizer", type=path_arg, default=None, metavar="DIR",
                    help="klein: a folder with Qwen's vocab.json and merges.txt, for weights that bring no tokenizer; "
                         "default: ComfyUI's own")
    tr.add_argument("--out", type=path_arg, default=Path("out"))
    bt = sub.add_parser("batch", help="run a JSON-lines manifest of inpainting jobs (in this process, or on Ray)")
    bt.add_argument("manifest", type=path_arg, help="one job a line (docs/batches.md)")
    bt.add_argument("--out", type=path_arg, required=True, metavar="DIR",
                    help="DIR/<id>.png, DIR/<id>.shapes.json and DIR/batch.jsonl; a rerun skips finished jobs")
    bt.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    bt.add_argument("--max-resident", type=whole_number(BATCH["max_resident"], "the batch node's max_resident"),
                    default=1, metavar="N", help=f"model stacks kept loaded between jobs, {BATCH['max_resident']} "
                                                 "(the least recently used is dropped first)")
    bt.add_argument("--keep-going", action="store_true",
                    help="run a manifest whose lines have problems of their own (unknown option, family, a missing "
                         "key): those jobs fail alone instead of stopping the batch")
    bt.add_argument("--no-progress", action="store_true", help="no progress bar")
    bt.add_argument("--ray", default=None, metavar="local|ADDRESS",
                    help="run on Ray workers: 'local' starts Ray on this machine; an address (HOST:6379, from "
                         "`ray start --head`) joins that cluster. Needs `pip install fillscope[cluster]`")
    bt.add_argument("--workers", type=whole_number(BATCH["workers"], "the batch node's workers"), default=1,
                    metavar="N", help=f"with --ray: workers on each node without GPUs, {BATCH['workers']} (nodes "
                                      "with GPUs get one per GPU)")
    bt.add_argument("--connect-timeout", type=whole_number(BATCH["connect_timeout"], "the batch node's "
                                                           "connect_timeout"),
                    default=CONNECT_TIMEOUT_S, metavar="SECONDS",
                    help=f"with --ray ADDRESS: seconds to wait for the cluster to answer, {BATCH['connect_timeout']} "
                         f"(default {CONNECT_TIMEOUT_S}); then exit 2 saying what to check")
    cp = sub.add_parser("compare", help="run one job two ways and compare them boundary by boundary")
    cp.add_argument("spec_a", type=text_arg, metavar="SPEC_A",
                    help="run A: a JSON file or an inline JSON object (a batch job line plus implementation, "
                         "storage, attention, blocks; docs/comparisons.md)")
    cp.add_argument("spec_b", type=text_arg, metavar="SPEC_B", help="run B: the fields it changes (the rest is A's)")
    cp.add_argument("--out", type=path_arg, default=Path("out"), metavar="DIR",
                    help="where compare.json / .txt and the images go (default out)")
    cp.add_argument("--tolerance", type=tolerance_arg, default=1e-4,
                    help="relative error above which a boundary counts as different (default 1e-4)")
    cp.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    cp.add_argument("--rows", type=whole_number(Range(1, 100000), "rows"), default=40,
                    help="boundary rows printed (all are in the files; default 40)")
    args = ap.parse_args(argv)
    if args.command == "compare":
        return compare(args)
    if args.command == "demo-summary":
        return demo_summary(args.port, args.out, args.host)
    if args.command == "trace":
        try:
            return trace(args)
        except FillScopeInputError as e:
            print(e, file=sys.stderr)
            if "tokenizer" in e.problem:
                wanted = ("--qwen-tokenizer DIR" if args.model.startswith("klein")
                          else "--clip-tokenizer DIR and --t5-tokenizer DIR")
                looked = getattr(args, "tokenizers_looked", None)
                if looked:
                    print(f"the weights bring no tokenizers, and no ComfyUI tokenizer folders were found (looked in: "
                          f"{'; '.join(looked)}): pass {wanted}, or set COMFYUI_PATH to a ComfyUI folder",
                          file=sys.stderr)
                else:
                    print(f"the weights bring no tokenizers: pass {wanted}", file=sys.stderr)
            return 2
        except OSError as e:
            print(os_message(e), file=sys.stderr)
            return 2
    if args.command == "batch":
        return batch(args)
    return 2


def batch(args) -> int:
    """0: every job ok (or finished before); 1: some failed (batch.jsonl has their errors); 2: the manifest or the
    options are wrong and nothing ran."""
    try:
        out_folder(args.out)
        jobs = read_manifest(args.manifest, strict=not args.keep_going)
        default_tokenizers(jobs, args.manifest, strict=not args.keep_going)
        # on Ray the workers hold the models (a driver without a GPU may run a --device cuda batch)
        cache = None if args.ray else ModelCache(args.max_resident, args.device)
        args.out.mkdir(parents=True, exist_ok=True)
    except (FillScopeInputError, OSError) as e:
        return refused(e)
    if args.ray:
        from .batch.cluster import run_batch_on_ray

        try:
            summary = run_batch_on_ray(jobs, args.out, address=args.ray, workers=args.workers, device=args.device,
                                       max_resident=args.max_resident, progress=not args.no_progress,
                                       connect_timeout=args.connect_timeout)
        except FillScopeInputError as e:
            print(e, file=sys.stderr)
            return 2
    else:
        try:
            summary = run_batch(jobs, args.out, progress=not args.no_progress, cache=cache)
        except OSError as e:  # the output folder became unwritable (full disk, removed): a job's own errors are logged
            print(os_message(e), file=sys.stderr)
            return 2
    print(format_summary(summary))
    return 0 if summary["error"] == 0 else 1


def brings_no_tokenizers(job) -> bool:
    """Whether a job's weights may bring no tokenizer: meta, placeholder or a single file as some component's source
    (a diffusers folder brings its own)."""
    return any(s in WEIGHT_NAMES or Path(s).is_file() for s in job.models.values())


def default_tokenizers(jobs, manifest, *, strict: bool) -> None:
    """Jobs whose weights bring no tokenizers and whose line names none get ComfyUI's own (comfyui_tokenizers), as
    the batch node gives them; when none is found, such a job's problem names the places looked at (strict: raised
    as a ManifestError; else the job fails alone)."""
    need = [j for j in jobs if j.error is None and any(k not in j.tokenizers for k in TOKENIZERS[j.family])
            and brings_no_tokenizers(j)]
    if not need:
        return
    found, looked = find_tokenizer_folders(sorted({k for j in need for k in TOKENIZERS[j.family]}))
    problems = []
    for job in need:
        missing = [k for k in TOKENIZERS[job.family] if k not in job.tokenizers and k not in found]
        for kind in TOKENIZERS[job.family]:
            if kind in found:
                job.tokenizers.setdefault(kind, str(found[kind]))
        if missing:
            wanted = ", ".join(f'"{k}": "DIR"' for k in TOKENIZERS[job.family])
            p = problem(job.line_number, job.id, "tokenizers",
                        f"names no {' or '.join(missing)} tokenizer folder, which these weights (meta, placeholder or "
                        f"a single file) need, and ComfyUI's was not found (looked in: {'; '.join(looked)}).",
                        f'add "tokenizers": {{{wanted}}} to the job, or set COMFYUI_PATH to a ComfyUI folder.')
            problems.append(p)
            job.error = str(p)
    if problems and strict:
        raise ManifestError(manifest, problems)


MAX_TOLERANCE = 1e6  # a relative error (the messages say 1e6); anything this large passes every boundary


def tolerance_arg(text: str) -> float:
    """An argparse type: a relative error above 0 and below MAX_TOLERANCE, each side refused in its own words."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a relative error such as 1e-4") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; give a relative error such as 1e-4")
    if value >= MAX_TOLERANCE:
        raise argparse.ArgumentTypeError(f"{text!r} is over the bound: a tolerance is below 1e6 "
                                         "(a relative error); give e.g. 1e-4")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not positive: a tolerance is above 0 (a relative error); "
                                         "give e.g. 1e-4")
    return value


def compare(args) -> int:
    """`compare SPEC_A SPEC_B`: both runs, the boundary table and the image figures; exit 0 when every shared
    boundary and the final images are within the tolerance, 1 when some differ, 2 for a spec that cannot run."""
    from .compare.diff import format_table
    from .compare.record import write_compare
    from .compare.runs import run_compare
    from .compare.spec import read_spec_text, specs_from

    try:
        out_folder(args.out)
        a_obj, base_a = read_spec_text(args.spec_a, "SPEC_A")
        b_obj, base_b = read_spec_text(args.spec_b, "SPEC_B")
        spec_a, spec_b = specs_from(a_obj, b_obj, base_a, base_b)
        default_tokenizers([spec_a.job, spec_b.job], "the compare specs", strict=True)
        comparison, a, b = run_compare(spec_a, spec_b, tolerance=args.tolerance, device=args.device)
        paths = write_compare(comparison, a, b, args.out)
    except (FillScopeInputError, OSError) as e:
        return refused(e)
    print(f"A: {spec_a.describe()} ({a.seconds:.2f} s); B: {spec_b.describe()} ({b.seconds:.2f} s)")
    print(comparison.headline())
    print(format_table(comparison, args.rows))
    if len(comparison.rows) > args.rows:
        print(f"... {len(comparison.rows) - args.rows} more rows in {paths['text']}")
    for n in comparison.notes:
        print(f"note: {n}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if comparison.differs else 0  # a shared boundary or the final images over the tolerance


def trace_tokenizers(args) -> tuple:
    """The tokenizer folders for the trace: the flags, else ComfyUI's own where one is found (args.tokenizers_looked:
    the places looked at, set when one was not found)."""
    kinds = ("qwen",) if args.model.startswith("klein") else ("clip", "t5")
    given = {"clip": args.clip_tokenizer, "t5": args.t5_tokenizer, "qwen": args.qwen_tokenizer}
    missing = [k for k in kinds if given[k] is None]
    found, looked = find_tokenizer_folders(missing) if missing else ({}, [])
    if any(k not in found for k in missing):
        args.tokenizers_looked = looked
    return tuple(given[k] or found.get(k) for k in kinds)


def trace(args) -> int:
    width, height = image_size(args.size) if isinstance(args.size, str) else args.size
    out_folder(args.out)
    pipeline = PIPELINES[args.model]
    tokenizers = trace_tokenizers(args)
    if args.model.startswith("klein"):
        extra = {"variant": args.model}
    else:
        extra = {"controlnet": args.controlnet} if args.model == "sd3-controlnet-inpaint" else {}
    stack = pipeline.load_stack(args.weights, tokenizer_folders=tokenizers, dtype=args.dtype, device=args.device,
                                **extra)
    report = trace_pipeline(args.model, stack, height=height, width=width, prompt=args.prompt, line_trace=not args.no_line_trace)
    html, js = write_report(report, args.out, f"{args.model}_trace")
    ev = report["evidence"]
    print(f"{report['title']} at {width}x{height}, weights: {report['run']['weights']}, device: {report['run']['device']}")
    print(f"module rows/hits: {ev['module']['rows']:,} / {ev['module']['hits']:,} (measured)")
    if ev["line"]:
        print(f"line rows/hits: {ev['line']['rows']:,} / {ev['line']['hits']:,} ({ev['line']['tracer']}, Python {ev['line']['python']})")
    print(f"parameters: {ev['params']['unique']:,} unique, {ev['params']['tie_counted']:,} tie-counted")
    print(f"FLOPs per denoiser step: {ev['flops']['per_step'] / 1e12:.1f} TFLOP (measured, FlopCounterMode)")
    if ev["peak_memory"]:
        print(f"peak memory: {ev['peak_memory']['bytes'] / 2**30:.2f} GiB ({ev['peak_memory']['provenance']})")
    print(f"wrote {html} and {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
