"""ComfyUI's own VAE (the VAE of VAELoader, CheckpointLoaderSimple) where FillScope's nodes take FS_VAE.

`fillscope_vae(native, family)` wraps a comfy.sd.VAE behind the small interface fillscope/vae.py uses on a loaded
VAE component (`model.encode(x).latent_dist.mode()`, `model.decode(z, return_dict=False)[0]`, `model.dtype`,
`model.config`'s widths; the component's scale and shift): encode hands ComfyUI's VAE.encode the IMAGE it expects
([B,H,W,3] in 0..1) and gets its raw first-stage latent, decode gets ComfyUI's IMAGE back and returns it in [-1,1] as a
diffusers decoder would. The latent format (scale, shift) is the family's published one (fillscope.specs; ComfyUI's
comfy/latent_formats.py has the same numbers), so FillScope's latents are what its own VAE would give. ComfyUI's VAE
places itself (its encode/decode load it through ComfyUI's model management), so FillScope's memory policies do not
apply to it.

FLUX.2 (klein): ComfyUI builds the FLUX.2 VAE from a state dict holding `bn.running_mean` (comfy/sd.py: its LDM
AutoencoderKL with `batch_norm_latent`, latent_channels x 4 = 128 at 1/16), and its encode already gives what
FillScope's klein latent is: the 2x2-patchified (channel-major) mean, normalised by the BatchNorm running statistics
(eps 1e-4); its decode takes that latent back. So `NativeFlux2VAEModel` says `normalised_patches` and fillscope/vae.py
uses its encode / decode as they are (no patchify or BatchNorm of its own); ComfyUI's klein LATENT is the same tensor.
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


class NativeFlux2VAEModel(NativeVAEModel):
    """ComfyUI's FLUX.2 VAE: its encode gives the BatchNorm-normalised 2x2 patches [B,128,H/16,W/16] and its decode
    takes them, which is FillScope's klein latent; `normalised_patches` tells fillscope/vae.py to patchify and
    normalise nothing itself. The config gives the widths fillscope.vae.latent_format reads (latent_channels before
    the patches, the levels of the 1/8 first stage, patch_size)."""

    normalised_patches = True

    def __init__(self, vae, channels: int, downscale: int, patch: int):
        super().__init__(vae, channels // (patch * patch), downscale // patch)
        self.config["patch_size"] = [patch, patch]


def native_geometry(vae) -> tuple[int, int]:
    channels = int(getattr(vae, "latent_channels", 0))
    down = vae.spacial_compression_encode() if hasattr(vae, "spacial_compression_encode") else vae.downscale_ratio
    return channels, down if isinstance(down, int) else 0


def flux2_patch(vae) -> int:
    """The side of a ComfyUI VAE's BatchNorm latent patches (its first stage's `ps`, 2 for FLUX.2); 0 where the VAE
    has no BatchNorm latent (every other VAE ComfyUI loads)."""
    stage = getattr(vae, "first_stage_model", None)
    if getattr(stage, "bn", None) is None:
        return 0
    ph, pw = (int(p) for p in getattr(stage, "ps", (0, 0)))
    return ph if ph == pw else 0


def native_family(vae) -> str:
    """'flux2' for ComfyUI's FLUX.2 VAE (a BatchNorm latent of 2x2 patches), else 'flux' (FLUX.1 and SD3 share one
    geometry; a LATENT in ComfyUI's space round-trips through either latent format)."""
    return "flux2" if flux2_patch(vae) else "flux"


def _refuse_for_klein(vae, channels: int, down: int, input_name: str):
    raise FillScopeInputError(
        input_name, f"this ComfyUI VAE has {channels} latent channels at 1/{down or '?'}"
                    f"{'' if flux2_patch(vae) else ' and no BatchNorm latent'}; FLUX.2 [klein] needs the FLUX.2 VAE "
                    "(32 latent channels x 2x2 patches = 128 at 1/16, BatchNorm-normalised).",
        "load flux2-vae.safetensors with Load VAE, or use FillScope's Load VAE (kind flux2).")


