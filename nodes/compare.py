"""Compare nodes (issue 25): one job run two ways, boundary by boundary, over the engine's fillscope/compare.

A family's Compare Run node holds one run's definition: its loaded components and how the run is made
(implementation, dtype, storage, attention backend, step cache) with the family's sampler options. FillScope
Compare takes two runs of one family, the image, mask, prompt, seed and steps, runs both, and shows the first
boundary that diverges and the PSNR inside the mask on its face; its outputs are both images and the difference
heat map; the JSON record (fillscope.compare/1) and the table go to output/fillscope/."""

from __future__ import annotations

from dataclasses import dataclass, field

from comfy_api.latest import io

from ..fillscope.compare.variants import DTYPES, STORAGES
from ..fillscope.pipelines.klein import BASE_GUIDANCE, MODEL_TYPES, TOKEN_MASKS
from ..fillscope.speed import KLEIN_STEP_CACHES, STEP_CACHES
from . import common as c
from . import tooltips as tips
from .base import FillScopeNode

CompareRun = io.Custom("FS_COMPARE_RUN")
CATEGORY = c.CATEGORY + "/compare"
IMPLEMENTATIONS = ("fillscope", "diffusers")
NATIVE = "native"  # ComfyUI's own MODEL as the denoiser: FillScope's text, condition, schedule and decode
# what diffusers' own pipelines always do where FillScope offers a choice (fillscope/compare/diffusers_runs.py)
DIFFUSERS_OWN = {"sd3_controlnet": {"residual_mapping": "block i <- residual int(i*23/24)"},
                 "klein": {"token_mask": "the mask resized bilinearly to the token grid"}}
TOLERANCES = ("1e-2", "1e-3", "1e-4", "1e-5", "1e-6", "1e-7")
ATTENTION = ("as loaded", "native", "_native_math", "_native_flash", "_native_efficient")


@dataclass
class RunDefinition:
    family: str  # the pipeline module's name: flux_fill, sd3_controlnet, klein
    stack: dict
    implementation: str = "fillscope"
    dtype: str = "as loaded"
    storage: str = "as loaded"
    attention: str = "as loaded"
    options: dict = field(default_factory=dict)  # the family's run keywords
    model: object = None  # ComfyUI's own MODEL (implementation "native")

    @property
    def runs_in(self) -> str:
        """The dtype the run computes in: its own, or (as loaded) its transformer's."""
        if self.dtype != "as loaded":
            return self.dtype
        return self.stack["transformer"].dtype if "transformer" in self.stack else "the MODEL's dtype"

    def describe(self) -> str:
        parts = [self.implementation, self.runs_in]
        if self.storage != "as loaded":
            parts.append(f"storage {self.storage}")
        if self.options.get("step_cache", "off") != "off":
            parts.append(f"step cache {self.options['step_cache']}")
        if self.attention != "as loaded":
            parts.append(f"attention {self.attention}")
        return ", ".join(parts)

    def summary(self) -> dict:
        """What the record (compare/record.py) says of this run, as spec.RunSpec.summary says it of a CLI run."""
        return {"describe": self.describe(),
                "spec": {"family": self.family, "implementation": self.implementation, "dtype": self.dtype,
                         "storage": self.storage, "attention": self.attention,
                         **{k: v for k, v in self.options.items() if isinstance(v, (int, float, str))}},
                "implementation": self.implementation, "dtype": self.runs_in, "storage": self.storage,
                "attention": self.attention, "step_cache": self.options.get("step_cache", "off")}


def run_inputs(step_caches=None, native: bool = False):
    """How a run is made, after the components and the family's options."""
    out = [
        io.Combo.Input("implementation", options=list(IMPLEMENTATIONS) + ([NATIVE] if native else []),
                       default="fillscope",
                       tooltip="fillscope: FillScope's pipeline. diffusers: diffusers' own pipeline on the same "
                               "loaded components, in this process." + (
                                   " native: ComfyUI's own MODEL (the model input) as the denoiser, with "
                                   "FillScope's text, condition, schedule and decode." if native else "")),
        io.Combo.Input("dtype", options=list(DTYPES), default="as loaded",
                       tooltip="Run in this dtype: a component loaded in another is copied and cast for this run "
                               "(its memory again while the run lasts)."),
        io.Combo.Input("storage", options=list(STORAGES), default="as loaded",
                       tooltip="fp8_e4m3fn: a copy of the transformer / T5 / Qwen3 with its block weights stored in "
                               "float8 (as the loaders' storage option)."),
        c.advanced(io.Combo.Input("attention", options=list(ATTENTION), default="as loaded", optional=True,
                                  tooltip="A diffusers attention backend for this run's transformer; put back after.")),
    ]
    if step_caches:
        out.append(c.advanced(io.Combo.Input("step_cache", options=list(step_caches), default="off", optional=True,
                                             tooltip="A diffusers step cache for this run (off: none).")))
    return out


