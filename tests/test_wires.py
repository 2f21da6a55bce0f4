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

# nodes/wires.py on its own: it imports nothing of ComfyUI's until it describes a MODEL, CLIP or VAE
_spec = importlib.util.spec_from_file_location("fillscope_wires", Path(__file__).resolve().parent.parent / "nodes"
                                               / "wires.py")
wires = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wires)


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
    nan = wires.summarize(float("nan"), "FLOAT")
    assert nan["facts"] == {"value": "nan"}  # JSON has no NaN: a browser's JSON.parse must read the route
    assert wires.summarize(None, "IMAGE")["facts"] == {"value": None}
    empty = wires.summarize(torch.zeros(0, 64, 64, 3), "IMAGE")
    assert empty["tensors"][0]["shape"] == [0, 64, 64, 3]
    huge = [[torch.zeros(1, 77, 768), {"pooled_output": torch.zeros(1, 768), "area": (64, 64, 0, 0)}]
            for _ in range(100)]
    cond = wires.summarize(huge, "CONDITIONING")
    assert len(cond["tensors"]) == wires.MAX_TENSORS and cond["facts"]["tensors not listed"] == 200 - wires.MAX_TENSORS
    assert cond["tensors"][1] == {"name": "[0][1].pooled_output", "shape": [1, 768], "dtype": "float32",
                                  "device": "cpu"}
    other = wires.summarize(object(), "CUSTOM")
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
