"""The trace driver, one for every family: run a family's pipeline for one shape-equivalent denoiser step under
the module tracer (and optionally the line tracer) and assemble the architecture report (schema
`fillscope.report/1`, rendered by trace/report/).

What runs: the family's `run` (fillscope/pipelines/<family>.py) with steps=1: its text encoders on the prompt
(and the negative prompt where the family uses CFG), the VAE encode of the masked image, exactly one denoiser
step and the VAE decode: what the seed documents call "1 shape-equivalent denoiser timestep". What the report
shows of each family (page-1 graph, branches, block stages, micro block, labels) is data: trace/layouts/*.json.
Every figure names its provenance: measured in this run (on cuda, cpu or meta), estimated (meta memory),
static config, or a run setting.
"""

from __future__ import annotations

import json
import platform
import re
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from .. import masks
from ..pipelines import PIPELINES
from ..models import weight_bytes
from ..weights import Component, count_parameters
from .cost import count_flops, estimate_peak_memory, measure_peak_cuda
from ..meta_cache import meta_op_cache
from .lines import LineTracer
from .modules import ModuleTracer

LAYOUT_DIR = Path(__file__).parent / "layouts"


@lru_cache(maxsize=None)
def _read_json(name: str) -> dict:
    data = json.loads((LAYOUT_DIR / name).read_text(encoding="utf-8"))
    data.pop("_about", None)
    return data


def figure_labels() -> dict[str, tuple[str, str]]:
    return {name: tuple(pair) for name, pair in _read_json("figure_labels.json").items()}


def layout(family: str, configs: dict[str, dict]) -> dict:
    """A family's report layout with every '{component.key}' replaced by that component's config value (a
    string that is one placeholder becomes the value itself, e.g. a block count)."""
    template = re.compile(r"\{(\w+)\.(\w+)\}")

    def fill(value):
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, str):
            whole = template.fullmatch(value)
            if whole:
                return configs[whole[1]].get(whole[2])
            return template.sub(lambda m: str(configs[m[1]].get(m[2])), value)
        return value

    module = PIPELINES[family].__name__.rpartition(".")[2]  # layouts/<pipeline module>.json
    return fill(_read_json(f"{module}.json"))


def _versions() -> dict:
    import diffusers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    if device == "cpu":
        return platform.processor() or platform.machine()
    return device