def run_schema(node_id: str, display_name: str, description: str, inputs: list):
    """A Compare Run node's schema: its components and options in, the run definition out."""
    return io.Schema(node_id=node_id, display_name=display_name, category=CATEGORY, description=description,
                     inputs=inputs, outputs=[CompareRun.Output("run", display_name="run"), c.shapes_output()])


class _CompareRun(FillScopeNode):
    family: str
    components: tuple
    denoisers: tuple = ()  # (family, ComfyUI's MODEL) as the sampler's require_one_denoiser names them
    places_models = False  # a definition only: the Compare node places what it runs

    @classmethod
    def run(cls, rec, implementation, dtype, storage, attention="as loaded", model=None, **inputs):
        from ..fillscope.errors import FillScopeInputError

        stack = {name: inputs.pop(name) for name in cls.components if inputs.get(name) is not None}
        if model is not None and "transformer" in stack:  # the samplers' rule, in their words
            from .native_model import require_one_denoiser

            require_one_denoiser(stack["transformer"], model, *cls.denoisers)
        if implementation == NATIVE and model is None:
            raise FillScopeInputError("model", "is empty but implementation is native.",
                                      "wire ComfyUI's own model (UNETLoader) to model, or choose fillscope.")
        if implementation != NATIVE and "transformer" not in stack:
            raise FillScopeInputError("transformer", f"is empty but implementation is {implementation}.",
                                      "wire FillScope's transformer, or choose native with ComfyUI's model wired.")
        options = {k: v for k, v in inputs.items() if v is not None}
        if implementation == "diffusers":  # its pipeline has one way of its own: the menus' defaults are not asked of it
            for name in DIFFUSERS_OWN.get(cls.family, ()):
                if options.pop(name, None) is not None:
                    rec.note(f"{name}: diffusers' pipeline runs its own ({DIFFUSERS_OWN[cls.family][name]})")
        run = RunDefinition(cls.family, stack, implementation, dtype, storage, attention or "as loaded", options,
                            model if implementation == NATIVE else None)
        rec.fact("run", run.describe())
        return run


class FluxFillCompareRun(_CompareRun):
    family = "flux_fill"
    components = ("clip_l", "t5", "transformer", "vae")
    denoisers = ("FLUX Fill", "FLUX.1 Fill")
    title = "FLUX Fill compare run"

    @classmethod
    def define_schema(cls):
        B = c.bounds.FLUX_FILL
        return run_schema(
            "FillScopeFluxFillCompareRun", "FLUX Fill Compare Run",
            "One run of a comparison: FLUX.1 Fill's components and how the run is made.",
            [c.ClipL.Input("clip_l", tooltip=tips.CLIP_L), c.T5.Input("t5", tooltip=tips.T5),
             c.FluxFillModel.Input("transformer", optional=True,
                                   tooltip=tips.FLUX_FILL_TRANSFORMER + " (not needed for implementation native)"),
             c.Vae.Input("vae", tooltip="The FLUX.1 VAE (16 channels): encodes the condition, decodes the result."),
             io.Float.Input("guidance", default=30.0, min=B["guidance"].min, max=B["guidance"].max, step=0.5,
                            tooltip="Guidance embedding (FLUX.1 Fill [dev] is tuned for 30)."),
             *run_inputs(STEP_CACHES, native=True),
             io.Model.Input("model", optional=True,
                            tooltip="ComfyUI's own FLUX.1 Fill MODEL (UNETLoader): the denoiser of implementation "
                                    "native.")],
        )


