"""The wire recorder on a real ComfyUI server (nodes/wires.py): a graph of ComfyUI's own nodes only, nothing of
FillScope in it, gets a record of every node's outputs at GET /fillscope/wires, with the shapes ComfyUI's code gives
on each link; the route answers JSON a browser parses (no bare NaN) and keeps the newest prompts. A ComfyUI whose
executor changed (simulated on a server of its own) switches the recorder off with one log line, and prompts run."""

from __future__ import annotations

import json
import urllib.request

import pytest

pytestmark = pytest.mark.server


def core_graph(colour: int) -> dict:
    """ComfyUI's own nodes: an image scaled, a latent batch upscaled and saved, a mask turned into an image."""
    return {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 1, "color": colour}},
        "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "nearest-exact",
                                                     "width": 32, "height": 24, "crop": "disabled"}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 2}},
        "5": {"class_type": "LatentUpscaleBy", "inputs": {"samples": ["4", 0], "upscale_method": "nearest-exact",
                                                          "scale_by": 1.5}},
        "6": {"class_type": "SaveLatent", "inputs": {"samples": ["5", 0], "filename_prefix": "wires/latent"}},
        "7": {"class_type": "SolidMask", "inputs": {"value": 0.5, "width": 32, "height": 16}},
        "8": {"class_type": "MaskToImage", "inputs": {"mask": ["7", 0]}},
        "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}},
    }


@pytest.fixture(scope="module")
def server(test_nodes_server):
    with test_nodes_server.module() as server:
        yield server


def wires(server, prompt_id=None) -> dict:
    query = "" if prompt_id is None else f"?prompt_id={prompt_id}"
    with urllib.request.urlopen(f"{server.url}/fillscope/wires{query}", timeout=30) as response:
        return json.loads(response.read().decode(), parse_constant=lambda c: pytest.fail(f"bare {c} in the JSON"))


def only_tensor(record: dict, slot: int = 0) -> dict:
    (value,) = record["outputs"][slot]["values"]
    (tensor,) = value["tensors"]
    return tensor


def test_every_link_of_a_graph_of_comfyuis_own_nodes_has_its_record(server):
    graph = core_graph(0x112233)
    entry = server.run(graph)
    prompt_id = entry["prompt"][1]
    answer = wires(server, prompt_id)
    assert answer["status"] == "on" and answer["prompt_id"] == prompt_id
    records = answer["nodes"]
    assert set(records) == set(graph)  # every node that ran, output nodes included (with no outputs)
    for node_id, node in graph.items():
        assert records[node_id]["class_type"] == node["class_type"], node_id
    assert only_tensor(records["1"]) == {"name": "image", "shape": [1, 48, 64, 3], "dtype": "float32",
                                         "device": "cpu"}
    assert only_tensor(records["2"])["shape"] == [1, 24, 32, 3]
    assert records["2"]["outputs"][0]["type"] == "IMAGE"
    assert only_tensor(records["4"]) == {"name": "samples", "shape": [2, 4, 8, 8], "dtype": "float32",
                                         "device": "cpu"}
    assert only_tensor(records["5"])["shape"] == [2, 4, 12, 12] and records["5"]["outputs"][0]["type"] == "LATENT"
    assert only_tensor(records["7"])["name"] == "mask" and only_tensor(records["7"])["shape"] == [1, 16, 32] and records["7"]["outputs"][0]["type"] == "MASK"
    assert only_tensor(records["8"])["shape"] == [1, 16, 32, 3]
    assert records["3"]["outputs"] == [] and records["6"]["outputs"] == []
    assert prompt_id in wires(server)["prompts"]


def test_the_next_prompt_has_records_of_its_own_and_the_server_log_has_no_recorder_line(server):
    first = server.run(core_graph(0x445566))["prompt"][1]
    second = server.run(core_graph(0x778899))["prompt"][1]
    assert first != second
    assert "1" in wires(server, second)["nodes"] and "1" in wires(server, first)["nodes"]
    assert "wire recorder" not in server.log_text(since=server.module_log_start)  # neither off nor failing


# A ComfyUI whose executor changed, simulated: a sitecustomize on the server's PYTHONPATH renames
# execution.get_output_data's parameters (the same behaviour, another signature) as the module is imported, before
# any custom node loads.
CHANGED_EXECUTOR = '''
import importlib.abc, importlib.machinery, sys

class _Renamed(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "execution":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            original = module.get_output_data

            async def get_output_data(prompt, node, obj, inputs, *args, **kwargs):
                return await original(prompt, node, obj, inputs, *args, **kwargs)

            module.get_output_data = get_output_data

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Renamed())
'''


def test_a_changed_comfyui_executor_switches_the_recorder_off_with_one_line_and_prompts_run(tmp_path):
    import os

    from comfy_server import ComfyServer, comfyui_installed

    if not comfyui_installed():
        pytest.skip("ComfyUI not installed")
    (tmp_path / "sitecustomize.py").write_text(CHANGED_EXECUTOR)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    with ComfyServer(env=dict(os.environ, PYTHONPATH=path)) as changed:
        changed.start()
        status = wires(changed)["status"]
        assert status == ("off (execution.get_output_data takes ('prompt', 'node', 'obj', 'inputs'), not "
                          "('prompt_id', 'unique_id', 'obj', 'input_data_all'))")
        for colour in (0x102030, 0x405060):  # prompts run, one after the other, as without the pack
            entry = changed.run(core_graph(colour))
            assert entry["outputs"]["3"]["images"] and wires(changed, entry["prompt"][1])["nodes"] == {}
        lines = [line for line in changed.log_text().splitlines() if "wire recorder" in line]
        assert lines == [f"[FillScope] wire recorder {status}: prompts run without it"], lines
