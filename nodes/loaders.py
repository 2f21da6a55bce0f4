"""One loader per component. Each takes a weight source, dtype and device and reports what it built."""

from __future__ import annotations

from comfy_api.latest import io

from . import common as c
from ..fillscope.trace.records import ShapeRecorder


def _common_inputs(tooltip: str):
    return [
        c.source_input(tooltip),
        io.Combo.Input("dtype", options=c.DTYPES, default="bf16", tooltip="Weight and compute dtype."),
        io.Combo.Input("device", options=c.DEVICES, default="auto", tooltip="auto = CUDA when available, else CPU. Meta weights always stay on the meta device."),
        io.Int.Input("placeholder_seed", default=0, min=0, max=2**31 - 1, tooltip="Seed of the deterministic placeholder values (used by 'placeholder' only)."),
    ]


def _record_component(rec: ShapeRecorder, comp) -> None:
    from ..fillscope.weights import count_parameters

    unique, tied = count_parameters(comp.model)
    rec.fact("class", type(comp.model).__name__)
    rec.fact("weights", comp.provenance)
    rec.fact("device", comp.device)
    rec.fact("dtype", comp.dtype)
    rec.fact("parameters (unique)", f"{unique:,}")
    if tied != unique:
        rec.fact("parameters (tied tensors counted per name)", f"{tied:,}")


class _Loader(io.ComfyNode):
    KIND = ""
    TITLE = ""
    OUTPUT = None

    @classmethod
    def validate_inputs(cls, source):
        return c.validate_source(source)


class LoadCLIPL(_Loader):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeLoadCLIPL",
            display_name="FillScope Load CLIP-L",
            category=c.CATEGORY + "/loaders",
            description="CLIP ViT-L/14 text encoder (the pooled vector FLUX conditions on).",
            inputs=_common_inputs("Where the CLIP-L weights come from (a repo's text_encoder/)."),
            outputs=[c.ClipL.Output("clip_l", display_name="clip_l"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, source, dtype, device, placeholder_seed) -> io.NodeOutput:
        from ..fillscope.text import load_clip_l

        rec = ShapeRecorder("FillScopeLoadCLIPL", "Load CLIP-L")
        comp = load_clip_l(c.resolve_source(source), dtype=dtype, device=device, seed=placeholder_seed,
                           tokenizer_fallback=c.tokenizer_folder("clip"))
        _record_component(rec, comp)
        return c.finish(rec, (), comp, wrap=(0,))


class LoadT5(_Loader):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeLoadT5",
            display_name="FillScope Load T5-XXL",
            category=c.CATEGORY + "/loaders",
            description="T5 v1.1 XXL encoder (the token sequence FLUX and SD3 attend to).",
            inputs=_common_inputs("Where the T5-XXL weights come from (a repo's text_encoder_2/)."),
            outputs=[c.T5.Output("t5", display_name="t5"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, source, dtype, device, placeholder_seed) -> io.NodeOutput:
        from ..fillscope.text import load_t5

        rec = ShapeRecorder("FillScopeLoadT5", "Load T5-XXL")
        comp = load_t5(c.resolve_source(source), dtype=dtype, device=device, seed=placeholder_seed,
                       tokenizer_fallback=c.tokenizer_folder("t5"))
        _record_component(rec, comp)
        return c.finish(rec, (), comp, wrap=(0,))


class LoadFluxFillTransformer(_Loader):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeLoadFluxFillTransformer",
            display_name="FillScope Load FLUX.1 Fill Transformer",
            category=c.CATEGORY + "/loaders",
            description="FLUX.1 Fill [dev] transformer: 19 double + 38 single blocks, 384 input channels.",
            inputs=_common_inputs("Where the FLUX.1 Fill transformer comes from (a repo's transformer/)."),
            outputs=[c.FluxFillModel.Output("transformer", display_name="transformer"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, source, dtype, device, placeholder_seed) -> io.NodeOutput:
        from ..fillscope.flux_fill import load_flux_fill_transformer

        rec = ShapeRecorder("FillScopeLoadFluxFillTransformer", "Load FLUX.1 Fill transformer")
        comp = load_flux_fill_transformer(c.resolve_source(source), dtype=dtype, device=device, seed=placeholder_seed)
        _record_component(rec, comp)
        cfg = comp.config
        rec.fact("blocks", f"{cfg.get('num_layers')} double + {cfg.get('num_single_layers')} single (static-config)")
        rec.static("hidden_states (per token)", [cfg.get("in_channels")], role="input")
        rec.static("velocity (per token)", [cfg.get("out_channels")], role="output")
        return c.finish(rec, (), comp, wrap=(0,))


class LoadVAE(_Loader):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeLoadVAE",
            display_name="FillScope Load VAE",
            category=c.CATEGORY + "/loaders",
            description="FLUX autoencoder (16 latent channels, 8x; scale 0.3611, shift 0.1159).",
            inputs=_common_inputs("Where the VAE comes from (a repo's vae/)."),
            outputs=[c.Vae.Output("vae", display_name="vae"), c.shapes_output()],
        )

    @classmethod
    def execute(cls, source, dtype, device, placeholder_seed) -> io.NodeOutput:
        from ..fillscope.vae import latent_format, load_vae

        rec = ShapeRecorder("FillScopeLoadVAE", "Load VAE")
        comp = load_vae(c.resolve_source(source), dtype=dtype, device=device, seed=placeholder_seed)
        _record_component(rec, comp)
        fmt = latent_format(comp)
        rec.fact("latent format", f"{fmt.channels} ch, z = (mean - {fmt.shift}) * {fmt.scale}")
        return c.finish(rec, (), comp, wrap=(0,))


NODES = [LoadCLIPL, LoadT5, LoadFluxFillTransformer, LoadVAE]
