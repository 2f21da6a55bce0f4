"""Shared pytest fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# --- real ComfyUI server (tests/comfy_server.py) -------------------------------------------------
sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make helpers importable
from comfy_server import ComfyServer, comfyui_installed, comfyui_path  # noqa: E402


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def comfy_server():
    """One real ComfyUI server (CPU, pack linked) for the whole session. Skipped when ComfyUI is not
    installed, except in CI (CI=true), where that is a failure."""
    if not comfyui_installed():
        msg = f"ComfyUI not installed at {comfyui_path()} (run `make setup` or set COMFYUI_PATH)"
        if _in_ci():
            pytest.fail(msg + " -- required in CI", pytrace=False)
        pytest.skip(msg)
    server = ComfyServer()
    try:
        server.start()
        yield server
    finally:
        if os.environ.get("FILLSCOPE_KEEP_SERVER_LOG"):
            print(f"\nComfyUI server log: {server.log_path}")
            server.stop()
        else:
            server.cleanup()


@pytest.fixture(scope="session")
def comfy_models_dir(comfy_server) -> Path:
    """<server workdir>/models: subfolders diffusers/, checkpoints/, vae/, text_encoders/, diffusion_models/,
    controlnet/, loras/, clip_vision/ are searched first by the server (extra_model_paths, is_default)."""
    return comfy_server.models_dir
