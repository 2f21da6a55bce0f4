"""Hostile input through a real ComfyUI 0.3.75 server (issue 10): every case gets a correct result or an error
naming the input, the problem and the fix, raised before the first sampling step wherever the input is known by
then; after each, the server answers and the next prompt succeeds.

Sections (one per kind of input): numbers, menus, strings, images and masks; model folders and weight files;
sizes, memory and notices."""

from __future__ import annotations

import itertools

import pytest

from comfy_server import ComfyExecutionError, ComfyPromptError  # noqa: F401
from server_checks import assert_still_serving, flux_prompt, refused_at, refused_when_run, sd3_prompt, small_image
from workflow_helpers import load_api, node_id, sd3_inpaint_prompt, shapes_doc, tensors, with_synthetic_image  # noqa: F401

pytestmark = pytest.mark.server

# flux_prompt / sd3_prompt (tests/server_checks.py): the shipped inpaint graphs on the tiny models in fp32, 2 steps, a
# fresh seed each (every good prompt samples anew: a distinct seed is never served from the cache)


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def next_prompt_succeeds(server):
    """After a refused prompt: the server answers and a good prompt runs (a core-node prompt no cache can answer,
    tests/server_checks.py)."""
    assert_still_serving(server)


def next_flux_fill_prompt_succeeds(server):
    """After a refused model load: the shipped FLUX Fill graph loads its models and samples (one step on a 32x32 image,
    a fresh seed)."""
    assert server.run(small_image(flux_prompt(steps=1)), timeout=300)["status"]["status_str"] == "success"


# ---------------------------------------------------------------------------------------------------------------
# numbers, menus, strings, images and masks
# ---------------------------------------------------------------------------------------------------------------

# Where each check runs: ComfyUI itself refuses a widget value outside min/max (and an inf) when the prompt is
# queued; everything else is refused by the node that receives it, before it runs (nodes/base.py check_inputs: a
# number NaN or out of range, also through a link; a menu value not in the menu; text with a NUL byte or a lone
# surrogate; a filename_prefix too long for a file system; an IMAGE or MASK holding NaN/inf), and a loader's source
# is checked when the prompt is queued (nodes/common.py validate_source).

NAN, INF = float("nan"), float("inf")


# refused_when_run (tests/server_checks.py): the prompt fails at the node with a FillScope error naming the input and
# its fix, and (nothing_saved) no image or report was saved


def refused_when_queued(server, prompt, node_type):
    """The prompt is refused at POST /prompt; the errors of the one node of `node_type`."""
    with pytest.raises(ComfyPromptError) as e:
        server.queue(prompt)
    return e.value.body["node_errors"][node_id(prompt, node_type)]["errors"]


def set_input(prompt, class_type, **values):
    prompt[node_id(prompt, class_type)]["inputs"].update(values)
    return prompt


def test_nan_guidance_is_refused_naming_guidance_not_the_weights(server):
    """NaN passes ComfyUI's min/max check (every comparison with NaN is false); it used to reach the guidance
    embedding and be reported as NaN weights in the transformer."""
    msg = refused_when_run(server, set_input(flux_prompt(), "FillScopeFluxFillSampler", guidance=NAN),
                           "FillScopeFluxFillSampler", "guidance")
    assert msg.startswith("[FillScope] input 'guidance': is nan; it must be a finite number from 0.0 to 100.0.")
    assert "weights" not in msg and "download" not in msg
    next_prompt_succeeds(server)


@pytest.mark.parametrize("name", ["cfg", "shift", "control_scale"])
def test_nan_sd3_sampler_numbers_are_refused_naming_the_input(server, name):
    """cfg NaN used to switch CFG off silently (NaN > 1 is false); shift or control_scale NaN were blamed on the
    ControlNet's weights."""
    msg = refused_when_run(server, set_input(sd3_prompt(), "FillScopeSD3ControlNetInpaintSampler", **{name: NAN}),
                           "FillScopeSD3ControlNetInpaintSampler", name)
    assert f"input '{name}': is nan;" in msg and "weights" not in msg
    next_prompt_succeeds(server)


