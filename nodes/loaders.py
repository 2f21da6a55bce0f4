"""One loader per component. Each takes a weight source, dtype and device and reports what it built.

A source is a diffusers folder (models/diffusers), a single .safetensors file listed as "<ComfyUI folder>/<file>"
(the folders the component's files live in, plus checkpoints/ files that bundle it), 'placeholder' or 'meta'.

A loader added by hand starts on the first entry of its menu that holds its component (read from the file's header or
the folder's model_index.json / config.json), never silently on meta: meta and placeholder come last in the menu and
are the default only when no model file is there (and a meta graph's decoded image says it is blank). The node face
shows source, dtype and what picks the model (kind, variant, model_type) first; device, placeholder_seed, memory and
storage are optional inputs flagged `advanced` (a frontend that honours the flag folds them behind "Show Advanced";
frontend 1.32.9 reads it but still shows them), in the same widget order as before, so saved workflows load."""

from __future__ import annotations

import json
from pathlib import Path

from comfy_api.latest import io

from ..fillscope.checkpoints import WrongKindError
from ..fillscope.fp8 import store_blocks_in_fp8
from ..fillscope.pipelines.flux_fill import load_flux_fill_transformer
from ..fillscope.pipelines.klein import load_klein_transformer, resolve_distilled, transformer_variant
from ..fillscope.pipelines.sd3_controlnet import (
    load_sd3_controlnet,
    load_sd3_transformer,
)
from ..fillscope.placement import RESIDENCY, resolve_policy
from ..fillscope.specs import COMPONENTS, PIPELINE_LAYOUTS
from ..fillscope.text import load_clip_g, load_clip_l, load_qwen3, load_t5
from ..fillscope.trace.records import ShapeRecorder
from ..fillscope.vae import VAE_KINDS, describe_widths, latent_format, load_vae
from ..fillscope.weights import count_parameters, resolve_device
from . import common as c
from .common import advanced
from . import memory as comfy_memory  # (the loaders' `memory` input shadows the module name)
from .base import FillScopeNode


