"""Test-only ComfyUI node for tests/test_server_wires_templates.py (ComfyUI's own templates with their loaders swapped
for tiny builds of ComfyUI's own classes); loaded from this folder as an extra custom_nodes path, never part of the
pack.

- WiresTestTinySD3Checkpoint: in place of CheckpointLoaderSimple (sd3.5_simple_example), under the same node id and
  with its three outputs: MODEL = NativeTemplateTestTinySD3 (ComfyUI's SD3 MMDiT, 2 blocks, seeded), CLIP =
  NativeTemplateTestTinySD3CLIP (ComfyUI's SD3 CLIP on the tiny SD3 folder's CLIP-L and CLIP-G), VAE =
  NativeTestTinyTAESD (ComfyUI's VAE over TAESD, 16 channels, seeded), each taken from ComfyUI's node registry when
  it runs. (CheckpointLoaderSimple cannot load a tiny SD3: a checkpoint's VAE is always built at full size.)
- WiresTestFailOtherwise: takes an IMAGE and fails with a message that is no shape error (tests/test_server_explain.py:
  an unrecognised failure gets its inputs listed, no guess).
"""

from __future__ import annotations


class TinySD3Checkpoint:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"folder": ("STRING", {"default": "SD3-3-layer-CLIP-tiny"}),
                             "seed": ("INT", {"default": 0, "min": 0, "max": 2**31})}}

    RETURN_TYPES = ("MODEL", "CLIP", "VAE")
    FUNCTION = "load"
    CATEGORY = "FillScope tests"

    def load(self, folder, seed):
        import nodes

        made = nodes.NODE_CLASS_MAPPINGS
        (model,) = made["NativeTemplateTestTinySD3"]().build(folder, seed)
        (clip,) = made["NativeTemplateTestTinySD3CLIP"]().load(folder)
        (vae,) = made["NativeTestTinyTAESD"]().build(seed, 16)
        return model, clip, vae


class FailOtherwise:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "fail"
    CATEGORY = "FillScope tests"

    def fail(self, image):
        raise RuntimeError("the lamp ran out of oil")


NODE_CLASS_MAPPINGS = {"WiresTestTinySD3Checkpoint": TinySD3Checkpoint, "WiresTestFailOtherwise": FailOtherwise}
