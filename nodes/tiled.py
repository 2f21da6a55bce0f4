"""Tiled nodes (issue 23): one node per family that inpaints a large image by overlapping tiles, all-in-one like the
Trace nodes (it takes the loaded components, not a condition and a sampler), over the engine's
fillscope.tiled.run_tiled. The node is its schema and the record: each tile's box, tokens and transformer input
shape on the shapes table, the tile map (record key "tiles") the Shapes Report's page draws."""

from __future__ import annotations

import re

from comfy_api.latest import io

from ..fillscope.compositing.tiles import check_tile_settings
from ..fillscope.masks import Geometry
from ..fillscope.pipelines.klein import BASE_GUIDANCE, DISTILLED_STEPS, MODEL_TYPES
from ..fillscope.specs import sd3_side_limit
from ..fillscope.tiled import MODES, check_room_for_image, run_tiled
from . import common as c
from . import tooltips as tips
from .base import FillScopeNode

T = c.bounds.TILED
TILE_NAME = re.compile(r"^tile (\d+) (.+)$")  # how run_tiled's observe names a tile's tensors
PER_TILE = ("transformer.input", "transformer.output")  # recorded for every tile; a tile's other tensors once
MASK_OPTIONS = ("invert_mask", "threshold", "grow", "feather", "masked_fill")  # c.mask_inputs' that tiles take
TOKEN_PX = 16  # one token of every family: 8x VAE (FLUX.1 / SD3) x 2x2 patches, or FLUX.2's 16x VAE


def tiled_inputs(*, steps: int, mask_optional: bool = False):
    """The inputs every tiled node takes after its components: image, mask, prompt, the tile settings, seed, steps."""
    return [
        io.Image.Input("image", tooltip=tips.TILED_IMAGE),
        io.Mask.Input("mask", optional=mask_optional,
                      tooltip=tips.TILED_MASK_KLEIN if mask_optional else tips.TILED_MASK),
        io.String.Input("prompt", multiline=True, default="", tooltip=tips.TILED_PROMPT),
        io.Int.Input("tile", default=1024, min=T["tile"].min, max=T["tile"].max, step=TOKEN_PX, tooltip=tips.TILE),
        io.Float.Input("overlap", default=0.15, min=T["overlap"].min, max=T["overlap"].max, step=0.01,
                       tooltip=tips.OVERLAP),
        io.Combo.Input("mode", options=list(MODES), default="independent", tooltip=tips.TILED_MODE),
        io.Boolean.Input("poisson", default=False, tooltip=tips.TILED_POISSON),
        io.Int.Input("seed", default=0, min=c.bounds.SEED.min, max=c.bounds.SEED.max, control_after_generate=True,
                     tooltip=tips.TILED_SEED),
        io.Int.Input("steps", default=steps, min=c.bounds.STEPS.min, max=c.bounds.STEPS.max, tooltip=tips.STEPS),
    ]


def mask_options():
    """invert_mask, threshold, grow, feather and masked_fill as every condition node offers them (c.mask_inputs);
    not size_mode: tiles are always padded (a crop would leave pixels no tile samples)."""
    return [i for i in c.mask_inputs() if i.id in MASK_OPTIONS]