def test_nan_threshold_is_refused_not_shown_as_threshold_0(server):
    msg = refused_when_run(server, set_input(flux_prompt(), "FillScopeFluxFillCondition", threshold=NAN),
                           "FillScopeFluxFillCondition", "threshold")
    assert "is nan; it must be a finite number from 0.0 to 1.0" in msg
    next_prompt_succeeds(server)


@pytest.mark.parametrize("name, value, error_type", [("guidance", INF, "value_bigger_than_max"),
                                                     ("denoise", -INF, "value_smaller_than_min"),
                                                     ("guidance", 1e300, "value_bigger_than_max")])
def test_inf_and_out_of_range_widget_values_are_refused_when_queued(server, name, value, error_type):
    """A widget value ComfyUI can compare is refused by ComfyUI itself at POST /prompt (its own message, naming the
    input; ComfyUI's format has no 'Fix:')."""
    prompt = set_input(flux_prompt(), "FillScopeFluxFillSampler", **{name: value})
    errors = refused_when_queued(server, prompt, "FillScopeFluxFillSampler")
    assert errors[0]["type"] == error_type and errors[0]["extra_info"]["input_name"] == name
    next_prompt_succeeds(server)


@pytest.mark.parametrize("value, problem", [(NAN, "is nan; it must be a finite number from 0.0 to 100.0."),
                                            (1000.0, "is 1000.0; it must be from 0.0 to 100.0.")])
def test_numbers_through_a_link_are_checked_too(server, value, problem):
    """ComfyUI checks min/max only on widget values, never on a value wired from another node (here ComfyUI's
    PrimitiveFloat): the sampler refuses it."""
    prompt = flux_prompt()
    prompt["70"] = {"class_type": "PrimitiveFloat", "inputs": {"value": value}}
    set_input(prompt, "FillScopeFluxFillSampler", guidance=["70", 0])
    msg = refused_when_run(server, prompt, "FillScopeFluxFillSampler", "guidance")
    assert problem in msg and "if a node is wired to it, check what that node computes" in msg
    next_prompt_succeeds(server)


@pytest.mark.parametrize("loader, name, value, choices", [
    ("FillScopeLoadT5", "device", "tpu", "('auto', 'cpu', 'cuda')"),
    ("FillScopeLoadFluxFillTransformer", "storage", "int4", "('as loaded', 'fp8_e4m3fn')"),
    ("FillScopeLoadVAE", "dtype", "bf17", "('bf16', 'fp16', 'fp32')"),
])
def test_a_value_not_in_its_menu_is_refused_before_loading(server, loader, name, value, choices):
    """ComfyUI 0.3.75 never compares a V3 Combo's value with its options: "tpu" used to fail later as a raw torch
    error, "int4" was ignored."""
    msg = refused_when_run(server, set_input(flux_prompt(), loader, **{name: value}), loader, name)
    assert f"input '{name}': '{value}' is not one of its choices {choices}." in msg
    next_prompt_succeeds(server)


def nan_mask(prompt):
    """ComfyUI's SolidMask with value NaN (which passes its 0..1 check), the size of the example image."""
    prompt["60"] = {"class_type": "SolidMask", "inputs": {"value": NAN, "width": 128, "height": 96}}
    return ["60", 0]


@pytest.mark.parametrize("threshold", [0.5, 0.0])
def test_a_nan_mask_is_refused_not_turned_into_an_empty_mask(server, threshold):
    """At threshold 0.5 a NaN mask used to binarise to an empty mask (the source came back unchanged); at 0 (soft
    mask) the VAE's weights got the blame."""
    prompt = flux_prompt()
    set_input(prompt, "FillScopeFluxFillCondition", mask=nan_mask(prompt), threshold=threshold)
    msg = refused_when_run(server, prompt, "FillScopeFluxFillCondition", "mask")
    assert "holds 12,288 of 12,288 values that are NaN or inf (12,288 NaN)" in msg and "weights" not in msg
    next_prompt_succeeds(server)


