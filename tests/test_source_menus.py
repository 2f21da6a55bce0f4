"""A loader's `source` menu offers only the files that may be its kind, in a real ComfyUI 0.3.75 server.

The server is this module's own (tests/comfy_server.py); its model folders hold one file of each kind FillScope loads,
in the formats people download (tests/checkpoint_files.py: tiny models under ComfyUI's own keys; CLIP-L and CLIP-G
at their real geometry, whose tensors are zeros written sparse, since a tiny CLIP of neither width fits both CLIP
loaders by design), plus files that cannot tell what they are: a pickle, a truncated download, tensors FillScope does
not recognise. Checked through /object_info, which builds the menus:

- each loader's menu holds its own files and the files that cannot tell, never a file whose header says it is
  another kind (the CLIP-L loader no Qwen3 / T5 / CLIP-G file, the FLUX Fill loader no klein or SD3 file);
- a saved workflow that names a file of another kind is accepted when queued (no "Value not in list": the loaders'
  validate_inputs takes `source`) and fails at the load with FillScope's wrong-file error naming the input, what the
  file is and the loader that takes it;
- the header is read once per (path, size, mtime): an unchanged file is not read again (its bytes swapped with its
  size and mtime kept, the menu still sorts it as before), a changed one is;
- a folder of 50 files is sorted in well under a second, first read and cached (printed), and a file whose header is
  longer than the menus read (nodes/common.py MENU_MAX_HEADER) is offered without being parsed.

The server is started with FILLSCOPE_AVAILABLE_RAM_BYTES (64 MiB), for one test moved here from
test_server_hostile.py, which started a server of its own for it: a placeholder bigger than the memory available is
refused with both figures, and 'meta' then loads.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
import torch
from comfy_server import (
    ComfyPromptError,
    ComfyServer,
    comfyui_installed,
    comfyui_path,
)
from server_checks import refused_at

pytestmark = pytest.mark.server

# The files that cannot tell their kind, offered by every loader of their folder.
CANNOT_TELL = {
    "text_encoders": ["text_encoders/mystery.safetensors", "text_encoders/old_clip.bin",
                      "text_encoders/partial-download.safetensors"],
    "diffusion_models": ["diffusion_models/old_unet.pt"],
}
# Each loader's menu (diffusers folders: none here), then placeholder and meta.
MENUS = {
    "FillScopeLoadCLIPL": ["text_encoders/clip_l.safetensors", *CANNOT_TELL["text_encoders"]],
    "FillScopeLoadCLIPG": ["text_encoders/clip_g.safetensors", *CANNOT_TELL["text_encoders"]],
    "FillScopeLoadT5": ["text_encoders/t5xxl_fp16.safetensors", *CANNOT_TELL["text_encoders"]],
    "FillScopeLoadQwen3": ["text_encoders/qwen_3_4b.safetensors", *CANNOT_TELL["text_encoders"]],
    "FillScopeLoadFluxFillTransformer": ["diffusion_models/flux1-fill-dev.safetensors", *CANNOT_TELL["diffusion_models"]],
    "FillScopeLoadKleinTransformer": ["diffusion_models/flux-2-klein-4b.safetensors", *CANNOT_TELL["diffusion_models"]],
    "FillScopeLoadSD3Transformer": ["diffusion_models/sd3_medium_tiny.safetensors", *CANNOT_TELL["diffusion_models"],
                                    "checkpoints/sd3_medium.safetensors"],
    "FillScopeLoadVAE": ["vae/ae.safetensors", "vae/flux2-vae.safetensors", "checkpoints/sd3_medium.safetensors"],
    "FillScopeLoadSD3InpaintControlNet": [],
}
MENUS = {node: sorted(files) + ["placeholder", "meta"] for node, files in MENUS.items()}


# ---- the files ------------------------------------------------------------------------------------------------------


def write_zero_safetensors(path: Path, shapes: dict, dtype: str = "F16") -> Path:
    """A safetensors file of the given tensor names and shapes whose values are all zero: the header written, the
    data extended with truncate (sparse on disk, so a 1.4 GB CLIP-G costs nothing). The menus and the wrong-file
    error read only the header."""
    itemsize = {"F16": 2, "BF16": 2, "F32": 4}[dtype]
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = math.prod(shape) * itemsize
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)
    return path


def comfy_clip_shapes(config_name: str) -> dict:
    """Names and shapes of ComfyUI's clip_l / clip_g .safetensors: the state dict of ComfyUI's own CLIPTextModel at
    the config it ships (sd1_clip_config.json: CLIP-L 768 x 12, clip_config_bigg.json: CLIP-G 1280 x 32), on meta."""
    import checkpoint_files as cf

    comfy = cf.comfy()
    config = json.loads((Path(comfy.clip_model.__file__).parent / config_name).read_text())
    model = comfy.clip_model.CLIPTextModel(config, torch.float16, "meta", comfy.ops.disable_weight_init)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def write_model_folders(models: Path) -> dict:
    """One file of each kind in ComfyUI's model folders (see the module docstring); returns the tiny files' bytes by
    kind, for tests that write more of them."""
    import checkpoint_files as cf
    from tiny_flux import build_tiny_components as tiny_flux
    from tiny_klein import TINY_VAE_CONFIG as KLEIN_VAE
    from tiny_klein import build_tiny_components as tiny_klein
    from tiny_sd3 import build_tiny_sd3_components

    flux, klein, sd3 = tiny_flux(0), tiny_klein(0), build_tiny_sd3_components(0)
    te, dm = models / "text_encoders", models / "diffusion_models"
    write_zero_safetensors(te / "clip_l.safetensors", comfy_clip_shapes("sd1_clip_config.json"))
    write_zero_safetensors(te / "clip_g.safetensors", comfy_clip_shapes("clip_config_bigg.json"))
    t5 = cf.save(te / "t5xxl_fp16.safetensors", cf.t5_comfy_state(flux["text_encoder_2"])[0], dtype=torch.float16)
    qwen = cf.save(te / "qwen_3_4b.safetensors", cf.qwen3_comfy_state(klein["text_encoder"]))
    torch.save({"weight": torch.zeros(2)}, te / "old_clip.bin")  # a pickle: offered, refused with why when chosen
    (te / "partial-download.safetensors").write_bytes(t5.read_bytes()[: t5.stat().st_size // 2])
    cf.save(te / "mystery.safetensors", {"foo.bar.weight": torch.zeros(4, 4), "foo.baz": torch.zeros(3)})
    cf.save(dm / "flux1-fill-dev.safetensors", cf.flux_bfl_state(flux["transformer"]), cf.TINY_HINTS)
    cf.save(dm / "flux-2-klein-4b.safetensors", cf.klein_bfl_state(klein["transformer"]))
    cf.save(dm / "sd3_medium_tiny.safetensors", cf.sd3_sai_state(sd3["transformer"]), cf.TINY_HINTS)
    torch.save({"weight": torch.zeros(2)}, dm / "old_unet.pt")
    cf.save(models / "vae/ae.safetensors", cf.vae_ldm_state(flux["vae"]))
    cf.save(models / "vae/flux2-vae.safetensors",
            {k: v for k, v in klein["vae"].state_dict().items() if not k.endswith("num_batches_tracked")},
            {"flux2_vae": {"norm_num_groups": KLEIN_VAE["norm_num_groups"]}})
    cf.save(models / "checkpoints/sd3_medium.safetensors", cf.sd3_checkpoint_state(sd3, with_text_encoders=False),
            cf.TINY_HINTS)
    return {"t5": t5.read_bytes(), "qwen3": qwen.read_bytes(), "clip_l": comfy_clip_shapes("sd1_clip_config.json")}


SMALL_RAM = 64 * 2**20  # the server's available RAM as FillScope sees it (FILLSCOPE_AVAILABLE_RAM_BYTES)


@pytest.fixture(scope="module")
def server():
    """This module's own server, started with FILLSCOPE_AVAILABLE_RAM_BYTES at 64 MiB for
    test_a_placeholder_bigger_than_the_available_ram_is_refused_with_both_figures (moved here from
    test_server_hostile.py, which started a server of its own for it): the variable only sizes placeholder loads
    (fillscope/weights.py check_room_for), which no other test here makes."""
    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()} (run `make setup` or set COMFYUI_PATH)")
    from fillscope.models import AVAILABLE_RAM_ENV

    s = ComfyServer(env={**os.environ, AVAILABLE_RAM_ENV: str(SMALL_RAM)})
    try:
        s.files = write_model_folders(s.models_dir)
        s.start()
        yield s
    finally:
        s.cleanup()


def menu(server, node_type: str) -> list[str]:
    spec = server.object_info(node_type)[node_type]["input"]["required"]["source"]
    return spec[1]["options"] if spec[0] == "COMBO" else spec[0]


def loader_only(node_type: str, source: str) -> dict:
    """One loader and ComfyUI's PreviewAny on its shapes output: the load alone."""
    return {"1": {"class_type": node_type, "inputs": {"source": source, "dtype": "fp32", "device": "cpu"}},
            "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}}}


def refused_when_queued(server, node_type: str, source: str) -> str:
    """The details of the loader's validation error when the prompt is queued (the loader's validate_inputs)."""
    with pytest.raises(ComfyPromptError) as e:
        server.queue(loader_only(node_type, source))
    errors = e.value.body["node_errors"]["1"]["errors"]
    assert [x["type"] for x in errors] == ["custom_validation_failed"], errors
    return errors[0]["details"]


def load_error(server, node_type: str, source: str) -> str:
    """The message of the load's execution error (queueing it must succeed: ComfyPromptError would fail here)."""
    return refused_at(server, loader_only(node_type, source), node_type)[0].strip()


# ---- the menus --------------------------------------------------------------------------------------------------------


def test_each_loader_offers_its_own_files_and_the_files_that_cannot_tell_never_another_kind(server):
    got = {node: menu(server, node) for node in MENUS}
    for node, want in MENUS.items():
        assert got[node] == want, node
    # what the issue named: the CLIP-L loader offered the Qwen3, T5 and CLIP-G files, the FLUX Fill loader klein's
    assert not {"text_encoders/qwen_3_4b.safetensors", "text_encoders/t5xxl_fp16.safetensors",
                "text_encoders/clip_g.safetensors"} & set(got["FillScopeLoadCLIPL"])
    assert "diffusion_models/flux-2-klein-4b.safetensors" not in got["FillScopeLoadFluxFillTransformer"]
    # a new node still starts on its own file, never on one that cannot tell
    info = server.object_info("FillScopeLoadCLIPL")["FillScopeLoadCLIPL"]["input"]["required"]["source"][1]
    assert info["default"] == "text_encoders/clip_l.safetensors"


def test_choosing_a_file_that_cannot_tell_explains_why_it_does_not_load(server):
    pickle = refused_when_queued(server, "FillScopeLoadCLIPL", "text_encoders/old_clip.bin")  # by its name, unread
    assert "input 'source'" in pickle and "pickled PyTorch checkpoint" in pickle and "Fix: download the .safetensors" in pickle
    partial = load_error(server, "FillScopeLoadCLIPL", "text_encoders/partial-download.safetensors")
    assert "input 'clip_l source': 'partial-download.safetensors' could not be read: the file is truncated" in partial
    assert "Fix: the download is probably incomplete" in partial
    mystery = load_error(server, "FillScopeLoadCLIPL", "text_encoders/mystery.safetensors")
    assert "'mystery.safetensors' is not a model FillScope recognises (2 tensors" in mystery


@pytest.mark.parametrize("node_type, source, input_label, is_what, takes, load_with", [
    ("FillScopeLoadCLIPL", "text_encoders/qwen_3_4b.safetensors", "clip_l source", "is a Qwen3 LLM text encoder",
     "the FillScope Load CLIP-L loader takes a CLIP-L text encoder", "load it with FillScope Load Qwen3."),
    ("FillScopeLoadCLIPL", "text_encoders/clip_g.safetensors", "clip_l source",
     "is a CLIP-G (OpenCLIP bigG) text encoder (32 layers, width 1280, fp16)",
     "the FillScope Load CLIP-L loader takes a CLIP-L text encoder", "load it with FillScope Load CLIP-G."),
    ("FillScopeLoadFluxFillTransformer", "diffusion_models/flux-2-klein-4b.safetensors", "transformer source",
     "is the FLUX.2-architecture transformer of width 32",
     "the FillScope Load FLUX.1 Fill Transformer loader takes the FLUX.1 Fill [dev] transformer",
     "load it with FillScope Load FLUX.2 [klein] Transformer."),
])
def test_a_saved_workflow_naming_a_file_of_another_kind_fails_with_the_wrong_file_error(
        server, node_type, source, input_label, is_what, takes, load_with):
    """Not in the menu any more, but a workflow saved before names it: ComfyUI hands `source` to the loader's
    validate_inputs instead of its "Value not in list" check, so the prompt is queued and the load says what the
    file is (read from its header) and which loader takes it."""
    assert source not in menu(server, node_type)
    msg = load_error(server, node_type, source)
    name = source.split("/")[-1]
    assert msg.startswith(f"[FillScope] input '{input_label}': '{name}' {is_what}"), msg
    assert takes in msg and msg.endswith(f"Fix: {load_with}"), msg
    assert "not in list" not in msg.lower()


# ---- what it costs ----------------------------------------------------------------------------------------------------


def _timed_menu(server, node_type: str) -> tuple[list, float]:
    t0 = time.perf_counter()
    options = menu(server, node_type)
    return options, time.perf_counter() - t0


def test_a_changed_file_is_read_again_and_an_unchanged_one_is_not(server):
    folder = server.models_dir / "text_encoders"
    path = folder / "swap.safetensors"
    path.write_bytes(server.files["t5"])
    assert "text_encoders/swap.safetensors" not in menu(server, "FillScopeLoadCLIPL")
    assert "text_encoders/swap.safetensors" in menu(server, "FillScopeLoadT5")
    # the same size and mtime, other bytes (zeros: no header): the fingerprint is unchanged, the header not read again
    st = path.stat()
    path.write_bytes(bytes(st.st_size))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "text_encoders/swap.safetensors" not in menu(server, "FillScopeLoadCLIPL")
    # a new mtime: read again, and the zeros cannot tell what they are (offered, validation explains)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert "text_encoders/swap.safetensors" in menu(server, "FillScopeLoadCLIPL")
    # a CLIP-L written over it: now the CLIP-L loader's, not the T5 loader's
    write_zero_safetensors(path, server.files["clip_l"])
    assert "text_encoders/swap.safetensors" in menu(server, "FillScopeLoadCLIPL")
    assert "text_encoders/swap.safetensors" not in menu(server, "FillScopeLoadT5")
    path.unlink()


def test_fifty_files_are_sorted_once_and_then_from_the_cache(server):
    many = server.models_dir / "text_encoders" / "many"
    many.mkdir()
    try:
        for i in range(20):
            (many / f"t5_{i:02d}.safetensors").write_bytes(server.files["t5"])
        for i in range(15):
            (many / f"qwen3_{i:02d}.safetensors").write_bytes(server.files["qwen3"])
        for i in range(10):
            write_zero_safetensors(many / f"clip_l_{i:02d}.safetensors", server.files["clip_l"])
        for i in range(5):
            (many / f"partial_{i:02d}.safetensors").write_bytes(server.files["t5"][:4096])
        first, t_first = _timed_menu(server, "FillScopeLoadCLIPL")  # 50 headers read
        cached, t_cached = _timed_menu(server, "FillScopeLoadCLIPL")
        t0 = time.perf_counter()
        server.object_info()  # every node's schema: the 9 loaders' menus (the VAE's twice)
        t_all = time.perf_counter() - t0
        print(f"\nCLIP-L menu over 50 more files in text_encoders/many: first {t_first * 1000:.0f} ms (headers read), "
              f"cached {t_cached * 1000:.0f} ms; whole /object_info {t_all * 1000:.0f} ms")
        ours = [o for o in first if o.startswith("text_encoders/many/")]
        assert ours == sorted([f"text_encoders/many/clip_l_{i:02d}.safetensors" for i in range(10)]
                              + [f"text_encoders/many/partial_{i:02d}.safetensors" for i in range(5)])
        assert cached == first
        assert t_first < 2.0 and t_cached < 0.5
    finally:
        for f in many.iterdir():
            f.unlink()
        many.rmdir()


def test_a_huge_header_is_offered_without_being_parsed(server):
    """A header of 44 MiB (600,000 tensor entries: sniff takes ~6 s to parse and classify it on this machine) is past
    MENU_MAX_HEADER: the menu offers the file (it cannot tell) without parsing it."""
    n = 600_000
    # json.dumps({f"t{i}": {"dtype": "F16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]} for i in range(n)})
    # byte for byte, written out directly (a sixth of the CPU time of building the dict and dumping it)
    raw = b"{" + b", ".join(b'"t%d": {"dtype": "F16", "shape": [1], "data_offsets": [%d, %d]}' % (i, 2 * i, 2 * i + 2)
                            for i in range(n)) + b"}"
    path = server.models_dir / "text_encoders" / "zz-huge-header.safetensors"
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        f.truncate(8 + len(raw) + 2 * n)
    try:
        options, took = _timed_menu(server, "FillScopeLoadT5")
        print(f"\nT5 menu with a {len(raw) / 2**20:.0f} MiB header in text_encoders/: {took * 1000:.0f} ms")
        assert "text_encoders/zz-huge-header.safetensors" in options
        assert took < 1.5
    finally:
        path.unlink()


def test_a_link_into_a_hugging_face_cache_is_offered_and_loads(server, tmp_path):
    """People link a model folder's file to the Hugging Face cache, whose blobs are named by their hash without a
    suffix: the name in the model folder is what the pickle/safetensors check reads, the blob is what is loaded."""
    blob = tmp_path / "hub" / "models--x" / "blobs" / "3f2a9c0d1e"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(server.files["t5"])
    link = server.models_dir / "text_encoders" / "hf_t5xxl.safetensors"
    link.symlink_to(blob)
    try:
        assert "text_encoders/hf_t5xxl.safetensors" in menu(server, "FillScopeLoadT5")
        assert "text_encoders/hf_t5xxl.safetensors" not in menu(server, "FillScopeLoadCLIPL")
        entry = server.run(loader_only("FillScopeLoadT5", "text_encoders/hf_t5xxl.safetensors"), timeout=120)
        assert entry["status"]["status_str"] == "success"
    finally:
        link.unlink()


# ---- a placeholder bigger than the memory available (issue 10; from test_server_hostile.py) --------------------------


def test_a_placeholder_bigger_than_the_available_ram_is_refused_with_both_figures(server):
    """On this module's server, whose available RAM is said to be 64 MiB (FILLSCOPE_AVAILABLE_RAM_BYTES): the
    placeholder CLIP-L (0.23 GiB in bf16) is refused before anything is allocated; 'meta' then loads. (Moved from
    test_server_hostile.py, where it started a ComfyUI server of its own: same prompts, same assertions.)"""
    def clip_l(source):
        return {"1": {"class_type": "FillScopeLoadCLIPL",
                      "inputs": {"source": source, "dtype": "bf16", "device": "auto", "placeholder_seed": 0}},
                "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}}}

    msg = refused_at(server, clip_l("placeholder"), "FillScopeLoadCLIPL")[0].strip()
    assert msg == ("[FillScope] input 'clip_l source': a placeholder CLIP-L in bf16 needs 0.23 GiB of CPU memory "
                   "(RAM), but only 0.06 GiB is available (FillScope keeps 10% free), so it was not built. Fix: "
                   "choose 'meta' (the full topology with shapes only, no memory), or free memory (close other "
                   "programs, unload other models).")
    assert server.run(clip_l("meta"))["status"]["status_str"] == "success"


# ---- an image too big for the memory available (issue 35: a 16384 px image got the server killed) ------------------


def test_a_16384_px_image_into_the_tiled_sampler_is_refused_in_seconds_and_the_server_runs_on(server):
    """On this module's server (its available RAM said to be 64 MiB): ComfyUI's EmptyImage and SolidMask at
    16384x16384 (3 GiB and 1 GiB, ComfyUI's own) into FLUX Fill Tiled Inpaint (the production topology on 'meta', so
    that only the image is real) is refused before any copy of the image, naming `image`, its size and both memory
    figures; the server answers and the next prompt runs."""
    stack = {str(n): {"class_type": f"FillScopeLoad{kind}", "inputs": {"source": "meta", "dtype": "bf16",
                                                                       "device": "auto", "placeholder_seed": 0,
                                                                       **extra}}
             for n, kind, extra in ((1, "CLIPL", {}), (2, "T5", {}), (3, "FluxFillTransformer", {}),
                                    (4, "VAE", {"kind": "flux"}))}
    prompt = {**stack,
              "5": {"class_type": "EmptyImage", "inputs": {"width": 16384, "height": 16384, "batch_size": 1,
                                                           "color": 0}},
              "6": {"class_type": "SolidMask", "inputs": {"value": 1.0, "width": 16384, "height": 16384}},
              "7": {"class_type": "FillScopeFluxFillTiledInpaint", "inputs": {
                  "clip_l": ["1", 0], "t5": ["2", 0], "transformer": ["3", 0], "vae": ["4", 0], "image": ["5", 0],
                  "mask": ["6", 0], "prompt": "a red brick fireplace", "tile": 1024, "overlap": 0.15,
                  "mode": "independent", "poisson": False, "seed": 0, "steps": 1, "guidance": 30.0, "denoise": 1.0,
                  "invert_mask": False, "threshold": 0.5, "grow": 0, "feather": 0}},
              "8": {"class_type": "PreviewAny", "inputs": {"source": ["7", 1]}}}
    started = time.monotonic()
    msg = refused_at(server, prompt, "FillScopeFluxFillTiledInpaint")[0].strip()
    seconds = time.monotonic() - started
    print(f"\n[memory] refused in {seconds:.1f} s: {msg}")
    assert msg.startswith("[FillScope] input 'image': is 16384x16384: 3.00 GiB as float32 RGB, and a tiled run holds "
                          "2 more copies of it (the tiles' blend and the result), 6.00 GiB of CPU memory (RAM); only "
                          "0.06 GiB is available (FillScope keeps 10% free), so the run did not start. Fix: scale the "
                          "image down (ImageScale)"), msg
    assert seconds < 60, seconds  # ComfyUI's own 4 GiB of image and mask included
    clip_meta = {"1": stack["1"], "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}}}
    assert server.run(clip_meta)["status"]["status_str"] == "success"