class _Loader(FillScopeNode):
    """Shared schema and run; a subclass names its component and how to load and describe it. The record's
    title is the display name (FillScopeNode's default)."""

    NODE_ID = ""
    # the node as the pack's messages name it ("load it with FillScope Load VAE"); on the canvas, where ComfyUI's
    # node-source badge already says FillScope, without "FillScope " (or CANVAS where that is a core node's name)
    DISPLAY = ""
    CANVAS = ""
    DESCRIPTION = ""
    SOURCE_TOOLTIP = ""
    SOCKET = None
    OUTPUT = ""
    KINDS: tuple = ()  # component kinds whose single files this loader lists
    FP8_STORAGE = False  # offers `storage`: the blocks' weights in fp8 (the big models)

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id=cls.NODE_ID,
            display_name=cls.CANVAS or cls.DISPLAY.removeprefix("FillScope "),
            category=c.CATEGORY + "/loaders",
            description=cls.DESCRIPTION,
            inputs=[
                cls.source_input(),
                *cls.extra_inputs(),
                io.Combo.Input("dtype", options=c.DTYPES, default="bf16", tooltip="Weight and compute dtype."),
                advanced(io.Combo.Input(
                    "device", options=c.DEVICES, default="auto", optional=True,
                    tooltip="auto = CUDA when available, else CPU. Meta weights always stay on the meta device.")),
                advanced(io.Int.Input(
                    "placeholder_seed", default=0, min=0, max=2**31 - 1, optional=True,
                    tooltip="Seed of the deterministic placeholder values (used by 'placeholder' only).")),
                advanced(io.Combo.Input(
                    "memory", options=["auto", "keep", "offload", "sequential"], default="auto", optional=True,
                    tooltip="Where the weights live between uses. auto: stay on the GPU after use until another "
                            "FillScope component needs the room (FillScope never holds more than its largest component "
                            "or the current node's needs; FLUX Fill 1024 bf16: ~22.6 GiB peak, estimated); keep: loaded onto the GPU "
                            "and left there (fastest on 40 GB+ cards); offload: back to CPU memory after every use; "
                            "sequential: streamed module by module (smallest VRAM, slowest).",
                )),
                *cls.storage_inputs(),
            ],
            outputs=[cls.SOCKET.Output(cls.OUTPUT, display_name=cls.OUTPUT), c.shapes_output()],
        )

    @classmethod
    def source_input(cls):
        options = c.source_options(cls.KINDS)
        return io.Combo.Input(
            "source",
            options=options,
            default=default_source(options, cls.KINDS)[0],
            tooltip=cls.SOURCE_TOOLTIP
            + " A diffusers-format folder under models/diffusers, a single .safetensors file ('<model folder>/<file>';"
            " its kind is read from the file and checked), 'placeholder' (full topology, deterministic values, needs"
            " the memory of the real model) or 'meta' (full topology, shapes only, no memory: the decoded image is"
            " blank). A new node starts on the first model file found here.",
        )

    @classmethod
    def validate_inputs(cls, source):
        return c.validate_source(source)

    @classmethod
    def fingerprint_inputs(cls, source, **_):
        """A changed or repaired file reloads: ComfyUI re-runs the loader when the weights on disk change."""
        return c.source_fingerprint(source)

    @classmethod
    def extra_inputs(cls) -> list:
        return []

    @classmethod
    def storage_inputs(cls) -> list:
        if not cls.FP8_STORAGE:
            return []
        return [advanced(io.Combo.Input(
            "storage", options=["as loaded", "fp8_e4m3fn"], default="as loaded", optional=True,
            tooltip="fp8_e4m3fn: the repeated blocks' weights are kept in float8 (half the memory of bf16) and upcast "
                    "to the dtype one layer at a time; embedders, norms and output layers stay as loaded. For 12-16 GB "
                    "cards; outputs differ slightly from bf16 weights. Files that are already fp8 stay as they are."))]

    @classmethod
    def run(cls, rec, source, dtype, device="auto", placeholder_seed=0, memory="auto", storage="as loaded", **extra):
        resolved = c.resolve_source(source)
        compute = resolve_device(device, str(resolved))
        # only `keep` loads straight onto the GPU; the others wait in CPU memory until a node needs them, so
        # loading a whole graph never holds every component on the card at once
        load_on = compute if resolve_policy(memory) == "keep" or compute == "meta" else "cpu"
        try:
            comp = cls.load(resolved, dtype=dtype, device=load_on, seed=placeholder_seed, **extra)
        except WrongKindError as e:  # a file of another kind: named with this pack's and ComfyUI's loader nodes
            raise e.retold(describe_loader) from None
        if storage == "fp8_e4m3fn":
            comp.extras.setdefault("facts", {})["fp8 storage"] = store_blocks_in_fp8(comp)
        comp.extras["memory"] = memory
        comp.extras["compute_device"] = compute
        RESIDENCY.register(comp, memory)  # after any fp8 cast: the budget counts the bytes it holds
        if memory == "keep" and compute != "meta":
            with comfy_memory.use(comp, rec=rec):  # on the GPU already: ComfyUI counts it now, so /free can release it
                pass
        rec.fact("memory policy", memory)
        rec.fact("compute device", compute)
        unique, tied = count_parameters(comp.model)
        rec.fact("class", type(comp.model).__name__)
        rec.fact("weights", comp.provenance)
        rec.fact("device", comp.device)
        rec.fact("dtype", comp.dtype)
        rec.fact("parameters (unique)", f"{unique:,}")
        if tied != unique:
            rec.fact("parameters (tied tensors counted per name)", f"{tied:,}")
        for name, value in comp.extras.get("facts", {}).items():
            rec.fact(name, value)
        for note in comp.extras.get("notes", []):
            rec.note(note)
        if c.fingerprint_note(resolved):  # a folder too big (or too deep) to watch whole
            rec.note(c.fingerprint_note(resolved))
        cls.describe(rec, comp)
        return comp

    @classmethod
    def load(cls, source, **kw):
        raise NotImplementedError

    @classmethod
    def describe(cls, rec: ShapeRecorder, comp) -> None:
        pass


