"""FillScope Inspect Model: the shapes at the boundary of ComfyUI's own diffusion model (UNETLoader,
CheckpointLoaderSimple, after DifferentialDiffusion or a LoRA ...), measured while ComfyUI's own samplers run it.

The node hands on a clone of its MODEL (comfy.model_patcher.ModelPatcher.clone(): same weights, its own
model_options and wrappers); the MODEL it was given, and every other node's copy of it, is left as it was. The clone
carries three ComfyUI wrappers (comfy.patcher_extension, key `fillscope_inspect_model.<node id>`):

- OUTER_SAMPLE (one sampling run: KSampler, SamplerCustom ..., and FillScope's FLUX Fill sampler on a native MODEL,
  whose run nodes/native_model.py run_native wraps the same way with its NativeRun as the executor's class_obj):
  starts a run record (a ShapeRecorder: its clock is the run's wall time, its CUDA peak the run's peak), adds a
  forward pre-hook and hook (with_kwargs) on the diffusion model itself, with `modules` a ModuleTracer
  (fillscope/trace/modules.py) on all its modules, and in a `finally` removes every hook it added (also when the run
  fails or is interrupted), then publishes the record (nodes/live.py: websocket event `fillscope.live`,
  GET /fillscope/live?prompt_id=ID; a Shapes Report `after` the sampler tables it);
- APPLY_MODEL (each model call: BaseModel.apply_model): the sampler's latent x before anything is concatenated,
  sigma, the concatenated conditioning (c_concat: Flux Fill's inpaint latents and packed mask), control residuals,
  the denoised output; cond_or_uncond (CFG batches), the schedule position, the call's wall time (CUDA synchronised
  around it on a CUDA device);
- the diffusion model's own boundary, read by the forward hooks: x as it enters (the sampler's latent with the
  concatenated channels), the timestep, context, y (pooled), guidance and any other tensor argument, the output.
  (ComfyUI 0.3.75's DIFFUSION_MODEL wrapper would see the same for Flux, but its MMDiT (SD3) calls none; the hooks
  see every model class.)

The record: one row per boundary with the shapes of the first step (a later call of that step whose shapes differ
adds its own rows), facts (steps seen, calls per step, total calls, time per call, sigmas first/last, one `step N`
entry per step), provenance "measured on <device>, native ComfyUI <model_base class>", the diffusion model's class,
what sampled ("sampled by": CFGGuider or NativeRun, and the sampler's node); with `modules`, the module
rows and hits and one `block <name>` entry per transformer block (double_blocks / single_blocks for Flux,
joint_blocks for MMDiT). The node's own execution records what is known without running the model (model class,
latent channels, dtype, parameter count, and the weight patches its ModelPatcher holds: LoRA loaders before it, read
as counts, names and strengths, `patch_facts`): nothing is moved or loaded for it; the run records repeat the patches.
"""

from __future__ import annotations

import logging
import re
import time

from comfy_api.latest import io

from ..fillscope.trace.modules import ModuleTracer
from ..fillscope.trace.records import (
    ShapeRecorder,
    dtype_name,
    format_record,
    shapes_document,
)
from . import common as c
from . import live
from .inspect_calls import InspectNode, executing_node
from .wire_calls import add_row, add_rows, diffusion_inputs

log = logging.getLogger(__name__)
KEY = "fillscope_inspect_model"
TITLE = "Inspect Model"
BLOCK = re.compile(r"(double_blocks|single_blocks|joint_blocks|transformer_blocks|blocks)\.\d+")
APPLY_ARGS = ("x", "t", "c_concat", "c_crossattn", "control", "transformer_options")
PART = {0: "cond", 1: "uncond"}


