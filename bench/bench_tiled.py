"""Large images by tiles (issue 23): tiled against whole-image inpainting, measured on the tiny models and estimated
for the production models.

Measured (default): the three families' tiny fp32 models on the CPU (tests/tiny_*.py folders), a 2048x2048 picture
whose mask covers all but a 1/16 border on each side (~88% of the pixels), 2 steps, seed 0. Each run is its own
subprocess (this script with --child), so its `ru_maxrss` is that run's peak and nothing is shared between runs:
the whole image (masks.prepare_image_and_mask + the family's `run` + masks.paste_back, as the untiled sampler
and paste-back give it) against `fillscope.tiled.run_tiled` with tile 1024 and overlap 0.15 (3x3 = 9 tiles at
2048x2048) in mode independent and, for every family `fillscope.tiled.SHARED` holds when this runs, mode shared.
The table gives wall time, peak RSS, the RSS before the run (models loaded, inputs built) and the ratios
tiled / whole of the same run. `--size` / `--tile` change the image side and the tile (`--size 1024 --tile 512`: the
same 3x3 tiles, ~4x faster). A whole run the model refuses (the tiny SD3's position grid stops at 1536 px a side) is
shown as refused and the family's pair is measured again 512 px smaller. Seams are not measured here.

Estimated (--estimates): FLUX.1 Fill, SD3 + ControlNet inpaint, klein 4B and klein 9B on the meta device (the
production configs, bf16, batch 1) at 4096x3072 and 8192x6144, whole vs tiled (tile 1024, overlap 0.15). One
1-step run of each (the whole image: the family's `run`; independent: one tile's `run` at 1024x1024, the same for
every tile, plus the whole image's host buffers its blend holds; shared: `run_tiled(mode="shared")` over the
whole image) under a TorchDispatchMode that keeps fillscope/trace/cost.py's live-storage books (`_LiveBytes`, the
estimator of `estimate_peak_memory`) per stage and per device: meta tensors are what the accelerator holds, CPU
tensors the host's. A stage's working set = the peak of live created storages during it (what earlier stages
left alive included) + the non-parameter storages it read first (its inputs). The stages are found through the
pipelines' own `place(components)` hook. Weights per policy: fillscope.placement.replay over three prompts (first;
new text and image; new seed only), as bench_memory_policies.py; `sequential` = the largest single module's own
weights. Peak per policy = max over the replayed stages of resident weights + that stage's working set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _benchlib import CpuWatch, bench_threads, environment_lines, quiet_libraries, run_main, table  # noqa: E402

PROMPT = "a red brick fireplace in a living room"
TILE, OVERLAP = 1024, 0.15
GIB = 2**30
# the tiny families measured: (run_tiled's family name, the family's `run` options, tiled or not)
TINY = {
    "flux-fill": {"guidance": 30.0},
    "sd3-controlnet-inpaint": {"negative_prompt": "blurry", "cfg": 4.0},
    "klein": {},
}
ESTIMATED = ("flux-fill", "sd3-controlnet-inpaint", "klein-4b", "klein-9b")
ESTIMATE_SIZES = ((4096, 3072), (8192, 6144))  # width x height


def picture(height: int, width: int, seed: int = 3):
    """A smooth picture with some texture, [1,H,W,3] float32."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, height)[:, None, None]
    xs = torch.linspace(0, 1, width)[None, :, None]
    base = torch.cat([xs.expand(height, width, 1), ys.expand(height, width, 1),
                      (0.5 * (xs + ys)).expand(height, width, 1)], -1)
    return (0.8 * base + 0.2 * torch.rand(height, width, 3, generator=g)).clamp(0, 1).unsqueeze(0)


