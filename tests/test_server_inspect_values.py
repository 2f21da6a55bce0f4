"""FillScope Inspect, Inspect CLIP and Inspect VAE (nodes/inspect_values.py, inspect_clip.py, inspect_vae.py) in graphs of ComfyUI's own nodes, in a
real ComfyUI 0.3.75 server.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes as one more custom_nodes
folder: NativeTestTinyCLIP is ComfyUI's own FLUX CLIP object on the tiny FLUX folder's text encoders; InspectTestTinyVAE
is ComfyUI's own VAE object on the tiny FLUX VAE (ComfyUI's VAELoader cannot load the tiny file: it builds the full-size
VAE); InspectTestSave writes every tensor of a LATENT / IMAGE / MASK / CONDITIONING to a safetensors file.

Checked: with an Inspect node on every LATENT, CONDITIONING, IMAGE and MASK link of a graph (LoadImage,
CLIPTextEncodeFlux, InpaintModelConditioning, ReferenceLatent, VAEEncode, LatentUpscale, SetLatentNoiseMask,
VAEDecode, SaveImage) everything downstream equals the graph without them bit for bit, and each Inspect record holds
the tensors' shapes; CLIPTextEncode / CLIPTextEncodeFlux through Inspect CLIP equal the original CLIP's, and its live
record (GET /fillscope/live) lists the token ids per tokenizer and the shapes, while encodes on the input CLIP record
nothing; VAEEncode / VAEDecode and the tiled ones through Inspect VAE equal the original's, with live records of each
call; after each, a normal prompt runs, and ComfyUI logs no model kept alive by a reference cycle.
"""

from __future__ import annotations

import io
import json
import urllib.parse

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from tiny_flux import build_tiny_flux_fill_folder
from tiny_models import comfy_tokenizer_dirs
from workflow_helpers import api_node

pytestmark = pytest.mark.server

FLUX = "FLUX.1-Fill-dev"
IMAGE, W, H = "inspect_example.png", 128, 96
PROMPT = "a red brick fireplace"
LONG = " ".join(["a cosy living room with a red brick fireplace, warm light, a wooden floor"] * 5)


@pytest.fixture(scope="module")
def server(test_nodes_server):
    def prepare(server):
        build_tiny_flux_fill_folder(server.models_dir / "diffusers" / FLUX, seed=0)
        server.input_dir.mkdir(parents=True, exist_ok=True)
        rgba = np.random.default_rng(1).integers(0, 256, size=(H, W, 4), dtype=np.uint8)
        rgba[..., 3] = 255
        rgba[24:72, 32:96, 3] = 0  # transparent = the mask (LoadImage: mask = 1 - alpha)
        Image.fromarray(rgba, "RGBA").save(server.input_dir / IMAGE)

    with test_nodes_server.module(prepare) as server:
        yield server


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


