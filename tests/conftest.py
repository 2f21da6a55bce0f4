"""Shared pytest fixtures, and the skip policy: under CI (env CI set) only tests that need CUDA may skip.

A test that needs a CUDA device is marked ``@pytest.mark.cuda`` (a module: ``pytestmark = pytest.mark.cuda``); it
is skipped where torch sees no CUDA device. Any other skip (``pytest.skip``, ``skipif``, ``importorskip``, a
fixture that skips, a module skipped at collection) is reported as a failure under CI, so a missing tokenizer,
ComfyUI, browser or package can never pass CI silently. Outside CI every skip stays a skip.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make helpers importable
from comfy_server import ComfyServer, comfyui_installed, comfyui_path  # noqa: E402


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


# --- skip policy (see the module docstring) ---------------------------------------------------------

CUDA_SKIP_REASON = "needs a CUDA device (@pytest.mark.cuda)"
CI_SKIP_FAILURE = "skipped under CI ({}): under CI=true only tests marked @pytest.mark.cuda may skip"


def pytest_collection_modifyitems(config, items):
    import suite_plan

    suite_plan.plan(items)  # kinds (engine / server / browser / ray) and xdist work units, longest first
    cuda = [item for item in items if item.get_closest_marker("cuda")]
    if cuda:
        import torch

        if not torch.cuda.is_available():
            for item in cuda:
                item.add_marker(pytest.mark.skip(reason=CUDA_SKIP_REASON))


def pytest_runtest_setup(item):
    """A test outside the browser modules gets a thread without tests/browser.py's shared playwright: the report
    renderer (fillscope/trace/report) and test_compare_page.py start their own, and one thread runs one at a time."""
    browser = sys.modules.get("browser")
    if browser is not None and not item.get_closest_marker("browser"):
        browser.stop_shared_browser()


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_skip_in_ci(report):
    if report.skipped and not hasattr(report, "wasxfail") and _in_ci():
        report.outcome = "failed"
        report.longrepr = CI_SKIP_FAILURE.format(_skip_reason(report))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if item.get_closest_marker("cuda") and report.skipped and _skip_reason(report) == CUDA_SKIP_REASON:
        return report  # the one skip CI allows: a @pytest.mark.cuda test on a machine without CUDA
    return _fail_skip_in_ci(report)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped while it is collected (``pytest.skip(..., allow_module_level=True)``, a module-level
    ``importorskip``): a failure under CI too. A CUDA-only module uses ``pytestmark = pytest.mark.cuda`` instead."""
    return _fail_skip_in_ci((yield))


# --- ComfyUI's modules in this process (tests/checkpoint_files.py) ---------------------------------


@pytest.fixture(scope="module")
def comfy():
    """ComfyUI's `comfy` package, imported in this process (checkpoint_files.comfy: CPU mode, its key maps and
    models). Skipped when ComfyUI is not installed (a failure under CI, like every non-CUDA skip)."""
    import checkpoint_files as cf

    try:
        return cf.comfy()
    except FileNotFoundError as e:
        pytest.skip(str(e))


# --- Ray ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_tmp_env(tmp_path_factory):
    """HOME, RAY_TMPDIR and TMPDIR in one short temporary folder for a module that starts Ray (batch_jobs.py);
    given back, and Ray stopped, afterwards."""
    from batch_jobs import ray_tmp_env

    tmp_path_factory.getbasetemp()  # pytest's own folder fixed first, outside the one removed afterwards
    with ray_tmp_env() as folder:
        yield folder


