"""The error for a file that holds no component of the kind asked for: what the file is, what the loader takes,
and what loads the file instead.

Loaders are named through a `describe` callable: describe(kinds) -> the name of what loads one set of tensors
of those kinds (component kinds or info.OTHER_LOADERS keys), or None for the engine's own wording. The node layer
passes one that names its nodes and the host's; `WrongKindError.retold(describe)` rewords a raised error with it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import FillScopeInputError
from ..specs import COMPONENTS, shipped_config
from .info import OTHER_LOADERS, CheckpointInfo

Describe = Callable[[tuple], "str | None"]

WANTS = {
    "clip_l": "a CLIP-L text encoder (clip_l.safetensors, or an SD3/FLUX checkpoint with bundled text encoders)",
    "clip_g": "a CLIP-G (OpenCLIP bigG) text encoder (clip_g.safetensors, or an SD3 checkpoint with bundled text encoders)",
    "t5_xxl": "a T5-XXL v1.1 encoder (t5xxl_fp16.safetensors, t5xxl_fp8_e4m3fn(_scaled).safetensors, or an SD3/FLUX "
              "checkpoint with bundled text encoders)",
    "flux_fill_transformer": "the FLUX.1 Fill [dev] transformer (flux1-fill-dev.safetensors: 384 input channels)",
    "flux_vae": "a 16-channel FLUX/SD3 VAE (ae.safetensors)",
    "sd3_vae": "a 16-channel SD3/FLUX VAE (an SD3 checkpoint's first_stage_model, or a standalone VAE file)",
    "sd3_transformer": "an SD3 / SD3.5 MMDiT (sd3_medium.safetensors, sd3.5_medium.safetensors, sd3.5_large.safetensors)",
    "sd3_controlnet": "the alimama-creative SD3 inpainting ControlNet (diffusers keys, 16 latent + 1 mask input channels)",
    "klein_transformer": "a FLUX.2 [klein] 4B or 9B transformer (flux-2-klein-4b.safetensors, flux-2-klein-base-4b, "
                         "flux-2-klein-9b, flux-2-klein-base-9b: width 3072 or 4096)",
    "qwen3": "a Qwen3-4B or Qwen3-8B text encoder (qwen_3_4b.safetensors for klein 4B, qwen_3_8b.safetensors for klein 9B, "
             "or their fp8mixed versions)",
    "flux2_vae": "the FLUX.2 VAE (flux2-vae.safetensors: 32 latent channels with BatchNorm statistics)",
}


def engine_loader_name(kinds: tuple) -> str:
    """The engine's own name for what loads `kinds`: "FillScope CLIP-L", "a LoRA loader outside FillScope", ..."""
    return " or ".join(f"FillScope {COMPONENTS[k].title}" if k in COMPONENTS else OTHER_LOADERS.get(k, k) for k in kinds)


def _name(kinds: tuple, describe: Describe | None) -> str:
    return (describe(tuple(kinds)) if describe is not None else None) or engine_loader_name(tuple(kinds))


def take_with_text(info: CheckpointInfo, describe: Describe | None = None) -> str:
    """What loads the file, in words: its loader groups named by `describe`, then why FillScope does not load it."""
    text = ", ".join(dict.fromkeys(_name(kinds, describe) for kinds in info.take_with))
    return f"{text} ({info.why})" if info.why else text


class WrongKindError(FillScopeInputError):
    """A file of another kind than the loader's; keeps the file's classification so that the message can be
    reworded with the caller's loader names (`retold`)."""

    def __init__(self, input_name: str, problem: str, fix: str, info: CheckpointInfo, component: str):
        super().__init__(input_name, problem, fix)
        self.info = info
        self.component = component

    def retold(self, describe: Describe) -> "WrongKindError":
        return wrong_kind_error(self.info, self.component, self.input_name, describe)


def wrong_kind_error(info: CheckpointInfo, component: str, input_name: str,
                     describe: Describe | None = None) -> WrongKindError:
    other = {"flux_vae": "sd3_vae", "sd3_vae": "flux_vae"}.get(component)
    if other and info.part(other) is not None:
        theirs, ours = shipped_config(other), shipped_config(component)
        return WrongKindError(
            input_name,
            f"'{info.name}' is {info.what}; its VAE is the {COMPONENTS[other].title} (latent scale {theirs['scaling_factor']}, "
            f"shift {theirs['shift_factor']}), not the {COMPONENTS[component].title} ({ours['scaling_factor']}, "
            f"{ours['shift_factor']}) this loader's kind asks for.",
            f"set the VAE loader's kind to {other.removesuffix('_vae')}, or choose the other model's VAE file.",
            info, component,
        )
    return WrongKindError(
        input_name,
        f"'{info.name}' is {info.what}; the {_name((component,), describe)} loader takes {WANTS[component]}.",
        f"load it with {take_with_text(info, describe)}.",
        info, component,
    )
