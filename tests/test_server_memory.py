"""FillScope's models live under ComfyUI's model management: ComfyUI loads them for the nodes that need them,
and POST /free unloads them; the next prompt loads them again and succeeds."""

from __future__ import annotations

import pytest

from server_checks import free_when_idle, small_image
from workflow_helpers import image_saver, load_api, node_id, with_dtype

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def inpaint(small: bool = True) -> dict:
    """flux_fill_inpaint with every loader in fp32 (the shipped bf16 is ~20x slower on a CPU without bf16
    instructions; no test here is about the dtype), on a 32x32 Synthetic Image + Mask unless `small` is False."""
    prompt = with_dtype(load_api("flux_fill_inpaint"), "fp32")
    return small_image(prompt) if small else prompt


def loads(server) -> int:
    return server.log_text().count("Requested to load FillScopeModel")


def test_comfyui_loads_fillscope_models_and_free_unloads_them(server):
    prompt = inpaint()
    sampler = node_id(prompt, "FillScopeFluxFillSampler")
    prompt[sampler]["inputs"].update(steps=2, seed=101)
    free_when_idle(server)  # earlier tests on this server may have left everything resident (auto keeps what fits)
    before = loads(server)
    assert server.run(prompt, timeout=300)["status"]["status_str"] == "success"
    after_first = loads(server)
    assert after_first > before  # ComfyUI's load_models_gpu saw FillScope's patchers

    free_when_idle(server)  # applied once it returns (server_checks.free_when_idle)
    prompt[sampler]["inputs"]["seed"] = 102  # re-run the sampler (not served from cache)
    assert server.run(prompt, timeout=300)["status"]["status_str"] == "success"
    assert loads(server) > after_first  # unloaded by /free, loaded again for the sampler


def test_a_weights_file_changed_on_disk_is_loaded_again(server, comfy_models_dir):
    """The loaders fingerprint their files: the same prompt after the file changed re-runs the loader instead of
    answering from ComfyUI's cache (here the new file has a NaN weight, so the sampler must now refuse)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from comfy_server import ComfyExecutionError

    src = comfy_models_dir / "diffusers" / "FLUX.1-Fill-dev"
    folder = comfy_models_dir / "diffusers" / "FLUX.1-Fill-fingerprint"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(src, folder)
    prompt = inpaint()
    prompt[node_id(prompt, "FillScopeLoadFluxFillTransformer")]["inputs"]["source"] = folder.name
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"].update(steps=2, seed=7)
    assert server.run(prompt, timeout=300)["status"]["status_str"] == "success"

    weights = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    state = load_file(str(weights))
    state["proj_out.weight"][0, 0] = float("nan")
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(ComfyExecutionError, match="NaN"):
        server.run(prompt, timeout=300)  # identical prompt: only the file changed
    shutil.rmtree(folder)


def _bytes(text: str) -> list[float]:
    import re

    return [float(x) * 2 ** (30 if unit == "GiB" else 20) for x, unit in re.findall(r"([0-9.]+) (GiB|MiB)", text)]


def test_each_model_node_reports_what_it_loaded_and_stays_within_the_budget(server):
    """Under the default `auto`, FillScope's resident weights never exceed its budget (the largest component, or
    what the node in hand needs), and every node that used a model says what it loaded and what went back. The
    tiny components (CLIP-L the largest) do not all fit that budget, so a prompt that runs all four after /free
    must send something back."""
    from workflow_helpers import shapes_doc, with_synthetic_image

    model_nodes = ("FillScopeFluxPrompt", "FillScopeFluxFillCondition", "FillScopeFluxFillSampler", "FillScopeVAEDecode")
    for i, text in enumerate(("a stone wall", "a wooden door")):
        prompt = with_synthetic_image(inpaint(small=False), 64, 48, 0.3 + 0.1 * i)  # condition re-runs
        prompt[node_id(prompt, "FillScopeFluxPrompt")]["inputs"]["text"] = text
        prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"].update(steps=2, seed=300 + i)
        free_when_idle(server)
        entry = server.run(prompt, timeout=300)
        sent_back = []
        for cls in model_nodes:
            assert node_id(prompt, cls) in entry["outputs"], cls  # every model node ran
            facts = shapes_doc(entry, prompt, cls)["node"]["facts"]
            assert "memory: loaded for this node" in facts, cls
            resident, budget = _bytes(facts["memory: FillScope resident / budget"])
            assert 0 < resident <= budget, (cls, facts)
            sent_back += [facts["memory: sent back to make room"]] if "memory: sent back to make room" in facts else []
        assert sent_back, "all four tiny components together exceed the budget: some node must have sent one back"


def test_fp8_storage_switch_runs_the_graph_and_says_what_it_stored(server):
    from workflow_helpers import shapes_doc

    prompt = inpaint()
    loader = node_id(prompt, "FillScopeLoadFluxFillTransformer")
    prompt[loader]["inputs"]["storage"] = "fp8_e4m3fn"
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"].update(steps=2, seed=77)
    entry = server.run(prompt, timeout=300)
    assert entry["status"]["status_str"] == "success"
    facts = shapes_doc(entry, prompt, "FillScopeLoadFluxFillTransformer")["node"]["facts"]
    assert "stored in fp8_e4m3fn" in facts["fp8 storage"]


def test_keep_weights_are_counted_by_comfyui_as_soon_as_they_load(server):
    """`keep` loads straight onto the compute device and hands the weights to ComfyUI's model management in the
    loader (so /free can release them even before a node used them); the node that uses them then finds them
    resident."""
    from workflow_helpers import shapes_doc

    prompt = inpaint()
    prompt[node_id(prompt, "FillScopeLoadVAE")]["inputs"]["memory"] = "keep"
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"].update(steps=2, seed=401)
    free_when_idle(server)
    before = loads(server)
    entry = server.run(prompt, timeout=300)
    assert loads(server) > before
    loader = shapes_doc(entry, prompt, "FillScopeLoadVAE")["node"]["facts"]
    assert loader["memory policy"] == "keep" and loader["memory: loaded for this node"].startswith("FLUX VAE")
    condition = shapes_doc(entry, prompt, "FillScopeFluxFillCondition")["node"]["facts"]
    assert condition["memory: loaded for this node"] == "nothing (already resident)"


def _image(server, entry, prompt):
    import io

    import numpy as np
    from PIL import Image

    saved = entry["outputs"][image_saver(prompt)]["images"][0]
    return np.asarray(Image.open(io.BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"]))))


def test_every_memory_policy_runs_the_graph_to_the_same_image(server):
    """Through the nodes: each policy on every loader (streaming, offloading, keeping) gives the image `auto`
    gives, and the loaders report the policy they applied."""
    import numpy as np

    from workflow_helpers import shapes_doc

    images = {}
    for policy in ("auto", "keep", "offload", "sequential"):
        prompt = inpaint()
        for node in prompt.values():
            if node["class_type"].startswith("FillScopeLoad"):
                node["inputs"]["memory"] = policy
        prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"].update(steps=2, seed=555)
        entry = server.run(prompt, timeout=300)
        assert shapes_doc(entry, prompt, "FillScopeLoadT5")["node"]["facts"]["memory policy"] == policy
        images[policy] = _image(server, entry, prompt)
    for policy, image in images.items():
        assert np.array_equal(image, images["auto"]), policy
