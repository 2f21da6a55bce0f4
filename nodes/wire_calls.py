"""Model calls on the wire they came along (issue 33): while a node runs, the MODEL, CLIP and VAE it was handed are
watched, and what their networks were called with and gave back is written onto the wire that brought them.

How: forward hooks (torch's own, `with_kwargs`) on the networks inside ComfyUI's objects, added just before the node
runs and removed in a `finally` when it returns, fails or is interrupted:
- MODEL (a ModelPatcher), or a GUIDER holding one (CFGGuider's, run by SamplerCustomAdvanced): its diffusion model
  (`model.diffusion_model`): x as it enters (the sampler's latent with any concatenated inpaint channels), timestep,
  context, y, guidance, every other tensor argument, the output;
- CLIP: each text model of its `cond_stage_model` (clip_l, clip_g, t5xxl, qwen3 ...): tokens in, states out;
- VAE: its `first_stage_model`'s encoder and decoder: pixels / latents in and out.
A hook reads shapes, dtypes and devices only (never a tensor's values: no GPU synchronisation). The rows are those of
the first call; a later call whose shapes differ adds its own rows, up to MAX_ROWS. A model under torch.compile is
not hooked (adding and removing hooks would make dynamo recompile it): its record says so.

The diffusion model's boundary is read by `diffusion_inputs`, the function Inspect Model (nodes/inspect_model.py)
reads it with too.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from .wire_values import is_tensor

MAX_ROWS = 48  # rows one model-call record keeps (first call, then each new shape)
MAX_LIST_ROWS = 4  # rows for a list argument (ref_latents ...): its first items
ROW_NAMES = {"y": "y (pooled)"}
SKIPPED_ARGS = ("transformer_options", "control")


def add_row(rows: list, name: str, t, role: str) -> None:
    """(name, role, shape, dtype, device type) of a tensor; anything else is left out."""
    if is_tensor(t):
        rows.append((name, role, tuple(int(d) for d in t.shape), str(t.dtype).replace("torch.", ""), t.device.type))


def add_rows(rows: list, name: str, value, role: str) -> None:
    """A tensor, or the first items of a list / tuple of tensors (ref_latents, a text model's (states, pooled))."""
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value[:MAX_LIST_ROWS]):
            add_row(rows, f"{name}[{i}]", item, role)
    else:
        add_row(rows, name, value, role)


def diffusion_inputs(rows: list, args: tuple, kwargs: dict) -> None:
    """The diffusion model's inputs as its forward receives them: x, timestep, then every keyword and later
    positional tensor argument (context, y, guidance, ref_latents ...) but ComfyUI's options and control dicts."""
    if args:
        add_row(rows, "x (diffusion model in)", args[0], "input")
    if len(args) > 1:
        add_row(rows, "timestep", args[1], "input")
    for name, value in list(kwargs.items()) + [(f"arg{i}", a) for i, a in enumerate(args[2:], 2)]:
        if name not in SKIPPED_ARGS:
            add_rows(rows, ROW_NAMES.get(name, name), value, "input")


def _token_rows(rows: list, args: tuple) -> None:
    """A text model's input: ComfyUI hands it lists of token ids (a list per 77-token chunk), or a tensor."""
    tokens = args[0] if args else None
    if is_tensor(tokens):
        add_row(rows, "tokens", tokens, "input")
    elif isinstance(tokens, (list, tuple)) and tokens and isinstance(tokens[0], (list, tuple)):
        rows.append(("tokens", "input", (len(tokens), len(tokens[0])), "token ids", "cpu"))


class Watch:
    """One network watched while one node runs: its hooks and what they saw."""

    def __init__(self, kind: str, part: str, module):
        self.kind, self.part = kind, part  # "diffusion model", "text model", "vae"; part: "clip_l", "decoder" ...
        self.module_class = type(module).__name__
        self.rows: list[tuple] = []
        self.calls = 0
        self.steps = None  # the sampler's schedule length, where transformer_options carries it
        self.seconds = 0.0
        self.overhead = 0.0  # the hooks' own time (bench/bench_wires.py reports it)
        self._pending: list[float] = []  # start times of calls in flight (a network may call itself)
        self.handles = [module.register_forward_pre_hook(self._pre, with_kwargs=True),
                        module.register_forward_hook(self._post, with_kwargs=True)]

    def _pre(self, module, args, kwargs):
        start = time.perf_counter()
        try:
            self._read_inputs(args, kwargs)
        finally:
            now = time.perf_counter()
            self.overhead += now - start
            self._pending.append(now)

    def _read_inputs(self, args, kwargs):
        if self.calls and len(self.rows) >= MAX_ROWS:
            return
        rows: list = []
        if self.kind == "diffusion model":
            diffusion_inputs(rows, args, kwargs)
            sigmas = (kwargs.get("transformer_options") or {}).get("sample_sigmas")
            if is_tensor(sigmas) and sigmas.ndim == 1:
                self.steps = max(int(sigmas.shape[0]) - 1, 0)
        elif self.kind == "text model":
            _token_rows(rows, args)
        else:
            add_rows(rows, f"{self.part} in", args[0] if args else None, "input")
        self._keep(rows)

    def _post(self, module, args, kwargs, output):
        start = time.perf_counter()
        if self._pending:
            self.seconds += start - self._pending.pop()
        try:
            self._read_output(output)
        finally:
            self.overhead += time.perf_counter() - start

    def _read_output(self, output):
        if not self.calls or len(self.rows) < MAX_ROWS:
            rows: list = []
            name = {"diffusion model": "diffusion model out", "text model": "states"}.get(self.kind,
                                                                                        f"{self.part} out")
            add_rows(rows, name, output, "output")
            self._keep(rows)
        self.calls += 1

    def _keep(self, rows: list) -> None:
        """The first call's rows; a later call's only where its shape is new for that row's name (`self.calls`: the
        calls finished before this one)."""
        if self.calls == 0:
            self.rows.extend(rows)
            return
        seen = {(r[0].split(" (call ")[0], r[2]) for r in self.rows}
        for name, role, shape, dtype, device in rows:
            if (name, shape) not in seen and len(self.rows) < MAX_ROWS:
                self.rows.append((f"{name} (call {self.calls + 1})", role, shape, dtype, device))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def record(self) -> dict:
        out = {"kind": self.kind, "part": self.part, "class": self.module_class, "calls": self.calls,
               "seconds": round(self.seconds, 6),
               "rows": [{"name": n, "role": r, "shape": list(s), "dtype": d, "device": dev}
                        for n, r, s, d, dev in self.rows]}
        if self.steps is not None:
            out["steps scheduled"] = self.steps
        if self._pending:  # entered and never returned: the node failed (or was interrupted) inside
            out["unfinished"] = len(self._pending)
        return out


