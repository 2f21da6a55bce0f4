"""The templates' example image (fillscope_example.png, shipped in api_workflows/) is put into ComfyUI's input folder
by the pack itself when ComfyUI loads it (nodes/example_image.py, called from comfy_entrypoint), so a template's Load
Image finds it on any install, not only after `make setup`:

- a fresh server whose input folder lacks the file: after start-up the file is there, byte for byte the shipped one,
  Load Image offers it, and a template's Load Image node validates and runs;
- in-process (the module alone, no ComfyUI): a user's own file of that name, or a link, is never overwritten; a copy
  that cannot be made is logged and nothing is raised (start-up goes on); the module imports no torch.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from comfy_server import ComfyServer, comfyui_installed, comfyui_path
from workflow_helpers import load_api, node_id

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "nodes" / "example_image.py"
SHIPPED = REPO / "api_workflows" / "fillscope_example.png"
NAME = "fillscope_example.png"
TEMPLATE = "flux_fill_inpaint"  # a real-weight template whose Load Image names the example


def example_module():
    spec = importlib.util.spec_from_file_location("fillscope_example_image", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def server():
    """A server of its own: a new, empty input folder (the session's servers get the tests' own example images)."""
    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()} (run `make setup` or set COMFYUI_PATH)")
    server = ComfyServer()
    server.input_dir.mkdir(parents=True, exist_ok=True)
    assert list(server.input_dir.iterdir()) == []
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def test_a_fresh_server_has_the_example_image_and_a_templates_load_image_runs(server):
    copied = server.input_dir / NAME
    assert copied.is_file(), server.log_text()
    assert copied.read_bytes() == SHIPPED.read_bytes()
    assert f"example image copied to {copied}" in server.log_text()
    choices = server.object_info("LoadImage")["LoadImage"]["input"]["required"]["image"][0]
    assert NAME in choices, choices

    template = load_api(TEMPLATE)
    load = node_id(template, "LoadImage")
    assert template[load]["inputs"]["image"] == NAME
    prompt = {load: template[load], "2": {"class_type": "PreviewImage", "inputs": {"images": [load, 0]}}}
    entry = server.run(prompt, timeout=120)  # POST /prompt validates LoadImage (VALIDATE_INPUTS: the file exists)
    assert entry["status"]["status_str"] == "success"
    assert len(entry["outputs"]["2"]["images"]) == 1


def test_a_users_file_or_link_of_that_name_is_never_overwritten(tmp_path):
    mod = example_module()
    own = tmp_path / "own"
    own.mkdir()
    (own / NAME).write_bytes(b"the user's own picture")
    assert mod.install_example_image(own) is None
    assert (own / NAME).read_bytes() == b"the user's own picture"

    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / NAME).symlink_to(tmp_path / "nowhere.png")  # a broken link is a user's too
    assert mod.install_example_image(linked) is None
    assert (linked / NAME).is_symlink() and not (tmp_path / "nowhere.png").exists()

    empty = tmp_path / "new" / "input"  # a folder not made yet: made
    assert mod.install_example_image(empty) == str(empty / NAME)
    assert (empty / NAME).read_bytes() == SHIPPED.read_bytes()


def test_a_copy_that_cannot_be_made_is_logged_and_start_up_goes_on(tmp_path, caplog):
    mod = example_module()
    caplog.set_level(logging.INFO)
    assert mod.install_example_image(tmp_path, source=tmp_path / "missing.png") is None
    assert not (tmp_path / NAME).exists()  # no empty file left behind: the next start tries again
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert mod.install_example_image(blocked / "input") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("could not copy the example image" in w for w in warnings), warnings


def test_the_module_imports_no_torch():
    code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('m', {str(MODULE)!r}); "
            "s.loader.exec_module(importlib.util.module_from_spec(s)); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=""))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
