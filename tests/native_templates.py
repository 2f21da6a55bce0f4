"""The native_* templates (api_workflows/graphs.py: FillScope's nodes and ComfyUI's own in one graph) on tiny weights,
shared by tests/test_server_native_templates.py and api_workflows/thumbnails.py.

ComfyUI's loaders cannot load tiny files (UNETLoader's detection fixes FLUX's 24 heads of 128; DualCLIPLoader,
TripleCLIPLoader, VAELoader and a checkpoint's VAE are built at full size), so `swapped(name)` is the template's API
twin as shipped with only its loader nodes replaced by test-only nodes (tests/comfy_nodes) that build ComfyUI's own
classes at tiny sizes, under the same node ids; `prepare(models_dir)` writes what those nodes and the kept
loaders (ControlNetLoader, LoraLoaderModelOnly) read. Needs a server with tests/comfy_nodes
(comfy_server.ServerWithTestNodes).

- UNETLoader flux1-fill-dev -> NativeFillTestTinyFluxFill (ComfyUI's FluxInpaint at the tiny FLUX Fill folder's
  config and weights); DualCLIPLoader -> NativeTestTinyCLIP kind flux (ComfyUI's FLUX CLIP on that folder's CLIP-L and
  T5); VAELoader -> InspectTestTinyVAE (ComfyUI's VAE on that folder's VAE);
- CheckpointLoaderSimple sd3_medium -> NativeTemplateTestTinySD3 (its MODEL: ComfyUI's SD3 MMDiT, 2 blocks, seeded)
  and NativeTestTinyTAESD (its VAE output: ComfyUI's VAE over TAESD, 16 channels); TripleCLIPLoader ->
  NativeTemplateTestTinySD3CLIP (ComfyUI's SD3 CLIP on the SD3 folder's CLIP-L and CLIP-G, no T5: a tiny T5 would
  have to be 4096 wide to join ComfyUI's padded CLIP states);
- kept: ControlNetLoader, on a tiny alimama-layout file (diffusers' SD3ControlNetModel, 17 condition channels, at a
  geometry ComfyUI's detection reads: 2 blocks of 2 heads of 64, seeded) under the template's file name; and
  LoraLoaderModelOnly, on a tiny kohya LoRA of the tiny FLUX Fill transformer under the template's file name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "api_workflows"), str(REPO / "tests" / "comfy_nodes")]
import fillscope_native_template_test_nodes as template_nodes  # noqa: E402
import graphs  # noqa: E402

FLUX = "FLUX.1-Fill-dev"  # the tiny FLUX Fill folder (tests/tiny_flux.py) under models/diffusers
SD3 = "SD3-3-layer-CLIP-tiny"  # tiny_sd3's folder with 3-layer CLIPs (build_sd3_folder)
CONTROLNET = graphs.SD3_FILES["controlnet"][:2]  # (folder, file name) the template's ControlNetLoader reads
LORA = graphs.NATIVE_LORA[:2]


def folder_config(models_dir: Path, folder: str, sub: str) -> dict:
    return json.loads((Path(models_dir) / "diffusers" / folder / sub / "config.json").read_text())


def sd3_pooled_width(models_dir: Path) -> int:
    """CLIP-L ++ CLIP-G: the pooled width of ComfyUI's SD3 CLIP on the tiny SD3 folder."""
    return sum(folder_config(models_dir, SD3, sub)["hidden_size"] for sub in ("text_encoder", "text_encoder_2"))


def kohya_lora(seed: int = 1, rank: int = 4, alpha: float = 4.0) -> dict:
    """A kohya LoRA of the tiny FLUX Fill transformer's BFL checkpoint (checkpoint_files.kohya_lora)."""
    import checkpoint_files as cf
    from tiny_flux import build_tiny_components

    return cf.kohya_lora(cf.flux_bfl_state(build_tiny_components(0)["transformer"]), seed, rank, alpha)