class _Tiled(FillScopeNode):
    """Shared prepare and run; a family's node is its schema, `family`, `components` and `options` (the family's
    `run` keywords among its inputs)."""

    family: str
    components: tuple
    options: tuple

    @classmethod
    def prepare(cls, rec, image, tile, overlap, mask=None, **inputs):
        """Before any model is placed: the tile settings (the engine's check, the nodes' range), the mask."""
        check_tile_settings(tile, overlap)
        check_room_for_image(image)  # a 16384 px image would take the server down: refused before any copy
        rec.tensor("image", image, "input")
        mask_given = mask is not None
        if mask is None:  # klein without a mask: every pixel is repainted (an edit of the whole picture)
            import torch

            mask = torch.ones(image.shape[:3], dtype=torch.float32, device=image.device)
            rec.note("no mask: the whole image is repainted, each tile next to its own source as klein's reference "
                     "(an edit); strength below 1 keeps more of the source's layout")
        else:
            rec.tensor("mask", mask, "input")
        return {"image": image, "mask": mask, "tile": tile, "overlap": overlap, "mask_drawn": mask_given, **inputs}

    @classmethod
    def run(cls, rec, image, mask, prompt, tile, overlap, mode, poisson, seed, steps, invert_mask, threshold, grow,
            feather, masked_fill="none", mask_drawn=True, **inputs):
        stack = {name: inputs.pop(name) for name in cls.components}
        family_kwargs = {name: inputs[name] for name in cls.options if name in inputs}
        extra = {"poisson": True} if poisson else {}  # passed only when on: the engine's poisson is independent only
        options = {"invert": invert_mask, "threshold": threshold, "grow": grow, "feather": feather,
                   "masked_fill": masked_fill if masked_fill is not None else "none"}
        observe = _Observer(rec)
        done = run_tiled(cls.family, stack, prompt, image, mask, tile=tile, overlap=overlap, mode=mode, seed=seed,
                         steps=steps, callback=c.progress_callback(steps), observe=observe, mask_options=options,
                         **extra, **family_kwargs)
        if not mask_drawn:  # the all-repaint mask prepare made: nobody drew it, so nothing to say about binarising it
            done.notes = [n for n in done.notes if not n.startswith("mask binarised")]
            done.warnings = [w for w in done.warnings if "plain text-to-image" not in w]
        record_tiles(rec, done, image, tile=tile, overlap=overlap, mode=mode, first=observe.first,
                     first_sampled=observe.first_sampled)
        out = done.image.float().cpu()
        rec.tensor("image", out, "output")
        return out


class _Observer:
    """run_tiled's observe on the record: each tile's transformer input and output as "tile N ...", and every boundary
    tensor once under its own name (the first tile's that has it; mode shared: the whole run's), so the family's
    boundary table reads one tile's shapes; every name once (a sampler observes some tensors at every step)."""

    def __init__(self, rec):
        self.rec, self.seen, self.first, self.first_sampled = rec, set(), None, None

    def __call__(self, name: str, tensor) -> None:
        if not hasattr(tensor, "shape"):
            return
        found = TILE_NAME.match(name)
        if found:
            index, inner = int(found.group(1)), found.group(2)
            if self.first is None:
                self.first = index
            if inner == "transformer.input" and self.first_sampled is None:
                self.first_sampled = index
            if inner in PER_TILE:
                self._once(name, tensor)
            # under its own name from the first tile that has it: a tile planned but not sampled (no repaint pixel
            # in it) gives its condition only, so the transformer's boundary comes from the first sampled tile
            self._once(inner, tensor)
        else:
            self._once(name, tensor)

    def _once(self, name, tensor):
        if name not in self.seen:
            self.seen.add(name)
            self.rec.observe(name, tensor)


def record_tiles(rec, done, image, *, tile: int, overlap: float, mode: str, first, first_sampled=None) -> None:
    """The run's tiles on the record: facts (the plan, one line per tile), notes and warnings, the tile map under
    the record key "tiles" (the Shapes Report's page draws it: fillscope/trace/report/shapes_page.py)."""
    height, width = int(image.shape[1]), int(image.shape[2])
    grid_h, grid_w = -(-height // TOKEN_PX) * TOKEN_PX, -(-width // TOKEN_PX) * TOKEN_PX
    rec.geometry(Geometry(height, width, grid_h, grid_w, "exact" if (grid_h, grid_w) == (height, width) else "pad"))
    records = done.records
    sampled = [r for r in records if r.get("sampled")]
    rec.fact("mode", mode)
    rec.fact("tile", f"{tile} px, overlap {overlap:g}")
    rec.fact("tiles", f"{len(records)} planned (meeting the mask grown by the overlap), {len(sampled)} sampled")
    if sampled:
        tokens = sorted({r["tokens"] for r in sampled})
        rec.fact("tokens per tile", ", ".join(str(t) for t in tokens))
        rec.fact("tile seconds", f"{sum(r['seconds'] for r in records):.2f} s in all (measured)")
    for r in records:
        x0, y0, x1, y1 = r["box"]
        what = (f"{r['tokens']} tokens, transformer input {r['transformer_input']}" if r.get("sampled")
                else "not sampled (no repaint pixel in it)")
        calls = f", {r['calls']} calls" if "calls" in r else ""
        rec.fact(f"tile {r['index']}", f"box x {x0}-{x1}, y {y0}-{y1} (row {r['row']}, col {r['col']}): {what}"
                                       f"{calls}, {r['seconds']} s")
    if first is not None and mode == "independent":
        which = f"tile {first}'s" if first_sampled in (None, first) else \
            f"tile {first}'s, the transformer's tile {first_sampled}'s (the first sampled)"
        rec.note(f"boundary tensors without a tile number are {which} (each tile runs the family's whole "
                 "pipeline); 'tile N transformer.input' is each tile's")
    for n in done.notes:
        rec.note(n)
    for w in done.warnings:
        rec.warn(w)
    rec.record["tiles"] = {
        "width": width, "height": height, "tile": tile, "overlap": overlap, "mode": mode,
        "tiles": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()
                   if k in ("index", "box", "row", "col", "sampled", "tokens", "repaint_pixels", "calls", "seconds")}
                  for r in records]}