class LoadCLIPL(_Loader):
    NODE_ID = "FillScopeLoadCLIPL"
    DISPLAY = "FillScope Load CLIP-L"
    DESCRIPTION = "CLIP ViT-L/14 text encoder (the pooled vector FLUX conditions on)."
    SOURCE_TOOLTIP = "Where the CLIP-L weights come from (a repo's text_encoder/, text_encoders/clip_l.safetensors, or an SD3 checkpoint)."
    SOCKET = c.ClipL
    KINDS = ("clip_l",)
    OUTPUT = "clip_l"

    @classmethod
    def load(cls, source, **kw):
        return load_clip_l(source, tokenizer_fallback=c.tokenizer_folder("clip"), **kw)


class LoadT5(_Loader):
    NODE_ID = "FillScopeLoadT5"
    DISPLAY = "FillScope Load T5-XXL"
    DESCRIPTION = "T5 v1.1 XXL encoder (the token sequence FLUX and SD3 attend to)."
    SOURCE_TOOLTIP = ("Where the T5-XXL weights come from (a repo's text_encoder_2/, text_encoders/t5xxl_fp16.safetensors "
                      "or an fp8 file: fp8 weights stay fp8 and are computed in the chosen dtype layer by layer).")
    SOCKET = c.T5
    KINDS = ("t5_xxl",)
    FP8_STORAGE = True
    OUTPUT = "t5"

    @classmethod
    def load(cls, source, **kw):
        return load_t5(source, tokenizer_fallback=c.tokenizer_folder("t5"), **kw)


class LoadFluxFillTransformer(_Loader):
    NODE_ID = "FillScopeLoadFluxFillTransformer"
    DISPLAY = "FillScope Load FLUX.1 Fill Transformer"
    DESCRIPTION = "FLUX.1 Fill [dev] transformer: 19 double + 38 single blocks, 384 input channels."
    SOURCE_TOOLTIP = "Where the FLUX.1 Fill transformer comes from (a repo's transformer/, or diffusion_models/flux1-fill-dev.safetensors)."
    SOCKET = c.FluxFillModel
    KINDS = ("flux_fill_transformer",)
    FP8_STORAGE = True
    OUTPUT = "transformer"

    @classmethod
    def load(cls, source, **kw):
        return load_flux_fill_transformer(source, **kw)

    @classmethod
    def describe(cls, rec, comp):
        cfg = comp.config
        rec.fact("blocks", f"{cfg.get('num_layers')} double + {cfg.get('num_single_layers')} single (static-config)")
        rec.static("hidden_states (per token)", [cfg.get("in_channels")], role="input")
        rec.static("velocity (per token)", [cfg.get("out_channels")], role="output")