class SD3ControlNetCompareRun(_CompareRun):
    family = "sd3_controlnet"
    components = ("clip_l", "clip_g", "t5", "transformer", "controlnet", "vae")
    denoisers = ("SD3", "SD3")
    title = "SD3 ControlNet compare run"

    @classmethod
    def define_schema(cls):
        B = c.bounds.SD3_CONTROLNET
        return run_schema(
            "FillScopeSD3ControlNetCompareRun", "SD3 ControlNet Compare Run",
            "One run of a comparison: SD3's components with the inpainting ControlNet, and how the run "
                "is made.",
            [c.ClipL.Input("clip_l", tooltip=tips.CLIP_L), c.ClipG.Input("clip_g", tooltip=tips.CLIP_G),
             c.T5.Input("t5", tooltip=tips.T5),
             c.SD3Model.Input("transformer", optional=True,
                              tooltip=tips.SD3_TRANSFORMER + " (not needed for implementation native)"),
             c.SD3ControlNet.Input("controlnet", tooltip=tips.SD3_CONTROLNET),
             c.Vae.Input("vae", tooltip="The SD3 VAE (16 channels): encodes the condition, decodes the result."),
             io.String.Input("negative_prompt", multiline=True, default="", tooltip="What CFG steers away from."),
             io.Float.Input("cfg", default=7.0, min=B["cfg"].min, max=B["cfg"].max, step=0.1,
                            tooltip="Classifier-free guidance; 1 = off."),
             io.Float.Input("control_scale", default=0.95, min=B["control_scale"].min,
                            max=B["control_scale"].max, step=0.01, tooltip="ControlNet residual scale."),
             *run_inputs(native=True),
             io.Model.Input("model", optional=True,
                            tooltip="ComfyUI's own SD3 / SD3.5 MODEL: the denoiser of implementation native (the "
                                    "ControlNet stays FillScope's)."),
             c.advanced(io.Combo.Input(
                 "residual_mapping", options=["one_to_one", "diffusers"], default="one_to_one", optional=True,
                 tooltip="one_to_one: residual i after block i, as the ControlNet was trained (and ComfyUI); "
                         "diffusers: >= 0.32's block i <- residual int(i*23/24), what diffusers' own pipeline "
                         "always runs."))],
        )


class KleinCompareRun(_CompareRun):
    family = "klein"
    components = ("qwen3", "transformer", "vae")
    title = "klein compare run"

    @classmethod
    def define_schema(cls):
        B = c.bounds.KLEIN
        return run_schema(
            "FillScopeKleinCompareRun", "Klein Compare Run",
            "One run of a comparison: FLUX.2 [klein]'s components and how the run is made.",
            [c.Qwen3.Input("qwen3", tooltip=tips.QWEN3),
             c.KleinModel.Input("transformer", tooltip=tips.KLEIN_TRANSFORMER),
             c.Vae.Input("vae", tooltip="The FLUX.2 VAE (32 channels, 2x2 patches): encodes the source, decodes "
                                        "the result."),
             io.Float.Input("guidance", default=BASE_GUIDANCE, min=B["guidance"].min, max=B["guidance"].max,
                            step=0.1, tooltip="CFG for base models; distilled models run without."),
             io.Combo.Input("model_type", options=list(MODEL_TYPES), default="auto",
                            tooltip="distilled or base; auto: the repository's model_index.json."),
             *run_inputs(KLEIN_STEP_CACHES),
             c.advanced(io.Combo.Input(
                 "token_mask", options=list(TOKEN_MASKS), default="cover", optional=True,
                 tooltip="cover: a token is repainted when any of its pixels is (FillScope's default). "
                         "bilinear: the mask resized to the token grid, what diffusers' pipeline runs."))],
        )