# ---- the three families ------------------------------------------------------------------------------------------


class FluxFillTiledInpaint(_Tiled):
    family = "flux-fill"
    components = ("clip_l", "t5", "transformer", "vae")
    options = ("guidance", "denoise")
    title = "FLUX Fill tiled inpaint"
    table = "flux_fill"

    @classmethod
    def define_schema(cls):
        B = c.bounds.FLUX_FILL
        return io.Schema(
            node_id="FillScopeFluxFillTiledInpaint",
            display_name="FLUX Fill Tiled Inpaint",
            category=c.CATEGORY + "/flux fill",
            description=("Inpaints a large image with FLUX.1 Fill by overlapping tiles: each tile (1024 px: 4096 "
                         "tokens, FLUX's native size) sampled on its own (independent) or all of them in one sampler that "
                         "averages the overlaps every step (shared); pixels outside the mask stay the source's."),
            inputs=[c.ClipL.Input("clip_l", tooltip=tips.CLIP_L), c.T5.Input("t5", tooltip=tips.T5),
                    c.FluxFillModel.Input("transformer", tooltip=tips.FLUX_FILL_TRANSFORMER),
                    c.Vae.Input("vae", tooltip=tips.TILED_VAE_FLUX), *tiled_inputs(steps=28),
                    io.Float.Input("guidance", default=30.0, min=B["guidance"].min, max=B["guidance"].max, step=0.5,
                                   tooltip="Guidance embedding (FLUX.1 Fill [dev] is tuned for 30)."),
                    io.Float.Input("denoise", default=1.0, min=B["denoise"].min, max=B["denoise"].max, step=0.01,
                                   tooltip=tips.TILED_DENOISE),
                    *mask_options()],
            outputs=[io.Image.Output("inpainted"), c.shapes_output()],
        )


