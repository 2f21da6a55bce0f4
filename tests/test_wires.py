"""The wire recorder (nodes/wires.py) off a server: what a value's summary says of odd values, that the wrapped
executor function hands back the very result it got, and that it stays off (nothing patched, prompts untouched) when
told to or when ComfyUI's executor is not the one it was written against (a changed ComfyUI, simulated here by an
executor module of another shape). The records of a real server's prompts: tests/test_server_wires.py."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import sys
import types
import weakref
from pathlib import Path

import pytest
import torch

# nodes/wires.py without ComfyUI: the pack's folder as a package of its own (its __init__ not run), so the recorder's
# modules import each other; nothing of ComfyUI's is imported until a MODEL, CLIP or VAE is described
_pack = types.ModuleType("fillscope_wires_pack")
_pack.__path__ = [str(Path(__file__).resolve().parent.parent)]
sys.modules.setdefault("fillscope_wires_pack", _pack)
wires = importlib.import_module("fillscope_wires_pack.nodes.wires")
wire_values = importlib.import_module("fillscope_wires_pack.nodes.wire_values")
wire_calls = importlib.import_module("fillscope_wires_pack.nodes.wire_calls")


def executor_module(returns=None, signature="new"):
    """A module with ComfyUI 0.3.75's `get_output_data` shape (or another one), answering `returns(obj)`."""
    module = types.ModuleType("execution_under_test")
    if signature == "new":
        async def get_output_data(prompt_id, unique_id, obj, input_data_all, execution_block_cb=None,
                                  pre_execute_cb=None, hidden_inputs=None):
            return returns(obj)
    elif signature == "renamed":
        async def get_output_data(prompt, node, obj, inputs):
            return returns(obj)
    else:  # a plain function where the executor awaits a coroutine
        def get_output_data(prompt_id, unique_id, obj, input_data_all):
            return returns(obj)
    module.get_output_data = get_output_data
    return module


class Node:
    RETURN_TYPES = ("LATENT", "IMAGE", "STRING")
    RETURN_NAMES = ("latent", "image", "texts")
    OUTPUT_IS_LIST = (False, False, True)
    NODE_ID = "SomePackNode"


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.delenv(wires.ENV, raising=False)
    monkeypatch.setitem(wires._state, "status", "not installed")
    monkeypatch.setitem(wires._state, "logged_failure", False)
    monkeypatch.setattr(wires, "_records", type(wires._records)())
    monkeypatch.setattr(wires, "_producers", {})
    monkeypatch.setitem(wires._state, "prompt", None)


def test_the_wrapped_executor_hands_back_the_very_result_and_records_its_metadata():
    latent = {"samples": torch.zeros(2, 16, 8, 8, dtype=torch.bfloat16)}
    image = torch.zeros(1, 24, 32, 3)
    result = ([[latent], [image], [["a", "b"]]], {"ui": 1}, False, False)
    module = executor_module(lambda obj: result)
    assert wires.install(module) == "on" and wires.install(module) == "on"  # a second install patches nothing more
    got = asyncio.run(module.get_output_data("p1", "7", Node, {}))
    assert got is result and got[0][0][0] is latent and got[0][1][0] is image  # the same objects, untouched
    record = wires.records_of("p1")["7"]
    assert record["class_type"] == "SomePackNode" and record["display_node"] == "7"
    latent_out, image_out, texts = record["outputs"]
    assert latent_out["values"][0]["tensors"] == [
        {"name": "samples", "shape": [2, 16, 8, 8], "dtype": "bfloat16", "device": "cpu"}]
    assert (image_out["type"], image_out["name"]) == ("IMAGE", "image")
    assert image_out["values"][0]["tensors"][0]["shape"] == [1, 24, 32, 3]
    assert texts["is_list"] and texts["values"][0]["facts"] == {"value": ["a", "b"]}


def test_a_record_keeps_no_tensor_alive():
    held = [torch.zeros(4, 4)]  # the node's output, dropped by the executor once its consumers ran
    ref = weakref.ref(held[0])
    module = executor_module(lambda obj: ([[held[0]]], {}, False, False))
    wires.install(module)
    asyncio.run(module.get_output_data("p", "1", Node, {}))
    held.clear()
    gc.collect()
    assert ref() is None and wires.records_of("p")["1"]["outputs"][0]["values"][0]["tensors"][0]["shape"] == [4, 4]


