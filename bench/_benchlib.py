"""Shared helpers for the bench/bench_*.py scripts (not a benchmark itself: `make bench` runs bench_*.py only).

Everything here is standard library, so a benchmark that only talks to a ComfyUI server does not pay for
importing torch. Versions are read from the installed packages' metadata (importlib.metadata), which names
exactly what the venv, and so the server started from it, imports.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _version(dist: str) -> str:
    mod = sys.modules.get(dist)  # already imported in this process: its own version string (e.g. torch's +cu tag)
    if mod is not None and isinstance(getattr(mod, "__version__", None), str):
        return mod.__version__
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def comfyui_version(root: Path | None = None) -> str:
    if root is None:
        from comfy_server import comfyui_path

        root = comfyui_path()
    try:
        text = (Path(root) / "comfyui_version.py").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return m.group(1) if m else "unknown"


class CpuWatch:
    """How busy the machine was while a benchmark ran: all CPUs (from /proc/stat) against this process and its
    reaped children (os.times), so contention from other processes is visible next to the numbers."""

    def __init__(self):
        self.t0, self.stat0, self.own0 = time.monotonic(), self._stat(), self._own()

    @staticmethod
    def _stat() -> tuple[int, int]:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return 0, 0
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields[:8]), idle  # user..steal; guest time is already inside user

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def summary(self) -> str:
        total1, idle1 = self._stat()
        dtotal, didle = total1 - self.stat0[0], idle1 - self.stat0[1]
        wall = time.monotonic() - self.t0
        if dtotal <= 0:
            return f"cpu use: unavailable (/proc/stat); wall {wall:.0f} s"
        tick = os.sysconf("SC_CLK_TCK")
        busy = (dtotal - didle) / dtotal
        own = min(busy, (self._own() - self.own0) * tick / dtotal)
        return (f"cpu use while it ran ({wall:.0f} s): machine {busy:.0%} busy across {os.cpu_count()} cores, "
                f"this benchmark {own:.0%}, other processes {max(0.0, busy - own):.0%}; "
                f"load average now {load_average()}")


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def git_state() -> str:
    """The commit measured, and whether the working tree differed from it outside bench/."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "git: unknown"
    dirty = [l[3:] for l in status if not l[3:].startswith("bench/")]
    if not dirty:
        return f"git: HEAD {head or 'unknown'} (clean outside bench/)"
    shown = ", ".join(dirty[:4]) + (f" and {len(dirty) - 4} more" if len(dirty) > 4 else "")
    return f"git: HEAD {head or 'unknown'} + uncommitted changes in {len(dirty)} file(s) outside bench/ ({shown})"


def environment_lines() -> list[str]:
    return [
        f"date: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"cpu: {cpu_model()} ({usable_cores()} usable cores, os.cpu_count {os.cpu_count()})",
        f"python {platform.python_version()}, torch {_version('torch')}, diffusers {_version('diffusers')}, "
        f"transformers {_version('transformers')}, ComfyUI {comfyui_version()}",
        git_state(),
    ]


def median(xs):
    return statistics.median(xs)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def table(rows: list[list[str]], header: list[str]) -> str:
    cols = list(zip(*([header] + rows)))
    widths = [max(len(str(c)) for c in col) for col in cols]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    out = [line(header), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def print_report(
    title: str, how: list[str], rows: list[list[str]], header: list[str], notes: list[str] = (), watch: CpuWatch | None = None
) -> None:
    bar = "=" * 100
    print()
    print(bar)
    print(title)
    print(bar)
    for h in environment_lines() + ([watch.summary()] if watch else []) + list(how):
        print(h)
    print()
    print(table(rows, header))
    for n in notes:
        print(f"note: {n}")
    print(bar)
    sys.stdout.flush()


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (peak RSS) of a process in bytes, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            num, unit = val.split()
            out[key] = int(num) * (1024 if unit == "kB" else 1)
    return out


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3f} GiB"