class SD3ControlNetTiledInpaint(_Tiled):
    family = "sd3-controlnet-inpaint"
    components = ("clip_l", "clip_g", "t5", "transformer", "controlnet", "vae")
    options = ("negative_prompt", "cfg", "control_scale", "control_start", "control_end", "shift", "denoise",
               "residual_mapping")
    title = "SD3 ControlNet tiled inpaint"
    table = "sd3_controlnet"

    @classmethod
    def prepare(cls, rec, **inputs):
        rec.fact("largest side (position-embedding grid)", sd3_side_limit().explain())
        return super().prepare(rec, **inputs)

    @classmethod
    def define_schema(cls):
        B = c.bounds.SD3_CONTROLNET
        return io.Schema(
            node_id="FillScopeSD3ControlNetTiledInpaint",
            display_name="SD3 ControlNet Tiled Inpaint",
            category=c.CATEGORY + "/sd3 controlnet",
            description=("Inpaints a large image with SD3 and the inpainting ControlNet by overlapping tiles (CFG "
                         "with the negative prompt on each); pixels outside the mask stay the source's."),
            inputs=[c.ClipL.Input("clip_l", tooltip=tips.CLIP_L), c.ClipG.Input("clip_g", tooltip=tips.CLIP_G),
                    c.T5.Input("t5", tooltip=tips.T5), c.SD3Model.Input("transformer", tooltip=tips.SD3_TRANSFORMER),
                    c.SD3ControlNet.Input("controlnet", tooltip=tips.SD3_CONTROLNET),
                    c.Vae.Input("vae", tooltip=tips.TILED_VAE_SD3), *tiled_inputs(steps=28),
                    io.String.Input("negative_prompt", multiline=True, default="", tooltip=tips.TILED_NEGATIVE),
                    io.Float.Input("cfg", default=7.0, min=B["cfg"].min, max=B["cfg"].max, step=0.1,
                                   tooltip="Classifier-free guidance; 1 = off (the negative prompt is not encoded)."),
                    io.Float.Input("control_scale", default=0.95, min=B["control_scale"].min,
                                   max=B["control_scale"].max, step=0.01,
                                   tooltip="ControlNet residual scale (0.95 on the model card)."),
                    io.Float.Input("control_start", default=0.0, min=B["control_start"].min,
                                   max=B["control_start"].max, step=0.01, tooltip=tips.CONTROL_START),
                    io.Float.Input("control_end", default=1.0, min=B["control_end"].min, max=B["control_end"].max,
                                   step=0.01, tooltip=tips.CONTROL_END),
                    io.Float.Input("shift", default=3.0, min=B["shift"].min, max=B["shift"].max, step=0.1,
                                   tooltip="Static schedule shift (SD3: 3.0)."),
                    io.Float.Input("denoise", default=1.0, min=B["denoise"].min, max=B["denoise"].max, step=0.01,
                                   tooltip=tips.TILED_DENOISE),
                    c.advanced(io.Combo.Input(
                        "residual_mapping", options=["one_to_one", "diffusers"], default="one_to_one", optional=True,
                        tooltip="one_to_one: residual i after block i, as the ControlNet was trained (and ComfyUI). "
                                "diffusers: >= 0.32's block i <- residual int(i*23/24).")),
                    *mask_options()],
            outputs=[io.Image.Output("inpainted"), c.shapes_output()],
        )


class KleinTiledInpaint(_Tiled):
    family = "klein"
    components = ("qwen3", "transformer", "vae")
    options = ("negative_prompt", "guidance", "model_type", "strength")
    title = "klein tiled inpaint"
    table = "klein"

    @classmethod
    def define_schema(cls):
        B = c.bounds.KLEIN
        return io.Schema(
            node_id="FillScopeKleinTiledInpaint",
            display_name="Klein Tiled Inpaint & Edit",
            category=c.CATEGORY + "/flux2 klein",
            description=("Inpaints a large image with FLUX.2 [klein] by overlapping tiles, each tile next to its own "
                         "source as reference tokens; without a mask every pixel is repainted (an edit of the whole "
                         "picture). Pixels outside the mask stay the source's."),
            inputs=[c.Qwen3.Input("qwen3", tooltip=tips.QWEN3),
                    c.KleinModel.Input("transformer", tooltip=tips.KLEIN_TRANSFORMER),
                    c.Vae.Input("vae", tooltip=tips.TILED_VAE_KLEIN),
                    *tiled_inputs(steps=DISTILLED_STEPS, mask_optional=True),
                    io.Float.Input("guidance", default=BASE_GUIDANCE, min=B["guidance"].min, max=B["guidance"].max,
                                   step=0.1, tooltip="Classifier-free guidance for base models (4.0; 1 = off). "
                                                     "Ignored by distilled models, which run without CFG."),
                    io.Float.Input("strength", default=1.0, min=B["strength"].min, max=B["strength"].max, step=0.01,
                                   tooltip="1 repaints from noise; 0.3-0.7 starts from the noised source and runs the "
                                           "last steps, keeping its layout and colours."),
                    io.Combo.Input("model_type", options=list(MODEL_TYPES), default="auto",
                                   tooltip="distilled (4 steps, no guidance) or base (~50 steps, CFG with the negative "
                                           "prompt); auto: the repository's model_index.json, else distilled."),
                    io.String.Input("negative_prompt", multiline=True, default="", tooltip=tips.TILED_NEGATIVE),
                    *mask_options()],
            outputs=[io.Image.Output("inpainted"), c.shapes_output()],
        )


NODES = [FluxFillTiledInpaint, SD3ControlNetTiledInpaint, KleinTiledInpaint]