class LoadVAE(_Loader):
    NODE_ID = "FillScopeLoadVAE"
    DISPLAY = "FillScope Load VAE"
    CANVAS = "Load VAE (FLUX.1 / SD3 / FLUX.2)"  # ComfyUI's VAELoader is "Load VAE"
    title = "Load VAE"
    DESCRIPTION = ("FLUX or SD3 autoencoder (16 latent channels, 8x; FLUX scale 0.3611 / shift 0.1159, SD3 1.5305 / "
                   "0.0609) or the FLUX.2 autoencoder of klein (32 channels, 2x2 patches -> 128 at 16x, BatchNorm-normalised).")
    SOURCE_TOOLTIP = ("Where the VAE comes from (a repo's vae/, vae/ae.safetensors, vae/flux2-vae.safetensors, or a "
                      "checkpoint's VAE).")
    SOCKET = c.Vae
    KINDS = ("flux_vae", "sd3_vae", "flux2_vae")
    OUTPUT = "vae"

    @classmethod
    def extra_inputs(cls):
        kind = default_source(c.source_options(cls.KINDS), cls.KINDS)[1]  # the kind of the default source
        return [io.Combo.Input("kind", options=list(VAE_KINDS), default=(kind or "flux_vae").removesuffix("_vae"),
                               tooltip="Which VAE: flux (FLUX.1 Fill), sd3 (SD3 / SD3.5) or flux2 (FLUX.2 [klein]). A "
                                       "folder's config must agree; a standalone flux/sd3 VAE file (same shapes for "
                                       "both) takes its scale and shift from this.")]

    @classmethod
    def load(cls, source, **kw):
        return load_vae(source, **kw)

    @classmethod
    def describe(cls, rec, comp):
        fmt = latent_format(comp)
        if comp.kind == "flux2_vae":
            rec.fact("latent format", f"{describe_widths(comp)}, BatchNorm-normalised")
        else:
            rec.fact("latent format", f"{fmt.channels} ch, z = (mean - {fmt.shift}) * {fmt.scale}")
            from .wire_warnings import family_by_name

            name = str(comp.source).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]  # the file's or folder's own name
            told = family_by_name(name) if comp.kind in ("flux_vae", "sd3_vae") else None
            chosen = {"flux_vae": "FLUX.1", "sd3_vae": "SD3"}.get(comp.kind)
            if told and told[0] in ("FLUX.1", "SD3") and told[0] != chosen:  # same shapes: the name is all there is
                rec.warn(f"kind {comp.kind.removesuffix('_vae')}, but this VAE looks like {told[0]}'s ({told[1]}); the "
                         f"two have the same shapes, so the latents take {chosen}'s scale and shift as kind says: if it "
                         f"is {told[0]}'s, set kind {'flux' if told[0] == 'FLUX.1' else 'sd3'}")


class LoadCLIPG(_Loader):
    NODE_ID = "FillScopeLoadCLIPG"
    DISPLAY = "FillScope Load CLIP-G"
    DESCRIPTION = "OpenCLIP ViT-bigG/14 text encoder with its projection (SD3's second CLIP)."
    SOURCE_TOOLTIP = "Where the CLIP-G weights come from (an SD3 repo's text_encoder_2/, text_encoders/clip_g.safetensors, or an SD3 checkpoint)."
    SOCKET = c.ClipG
    KINDS = ("clip_g",)
    OUTPUT = "clip_g"

    @classmethod
    def load(cls, source, **kw):
        return load_clip_g(source, tokenizer_fallback=c.tokenizer_folder("clip"), **kw)


class LoadSD3Transformer(_Loader):
    NODE_ID = "FillScopeLoadSD3Transformer"
    DISPLAY = "FillScope Load SD3 Transformer"
    DESCRIPTION = "SD3 / SD3.5 MMDiT (SD3-medium: 24 joint blocks, width 1536)."
    SOURCE_TOOLTIP = "Where the SD3 transformer comes from (an SD3 repo's transformer/, or an SD3 / SD3.5 .safetensors file)."
    SOCKET = c.SD3Model
    KINDS = ("sd3_transformer",)
    FP8_STORAGE = True
    OUTPUT = "transformer"

    @classmethod
    def extra_inputs(cls):
        variants = list(COMPONENTS["sd3_transformer"].variants)
        return [io.Combo.Input("variant", options=variants, default=variants[0],
                               tooltip="Topology for placeholder/meta; a folder or file brings its own.")]

    @classmethod
    def load(cls, source, **kw):
        return load_sd3_transformer(source, **kw)

    @classmethod
    def describe(cls, rec, comp):
        cfg = comp.config
        width = cfg.get("num_attention_heads", 0) * cfg.get("attention_head_dim", 0)
        rec.fact("blocks", f"{cfg.get('num_layers')} joint blocks, width {width} (static-config)")