def test_odd_values_are_summarised_without_failing():
    nan = wire_values.summarize(float("nan"), "FLOAT")
    assert nan["facts"] == {"value": "nan"}  # JSON has no NaN: a browser's JSON.parse must read the route
    assert wire_values.summarize(None, "IMAGE")["facts"] == {"value": None}
    empty = wire_values.summarize(torch.zeros(0, 64, 64, 3), "IMAGE")
    assert empty["tensors"][0]["shape"] == [0, 64, 64, 3]
    huge = [[torch.zeros(1, 77, 768), {"pooled_output": torch.zeros(1, 768), "area": (64, 64, 0, 0)}]
            for _ in range(100)]
    cond = wire_values.summarize(huge, "CONDITIONING")
    assert len(cond["tensors"]) == wire_values.MAX_TENSORS and cond["facts"]["tensors not listed"] == 200 - wire_values.MAX_TENSORS
    assert cond["tensors"][1] == {"name": "[0][1].pooled_output", "shape": [1, 768], "dtype": "float32",
                                  "device": "cpu"}
    other = wire_values.summarize(object(), "CUSTOM")
    assert other["facts"] == {"value": "object"}


def test_outside_a_running_comfyui_it_imports_nothing_and_stays_off(monkeypatch):
    monkeypatch.delitem(sys.modules, "execution", raising=False)
    assert wires.install() == "off (ComfyUI's execution module is not loaded)" and "execution" not in sys.modules


def test_off_by_the_environment_nothing_is_patched(monkeypatch, caplog):
    monkeypatch.setenv(wires.ENV, "off")
    module = executor_module(lambda obj: ([], {}, False, False))
    before = module.get_output_data
    with caplog.at_level(logging.WARNING, logger="fillscope.wires"):
        assert wires.install(module).startswith("off (FILLSCOPE_WIRES=off)")
    assert module.get_output_data is before
    assert len(caplog.records) == 1


@pytest.mark.parametrize("signature", ["renamed", "sync"])
def test_a_changed_executor_switches_the_recorder_off_with_one_line(signature, caplog):
    module = executor_module(lambda obj: ([], {}, False, False), signature)
    before = module.get_output_data
    with caplog.at_level(logging.WARNING, logger="fillscope.wires"):
        status = wires.install(module)
    assert status.startswith("off (execution.get_output_data") and module.get_output_data is before
    assert [r.getMessage() for r in caplog.records] == [f"[FillScope] wire recorder {status}: prompts run without it"]


def test_a_result_of_another_shape_switches_recording_off_and_is_handed_back(caplog):
    odd = {"outputs": []}  # a future executor's result: not the 4-tuple
    module = executor_module(lambda obj: odd)
    wires.install(module)
    with caplog.at_level(logging.WARNING, logger="fillscope.wires"):
        assert asyncio.run(module.get_output_data("p", "1", Node, {})) is odd
        assert asyncio.run(module.get_output_data("p", "2", Node, {})) is odd
    assert wires.status().startswith("off (") and wires.records_of("p") == {}
    assert len(caplog.records) == 1
    assert wires.install(module) == wires.status() != "on"  # installing again does not switch it back on


def test_a_failure_inside_the_recorder_is_logged_once_and_the_prompt_goes_on(monkeypatch, caplog):
    result = ([[torch.zeros(1)]], {}, False, False)
    module = executor_module(lambda obj: result)
    wires.install(module)
    monkeypatch.setattr(wires, "record_outputs", lambda *a: 1 / 0)
    with caplog.at_level(logging.WARNING, logger="fillscope.wires"):
        for node in ("1", "2"):
            assert asyncio.run(module.get_output_data("p", node, Node, {})) is result
    assert len(caplog.records) == 1 and "ZeroDivisionError" in caplog.records[0].getMessage()
    assert wires.status() == "on"


