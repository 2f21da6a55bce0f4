"""The explanation of a failed node (nodes/wire_explain.py) off a server: the torch messages it reads, the inputs it
blames only where a known mismatch holds, and nothing guessed where the numbers agree or the message is unknown. The
real failures of ComfyUI's own nodes: tests/test_server_explain.py."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

_pack = types.ModuleType("fillscope_wires_pack")
_pack.__path__ = [str(Path(__file__).resolve().parent.parent)]
sys.modules.setdefault("fillscope_wires_pack", _pack)
wire_explain = importlib.import_module("fillscope_wires_pack.nodes.wire_explain")


def output(kind: str, tensors=(), facts=None) -> dict:
    return {"slot": 0, "type": kind, "name": kind, "is_list": False, "items": 1,
            "values": [{"kind": kind, "tensors": [{"name": n, "shape": s, "dtype": "float32", "device": "cpu"}
                                                  for n, s in tensors], "facts": facts or {}}]}


PROMPT = {
    "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5-pruned.safetensors"}},
    "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "clip_g.safetensors", "type": "sdxl"}},
    "3": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": "a cat"}},
    "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
    "5": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "positive": ["3", 0], "negative": ["3", 0],
                                               "latent_image": ["4", 0], "seed": 0}},
}
RECORDS = {
    "1": {"node": "1", "class_type": "CheckpointLoaderSimple", "outputs": [
        output("MODEL", facts={"detected": "SD15", "context width": 768, "latent channels": 4,
                               "model in channels": 4})]},
    "2": {"node": "2", "class_type": "CLIPLoader", "outputs": [output("CLIP", facts={"class": "SDXLClipModel_"})]},
    "3": {"node": "3", "class_type": "CLIPTextEncode", "outputs": [
        output("CONDITIONING", [("[0][0]", [1, 77, 2048]), ("[0][1].pooled_output", [1, 1280])])]},
    "4": {"node": "4", "class_type": "EmptyLatentImage", "outputs": [output("LATENT", [("samples", [1, 4, 64, 64])])]},
}


def error(message: str) -> dict:
    return {"prompt_id": "p", "node_id": "5", "node_type": "KSampler", "exception_message": message}


def test_an_sdxl_clip_into_an_sd15_unet_names_the_clip_file_and_the_fix():
    got = wire_explain.explain(error("mat1 and mat2 shapes cannot be multiplied (154x2048 and 768x320)"), PROMPT,
                               RECORDS)
    assert got["kind"] == "matmul" and {c["input"] for c in got["culprits"]} == {"positive", "negative", "model"}
    positive = next(c for c in got["culprits"] if c["input"] == "positive")
    assert positive["source"] == [{"node": "2", "class_type": "CLIPLoader", "inputs": {"clip_name": "clip_g.safetensors"}}]
    assert got["fix"] == ("the CONDITIONING on 'positive' is 2048 wide (from CLIPLoader node 2); the MODEL from node 1 "
                          "(SD1.5) takes 768-wide text: encode the prompt with the CLIP that belongs to this model (a "
                          "checkpoint's own CLIP, or the text encoders its family needs)")
    lines = wire_explain.log_lines(got)
    assert lines[0] == "[FillScope] explain: node 5 (KSampler) failed on shapes: " + got["fix"]


def test_numbers_the_inputs_agree_on_blame_nobody():
    records = dict(RECORDS, **{"3": {"node": "3", "class_type": "CLIPTextEncode", "outputs": [
        output("CONDITIONING", [("[0][0]", [1, 77, 768])])]}})
    got = wire_explain.explain(error("mat1 and mat2 shapes cannot be multiplied (154x768 and 768x320)"), PROMPT, records)
    assert (got["culprits"], got["fix"]) == ([], None)  # 768 is everyone's width: no known mismatch, no guess


def test_an_unknown_message_lists_the_inputs_and_guesses_nothing():
    got = wire_explain.explain(error("CUDA error: an illegal memory access was encountered"), PROMPT, RECORDS)
    assert (got["kind"], got["culprits"], got["fix"]) == ("unrecognised", [], None)
    assert [i["input"] for i in got["inputs"]] == ["model", "positive", "negative", "latent_image"]
    assert "no known shape mismatch" in wire_explain.log_lines(got)[0]


def test_the_torch_messages_it_reads():
    cases = {
        "Given groups=1, weight of size [16, 16, 1, 1], expected input[1, 4, 8, 8] to have 16 channels, but got 4 "
        "channels instead": ("conv channels", {"input shape": [1, 4, 8, 8], "layer channels": 16, "input channels": 4}),
        "The size of tensor a (64) must match the size of tensor b (32) at non-singleton dimension 3":
            ("size match", {"a": 64, "b": 32, "dimension": 3}),
        "Sizes of tensors must match except in dimension 1. Expected size 64 but got size 32 for tensor number 1 in "
        "the list.": ("cat", {"expected": 64, "got": 32, "except dimension": 1}),
        "stack expects each tensor to be equal size, but got [1, 64, 64, 3] at entry 0 and [1, 32, 32, 3] at entry 1":
            ("stack", {"first": [1, 64, 64, 3], "other": [1, 32, 32, 3]}),
        "shape '[1, 4, 32, 2, 32, 2]' is invalid for input of size 12288": ("view", {"shape": [1, 4, 32, 2, 32, 2],
                                                                                     "size": 12288}),
        "Error(s) in loading state_dict for Flux:\n\tsize mismatch for img_in.weight: copying a param with shape "
        "torch.Size([3072, 384]) from checkpoint, the shape in current model is torch.Size([3072, 64]).":
            ("state dict", {"key": "img_in.weight", "checkpoint": [3072, 384], "model": [3072, 64]}),
    }
    for message, expected in cases.items():
        assert wire_explain.parse(message) == expected, message


def test_two_images_a_stack_fails_on_are_named_with_the_dimension_they_differ_in():
    prompt = {"1": {"class_type": "LoadImage", "inputs": {"image": "fox.png"}},
              "2": {"class_type": "LoadImage", "inputs": {"image": "snow.png"}},
              "3": {"class_type": "SomeBatchNode", "inputs": {"image1": ["1", 0], "image2": ["2", 0]}}}
    records = {"1": {"node": "1", "class_type": "LoadImage", "outputs": [output("IMAGE", [("image", [1, 64, 64, 3])])]},
               "2": {"node": "2", "class_type": "LoadImage", "outputs": [output("IMAGE", [("image", [1, 32, 64, 3])])]}}
    message = "stack expects each tensor to be equal size, but got [1, 64, 64, 3] at entry 0 and [1, 32, 64, 3] at entry 1"
    got = wire_explain.explain({"node_id": "3", "node_type": "SomeBatchNode", "exception_message": message}, prompt,
                               records)
    assert [(c["input"], c["carries"]) for c in got["culprits"]] == [("image1", ["height 64"]), ("image2", ["height 32"])]
    assert got["culprits"][1]["source"] == [{"node": "2", "class_type": "LoadImage", "inputs": {"image": "snow.png"}}]
    assert got["fix"].startswith("the IMAGEs on 'image1' (node 1) and 'image2' (node 2) differ in height (64 and 32)")


wire_warnings = importlib.import_module("fillscope_wires_pack.nodes.wire_warnings")

SD3_GRAPH = {"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd3.5_medium.safetensors"}},
             "2": {"class_type": "VAELoader", "inputs": {"vae_name": "ae.safetensors"}},
             "3": {"class_type": "VAEDecode", "inputs": {"samples": ["9", 0], "vae": ["2", 0]}}}
SD3_MODEL = output("MODEL", facts={"detected": "SD3", "latent channels": 16, "model in channels": 16,
                                   "latent scale": 1.5305, "latent shift": 0.0609})


def sd3_records(vae_name: str = "ae.safetensors", model=SD3_MODEL) -> dict:
    return {"1": {"node": "1", "class_type": "CheckpointLoaderSimple", "outputs": [model]},
            "2": {"node": "2", "class_type": "VAELoader", "outputs": [output("VAE", facts={"latent_channels": 16})]},
            "3": {"node": "3", "class_type": "VAEDecode", "outputs": [output("IMAGE", [("image", [1, 64, 64, 3])])]}}


def test_a_flux_vae_file_in_an_sd3_graph_is_a_warning_on_the_vae_naming_how_it_was_told():
    got = wire_warnings.silent_mismatches(SD3_GRAPH, sd3_records())
    (warning,) = got["2"]
    assert warning.startswith("VAE of another family: this VAE is FLUX.1's (its file name 'ae.safetensors' says so); "
                              "the graph's MODEL (node 1) is SD3")
    assert list(got) == ["2"]


def test_a_vae_whose_family_cannot_be_told_or_matches_gets_no_warning():
    graph = {**SD3_GRAPH, "2": {"class_type": "VAELoader", "inputs": {"vae_name": "my_vae.safetensors"}}}
    assert wire_warnings.silent_mismatches(graph, sd3_records()) == {}
    graph = {**SD3_GRAPH, "2": {"class_type": "VAELoader", "inputs": {"vae_name": "sd3_vae.safetensors"}}}
    assert wire_warnings.silent_mismatches(graph, sd3_records()) == {}
    flux = output("MODEL", facts={"detected": "Flux", "latent channels": 16, "model in channels": 16})
    assert wire_warnings.silent_mismatches(SD3_GRAPH, sd3_records(model=flux)) == {}


def test_an_inpaint_condition_into_a_model_without_inpaint_channels_is_a_warning_on_its_maker():
    prompt = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "flux1-dev.safetensors"}},
              "2": {"class_type": "InpaintModelConditioning", "inputs": {}},
              "3": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "positive": ["2", 0],
                                                         "negative": ["2", 1], "latent_image": ["2", 2]}}}
    cond = output("CONDITIONING", [("[0][0]", [1, 256, 4096]), ("[0][1].concat_latent_image", [1, 16, 64, 64]),
                                   ("[0][1].concat_mask", [1, 1, 512, 512])])
    records = {"1": {"node": "1", "class_type": "UNETLoader", "outputs": [
                   output("MODEL", facts={"detected": "Flux", "latent channels": 16, "model in channels": 16})]},
               "2": {"node": "2", "class_type": "InpaintModelConditioning",
                     "outputs": [cond, dict(cond, slot=1), output("LATENT", [("samples", [1, 16, 64, 64])])]},
               "3": {"node": "3", "class_type": "KSampler", "outputs": [output("LATENT", [("samples", [1, 16, 64, 64])])]}}
    (warning,) = wire_warnings.silent_mismatches(prompt, records)["2"]
    assert "put on 'positive' and 'negative' are not used by the MODEL of node 1 (FLUX.1 dev, 16 input channels" in warning
    fill = output("MODEL", facts={"detected": "FluxInpaint", "latent channels": 16, "model in channels": 96})
    records["1"] = {"node": "1", "class_type": "UNETLoader", "outputs": [fill]}
    assert wire_warnings.silent_mismatches(prompt, records) == {}


def test_a_conditioning_no_model_of_the_graph_takes_is_a_warning_on_its_encoder():
    records = dict(RECORDS, **{"5": {"node": "5", "class_type": "SaveConditioning", "outputs": []}})
    (warning,) = wire_warnings.silent_mismatches(PROMPT, records)["3"]
    assert warning == ("CONDITIONING of no model here: it is 2048 wide; the graph's MODEL node 1 (SD1.5) takes 768: "
                       "encode with the CLIP of the model it is for")
    unknown = output("MODEL", facts={"detected": "Lumina2", "latent channels": 16})  # its text width: not known here
    records["6"] = {"node": "6", "class_type": "UNETLoader", "outputs": [unknown]}
    assert wire_warnings.silent_mismatches(PROMPT, records) == {}
