"""What Inspect CLIP and Inspect Model say of what ComfyUI's CLIP and MODEL hold (issue 35, item 5), in a real
ComfyUI 0.3.75 server (the session's shared one with tests/comfy_nodes: conftest.py templates_server, whose
comfy_templates.prepare writes the tiny FLUX Fill and SD3 folders and the tiny FLUX Fill's kohya LoRA).

- Inspect CLIP (nodes/inspect_clip.py) on NativeTemplateTestTinySD3CLIP (ComfyUI's SD3ClipModel built with clip_l and
  clip_g and t5=False, under ComfyUI's SD3Tokenizer, which makes T5 tokens all the same): its record names the text
  encoders the CLIP holds and the one it lacks, and each encode says which tokenizer outputs reached an encoder and
  that tokens.t5xxl was made and dropped; the FLUX CLIP (NativeTestTinyCLIP) beside it drops nothing.
- Inspect Model (nodes/inspect_model.py) before and after ComfyUI's LoraLoaderModelOnly on the tiny FLUX Fill model
  (NativeFillTestTinyFluxFill): after the LoRA its record counts the ModelPatcher's weight patches, names a few and
  gives their kind and strengths; before it (the LoRA downstream) it records 0 patches.
"""

from __future__ import annotations

import urllib.parse

import comfy_templates as ct
import native_templates as nt
import pytest

pytestmark = pytest.mark.server

PROMPT = "a red brick fireplace"


def n(class_type, **inputs) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def own_record(entry, key) -> dict:
    return entry["outputs"][key]["fillscope_shapes"][0]["node"]


def live_record(server, prompt_id, key) -> dict:
    outputs = server.get_json("/fillscope/live?prompt_id=" + urllib.parse.quote(prompt_id))
    assert key in outputs, sorted(outputs)
    return outputs[key]["fillscope_shapes"][0]["node"]


def test_inspect_clip_names_the_encoders_and_the_sd3_t5_tokens_it_drops(templates_server):
    server = templates_server
    prompt = {"sd3": n("NativeTemplateTestTinySD3CLIP", folder=ct.SD3),
              "ic": n("FillScopeInspectCLIP", clip=["sd3", 0]),
              "enc": n("CLIPTextEncode", clip=["ic", 0], text=PROMPT),
              "flux": n("NativeTestTinyCLIP", folder=ct.FLUX, kind="flux"),
              "icf": n("FillScopeInspectCLIP", clip=["flux", 0]),
              "encf": n("CLIPTextEncode", clip=["icf", 0], text=PROMPT)}
    for key in ("enc", "encf"):
        prompt[f"{key}_save"] = n("InspectTestSave", name=f"encoders_{key}", conditioning=[key, 0])
    pid = server.queue(prompt)
    entry = server.wait(pid, timeout=600)

    # the node's own run: the encoders ComfyUI's SD3ClipModel holds, the T5 it was built without
    own = own_record(entry, "ic")["facts"]
    assert own["class"] == "SD3ClipModel_" and own["tokenizer"] == "SD3Tokenizer"
    assert own["encoders"] == "clip_l, clip_g"
    assert own["encoders absent"].startswith("t5xxl: the tokenizer makes its tokens")
    assert own["tokenizer t5xxl"].startswith("T5XXLTokenizer")  # the tokenizer is there: only its encoder is not
    flux_own = own_record(entry, "icf")["facts"]
    assert flux_own["encoders"] == "clip_l, t5xxl" and "encoders absent" not in flux_own

    # the encode: l and g reached their encoders, t5xxl was made by the tokenizer and dropped
    rec = live_record(server, pid, "ic")
    facts, rows = rec["facts"], {t["name"]: t["shape"] for t in rec["tensors"]}
    assert facts["calls"] == 1 and facts["encode 1: called by node"] == "enc"
    assert facts["encode 1: tokens encoded"] == "g -> clip_g, l -> clip_l"
    assert facts["encode 1: tokens dropped"] == "t5xxl"
    assert "encode 1: tokens.t5xxl: made by the tokenizer, dropped: this CLIP has no t5xxl encoder" in rec["notes"]
    assert rows["encode 1: tokens.l"] == [1, 77] and rows["encode 1: tokens.g"] == [1, 77]
    assert "encode 1: tokens.t5xxl" not in rows and rows["encode 1: tokens.t5xxl (dropped: no encoder)"][1] >= 1
    assert rows["encode 1: cond"] == [1, 77, 4096]  # CLIP's 77 tokens only, padded to 4096: no T5 part joined

    flux = live_record(server, pid, "icf")
    assert flux["facts"]["encode 1: tokens encoded"] == "l -> clip_l, t5xxl -> t5xxl"
    assert "encode 1: tokens dropped" not in flux["facts"] and not any("dropped" in x for x in flux["notes"])
    assert {"encode 1: tokens.l", "encode 1: tokens.t5xxl"} <= {t["name"] for t in flux["tensors"]}