def test_a_nan_image_is_refused_naming_the_image(server):
    """A NaN IMAGE from ComfyUI's own nodes: SolidMask(NaN) -> MaskToImage."""
    prompt = flux_prompt()
    prompt["61"] = {"class_type": "MaskToImage", "inputs": {"mask": nan_mask(prompt)}}
    set_input(prompt, "FillScopeFluxFillCondition", image=["61", 0])
    msg = refused_when_run(server, prompt, "FillScopeFluxFillCondition", "image")
    assert "holds 36,864 of 36,864 values that are NaN or inf" in msg and "VAE" in msg
    next_prompt_succeeds(server)


@pytest.mark.parametrize("source, problem", [("", "is empty."),
                                             (5, "is int 5, not the name of a model folder or file."),
                                             (None, "is NoneType None, not the name"),
                                             ("FLUX.1-Fill-dev\u0000", "holds a NUL character")])
def test_a_bad_source_is_refused_when_queued_naming_source(server, source, problem):
    """Empty (used to resolve to models/diffusers itself), not text, or with a NUL byte (a raw ValueError from
    os.path): the loader's validate_inputs refuses it before anything runs."""
    prompt = set_input(flux_prompt(), "FillScopeLoadFluxFillTransformer", source=source)
    errors = refused_when_queued(server, prompt, "FillScopeLoadFluxFillTransformer")
    details = errors[0]["details"]
    assert errors[0]["type"] == "custom_validation_failed" and errors[0]["extra_info"]["input_name"] == "source"
    assert details.startswith("source - [FillScope] input 'source': ") and problem in details and "Fix:" in details
    next_prompt_succeeds(server)


@pytest.mark.parametrize("prefix, problem", [
    ("fillscope/sha\u0000pes", "holds a NUL character (\\x00) at position 13"),
    ("fillscope/" + "s" * 300, "has a file name of 300 bytes"),
    ("/".join(["d" * 200] * 6), "is 1205 bytes long"),
])
def test_a_bad_filename_prefix_is_refused_naming_it(server, prefix, problem):
    """NUL used to be a raw ValueError from os.path, an over-long name a raw OSError (File name too long)."""
    prompt = set_input(flux_prompt(), "FillScopeShapesReport", filename_prefix=prefix)
    msg = refused_when_run(server, prompt, "FillScopeShapesReport", "filename_prefix", nothing_saved=False)
    assert problem in msg
    next_prompt_succeeds(server)


def test_a_lone_surrogate_in_a_prompt_is_refused_naming_the_text(server):
    """JSON "\\ud800" is a valid JSON string but not Unicode text: it can be neither tokenised nor saved."""
    prompt = set_input(flux_prompt(), "FillScopeFluxPrompt", text="a red \ud800 fireplace")
    msg = refused_when_run(server, prompt, "FillScopeFluxPrompt", "text")
    assert "holds a lone surrogate ('\\ud800') at position 6" in msg
    next_prompt_succeeds(server)


@pytest.mark.parametrize("shapes, problem", [
    ("not json", "is not JSON (Expecting value: line 1 column 1 (char 0); it starts 'not json')."),
    ('{"schema": 5}', "is not a FillScope shape record: schema 5, expected 'fillscope.shapes/1'."),
    ('{"schema": "fillscope.shapes/1", "node": [], "trail": []}', "whose node or trail is not a list of node records"),
])
def test_shapes_report_refuses_what_is_not_a_shape_record(server, shapes, problem):
    prompt = {"1": {"class_type": "FillScopeShapesReport", "inputs": {"shapes": shapes, "filename_prefix": "fillscope/bad"}}}
    msg = refused_when_run(server, prompt, "FillScopeShapesReport", "shapes")
    assert problem in msg and "Fix: wire a FillScope node's shapes output" in msg
    next_prompt_succeeds(server)