def most_of(height: int, width: int):
    """MASK [1,H,W]: 1 everywhere but a border of 1/16 of each side (~88% of the pixels)."""
    import torch

    mask = torch.zeros(1, height, width)
    mask[:, height // 16:height - height // 16, width // 16:width - width // 16] = 1
    return mask


def shared_families() -> set:
    """The families run_tiled takes mode shared for now (fillscope.tiled.SHARED, read when this runs)."""
    from fillscope.tiled import FAMILIES, SHARED

    return {name for name, pipeline in FAMILIES.items() if pipeline in SHARED}


# ---------------------------------------------------------------------------------------------------------------
# measured: tiny fp32 models, one subprocess a run


def build_tiny_folders(root: Path) -> dict:
    from tiny_flux import build_tiny_flux_fill_folder
    from tiny_klein import build_tiny_klein_folder
    from tiny_models import tokenizers_available
    from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

    folders = {"flux-fill": {"model": str(build_tiny_flux_fill_folder(root / "flux", seed=0))},
               "sd3-controlnet-inpaint": {"model": str(build_tiny_sd3_folder(root / "sd3", seed=0)),
                                          "controlnet": str(build_tiny_sd3_controlnet_folder(root / "cn", seed=0))}}
    if tokenizers_available():  # klein's Qwen3 tokenizer comes from ComfyUI's files
        folders["klein"] = {"model": str(build_tiny_klein_folder(root / "klein", seed=0, distilled=True))}
    return folders


def tiny_stack(family: str, folders: dict) -> dict:
    from fillscope.pipelines import flux_fill, klein, sd3_controlnet

    if family == "flux-fill":
        return flux_fill.load_stack(folders["model"], tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    if family == "sd3-controlnet-inpaint":
        return sd3_controlnet.load_stack(folders["model"], controlnet=folders["controlnet"],
                                         tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    return klein.load_stack(folders["model"], tokenizer_folders=(None,), dtype="fp32", device="cpu")


def vm_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def child(family: str, mode: str, size: int, steps: int, tile: int, folders: dict) -> dict:
    """One measured run in this (fresh) process: its wall time and this process's peak RSS."""
    import gc

    import torch

    from fillscope.errors import FillScopeInputError

    torch.set_num_threads(bench_threads())
    quiet_libraries(all_warnings=True)
    stack = tiny_stack(family, folders)
    image, mask = picture(size, size), most_of(size, size)
    shapes = []

    def observe(name, tensor):
        if name.endswith("transformer.input") and tensor is not None and not shapes:
            shapes.append(list(tensor.shape))

    gc.collect()
    before = vm_rss()
    started = time.perf_counter()
    try:
        return measure(family, mode, size, steps, tile, stack, image, mask, observe, shapes, before, started)
    except FillScopeInputError as exc:  # e.g. larger than the model's position grid: refused before sampling
        return {"family": family, "mode": mode, "size": size, "refused": str(exc)}


def measure(family, mode, size, steps, tile, stack, image, mask, observe, shapes, before, started) -> dict:
    import resource

    from fillscope import masks
    from fillscope.tiled import FAMILIES, run_tiled
    from fillscope.tiled.result import transformer_tokens

    if mode == "whole":
        prepared = masks.prepare_image_and_mask(image, mask)
        done = FAMILIES[family].run(stack, PROMPT, prepared, steps=steps, seed=0, observe=observe, **TINY[family])
        out = masks.paste_back(done.image, prepared.source, prepared.paste_mask)
        tiles, tokens = 1, transformer_tokens(shapes[0], stack) if shapes else 0
    else:
        done = run_tiled(family, stack, PROMPT, image, mask, tile=tile, overlap=OVERLAP, mode=mode, seed=0,
                         steps=steps, **TINY[family])
        out = done.image
        tiles, tokens = len(done.tiles), max((r["tokens"] for r in done.records), default=0)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"family": family, "mode": mode, "size": size, "seconds": seconds, "peak_rss": peak, "rss_before": before,
            "tiles": tiles, "tokens": tokens, "out_shape": list(out.shape)}


def run_child(family: str, mode: str, size: int, steps: int, tile: int, folders: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", family, mode, str(size), str(steps), str(tile),
           json.dumps(folders)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{family} {mode} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def result_rows(family: str, size: int, results: dict) -> list:
    """Table rows of one family at one size: each mode, and its ratios to the whole image's run."""
    whole = results["whole"]
    rows = []
    for mode, r in results.items():
        if "refused" in r:
            rows.append([family, f"{size}", mode, "refused (see note)"] + [""] * 8)
            continue
        ratio = mode != "whole" and "refused" not in whole
        rise = r["peak_rss"] - r["rss_before"]
        rows.append([family, f"{size}", mode, str(r["tiles"]), f"{r['tokens']:,}", f"{r['seconds']:.1f}",
                     f"{r['peak_rss'] / GIB:.2f}", f"{r['rss_before'] / GIB:.2f}", f"{rise / GIB:.2f}",
                     f"{r['seconds'] / whole['seconds']:.2f}" if ratio else "",
                     f"{r['peak_rss'] / whole['peak_rss']:.2f}" if ratio else "",
                     f"{rise / (whole['peak_rss'] - whole['rss_before']):.2f}" if ratio else ""])
    return rows


def measured(size: int, steps: int, tile: int) -> int:
    import torch

    watch = CpuWatch()
    shared = shared_families()
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="fs-bench-tiled-") as tmp:
        with contextlib.redirect_stderr(open(os.devnull, "w")):
            folders = build_tiny_folders(Path(tmp))
        if "klein" not in folders:
            notes.append("klein skipped: ComfyUI's Qwen tokenizer files were not found")
        for family in TINY:
            if family not in folders:
                continue
            modes = ["whole", "independent"] + (["shared"] if family in shared else [])
            sizes = [size]
            while sizes:
                at = sizes.pop()
                results = {}
                for mode in modes:
                    try:
                        r = results[mode] = run_child(family, mode, at, steps, tile, folders[family])
                    except RuntimeError as exc:
                        if mode != "shared":
                            raise
                        notes.append(f"{family} shared at {at}x{at} failed: {str(exc)[-300:]}")
                        r = results[mode] = {"refused": "failed"}
                    if "refused" in r:
                        print(f"  {family} {mode} {at}px: refused", flush=True)
                        continue
                    print(f"  {family} {mode} {at}px: {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / GIB:.2f} GiB",
                          flush=True)
                    assert r["out_shape"][1:3] == [at, at], r
                rows += result_rows(family, at, results)
                if "refused" in results["whole"] and at - 512 >= tile:
                    # the whole run is refused (the model's position grid): the same pair where it is accepted
                    notes.append(f"{family} whole at {at}x{at}: {results['whole']['refused']}")
                    sizes.append(at - 512)
            if family not in shared:
                notes.append(f"{family}: no mode shared yet (fillscope.tiled.SHARED), only independent measured")
    header = ["family", "size", "mode", "tiles", "tokens/call", "wall s", "peak RSS GiB", "RSS before GiB", "rise GiB",
              "time tiled/whole", "peak tiled/whole", "rise tiled/whole"]
    print()
    print("=" * 100)
    print(f"bench_tiled: tiled vs whole, measured on the tiny models ({size}x{size}, tiny fp32, CPU)")
    print("=" * 100)
    for line in environment_lines() + [watch.summary()]:
        print(line)
    print(f"provenance: measured, tiny fp32 models (tests/tiny_*.py), torch {torch.__version__}, CPU, "
          f"torch.set_num_threads({bench_threads()}); {size}x{size} (or smaller where noted), mask all but a 1/16 "
          f"border, "
          f"{steps} steps, seed 0; tiled: tile {tile}, overlap {OVERLAP}")
    print("how: each run in its own subprocess; peak RSS = its ru_maxrss (models loaded + the run); RSS before = VmRSS "
          "after loading and building the inputs; rise = peak - before; tokens/call = one transformer call's "
          "tokens per image (klein: noisy + reference)")
    print()
    print(table(rows, header))
    for n in notes:
        print(f"note: {n}")
    print("=" * 100)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# estimated: production configs on meta


class StagedBooks:
    """fillscope/trace/cost.py's live-storage books, one per device, with the stages marked by the pipelines'
    `place(components)` hook: per stage its peak live bytes and the non-parameter storages it read first."""

    def __init__(self, keys_of: dict):
        self.keys_of = keys_of  # id(component) -> its key in the stack
        self.books = {}
        self.stages = []

    def book(self, device_type: str):
        from fillscope.trace.cost import _LiveBytes

        return self.books.setdefault("meta" if device_type == "meta" else "cpu", _LiveBytes())

    def _inputs(self) -> dict:
        return {dev: sum(n for n, is_param in b.resident.values() if not is_param) for dev, b in self.books.items()}

    @contextlib.contextmanager
    def place(self, components):
        entry = {"keys": [self.keys_of[id(c)] for c in components], "inputs0": self._inputs(),
                 "peak": {dev: b.live for dev, b in self.books.items()}}
        self.stages.append(entry)
        try:
            yield
        finally:
            self.tick()
            inputs = self._inputs()
            entry["bytes"] = {dev: entry["peak"].get(dev, 0) + inputs.get(dev, 0) - entry["inputs0"].get(dev, 0)
                              for dev in ("meta", "cpu")}
            entry["live_after"] = {dev: b.live for dev, b in self.books.items()}

    def tick(self):
        if self.stages:
            peak = self.stages[-1]["peak"]
            for dev, b in self.books.items():
                peak[dev] = max(peak.get(dev, 0), b.live)

    def run(self, fn):
        from torch.utils._python_dispatch import TorchDispatchMode

        from fillscope.trace.cost import _tensors

        books = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                inputs = _tensors((args, kwargs))
                for t in inputs:
                    books.book(t.device.type).read(t)
                out = func(*args, **kwargs)
                seen = set()
                for t in _tensors(out):
                    if id(t) not in seen and not any(t is i for i in inputs):
                        seen.add(id(t))
                        books.book(t.device.type).wrote(t)
                books.tick()
                return out

        with _Mode():
            return fn()

    def peak_outside_stages(self) -> dict:
        return {dev: b.peak for dev, b in self.books.items()}


def stage_label(keys: list, seen_vae: bool) -> str:
    if "vae" in keys:
        return "VAE decode" if seen_vae else "VAE encode"
    if "transformer" in keys:
        return "denoiser step"
    return "text encoders"


def staged_estimate(stack: dict, fn_with_place) -> tuple[list, list]:
    """[(label, keys, accelerator bytes, host bytes)] per stage of fn_with_place(place), and the transformer input
    shapes it observed."""
    books = StagedBooks({id(c): k for k, c in stack.items()})
    books.run(lambda: fn_with_place(books.place))
    rows, seen_vae = [], False
    for s in books.stages:
        label = stage_label(s["keys"], seen_vae)
        seen_vae = seen_vae or "vae" in s["keys"]
        rows.append((label, s["keys"], s["bytes"]["meta"], s["bytes"]["cpu"]))
    return rows


def host_blend_bytes(height: int, width: int) -> tuple[int, int]:
    """Mode independent's whole-image host buffers (its code around the tiles' runs: the whole mask prepared once,
    the kept tiles' decoded images [1,t,t,3], their ramp weights, the blend and the paste-back), run here on real
    CPU tensors with zero tile images (what a meta decode gives) under the same books: (peak bytes, kept tiles)."""
    import torch

    from fillscope.compositing.tiles import blend_tiles, plan_tiles, ramp_weights
    from fillscope.masks import paste_back, prepare_image_and_mask

    image, mask = torch.zeros(1, height, width, 3), most_of(height, width)
    books = StagedBooks({})

    def blend():
        whole = prepare_image_and_mask(image, mask, size_mode="pad")
        repaint = whole.mask[:, 0, :height, :width]
        tiles = plan_tiles(height, width, tile=TILE, overlap=OVERLAP, mask=repaint)
        images = [torch.zeros(1, t.height, t.width, 3) for t in tiles]
        blended = blend_tiles(whole.source, tiles, images, ramp_weights(tiles, height, width))
        paste_back(blended, whole.source, whole.paste_mask)
        return len(tiles)

    kept = books.run(blend)
    b = books.books["cpu"]
    return b.peak + sum(n for n, _ in b.resident.values()), kept


def policy_peaks(stack: dict, rows: list) -> dict:
    """{policy: (peak accelerator bytes, resident weights during the denoiser step)} over three replayed prompts."""
    from bench_memory_policies import largest_module_bytes

    from fillscope.placement import POLICIES, replay

    uses, act = [], []
    for i, (label, keys, device_bytes, _) in enumerate(rows):
        uses.append((f"{i} {label}", [stack[k] for k in keys]))
        act.append(device_bytes)
    last_two = [i for i, (label, *_) in enumerate(rows) if label in ("denoiser step", "VAE decode")]
    order = list(range(len(rows))) * 2 + last_two  # prompt 3: a new seed re-runs the sampler and the decode
    out = {}
    for policy in POLICIES:
        if policy == "sequential":
            largest = max(largest_module_bytes(c.model) for c in stack.values())
            out[policy] = (largest + max(act), largest)
            continue
        replayed = replay([uses[i] for i in order], policy)
        peak = max(u["resident_bytes"] + act[i] for u, i in zip(replayed, order))
        denoiser = max(u["resident_bytes"] for u, i in zip(replayed, order) if rows[i][0] == "denoiser step")
        out[policy] = (peak, denoiser)
    return out


def estimate_family(family: str) -> list[str]:
    """The estimate tables of one family (printed lines)."""
    from _benchlib import load_stack
    from fillscope import masks
    from fillscope.errors import FillScopeInputError
    from fillscope.pipelines import PIPELINES
    from fillscope.tiled import run_tiled
    from fillscope.tiled.result import transformer_tokens

    started = time.perf_counter()
    stack = load_stack(family, "meta", dtype="bf16")
    pipeline = PIPELINES[family]
    weights = {k: sum(p.numel() * p.element_size() for p in c.model.parameters()) for k, c in stack.items()}

    def one_run(height, width, mode):
        shapes = []

        def observe(name, tensor):
            if name.endswith("transformer.input") and tensor is not None and not shapes:
                shapes.append(list(tensor.shape))

        image, mask = picture(height, width), most_of(height, width)
        if mode == "whole":
            prepared = masks.prepare_image_and_mask(image, mask)
            rows = staged_estimate(stack, lambda place: pipeline.run(stack, PROMPT, prepared, steps=1, seed=0,
                                                                     observe=observe, place=place))
        else:
            rows = staged_estimate(stack, lambda place: run_tiled(family, stack, PROMPT, image, mask, tile=TILE,
                                                                  overlap=OVERLAP, mode=mode, seed=0, steps=1,
                                                                  observe=observe, place=place))
        return rows, transformer_tokens(shapes[0], stack) if shapes else 0

    tile_rows, tile_tokens = one_run(TILE, TILE, "whole")  # one tile of mode independent: the family's run
    tile_host = max(r[3] for r in tile_rows)
    lines = [f"{family}: weights (bf16) " + ", ".join(f"{k} {v / GIB:.2f}" for k, v in weights.items()) + " GiB"]
    for width, height in ESTIMATE_SIZES:
        try:
            whole_rows, whole_tokens = one_run(height, width, "whole")
        except FillScopeInputError as exc:  # refused before any sampling (e.g. SD3's position-embedding grid)
            whole_rows, whole_tokens = None, 0
            lines.append(f"  {width}x{height} whole refused: {exc}")
        shared = None
        if family in shared_families():
            try:
                shared = one_run(height, width, "shared")
            except Exception as exc:  # noqa: BLE001 (shared modules are new: say what failed, keep the rest)
                lines.append(f"  shared not estimated at {width}x{height}: {type(exc).__name__}: {exc}")
        blend_bytes, kept = host_blend_bytes(height, width)
        lines.append(f"  {width}x{height}: whole {whole_tokens:,} tokens/call; tiled {kept} kept tiles of "
                     f"{TILE} px, overlap {OVERLAP}, {tile_tokens:,} tokens/call")
        header = ["stage", "whole GiB", "independent (1 tile) GiB"] + (["shared GiB"] if shared else [])
        table_rows = []
        for label, keys, _, _ in whole_rows or tile_rows:
            row = [label + f" ({'+'.join(keys)})"]
            for rows in (whole_rows, tile_rows) + ((shared[0],) if shared else ()):
                match = [r[2] for r in rows or () if r[0] == label]
                row.append(f"{max(match) / GIB:.2f}" if match else ("refused" if rows is None else "-"))
            if not any(r[0] == row[0] for r in table_rows):
                table_rows.append(row)
        host = ["host RAM peak (CPU tensors)",
                f"{max(r[3] for r in whole_rows) / GIB:.2f}" if whole_rows else "refused",
                f"{(tile_host + blend_bytes) / GIB:.2f}"] + ([f"{max(r[3] for r in shared[0]) / GIB:.2f}"]
                                                           if shared else [])
        lines += ["  " + x for x in table([*table_rows, host], header).splitlines()]
        whole_p = policy_peaks(stack, whole_rows) if whole_rows else None
        tile_p = policy_peaks(stack, tile_rows)
        shared_p = policy_peaks(stack, shared[0]) if shared else None
        header = ["policy", "weights at denoiser GiB", "peak whole GiB", "peak independent GiB", "indep/whole"]
        header += ["peak shared GiB", "shared/whole"] if shared else []
        prow = []
        for policy, (tile_peak, resident) in tile_p.items():
            whole_peak = whole_p[policy][0] if whole_p else None
            ratio = (lambda x: f"{x / whole_peak:.2f}") if whole_peak else (lambda x: "-")
            row = [policy, f"{resident / GIB:.2f}", f"{whole_peak / GIB:.2f}" if whole_peak else "refused",
                   f"{tile_peak / GIB:.2f}", ratio(tile_peak)]
            if shared_p:
                row += [f"{shared_p[policy][0] / GIB:.2f}", ratio(shared_p[policy][0])]
            prow.append(row)
        lines += ["  " + x for x in table(prow, header).splitlines()]
    if family not in shared_families():
        lines.append(f"  {family}: no mode shared yet (fillscope.tiled.SHARED)")
    lines.append(f"  ({time.perf_counter() - started:.0f} s)")
    return lines


def estimates(families: list[str]) -> int:
    import torch

    quiet_libraries(all_warnings=True)
    watch = CpuWatch()
    lines = []
    for family in families:
        lines += estimate_family(family)
        print("\n".join(lines[-1:]), flush=True)
    print()
    print("=" * 100)
    print("bench_tiled --estimates: accelerator working set, whole vs tiled (tile 1024, overlap 0.15), production "
          "configs on meta, bf16, batch 1, 1 step")
    print("=" * 100)
    for line in environment_lines() + [watch.summary()]:
        print(line)
    print(f"provenance: estimate (meta device, torch {torch.__version__}; fillscope/trace/cost.py's live-storage "
          "books per stage, per device; fillscope.placement.replay for the weights each policy holds)")
    print("stage GiB = peak of live accelerator tensors during the stage + its inputs, weights excluded; policy peak "
          "= max over 3 replayed prompts of resident weights + stage; sequential = largest module + largest stage; "
          "independent = one 1024x1024 tile's run (tiles run one after another; their decoded images are host "
          "tensors); host RAM = CPU tensors (independent: one tile's + the whole image's blend buffers)")
    print()
    print("\n".join(lines))
    print("=" * 100)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--estimates", action="store_true", help="the production models' estimates on meta")
    parser.add_argument("--families", nargs="*", default=list(ESTIMATED), help="families for --estimates")
    parser.add_argument("--size", type=int, default=int(os.environ.get("FILLSCOPE_BENCH_TILED_SIZE", 2048)))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tile", type=int, default=TILE, help="tile side of the measured runs (px)")
    parser.add_argument("--child", nargs=6, metavar=("FAMILY", "MODE", "SIZE", "STEPS", "TILE", "FOLDERS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        family, mode, size, steps, tile, folders = args.child
        result = child(family, mode, int(size), int(steps), int(tile), json.loads(folders))
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    if args.estimates:
        return estimates(args.families)
    return measured(args.size, args.steps, args.tile)


if __name__ == "__main__":
    run_main(main, "bench_tiled")