def load_stack(family: str, source: str, **kwargs) -> dict:
    """A whole stack of `family` (fillscope/pipelines) from one weight source, with the bundled ComfyUI's
    tokenizer files for weights that carry none."""
    from fillscope.pipelines import PIPELINES
    from tiny_models import comfy_tokenizer_dirs

    if family.startswith("klein"):
        _, t5_dir = comfy_tokenizer_dirs()
        return PIPELINES[family].load_stack(source, tokenizer_folders=(t5_dir.parent / "qwen25_tokenizer",),
                                            variant=family, **kwargs)
    return PIPELINES[family].load_stack(source, tokenizer_folders=comfy_tokenizer_dirs(), **kwargs)


# The a-vs-b benchmarks (bench_tiny_vs_diffusers, bench_klein_vs_diffusers): FillScope (a) against diffusers (b)
# in one process, 1 warm-up each, then alternating timed pairs.
PAIR_HEADER = ["measurement", "median", "runs", "target", "result"]


def bench_threads() -> int:
    """torch intra-op threads for a CPU benchmark. One by default: on a shared 2-core machine, 2 OpenMP threads made
    the same call swing between ~1 s and ~5 s whenever another process took a core. FILLSCOPE_BENCH_THREADS
    overrides it."""
    return int(os.environ.get("FILLSCOPE_BENCH_THREADS", "1"))


def quiet_libraries(all_warnings: bool = False) -> None:
    """No download/progress bars or accelerate hints in the benchmark output; `all_warnings`: no WARNING-level
    records from any logger either."""
    import diffusers.utils.logging as dlog
    import transformers.utils.logging as tlog

    for lib in (dlog, tlog):
        lib.set_verbosity_error()
        lib.disable_progress_bar()
    if all_warnings:
        import logging

        logging.disable(logging.WARNING)


def alternate(ours, theirs, repeats: int, compare, warm_up=None, on_pair=None) -> tuple[list, list, list]:
    """One warm-up call each (`warm_up`: the (a, b) calls for it when not `ours` / `theirs` themselves; first calls
    allocate, pick kernels, fill tokenizer caches), then `repeats` alternating timed pairs, a first:
    (a's seconds, b's seconds, compare(a's output, b's output) per pair); on_pair(i, a_s, b_s, diff) after each."""
    warm_a, warm_b = warm_up or (ours, theirs)
    warm_a()
    warm_b()
    ta, tb, diffs = [], [], []
    for i in range(repeats):
        t = time.perf_counter()
        a = ours()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = theirs()
        tb.append(time.perf_counter() - t)
        diffs.append(compare(a, b))
        if on_pair is not None:
            on_pair(i, ta[-1], tb[-1], diffs[-1])
    return ta, tb, diffs


def pair_rows(ta: list, tb: list, a: str, b: str, ratio_target: float, label: str = "") -> list[list[str]]:
    """Report rows (PAIR_HEADER): a's and b's medians and runs, and the ratio of the medians against its target."""
    ma, mb = median(ta), median(tb)
    return [
        [label + a, f"{ma:.3f} s", ", ".join(f"{x:.3f}" for x in ta), "", ""],
        [label + b, f"{mb:.3f} s", ", ".join(f"{x:.3f}" for x in tb), "", ""],
        [f"{label}ratio (a)/(b) of the medians", f"{ma / mb:.3f}", ", ".join(f"{x / y:.3f}" for x, y in zip(ta, tb)),
         f"< {ratio_target}", verdict(ma / mb < ratio_target)],
    ]


def diff_row(name: str, value: float, target: str, ok: bool) -> list[str]:
    """A report row (PAIR_HEADER) for how far a's outputs are from b's."""
    return [name, f"{value:.2e}", "", target, verdict(ok)]


def pairs_how(repeats: int, threads: int, seed: int) -> str:
    """The start of an a-vs-b report's 'how' line."""
    return (f"how: models loaded once (outside the timing), 1 warm-up each, then {repeats} alternating a/b pairs; "
            f"median of {repeats}; torch.set_num_threads({threads}); seed {seed}")


def run_main(main, tag: str) -> None:
    """A bench script's entry point: main()'s exit status; a failed measurement (not a missed target) prints its
    traceback and "[tag] measurement failed: ..." and exits 1."""
    import traceback

    try:
        sys.exit(main())
    except Exception as exc:
        traceback.print_exc()
        print(f"[{tag}] measurement failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
