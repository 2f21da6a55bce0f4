"""bench/native_boundary.py at 256x256: FillScope's FLUX.1 Fill transformer and ComfyUI's own (FluxInpaint ->
comfy.ldm.flux.model.Flux, config by ComfyUI's model_detection) on the meta device meet at the same shapes inside,
differ only in the layouts the table says, and have the same parameter count. Every figure asserted is one the
script measured (hooks on both models, real-valued CPU probes of the parameter-free steps)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from comfy_server import comfyui_installed

REPO = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 256, 256

pytestmark = pytest.mark.skipif(not comfyui_installed(), reason="ComfyUI not installed (make setup, or COMFYUI_PATH)")


def load_script():
    spec = importlib.util.spec_from_file_location("native_boundary", REPO / "bench" / "native_boundary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("native_boundary") / "table.json"
    assert load_script().main(["--size", f"{WIDTH}x{HEIGHT}", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_both_sides_see_the_same_token_count_and_hidden_states(report):
    f = report["facts"]
    uc = f["unet_config"]  # ComfyUI's detected config: the widths come from it, not from literals here
    patch, width = uc["patch_size"], uc["hidden_size"]
    n = (HEIGHT // (8 * patch)) * (WIDTH // (8 * patch))  # (H/16)(W/16)
    assert n == f["tokens_expected"] == 256
    text_len = f["fs_text"][1]
    # the packed tokens reach the first linear layer with the same shape on both sides
    assert f["fs_x_embedder"] == f["native_img_in"] == [[1, n, uc["in_channels"] * patch * patch], [1, n, width]]
    assert f["fs_input"] == [1, n, uc["in_channels"] * patch * patch]
    # hidden states in and out of the first double block: img [1,N,3072], txt [1,L,3072] on both
    assert f["fs_double_in"] == f["native_double_in"] == [[1, n, width], [1, text_len, width]]
    assert f["fs_double_out"] == f["native_double_out"] == [[1, n, width], [1, text_len, width]]
    # the single blocks: ComfyUI joins txt + img into one sequence, diffusers passes them apart
    assert f["native_single_in"] == f["native_single_out"] == [1, text_len + n, width]
    assert f["fs_single_in"] == f["fs_single_out"] == [[1, n, width], [1, text_len, width]]
    assert f["fs_temb"] == f["native_vec"] == [1, width]
    assert f["fs_txt_out"] == f["native_txt_out"] == [1, text_len, width]


def test_the_boundaries_differ_only_in_layout(report):
    f = report["facts"]
    uc = f["unet_config"]
    patch = uc["patch_size"]
    n = f["tokens_expected"]
    grid = [HEIGHT // 8, WIDTH // 8]
    concat = uc["in_channels"] - uc["out_channels"]
    call = f["native_call"]
    assert call["x"] == [1, uc["out_channels"], *grid] and call["c_concat"] == [1, concat, *grid]
    assert f["native_x"] == [1, uc["in_channels"], *grid]  # what Flux.forward gets: x and c_concat joined
    assert f["fs_text"] == f["native_text"] == [1, 512, uc["context_in_dim"]]
    assert f["fs_pooled"] == f["native_pooled"] == [1, uc["vec_in_dim"]]
    assert f["native_ids"] == [1, *f["fs_ids"]] == [1, 512 + n, len(uc["axes_dim"])]
    # output: velocity tokens (FillScope) vs ComfyUI's unpacked, denoised latent
    assert f["fs_output"] == f["fs_proj_out"] == f["native_final_layer"] == [1, n, uc["out_channels"] * patch * patch]
    assert f["native_model_out"] == f["native_apply_model_out"] == [1, uc["out_channels"], *grid]
    p = f["probes"]
    assert p["tokens_shape"] == f["fs_input"]
    assert p["pack_max_diff"] == 0 and p["ids_max_diff"] == 0 and p["denoised_max_diff"] == 0
    assert p["emb_max_diff"] < 1e-6 and p["rope_max_diff"] < 1e-6
    assert p["diffusers_x1000"] and p["time_factor"] == 1000.0


def test_comfyui_detects_the_production_fill_model_and_counts_the_same_parameters(report):
    f = report["facts"]
    uc = f["unet_config"]
    assert (uc["depth"], uc["depth_single_blocks"], uc["in_channels"], uc["out_channels"]) == (19, 38, 96, 16)
    assert f["native_keys_equal_detected"] and f["native_shapes_equal_detected"]
    assert f["fs_detector_config_equal"]
    assert f["fs_parameters"] == f["native_parameters"] == 11_902_391_360  # test_flux_meta_contract's figure
    assert all(row[3].startswith(("yes", "grid vs tokens; yes")) for row in report["rows"]), report["rows"]
    print("\n" + "\n".join(report["how"]))
    for row in report["rows"]:
        print(" | ".join(row))
