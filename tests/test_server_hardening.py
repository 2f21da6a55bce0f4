"""Issue 20 (hardening) through a real ComfyUI 0.3.75 server: inputs that used to end in a raw exception or a
misleading error are refused with an error naming the input, the problem and the fix, before any sampling step;
after each, the server answers and the next prompt succeeds.

- a LoRA file holding NaN/inf: refused when the LoRA loads, naming the file and the tensor, blaming the LoRA (it used
  to load, and the sampler then called the transformer's weights corrupt);
- a Shapes Report fed JSON nested 10,000 deep: refused with the depth found and the limit (it raised RecursionError);
- Klein Inpaint Condition with a reference batch that fits neither 1 nor the image batch: refused in the node's
  model-free prepare step, saying which batch sizes fit (it raised torch's "Sizes of tensors must match")."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from server_checks import assert_still_serving, klein_prompt, small_image
from server_checks import flux_prompt as _flux_prompt
from server_checks import refused_when_run as refused
from workflow_helpers import load_api, node_id

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def flux_prompt(steps=1):
    return _flux_prompt(steps)  # one step, a fresh seed (klein_prompt: the same)


# refused (server_checks.refused_when_run): the prompt fails at the node with an error naming the input and its fix,
# and no image or report is saved


def succeeds(server, prompt):
    assert server.run(prompt, timeout=300)["status"]["status_str"] == "success"


# ---- a LoRA file holding NaN ------------------------------------------------------------------------------------


def write_lora(path, shape, nan: bool):
    """A diffusers/PEFT LoRA of rank 2 on the tiny FLUX Fill transformer's proj_out (`shape` = its weight's)."""
    out, inn = shape
    g = torch.Generator().manual_seed(0)
    down, up = torch.randn(2, inn, generator=g) * 0.1, torch.randn(out, 2, generator=g) * 0.1
    if nan:
        down[1, 5] = float("nan")
    save_file({"transformer.proj_out.lora_A.weight": down, "transformer.proj_out.lora_B.weight": up}, str(path))


def with_lora(prompt, lora_name):
    """The FLUX Fill graph with FillScope LoRA (FLUX.1 Fill) between the transformer loader and the sampler."""
    sampler = prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"]
    prompt["30"] = {"class_type": "FillScopeFluxFillLoRA",
                    "inputs": {"transformer": sampler["transformer"], "lora_name": lora_name, "strength": 1.0}}
    sampler["transformer"] = ["30", 0]
    return prompt


def test_a_lora_holding_nan_is_refused_when_it_loads_naming_the_file_and_tensor(server, comfy_models_dir):
    from fillscope.checkpoints import read_header

    header, _ = read_header(comfy_models_dir / "diffusion_models/flux1-fill-dev.safetensors")
    shape = tuple(header["final_layer.linear.weight"].shape)  # = the diffusers proj_out's
    lora = comfy_models_dir / "loras" / "hardening_nan_style.safetensors"
    lora.parent.mkdir(parents=True, exist_ok=True)
    write_lora(lora, shape, nan=True)
    msg = refused(server, with_lora(flux_prompt(), lora.name), "FillScopeFluxFillLoRA", "lora_name")
    assert ("tensor 'transformer.proj_out.lora_A.weight' in the LoRA file 'hardening_nan_style.safetensors' holds 1 "
            "NaN/inf values (of") in msg
    assert "the LoRA file is broken" in msg and "the model's own weights are not at fault" in msg
    assert "Fix: download or export the LoRA again, or choose another LoRA." in msg
    assert_still_serving(server)
    write_lora(lora, shape, nan=False)  # the same name repaired: the node reads it again (size/date fingerprint)
    succeeds(server, with_lora(small_image(flux_prompt()), lora.name))  # a 32x32 image: the LoRA is the point


# ---- a Shapes Report fed deeply nested JSON ------------------------------------------------------------------------


@pytest.mark.parametrize("shapes", ["[" * 10000 + "]" * 10000, '{"a": [' * 5000 + "]}" * 5000],
                         ids=["lists", "objects"])
def test_shapes_report_refuses_json_nested_10000_deep_with_the_depth_and_the_limit(server, shapes):
    prompt = {"1": {"class_type": "FillScopeShapesReport",
                    "inputs": {"shapes": shapes, "filename_prefix": "fillscope/deep"}}}
    msg = refused(server, prompt, "FillScopeShapesReport", "shapes")
    assert msg == ("[FillScope] input 'shapes': is JSON nested 10,000 arrays/objects deep; a FillScope shape record "
                   "nests at most 32 deep (the limit), so it is not one. Fix: wire a FillScope node's shapes output "
                   "(the last node of the graph: its trail holds every node upstream).")
    assert_still_serving(server)


def test_shapes_report_refuses_deep_nesting_inside_a_valid_record_and_reads_its_own(server):
    """Nesting a JSON reader takes (40 levels) inside a record's facts is refused too: the report code after the
    reader (json.dump, the table) walks it as well."""
    import json

    from fillscope.trace.records import json_depth

    fact = "[" * 40 + "]" * 40
    doc = ('{"schema": "fillscope.shapes/1", "trail": [], "node": {"id": "1", "title": "t", "tensors": [], '
           f'"facts": {{"deep": {fact}}}}}}}')
    assert json.loads(doc) and json_depth(doc) == 43
    prompt = {"1": {"class_type": "FillScopeShapesReport",
                    "inputs": {"shapes": doc, "filename_prefix": "fillscope/deep"}}}
    assert "is JSON nested 43 arrays/objects deep" in refused(server, prompt, "FillScopeShapesReport", "shapes")
    entry = server.run(flux_prompt(), timeout=300)  # the shipped graph's own report: its records pass the limit
    report = entry["outputs"][node_id(load_api("flux_fill_inpaint"), "FillScopeShapesReport")]
    assert report["fillscope_report"][0]["filename"].endswith(".json")


# ---- Klein Inpaint Condition: reference batch against the image batch -------------------------------------------


def with_batches(prompt, images: int, references: int):
    """The klein inpaint graph with its image repeated `images` times (RepeatImageBatch; the one mask fits every
    image) and the same image, repeated `references` times, as the reference."""
    load = node_id(prompt, "LoadImage")
    cond = prompt[node_id(prompt, "FillScopeKleinInpaintCondition")]["inputs"]
    prompt["40"] = {"class_type": "RepeatImageBatch", "inputs": {"image": [load, 0], "amount": images}}
    prompt["41"] = {"class_type": "RepeatImageBatch", "inputs": {"image": [load, 0], "amount": references}}
    cond.update(image=["40", 0], reference=["41", 0])
    return prompt


@pytest.mark.parametrize("images, references", [(3, 2), (1, 2)])
def test_klein_reference_batch_that_fits_neither_1_nor_the_image_batch_is_refused(server, images, references):
    prompt = with_batches(klein_prompt(), images, references)
    msg = refused(server, prompt, "FillScopeKleinInpaintCondition", "reference")
    assert msg == (f"[FillScope] input 'reference': holds a batch of {references} images for a batch of {images} (the "
                   f"image's batch): a reference batch holds 1 image (used for every image) or {images} (one per "
                   f"image, in order). Fix: give 1 reference image or {images}: ComfyUI's ImageFromBatch takes one "
                   "image out of a batch, RepeatImageBatch repeats one.")
    assert_still_serving(server)


@pytest.mark.parametrize("references", [1, 3])
def test_klein_reference_batch_of_1_or_the_image_batch_runs(server, references):
    succeeds(server, with_batches(klein_prompt(), 3, references))