def networks(value) -> list[tuple[str, str, object]]:
    """(kind, part, nn.Module) of the networks inside a MODEL, CLIP or VAE that a node may call; [] for anything
    else, or for a MODEL under torch.compile (see the module's text)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    module_type = torch.nn.Module
    guided = getattr(value, "model_patcher", None)  # a GUIDER (CFGGuider ...): SamplerCustomAdvanced runs its MODEL
    if guided is not None and hasattr(guided, "model_options"):
        value = guided
    if hasattr(value, "model") and hasattr(value, "model_options"):  # ModelPatcher
        dm = getattr(value.model, "diffusion_model", None)
        if isinstance(dm, module_type) and not compiled(value):
            return [("diffusion model", "diffusion_model", dm)]
        return []
    if hasattr(value, "cond_stage_model"):  # comfy.sd.CLIP
        model = value.cond_stage_model
        parts = [(n, m) for n, m in model.named_children() if hasattr(m, "encode_token_weights") or
                 hasattr(m, "transformer")] if isinstance(model, module_type) else []
        return [("text model", n, m) for n, m in (parts or [(type(model).__name__, model)])
                if isinstance(m, module_type)]
    if hasattr(value, "first_stage_model"):  # comfy.sd.VAE
        model = value.first_stage_model
        if isinstance(model, module_type):
            return [("vae", n, m) for n, m in model.named_children() if "encoder" in n or "decoder" in n]
    return []


def compiled(patcher) -> bool:
    """A MODEL that ComfyUI's TorchCompileModel (or a pack doing the same) wrapped: a wrapper key naming compile."""
    wrappers = (getattr(patcher, "model_options", None) or {}).get("transformer_options", {}).get("wrappers", {})
    for by_key in (wrappers or {}).values():
        if any("compile" in str(key).lower() for key in (by_key or {})):
            return True
    return False


class NotLoaded(logging.Handler):
    """ComfyUI's lines for weights a LoRA could not put anywhere ("lora key not loaded: ...", comfy/lora.py; "NOT
    LOADED ...", comfy/sd.py), logged on this thread while a node that takes a MODEL or CLIP runs: a LoRA made for
    another model family loads silently otherwise."""

    PREFIXES = ("lora key not loaded: ", "NOT LOADED ")

    def __init__(self):
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.count = 0
        self.examples: list[str] = []

    def emit(self, record) -> None:
        if record.thread != self.thread:
            return
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 (a record that cannot format itself is not one of these)
            return
        for prefix in self.PREFIXES:
            if message.startswith(prefix):
                self.count += 1
                if len(self.examples) < 3:
                    self.examples.append(message[len(prefix):][:120])
                return

    def warning(self) -> str | None:
        if not self.count:
            return None
        return (f"{self.count} LoRA weight(s) not loaded (e.g. {', '.join(self.examples)}): a LoRA made for another "
                "model family? ComfyUI loads the rest and says nothing more")


class NodeWatch:
    """Every network a node was handed, watched while it runs: `add` per input value, `close` in a finally; and
    ComfyUI's lines for LoRA weights it could not load (NotLoaded)."""

    def __init__(self):
        self.not_loaded = NotLoaded()
        logging.getLogger().addHandler(self.not_loaded)
        self.watches: list[tuple[str, object, Watch]] = []  # (input name, producer key, watch)
        self._seen: set[int] = set()
        self.not_hooked: list[tuple[str, object, str]] = []
        self.overhead = 0.0  # the hooks' own time, summed when they are removed

    def add(self, input_name: str, value, producer) -> None:
        patcher = getattr(value, "model_patcher", value)
        if hasattr(patcher, "model_options") and compiled(patcher):
            self.not_hooked.append((input_name, producer, "torch.compile: not hooked (it would recompile)"))
            return
        for kind, part, module in networks(value):
            if id(module) in self._seen:
                continue
            self._seen.add(id(module))
            self.watches.append((input_name, producer, Watch(kind, part, module)))

    def close(self) -> list[tuple[str, object, dict]]:
        """Removes every hook; (input name, producer, call record) of each network called at least once, or entered
        (a call the node failed in: its inputs are recorded, `unfinished` counts it)."""
        logging.getLogger().removeHandler(self.not_loaded)
        done = []
        for input_name, producer, watch in self.watches:
            watch.remove()
            self.overhead += watch.overhead
            if watch.calls or watch.rows:
                done.append((input_name, producer, watch.record()))
        self.watches.clear()
        return done