class LoadSD3ControlNet(_Loader):
    NODE_ID = "FillScopeLoadSD3InpaintControlNet"
    DISPLAY = "FillScope Load SD3 Inpaint ControlNet"
    DESCRIPTION = "alimama-creative SD3 inpainting ControlNet: 23 blocks, 16 latent + 1 mask input channels."
    SOURCE_TOOLTIP = ("Where the ControlNet comes from (the SD3-Controlnet-Inpainting folder, a pipeline repo's controlnet/, "
                      "or its diffusion_pytorch_model.safetensors in models/controlnet).")
    SOCKET = c.SD3ControlNet
    KINDS = ("sd3_controlnet",)
    FP8_STORAGE = True
    OUTPUT = "controlnet"

    @classmethod
    def load(cls, source, **kw):
        return load_sd3_controlnet(source, **kw)

    @classmethod
    def describe(cls, rec, comp):
        cfg = comp.config
        rec.fact("blocks", f"{cfg.get('num_layers')} (residuals), condition channels "
                           f"{cfg.get('in_channels', 16)} + {cfg.get('extra_conditioning_channels', 0)}")


class LoadQwen3(_Loader):
    NODE_ID = "FillScopeLoadQwen3"
    DISPLAY = "FillScope Load Qwen3"
    DESCRIPTION = ("Qwen3 text encoder of FLUX.2 [klein] (4B: Qwen3-4B, 9B: Qwen3-8B), built with the 28 layers klein "
                   "reads and no LM head.")
    SOURCE_TOOLTIP = ("Where the Qwen3 weights come from (a klein repo's text_encoder/, or text_encoders/qwen_3_4b."
                      "safetensors / qwen_3_8b.safetensors).")
    SOCKET = c.Qwen3
    KINDS = ("qwen3",)
    OUTPUT = "qwen3"

    @classmethod
    def extra_inputs(cls):
        return [io.Combo.Input("variant", options=list(COMPONENTS["qwen3"].variants), default="qwen3-4b",
                               tooltip="Topology for placeholder/meta: qwen3-4b for klein 4B, qwen3-8b for klein 9B; a "
                                       "folder or file brings its own.")]

    @classmethod
    def load(cls, source, **kw):
        return load_qwen3(source, tokenizer_fallback=c.tokenizer_folder("qwen"), **kw)

    @classmethod
    def describe(cls, rec, comp):
        hidden = comp.config.get("hidden_size")
        rec.fact("layers built", f"{comp.config.get('num_hidden_layers')} (hidden states 9, 18, 27 are read)")
        rec.fact("text condition width", f"3 x {hidden} = {3 * hidden} (static-config)")


class LoadKleinTransformer(_Loader):
    NODE_ID = "FillScopeLoadKleinTransformer"
    DISPLAY = "FillScope Load FLUX.2 [klein] Transformer"
    DESCRIPTION = ("FLUX.2 [klein] transformer: 4B = 5 double + 20 single blocks (width 3072, text 7680), 9B = 8 + 24 "
                   "(4096, text 12288); 128 latent channels per token.")
    SOURCE_TOOLTIP = ("Where the klein transformer comes from (a klein repo's transformer/, or diffusion_models/"
                      "flux-2-klein-4b.safetensors and the other published klein files).")
    SOCKET = c.KleinModel
    KINDS = ("klein_transformer",)
    FP8_STORAGE = True
    OUTPUT = "transformer"

    @classmethod
    def extra_inputs(cls):
        return [
            io.Combo.Input("variant", options=list(COMPONENTS["klein_transformer"].variants), default="klein-4b",
                           tooltip="Topology for placeholder/meta (klein-4b or klein-9b); a folder or file brings its own."),
        ]  # distilled or base is the sampler's model_type (it serves ComfyUI's MODEL too, which has no FillScope loader)

    @classmethod
    def load(cls, source, *, variant, **kw):
        # what the files say of distilled / base (a repository's model_index.json is_distilled) stays in comp.extras,
        # where the sampler's model_type "auto" reads it (resolve_distilled)
        return load_klein_transformer(source, variant=variant, **kw)

    @classmethod
    def describe(cls, rec, comp):
        cfg = comp.config
        rec.fact("blocks", f"{cfg.get('num_layers')} double + {cfg.get('num_single_layers')} single (static-config)")
        rec.fact("variant", transformer_variant(cfg) or "own size (not klein 4B or 9B)")
        distilled, why = resolve_distilled(comp, "auto")  # what the sampler's model_type "auto" will find
        rec.fact("model type", f"{'distilled' if distilled else 'base'}, from {why}")
        rec.static("text condition (per token)", [cfg.get("joint_attention_dim")], role="input")
        rec.static("hidden_states (per token)", [cfg.get("in_channels")], role="input")