# ---------------------------------------------------------------------------------------------------------------
# model folders and weight files
# ---------------------------------------------------------------------------------------------------------------


# A link inside a model folder (weights kept on another disk) is followed, in the menu and when loading; the source
# string itself never climbs out of the model folders; links that loop are walked once; a config.json that does
# not match its weights, or is not JSON, is refused naming the file; a placeholder bigger than the memory
# available is refused with both figures (tests/test_source_menus.py, on that module's server, started with
# FILLSCOPE_AVAILABLE_RAM_BYTES).
# Every folder and link made under the shared server's models/ is removed afterwards (a looping folder left behind
# would hang ComfyUI's own DiffusersLoader listing in a full /object_info).

import json as _json
import os
import shutil
import time

GOOD_FOLDER = "FLUX.1-Fill-dev"
FLUX_LOADERS = ("FillScopeLoadCLIPL", "FillScopeLoadT5", "FillScopeLoadFluxFillTransformer", "FillScopeLoadVAE")


@pytest.fixture
def made(server):
    """Paths a test makes under the shared server's models/ (links, folders): removed afterwards, links first."""
    paths = []
    yield paths
    for path in reversed(paths):
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)  # does not follow the links inside


def source_options(server, node_type):
    spec = server.object_info(node_type)[node_type]["input"]["required"]["source"]
    return spec[1]["options"] if spec[0] == "COMBO" else spec[0]


def with_source(prompt, node_type, source):
    prompt[node_id(prompt, node_type)]["inputs"]["source"] = source
    return prompt


