"""Command line: `python -m fillscope.cli demo-summary --port N --out out/` reads a ComfyUI server's /history
after the demo workflow ran and writes the FLUX shape table (text + JSON) measured in that run;
`python -m fillscope.cli trace MODEL --weights meta --clip-tokenizer DIR --t5-tokenizer DIR` traces one denoiser
step (weights without tokenizers, meta and placeholder, need the tokenizer folders: CLIP and T5 for FLUX Fill and
SD3, `--qwen-tokenizer DIR` for klein-4b / klein-9b); `python -m fillscope batch MANIFEST.jsonl --out DIR` runs a
JSON-lines manifest of inpainting jobs in this process, or on Ray with --ray local|ADDRESS (fillscope/batch: DIR/<id>.png, DIR/<id>.shapes.json,
DIR/batch.jsonl; exit 0 all ok, 1 some failed, 2 a manifest error)."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from .batch.manifest import read_manifest
from .batch.runner import ModelCache, format_summary, run_batch
from .errors import FillScopeInputError
from .pipelines import PIPELINES
from .trace.report import write_report
from .trace.run import trace_pipeline
from .trace.summary import SD3_CONTROLNET_BOUNDARIES, all_records, boundaries_for, boundary_rows, format_rows


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
    ap = argparse.ArgumentParser(prog="python -m fillscope.cli")
    sub = ap.add_subparsers(dest="command", required=True)
    ds = sub.add_parser("demo-summary", help="write the shape table of the newest FillScope run on a server")
    ds.add_argument("--port", type=int, default=8188)
    ds.add_argument("--host", default="127.0.0.1")
    ds.add_argument("--out", type=Path, default=Path("out"))
    tr = sub.add_parser("trace", help="trace one denoiser step of a stack and write the five-page report")
    tr.add_argument("model", choices=list(PIPELINES))
    tr.add_argument("--weights", default="meta", help="meta, placeholder, or a diffusers repository folder")
    tr.add_argument("--controlnet", default=None, help="SD3: the ControlNet folder (default: same as --weights)")
    tr.add_argument("--size", default="1024x1024", help="WIDTHxHEIGHT")
    tr.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    tr.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    tr.add_argument("--prompt", default="a red brick fireplace")
    tr.add_argument("--no-line-trace", action="store_true", help="skip the line-level tracer (faster)")
    tr.add_argument("--clip-tokenizer", type=Path, default=None, metavar="DIR",
                    help="CLIP BPE tokenizer folder (vocab.json, merges.txt), for weights that bring none (meta, placeholder)")
    tr.add_argument("--t5-tokenizer", type=Path, default=None, metavar="DIR",
                    help="T5 tokenizer folder (tokenizer.json), for weights that bring none (meta, placeholder)")
    tr.add_argument("--qwen-tokenizer", type=Path, default=None, metavar="DIR",
                    help="klein: a folder with Qwen's vocab.json and merges.txt (ComfyUI ships one, "
                         "qwen25_tokenizer), for weights that bring no tokenizer")
    tr.add_argument("--out", type=Path, default=Path("out"))
    bt = sub.add_parser("batch", help="run a JSON-lines manifest of inpainting jobs (in this process, or on Ray)")
    bt.add_argument("manifest", type=Path, help="one job a line (README: Batches)")
    bt.add_argument("--out", type=Path, required=True, metavar="DIR",
                    help="DIR/<id>.png, DIR/<id>.shapes.json and DIR/batch.jsonl; a rerun skips finished jobs")
    bt.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    bt.add_argument("--max-resident", type=int, default=1, metavar="N",
                    help="model stacks kept loaded between jobs (the least recently used is dropped first)")
    bt.add_argument("--keep-going", action="store_true",
                    help="run a manifest whose lines have problems of their own (unknown option, family, a missing "
                         "key): those jobs fail alone instead of stopping the batch")
    bt.add_argument("--no-progress", action="store_true", help="no progress bar")
    bt.add_argument("--ray", default=None, metavar="local|ADDRESS",
                    help="run on Ray workers: 'local' starts Ray on this machine; an address (HOST:6379, from "
                         "`ray start --head`) joins that cluster. Needs `pip install fillscope[cluster]`")
    bt.add_argument("--workers", type=int, default=1, metavar="N",
                    help="with --ray: workers on each node without GPUs (nodes with GPUs get one per GPU)")
    args = ap.parse_args(argv)
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
                print(f"the weights bring no tokenizers: pass {wanted}", file=sys.stderr)
            return 2
    if args.command == "batch":
        return batch(args)
    return 2


def batch(args) -> int:
    """0: every job ok (or finished before); 1: some failed (batch.jsonl has their errors); 2: the manifest or the
    options are wrong and nothing ran."""
    try:
        jobs = read_manifest(args.manifest, strict=not args.keep_going)
        # on Ray the workers hold the models (a driver without a GPU may run a --device cuda batch)
        cache = None if args.ray else ModelCache(args.max_resident, args.device)
        args.out.mkdir(parents=True, exist_ok=True)
    except (FillScopeInputError, OSError) as e:
        print(e, file=sys.stderr)
        return 2
    if args.ray:
        from .batch.cluster import run_batch_on_ray

        try:
            summary = run_batch_on_ray(jobs, args.out, address=args.ray, workers=args.workers, device=args.device,
                                       max_resident=args.max_resident, progress=not args.no_progress)
        except FillScopeInputError as e:
            print(e, file=sys.stderr)
            return 2
    else:
        summary = run_batch(jobs, args.out, progress=not args.no_progress, cache=cache)
    print(format_summary(summary))
    return 0 if summary["error"] == 0 else 1


def trace(args) -> int:
    width, height = (int(v) for v in args.size.lower().split("x"))
    pipeline = PIPELINES[args.model]
    if args.model.startswith("klein"):
        extra, tokenizers = {"variant": args.model}, (args.qwen_tokenizer,)
    else:
        extra = {"controlnet": args.controlnet} if args.model == "sd3-controlnet-inpaint" else {}
        tokenizers = (args.clip_tokenizer, args.t5_tokenizer)
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
