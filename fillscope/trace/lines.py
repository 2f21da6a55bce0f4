"""Line-level shape tracing: every executed source line under some roots, with the shapes of its tensor locals.

`LineTracer(roots)` is a context manager. `roots` are directories (default: the installed `diffusers` and
`transformers` package directories). While active, every line executed in a file under a root is recorded:

* row key = (file relative to its root's parent, so it starts with the package name:
  `diffusers/models/transformers/transformer_flux.py`; line number; shape signature of the frame's tensor
  locals when the line is about to run, `name=[d0,d1]` for each local that is a `torch.Tensor`, in the
  frame's local-variable order; locals that are not tensors are left out, containers are not searched);
* hit = one line event (a line inside a loop counts once per iteration).

Tracer: `sys.monitoring` (PEP 669, LINE events enabled only on code objects whose file is under a root) on
Python >= 3.12, else `sys.settrace` + `threading.settrace` (the call-level function returns None for frames
outside the roots, so their lines are not traced). The two do not give identical hit counts (e.g. settrace
and sys.monitoring disagree on some line events of multi-line statements and comprehensions, and 3.12 inlines
comprehensions), so report `.tracer` and `.python` with the counts. The tracer restores the trace function
(or monitoring tool) that was there before; under sys.monitoring it calls `sys.monitoring.restart_events()`
on exit, which re-enables events any tool had disabled.

Cost: the trace function runs for every Python call while active (cheap rejection outside the roots), and
for every line under the roots (a snapshot of the frame's locals). Use it on meta or tiny runs.

Measured (meta full-topology FLUX.1 Fill at 1024x1024, the run tests/test_tracers.run_flux_step makes: CLIP-L,
T5, VAE encode, ONE transformer forward, VAE decode; diffusers 0.42.1, transformers 5.24):
  Python 3.11.7, sys.settrace      1,689 rows / 24,047 hits (run 3.0 s vs 1.3 s untraced, 2 CPU cores)
  Python 3.12.3, sys.monitoring    1,684 rows / 23,024 hits (1.48 s vs 1.34 s untraced, H200 host CPU)
  Python 3.12.3, sys.settrace      1,686 rows / 23,814 hits (4.85 s)
REFERENCE.md section 4 quotes 985 / 17,908 for "the same" key. The gap is the code that runs, not the key:
this run executes 1,186 distinct (file, line) pairs, so no locals signature can bring it down to 985 rows;
23 rows / 5,371 hits are diffusers' `get_parameter_dtype` walking `named_modules()` each time the engine reads
a diffusers model's `.dtype` (VAE encode, transformer, VAE decode), 201 rows / 592 hits are tokenizer code
(transformers' tokenization_utils*), which a run that starts from ready token ids never executes; without
those two the run gives 1,465 / 18,084. SD3 ControlNet, one CFG step (prompt and negative): 3.11 settrace
1,790 / 37,875; 3.12 sys.monitoring 1,788 / 37,190, settrace 1,789 / 37,522.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

__all__ = ["LineTracer", "default_roots"]


def default_roots() -> list[Path]:
    """The installed diffusers and transformers package directories (those importable)."""
    import importlib.util

    roots = []
    for name in ("diffusers", "transformers"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.extend(Path(p).resolve() for p in spec.submodule_search_locations)
    return roots


class LineTracer:
    """Per-line shape tracer; see the module docstring for the row/hit definition."""

    def __init__(self, roots=None, *, use_monitoring: bool | None = None):
        self.roots = [Path(r).resolve() for r in (roots if roots is not None else default_roots())]
        self._prefixes = [(str(r) + os.sep, r.parent) for r in self.roots]
        if use_monitoring is None:
            use_monitoring = hasattr(sys, "monitoring")
        if use_monitoring and not hasattr(sys, "monitoring"):
            raise RuntimeError("sys.monitoring needs Python >= 3.12")
        self.tracer = "sys.monitoring" if use_monitoring else "sys.settrace"
        self.python = sys.version.split()[0]
        self._files: dict[str, str | None] = {}  # co_filename -> relative name, or None when outside the roots
        self._counts: dict[tuple, int] = {}
        self._tensor = ()
        self._active = False
        self._previous = None
        self._previous_threading = None
        self._tool = None
        self._codes: list = []

    # -- file filter -------------------------------------------------------------------------------------
    def _relative(self, filename: str) -> str | None:
        try:
            return self._files[filename]
        except KeyError:
            pass
        rel = None
        path = os.path.realpath(filename) if filename and not filename.startswith("<") else ""
        for prefix, base in self._prefixes:
            if path.startswith(prefix):
                rel = Path(path).relative_to(base).as_posix()
                break
        self._files[filename] = rel
        return rel

    # -- recording ---------------------------------------------------------------------------------------
    def _record(self, rel: str, lineno: int, f_locals) -> None:
        tensor = self._tensor
        sig = ",".join(
            f"{k}=[{','.join(str(d) for d in v.shape)}]" for k, v in f_locals.items() if isinstance(v, tensor)
        )
        key = (rel, lineno, sig)
        self._counts[key] = self._counts.get(key, 0) + 1

    # sys.settrace ------------------------------------------------------------------------------------------
    def _call(self, frame, event, arg):
        if event != "call":
            return None
        rel = self._relative(frame.f_code.co_filename)
        if rel is None:
            return None
        record = self._record

        def local(frame, event, arg):
            if event == "line":
                record(rel, frame.f_lineno, frame.f_locals)
            return local

        return local

    # sys.monitoring ----------------------------------------------------------------------------------------
    def _start_monitoring(self):
        mon = sys.monitoring
        for tool in (mon.PROFILER_ID, 3, 4, mon.OPTIMIZER_ID):
            if mon.get_tool(tool) is None:
                self._tool = tool
                break
        else:
            raise RuntimeError("no free sys.monitoring tool id")
        mon.use_tool_id(self._tool, "fillscope.LineTracer")
        events = mon.events

        def py_start(code, offset):
            rel = self._relative(code.co_filename)
            if rel is not None:
                mon.set_local_events(self._tool, code, events.LINE)
                self._codes.append(code)
            return mon.DISABLE  # PY_START for this code object: decided once

        def line(code, lineno):
            rel = self._relative(code.co_filename)
            if rel is None:
                return mon.DISABLE
            self._record(rel, lineno, sys._getframe(1).f_locals)
            return None

        mon.register_callback(self._tool, events.PY_START, py_start)
        mon.register_callback(self._tool, events.LINE, line)
        mon.set_events(self._tool, events.PY_START)

    def _stop_monitoring(self):
        mon = sys.monitoring
        if self._tool is None:
            return
        mon.set_events(self._tool, 0)
        for code in self._codes:
            mon.set_local_events(self._tool, code, 0)
        self._codes.clear()
        mon.register_callback(self._tool, mon.events.PY_START, None)
        mon.register_callback(self._tool, mon.events.LINE, None)
        mon.free_tool_id(self._tool)
        self._tool = None
        mon.restart_events()

    # -- context manager ---------------------------------------------------------------------------------
    def __enter__(self):
        if self._active:
            raise RuntimeError("LineTracer is already active")
        import torch

        self._tensor = torch.Tensor
        self._active = True
        if self.tracer == "sys.monitoring":
            self._start_monitoring()
        else:
            self._previous = sys.gettrace()
            self._previous_threading = threading.gettrace() if hasattr(threading, "gettrace") else None
            threading.settrace(self._call)
            sys.settrace(self._call)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.tracer == "sys.monitoring":
            self._stop_monitoring()
        else:
            sys.settrace(self._previous)
            threading.settrace(self._previous_threading)
        self._active = False
        return False

    # -- results -----------------------------------------------------------------------------------------
    @property
    def rows(self) -> list[dict]:
        return [{"file": f, "line": n, "locals": s, "hits": h} for (f, n, s), h in self._counts.items()]

    @property
    def hits(self) -> int:
        return sum(self._counts.values())

    def files(self) -> list[str]:
        return sorted({f for f, _, _ in self._counts})

    def summary(self) -> dict:
        return {"rows": len(self._counts), "hits": self.hits, "tracer": self.tracer, "python": self.python}
