"""ComfyUI's own VAE (the VAE of VAELoader, CheckpointLoaderSimple) where FillScope's nodes take FS_VAE.

`fillscope_vae(native, family)` wraps a comfy.sd.VAE behind the small interface fillscope/vae.py uses on a loaded
VAE component (`model.encode(x).latent_dist.mode()`, `model.decode(z, return_dict=False)[0]`, `model.dtype`,
`model.config`'s widths; the component's scale and shift): encode hands ComfyUI's VAE.encode the IMAGE it expects
([B,H,W,3] in 0..1) and gets its raw first-stage latent, decode gets ComfyUI's IMAGE back and returns it in [-1,1] as a
diffusers decoder would. The latent format (scale, shift) is the family's published one (fillscope.specs; ComfyUI's
comfy/latent_formats.py has the same numbers), so FillScope's latents are what its own VAE would give. ComfyUI's VAE
places itself (its encode/decode load it through ComfyUI's model management), so FillScope's memory policies do not
apply to it. FLUX.1 and SD3 VAEs (16 latent channels at 1/8) only: the FLUX.2 VAE is loaded by FillScope's loader.
"""

from __future__ import annotations

from ..fillscope.errors import FillScopeInputError
from ..fillscope.specs import FLUX_LATENT, SD3_LATENT
from ..fillscope.weights import Component

FORMATS = {"flux": FLUX_LATENT, "sd3": SD3_LATENT}


def is_native_vae(value) -> bool:
    """A ComfyUI VAE object (duck-typed: comfy.sd.VAE's encode/decode and first_stage_model), not a FillScope one."""
    return not isinstance(value, Component) and all(hasattr(value, a) for a in ("encode", "decode", "first_stage_model"))


class _Latent:
    def __init__(self, z):
        self._z = z

    def mode(self):
        return self._z


class _Encoded:
    def __init__(self, z):
        self.latent_dist = _Latent(z)


class NativeVAEModel:
    """comfy.sd.VAE with the calls fillscope/vae.py makes on a diffusers AutoencoderKL."""

    def __init__(self, vae, channels: int, downscale: int):
        import torch

        self.vae = vae
        self.dtype = torch.float32  # what fillscope/vae.py hands in; ComfyUI casts to its own VAE dtype
        levels = downscale.bit_length()  # 8 -> 4 levels: vae_scale_factor = 2 ** (levels - 1)
        self.config = {"latent_channels": channels, "block_out_channels": [0] * levels}

    def encode(self, x):
        """[B,3,H,W] in [-1,1] -> the raw latent [B,C,H/8,W/8] (ComfyUI's VAEEncode)."""
        pixels = ((x.float() + 1.0) / 2.0).movedim(1, -1)
        return _Encoded(self.vae.encode(pixels).float())

    def decode(self, z, return_dict=False):
        """The raw latent -> [B,3,8h,8w] in [-1,1] (ComfyUI's VAEDecode, its 0..1 IMAGE mapped back)."""
        image = self.vae.decode(z.float())
        return (image.float().movedim(-1, 1) * 2.0 - 1.0,)


def native_geometry(vae) -> tuple[int, int]:
    channels = int(getattr(vae, "latent_channels", 0))
    down = vae.spacial_compression_encode() if hasattr(vae, "spacial_compression_encode") else vae.downscale_ratio
    return channels, down if isinstance(down, int) else 0


def fillscope_vae(vae, family: str, input_name: str = "vae") -> Component:
    """A ComfyUI VAE as a FillScope VAE component of `family` ('flux' or 'sd3'); refused unless it has 16 latent
    channels at 1/8 (the FLUX.1 / SD3 VAE)."""
    channels, down = native_geometry(vae)
    if getattr(vae, "latent_dim", 2) != 2 or channels != 16 or down != 8:
        raise FillScopeInputError(
            input_name, f"this ComfyUI VAE has {channels} latent channels at 1/{down or '?'}; FillScope takes ComfyUI's "
                        "FLUX.1 and SD3 VAEs (16 channels at 1/8) here.",
            "load the FLUX.1 VAE (ae.safetensors) or SD3's VAE with Load VAE, or use FillScope's Load VAE (which also "
            "loads the FLUX.2 [klein] VAE).")
    if family not in FORMATS:
        raise FillScopeInputError(
            input_name, f"a ComfyUI VAE stands in for FLUX.1 and SD3 VAEs here, not for a {family.upper()} latent.",
            "load the FLUX.2 VAE with FillScope's Load VAE (kind flux2) for klein's latents.")
    fmt = FORMATS[family]
    return Component(
        kind=f"{family}_vae", model=NativeVAEModel(vae, channels, down), source="comfyui",
        provenance=f"ComfyUI VAE ({type(vae.first_stage_model).__name__}), {family.upper()} latent format", device="cpu",
        dtype="fp32", config={"scaling_factor": fmt.scale, "shift_factor": fmt.shift}, extras={"native": True})


def vae_input(inp):
    """The FS_VAE input `inp` that also takes ComfyUI's own VAE (one socket, types FS_VAE,VAE)."""
    from comfy_api.latest import io

    from . import common as c

    return io.MultiType.Input(inp, types=[c.Vae, io.Vae])


def as_fillscope_vae(value, family: str, input_name: str = "vae"):
    """`value` as a FillScope VAE component: FillScope's own as is, ComfyUI's wrapped for `family`."""
    return value if isinstance(value, Component) else fillscope_vae(value, family, input_name)


VAE_TOOLTIP = ("FillScope's Load VAE, or ComfyUI's own VAE (Load VAE, a checkpoint's VAE) for FLUX.1 / SD3: its encode "
               "and decode are used with the family's scale and shift.")