@pytest.fixture
def silent_port():
    """A port that accepts TCP connections and never sends a byte: (port, the connections accepted so far). Bound on
    every interface: Ray dials a loopback host at this machine's own IP (fillscope/batch/reach.py)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(16)
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:  # closed
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


# --- real ComfyUI server (tests/comfy_server.py) -------------------------------------------------


def _session_server(server_class, what: str):
    """A started server of `server_class` for the session, cleaned up afterwards (its log kept and named with
    FILLSCOPE_KEEP_SERVER_LOG). Skipped when ComfyUI is not installed (a failure under CI, like every non-CUDA skip)."""
    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()} (run `make setup` or set COMFYUI_PATH)")
    server = server_class()
    try:
        server.start()
        yield server
    finally:
        if os.environ.get("FILLSCOPE_KEEP_SERVER_LOG"):
            print(f"\n{what} log: {server.log_path}")
            server.stop()
        else:
            server.cleanup()


@pytest.fixture(scope="session")
def comfy_server():
    """One real ComfyUI server (CPU, pack linked) for the whole session (per xdist worker)."""
    yield from _session_server(ComfyServer, "ComfyUI server")


@pytest.fixture(scope="session")
def test_nodes_server():
    """One real ComfyUI server with tests/comfy_nodes as one more custom_nodes folder (comfy_server.ServerWithTestNodes)
    for the whole session (per xdist worker), shared by the modules that test FillScope next to ComfyUI's own classes
    built tiny. Each such module's `server` fixture is `with test_nodes_server.module(prepare) as server`: its own
    models and input images written into the running server, nothing of the modules before it left running, cached,
    loaded or in the output folder."""
    from comfy_server import ServerWithTestNodes

    yield from _session_server(ServerWithTestNodes, "ComfyUI test-nodes server")


@pytest.fixture(scope="module")
def templates_server(test_nodes_server):
    """test_nodes_server for one module, with what ComfyUI's own templates need on tiny weights (comfy_templates.py:
    the tiny FLUX Fill and SD3 folders, the templates' input images)."""
    import comfy_templates

    with test_nodes_server.module(comfy_templates.prepare) as server:
        yield server


@pytest.fixture(scope="session")
def comfy_models_dir(comfy_server) -> Path:
    """<server workdir>/models: subfolders diffusers/, checkpoints/, vae/, text_encoders/, diffusion_models/,
    controlnet/, loras/, clip_vision/ are searched first by the server (extra_model_paths, is_default)."""
    return comfy_server.models_dir


@pytest.fixture(scope="session")
def served_models(comfy_server, comfy_models_dir):
    """The session server with serve_tiny_models' folders."""
    return serve_tiny_models(comfy_server, comfy_models_dir)


@pytest.fixture(scope="session")
def newest_frontend_server(served_models):
    """A second server serving the newest frontend (scripts/setup.sh's NEWEST_FRONTEND, unpacked under
    tests/.cache/frontends/; ComfyUI's --front-end-root) on the session server's model folders (a link: the tiny
    stand-ins are built once) and its example images: one for the session, started by the first browser test on that
    frontend (tests/test_browser_frontends.py, test_browser_inspect.py). Skipped, with
    the reason, when `make setup` could not unpack that frontend (a failure under CI, like every non-CUDA skip)."""
    import shutil

    from browser import require_newest_frontend

    root = require_newest_frontend()
    server = ComfyServer(front_end_root=root)
    try:
        server.models_dir.symlink_to(served_models.models_dir, target_is_directory=True)
        server.input_dir.mkdir(parents=True, exist_ok=True)
        for f in served_models.input_dir.iterdir():
            if f.is_file():
                shutil.copy2(f, server.input_dir / f.name)
        server.start()
        yield server
    finally:
        server.cleanup()  # removes the link, never the session server's folders (rmtree does not follow links)