def saved(server, name) -> tuple[dict, dict]:
    with safe_open(str(server.output_dir / "fillscope_inspect" / f"{name}.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})


def pixels(server, entry, key) -> np.ndarray:
    image = entry["outputs"][key]["images"][0]
    return np.asarray(Image.open(io.BytesIO(server.view(image["filename"], image["subfolder"], image["type"]))))


def record(entry, key) -> dict:
    return entry["outputs"][key]["fillscope_shapes"][0]["node"]


def shapes(rec) -> dict:
    return {t["name"]: t["shape"] for t in rec["tensors"]}


def live_records(server, prompt_id) -> dict:
    return server.get_json("/fillscope/live?prompt_id=" + urllib.parse.quote(prompt_id))


def assert_normal_prompt_runs(server, info):
    prompt = {"img": api_node(info, "LoadImage", image=IMAGE),
              "vae": api_node(info, "InspectTestTinyVAE", folder=FLUX),
              "enc": api_node(info, "VAEEncode", pixels=["img", 0], vae=["vae", 0]),
              "dec": api_node(info, "VAEDecode", samples=["enc", 0], vae=["vae", 0]),
              "out": api_node(info, "SaveImage", images=["dec", 0], filename_prefix="inspect/after")}
    assert server.run(prompt, timeout=300)["status"]["status_str"] == "success"
    log = server.log_text(since=server.module_log_start)  # this module's part of the shared server's log
    assert "memory leak" not in log and "[FillScope] Inspect" not in log  # no record lost, no model kept by a cycle


# ---- FillScope Inspect ------------------------------------------------------------------------------------------


def test_object_info(info):
    assert info["FillScopeInspect"]["input"]["required"]["value"][0] == "*"
    assert info["FillScopeInspect"]["output"] == ["*", "STRING"]
    assert info["FillScopeInspectCLIP"]["output"] == ["CLIP", "STRING"]
    assert info["FillScopeInspectVAE"]["output"] == ["VAE", "STRING"]
    assert {info[n]["category"] for n in ("FillScopeInspect", "FillScopeInspectCLIP", "FillScopeInspectVAE")} == {
        "FillScope/inspect"}


def value_graph(info, key: str, inspect: bool) -> dict:
    """LoadImage, CLIPTextEncodeFlux, InpaintModelConditioning, ReferenceLatent, VAEEncode, LatentUpscale,
    SetLatentNoiseMask, VAEDecode, SaveImage; with `inspect`, an Inspect node on every LATENT, CONDITIONING, IMAGE and
    MASK link (ids <key>_i_<what>)."""
    g = {}

    def via(link, what):
        if not inspect:
            return link
        g[f"{key}_i_{what}"] = api_node(info, "FillScopeInspect", value=link)
        return [f"{key}_i_{what}", 0]

    g[f"{key}_pos"] = api_node(info, "CLIPTextEncodeFlux", clip=["clip", 0], clip_l=PROMPT, t5xxl=PROMPT, guidance=3.5)
    g[f"{key}_neg"] = api_node(info, "CLIPTextEncode", clip=["clip", 0], text="")
    image, mask = via(["img", 0], "image"), via(["img", 1], "mask")
    g[f"{key}_inpaint"] = api_node(info, "InpaintModelConditioning", positive=via([f"{key}_pos", 0], "pos"),
                               negative=via([f"{key}_neg", 0], "neg"), vae=["vae", 0], pixels=image, mask=mask,
                               noise_mask=True)
    g[f"{key}_enc"] = api_node(info, "VAEEncode", pixels=image, vae=["vae", 0])
    g[f"{key}_ref"] = api_node(info, "ReferenceLatent", conditioning=via([f"{key}_inpaint", 0], "inpainted"),
                           latent=via([f"{key}_enc", 0], "encoded"))
    g[f"{key}_up"] = api_node(info, "LatentUpscale", samples=via([f"{key}_inpaint", 2], "inpaint_latent"),
                          upscale_method="nearest-exact", width=2 * W, height=2 * H, crop="disabled")
    g[f"{key}_masked"] = api_node(info, "SetLatentNoiseMask", samples=via([f"{key}_up", 0], "upscaled"), mask=mask)
    g[f"{key}_dec"] = api_node(info, "VAEDecode", samples=via([f"{key}_masked", 0], "masked"), vae=["vae", 0])
    g[f"{key}_scaled"] = api_node(info, "ImageScale", image=via([f"{key}_dec", 0], "decoded"),
                              upscale_method="nearest-exact", width=W, height=H, crop="disabled")
    g[f"{key}_png"] = api_node(info, "SaveImage", images=via([f"{key}_scaled", 0], "scaled"),
                           filename_prefix=f"inspect/{key}")
    g[f"{key}_save"] = api_node(info, "InspectTestSave", name=key, latent=via([f"{key}_masked", 0], "latent_out"),
                            image=via([f"{key}_scaled", 0], "image_out"), mask=mask,
                            conditioning=via([f"{key}_ref", 0], "cond_out"))
    return g


def test_inspect_on_comfyuis_own_nodes_changes_nothing(server, info):
    shared = {"clip": api_node(info, "NativeTestTinyCLIP", folder=FLUX, kind="flux"),
              "vae": api_node(info, "InspectTestTinyVAE", folder=FLUX),
              "img": api_node(info, "LoadImage", image=IMAGE)}
    prompt = {**shared, **value_graph(info, "plain", False), **value_graph(info, "seen", True)}
    # FillScope Inspect on a CLIP (a value it records by type only), chained, into the Shapes Report
    prompt["seen_i_clip"] = api_node(info, "FillScopeInspect", value=["clip", 0])
    prompt["seen_i_clip2"] = api_node(info, "FillScopeInspect", value=["seen_i_clip", 0])
    prompt["seen_other"] = api_node(info, "CLIPTextEncode", clip=["seen_i_clip2", 0], text="")
    prompt["seen_other_save"] = api_node(info, "InspectTestSave", name="seen_other", conditioning=["seen_other", 0])
    prompt["report"] = api_node(info, "FillScopeShapesReport", shapes=["seen_i_cond_out", 1],
                            filename_prefix="inspect/report")
    # a FillScope value (FS_*, travelling with its upstream records) through Inspect: the encoder still gets it whole
    prompt["fs_clip"] = api_node(info, "FillScopeLoadCLIPL", source="meta")
    prompt["seen_i_fs"] = api_node(info, "FillScopeInspect", value=["fs_clip", 0])
    prompt["fs_enc"] = api_node(info, "FillScopeCLIPLEncode", clip_l=["seen_i_fs", 0], text=PROMPT)
    prompt["fs_report"] = api_node(info, "FillScopeShapesReport", shapes=["fs_enc", 1], filename_prefix="inspect/fs")
    entry = server.run(prompt, timeout=600)

    plain, plain_meta = saved(server, "plain")
    seen, seen_meta = saved(server, "seen")
    assert plain.keys() == seen.keys() and plain_meta == seen_meta
    for k in plain:
        assert plain[k].dtype == seen[k].dtype and torch.equal(plain[k], seen[k]), k
    assert np.array_equal(pixels(server, entry, "plain_png"), pixels(server, entry, "seen_png"))
    assert json.loads(seen_meta["cond.0.guidance"]) == 3.5

    # the records: every tensor, its shape as saved (seen_i_scaled and seen_i_image_out sit on one link: each its own)
    assert shapes(record(entry, "seen_i_scaled")) == shapes(record(entry, "seen_i_image_out"))
    cond = record(entry, "seen_i_cond_out")
    assert cond["facts"]["type"] == "CONDITIONING" and cond["facts"]["from"] == "ReferenceLatent"
    assert cond["facts"]["cond[0].guidance"] == 3.5 and cond["facts"]["entries"] == 1
    rows = shapes(cond)
    want = {"cond[0]": "cond.0", "cond[0].pooled_output": "cond.0.pooled_output",
            "cond[0].concat_latent_image": "cond.0.concat_latent_image", "cond[0].concat_mask": "cond.0.concat_mask",
            "cond[0].reference_latents[0]": "cond.0.reference_latents.0"}
    for name, key in want.items():
        assert rows[name] == list(seen[key].shape), name
    assert rows["cond[0]"] == [1, 256, 32] and rows["cond[0].reference_latents[0]"] == [1, 16, H // 8, W // 8]
    assert all(t["provenance"] == "measured" and t["role"] == "output" for t in cond["tensors"])

    latent = record(entry, "seen_i_latent_out")
    assert latent["facts"]["type"] == "LATENT" and latent["facts"]["from"] == "SetLatentNoiseMask"
    assert shapes(latent) == {"samples": list(seen["latent.samples"].shape),
                              "noise_mask": list(seen["latent.noise_mask"].shape)}
    assert shapes(latent)["samples"] == [1, 16, 2 * H // 8, 2 * W // 8]
    inpaint_latent = record(entry, "seen_i_inpaint_latent")
    assert set(shapes(inpaint_latent)) == {"samples", "noise_mask"}
    image = record(entry, "seen_i_image_out")
    assert image["facts"]["type"] == "IMAGE" and shapes(image) == {"image": [1, H, W, 3]} == {"image": list(seen["image"].shape)}
    mask = record(entry, "seen_i_mask")
    assert mask["facts"]["type"] == "MASK" and mask["facts"]["from"] == "LoadImage"
    assert shapes(mask) == {"mask": [1, H, W]} == {"mask": list(seen["mask"].shape)}
    assert abs(mask["facts"]["coverage (mean)"] - float(seen["mask"].mean())) < 1e-6
    assert shapes(record(entry, "seen_i_decoded")) == {"image": [1, 2 * H, 2 * W, 3]}
    clip = record(entry, "seen_i_clip2")
    assert clip["facts"]["type"] == "CLIP" and clip["facts"]["from"] == "NativeTestTinyCLIP"  # through the chain
    assert clip["facts"]["class"] == "comfy.sd.CLIP" and clip["facts"]["cond_stage_model class"] == "FluxClipModel_"
    assert clip["tensors"] == []
    fs = record(entry, "seen_i_fs")
    assert fs["facts"]["type"] == "FS_CLIP_L" and fs["facts"]["from"] == "FillScopeLoadCLIPL"
    enc = entry["outputs"]["fs_enc"]["fillscope_shapes"][0]
    assert [r["node"] for r in enc["trail"]] == ["FillScopeLoadCLIPL"]  # the loader's record came through Inspect
    # the face: the ui is a FillScope record (text table + document) like every FillScope node's
    assert "cond[0]" in entry["outputs"]["seen_i_cond_out"]["text"][0]
    assert entry["outputs"]["report"]["fillscope_report"]  # the Shapes Report takes the Inspect node's record
    assert_normal_prompt_runs(server, info)


# ---- FillScope Inspect CLIP -------------------------------------------------------------------------------------


def expected_ids(text: str) -> tuple[list, list]:
    """CLIP-L and T5 token ids of `text` (with start / end tokens), from ComfyUI's tokenizer files."""
    from transformers import CLIPTokenizer, T5TokenizerFast

    clip_dir, t5_dir = comfy_tokenizer_dirs()
    return (CLIPTokenizer.from_pretrained(str(clip_dir))(text)["input_ids"],
            T5TokenizerFast.from_pretrained(str(t5_dir))(text)["input_ids"])


def test_inspect_clip_records_each_encode_and_leaves_the_clip_alone(server, info):
    prompt = {"clip": api_node(info, "NativeTestTinyCLIP", folder=FLUX, kind="flux"),
              "ic": api_node(info, "FillScopeInspectCLIP", clip=["clip", 0]),
              "a": api_node(info, "CLIPTextEncode", clip=["ic", 0], text=PROMPT),
              "a0": api_node(info, "CLIPTextEncode", clip=["clip", 0], text=PROMPT),
              "b": api_node(info, "CLIPTextEncodeFlux", clip=["ic", 0], clip_l=LONG, t5xxl=PROMPT, guidance=3.5),
              "b0": api_node(info, "CLIPTextEncodeFlux", clip=["clip", 0], clip_l=LONG, t5xxl=PROMPT, guidance=3.5),
              "other": api_node(info, "CLIPTextEncode", clip=["clip", 0], text="something else entirely")}
    for key in ("a", "a0", "b", "b0", "other"):
        prompt[f"{key}_save"] = api_node(info, "InspectTestSave", name=f"clip_{key}", conditioning=[key, 0])
    pid = server.queue(prompt)
    entry = server.wait(pid, timeout=600)
    for key in ("a", "b"):
        (ours, ours_meta), (theirs, theirs_meta) = saved(server, f"clip_{key}"), saved(server, f"clip_{key}0")
        assert ours.keys() == theirs.keys() and ours_meta == theirs_meta
        assert all(torch.equal(ours[k], theirs[k]) for k in ours), key

    # the node's own run: what is static
    own = record(entry, "ic")
    assert own["facts"]["class"] == "FluxClipModel_" and own["facts"]["tokenizer"] == "FluxTokenizer"
    assert own["facts"]["tokenizer l"].startswith("SDTokenizer, max_length 77")
    assert own["facts"]["tokenizer t5xxl"].startswith("T5XXLTokenizer") and "min_length 256" in own["facts"]["tokenizer t5xxl"]

    # the live record: both encodes through the inspected CLIP, none of the original's three
    live = live_records(server, pid)
    assert list(live) == ["ic"]
    rec = live["ic"]["fillscope_shapes"][0]["node"]
    facts, rows = rec["facts"], shapes(rec)
    assert rec["node"] == "FillScopeInspectCLIP" and facts["calls"] == 2
    by_node = {facts[f"encode {n}: called by node"]: n for n in (1, 2)}
    assert set(by_node) == {"a", "b"}
    a, b = by_node["a"], by_node["b"]
    (a_cond, _), (b_cond, _) = saved(server, "clip_a"), saved(server, "clip_b")
    assert rows[f"encode {a}: cond"] == list(a_cond["cond.0"].shape) == [1, 256, 32]
    assert rows[f"encode {a}: pooled_output"] == list(a_cond["cond.0.pooled_output"].shape) == [1, 32]
    assert rows[f"encode {a}: tokens.l"] == [1, 77] and rows[f"encode {a}: tokens.t5xxl"] == [1, 256]
    clip_ids, t5_ids = expected_ids(PROMPT)
    assert facts[f"encode {a}: ids l"] == clip_ids and facts[f"encode {a}: ids t5xxl"] == t5_ids
    assert facts[f"encode {a}: tokens l"] == f"1 chunk x 77: {len(clip_ids) - 2} text + 2 special + {77 - len(clip_ids)} padding"
    assert facts[f"encode {a}: tokens t5xxl"] == f"1 chunk x 256: {len(t5_ids) - 1} text + 1 special + {256 - len(t5_ids)} padding"
    assert facts[f"encode {a}: method"] == "encode_from_tokens_scheduled"
    # CLIPTextEncodeFlux: the long CLIP-L prompt in two chunks of 77, T5 from its own box, guidance in the dict
    long_ids = expected_ids(LONG)[0]
    assert rows[f"encode {b}: tokens.l"] == [2, 77] and facts[f"encode {b}: tokens l"].startswith("2 chunks x 77: ")
    flat = [i for chunk in facts[f"encode {b}: ids l"] for i in chunk if i not in (49406, 49407)]
    assert flat == long_ids[1:-1]  # every token of the long prompt, none lost
    assert any("split it into 2 chunks" in n for n in rec["notes"])
    assert facts[f"encode {b}: guidance"] == 3.5 and facts[f"encode {b}: ids t5xxl"] == t5_ids
    assert rows[f"encode {b}: cond"] == list(b_cond["cond.0"].shape)
    assert rec["wall_s"] > 0 and all(t["provenance"] == "measured" for t in rec["tensors"])

    # the next prompt: the cached Inspect CLIP's clone records there, under that prompt's id, from 1 again
    prompt["a"]["inputs"]["text"] = "a green armchair"
    prompt["a0"]["inputs"]["text"] = "a green armchair"
    pid2 = server.queue(prompt)
    server.wait(pid2, timeout=600)
    again = live_records(server, pid2)["ic"]["fillscope_shapes"][0]["node"]["facts"]
    assert again["calls"] == 1 and again["encode 1: called by node"] == "a"
    assert again["encode 1: ids l"] == expected_ids("a green armchair")[0]
    assert live_records(server, pid)["ic"]["fillscope_shapes"][0]["node"]["facts"]["calls"] == 2
    # an Inspect CLIP node of another id on the same CLIP: its own output (not the cached one of "ic"), its own record
    prompt["ic2"] = prompt.pop("ic")
    for key in ("a", "b"):
        prompt[key]["inputs"]["clip"] = ["ic2", 0]
    pid3 = server.queue(prompt)
    server.wait(pid3, timeout=600)
    assert list(live_records(server, pid3)) == ["ic2"]
    assert_normal_prompt_runs(server, info)


# ---- FillScope Inspect VAE --------------------------------------------------------------------------------------


def test_inspect_vae_equals_the_vae_and_records_each_call(server, info):
    prompt = {"img": api_node(info, "LoadImage", image=IMAGE),
              "vae": api_node(info, "InspectTestTinyVAE", folder=FLUX),
              "iv": api_node(info, "FillScopeInspectVAE", vae=["vae", 0])}
    for key, vae in (("seen", "iv"), ("plain", "vae")):
        prompt.update({
            f"{key}_enc": api_node(info, "VAEEncode", pixels=["img", 0], vae=[vae, 0]),
            f"{key}_dec": api_node(info, "VAEDecode", samples=[f"{key}_enc", 0], vae=[vae, 0]),
            f"{key}_tenc": api_node(info, "VAEEncodeTiled", pixels=["img", 0], vae=[vae, 0], tile_size=64, overlap=16),
            f"{key}_tdec": api_node(info, "VAEDecodeTiled", samples=[f"{key}_enc", 0], vae=[vae, 0], tile_size=64,
                                overlap=16),
            f"{key}_s1": api_node(info, "InspectTestSave", name=f"vae_{key}", latent=[f"{key}_enc", 0],
                              image=[f"{key}_dec", 0]),
            f"{key}_s2": api_node(info, "InspectTestSave", name=f"vae_{key}_tiled", latent=[f"{key}_tenc", 0],
                              image=[f"{key}_tdec", 0]),
        })
    pid = server.queue(prompt)
    entry = server.wait(pid, timeout=600)
    for name in ("vae_{}", "vae_{}_tiled"):
        ours, theirs = saved(server, name.format("seen"))[0], saved(server, name.format("plain"))[0]
        assert ours.keys() == theirs.keys() == {"latent.samples", "image"}
        assert all(torch.equal(ours[k], theirs[k]) for k in ours), name

    own = record(entry, "iv")
    assert own["facts"]["class"] == "AutoencoderKL" and own["facts"]["latent_channels"] == 16
    assert own["facts"]["downscale_ratio"] == 8 and own["facts"]["dtype"] == "float32"

    live = live_records(server, pid)
    assert list(live) == ["iv"]
    rec = live["iv"]["fillscope_shapes"][0]["node"]
    facts, rows = rec["facts"], shapes(rec)
    assert rec["node"] == "FillScopeInspectVAE" and facts["calls"] == 4
    labels = {facts[f"{label}: called by node"]: label for label in ("encode 1", "encode 2", "decode 1", "decode 2")}
    assert set(labels) == {"seen_enc", "seen_dec", "seen_tenc", "seen_tdec"}
    plain = saved(server, "vae_plain")[0]
    enc, dec, tenc, tdec = (labels[k] for k in ("seen_enc", "seen_dec", "seen_tenc", "seen_tdec"))
    assert rows[f"{enc}: pixels"] == [1, H, W, 3] and rows[f"{enc}: latent"] == list(plain["latent.samples"].shape)
    assert rows[f"{dec}: latent"] == [1, 16, H // 8, W // 8] and rows[f"{dec}: image"] == list(plain["image"].shape)
    assert facts[f"{enc}: tiled"] == facts[f"{dec}: tiled"] == "no"
    assert facts[f"{tenc}: method"] == "encode_tiled" and facts[f"{tenc}: tiled"].startswith("yes (tile_x=64")
    assert facts[f"{tdec}: method"] == "decode_tiled" and facts[f"{tdec}: tiled"].startswith("yes (tile_x=8")
    assert rows[f"{tdec}: image"] == [1, H, W, 3]
    roles = {t["name"]: t["role"] for t in rec["tensors"]}
    assert roles[f"{enc}: pixels"] == "input" and roles[f"{enc}: latent"] == "output"
    assert all(t["dtype"] == "float32" and t["provenance"] == "measured" for t in rec["tensors"])

    # ComfyUI's model management: the copy shares the VAE's patcher; /free unloads it, and prompts still run
    server.free()
    assert_normal_prompt_runs(server, info)


def test_node_help_pages_are_served(server):
    for name in ("FillScopeInspect", "FillScopeInspectCLIP", "FillScopeInspectVAE"):
        text = server._request("GET", f"/extensions/FillScope/docs/{name}.md")[1].decode()
        assert text.startswith("# Inspect"), name  # the display name: the canvas badge says FillScope