def fillscope_flux2_vae(vae, input_name: str = "vae") -> Component:
    """ComfyUI's FLUX.2 VAE as FillScope's flux2_vae component; any other VAE (FLUX.1 / SD3: 16 channels at 1/8) is
    refused naming `input_name`."""
    channels, down = native_geometry(vae)
    patch = flux2_patch(vae)
    if getattr(vae, "latent_dim", 2) != 2 or not patch or channels % (patch * patch) or down % patch:
        _refuse_for_klein(vae, channels, down, input_name)
    model = NativeFlux2VAEModel(vae, channels, down, patch)
    return Component(
        kind="flux2_vae", model=model, source="comfyui",
        provenance=f"ComfyUI VAE ({type(vae.first_stage_model).__name__}, BatchNorm latent), FLUX.2 latent format",
        device="cpu", dtype="fp32", config={}, extras={"native": True})


def fillscope_vae(vae, family: str, input_name: str = "vae") -> Component:
    """A ComfyUI VAE as a FillScope VAE component of `family`: 'flux' or 'sd3' (refused unless it has 16 latent
    channels at 1/8: the FLUX.1 / SD3 VAE), 'flux2' (refused unless it is ComfyUI's FLUX.2 VAE)."""
    if family == "flux2":
        return fillscope_flux2_vae(vae, input_name)
    channels, down = native_geometry(vae)
    if getattr(vae, "latent_dim", 2) != 2 or channels != 16 or down != 8:
        raise FillScopeInputError(
            input_name, f"this ComfyUI VAE has {channels} latent channels at 1/{down or '?'}; FillScope takes ComfyUI's "
                        "FLUX.1 and SD3 VAEs (16 channels at 1/8) here.",
            "load the FLUX.1 VAE (ae.safetensors) or SD3's VAE with Load VAE (the FLUX.2 VAE goes to the klein "
            "nodes), or use FillScope's Load VAE.")
    if family not in FORMATS:
        raise FillScopeInputError(
            input_name, f"a ComfyUI VAE stands in for FLUX.1, SD3 and FLUX.2 VAEs, not for a {family.upper()} latent.",
            "use FillScope's Load VAE for this family.")
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


def as_fillscope_vae(value, family: str, input_name: str = "vae", rec=None):
    """`value` as a FillScope VAE component: FillScope's own as is, ComfyUI's wrapped for `family`; with `rec`, what
    was assumed of ComfyUI's VAE goes on the record."""
    if isinstance(value, Component):
        return value
    comp = fillscope_vae(value, family, input_name)
    if rec is not None and family in FORMATS:
        fmt = FORMATS[family]
        rec.note(f"{input_name}: ComfyUI's VAE object does not say whose 16-channel VAE it is (FLUX.1's and SD3's have "
                 f"the same shapes): taken as {family.upper()}'s, the family of this node (latent scale {fmt.scale}, "
                 f"shift {fmt.shift}); the wire recorder warns on its wire when the graph shows it came with another "
                 "family's model or file")
    return comp


VAE_TOOLTIP = ("FillScope's Load VAE, or ComfyUI's own VAE (Load VAE, a checkpoint's VAE) for FLUX.1 / SD3: its encode "
               "and decode are used with the family's scale and shift.")
DECODE_VAE_TOOLTIP = ("FillScope's Load VAE, or ComfyUI's own VAE (Load VAE, a checkpoint's VAE): FLUX.1 / SD3 with "
                      "the family's scale and shift; FLUX.2 (klein) with its own BatchNorm-normalised 2x2 patches.")
KLEIN_VAE_TOOLTIP = ("The FLUX.2 VAE: FillScope's Load VAE (kind flux2), or ComfyUI's own (Load VAE of "
                     "flux2-vae.safetensors), whose encode already gives klein's BatchNorm-normalised 2x2 patches.")