def loader_only(node_type, source):
    """One loader and ComfyUI's PreviewAny on its shapes output: the load alone."""
    inputs = {"source": source, "dtype": "bf16", "device": "auto", "placeholder_seed": 0}
    if node_type == "FillScopeLoadVAE":
        inputs["kind"] = "flux"
    return {"1": {"class_type": node_type, "inputs": inputs}, "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}}}


def load_error(server, prompt, node_type):
    return refused_at(server, prompt, node_type)[0].strip()  # ComfyUI adds a newline


def test_a_linked_diffusers_folder_is_listed_and_loads(server, made, tmp_path):
    target = tmp_path / "other-disk" / GOOD_FOLDER
    shutil.copytree(server.models_dir / "diffusers" / GOOD_FOLDER, target)
    link = server.models_dir / "diffusers" / "fs-linked-flux"
    made.append(link)
    os.symlink(target, link, target_is_directory=True)
    assert "fs-linked-flux" in source_options(server, "FillScopeLoadFluxFillTransformer")
    prompt = small_image(flux_prompt())  # a 32x32 image: the links are the point
    for loader in FLUX_LOADERS:
        with_source(prompt, loader, "fs-linked-flux")
    assert server.run(prompt)["status"]["status_str"] == "success"


def test_a_linked_single_file_is_listed_and_loads(server, made, tmp_path):
    target = tmp_path / "elsewhere" / "ae.safetensors"
    target.parent.mkdir()
    shutil.copyfile(server.models_dir / "vae" / "ae.safetensors", target)
    link = server.models_dir / "vae" / "fs-linked-ae.safetensors"
    made.append(link)
    os.symlink(target, link)
    assert "vae/fs-linked-ae.safetensors" in source_options(server, "FillScopeLoadVAE")
    prompt = with_source(small_image(flux_prompt()), "FillScopeLoadVAE", "vae/fs-linked-ae.safetensors")  # 32x32
    assert server.run(prompt)["status"]["status_str"] == "success"


def test_links_that_loop_are_listed_and_loaded_at_once(server, made):
    """Two links to "." in a model folder, and in a folder without a model: the menu listing and the fingerprint
    used to walk them forever (the queue hung at 100% CPU, /interrupt did nothing)."""
    diffusers = server.models_dir / "diffusers"
    loop, junk = diffusers / "fs-loop-vae", diffusers / "fs-loop-junk"
    made.extend([loop, junk])
    shutil.copytree(diffusers / GOOD_FOLDER / "vae", loop)  # a single-model folder: config.json + safetensors
    junk.mkdir()
    for folder in (loop, junk):
        os.symlink(".", folder / "a")
        os.symlink(".", folder / "b")
    tw = time.monotonic()
    server.run(loader_only("FillScopeLoadVAE", GOOD_FOLDER), timeout=120)  # warm: imports of a cold worker
    t0 = time.monotonic()
    options = source_options(server, "FillScopeLoadVAE")
    t1 = time.monotonic()
    entry = server.run(loader_only("FillScopeLoadVAE", "fs-loop-vae"), timeout=60)
    t2 = time.monotonic()
    print(f"\nlooping model folder: listed in {t1 - t0:.2f} s, queued + validated + fingerprinted + loaded in "
          f"{t2 - t1:.2f} s (the same VAE from {GOOD_FOLDER}, first: {t0 - tw:.2f} s)")
    assert "fs-loop-vae" in options and not any(o.startswith("fs-loop-junk") for o in options)
    assert entry["status"]["status_str"] == "success"
    assert t1 - t0 < 5 and t2 - t1 < 5
    next_prompt_succeeds(server)


@pytest.mark.parametrize("node_type, source, folder", [
    ("FillScopeLoadFluxFillTransformer", "../diffusers/FLUX.1-Fill-dev", "diffusers"),  # inside again, still refused
    ("FillScopeLoadFluxFillTransformer", "FLUX.1-Fill-dev/../../vae", "diffusers"),
    ("FillScopeLoadVAE", "vae/../../diffusers/FLUX.1-Fill-dev/vae/diffusion_pytorch_model.safetensors", "vae"),
    ("FillScopeLoadVAE", "/etc/passwd", "diffusers"),
])
def test_a_source_that_climbs_out_of_the_model_folders_is_refused_when_queued(server, node_type, source, folder):
    prompt = with_source(flux_prompt(), node_type, source)
    with pytest.raises(ComfyPromptError) as e:
        server.queue(prompt)
    error = e.value.body["node_errors"][node_id(prompt, node_type)]["errors"][0]
    assert error["type"] == "custom_validation_failed" and error["extra_info"]["input_name"] == "source"
    assert f"[FillScope] input 'source': '{source}' points outside ComfyUI's models/{folder} folders" in error["details"]
    next_prompt_succeeds(server)


def copy_of_good(server, made, name):
    dst = server.models_dir / "diffusers" / name
    made.append(dst)
    shutil.copytree(server.models_dir / "diffusers" / GOOD_FOLDER, dst)
    return dst


def test_a_config_with_more_blocks_than_its_weights_is_refused_naming_the_file_and_keys(server, made):
    """It used to load, the missing block filled with fresh random values (a line in the server log), and fail
    later with the NaN message or 'succeed' with garbage."""
    repo = copy_of_good(server, made, "fs-more-blocks")
    config = repo / "transformer" / "config.json"
    data = _json.loads(config.read_text())
    data["num_layers"] += 1
    config.write_text(_json.dumps(data))
    prompt = with_source(flux_prompt(), "FillScopeLoadFluxFillTransformer", repo.name)
    msg = load_error(server, prompt, "FillScopeLoadFluxFillTransformer")
    assert msg.startswith(f"[FillScope] input 'transformer source': '{os.path.realpath(config)}' does not match the "
                          "weights in 'diffusion_pytorch_model.safetensors' (FLUX.1 Fill transformer): the config builds ")
    assert "tensors the weights do not hold (transformer_blocks.1." in msg
    assert msg.endswith("Fix: the config.json does not match these weights: use the config that came with them, or "
                        "download the repository again (its config.json and .safetensors files together).")
    next_flux_fill_prompt_succeeds(server)


def test_a_malformed_config_is_refused_naming_the_file(server, made):
    repo = copy_of_good(server, made, "fs-bad-json")
    config = repo / "vae" / "config.json"
    config.write_text(config.read_text().replace(",", "", 1))
    msg = load_error(server, with_source(flux_prompt(), "FillScopeLoadVAE", repo.name), "FillScopeLoadVAE")
    assert msg.startswith(f"[FillScope] input 'vae source': '{os.path.realpath(config)}' is not valid JSON (Expecting "
                          "',' delimiter at line ")
    assert "Fix: the file is damaged or was edited by hand: restore config.json" in msg
    next_flux_fill_prompt_succeeds(server)


# test_a_placeholder_bigger_than_the_available_ram_is_refused_with_both_figures (a server whose available RAM is said
# to be 64 MiB) runs in tests/test_source_menus.py, on that module's own server, started with
# FILLSCOPE_AVAILABLE_RAM_BYTES: one ComfyUI start-up fewer (the variable only sizes placeholder loads, which the
# menu tests never make).


# ---------------------------------------------------------------------------------------------------------------
# sizes, memory and notices
# ---------------------------------------------------------------------------------------------------------------

# Sizes are checked before work starts: SD3's position-embedding grid (pos_embed_max_size x patch 2 x 8 px a side) at
# the condition node from the shipped configs, then at the sampler from the loaded models' configs; FLUX has no hard
# limit, and its resolution shift outside the calibrated 256-4096 tokens is a notice. crop mode says what it cuts off.

SD3_GRID_FIX = ("crop or scale the image to at most {px} px a side, e.g. inpaint a crop around the masked area and "
                "composite it back into the full image, or inpaint it by tiles (SD3 ControlNet Tiled Inpaint).")


# refused_at (tests/server_checks.py): the prompt fails at the node; (its message, the /history entry)


def test_sd3_image_over_the_position_grid_is_refused_at_the_condition_before_sampling(server):
    prompt = with_synthetic_image(sd3_prompt(), 4096, 64, 0.5)
    msg, entry = refused_at(server, prompt, "FillScopeSD3InpaintCondition")
    assert msg == ("[FillScope] input 'image': 4096x64 is larger than SD3's position-embedding grid allows (3072x3072 "
                   "px for sd3-medium, sd3.5-large and the SD3 inpainting ControlNet: pos_embed_max_size 192 x patch 2 "
                   "x 8). Fix: " + SD3_GRID_FIX.format(px=3072))
    assert node_id(prompt, "FillScopeSD3ControlNetInpaintSampler") not in entry.get("outputs", {})
    next_prompt_succeeds(server)


def test_sd3_sampler_rechecks_the_loaded_models_grid_before_its_first_step(server):
    """The tiny test transformer's grid is 96 patches (1536 px): 1600 px passes the condition's shipped limit and is
    refused by the sampler, never by diffusers' "Width (100) cannot be greater than pos_embed_max_size"."""
    prompt = with_synthetic_image(sd3_prompt(), 1600, 64, 0.5)
    msg, entry = refused_at(server, prompt, "FillScopeSD3ControlNetInpaintSampler")
    assert msg == ("[FillScope] input 'condition': 1600x64 is larger than this transformer's position-embedding grid "
                   "allows (1536x1536 px for the loaded weights: pos_embed_max_size 96 x patch 2 x 8). Fix: "
                   + SD3_GRID_FIX.format(px=1536))
    cond = shapes_doc(entry, prompt, "FillScopeSD3InpaintCondition")["node"]  # the condition took it
    assert cond["facts"]["largest side (position-embedding grid)"].startswith("3072x3072 px for sd3-medium")
    next_prompt_succeeds(server)


def test_crop_mode_says_how_many_repaint_pixels_the_crop_cuts_off_and_paste_back_counts_them_kept(server):
    """100x70 with a full mask, size_mode crop -> a 96x64 crop: the 856 border pixels stay source pixels."""
    prompt = with_synthetic_image(flux_prompt(), 100, 70, 1.0)
    prompt[node_id(prompt, "FillScopeFluxFillCondition")]["inputs"]["size_mode"] = "crop"
    entry = server.run(prompt, timeout=300)
    cond = shapes_doc(entry, prompt, "FillScopeFluxFillCondition")["node"]
    assert ("mask reaches the border size_mode crop cuts off (3 px top, 3 px bottom, 2 px left, 2 px right): 856 "
            "repaint pixels fall outside the 96x64 crop and stay source pixels; set size_mode to pad to repaint "
            "them") in cond["warnings"]
    assert not any("nothing is kept from the source" in w for w in cond["warnings"])
    assert any(w.startswith("mask covers the whole 96x64 crop") for w in cond["warnings"])
    assert cond["facts"]["repaint coverage"] == f"{96 * 64 / (100 * 70):.1%}"
    assert "repaints 6,144 px and keeps 856 px as exact source values" in cond["notes"]
    paste = shapes_doc(entry, prompt, "FillScopePasteBack")["node"]
    assert paste["facts"]["kept pixels (exact source values)"] == "856"


def test_clip_l_truncation_is_a_warning_on_the_prompt_node(server):
    prompt = small_image(flux_prompt())  # a 32x32 image: the text is the point
    prompt[node_id(prompt, "FillScopeFluxPrompt")]["inputs"]["text"] = " ".join(["a"] * 100)
    entry = server.run(prompt, timeout=300)
    clip = shapes_doc(entry, prompt, "FillScopeFluxPrompt")["node"]
    assert "prompt truncated to 77 CLIP tokens (102 given)" in clip["warnings"]
    assert clip["facts"]["prompt tokens (with start/end)"] == "77 of 77"
    assert not any("T5 tokens" in w for w in clip["warnings"])  # T5 reads 512: the same text fits
    short = shapes_doc(server.run(small_image(flux_prompt()), timeout=300), prompt, "FillScopeFluxPrompt")["node"]
    assert not any("truncated" in w for w in short["warnings"])


def test_flux_shift_extrapolation_is_a_warning_at_2048_px_with_meta_weights(server):
    from fillscope.sampling import flux_dynamic_mu, flux_sigmas

    prompt = load_api("flux_fill_meta_trace")
    prompt[node_id(prompt, "FillScopeSyntheticImageMask")]["inputs"].update(width=2048, height=2048)
    # 2 steps, the fewest with a last step that does not start at sigma 1: each meta step at 16384 tokens costs ~2 s
    # of CPU here (measured 2026-12-07: 2.6 s for 1 step, 9 s for 4)
    steps = 2
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"]["steps"] = steps
    entry = server.run(prompt, timeout=300)
    sampler = shapes_doc(entry, prompt, "FillScopeFluxFillSampler")["node"]
    tokens = (2048 // 16) ** 2
    assert sampler["facts"]["tokens"] == tokens == 16384 and sampler["facts"]["mu_extrapolated"] is True
    last = float(flux_sigmas(steps, flux_dynamic_mu(tokens))[-2])
    assert 0 < last < 1
    assert (f"resolution shift mu extrapolated: 16384 tokens is outside the range FLUX.1 was calibrated on (256-4096 "
            f"tokens, up to ~1024x1024 px); mu = {flux_dynamic_mu(tokens):.2f}: the last step starts at sigma "
            f"{last:.2f}") in sampler["warnings"]


# ---------------------------------------------------------------------------------------------------------------
# FillScope Batch on a Ray cluster that does not answer (fillscope/batch/reach.py)
# ---------------------------------------------------------------------------------------------------------------

# Ray dials a loopback host at this machine's own IP: the silent listener listens on every interface, and the closed
# port is one nothing listens on anywhere. No Ray starts in these tests (the address is refused before ray.init).


@pytest.fixture
def ray_batch(server):
    """A one-job manifest (the tiny FLUX Fill folder, by absolute path) in the input folder, not run before: a
    function making the Batch node's prompt for an address, with a fresh output folder each time."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'fillscope[cluster]')")
    import json

    import numpy as np
    from PIL import Image

    where = server.input_dir / "hostile_ray"
    where.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((32, 32, 3), 128, dtype=np.uint8), "RGB").save(where / "image.png")
    Image.fromarray(np.full((32, 32), 255, dtype=np.uint8), "L").save(where / "mask.png")
    job = {"id": "j0", "family": "flux-fill", "models": str(server.models_dir / "diffusers/FLUX.1-Fill-dev"),
           "image": "image.png", "mask": "mask.png", "prompt": "a chair", "seed": 0, "steps": 1, "dtype": "fp32"}
    (where / "one.jsonl").write_text(json.dumps(job) + "\n")
    outputs = itertools.count()

    def prompt(address, **advanced):
        inputs = {"manifest": "hostile_ray/one.jsonl", "output_folder": f"hostile_ray_{next(outputs)}_{id(prompt)}",
                  "run_on": "ray cluster", "ray_address": address, **advanced}
        return {"1": {"class_type": "FillScopeBatch", "inputs": inputs}}

    return prompt


def test_a_ray_cluster_address_where_nothing_listens_is_refused_at_once_naming_it(server, ray_batch):
    import time

    from batch_jobs import closed_port

    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    msg = refused_when_run(server, ray_batch(address), "FillScopeBatch", "ray_address", nothing_saved=False)
    took = time.monotonic() - start
    assert took < 15, f"{took:.1f} s for a refused connection (connect_timeout 30 s)"
    assert f"could not join the Ray cluster at '{address}'" in msg and "connection refused" in msg, msg
    assert "`ray start --head`" in msg and "firewall" in msg and "Ray version" in msg, msg
    next_prompt_succeeds(server)
    entry = server.run(ray_batch(address, run_on="this process"), timeout=300)  # no Ray left half-initialised
    assert entry["outputs"]["1"]["text"][0].startswith("1 job(s): 1 ok"), entry["outputs"]["1"]["text"]


def test_a_ray_cluster_port_that_never_answers_times_out_naming_the_address_and_the_timeout(server, ray_batch,
                                                                                           silent_port):
    import time

    port, accepted = silent_port
    address = f"127.0.0.1:{port}"
    start = time.monotonic()
    msg = refused_when_run(server, ray_batch(address, connect_timeout=3), "FillScopeBatch", "ray_address",
                           nothing_saved=False)
    took = time.monotonic() - start
    assert accepted and 3 <= took < 20, (len(accepted), took)
    assert f"could not join the Ray cluster at '{address}'" in msg, msg
    assert "did not answer as a Ray cluster" in msg and "within the connect timeout of 3 s" in msg, msg
    next_prompt_succeeds(server)


def test_cancel_while_connecting_to_a_ray_cluster_interrupts_the_prompt_at_once(server, ray_batch, silent_port):
    import time

    port, accepted = silent_port
    prompt_id = server.queue(ray_batch(f"127.0.0.1:{port}", connect_timeout=600))
    deadline = time.monotonic() + 120
    while not accepted:  # the node is waiting for the cluster's first answer
        assert time.monotonic() < deadline, "the Batch node never connected"
        time.sleep(0.05)
    time.sleep(0.5)
    start = time.monotonic()
    server.interrupt()
    entry = server.wait(prompt_id, timeout=60, raise_on_error=False)
    took = time.monotonic() - start
    kinds = [kind for kind, _ in entry["status"]["messages"]]
    assert "execution_interrupted" in kinds, kinds
    assert took < 5, f"{took:.1f} s from the interrupt to the prompt's end"
    next_prompt_succeeds(server)
