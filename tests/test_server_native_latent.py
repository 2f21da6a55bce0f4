"""FillScope's samplers' native LATENT output and FillScope VAE Decode's native_latent input (issue 21, part 3), in a
real ComfyUI 0.3.75 server.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes as one more custom_nodes
folder, this module's copy of the session's tiny models written into it (conftest.serve_tiny_models; RENAMED: three
files under names of its own). InspectTestTinyVAE is ComfyUI's own VAE object (comfy.sd.VAE) on a tiny diffusers
folder's VAE (ComfyUI's VAELoader cannot load the tiny file); InspectTestSave writes a LATENT's or IMAGE's tensors to a
safetensors file; NativeTestTinyModel is ComfyUI's own tiny Flux; LatentTestZeroConditioning a zero CONDITIONING of its
widths.

Checked: FLUX Fill / SD3 sampler -> LATENT -> ComfyUI's VAEDecode equals FillScope's decode of the sampler's own latent
on the same VAE weights (<= 1e-5, fp32); the LATENT is ComfyUI's raw first-stage latent ([B,16,H/8,W/8], FillScope's
latent / scale + shift) with the repaint mask as noise_mask, and goes into LatentUpscale, SetLatentNoiseMask,
SaveLatent and KSampler (ComfyUI's tiny Flux) without error; ComfyUI's VAEEncode -> FillScope's decode (native_latent)
equals ComfyUI's VAEDecode of it; klein's LATENT is [B,128,H/16,W/16] and FillScope's decode of it equals its decode
of the sampler's own latent; ComfyUI's VAE object wired to FillScope's FLUX Fill condition and decode (FS_VAE,VAE
socket) gives FillScope's own VAE's latent and image (<= 1e-5); a LATENT of another family is refused by name.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from workflow_helpers import api_node

pytestmark = pytest.mark.server

FLUX, SD3, SD3_CN = "FLUX.1-Fill-dev", "stable-diffusion-3-medium-diffusers", "SD3-Controlnet-Inpainting"
IMAGE, W, H = "native_latent_example.png", 128, 96  # conftest.serve_tiny_models' image (multiples of 16: no padding)
KLEIN_VAE = "vae/native_latent_flux2-vae.safetensors"  # serve_tiny_models' tiny FLUX.2 VAE
TOL = 1e-5
# serve_tiny_models' files this module keeps under names of its own on the shared server (conftest.py test_nodes_server)
# where other modules write other contents under the published names: test_server_native_templates.py a 64x48
# fillscope_example.png and an alimama-layout SD3-Controlnet-Inpainting.safetensors, test_server_native_klein_vae.py a
# full-size flux2-vae.safetensors. (folder, published name, this module's name)
RENAMED = (("input_dir", "fillscope_example.png", IMAGE),
           ("models_dir", "vae/flux2-vae.safetensors", KLEIN_VAE),
           ("models_dir", "controlnet/SD3-Controlnet-Inpainting.safetensors",
            "controlnet/native_latent_SD3-Controlnet-Inpainting.safetensors"))


@pytest.fixture(scope="module")
def server(test_nodes_server):
    from conftest import serve_tiny_models

    def prepare(server):
        server.input_dir.mkdir(parents=True, exist_ok=True)
        serve_tiny_models(server, server.models_dir)
        for folder, published, own in RENAMED:
            (getattr(server, folder) / published).rename(getattr(server, folder) / own)

    with test_nodes_server.module(prepare) as server:
        yield server


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


def saved(server, name) -> dict:
    with safe_open(str(server.output_dir / "fillscope_inspect" / f"{name}.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def save(info, name, **what):
    return api_node(info, "InspectTestSave", name=name, **what)


def loader(info, class_type, source, **extra):
    return api_node(info, class_type, source=source, dtype="fp32", device="cpu", **extra)


def decode_checks(info, p: str, family: str, fs_vae: str, sampler: str, folder: str) -> dict:
    """FillScope's decode of the sampler's latent, ComfyUI's VAEDecode and FillScope's decode of its LATENT; ComfyUI's
    VAEEncode of the image into both decoders; the LATENT saved (ids prefixed `p`)."""
    return {
        f"{p}_tvae": api_node(info, "InspectTestTinyVAE", folder=folder),
        f"{p}_fsdec": api_node(info, "FillScopeVAEDecode", vae=[fs_vae, 0], latent=[sampler, 0]),
        f"{p}_fsnat": api_node(info, "FillScopeVAEDecode", vae=[fs_vae, 0], native_latent=[sampler, 2]),
        f"{p}_cdec": api_node(info, "VAEDecode", samples=[sampler, 2], vae=[f"{p}_tvae", 0]),
        f"{p}_enc": api_node(info, "VAEEncode", pixels=["img", 0], vae=[f"{p}_tvae", 0]),
        f"{p}_enc_c": api_node(info, "VAEDecode", samples=[f"{p}_enc", 0], vae=[f"{p}_tvae", 0]),
        f"{p}_enc_fs": api_node(info, "FillScopeVAEDecode", vae=[fs_vae, 0], native_latent=[f"{p}_enc", 0]),
        f"{p}_s1": save(info, f"{family}_fs", image=[f"{p}_fsdec", 0], latent=[sampler, 2]),
        f"{p}_s2": save(info, f"{family}_fs_native", image=[f"{p}_fsnat", 0]),
        f"{p}_s3": save(info, f"{family}_comfy", image=[f"{p}_cdec", 0]),
        f"{p}_s4": save(info, f"{family}_enc_comfy", image=[f"{p}_enc_c", 0], latent=[f"{p}_enc", 0]),
        f"{p}_s5": save(info, f"{family}_enc_fs", image=[f"{p}_enc_fs", 0]),
    }


def assert_decodes_agree(server, family: str):
    fs, fs_native, comfy = (saved(server, f"{family}_{k}") for k in ("fs", "fs_native", "comfy"))
    samples, mask = fs["latent.samples"], fs["latent.noise_mask"]
    assert list(samples.shape) == [1, 16, H // 8, W // 8] and samples.dtype == torch.float32
    assert list(mask.shape) == [1, 1, H, W] and set(mask.unique().tolist()) <= {0.0, 1.0} and mask.sum() > 0
    assert list(fs["image"].shape) == [1, H, W, 3]
    assert (comfy["image"] - fs_native["image"]).abs().max() <= TOL  # the LATENT: ComfyUI's decode = FillScope's
    if family != "flux":  # FLUX Fill's LATENT keeps the source's latent outside the mask (test_server_native_model.py)
        assert (comfy["image"] - fs["image"]).abs().max() <= TOL  # the LATENT = the sampler's own latent
    enc_c, enc_fs = saved(server, f"{family}_enc_comfy"), saved(server, f"{family}_enc_fs")
    assert list(enc_c["latent.samples"].shape) == [1, 16, H // 8, W // 8]
    assert (enc_fs["image"] - enc_c["image"]).abs().max() <= TOL  # VAEEncode -> FillScope decode = VAEDecode
    print(family, "max |diff|: VAEDecode vs FillScope decode", float((comfy["image"] - fs["image"]).abs().max()),
          "| LATENT through FillScope decode", float((fs_native["image"] - fs["image"]).abs().max()),
          "| VAEEncode -> FillScope decode vs VAEDecode", float((enc_fs["image"] - enc_c["image"]).abs().max()))


def klein_sampled(info) -> dict:
    """The tiny klein inpaint up to its sampler ("smp": FS_LATENT out 0, ComfyUI's LATENT out 2)."""
    return {
        "img": api_node(info, "LoadImage", image=IMAGE),
        "q": loader(info, "FillScopeLoadQwen3", "text_encoders/qwen_3_4b.safetensors"),
        "tr": loader(info, "FillScopeLoadKleinTransformer", "diffusion_models/flux-2-klein-4b.safetensors"),
        "vae": loader(info, "FillScopeLoadVAE", KLEIN_VAE, kind="flux2"),
        "txt": api_node(info, "FillScopeQwen3Encode", qwen3=["q", 0], text="a fireplace"),
        "cond": api_node(info, "FillScopeKleinInpaintCondition", vae=["vae", 0], image=["img", 0], mask=["img", 1]),
        "smp": api_node(info, "FillScopeKleinSampler", transformer=["tr", 0], positive=["txt", 0], condition=["cond", 0],
                        steps=2, seed=3),
    }


def test_object_info(info):
    for name in ("FillScopeFluxFillSampler", "FillScopeSD3ControlNetInpaintSampler", "FillScopeKleinSampler"):
        assert info[name]["output"][:2] == ["FS_LATENT", "STRING"] and info[name]["output"][-1] == "LATENT", name
        assert info[name]["output_name"][-1] == "LATENT"
    decode = info["FillScopeVAEDecode"]["input"]
    assert list(decode["required"]) == ["vae"]
    assert decode["optional"]["latent"][0] == "FS_LATENT" and decode["optional"]["native_latent"][0] == "LATENT"


def test_flux_fill_latent_into_comfyui_nodes(server, info):
    prompt = {
        "img": api_node(info, "LoadImage", image=IMAGE),
        "clip": loader(info, "FillScopeLoadCLIPL", FLUX), "t5": loader(info, "FillScopeLoadT5", FLUX),
        "tr": loader(info, "FillScopeLoadFluxFillTransformer", FLUX), "vae": loader(info, "FillScopeLoadVAE", FLUX, kind="flux"),
        "txt": api_node(info, "FillScopeFluxPrompt", clip_l=["clip", 0], t5=["t5", 0], text="a red brick fireplace"),
        "cond": api_node(info, "FillScopeFluxFillCondition", vae=["vae", 0], image=["img", 0], mask=["img", 1]),
        "smp": api_node(info, "FillScopeFluxFillSampler", transformer=["tr", 0], flux_text=["txt", 0], condition=["cond", 0],
                    steps=2, seed=3),
        **decode_checks(info, "f", "flux", "vae", "smp", FLUX),
        # ComfyUI's own latent nodes on the LATENT
        "up": api_node(info, "LatentUpscale", samples=["smp", 2], upscale_method="nearest-exact", width=2 * W, height=2 * H,
                   crop="disabled"),
        "snm": api_node(info, "SetLatentNoiseMask", samples=["smp", 2], mask=["img", 1]),
        "s_up": save(info, "flux_up", latent=["up", 0]),
        "s_snm": save(info, "flux_snm", latent=["snm", 0]),
        "sl": api_node(info, "SaveLatent", samples=["smp", 2], filename_prefix="fillscope_latent/flux"),
        # KSampler with ComfyUI's own tiny Flux (16 latent channels, patch 2): the LATENT's grid lines up
        "model": api_node(info, "NativeTestTinyModel", family="flux", seed=0),
        "zc": api_node(info, "LatentTestZeroConditioning", tokens=4, context_dim=32, pooled_dim=16),
        "ks": api_node(info, "KSampler", model=["model", 0], positive=["zc", 0], negative=["zc", 0],
                   latent_image=["smp", 2], seed=0, steps=1, cfg=1.0, sampler_name="euler", scheduler="simple",
                   denoise=0.5),
        "s_ks": save(info, "flux_ks", latent=["ks", 0]),
    }
    entry = server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success"
    assert_decodes_agree(server, "flux")
    up, snm, ks = (saved(server, n) for n in ("flux_up", "flux_snm", "flux_ks"))
    assert list(up["latent.samples"].shape) == [1, 16, H // 4, W // 4]
    assert list(snm["latent.noise_mask"].shape) == [1, 1, H, W]
    assert list(ks["latent.samples"].shape) == [1, 16, H // 8, W // 8] and torch.isfinite(ks["latent.samples"]).all()
    assert list((server.output_dir / "fillscope_latent").glob("flux*.latent"))


def test_sd3_latent_into_comfyui_decode(server, info):
    prompt = {
        "img": api_node(info, "LoadImage", image=IMAGE),
        "cl": loader(info, "FillScopeLoadCLIPL", SD3), "cg": loader(info, "FillScopeLoadCLIPG", SD3),
        "t5": loader(info, "FillScopeLoadT5", SD3),
        "tr": loader(info, "FillScopeLoadSD3Transformer", SD3), "cn": loader(info, "FillScopeLoadSD3InpaintControlNet", SD3_CN),
        "vae": loader(info, "FillScopeLoadVAE", SD3, kind="sd3"),
        "pos": api_node(info, "FillScopeSD3Prompt", clip_l=["cl", 0], clip_g=["cg", 0], t5=["t5", 0], text="a fireplace"),
        "neg": api_node(info, "FillScopeSD3Prompt", clip_l=["cl", 0], clip_g=["cg", 0], t5=["t5", 0], text=""),
        "cond": api_node(info, "FillScopeSD3InpaintCondition", vae=["vae", 0], image=["img", 0], mask=["img", 1]),
        "smp": api_node(info, "FillScopeSD3ControlNetInpaintSampler", transformer=["tr", 0], controlnet=["cn", 0],
                    positive=["pos", 0], negative=["neg", 0], condition=["cond", 0], steps=2, seed=3),
        **decode_checks(info, "s", "sd3", "vae", "smp", SD3),
        "sl": api_node(info, "SaveLatent", samples=["smp", 2], filename_prefix="fillscope_latent/sd3"),
    }
    entry = server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success"
    assert_decodes_agree(server, "sd3")


def test_klein_latent_shape_and_round_trip(server, info):
    prompt = {
        **klein_sampled(info),
        "fsdec": api_node(info, "FillScopeVAEDecode", vae=["vae", 0], latent=["smp", 0]),
        "fsnat": api_node(info, "FillScopeVAEDecode", vae=["vae", 0], native_latent=["smp", 2]),
        "s1": save(info, "klein_fs", image=["fsdec", 0], latent=["smp", 2]),
        "s2": save(info, "klein_fs_native", image=["fsnat", 0]),
        "up": api_node(info, "LatentUpscale", samples=["smp", 2], upscale_method="nearest-exact", width=2 * W,
                   height=2 * H, crop="disabled"),
        "s3": save(info, "klein_up", latent=["up", 0]),
    }
    entry = server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success"
    fs, native = saved(server, "klein_fs"), saved(server, "klein_fs_native")
    assert list(fs["latent.samples"].shape) == [1, 128, H // 16, W // 16]
    assert list(fs["latent.noise_mask"].shape) == [1, 1, H, W]
    assert list(native["image"].shape) == [1, H, W, 3]
    assert torch.equal(native["image"], fs["image"])  # identity conversion, no geometry to restore at 128x96
    # ComfyUI 0.3.75's LatentUpscale reads width/height as pixels / 8 whatever the latent (it predates FLUX.2's /16)
    assert list(saved(server, "klein_up")["latent.samples"].shape) == [1, 128, 2 * H // 8, 2 * W // 8]


def test_wrong_family_latent_is_refused_and_server_keeps_serving(server, info):
    from comfy_server import ComfyExecutionError

    prompt = {
        "img": api_node(info, "LoadImage", image=IMAGE),
        "tvae": api_node(info, "InspectTestTinyVAE", folder=FLUX),
        "enc": api_node(info, "VAEEncode", pixels=["img", 0], vae=["tvae", 0]),
        "vae": loader(info, "FillScopeLoadVAE", KLEIN_VAE, kind="flux2"),
        "dec": api_node(info, "FillScopeVAEDecode", vae=["vae", 0], native_latent=["enc", 0]),
        "s": save(info, "wrong", image=["dec", 0]),
    }
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    assert "native_latent" in str(e.value) and "128-channel" in str(e.value)
    assert server.alive()


def test_latent_and_native_latent_both_wired_are_refused_naming_both(server, info):
    """Issue 35: one rule for two inputs that mean the same. VAE Decode took a FillScope latent and a ComfyUI LATENT
    both and decoded one; it refuses both wired, naming both, as the samplers refuse transformer and model both."""
    from comfy_server import ComfyExecutionError

    prompt = {
        **klein_sampled(info),
        "dec": api_node(info, "FillScopeVAEDecode", vae=["vae", 0], latent=["smp", 0], native_latent=["smp", 2]),
        "s": save(info, "both_latents", image=["dec", 0]),
    }
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=300)
    msg = str(e.value)
    assert "input 'latent'" in msg and "is wired and so is 'native_latent'" in msg and "not both" in msg, msg
    assert server.alive()


# ---- ComfyUI's own VAE where FillScope takes FS_VAE ---------------------------------------------------------------


def test_comfyui_vae_into_fillscope_condition_and_decode(server, info):
    """FLUX Fill with ComfyUI's VAE object (InspectTestTinyVAE: comfy.sd.VAE on the same tiny weights) in the
    condition and the decode gives FillScope's own VAE's image (fp32; ComfyUI's VAE matches diffusers to ~5e-7)."""
    def graph(vae: str, name: str) -> dict:
        return {
            "cond": api_node(info, "FillScopeFluxFillCondition", vae=[vae, 0], image=["img", 0], mask=["img", 1]),
            "smp": api_node(info, "FillScopeFluxFillSampler", transformer=["tr", 0], flux_text=["txt", 0],
                        condition=["cond", 0], steps=2, seed=5),
            "dec": api_node(info, "FillScopeVAEDecode", vae=[vae, 0], latent=["smp", 0]),
            "dec_n": api_node(info, "FillScopeVAEDecode", vae=[vae, 0], native_latent=["smp", 2]),
            "s": save(info, name, image=["dec", 0], latent=["smp", 2]),
            "s_n": save(info, f"{name}_n", image=["dec_n", 0]),
            "pcond": api_node(info, "PreviewAny", source=["cond", 1]),
        }

    common = {
        "img": api_node(info, "LoadImage", image=IMAGE),
        "clip": loader(info, "FillScopeLoadCLIPL", FLUX), "t5": loader(info, "FillScopeLoadT5", FLUX),
        "tr": loader(info, "FillScopeLoadFluxFillTransformer", FLUX), "vae": loader(info, "FillScopeLoadVAE", FLUX, kind="flux"),
        "tvae": api_node(info, "InspectTestTinyVAE", folder=FLUX),
        "txt": api_node(info, "FillScopeFluxPrompt", clip_l=["clip", 0], t5=["t5", 0], text="a red brick fireplace"),
    }
    for vae, name in (("vae", "nv_fs"), ("tvae", "nv_comfy")):
        entry = server.run({**common, **graph(vae, name)}, timeout=600)
        assert entry["status"]["status_str"] == "success"
        notes = entry["outputs"]["dec"]["fillscope_shapes"][0]["node"]["notes"]
        assert any(n.startswith("ComfyUI's VAE") for n in notes) == (vae == "tvae"), notes
        # what was assumed of ComfyUI's VAE (FLUX.1's and SD3's have the same shapes) is on the condition's record
        notes = json.loads(entry["outputs"]["pcond"]["text"][0])["node"]["notes"]  # its shapes output, shown
        assumed = [n for n in notes if n.startswith("vae: ComfyUI's VAE object does not say whose 16-channel VAE")]
        assert bool(assumed) == (vae == "tvae"), notes
        if assumed:
            assert "taken as FLUX's, the family of this node (latent scale 0.3611, shift 0.1159)" in assumed[0]
    fs, comfy = saved(server, "nv_fs"), saved(server, "nv_comfy")
    fs_n, comfy_n = saved(server, "nv_fs_n"), saved(server, "nv_comfy_n")
    assert (comfy["latent.samples"] - fs["latent.samples"]).abs().max() <= TOL
    assert (comfy["image"] - fs["image"]).abs().max() <= TOL
    assert (comfy_n["image"] - fs_n["image"]).abs().max() <= TOL  # the LATENT (source kept outside the mask), both VAEs
    print("native VAE vs FillScope VAE: latent", float((comfy["latent.samples"] - fs["latent.samples"]).abs().max()),
          "image", float((comfy["image"] - fs["image"]).abs().max()))


def test_a_flux_vae_file_loaded_with_kind_sd3_is_warned_of_on_its_record(server, info):
    """Issue 35: ae.safetensors (the name FLUX.1's VAE is published under) loaded as SD3's: the same shapes, so the
    weights cannot tell; the record warns that the latents take SD3's scale as kind says. Kind flux: no warning."""
    for kind, warned in (("sd3", True), ("flux", False)):
        g = {"vae": loader(info, "FillScopeLoadVAE", "vae/ae.safetensors", kind=kind),
             "p": api_node(info, "PreviewAny", source=["vae", 1])}
        entry = server.run(g, timeout=300)
        warnings = entry["outputs"]["vae"]["fillscope_shapes"][0]["node"].get("warnings", [])
        said = [w for w in warnings if "looks like FLUX.1's (its file name 'ae.safetensors' says so)" in w]
        assert bool(said) == warned, warnings
        if said:
            assert said[0].endswith("so the latents take SD3's scale and shift as kind says: if it is FLUX.1's, set "
                                    "kind flux")
