"""Trace nodes: run a loaded stack for one shape-equivalent denoiser step under the module (and line) tracers
and write the five-page architecture report (HTML + JSON) to the output folder."""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.masks import Geometry
from ..fillscope.pipelines.klein import transformer_variant
from ..fillscope.trace.report import write_report
from ..fillscope.trace.run import trace_pipeline
from . import common as c
from . import tooltips as tips
from .base import FillScopeNode
from .inspect import output_stem


def _trace_inputs():
    return [
        io.Int.Input("width", default=1024, min=c.bounds.TRACE["width"].min, max=c.bounds.TRACE["width"].max, step=1,
                     tooltip=tips.TRACE_WIDTH),
        io.Int.Input("height", default=1024, min=c.bounds.TRACE["height"].min, max=c.bounds.TRACE["height"].max,
                     step=1, tooltip=tips.TRACE_HEIGHT),
        io.String.Input("prompt", multiline=True, default="a red brick fireplace", tooltip=tips.TRACE_PROMPT),
        io.Boolean.Input("line_trace", default=True, tooltip="Also trace every executed line of diffusers/transformers (slower)."),
        io.String.Input("filename_prefix", default="fillscope/trace", tooltip=tips.TRACE_PREFIX),
    ]


def _write(report, filename_prefix):
    full_dir, stem, subfolder = output_stem(filename_prefix)  # a new <name>_<counter> every run
    html, js = write_report(report, full_dir, stem)
    return [{"filename": html.name, "subfolder": subfolder, "type": "output"},
            {"filename": js.name, "subfolder": subfolder, "type": "output"}]


def _summary(report) -> str:
    ev, run = report["evidence"], report["run"]
    lines = [f"{report['title']}  {run['width']}x{run['height']}  {run['dtype']} on {run['device']}  ({run['weights']})",
             f"module rows/hits: {ev['module']['rows']:,} / {ev['module']['hits']:,}  (measured on {ev['module']['device']})"]
    if ev.get("line"):
        lines.append(f"line rows/hits: {ev['line']['rows']:,} / {ev['line']['hits']:,}  ({ev['line']['tracer']}, Python {ev['line']['python']})")
    lines.append(f"parameters: {ev['params']['unique']:,} unique / {ev['params']['tie_counted']:,} tie-counted")
    lines.append(f"FLOPs per denoiser step: {ev['flops']['per_step'] / 1e12:.1f} TFLOP")
    if ev.get("peak_memory"):
        lines.append(f"peak memory: {ev['peak_memory']['bytes'] / 2**30:.2f} GiB ({ev['peak_memory']['provenance']})")
    return "\n".join(lines)


class _Trace(FillScopeNode):
    """Shared run: trace the stack (the component inputs), write the report, record its measured shapes (a Shapes
    Report can table them); the node shows the summary and the report files."""

    @classmethod
    def family_of(cls, stack) -> str:
        return cls.family

    @classmethod
    def run(cls, rec, width, height, prompt, line_trace, filename_prefix, **stack):
        report = trace_pipeline(cls.family_of(stack), stack, height=height, width=width, prompt=prompt,
                                line_trace=line_trace)
        for name, fig in report["figures"].items():
            if fig.get("unit") == "shape" and fig.get("provenance") == "measured":
                rec.measured(name, fig["value"], fig["dtype"], fig["device"], "internal")
        source = report["figures"].get("source_image")  # the synthetic input on the model grid (padded)
        if source:
            (h, w), (gh, gw) = (report["run"]["height"], report["run"]["width"]), source["value"][-2:]
            rec.geometry(Geometry(h, w, gh, gw, "exact" if (gh, gw) == (h, w) else "pad"))
        return io.NodeOutput(ui={"text": [_summary(report)], "fillscope_report": _write(report, filename_prefix)})


class FluxFillTrace(_Trace):
    family = "flux-fill"
    title = "FLUX Fill trace"
    table = "flux_fill"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeFluxFillTrace",
            display_name="FLUX Fill Trace",
            category=c.CATEGORY + "/trace",
            description="Runs the loaded FLUX Fill stack for one denoiser step under the tracers and writes the five-page report.",
            inputs=[c.ClipL.Input("clip_l", tooltip=tips.CLIP_L), c.T5.Input("t5", tooltip=tips.T5),
                    c.FluxFillModel.Input("transformer", tooltip=tips.FLUX_FILL_TRANSFORMER),
                    c.Vae.Input("vae", tooltip=tips.TRACE_VAE), *_trace_inputs()],
            outputs=[c.shapes_output()],
            is_output_node=True,
        )



class SD3ControlNetTrace(_Trace):
    family = "sd3-controlnet-inpaint"
    title = "SD3 ControlNet trace"
    table = "sd3_controlnet"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSD3ControlNetTrace",
            display_name="SD3 ControlNet Trace",
            category=c.CATEGORY + "/trace",
            description="Runs the loaded SD3 + inpainting ControlNet stack for one CFG denoiser step under the tracers and writes the five-page report.",
            inputs=[c.ClipL.Input("clip_l", tooltip=tips.CLIP_L), c.ClipG.Input("clip_g", tooltip=tips.CLIP_G),
                    c.T5.Input("t5", tooltip=tips.T5), c.SD3Model.Input("transformer", tooltip=tips.SD3_TRANSFORMER),
                    c.SD3ControlNet.Input("controlnet", tooltip=tips.SD3_CONTROLNET),
                    c.Vae.Input("vae", tooltip=tips.TRACE_VAE), *_trace_inputs()],
            outputs=[c.shapes_output()],
            is_output_node=True,
        )



class KleinTrace(_Trace):
    family = "klein-4b"
    title = "klein trace"
    table = "klein"

    @classmethod
    def family_of(cls, stack) -> str:
        """klein 4B or 9B, as the connected transformer's topology says (a tiny test model traces as 4B)."""
        return transformer_variant(stack["transformer"].config) or cls.family

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeKleinTrace",
            display_name="Klein Trace",
            category=c.CATEGORY + "/trace",
            description="Runs the loaded FLUX.2 [klein] stack (4B or 9B, from the transformer) for one inpaint denoiser "
                        "step under the tracers and writes the five-page report.",
            inputs=[c.Qwen3.Input("qwen3", tooltip=tips.QWEN3),
                    c.KleinModel.Input("transformer", tooltip=tips.KLEIN_TRANSFORMER),
                    c.Vae.Input("vae", tooltip=tips.TRACE_VAE), *_trace_inputs()],
            outputs=[c.shapes_output()],
            is_output_node=True,
        )


NODES = [FluxFillTrace, SD3ControlNetTrace, KleinTrace]
