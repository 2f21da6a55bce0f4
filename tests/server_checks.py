"""Checks the server tests share (tests/comfy_server.py's server): is the server still serving after a refused or
failed prompt, what a failed prompt's error says, the pixels a prompt saved, the tiny shipped inpaint graphs with a
fresh seed, and the server process's memory.

`assert_still_serving` is the cheap liveness check: a prompt of ComfyUI's own core nodes (EmptyImage -> PreviewImage)
of a colour no earlier call used, so ComfyUI's cache cannot answer it; it proves the executor took a new prompt after
the failure and ran it to the end. Where a test's point is that the same kind of FillScope load or sampling works
after the failure, the test runs a real FillScope prompt itself (the cheapest that shows it)."""

from __future__ import annotations

import io
import itertools
import os
import time
from pathlib import Path

import numpy as np
import pytest
from comfy_server import ComfyExecutionError
from PIL import Image
from workflow_helpers import load_api, node_id, sd3_inpaint_prompt, with_dtype, with_synthetic_image

# a colour (0xRRGGBB) per liveness call, from a random start: never one an earlier prompt of this process (or a
# cached earlier session's) asked for
_colours = itertools.count(int.from_bytes(os.urandom(3), "big"))
# a seed per good FillScope prompt: every one samples anew (a distinct seed is never served from ComfyUI's cache);
# far above every fixed seed a server test uses
_seeds = itertools.count(1_000_000)


def next_seed() -> int:
    return next(_seeds)


# ---- the server still serves ----------------------------------------------------------------------------------