class InspectModel(InspectNode):  # no model placed (the sampler loads it), a cache key of its own
    title = TITLE

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeInspectModel",
            display_name="Inspect Model",
            category=c.CATEGORY + "/inspect",
            description=(
                "Passes the MODEL on (a clone: the input stays untouched) and records, while a sampler runs it, the "
                "diffusion model's boundary: latent in (with concatenated inpaint channels), sigma/timestep, text "
                "context, pooled vector, guidance, control, output; calls per step (CFG batches), time per call, CUDA "
                "peak. The record appears on this node when the sampling run ends."),
            inputs=[
                io.Model.Input("model", tooltip="ComfyUI's MODEL (UNETLoader, CheckpointLoaderSimple, after LoRA "
                                                "loaders and patches); it is not changed: a clone is handed on."),
                c.advanced(io.Boolean.Input(
                    "modules", default=False, optional=True,
                    tooltip="Also hook every module of the diffusion model for that sampling run: module rows/hits "
                            "and a per-block table (input/output shapes, calls). Hooks are removed when the run ends.")),
            ],
            outputs=[io.Model.Output(),  # an id of its own (ComfyUI gives one): "model" is the input's
                     c.shapes_output()],  # what is known before a run; the measured record: nodes/live.py
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def run(cls, rec: ShapeRecorder, model, modules=False):
        node_id = cls.graph_id() or "FillScopeInspectModel"
        static_facts(rec, model)
        patches = patch_facts(model)
        for k, v in patches.items():
            rec.fact(k, v)
        rec.fact("modules", bool(modules))
        rec.note("weight patches: those on the MODEL as it reaches this node (a LoRA loader before it); a LoRA "
                 "loader after it patches a later clone, not counted here (a run of that clone is still recorded)")
        rec.note("measured shapes arrive when a sampler runs this MODEL (the record then replaces this one)")
        clone = attach(model, node_id, bool(modules), patches)
        rec.finish()  # the node's own time, for the text below (base.execute finishes it again: same record)
        ui = {"text": [format_record(rec.record)], "fillscope_shapes": [shapes_document(rec.record, [])]}
        return io.NodeOutput(clone, ui=ui)


NODES = [InspectModel]


# ---- what is known without running -------------------------------------------------------------------------------


def static_facts(rec: ShapeRecorder, patcher) -> None:
    """Model class, latent format, dtype, parameter count, read off the patcher's model where it lies."""
    base = patcher.model
    rec.fact("class", type(base).__name__)
    dm = getattr(base, "diffusion_model", None)
    if dm is not None:
        rec.fact("diffusion model", type(dm).__name__)
    fmt = getattr(base, "latent_format", None)
    if fmt is not None and getattr(fmt, "latent_channels", None) is not None:
        rec.fact("latent channels", int(fmt.latent_channels))
    unet = dict(getattr(getattr(base, "model_config", None), "unet_config", None) or {})
    for key, name in (("in_channels", "model in channels"), ("out_channels", "model out channels"),
                      ("patch_size", "patch size"), ("hidden_size", "hidden size"), ("context_in_dim", "context width"),
                      ("vec_in_dim", "pooled width"), ("adm_in_channels", "pooled width"), ("depth", "depth"),
                      ("depth_single_blocks", "single blocks")):
        if isinstance(unet.get(key), (int, float)) and name not in rec.record["facts"]:
            rec.fact(name, unet[key])
    dtype = getattr(dm, "dtype", None)  # the weights' dtype, as ModelPatcher.model_dtype() reports it
    if dtype is not None:
        rec.fact("dtype", dtype_name(dtype))
    if getattr(base, "manual_cast_dtype", None) is not None:
        rec.fact("compute dtype", dtype_name(base.manual_cast_dtype))
    if dm is not None:
        params = list(dm.parameters())
        rec.fact("parameters (unique)", sum(p.numel() for p in params))
        if params:
            rec.fact("weights", str(params[0].device))
    rec.fact("device", str(getattr(patcher, "load_device", "")))


PATCH_NAMES = 4  # patched weights named in the record (the first ones, in the patcher's order)