def test_the_route_keeps_the_newest_prompts_only():
    for i in range(wires.MAX_PROMPTS + 3):
        wires.store(f"p{i}", "1", {"node": "1"})
    kept = list(wires._records)
    assert len(kept) == wires.MAX_PROMPTS and kept[0] == "p3" and wires.records_of("p0") == {}
    for i in range(wires.MAX_NODES + 5):  # and, within a prompt, the first MAX_NODES nodes
        wires.store("big", str(i), {"node": str(i)})
    assert len(wires.records_of("big")) == wires.MAX_NODES


class Diffusion(torch.nn.Conv2d):
    def forward(self, x, transformer_options=None):
        return super().forward(x)


class Patcher:
    """What the recorder reads of ComfyUI's ModelPatcher: `model.diffusion_model` (an nn.Module) and model_options."""

    def __init__(self, options=None):
        self.model = types.SimpleNamespace(diffusion_model=Diffusion(4, 4, 1))
        self.model_options = options or {"transformer_options": {}}


class Loader:
    RETURN_TYPES = ("MODEL",)


class Sampler:
    RETURN_TYPES = ("LATENT",)


class ImageLoader:
    RETURN_TYPES = ("IMAGE",)


def sampling_executor(calls: int, fail: bool = False):
    """An executor whose "sampler" node calls its MODEL input's diffusion model `calls` times (as KSampler does)."""
    def returns(obj, inputs):
        if obj is Loader:
            return ([[inputs["made"][0]]], {}, False, False)
        dm = inputs["model"][0].model.diffusion_model
        sigmas = torch.linspace(1, 0, 5)
        for i in range(calls):
            x = torch.zeros(1, 4, 8, 8) if i < 2 else torch.zeros(2, 4, 8, 8)
            dm(x, transformer_options={"sample_sigmas": sigmas})
        if fail:
            raise RuntimeError("interrupted")
        return ([[{"samples": x}]], {}, False, False)

    module = types.ModuleType("execution_sampling")

    async def get_output_data(prompt_id, unique_id, obj, input_data_all, execution_block_cb=None,
                              pre_execute_cb=None, hidden_inputs=None):
        return returns(obj, input_data_all)

    module.get_output_data = get_output_data
    return module


def test_a_models_calls_are_written_on_the_wire_that_brought_it_and_its_hooks_go():
    model = Patcher()
    module = sampling_executor(calls=3)
    wires.install(module)
    asyncio.run(module.get_output_data("p", "4", Loader, {"made": [model]}))
    asyncio.run(module.get_output_data("p", "3", Sampler, {"model": [model]}))
    dm = model.model.diffusion_model
    assert not dm._forward_pre_hooks and not dm._forward_hooks  # every hook removed when the node returned
    (call,) = wires.records_of("p")["4"]["outputs"][0]["calls"]
    assert (call["consumer"], call["input"], call["kind"], call["calls"]) == ("3", "model", "diffusion model", 3)
    assert call["class"] == "Diffusion" and call["steps scheduled"] == 4
    rows = {r["name"]: r["shape"] for r in call["rows"]}
    assert rows == {"x (diffusion model in)": [1, 4, 8, 8], "diffusion model out": [1, 4, 8, 8],
                    "x (diffusion model in) (call 3)": [2, 4, 8, 8], "diffusion model out (call 3)": [2, 4, 8, 8]}
    ref = weakref.ref(model)
    del model, dm
    gc.collect()
    assert ref() is None  # neither the record nor the recorder keeps the MODEL


def test_hooks_go_when_the_node_fails_and_the_error_is_the_nodes():
    model = Patcher()
    module = sampling_executor(calls=1, fail=True)
    wires.install(module)
    with pytest.raises(RuntimeError, match="interrupted"):
        asyncio.run(module.get_output_data("p", "3", Sampler, {"model": [model]}))
    assert not model.model.diffusion_model._forward_pre_hooks and not model.model.diffusion_model._forward_hooks


def test_a_compiled_model_is_not_hooked():
    compiled = {"transformer_options": {"wrappers": {"apply_model": {"torch.compile": [print]}}}}
    model = Patcher(compiled)
    module = sampling_executor(calls=1)
    wires.install(module)
    asyncio.run(module.get_output_data("p", "4", Loader, {"made": [model]}))
    hooks = []
    original = model.model.diffusion_model.register_forward_pre_hook
    model.model.diffusion_model.register_forward_pre_hook = lambda *a, **k: hooks.append(a) or original(*a, **k)
    asyncio.run(module.get_output_data("p", "3", Sampler, {"model": [model]}))
    assert hooks == [] and "calls" not in wires.records_of("p")["4"]["outputs"][0]