def liveness_prompt(colour: int, size: int = 8) -> dict:
    """ComfyUI core nodes only: an EmptyImage of `colour` (0xRRGGBB) shown by PreviewImage (node "2")."""
    return {"1": {"class_type": "EmptyImage", "inputs": {"width": size, "height": size, "batch_size": 1,
                                                         "color": colour}},
            "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}


def cached_nodes(entry: dict) -> set:
    """The nodes ComfyUI answered from its cache in a /history entry (its execution_cached message)."""
    return set(next((d["nodes"] for k, d in entry["status"]["messages"] if k == "execution_cached"), []))


def assert_still_serving(server, timeout: float = 120) -> dict:
    """After a refused or failed prompt: the process answers HTTP, and the executor takes a new prompt (one its cache
    cannot answer) and completes it: status success, the output node executed (not cached) and its image is the
    colour asked for. Returns the /history entry."""
    assert server.alive(), "the server process died or stopped answering HTTP"
    colour = next(_colours) % 0x1000000
    entry = server.run(liveness_prompt(colour), timeout=timeout)
    status = entry["status"]
    assert status["status_str"] == "success" and status["completed"], status
    kinds = [kind for kind, _ in status["messages"]]
    assert "execution_success" in kinds and "execution_error" not in kinds, kinds
    assert not cached_nodes(entry) & {"1", "2"}, cached_nodes(entry)  # computed for this prompt, not from the cache
    (image,) = entry["outputs"]["2"]["images"]
    pixels = np.asarray(Image.open(io.BytesIO(server.view(image["filename"], image["subfolder"], image["type"]))))
    want = np.array([(colour >> 16) & 0xFF, (colour >> 8) & 0xFF, colour & 0xFF])
    assert pixels.shape == (8, 8, 3) and np.abs(pixels.astype(int) - want).max() <= 1, (pixels[0, 0], hex(colour))
    return entry


# ---- failed prompts ---------------------------------------------------------------------------------------------


def execution_error(exc: ComfyExecutionError) -> dict:
    """The execution_error message of a failed prompt: node_type, exception_type, exception_message, ..."""
    return next(data for kind, data in exc.entry["status"]["messages"] if kind == "execution_error")


def failed_run(server, prompt: dict, timeout: float = 300) -> ComfyExecutionError:
    """Run `prompt`, which must fail (ComfyExecutionError); the error."""
    with pytest.raises(ComfyExecutionError) as e:
        server.run(prompt, timeout=timeout)
    return e.value


def refused_at(server, prompt: dict, node_type: str) -> tuple[str, dict]:
    """The prompt fails at `node_type`: (its error message without ComfyUI's closing newline, the /history entry)."""
    exc = failed_run(server, prompt)
    err = execution_error(exc)
    assert err["node_type"] == node_type, err["exception_message"]
    return err["exception_message"].rstrip("\n"), exc.entry


def refused_when_run(server, prompt: dict, node_type: str, input_name: str, nothing_saved: bool = True) -> str:
    """The prompt fails at `node_type` with a FillScope error naming `input_name` and its fix (and no image or report
    was saved, when the refusing node comes before the node that saves it). The message, without ComfyUI's closing
    newline."""
    msg, entry = refused_at(server, prompt, node_type)
    assert msg.startswith(f"[FillScope] input '{input_name}': ") and " Fix: " in msg, msg
    if nothing_saved:
        assert not {"SaveImage", "FillScopeShapesReport"} & {prompt[k]["class_type"] for k in entry.get("outputs", {})}
    return msg


# ---- what a prompt saved ----------------------------------------------------------------------------------------


def saved_pixels(server, entry: dict, node: str) -> np.ndarray:
    """The first image node `node` saved (or previewed), as uint8 pixels."""
    saved = entry["outputs"][node]["images"][0]
    return np.asarray(Image.open(io.BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"]))))


# ---- the tiny shipped inpaint graphs with a fresh seed ---------------------------------------------------------

SMALL = 32  # px a side: the smallest image (a multiple of 16) every family takes whole: the cheapest VAE work


def small_image(prompt: dict, mask_fraction: float = 0.5) -> dict:
    """The prompt with its LoadImage replaced by a SMALL x SMALL Synthetic Image + Mask (a centred square mask): the
    cheapest real run of a shipped inpaint graph."""
    return with_synthetic_image(prompt, SMALL, SMALL, mask_fraction)



# The helpers below load the tiny models in fp32 unless told otherwise (workflow_helpers.with_dtype): the shipped
# graphs load bf16, which a CPU without bf16 instructions runs ~20x slower than fp32 (the VAE's convolutions above all);
# a test whose point is the dtype passes dtype="bf16".


def flux_prompt(steps: int = 2, seed: int | None = None, transformer: str | None = None, dtype: str = "fp32") -> dict:
    """flux_fill_inpaint (the session server's tiny FLUX Fill files, the 128x96 example image) at `steps`, a fresh
    seed unless given, optionally another transformer source, every loader in `dtype` (shipped: bf16)."""
    prompt = with_dtype(load_api("flux_fill_inpaint"), dtype)
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"].update(
        steps=steps, seed=next_seed() if seed is None else seed)
    if transformer is not None:
        prompt[node_id(prompt, "FillScopeLoadFluxFillTransformer")]["inputs"]["source"] = transformer
    return prompt


def sd3_prompt(steps: int = 2, dtype: str = "fp32") -> dict:
    """sd3_controlnet_inpaint on the tiny SD3 (workflow_helpers.sd3_inpaint_prompt) at `steps`, a fresh seed, every
    loader in `dtype` (shipped: bf16)."""
    prompt = with_dtype(sd3_inpaint_prompt(), dtype)
    prompt[node_id(prompt, "FillScopeSD3ControlNetInpaintSampler")]["inputs"].update(steps=steps, seed=next_seed())
    return prompt


def klein_prompt(steps: int = 1, dtype: str = "fp32") -> dict:
    """klein_inpaint (the tiny klein files, the 128x96 example image) at `steps`, a fresh seed, every loader in
    `dtype` (shipped: bf16)."""
    prompt = with_dtype(load_api("klein_inpaint"), dtype)
    prompt[node_id(prompt, "FillScopeKleinSampler")]["inputs"].update(steps=steps, seed=next_seed())
    return prompt


# ---- the server process -----------------------------------------------------------------------------------------


def memory_mib(server) -> dict:
    """VmRSS and its anonymous / file-backed parts of the server process, in MiB."""
    out = {}
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(line.split()[1]) / 1024
    return out


def rss_mib(server) -> float:
    return memory_mib(server)["VmRSS"]


def large_anonymous_mappings(server, min_mib: float) -> dict:
    """The server's anonymous mappings with at least min_mib resident, as {start address: resident MiB}. glibc
    serves an allocation above its mmap threshold (at most 32 MiB) with a mapping of its own and unmaps it on free,
    so a large tensor's memory shows here while it lives and is gone once it is freed, unlike RSS, which the
    allocator's heap churn moves by tens of MiB in a long-lived server."""
    out, start = {}, None
    for line in Path(f"/proc/{server.proc.pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not fields[0].endswith(":"):  # a mapping's header: "start-end perms offset dev inode [path]"
            start = int(fields[0].split("-")[0], 16) if len(fields) == 5 else None  # no path: anonymous
        elif fields[0] == "Rss:" and start is not None and int(fields[1]) / 1024 >= min_mib:
            out[start] = int(fields[1]) / 1024
    return out


def free_when_idle(server, unload_models: bool = True, free_memory: bool = True) -> None:
    """POST /free and return once the worker has applied it. The worker applies /free's flags after the prompt it is
    running, or at once when the POST wakes it while idle; the wake-up is lost when /free lands while the worker is
    still finishing the previous prompt (history already written, gc.collect running: ComfyUI 0.3.75
    main.prompt_worker), and the flags then wait for the next prompt and are applied, with their gc.collect, right
    after it.

    With free_memory (the node cache dropped): two core-node prompts (liveness_prompt, colours no earlier call used)
    run to the end after the POST; once the second has finished, the flags were applied (with their gc.collect) before
    it started, in every case above, and a prompt queued now runs on what /free left. (This slept 2 s before the POST
    and 1 s after it: a wait on no condition.)

    unload_models alone keeps the node cache, and any prompt run between would evict the cached outputs of the
    nodes it does not hold (ComfyUI's classic cache keeps the last prompt's nodes only): then the worker is left idle
    2 s before the POST and 1 s after it, as before."""
    if not free_memory:
        time.sleep(2.0)
        server.free(unload_models=unload_models, free_memory=False)
        time.sleep(1.0)
        return
    server.free(unload_models=unload_models, free_memory=True)
    for _ in range(2):
        entry = server.run(liveness_prompt(next(_colours) % 0x1000000), timeout=120)
        assert entry["status"]["status_str"] == "success", entry["status"]
