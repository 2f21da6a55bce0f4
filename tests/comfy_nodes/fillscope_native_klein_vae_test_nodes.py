"""Test-only ComfyUI nodes for tests/test_server_native_klein_vae.py (ComfyUI's own FLUX.2 VAE in FillScope's klein
condition and decode nodes), loaded from this folder as an extra custom_nodes path; never part of the pack.

- NativeKleinVAETestSaveCondition: a FillScope FS_KLEIN_CONDITION's tensors (reference tokens and ids; inpaint: the
  normalised source latents and the token mask) to <output>/fillscope_native_klein_vae/<name>.safetensors, so the
  test compares the conditions the two VAEs gave.
- NativeKleinVAETestFlux1VAE: ComfyUI's own VAE object (comfy.sd.VAE, its AutoencoderKL) of the FLUX.1 geometry (16
  latent channels at 1/8), built at small widths from seeded weights through comfy.sd.VAE's `config` (ComfyUI's
  VAELoader builds only the full-size VAE); its encode and decode count their calls into
  <output>/fillscope_native_klein_vae/<counter>.json, so the test can tell that the klein condition refused it
  before encoding anything.
"""

from __future__ import annotations

import json
import os

CATEGORY = "FillScope tests"
FOLDER = "fillscope_native_klein_vae"


def _out(name: str) -> str:
    import folder_paths

    folder = os.path.join(folder_paths.get_output_directory(), FOLDER)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, name)


class SaveCondition:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"condition": ("FS_KLEIN_CONDITION",), "name": ("STRING", {"default": "condition"})}}

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    def save(self, condition, name):
        from safetensors.torch import save_file

        cond = getattr(condition, "value", condition)  # FillScope's sockets carry Traced(value, records)
        tensors = {"references": cond.references, "reference_ids": cond.reference_ids}
        if cond.source is not None:
            tensors.update(source=cond.source, token_mask=cond.token_mask)
        save_file({k: v.detach().float().cpu().contiguous() for k, v in tensors.items()}, _out(f"{name}.safetensors"))
        return {}


class Flux1VAE:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"counter": ("STRING", {"default": "flux1_vae_calls"}), "seed": ("INT", {"default": 0})}}

    RETURN_TYPES = ("VAE",)
    FUNCTION = "build"
    CATEGORY = CATEGORY

    def build(self, counter, seed):
        import comfy.sd
        import torch
        from comfy.ldm.models.autoencoder import AutoencoderKL

        z, ch = 16, 32  # the FLUX.1 VAE's 16 latent channels; 32 channels a level: one GroupNorm(32) group each
        ddconfig = {"double_z": True, "z_channels": z, "resolution": 64, "in_channels": 3, "out_ch": 3, "ch": ch,
                    "ch_mult": [1, 1, 1, 1], "num_res_blocks": 1, "attn_resolutions": [], "dropout": 0.0}
        torch.manual_seed(seed)
        with torch.device("meta"):
            shapes = {k: v.shape for k, v in AutoencoderKL(ddconfig=ddconfig, embed_dim=z).state_dict().items()}
        sd = {k: torch.randn(s) * 0.05 for k, s in shapes.items()}
        vae = comfy.sd.VAE(sd=sd, config={"params": {"embed_dim": z, "ddconfig": ddconfig}}, dtype=torch.float32)
        vae.latent_channels = z  # the config path leaves VAE's default (4); the FLUX.1 VAE's widths as detection sets
        path = _out(f"{counter}.json")
        calls = {"encode": 0, "decode": 0}

        def counted(name, call):
            def run(*args, **kwargs):
                calls[name] += 1
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(calls, f)
                return call(*args, **kwargs)
            return run

        vae.encode, vae.decode = counted("encode", vae.encode), counted("decode", vae.decode)
        return (vae,)


NODE_CLASS_MAPPINGS = {
    "NativeKleinVAETestSaveCondition": SaveCondition,
    "NativeKleinVAETestFlux1VAE": Flux1VAE,
}