def _patch_kind(patch) -> str:
    """A weight patch's kind without touching its tensors: a weight adapter's name (comfy.weight_adapter: "lora",
    "loha" ...), a legacy tuple's tag ("diff", "set" ...), else the type's name."""
    name = getattr(patch, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(patch, tuple) and patch and isinstance(patch[0], str):
        return patch[0]
    return type(patch).__name__


def _strength(x) -> str:
    return f"{x:g}" if isinstance(x, (int, float)) else type(x).__name__


def patch_facts(patcher) -> dict:
    """The weight patches ComfyUI's ModelPatcher holds (`patches`: weight key -> [(strength_patch, patch,
    strength_model, offset, function)], what LoraLoader / LoraLoaderModelOnly add): how many weights, a few names,
    the kinds and strengths. Only keys, counts and floats are read: no tensor is copied or kept."""
    patches = getattr(patcher, "patches", None)
    if not isinstance(patches, dict):
        return {}
    facts = {"weight patches": len(patches)}
    if not patches:
        return facts
    entries = [e for v in patches.values() for e in (v or ())]
    facts["patch entries"] = len(entries)
    names = [str(k) for k in list(patches)[:PATCH_NAMES]]
    more = len(patches) - len(names)
    facts["patched weights"] = ", ".join(names) + (f" ... (+{more})" if more else "")
    facts["patch kinds"] = ", ".join(sorted({_patch_kind(e[1]) for e in entries if len(e) > 1}))
    strengths = {f"{_strength(e[0])} (model {_strength(e[2])})" for e in entries if len(e) > 2}
    facts["patch strengths"] = ", ".join(sorted(strengths))
    most = max(len(v or ()) for v in patches.values())
    if most > 1:
        facts["patches per weight (most)"] = most  # stacked LoRAs
    hooks = getattr(patcher, "hook_patches", None)
    if hooks:
        facts["hook patches"] = len(hooks)
    return facts


# ---- the wrappers -------------------------------------------------------------------------------------------------


def attach(patcher, node_id: str, modules: bool, patches: dict | None = None):
    """A clone of `patcher` carrying this node's wrappers (replacing any it carries already); `patches`: the patch
    facts of `patcher` (patch_facts), repeated in each sampling run's record."""
    import comfy.patcher_extension as pe

    clone = patcher.clone()
    inspector = Inspector(node_id, modules, patches)
    key = f"{KEY}.{node_id}"
    for kind, fn in ((pe.WrappersMP.OUTER_SAMPLE, inspector.outer_sample),
                     (pe.WrappersMP.APPLY_MODEL, inspector.apply_model)):
        clone.remove_wrappers_with_key(kind, key)
        clone.add_wrapper_with_key(kind, key, fn)
    return clone


class Inspector:
    """The wrappers of one Inspect Model node's clone; `run` is the sampling run in progress (None between runs)."""

    def __init__(self, node_id: str, modules: bool, patches: dict | None = None):
        self.node_id = node_id
        self.modules = modules
        self.patches = dict(patches or {})  # counts, names and strengths only (patch_facts)
        self.run: Run | None = None

    def outer_sample(self, executor, *args, **kwargs):
        if self.run is not None:  # a sampling run inside one of ours (same clone): already recorded
            return executor(*args, **kwargs)
        guider = executor.class_obj  # ComfyUI's CFGGuider, or FillScope's NativeRun (nodes/native_model.py)
        patcher = guider.model_patcher
        run = self.run = Run(patcher, self.modules, sampled_by(guider), self.patches)
        error = None
        try:
            run.start()
            return executor(*args, **kwargs)
        except BaseException as e:  # interrupted (comfy.model_management.InterruptProcessingException) or failed
            error = e
            raise
        finally:
            self.run = None
            run.stop()  # every hook off first: nothing below may leave one behind
            try:
                live.publish(self.node_id, run.record(error))
            except Exception:
                log.exception("FillScope Inspect Model: could not publish the record of node %s", self.node_id)

    def apply_model(self, executor, *args, **kwargs):
        run = self.run
        if run is None:  # the model called outside a sampling run (not what this node records)
            return executor(*args, **kwargs)
        return run.apply_model(executor, args, kwargs)


class Run:
    """One sampling run's record."""

    def __init__(self, patcher, modules: bool, sampler: str = "", patches: dict | None = None):
        self.patcher = patcher
        self.patches = patches or {}
        self.base = patcher.model
        self.dm = getattr(self.base, "diffusion_model", None)
        self.modules = modules
        self.sampler = sampler
        # its clock and CUDA peak: this run's; "native_model": the Shapes Report's row order (trace/summary.py)
        self.rec = ShapeRecorder("FillScopeInspectModel", TITLE, "native_model")
        self.handles: list = []
        self.tracer: ModuleTracer | None = None
        self.calls: list[dict] = []  # {step, sigma, batch, parts, wall_s}
        self.rows: list[tuple] = []  # (name, role, shape, dtype, device): the first step's boundary
        self.call: dict | None = None  # the apply_model call in progress: its rows so far
        self.schedule: list[float] | None = None
        self.schedule_id = None
        self.step = 0
        self.device = None

    # -- hooks ----------------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.dm is None:
            return
        try:
            self.handles.append(self.dm.register_forward_pre_hook(self._dm_pre, with_kwargs=True))
            self.handles.append(self.dm.register_forward_hook(self._dm_post, with_kwargs=True))
            if self.modules:
                self.tracer = ModuleTracer({"diffusion_model": self.dm})
                self.tracer.__enter__()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        if self.tracer is not None:
            self.tracer.__exit__(None, None, None)  # removes its handles (again: a no-op)

    def _dm_pre(self, module, args, kwargs):
        call = self.call
        if call is None or call["dm_seen"]:
            return
        call["dm_seen"] = True
        diffusion_inputs(call["rows"], args, kwargs)  # the boundary the wire recorder reads too

    def _dm_post(self, module, args, kwargs, output):
        call = self.call
        if call is not None and not call["dm_out"]:
            call["dm_out"] = True
            add_rows(call["rows"], "diffusion model out", output, "output")

    # -- one model call ---------------------------------------------------------------------------------------------
    def apply_model(self, executor, args, kwargs):
        import torch

        bound = dict(zip(APPLY_ARGS, args))
        bound.update(kwargs)
        x, t = bound.get("x"), bound.get("t")
        options = bound.get("transformer_options") or {}
        sigma = float(t.flatten()[0]) if isinstance(t, torch.Tensor) and t.numel() else None
        step = self._step(sigma, options.get("sample_sigmas"))
        parts = [PART.get(i, str(i)) for i in sorted(options.get("cond_or_uncond") or [])]
        call = self.call = {"rows": [], "dm_seen": False, "dm_out": False}
        rows = call["rows"]
        add_row(rows, "x (sampler latent)", x, "input")
        add_row(rows, "sigma", t, "input")
        add_row(rows, "c_concat (concatenated to x)", bound.get("c_concat"), "input")
        control = bound.get("control")
        if isinstance(x, torch.Tensor):
            self.device = x.device
        sync = torch.cuda.synchronize if isinstance(x, torch.Tensor) and x.is_cuda else None
        if sync:
            sync(x.device)
        t0 = time.perf_counter()
        try:
            out = executor(*args, **kwargs)
            if sync:
                sync(x.device)
        finally:
            self.call = None
        wall = time.perf_counter() - t0
        if not call["dm_seen"]:  # a model whose diffusion model was not called through nn.Module.__call__
            add_row(rows, "context", bound.get("c_crossattn"), "input")
            for name, value in kwargs.items():
                add_rows(rows, name, value, "input")
        if isinstance(control, dict):
            for part, items in control.items():
                tensors = [i for i in (items or []) if isinstance(i, torch.Tensor)]
                if tensors:
                    add_row(rows, f"control.{part} ({len(tensors)} residuals, first)", tensors[0], "input")
        add_row(rows, "denoised (apply_model out)", out, "output")
        batch = int(x.shape[0]) if isinstance(x, torch.Tensor) and x.ndim else 0
        self.calls.append({"step": step, "sigma": sigma, "batch": batch, "parts": parts, "wall_s": wall})
        first_step = self.calls[0]["step"]
        if step == first_step:
            self._keep_rows(rows, sum(1 for k in self.calls if k["step"] == first_step))
        return out

    def _step(self, sigma, schedule) -> int:
        """The schedule position of a call: the index of its sigma in the run's sigmas (transformer_options'
        sample_sigmas, set by ComfyUI's samplers and by FillScope's through NativeRun.set_sigmas), searched from the
        current step on; a sigma between two (a sampler's intermediate evaluation) stays with the current step.
        Without the run's sigmas (a sampler that sets none) each new sigma starts a step."""
        if schedule is not None and id(schedule) != self.schedule_id:
            self.schedule_id = id(schedule)
            flat = getattr(schedule, "flatten", None)
            self.schedule = [float(s) for s in flat().tolist()] if flat is not None else None
        if sigma is None or not self.schedule:
            if self.calls and sigma is not None and self.calls[-1]["sigma"] != sigma:
                self.step += 1
            return self.step
        for i in range(self.step, len(self.schedule)):
            if abs(self.schedule[i] - sigma) <= 1e-6 * max(1.0, abs(sigma)):
                self.step = i
                break
        return self.step

    def _keep_rows(self, rows, n: int) -> None:
        if n == 1:
            self.rows = list(rows)
            return
        first = {r[0]: r[2] for r in self.rows}
        for name, role, shape, dtype, device in rows:
            if first.get(name) != shape:
                self.rows.append((f"{name} (call {n})", role, shape, dtype, device))

    # -- the record -------------------------------------------------------------------------------------------------
    def record(self, error=None) -> dict:
        rec = self.rec
        for name, role, shape, dtype, device in self.rows:
            rec.measured(name, shape, dtype, device, role)
        where = _device_name(self.device if self.device is not None else getattr(self.patcher, "load_device", "?"))
        cls_name = type(self.base).__name__
        rec.fact("provenance", f"measured on {where}, native ComfyUI {cls_name}")
        rec.fact("class", cls_name)
        if self.dm is not None:
            rec.fact("diffusion model", type(self.dm).__name__)
        if self.sampler:
            rec.fact("sampled by", self.sampler)
        for k, v in self.patches.items():
            rec.fact(k, v)
        calls = self.calls
        steps: dict[int, list[dict]] = {}
        for k in calls:
            steps.setdefault(k["step"], []).append(k)
        if self.schedule:
            rec.fact("steps scheduled", max(len(self.schedule) - 1, 0))
        rec.fact("steps seen", len(steps))
        per_step = sorted({len(v) for v in steps.values()})
        rec.fact("calls per step", per_step[0] if len(per_step) == 1 else [len(v) for v in steps.values()])
        rec.fact("total calls", len(calls))
        if calls:
            walls = [k["wall_s"] for k in calls]
            rec.fact("time per call", f"{_ms(sum(walls) / len(walls))} (min {_ms(min(walls))}, max {_ms(max(walls))})")
            rec.fact("sigma first", round(calls[0]["sigma"], 6) if calls[0]["sigma"] is not None else None)
            rec.fact("sigma last", round(calls[-1]["sigma"], 6) if calls[-1]["sigma"] is not None else None)
            rec.fact("cfg batches", _cfg(steps))
        for n, (step, ks) in enumerate(steps.items(), 1):
            sigma = ks[0]["sigma"]
            what = " | ".join("+".join(k["parts"]) or f"batch {k['batch']}" for k in ks)
            head = f"sigma {sigma:.6g} · " if sigma is not None else ""
            rec.fact(f"step {n}", f"{head}{len(ks)} call{'s' if len(ks) > 1 else ''} ({what}) · "
                                  f"batch {'+'.join(str(k['batch']) for k in ks)} · {_ms(sum(k['wall_s'] for k in ks))}")
        if self.tracer is not None:
            self._blocks(rec)
        if error is not None:
            rec.warn(f"the sampling run ended with {type(error).__name__} after {len(calls)} model call(s): "
                     f"{str(error)[:200]}")
        return rec.finish()

    def _blocks(self, rec) -> None:
        rows = self.tracer.rows
        rec.fact("module rows", len(rows))
        rec.fact("module hits", sum(r["hits"] for r in rows))
        blocks: dict[str, list[dict]] = {}
        for r in rows:
            if BLOCK.fullmatch(r["module"]):
                blocks.setdefault(r["module"], []).append(r)
        rec.fact("blocks", len(blocks))
        for name in sorted(blocks, key=_block_order):
            text = " | ".join(f"{_without_options(r['inputs'])} -> {r['outputs']} ×{r['hits']}" for r in blocks[name])
            rec.fact(f"block {name}", f"{sum(r['hits'] for r in blocks[name])} calls · {text}")


# ---- helpers ------------------------------------------------------------------------------------------------------


def sampled_by(guider) -> str:
    """What ran the sampling run: the OUTER_SAMPLE executor's object (CFGGuider for ComfyUI's samplers, NativeRun for
    FillScope's FLUX Fill sampler) and the node that is executing (the sampler node)."""
    node = executing_node()
    return type(guider).__name__ + (f" (node {node})" if node else "")


def _without_options(signature: str) -> str:
    """A call signature without its `transformer_options={...}` argument (ComfyUI's options dict: wrappers, uuids,
    sigmas ..., not a boundary of the block)."""
    at = signature.find("transformer_options={")
    if at < 0:
        return signature
    depth, end = 0, len(signature) - 1
    for i in range(at + len("transformer_options="), len(signature)):
        depth += {"{": 1, "}": -1}.get(signature[i], 0)
        if depth == 0:
            end = i
            break
    start = at - 1 if at > 0 and signature[at - 1] == "," else at
    return signature[:start] + signature[end + 1:]


def _cfg(steps: dict) -> str:
    first = next(iter(steps.values()))
    parts = [k["parts"] for k in first]
    if any(len(p) > 1 for p in parts):
        return "cond and uncond in one batch (" + " | ".join("+".join(p) for p in parts) + ")"
    if len(parts) > 1:
        return "separate calls (" + " | ".join("+".join(p) or "?" for p in parts) + ")"
    return "one call (" + ("+".join(parts[0]) or "?") + ")"


def _block_order(name: str):
    kind, _, index = name.rpartition(".")
    return ({"double_blocks": 0, "joint_blocks": 0, "single_blocks": 1}.get(kind, 2), kind, int(index))


def _ms(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _device_name(device) -> str:
    import torch

    text = str(device)
    if isinstance(device, torch.device) and device.type == "cuda" and torch.cuda.is_available():
        return f"{text} ({torch.cuda.get_device_name(device)})"
    return text