class Prompt:
    def __init__(self, nodes):
        self.nodes = nodes

    def get_node(self, node_id):
        return self.nodes[node_id]


def executor_with_cache(entries: dict, prompt: Prompt, message_signature="new"):
    module = executor_module(lambda obj: ([], {}, False, False))

    class PromptExecutor:
        def __init__(self):
            self.caches = types.SimpleNamespace(outputs=types.SimpleNamespace(get=entries.get, dynprompt=prompt))
            self.sent = []

        if message_signature == "new":
            def add_message(self, event, data, broadcast):
                self.sent.append((event, data))
        else:
            def add_message(self, message):
                self.sent.append(message)

    module.PromptExecutor = PromptExecutor
    return module


def test_nodes_served_from_the_cache_are_recorded_with_the_outputs_the_cache_holds(monkeypatch):
    cached = types.SimpleNamespace(ui=None, outputs=[[torch.zeros(1, 32, 32, 3)]])
    prompt = Prompt({"5": {"class_type": "LoadImage", "inputs": {}}})
    monkeypatch.setitem(sys.modules, "nodes", types.SimpleNamespace(NODE_CLASS_MAPPINGS={"LoadImage": ImageLoader}))
    module = executor_with_cache({"5": cached}, prompt)
    wires.install(module)
    executor = module.PromptExecutor()
    executor.add_message("execution_cached", {"nodes": ["5"], "prompt_id": "p2"}, False)
    assert executor.sent == [("execution_cached", {"nodes": ["5"], "prompt_id": "p2"})]  # ComfyUI's message, as sent
    record = wires.records_of("p2")["5"]
    assert record["cached"] and record["class_type"] == "LoadImage"
    assert record["outputs"][0]["values"][0]["tensors"][0]["shape"] == [1, 32, 32, 3]


def test_an_add_message_of_another_shape_leaves_cached_nodes_unrecorded_with_one_line(caplog):
    module = executor_with_cache({}, Prompt({}), message_signature="old")
    before = module.PromptExecutor.add_message
    with caplog.at_level(logging.WARNING, logger="fillscope.wires"):
        assert wires.install(module) == "on"
    assert module.PromptExecutor.add_message is before and len(caplog.records) == 1
    assert "add_message" in caplog.records[0].getMessage()


def test_a_node_returning_nothing_and_subgraph_ids_are_recorded_as_they_are():
    record = wire_values.record_outputs("12:3", Node, [[None], [], [None]])  # a subgraph's inner node (frontend ids)
    assert (record["node"], record["display_node"]) == ("12:3", "12:3")
    latent, image, texts = record["outputs"]
    assert latent["values"] == [{"kind": "LATENT", "tensors": [], "facts": {"value": None}}]
    assert (image["items"], image["values"]) == (0, [])
    expanded = wire_values.record_outputs("7.0.1", Node, [])  # a node expansion's ephemeral node: shown on node 7
    assert (expanded["display_node"], expanded["outputs"]) == ("7", [])


def test_the_calls_of_a_node_that_failed_stay_on_the_wire_with_the_unfinished_one_counted():
    model = Patcher()

    class Broken(Diffusion):
        def forward(self, x, transformer_options=None):
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x336 and 384x64)")

    model.model.diffusion_model = Broken(4, 4, 1)
    module = sampling_executor(calls=1)
    wires.install(module)
    asyncio.run(module.get_output_data("p", "4", Loader, {"made": [model]}))
    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        asyncio.run(module.get_output_data("p", "3", Sampler, {"model": [model]}))
    (call,) = wires.records_of("p")["4"]["outputs"][0]["calls"]
    assert (call["consumer"], call["calls"], call["unfinished"]) == ("3", 0, 1)
    assert {r["name"]: r["shape"] for r in call["rows"]} == {"x (diffusion model in)": [1, 4, 8, 8]}
    assert not model.model.diffusion_model._forward_pre_hooks and not model.model.diffusion_model._forward_hooks
