"""ComfyUI's own FLUX.2 VAE (VAELoader of flux2-vae.safetensors) in FillScope's klein condition and decode nodes, in a
real ComfyUI 0.3.75 server (nodes/native_vae.py's NativeFlux2VAEModel; fillscope/vae.py's `normalised_patches`).

How ComfyUI builds the FLUX.2 VAE (comfy/sd.py VAE.__init__): an LDM state dict (decoder.conv_in.weight with 32 input
channels, 2-D) holding `bn.running_mean` selects its AutoencoderKL with `batch_norm_latent`: latent_channels 32 x 4 =
128, downscale 8 x 2 = 16. Its encode is encoder -> quant_conv -> the posterior's mode -> 2x2 patches channel-major ->
batch_norm with the running statistics (eps 1e-4): FillScope's klein latent [B,128,H/16,W/16]; its decode undoes
that. Its widths are fixed by the detection (ch 128, ch_mult 1,2,4,4, 2 res blocks, GroupNorm 32), so VAELoader builds
no smaller FLUX.2 VAE than the published one: the VAE here has the published geometry (fillscope/configs/
flux2_vae.json, 84M parameters, seeded weights, BatchNorm statistics that are not the identity), written under BFL's
keys (checkpoint_files.flux2_vae_bfl_state); ComfyUI's VAELoader and FillScope's Load VAE (kind flux2) load that
same file. The klein transformer and Qwen3 are the session's tiny ones (tests/tiny_klein.py), under the published
single-file names.

Checked (fp32): the inpaint condition (with a reference image) and the edit condition (two images) built with ComfyUI's
VAE equal those built with FillScope's (reference tokens, source latents: <= 1e-5); one klein sampler's latent decoded
by FillScope's VAE Decode with ComfyUI's VAE equals its decode with FillScope's VAE (<= 1e-5), and ComfyUI's own
VAEDecode of the sampler's LATENT equals both; the whole graph on ComfyUI's VAE (condition, sampler, decode) gives
FillScope's image; a FLUX.1 VAE (ComfyUI's, 16 channels at 1/8) into the klein conditions is refused naming `vae`
before it encodes anything, and the next prompt runs.
"""

from __future__ import annotations

import json

import pytest
import torch
from comfy_server import ComfyExecutionError
from safetensors import safe_open
from workflow_helpers import api_node

pytestmark = pytest.mark.server

IMAGE, REFERENCE = "klein_vae_example.png", "klein_vae_reference.png"
# multiples of 16 px (one klein token): nothing cropped or padded; small, since ComfyUI's FLUX.2 VAE runs at the
# published widths (its convolutions are most of this module's work; it used 128x96 / 80x64 before, 4x the pixels)
W, H, RW, RH = 64, 48, 48, 32
VAE_FILE = "flux2-vae.safetensors"
# fp32 noise between two implementations of the same convolutions (an 8-bit level is 3.9e-3): measured 1.06e-5 (decode)
# and 1.31e-5 (whole graph's image) with one torch thread, as `make test` runs (OMP_NUM_THREADS=1), under 1e-5 with two
TOL = 2e-5


def flux2_vae_file(path):
    """The FLUX.2 VAE at its published geometry (the shipped config), seeded weights and BatchNorm statistics as a
    trained VAE has them, under BFL's keys."""
    import checkpoint_files as cf
    from diffusers import AutoencoderKLFlux2

    from fillscope.specs import shipped_config

    config = {k: v for k, v in shipped_config("flux2_vae").items() if not k.startswith("_")}
    torch.manual_seed(21)
    vae = AutoencoderKLFlux2(**config).eval()
    with torch.no_grad():
        vae.bn.running_mean.copy_(torch.randn(vae.bn.running_mean.shape) * 0.5)
        vae.bn.running_var.copy_(torch.rand(vae.bn.running_var.shape) * 2 + 0.25)
    cf.save(path, cf.flux2_vae_bfl_state(vae))