class Compare(FillScopeNode):
    title = "FillScope Compare"

    @classmethod
    def define_schema(cls):
        B = c.bounds.COMPARE
        return io.Schema(
            node_id="FillScopeCompare", display_name="Compare Runs", category=CATEGORY, is_output_node=True,
            description=("Runs one job two ways (two Compare Run nodes of one family) and compares every boundary "
                         "both runs pass: relative error, max abs and cosine, the first boundary, step and block "
                         "over the tolerance, PSNR and SSIM inside and outside the mask, a difference heat map. "
                         "The record goes to output/fillscope/ as JSON."),
            inputs=[CompareRun.Input("run_a", tooltip="Run A (a Compare Run node)."),
                    CompareRun.Input("run_b", tooltip="Run B, of the same family."),
                    io.Image.Input("image", tooltip="The image both runs inpaint."),
                    io.Mask.Input("mask", tooltip="1 = repaint (LoadImage's mask is 1 - alpha)."),
                    io.String.Input("prompt", multiline=True, default="", tooltip="The prompt both runs use."),
                    io.Int.Input("seed", default=0, min=B["seed"].min, max=B["seed"].max,
                                 control_after_generate=True,
                                 tooltip="The same seed (the same noise) for both runs."),
                    io.Int.Input("steps", default=4, min=B["steps"].min, max=B["steps"].max,
                                 tooltip="Steps of both runs: each step's denoiser output and latent are compared."),
                    c.advanced(io.Combo.Input("tolerance", options=list(TOLERANCES), default="1e-4", optional=True,
                                              tooltip="Relative error above which a boundary counts as different "
                                                      "(a menu: the canvas rounds small decimals in a number box).")),
                    c.advanced(io.Boolean.Input("blocks", default=False, optional=True,
                                                tooltip="Also compare every transformer block's output at every "
                                                        "call (more rows, more memory).")),
                    c.advanced(io.String.Input("filename_prefix", default="fillscope/compare", optional=True,
                                               tooltip="Where the JSON record and the table go, in the output "
                                                       "folder."))],
            outputs=[io.Image.Output("image_a", tooltip="Run A's image (the decode, before any paste-back)."),
                     io.Image.Output("image_b", tooltip="Run B's image."),
                     io.Image.Output("heatmap", tooltip="|A - B| per pixel, brightest at the 99.5th percentile; the "
                                                        "mask's outline in cyan."),
                     c.shapes_output()])

    @classmethod
    def prepare(cls, rec, run_a, run_b, **inputs):
        from ..fillscope.errors import FillScopeInputError

        if run_a.family != run_b.family:
            raise FillScopeInputError("run_b", f"is a {run_b.family} run and run_a a {run_a.family} run: a comparison "
                                               "runs one job two ways, in one family.",
                                      "wire two Compare Run nodes of the same family.")
        return {"run_a": run_a, "run_b": run_b, **inputs}

    @classmethod
    def run(cls, rec, run_a, run_b, image, mask, prompt, seed, steps, tolerance="1e-4", blocks=False,
            filename_prefix="fillscope/compare"):
        tolerance = float(tolerance)
        from ..fillscope.compare.diff import compare_captures, format_table
        from ..fillscope.compare.record import write_compare
        from ..fillscope.compare.runs import require_mask, run_on_stack
        from ..fillscope.compare.variants import stack_variant
        from ..fillscope.errors import FillScopeInputError
        from ..fillscope.masks import prepare_image_and_mask
        from . import memory
        from .inspect import output_stem

        rec.tensor("image", image, "input")
        rec.tensor("mask", mask, "input")
        prepared = prepare_image_and_mask(image, mask)
        require_mask(prepared, "mask", "paint the area to repaint in the mask (1 = repaint; LoadImage's mask is "
                                       "1 - alpha), then compare.")
        progress = c.progress_callback(2 * steps)
        results = []
        for k, run in enumerate((run_a, run_b)):
            stack, facts = stack_variant(run.stack, dtype=run.dtype, storage=run.storage)

            def callback(i, n, k=k):
                progress(k * steps + i, 2 * steps)

            try:
                if run.implementation == NATIVE:
                    native = native_flux_fill if run.family == "flux_fill" else native_sd3
                    result = native(rec, run, stack, prompt, prepared, steps, seed, callback)
                else:
                    with memory.use(*stack.values(), rec=rec):
                        result = run_on_stack(run.family, stack, prompt, prepared, steps=steps, seed=seed,
                                              implementation=run.implementation, blocks=blocks,
                                              attention=None if run.attention == "as loaded" else run.attention,
                                              facts=facts, callback=callback, **run.options)
            except FillScopeInputError as e:
                raise as_compare_input(e, "run_b" if k else "run_a") from None
            result.spec = run
            results.append(result)
            del stack
        a, b = results
        comparison = compare_captures(a.capture, b.capture, tolerance=tolerance, image_a=a.image, image_b=b.image,
                                      mask=a.mask)
        folder, stem, _ = output_stem(filename_prefix)
        paths = write_compare(comparison, a, b, folder, stem)
        rec.fact("A", a.spec.describe())
        rec.fact("B", b.spec.describe())
        rec.fact("compared", comparison.headline())
        rec.fact("record", str(paths["json"]))
        rec.fact("page", str(paths["html"]))
        for note in comparison.notes:
            rec.note(note)
        heat = _heatmap(comparison, a, b)
        # the headline first: the node's face shows the first lines (web/fillscope_table.js textSummary)
        text = "\n".join([comparison.headline(), f"A: {a.spec.describe()}", f"B: {b.spec.describe()}", "",
                          format_table(comparison, 60)])
        return io.NodeOutput(a.image, b.image, heat, None, ui={"text": [text]})


# the engine's names for what Compare Runs takes as `prompt` (the pipelines' and samplers' text inputs)
PROMPT_NAMES = ("text", "positive")


def as_compare_input(e, run: str):
    """An engine error raised while Compare Runs runs `run` ("run_a" / "run_b"), named as the inputs that hold the
    value: the engine's `text` / `positive` is this node's `prompt`; its `negative` is the negative_prompt of the
    Compare Run node wired to `run`; any other name is left as it is."""
    from ..fillscope.errors import FillScopeInputError

    if e.input_name in PROMPT_NAMES:
        return FillScopeInputError("prompt", e.problem, e.fix)
    if e.input_name == "negative":
        return FillScopeInputError(run, f"(the negative prompt of the Compare Run node wired here) {e.problem}", e.fix)
    return e