def tiny_alimama_controlnet(pooled: int, seed: int = 0) -> dict:
    """diffusers' SD3ControlNetModel in the alimama inpainting layout (16 latent + 1 mask condition channels) at the
    geometry ComfyUI's ControlNetLoader detects (64 per head, heads = blocks = the tiny MMDiT's depth) and the text
    widths of the tiny SD3 CLIP, every weight seeded (the published zero-initialised layers give zero residuals)."""
    import torch
    from diffusers import SD3ControlNetModel

    depth = template_nodes.DEPTH
    cn = SD3ControlNetModel(sample_size=32, patch_size=2, in_channels=16, num_layers=depth, attention_head_dim=64,
                            num_attention_heads=depth, joint_attention_dim=template_nodes.CONTEXT,
                            caption_projection_dim=64 * depth, pooled_projection_dim=pooled, out_channels=16,
                            pos_embed_max_size=32, extra_conditioning_channels=1)
    g = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=g) * 0.05 if v.is_floating_point() else v).contiguous()
            for k, v in cn.state_dict().items()}


def build_sd3_folder(dst: Path) -> None:
    """tiny_sd3's SD3 folder with 3-layer CLIPs: ComfyUI's SD3 CLIP reads CLIP-L's and CLIP-G's penultimate layer
    and refuses a 2-layer model (comfy/sd1_clip.py asserts |layer_idx| < layers)."""
    import tiny_sd3

    names = ("TINY_CLIP_L_CONFIG", "TINY_CLIP_G_CONFIG")
    saved = {name: getattr(tiny_sd3, name) for name in names}
    try:
        for name in names:
            setattr(tiny_sd3, name, {**saved[name], "num_hidden_layers": 3})
        tiny_sd3.build_tiny_sd3_folder(dst, seed=0)
    finally:
        for name in names:
            setattr(tiny_sd3, name, saved[name])


def write_controlnet(models_dir: Path, path: Path | None = None) -> Path:
    from safetensors.torch import save_file

    path = path or Path(models_dir) / CONTROLNET[0] / CONTROLNET[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tiny_alimama_controlnet(sd3_pooled_width(models_dir)), str(path))
    return path


def prepare(models_dir: Path, *, controlnet: bool = True) -> None:
    """The tiny FLUX Fill folder (unless there), the SD3 folder, the ControlNet (controlnet=False: not under the
    template's name, for a server whose FillScope templates read another file there) and the LoRA."""
    from safetensors.torch import save_file

    from tiny_flux import build_tiny_flux_fill_folder

    diffusers = Path(models_dir) / "diffusers"
    if not (diffusers / FLUX).is_dir():
        build_tiny_flux_fill_folder(diffusers / FLUX, seed=0)
    build_sd3_folder(diffusers / SD3)
    if controlnet:
        write_controlnet(models_dir)
    lora = Path(models_dir) / LORA[0] / LORA[1]
    lora.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in kohya_lora().items()}, str(lora))


def n(class_type, **inputs) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def template(name: str) -> dict:
    return json.loads((REPO / "api_workflows" / f"{name}.api.json").read_text())


def _swap(prompt: dict, key: str, node: dict, want: str) -> None:
    assert prompt[key]["class_type"] == want, (key, prompt[key]["class_type"])  # the template's loader, as shipped
    prompt[key] = node


def swapped(name: str) -> dict:
    """The template's API twin with its loaders swapped for the tiny stand-ins (the module docstring lists them)."""
    prompt = template(name)
    if name in ("native_flux_fill_inspect", "native_flux_fill_mixed"):
        _swap(prompt, "1", n("NativeFillTestTinyFluxFill", folder=FLUX, context_in_dim=0), "UNETLoader")
        _swap(prompt, "2", n("NativeTestTinyCLIP", folder=FLUX, kind="flux"), "DualCLIPLoader")
        _swap(prompt, "3", n("InspectTestTinyVAE", folder=FLUX), "VAELoader")
    elif name == "native_sd3_inspect":
        _swap(prompt, "1", n("NativeTemplateTestTinySD3", folder=SD3, seed=0), "CheckpointLoaderSimple")
        prompt["1_vae"] = n("NativeTestTinyTAESD", seed=0, latent_channels=16)
        for node in prompt.values():  # the checkpoint's VAE output (slot 2) -> the TAESD stand-in
            for k, v in node["inputs"].items():
                if v == ["1", 2]:
                    node["inputs"][k] = ["1_vae", 0]
        _swap(prompt, "2", n("NativeTemplateTestTinySD3CLIP", folder=SD3), "TripleCLIPLoader")
        assert prompt["3"]["class_type"] == "ControlNetLoader"  # kept: ComfyUI's own loader reads the tiny file
    else:
        raise ValueError(f"{name} is not one of {graphs.NATIVE}")
    return prompt
