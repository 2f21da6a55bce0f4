"""What a file is: the components it holds (`Part`s) and, for the rest, which kind of loader takes it.

"What loads it" is said in component kinds (specs.COMPONENTS keys: FillScope loads those) or, for files FillScope
does not load, in the neutral keys of OTHER_LOADERS. The engine never names the nodes of a host application: whoever
shows a message (the node layer) names its own loaders for these keys (wrong_kind.py takes a `describe` callable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .header import DTYPE_NAMES

# Why FillScope does not load a base model of another family.
RUNS_ONLY = "FillScope runs FLUX.1 Fill, SD3/SD3.5 and FLUX.2 [klein] only"

# Loaders other than FillScope's, by what they load; the text is what the engine says when nobody names them.
OTHER_LOADERS = {
    "checkpoint": "a whole-checkpoint loader outside FillScope",
    "diffusion_model": "a diffusion-model loader outside FillScope",
    "lora": "a LoRA loader outside FillScope",
    "controlnet": "a ControlNet loader outside FillScope",
    "text_encoder": "a text-encoder loader outside FillScope",
    "vae": "a VAE loader outside FillScope",
    "clip_vision": "a CLIP-vision loader outside FillScope",
    "none": "nothing in FillScope",
}


@dataclass
class Part:
    """One loadable component inside a file."""

    component: str  # COMPONENTS key
    prefix: str  # key prefix in the file ("" for a standalone file)
    layout: str  # bfl | sai | ldm | diffusers | transformers
    what: str  # human description
    config: dict  # the component's config, inferred from the shapes
    class_name: str | None = None  # when it differs from COMPONENTS[component].class_name
    notes: list = field(default_factory=list)


def elsewhere(kind: str, what: str, loader: str, why: str = ""):
    """The classification of a file no FillScope loader takes: `loader` is an OTHER_LOADERS key."""
    return kind, what, [], ((loader,),), why


def loads(kind: str, what: str, parts: list):
    """The classification of a file FillScope loads: its parts."""
    return kind, what, parts, loaded_as(parts), ""


def loaded_as(parts: list) -> tuple:
    """The parts' loader groups: per key prefix (one set of tensors), the component kinds it loads as, in order.
    A standalone 16-channel VAE loads as ("flux_vae", "sd3_vae"); an SD3 checkpoint as ("sd3_transformer",),
    ("sd3_vae",), ("clip_l",), ..."""
    groups: dict[str, list] = {}
    for p in parts:
        kinds = groups.setdefault(p.prefix, [])
        if p.component not in kinds:
            kinds.append(p.component)
    return tuple(dict.fromkeys(tuple(kinds) for kinds in groups.values()))


@dataclass
class CheckpointInfo:
    path: Path
    size: int
    tensors: dict  # name -> TensorInfo
    metadata: dict
    kind: str  # short identifier: flux_transformer, sd3_checkpoint, vae16, clip_l, t5_xxl, lora, ...
    what: str  # "a FLUX.1 Fill [dev] transformer (BFL format, ...)"
    parts: list  # [Part]
    take_with: tuple  # what loads it: groups of component kinds / OTHER_LOADERS keys (see loaded_as)
    why: str = ""  # why FillScope does not load it, when it does not

    @property
    def name(self) -> str:
        return self.path.name

    def part(self, component: str) -> Part | None:
        return next((p for p in self.parts if p.component == component), None)

    def dtype_summary(self, prefix: str = "") -> str:
        return describe_dtype(self.tensors, prefix)


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def describe_dtype(tensors: dict, prefix: str = "") -> str:
    """The storage dtype of most of the parameters under `prefix`, with the others named: "bf16 (+ fp32)"."""
    counts: dict[str, int] = {}
    for k, t in tensors.items():
        if k.startswith(prefix):
            counts[t.dtype] = counts.get(t.dtype, 0) + numel(t.shape)
    if not counts:
        return "no tensors"
    main = max(counts, key=counts.get)
    others = [DTYPE_NAMES.get(d, d) for d in counts if d != main and counts[d] > 0]
    return DTYPE_NAMES.get(main, main) + (f" (+ {', '.join(others)})" if others else "")
