"""Test-only ComfyUI nodes for tests/test_server_inspect_values.py (this folder is an extra custom_nodes path of that
module's server); never part of the pack.

- InspectTestTinyVAE: ComfyUI's own VAE object (comfy.sd.VAE: its AutoencoderKL, ModelPatcher and encode / decode /
  tiled code) on the tiny FLUX VAE of a diffusers folder. ComfyUI's VAELoader cannot load the tiny weights: its
  detection builds the full-size FLUX / SD VAE (ch 128, ch_mult 1,2,4,4) whatever the file holds, so the tiny one
  (32 channels at every level) fails with size mismatches. This node hands comfy.sd.VAE the tiny geometry as its
  `config` instead, converts the diffusers keys with ComfyUI's converter and gives the quant convolutions (which the
  FLUX VAE does not have) identity weights, so it computes what the tiny diffusers VAE computes.
- InspectTestSave: a LATENT, IMAGE, MASK and CONDITIONING, every tensor in them, to
  <output>/fillscope_inspect/<name>.safetensors (non-tensor CONDITIONING values as JSON metadata).
"""

from __future__ import annotations

import json
import os

CATEGORY = "FillScope tests"


def _folder(name: str) -> str:
    import folder_paths

    for base in folder_paths.get_folder_paths("diffusers"):
        if os.path.isdir(os.path.join(base, name)):
            return os.path.join(base, name)
    raise FileNotFoundError(f"no diffusers folder {name}")


class TinyVAE:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "FLUX.1-Fill-dev"})}}

    RETURN_TYPES = ("VAE",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    def load(self, folder):
        import comfy.diffusers_convert
        import comfy.sd
        import comfy.utils
        import torch

        root = os.path.join(_folder(folder), "vae")
        with open(os.path.join(root, "config.json"), encoding="utf-8") as f:
            hf = json.load(f)
        sd = comfy.diffusers_convert.convert_vae_state_dict(
            comfy.utils.load_torch_file(os.path.join(root, "diffusion_pytorch_model.safetensors")))
        widths, z = hf["block_out_channels"], hf["latent_channels"]
        ddconfig = {"double_z": True, "z_channels": z, "resolution": hf.get("sample_size", 256),
                    "in_channels": hf["in_channels"], "out_ch": hf["out_channels"], "ch": widths[0],
                    "ch_mult": [w // widths[0] for w in widths], "num_res_blocks": hf["layers_per_block"],
                    "attn_resolutions": [], "dropout": 0.0}
        for name, n in (("quant_conv", 2 * z), ("post_quant_conv", z)):
            if f"{name}.weight" not in sd:
                sd[f"{name}.weight"] = torch.eye(n).reshape(n, n, 1, 1)
                sd[f"{name}.bias"] = torch.zeros(n)
        vae = comfy.sd.VAE(sd=sd, config={"params": {"embed_dim": z, "ddconfig": ddconfig}}, dtype=torch.float32)
        vae.latent_channels = z
        return (vae,)


class Save:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"name": ("STRING", {"default": "inspect"})},
                "optional": {"latent": ("LATENT",), "image": ("IMAGE",), "mask": ("MASK",),
                             "conditioning": ("CONDITIONING",)}}

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    def save(self, name, latent=None, image=None, mask=None, conditioning=None):
        import folder_paths
        import torch
        from safetensors.torch import save_file

        tensors, metadata = {}, {}

        def put(key, value):
            if isinstance(value, torch.Tensor):
                tensors[key] = value.detach().cpu().clone().contiguous()
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
                for i, v in enumerate(value):
                    tensors[f"{key}.{i}"] = v.detach().cpu().clone().contiguous()
            else:
                metadata[key] = json.dumps(value if isinstance(value, (int, float, str, bool, type(None))) else
                                           type(value).__name__)

        for key, value in (latent or {}).items():
            put(f"latent.{key}", value)
        if image is not None:
            put("image", image)
        if mask is not None:
            put("mask", mask)
        for i, (tensor, keys) in enumerate(conditioning or []):
            put(f"cond.{i}", tensor)
            for key, value in keys.items():
                put(f"cond.{i}.{key}", value)
        folder = os.path.join(folder_paths.get_output_directory(), "fillscope_inspect")
        os.makedirs(folder, exist_ok=True)
        save_file(tensors, os.path.join(folder, f"{name}.safetensors"), metadata=metadata)
        return {}


NODE_CLASS_MAPPINGS = {"InspectTestTinyVAE": TinyVAE, "InspectTestSave": Save}
