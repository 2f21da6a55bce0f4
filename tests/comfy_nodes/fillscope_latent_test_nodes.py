"""Test-only ComfyUI nodes for tests/test_server_native_latent.py (this folder is an extra custom_nodes path of that
module's server); never part of the pack.

- LatentTestZeroConditioning: a CONDITIONING of zeros with the widths a tiny native model reads (context tokens x
  context_dim, pooled_dim pooled, FLUX guidance), so that ComfyUI's KSampler can run NativeTestTinyModel on a LATENT
  without a CLIP (ComfyUI's CLIP loaders cannot load tiny text encoders).
"""

from __future__ import annotations

CATEGORY = "FillScope tests"


class ZeroConditioning:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tokens": ("INT", {"default": 4, "min": 1, "max": 512}),
                             "context_dim": ("INT", {"default": 32, "min": 1, "max": 8192}),
                             "pooled_dim": ("INT", {"default": 16, "min": 1, "max": 8192}),
                             "guidance": ("FLOAT", {"default": 3.5, "min": 0.0, "max": 100.0})}}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "make"
    CATEGORY = CATEGORY

    def make(self, tokens, context_dim, pooled_dim, guidance):
        import torch

        return ([[torch.zeros(1, tokens, context_dim), {"pooled_output": torch.zeros(1, pooled_dim),
                                                       "guidance": guidance}]],)


NODE_CLASS_MAPPINGS = {"LatentTestZeroConditioning": ZeroConditioning}