def test_inspect_model_records_the_lora_patches_before_it_and_none_of_a_lora_after_it(templates_server):
    server = templates_server
    strength = 0.75
    prompt = {"m": n("NativeFillTestTinyFluxFill", folder=ct.FLUX, context_in_dim=0),
              "before": n("FillScopeInspectModel", model=["m", 0], modules=False),  # the LoRA is downstream
              "lora": n("LoraLoaderModelOnly", model=["before", 0], lora_name=nt.LORA[1], strength_model=strength),
              "after": n("FillScopeInspectModel", model=["lora", 0], modules=False),
              "show": n("PreviewAny", source=["after", 1]),
              # one KSampler step on the patched MODEL (the tiny FLUX Fill's text 32 wide, pooled 32): the run's record
              "cond": n("NativeTestConditioningOfShape", tokens=8, width=32, pooled_width=32, entries=1, fill="zeros",
                        extra_keys="{}"),
              "lat": n("EmptySD3LatentImage", width=64, height=64, batch_size=1),
              "ks": n("KSampler", model=["after", 0], seed=1, steps=1, cfg=1.0, sampler_name="euler",
                      scheduler="simple", positive=["cond", 0], negative=["cond", 0], latent_image=["lat", 0],
                      denoise=1.0),
              "save": n("NativeTestSaveNativeLatent", samples=["ks", 0], name="inspect_patches")}
    pid = server.queue(prompt)
    entry = server.wait(pid, timeout=600)

    before = own_record(entry, "before")["facts"]
    assert before["class"] == "Flux" and before["weight patches"] == 0
    assert not {"patch entries", "patched weights", "patch kinds", "patch strengths"} & set(before)

    after = own_record(entry, "after")
    facts = after["facts"]
    assert facts["class"] == "Flux" and facts["weight patches"] > 0
    assert facts["patch entries"] == facts["weight patches"]  # one LoRA: one patch per weight
    names = facts["patched weights"].split(" ... ")[0].split(", ")
    assert 1 <= len(names) <= 4 and all(x.startswith("diffusion_model.") and x.endswith(".weight") for x in names)
    if facts["weight patches"] > 4:
        assert facts["patched weights"].endswith(f" ... (+{facts['weight patches'] - 4})")
    assert facts["patch kinds"] == "lora"
    assert facts["patch strengths"] == f"{strength:g} (model 1)"
    assert any(x.startswith("weight patches: those on the MODEL as it reaches this node") for x in after["notes"])
    assert after["tensors"] == []  # nothing measured, no tensor read

    # the sampling run's record (which replaces the node's own on the node) repeats the patches of the node's MODEL
    run = live_record(server, pid, "after")["facts"]
    assert run["total calls"] == 1 and run["provenance"] == "measured on cpu, native ComfyUI Flux"
    assert {k: run[k] for k in ("weight patches", "patched weights", "patch kinds", "patch strengths")} == {
        k: facts[k] for k in ("weight patches", "patched weights", "patch kinds", "patch strengths")}
    # the Inspect before the LoRA sees the same run (its wrappers ride on the LoRA's clone) and still says 0 patches:
    # what it records is the MODEL as it reached it
    early = live_record(server, pid, "before")["facts"]
    assert early["total calls"] == 1 and early["weight patches"] == 0 and "patched weights" not in early