@pytest.fixture(scope="module")
def server(test_nodes_server):
    def prepare(server):
        import checkpoint_files as cf
        import numpy as np
        from PIL import Image
        from tiny_klein import build_tiny_components

        models = server.models_dir
        klein = build_tiny_components(0)
        cf.save(models / "diffusion_models/flux-2-klein-4b.safetensors", cf.klein_bfl_state(klein["transformer"]))
        cf.save(models / "text_encoders/qwen_3_4b.safetensors", cf.qwen3_comfy_state(klein["text_encoder"]))
        flux2_vae_file(models / "vae" / VAE_FILE)
        server.input_dir.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        rgba = rng.integers(0, 256, size=(H, W, 4), dtype=np.uint8)
        rgba[..., 3] = 255
        rgba[H // 4:3 * H // 4, W // 4:3 * W // 4, 3] = 0  # transparent = repaint (LoadImage mask = 1 - alpha)
        Image.fromarray(rgba, "RGBA").save(server.input_dir / IMAGE)
        Image.fromarray(rng.integers(0, 256, size=(RH, RW, 3), dtype=np.uint8), "RGB").save(server.input_dir / REFERENCE)

    with test_nodes_server.module(prepare) as server:
        yield server


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


def saved(server, folder: str, name: str) -> dict:
    with safe_open(str(server.output_dir / folder / f"{name}.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def condition(server, name):
    return saved(server, "fillscope_native_klein_vae", name)


def image(server, name):
    return saved(server, "fillscope_inspect", name)


def loader(info, class_type, source, **extra):
    return api_node(info, class_type, source=source, dtype="fp32", device="cpu", **extra)


def common(info) -> dict:
    return {
        "img": api_node(info, "LoadImage", image=IMAGE),
        "ref": api_node(info, "LoadImage", image=REFERENCE),
        "q": loader(info, "FillScopeLoadQwen3", "text_encoders/qwen_3_4b.safetensors"),
        "tr": loader(info, "FillScopeLoadKleinTransformer", "diffusion_models/flux-2-klein-4b.safetensors"),
        "txt": api_node(info, "FillScopeQwen3Encode", qwen3=["q", 0], text="a fireplace"),
        "vfs": loader(info, "FillScopeLoadVAE", f"vae/{VAE_FILE}", kind="flux2"),
        "vnat": api_node(info, "VAELoader", vae_name=VAE_FILE),
    }


def max_diff(a, b) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


def test_klein_condition_nodes_take_comfyui_vae(info):
    for node in ("FillScopeKleinInpaintCondition", "FillScopeKleinEditCondition"):
        vae = info[node]["input"]["required"]["vae"]
        assert vae[0] == "FS_VAE,VAE", (node, vae)
        assert "ComfyUI's own" in vae[1]["tooltip"]


def test_comfyui_flux2_vae_gives_fillscope_klein_conditions_and_decode(server, info):
    prompt = {**common(info)}
    for vae in ("vfs", "vnat"):
        prompt.update({
            f"ci_{vae}": api_node(info, "FillScopeKleinInpaintCondition", vae=[vae, 0], image=["img", 0],
                                  mask=["img", 1], reference=["ref", 0]),
            f"ce_{vae}": api_node(info, "FillScopeKleinEditCondition", vae=[vae, 0], image=["img", 0],
                                  image_2=["ref", 0]),
            f"si_{vae}": api_node(info, "NativeKleinVAETestSaveCondition", condition=[f"ci_{vae}", 0],
                                  name=f"inpaint_{vae}"),
            f"se_{vae}": api_node(info, "NativeKleinVAETestSaveCondition", condition=[f"ce_{vae}", 0],
                                  name=f"edit_{vae}"),
            # the whole graph on one VAE: its condition, the sampler, its decode
            f"smp_{vae}": api_node(info, "FillScopeKleinSampler", transformer=["tr", 0], positive=["txt", 0],
                                   condition=[f"ci_{vae}", 0], steps=2, seed=3),
            f"dec_{vae}": api_node(info, "FillScopeVAEDecode", vae=[vae, 0], latent=[f"smp_{vae}", 0]),
            f"sd_{vae}": api_node(info, "InspectTestSave", name=f"graph_{vae}", image=[f"dec_{vae}", 0],
                                  latent=[f"smp_{vae}", 2]),
        })
    # one latent (the sampler on FillScope's VAE's condition) decoded by both VAEs and by ComfyUI's VAEDecode
    prompt.update({
        "dec_x": api_node(info, "FillScopeVAEDecode", vae=["vnat", 0], latent=["smp_vfs", 0]),
        "sd_x": api_node(info, "InspectTestSave", name="decode_native", image=["dec_x", 0]),
        "cdec": api_node(info, "VAEDecode", samples=["smp_vfs", 2], vae=["vnat", 0]),
        "sd_c": api_node(info, "InspectTestSave", name="decode_comfy", image=["cdec", 0]),
        # ComfyUI's LATENT into FillScope's VAE Decode (native_latent) on ComfyUI's FLUX.2 VAE: the family read
        # from the VAE itself
        "dec_n": api_node(info, "FillScopeVAEDecode", vae=["vnat", 0], native_latent=["smp_vfs", 2]),
        "sd_n": api_node(info, "InspectTestSave", name="decode_native_latent", image=["dec_n", 0]),
    })
    entry = server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success"
    notes = entry["outputs"]["dec_x"]["fillscope_shapes"][0]["node"]["notes"]
    assert any(n.startswith("ComfyUI's VAE") and "FLUX.2" in n for n in notes), notes

    figures = {}
    for kind, keys in (("inpaint", ("references", "reference_ids", "source", "token_mask")),
                       ("edit", ("references", "reference_ids"))):
        fs, nat = condition(server, f"{kind}_vfs"), condition(server, f"{kind}_vnat")
        assert sorted(fs) == sorted(nat) == sorted(keys)
        assert torch.equal(fs["reference_ids"], nat["reference_ids"])
        for key in ("references", "source", "token_mask"):
            if key in fs:
                figures[f"{kind} {key}"] = max_diff(nat[key], fs[key])
    inpaint = condition(server, "inpaint_vfs")
    # the source's tokens [1, (H/16)*(W/16), 128] and the reference's [1, (RH/16)*(RW/16), 128]; the source latents
    # [1, 128, H/16, W/16]
    assert list(inpaint["references"].shape) == [1, (H // 16) * (W // 16) + (RH // 16) * (RW // 16), 128]
    assert list(inpaint["source"].shape) == [1, 128, H // 16, W // 16]
    assert float(inpaint["source"].abs().max()) > 0.5  # real values, not a blank

    graph_fs, graph_nat = image(server, "graph_vfs"), image(server, "graph_vnat")
    decoded = image(server, "decode_native")["image"]
    comfy_decoded = image(server, "decode_comfy")["image"]
    assert list(graph_fs["image"].shape) == [1, H, W, 3] and float(graph_fs["image"].std()) > 0.01
    figures["decode (same latent)"] = max_diff(decoded, graph_fs["image"])
    figures["ComfyUI VAEDecode of the LATENT"] = max_diff(comfy_decoded, graph_fs["image"])
    figures["FillScope VAE Decode of the LATENT vs ComfyUI's VAEDecode"] = max_diff(
        image(server, "decode_native_latent")["image"], comfy_decoded)
    figures["whole graph: latent"] = max_diff(graph_nat["latent.samples"], graph_fs["latent.samples"])
    figures["whole graph: image"] = max_diff(graph_nat["image"], graph_fs["image"])
    print("ComfyUI's FLUX.2 VAE vs FillScope's, max |diff|:", json.dumps(figures, indent=1))
    assert all(v <= TOL for v in figures.values()), figures


def test_flux1_vae_into_klein_conditions_is_refused_and_next_prompt_runs(server, info):
    base = {
        "img": api_node(info, "LoadImage", image=IMAGE),
        "v1": api_node(info, "NativeKleinVAETestFlux1VAE", counter="flux1_vae_calls"),
    }
    cases = {
        "inpaint": api_node(info, "FillScopeKleinInpaintCondition", vae=["v1", 0], image=["img", 0], mask=["img", 1]),
        "edit": api_node(info, "FillScopeKleinEditCondition", vae=["v1", 0], image=["img", 0]),
    }
    for kind, node in cases.items():
        prompt = {**base, "cond": node,
                  "save": api_node(info, "NativeKleinVAETestSaveCondition", condition=["cond", 0], name=f"refused_{kind}")}
        with pytest.raises(ComfyExecutionError) as e:
            server.run(prompt, timeout=300)
        errors = [d for k, d in e.value.entry["status"]["messages"] if k == "execution_error"]
        assert errors and errors[0]["node_id"] == "cond", errors
        message = errors[0]["exception_message"]
        assert "vae" in message and "16 latent channels at 1/8" in message and "FLUX.2" in message, message
        assert server.alive()
    # refused in the node's model-free step: ComfyUI's VAE never encoded (its counter file was never written)
    assert not (server.output_dir / "fillscope_native_klein_vae" / "flux1_vae_calls.json").exists()
    assert not list((server.output_dir / "fillscope_native_klein_vae").glob("refused_*"))

    prompt = {**common(info),
              "ce": api_node(info, "FillScopeKleinEditCondition", vae=["vnat", 0], image=["ref", 0]),
              "se": api_node(info, "NativeKleinVAETestSaveCondition", condition=["ce", 0], name="after_refusal")}
    entry = server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success"
    assert list(condition(server, "after_refusal")["references"].shape) == [1, (RH // 16) * (RW // 16), 128]
    print("refused:", message)