def native_flux_fill(rec, run, stack, prompt, prepared, steps, seed, callback):
    """FillScope's FLUX Fill stages with ComfyUI's own MODEL as the sampler's denoiser (nodes/native_model.py), every
    boundary captured: the text, the condition and the decode are FillScope's, the denoiser output at each step and
    the latents come from ComfyUI's model."""
    import time

    from ..fillscope.compare.capture import BoundaryCapture
    from ..fillscope.pipelines.flux_fill import build_fill_condition, encode_prompt, sample_flux_fill
    from . import memory, native_model

    capture, start = BoundaryCapture(), time.perf_counter()
    with memory.use(stack["clip_l"], stack["t5"], stack["vae"], rec=rec):
        text = encode_prompt(stack["clip_l"], stack["t5"], prompt, observe=capture)
        condition = build_fill_condition(stack["vae"], prepared, observe=capture)
    config = native_model.check_flux_fill_model(run.model, text, condition)
    options = {k: v for k, v in run.options.items() if k in ("guidance", "step_cache")}
    latent = native_model.run_native(run.model, condition.masked_latents.shape, lambda r: sample_flux_fill(
        native_model.flux_fill_denoiser(r, config), text, condition, steps=steps, seed=seed, callback=callback,
        observe=capture, **options))
    return _decoded(rec, stack["vae"], latent, prepared, capture, start)


def native_sd3(rec, run, stack, prompt, prepared, steps, seed, callback):
    """FillScope's SD3 ControlNet stages with ComfyUI's own SD3 MODEL as the denoiser (nodes/native_sd3.py): the text,
    the condition, the ControlNet (FillScope's, its residuals passed per joint block) and the decode are FillScope's."""
    import time

    from ..fillscope.compare.capture import BoundaryCapture
    from ..fillscope.pipelines.sd3_controlnet import (build_inpaint_condition, encode_prompt,
                                                      sample_sd3_controlnet_inpaint)
    from . import memory, native_model, native_sd3 as sd3

    options = dict(run.options)
    negative_prompt, cfg = options.pop("negative_prompt", ""), options.get("cfg", 7.0)
    encoders = stack["clip_l"], stack["clip_g"], stack["t5"]
    capture, start = BoundaryCapture(), time.perf_counter()
    with memory.use(*encoders, stack["vae"], rec=rec):
        positive = encode_prompt(*encoders, prompt, observe=capture)
        negative = encode_prompt(*encoders, negative_prompt) if cfg > 1.0 else None
        condition = build_inpaint_condition(stack["vae"], prepared, observe=capture)
    config = sd3.check_sd3_model(run.model, positive, condition, negative=negative, cfg=cfg,
                                 controlnet=stack["controlnet"])
    b, channels = condition.control.shape[0], condition.latent_channels
    shape = (b * (2 if cfg > 1.0 else 1), channels, *condition.control.shape[-2:])
    with memory.use(stack["controlnet"], rec=rec):
        latent = native_model.run_native(run.model, shape, lambda r: sample_sd3_controlnet_inpaint(
            sd3.sd3_denoiser(r, config), stack["controlnet"], positive, negative, condition, steps=steps, seed=seed,
            callback=callback, observe=capture, **options))
    return _decoded(rec, stack["vae"], latent, prepared, capture, start)


def _decoded(rec, vae, latent, prepared, capture, start):
    """A native run's end: FillScope's decode, captured, and the run's result (its spec set by the caller)."""
    import time

    from ..fillscope.compare.runs import RunResult
    from ..fillscope.decode import decode_to_image
    from . import memory

    with memory.use(vae, rec=rec):
        image = decode_to_image(vae, latent, observe=capture)
    return RunResult(None, capture, image.float().cpu(), prepared.paste_mask[..., 0].float().cpu(),
                     time.perf_counter() - start, {"denoiser": "ComfyUI's MODEL (apply_model)"})


def _heatmap(comparison, a, b):
    import torch

    from ..fillscope.compare.metrics import difference_heatmap

    if comparison.shapes_only or tuple(a.image.shape) != tuple(b.image.shape):
        return torch.zeros_like(a.image)
    return difference_heatmap(a.image, b.image, a.mask)[0]


NODES = [FluxFillCompareRun, SD3ControlNetCompareRun, KleinCompareRun, Compare]