def _block_rows(tracer, component: str, pattern: str, model) -> list[dict]:
    """Every block whose qualified name matches `pattern`, in order, with its traced shapes and its params."""
    rows = []
    rx = re.compile(pattern)
    for row in tracer.rows:
        if row["component"] == component and rx.fullmatch(row["module"]):
            params = sum(p.numel() for p in model.get_submodule(row["module"]).parameters())
            rows.append({"name": row["module"], "class": row["class"], "inputs": row["inputs"], "outputs": row["outputs"],
                         "params": params, "hits": row["hits"], "wall_s": round(row["wall_s"], 6)})
    rows.sort(key=lambda r: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", r["name"])])
    return rows


def _micro_rows(tracer, component: str, block: str, model, device: str) -> list[dict]:
    out = []
    for row in tracer.rows:
        if row["component"] == component and row["module"].startswith(block + ".") and row["module"].count(".") <= block.count(".") + 2:
            params = sum(p.numel() for p in model.get_submodule(row["module"]).parameters())
            out.append({"module": row["module"][len(block) + 1:], "class": row["class"], "inputs": row["inputs"],
                        "outputs": row["outputs"], "params": params, "provenance": "measured", "device": device})
    return out




def _run_boundary(tr: Component, prepared, steps_traced: int, device, wall, **extra) -> dict:
    """The run's settings and context, as they were in this run (batch and steps read from it)."""
    return {"height": prepared.geometry.height, "width": prepared.geometry.width, "batch": int(prepared.image.shape[0]),
            "dtype": str(tr.model.dtype).replace("torch.", ""), "device": device, "device_name": _device_name(device),
            "weights": tr.provenance, "steps_traced": steps_traced, "wall_s": round(wall, 3), **extra,
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **_versions()}


def _evidence(tracer, lines, params: dict, flops_total, flops_method, peak: dict, device: str) -> dict:
    ev = {
        "module": {"rows": len(tracer.rows), "hits": tracer.hits, "per_component": tracer.per_component(),
                   "definition": "row = (component, qualified module name, class, input and output shape signature); "
                                 "hit = one forward call (hooks with kwargs)",
                   "provenance": "measured", "device": device},
        "line": None,
        "params": {**params, "provenance": "measured", "device": device},
        "flops": {"per_step": flops_total, "provenance": "measured", "device": device, "method": flops_method},
        "peak_memory": peak,
    }
    if lines is not None and hasattr(lines, "rows"):
        ev["line"] = {"rows": len(lines.rows), "hits": lines.hits, "python": lines.python, "tracer": lines.tracer,
                      "definition": "row = (file, line, shapes of the tensor locals); hit = one executed line of "
                                    "diffusers/transformers code", "provenance": "measured", "device": device}
    return ev


def _params(stack: dict[str, Component], unused: dict[str, int], used_note: str) -> dict:
    per = {}
    unique = tied = 0
    for name, comp in stack.items():
        u, t = count_parameters(comp.model)
        per[name] = {"unique": u, "tie_counted": t}
        unique, tied = unique + u, tied + t
    return {
        "unique": unique,
        "tie_counted": tied,
        "unique_used": unique - sum(unused.values()),
        "convention_unique": "every instantiated parameter once (a tied tensor counts once)",
        "convention_tie_counted": "every instantiated parameter, tied tensors counted under each name (T5's shared "
                                  "embedding twice): the seed documents' convention",
        "convention_unique_used": used_note,
        "per_component": per,
    }


def _component_peaks(stages, stack, device: str) -> dict:
    """Per stage, what its components would need alone: their weight bytes + the activation peak of the stage
    (on CUDA the peak allocated above what was allocated before it; on meta the estimator's activation peak)."""
    out = {}
    for label, keys, fn in stages:
        weights = sum(weight_bytes(stack[k].model) for k in keys)
        if device == "cuda":
            raw = measure_peak_cuda(fn)
            activations = raw["bytes"] - raw["before_bytes"]
        else:
            activations = estimate_peak_memory(fn)["parts"]["activations_peak"]
        out[f"{label} alone: weights + activations"] = weights + activations
    return out


def _peak_memory(fn, device: str, stages=None, stack=None) -> dict:
    # cost.py words provenance as prose ("measured on CUDA", "estimated on meta (...)"); the report schema
    # wants the category, with the prose as the method
    raw = measure_peak_cuda(fn) if device == "cuda" else estimate_peak_memory(fn)
    category = "measured" if raw["provenance"].startswith("measured") else "estimated"
    parts = {k: v for k, v in raw.get("parts", {}).items() if k != "ops"}  # (ops is a count, not bytes)
    if stages:
        parts.update(_component_peaks(stages, stack, device))
    method = raw["provenance"] + ("; per stage: the components' weight bytes + that stage's activation peak"
                                  if stages else "")
    return {**raw, "parts": parts, "provenance": category, "device": device, "method": method}


class Figures:
    """The report's figures: each value with its provenance, device and method."""

    def __init__(self):
        self.items: dict[str, dict] = {}
        self.labels = figure_labels()

    def tensor(self, name, t):
        en, zh = self.labels.get(name, (name, name))
        dtype = str(t.dtype).replace("torch.", "")
        self.items[name] = {"value": list(t.shape), "unit": "shape", "provenance": "measured", "device": t.device.type,
                            "dtype": dtype, "method": f"shape of the tensor in this run ({dtype})",
                            "label_en": en, "label_zh": zh}


def _tracers(models: dict, line_trace: bool):
    return ModuleTracer(models), (LineTracer() if line_trace else nullcontext())


def _block_flops(per_module: dict, model, name: str):
    """FlopCounterMode names a module '<root class>.<qualified name>': the root class tells the ControlNet's
    transformer_blocks.0 from the MMDiT's."""
    return per_module.get(f"{type(model).__name__}.{name}")


def _stage_rows(tracer, stages: list, stack: dict, per_module: dict, device: str) -> dict[str, list]:
    """Page 3: the traced blocks of each stage of the layout (by stage id), with parameters and FLOPs."""
    out = {}
    for stage in stages:
        model = stack[stage["component"]].model
        rows = _block_rows(tracer, stage["component"], stage["blocks"], model)
        for row in rows:
            row["flops"] = _block_flops(per_module, model, row["name"])
            row.update(provenance="measured", device=device)
        out[stage["id"]] = rows
    return out


def _branch(spec: dict, config: dict) -> dict:
    """Page 2: one text encoder's static config beside the figure it hands on."""
    spec = {k: v for k, v in spec.items() if k != "component"}
    return {**spec, "layers": config.get("num_hidden_layers", config.get("num_layers")),
            "hidden": config.get("hidden_size", config.get("d_model")),
            "heads": config.get("num_attention_heads", config.get("num_heads")), "static": True}


def layout_pages(spec: dict, configs: dict[str, dict], stage_blocks: dict[str, list], micro_rows: list) -> dict:
    """The report's five pages from a family's layout (`layout(family, configs)`), the components' configs (by
    stack name), the traced block rows of each denoiser stage (by stage id) and the micro block's rows."""
    stages = [{**{k: v for k, v in st.items() if k not in ("component", "blocks")}, "blocks": stage_blocks[st["id"]]}
              for st in spec["denoiser"]["stages"]]
    vae_cfg = configs["vae"]
    return {
        "macro": spec["macro"],
        "conditions": {"branches": [_branch(b, configs[b["component"]]) for b in spec["conditions"]["branches"]],
                       "merge": spec["conditions"]["merge"]},
        "denoiser": {"stages": stages, "inputs": spec["denoiser"]["inputs"], "outputs": spec["denoiser"]["outputs"]},
        "micro": {"block_name": spec["micro"]["block_name"], "rows": micro_rows, "assembly": spec["micro"]["assembly"]},
        "vae": {**spec["vae"], "channel_ladder": list(vae_cfg.get("block_out_channels", [])),
                "latent_channels": vae_cfg.get("latent_channels"), "ladder_provenance": "static-config"},
    }


def trace_pipeline(family: str, stack: dict[str, Component], *, height=1024, width=1024,
                   prompt="a red brick fireplace", negative="", mask_fraction=0.5, seed=0, line_trace=True,
                   memory=True) -> dict:
    """Trace one denoiser step of `family`'s pipeline on `stack` (named as the pipeline's COMPONENTS, any weight
    source) and return the report."""
    pipeline = PIPELINES[family]
    missing = [name for name in pipeline.COMPONENTS if name not in stack]
    if missing:
        raise ValueError(f"the {family} stack lacks {', '.join(missing)}")
    extra = {"negative_prompt": negative} if pipeline.TAKES_NEGATIVE_PROMPT else {}
    figs = Figures()
    device = next(iter(stack.values())).device
    image, mask = masks.synthetic_image_and_mask(width, height, mask_fraction)
    prepared = masks.prepare_image_and_mask(image, mask)
    figs.tensor("source_image", prepared.image)

    mtracer, ltracer = _tracers(pipeline.traced_modules(stack), line_trace)
    t0 = time.perf_counter()
    with mtracer as mt, ltracer as lt:
        done = pipeline.run(stack, prompt, prepared, steps=1, seed=seed, observe=figs.tensor, **extra)
    wall = time.perf_counter() - t0

    stages = pipeline.stages(stack, prompt, prepared, done, seed=seed, **extra)
    # on meta, the op cache under the FLOP counter and the memory estimator (entered first, so their modes see
    # every op and it answers the kernels they call: meta_cache.py), the same counts, ~3x faster
    with meta_op_cache(device == "meta"):
        flops_total, per_module = count_flops(next(fn for label, _, fn in stages if label == "denoiser step"))
        configs = {name: comp.config for name, comp in stack.items()}
        spec = layout(family, configs)
        params = _params(stack, pipeline.parameters_not_run(stack), spec["evidence"]["params_used_note"])
        whole_run = lambda: pipeline.run(stack, prompt, prepared, steps=1, seed=seed, **extra)  # noqa: E731
        peak = _peak_memory(whole_run, device, stages, stack) if memory else None
    micro = spec["micro"]
    micro_rows = _micro_rows(mt, micro["component"], micro["block_name"], stack[micro["component"]].model, device)
    stage_blocks = _stage_rows(mt, spec["denoiser"]["stages"], stack, per_module, device)
    run_extra = {"prompt": prompt, **({"negative_prompt": negative} if extra else {})}
    return {
        "schema": "fillscope.report/1",
        "model": family,
        "title": pipeline.title_for(family) if hasattr(pipeline, "title_for") else pipeline.TITLE,
        "run": _run_boundary(stack["transformer"], prepared, done.latent.info.get("steps_run", 1), device, wall,
                             **run_extra),
        "figures": figs.items,
        "pages": layout_pages(spec, configs, stage_blocks, micro_rows),
        "evidence": _evidence(mt, lt, params, flops_total, spec["evidence"]["flops_method"], peak, device),
    }
