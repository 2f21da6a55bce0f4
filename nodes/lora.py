"""LoRA nodes: a LoRA file from ComfyUI's models/loras folder on a FLUX.1 Fill, SD3 or FLUX.2 [klein] transformer.

One node per family: a V3 node's output has one type, and the three transformers travel on three socket types (a
wrong wire stays impossible; ComfyUI 0.3.75's MatchType is experimental and its output would not wire into the
samplers). Each node hands on a patched copy of the transformer (fillscope/lora.py `with_loras`), copy-on-write:

- the loader's Component, which ComfyUI caches and another branch may use without the LoRA, is never changed: the
  copy's module tree shares every weight tensor with it (no weight memory in CPU RAM) and adds the LoRA's factors and a
  forward patch on its own Linear layers;
- the copy is a component of its own for the memory policies (the loader's `memory` setting carried over): under
  `auto` the unpatched base and the patched copy are never both kept on the GPU;
- ComfyUI re-runs the node when its inputs change (strength, file, the file's size or date): a new copy, the old one
  dropped with ComfyUI's cache entry. Chained LoRA nodes stack (each copy carries the LoRAs before it).

The node never moves the transformer (it reads configs and shapes only): the sampler places the patched copy.
"""

from __future__ import annotations

import os
from pathlib import Path

from comfy_api.latest import io

from ..fillscope.checkpoints import WEIGHT_SUFFIXES, refuse_unsafe_suffix
from ..fillscope.errors import FillScopeInputError
from ..fillscope.lora import DOWN, UP, describe, read_lora, with_loras
from ..fillscope.placement import RESIDENCY
from . import common as c
from . import tooltips as tips
from .base import FillScopeNode

FOLDER = "loras"
FIX = "choose a file listed in the lora_name menu (press R to refresh it after adding files to models/loras)."


def lora_files() -> list[str]:
    """The LoRA files in ComfyUI's models/loras folders ('/'-separated). Pickled files are listed on purpose: choosing
    one says why FillScope does not load it."""
    import folder_paths

    try:
        names = folder_paths.get_filename_list(FOLDER)
    except KeyError:
        return []
    return sorted(n.replace(os.sep, "/") for n in names if n.lower().endswith(WEIGHT_SUFFIXES))


def _find(name) -> tuple[str | None, FillScopeInputError | None]:
    import folder_paths

    problem = c.source_problem(name)
    if problem:
        return None, FillScopeInputError("lora_name", problem[0], FIX)
    norm = c.contained_path(name)
    if norm is None:
        return None, FillScopeInputError("lora_name", f"'{name}' points outside ComfyUI's models/loras folders (an "
                                         "absolute path, a drive or '..' climbing out).", FIX)
    try:
        refuse_unsafe_suffix(Path(norm), "lora_name")
    except FillScopeInputError as e:
        return None, e
    bases = folder_paths.get_folder_paths(FOLDER)
    for base in bases:
        path = os.path.join(os.path.abspath(base), *norm.split("/"))
        if os.path.isfile(path):
            return path, None  # links kept: see nodes/common.py _find_in
    return None, FillScopeInputError("lora_name", f"'{name}' was not found in ComfyUI's models/loras folders "
                                     f"({', '.join(bases) or 'none configured'}).", "put the file there, or " + FIX)


class _LoRA(FillScopeNode):
    places_models = False
    NODE_ID = ""
    DISPLAY = ""
    SOCKET = None
    MODEL = ""  # what the socket carries, for the description

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id=cls.NODE_ID,
            display_name=cls.DISPLAY,
            category=c.CATEGORY + "/lora",
            description=(
                f"Applies a LoRA to the {cls.MODEL}: kohya (lora_unet_*), BFL/ComfyUI (diffusion_model.*) or "
                "diffusers/PEFT (transformer.*) files, .safetensors only. Outputs a patched copy; the loaded "
                "transformer stays unpatched for any other branch. Chain nodes to stack LoRAs."
            ),
            inputs=[
                cls.SOCKET.Input("transformer", tooltip=tips.LORA_TRANSFORMER),
                io.Combo.Input("lora_name", options=lora_files(),
                               tooltip="A LoRA file in ComfyUI's models/loras folder (.safetensors; pickles are "
                                       "refused)."),
                io.Float.Input("strength", default=1.0, min=-2.0, max=2.0, step=0.01,
                               tooltip="Multiplies the LoRA's change to every patched layer (1 = as trained, 0 = none, "
                                       "negative = the opposite)."),
            ],
            outputs=[cls.SOCKET.Output("patched", display_name="transformer"), c.shapes_output()],  # ids unique (V3)
        )

    @classmethod
    def validate_inputs(cls, lora_name):
        _, error = _find(lora_name)
        return str(error) if error else True

    @classmethod
    def fingerprint_inputs(cls, lora_name, **_):
        """A changed or replaced file re-runs the node."""
        path, _ = _find(lora_name)
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        return (lora_name, st.st_size, st.st_mtime_ns) if st else lora_name

    @classmethod
    def run(cls, rec, transformer, lora_name, strength):
        path, error = _find(lora_name)
        if error:
            raise error
        lora = read_lora(path, transformer, input_name="lora_name")
        for name, value in describe(lora, strength).items():
            rec.fact(name, value)
        for warning in lora.warnings:
            rec.warn(warning)
        if strength == 0:
            rec.note("strength 0: the transformer passes through unchanged (the file was read and checked)")
            return transformer
        view = with_loras(transformer, [(lora, strength)])
        RESIDENCY.register(view, view.extras.get("memory", "auto"))
        stack = view.extras["lora_stack"]
        if len(stack) > 1:
            rec.fact("LoRA stack", "; ".join(f"{x.name} x{s:g}" for x, s in stack))
        rec.fact("weights", view.provenance)
        rec.fact("device", view.device)
        patched = view.extras["lora_patch"].modules
        if patched:
            name, module = max(patched.items(), key=lambda kv: kv[1]._buffers[UP].numel())
            rec.tensor(f"lora down, stack concatenated ({name})", module._buffers[DOWN], "internal")
            rec.tensor(f"lora up x strength x alpha/rank ({name})", module._buffers[UP], "internal")
        rec.note("copy-on-write: a new transformer component sharing the loaded weights; the loader's output is "
                 "unchanged for any other branch")
        if view.is_meta:
            rec.note("meta weights: the LoRA's factors are shapes only")
        return view


class FluxFillLoRA(_LoRA):
    NODE_ID = "FillScopeFluxFillLoRA"
    DISPLAY = "LoRA (FLUX.1 Fill)"
    SOCKET = c.FluxFillModel
    MODEL = "FLUX.1 Fill transformer (FLUX.1 [dev] and FLUX.1 Fill LoRAs)"


class SD3LoRA(_LoRA):
    NODE_ID = "FillScopeSD3LoRA"
    DISPLAY = "LoRA (SD3)"
    SOCKET = c.SD3Model
    MODEL = "SD3 / SD3.5 transformer (LoRAs in diffusers/PEFT naming)"


class KleinLoRA(_LoRA):
    NODE_ID = "FillScopeKleinLoRA"
    DISPLAY = "LoRA (FLUX.2 [klein])"
    SOCKET = c.KleinModel
    MODEL = "FLUX.2 [klein] transformer (LoRAs made for the same klein size)"


NODES = [FluxFillLoRA, SD3LoRA, KleinLoRA]
