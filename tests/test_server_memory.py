"""FillScope's models live under ComfyUI's model management: ComfyUI loads them for the nodes that need them,
and POST /free unloads them; the next prompt loads them again and succeeds."""

from __future__ import annotations

import time

import pytest

from workflow_helpers import load_api, node_id

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def loads(server) -> int:
    return server.log_text().count("Requested to load FillScopeModel")


def test_comfyui_loads_fillscope_models_and_free_unloads_them(server):
    prompt = load_api("flux_fill_inpaint")
    sampler = node_id(prompt, "FillScopeFluxFillSampler")
    prompt[sampler]["inputs"].update(steps=2, seed=101)
    before = loads(server)
    assert server.run(prompt, timeout=300)["status"]["status_str"] == "success"
    after_first = loads(server)
    assert after_first > before  # ComfyUI's load_models_gpu saw FillScope's patchers

    server.free()
    prompt[sampler]["inputs"]["seed"] = 102  # re-run the sampler (not served from cache)
    time.sleep(1.0)  # /free is applied before the next queue item
    assert server.run(prompt, timeout=300)["status"]["status_str"] == "success"
    assert loads(server) > after_first  # unloaded by /free, loaded again for the sampler