def serve_tiny_models(comfy_server, comfy_models_dir):
    """A server's model and input folders as the shipped workflows expect them, with tiny random
    models standing in for the real weights: FLUX.1-Fill-dev, stable-diffusion-3-medium-diffusers and
    SD3-Controlnet-Inpainting under models/diffusers, a folder of another model (FLUX.1-dev-tiny: a FLUX.1
    text-to-image repository), and the example images in the input folder."""
    import json
    import shutil

    import numpy as np
    import torch
    from PIL import Image

    from tiny_flux import build_tiny_flux_fill_folder
    from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

    diffusers_dir = comfy_models_dir / "diffusers"
    flux = diffusers_dir / "FLUX.1-Fill-dev"
    build_tiny_flux_fill_folder(flux, seed=0)
    other = diffusers_dir / "FLUX.1-dev-tiny"
    shutil.copytree(flux, other)
    index = json.loads((other / "model_index.json").read_text())
    index["_class_name"] = "FluxPipeline"
    (other / "model_index.json").write_text(json.dumps(index))
    build_tiny_sd3_folder(diffusers_dir / "stable-diffusion-3-medium-diffusers", seed=0)

    # the same tiny FLUX weights as single files in ComfyUI's folders, in the formats people download
    import checkpoint_files as cf
    from tiny_flux import build_tiny_components

    tiny = build_tiny_components(0)
    models = comfy_models_dir
    cf.save(models / "diffusion_models/flux1-fill-dev.safetensors", cf.flux_bfl_state(tiny["transformer"]), cf.TINY_HINTS)
    cf.save(models / "vae/ae.safetensors", cf.vae_ldm_state(tiny["vae"]))
    cf.save(models / "text_encoders/t5xxl_fp8_e4m3fn.safetensors", cf.fp8_t5_state(tiny["text_encoder_2"]))
    cf.save(models / "text_encoders/t5xxl_fp16.safetensors", cf.t5_comfy_state(tiny["text_encoder_2"])[0],
            dtype=torch.float16)
    build_tiny_sd3_controlnet_folder(diffusers_dir / "SD3-Controlnet-Inpainting", seed=0)

    # the published single files the FLUX Fill and SD3 workflows load (api_workflows/graphs.py FLUX_FILL_FILES,
    # SD3_FILES): one clip_l.safetensors with its projection serves both (the tiny FLUX and SD3 CLIP-L have one
    # geometry); t5xxl_fp16 is FLUX's tiny T5 (the tiny SD3 reads a wider one: tests give SD3 graphs the tiny SD3
    # folder's T5, workflow_helpers.sd3_inpaint_prompt)
    from tiny_sd3 import TINY_CLIP_G_CONFIG, TINY_CLIP_L_CONFIG, build_tiny_sd3_components, build_tiny_sd3_controlnet

    sd3 = build_tiny_sd3_components(0)
    cf.save(models / "text_encoders/clip_l.safetensors", cf.clip_comfy_state(sd3["text_encoder"], TINY_CLIP_L_CONFIG),
            cf.TINY_HINTS)
    cf.save(models / "text_encoders/clip_g.safetensors", cf.clip_comfy_state(sd3["text_encoder_2"], TINY_CLIP_G_CONFIG),
            cf.TINY_HINTS)
    cf.save(models / "checkpoints/sd3_medium.safetensors", cf.sd3_checkpoint_state(sd3, with_text_encoders=False),
            cf.TINY_HINTS)
    cf.save(models / "controlnet/SD3-Controlnet-Inpainting.safetensors", build_tiny_sd3_controlnet(0)[0].state_dict(),
            cf.TINY_HINTS)

    # a tiny FLUX.2 [klein] under the published single-file names the klein workflows load: BFL transformer keys,
    # ComfyUI's Qwen3 keys; the VAE in diffusers keys (norm_num_groups hinted: BFL keys' writer checks against
    # ComfyUI's AutoencoderKL, whose GroupNorm(32) does not fit the tiny widths)
    from tiny_klein import TINY_VAE_CONFIG as KLEIN_VAE
    from tiny_klein import build_tiny_components as build_tiny_klein

    klein = build_tiny_klein(0)
    cf.save(models / "diffusion_models/flux-2-klein-4b.safetensors", cf.klein_bfl_state(klein["transformer"]))
    cf.save(models / "text_encoders/qwen_3_4b.safetensors", cf.qwen3_comfy_state(klein["text_encoder"]))
    cf.save(models / "vae/flux2-vae.safetensors",
            {k: v for k, v in klein["vae"].state_dict().items() if not k.endswith("num_batches_tracked")},
            {"flux2_vae": {"norm_num_groups": KLEIN_VAE["norm_num_groups"]}})

    # the native_flux_fill_mixed template's LoRA (api_workflows/graphs.py NATIVE_LORA): a tiny kohya LoRA of the tiny
    # FLUX Fill transformer under the template's file name
    import native_templates
    from safetensors.torch import save_file

    lora = models / native_templates.LORA[0] / native_templates.LORA[1]
    lora.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in native_templates.kohya_lora().items()}, str(lora))

    rng = np.random.default_rng(0)
    rgba = rng.integers(0, 256, size=(96, 128, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    rgba[24:72, 32:96, 3] = 0  # transparent = repaint (LoadImage mask = 1 - alpha)
    Image.fromarray(rgba, "RGBA").save(comfy_server.input_dir / "fillscope_example.png")
    Image.fromarray(rgba[..., :3], "RGB").save(comfy_server.input_dir / "fillscope_rgb.png")
    return comfy_server