def holds(entry: str, kinds) -> str | None:
    """Which of the component `kinds` the menu entry `entry` holds (a single file: from its safetensors header; a
    diffusers folder: its model_index.json pipeline layout, or a single-model folder's config.json class), or None
    (another model, a pickle, a file that cannot be read)."""
    try:
        split = c._split_file_source(entry)
        if split is not None:
            if not split[1].lower().endswith((".safetensors", ".sft")):
                return None
            held = c.file_kinds(c._file_path(*split)[0] or "") or frozenset()  # cached per file, bounded header
            return next((k for k in kinds if k in held), None)
        path = c._diffusers_path(entry)[0]
        if not path:
            return None
        folder = Path(path)
        if (folder / "model_index.json").is_file():
            layout = PIPELINE_LAYOUTS.get(json.loads((folder / "model_index.json").read_text()).get("_class_name"), {})
            return next((k for k in kinds if k in layout), None)
        if (folder / "config.json").is_file():
            name = json.loads((folder / "config.json").read_text()).get("_class_name")
            return next((k for k in kinds if COMPONENTS[k].class_name == name), None)
    except Exception:  # whatever cannot be read is simply not the default
        return None
    return None


def default_source(options, kinds) -> tuple[str, str | None]:
    """(the first menu entry holding one of `kinds`, its kind), else (meta, None): meta only when no model is there.
    A checkpoints/ file that bundles the component comes after the component's own files and folders."""
    bundles = [e for e in options if e.startswith("checkpoints/")]
    for entry in [e for e in options if e not in bundles] + bundles:
        if entry not in (c.SOURCE_META, c.SOURCE_PLACEHOLDER):
            kind = holds(entry, kinds)
            if kind:
                return entry, kind
    return c.SOURCE_META, None


NODES = [LoadCLIPL, LoadCLIPG, LoadT5, LoadFluxFillTransformer, LoadSD3Transformer, LoadSD3ControlNet, LoadVAE,
         LoadQwen3, LoadKleinTransformer]

# ComfyUI's own nodes for the files FillScope does not load, by the engine's neutral "what loads it" keys.
COMFY_LOADERS = {
    "checkpoint": "ComfyUI's Load Checkpoint node",
    "diffusion_model": "ComfyUI's Load Diffusion Model node",
    "lora": "ComfyUI's LoraLoader node",
    "controlnet": "ComfyUI's Load ControlNet Model node",
    "text_encoder": "ComfyUI's Load CLIP node",
    "vae": "ComfyUI's Load VAE node",
    "clip_vision": "ComfyUI's Load CLIP Vision node",
}


def describe_loader(kinds) -> str | None:
    """The node(s) that load one set of tensors of the engine's component kinds / other-loader keys `kinds`
    ("FillScope Load VAE (kind flux or sd3)", "ComfyUI's Load Checkpoint node"); None leaves the engine's words."""
    names = []
    for node in NODES:
        mine = [k for k in kinds if k in node.KINDS]
        if mine:
            names.append(node.DISPLAY if len(node.KINDS) == 1 else
                         f"{node.DISPLAY} (kind {' or '.join(k.removesuffix('_vae') for k in mine)})")
    names += [COMFY_LOADERS[k] for k in kinds if k in COMFY_LOADERS]
    return " or ".join(names) or None
