"""A real ComfyUI server starts with the pack linked, answers, and runs a core-node prompt."""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.server, pytest.mark.smoke]  # make test-fast runs it with the engine tests


def test_pack_is_linked(comfy_server):
    link = comfy_server.comfyui / "custom_nodes" / "FillScope"
    assert link.exists(), f"{link} missing: run `make setup`"
    if link.is_symlink():
        assert (link / "pyproject.toml").is_file()


def test_object_info_lists_core_nodes(comfy_server):
    info = comfy_server.object_info()
    for node in ("LoadImage", "SaveImage", "EmptyImage", "PreviewImage"):
        assert node in info, f"{node} missing from /object_info"
    assert info["LoadImage"]["output"][:2] == ["IMAGE", "MASK"]
    assert comfy_server.object_info("EmptyImage")["EmptyImage"]["name"] == "EmptyImage"
    assert comfy_server.alive()


def test_models_dir_is_searched(comfy_server, comfy_models_dir):
    folder = comfy_models_dir / "diffusers" / "smoke-model"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_index.json").write_text("{}")
    # core DiffusersLoader lists the folders that hold a model_index.json
    choices = comfy_server.object_info("DiffusersLoader")["DiffusersLoader"]["input"]["required"]["model_path"][0]
    assert any(c.replace(os.sep, "/").endswith("smoke-model") for c in choices), choices


def test_core_prompt_runs_and_image_can_be_viewed(comfy_server):
    prompt = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 32, "batch_size": 1, "color": 0xFF0000}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "smoke/fs"}},
    }
    entry = comfy_server.run(prompt, timeout=120, client_id=comfy_server.new_client_id())
    assert entry["status"]["status_str"] == "success"
    images = entry["outputs"]["2"]["images"]
    assert len(images) == 1 and images[0]["type"] == "output"
    data = comfy_server.view(images[0]["filename"], images[0]["subfolder"], images[0]["type"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # IHDR: width, height
    assert int.from_bytes(data[16:20], "big") == 64 and int.from_bytes(data[20:24], "big") == 32
    assert (comfy_server.output_dir / images[0]["subfolder"] / images[0]["filename"]).is_file()


def test_invalid_prompt_reports_server_error(comfy_server):
    from comfy_server import ComfyPromptError

    with pytest.raises(ComfyPromptError) as err:
        comfy_server.queue({"1": {"class_type": "NoSuchNode_FillScopeSmoke", "inputs": {}}})
    assert err.value.status == 400
    assert "error" in err.value.body
