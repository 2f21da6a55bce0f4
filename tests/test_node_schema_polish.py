"""The FillScope nodes as a real ComfyUI server lists them in /object_info (what the canvas builds its nodes, tooltips,
node search and badges from): a tooltip on every input, display names without the pack's name (the frontend's
node-source badge shows "FillScope" on each node) and clear of ComfyUI's own nodes, the inpaint nodes found by the
word "inpaint", output names by one convention (docs/nodes.md "Output names"), and klein's distilled / base choice on
the sampler only. tests/test_browser_node_search.py checks the same on the canvas."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.server

# ComfyUI's own socket types: an output of one of them shows the type's name, as ComfyUI's nodes show an unnamed one
COMFY_TYPES = {"IMAGE", "MASK", "LATENT", "MODEL", "CLIP", "VAE", "CONDITIONING"}
# what the canvas' node search must list for "inpaint" (frontend 1.32.9 searches node ids and display names only)
INPAINT_NODES = {
    "FillScopeFluxFillCondition", "FillScopeFluxFillSampler",
    "FillScopeSD3InpaintCondition", "FillScopeSD3ControlNetInpaintSampler",
    "FillScopeKleinInpaintCondition", "FillScopeKleinSampler",
    "FillScopeCropForInpaint", "FillScopeStitch", "FillScopePasteBack",
    "FillScopeFluxFillTiledInpaint", "FillScopeSD3ControlNetTiledInpaint", "FillScopeKleinTiledInpaint",
}


@pytest.fixture(scope="module")
def info(comfy_server) -> dict:
    return comfy_server.object_info()


def pack_nodes(info: dict) -> dict[str, dict]:
    """The nodes of this pack: those of the custom_nodes module that holds FillScopeInspect."""
    module = info["FillScopeInspect"]["python_module"]
    return {name: node for name, node in info.items() if node.get("python_module") == module}


def test_every_input_of_every_node_has_a_tooltip(info):
    nodes = pack_nodes(info)
    inputs, missing = 0, []
    for name, node in sorted(nodes.items()):
        for section in ("required", "optional"):
            for inp, spec in node["input"].get(section, {}).items():
                inputs += 1
                tooltip = (spec[1] if len(spec) > 1 else {}).get("tooltip") or ""
                # a sentence, not the socket's type name
                if len(tooltip.strip()) < 20 or tooltip.strip() == str(spec[0]):
                    missing.append(f"{name}.{inp}: {tooltip!r}")
    print(f"\n{len(nodes)} FillScope nodes, {inputs} inputs, {len(missing)} without a tooltip")
    assert len(nodes) >= 45 and inputs >= 240
    assert missing == [], "\n".join(missing)


def test_display_names_leave_the_pack_name_to_the_badge_and_clash_with_no_core_node(info):
    nodes = pack_nodes(info)
    others = {name: node for name, node in info.items() if name not in nodes}
    core = {(node.get("display_name") or name).casefold() for name, node in others.items()} | {
        name.casefold() for name in others}
    shown = {name: node["display_name"] for name, node in nodes.items()}
    assert all(name.startswith("FillScope") for name in nodes)  # the ids saved workflows refer to: unchanged
    assert [n for n, d in shown.items() if "fillscope" in d.casefold()] == []
    assert len(set(shown.values())) == len(shown)
    assert [d for d in shown.values() if d.casefold() in core] == []
    assert all(node["category"].startswith("FillScope/") for node in nodes.values())
    print(f"\n{len(shown)} display names, none with 'FillScope', none among {len(core)} names of "
          f"{len(others)} other nodes")
    # the two that would otherwise be a core node's name say which families they serve
    assert shown["FillScopeVAEDecode"] == "VAE Decode (FLUX.1 / SD3 / FLUX.2)"
    assert shown["FillScopeLoadVAE"] == "Load VAE (FLUX.1 / SD3 / FLUX.2)"


def test_the_inpaint_nodes_carry_the_word_the_node_search_matches(info):
    nodes = pack_nodes(info)
    found = {name for name, node in nodes.items()
             if "inpaint" in name.casefold() or "inpaint" in node["display_name"].casefold()}
    assert INPAINT_NODES <= found, sorted(INPAINT_NODES - found)
    # by display name alone, as a user reads the list
    assert {name for name in INPAINT_NODES if "inpaint" not in nodes[name]["display_name"].casefold()} == set()
    print(f"\n'inpaint' in {len(found)} nodes: {sorted(nodes[n]['display_name'] for n in found)}")


def test_output_names_follow_one_convention(info):
    """ComfyUI's types by their name in capitals; FillScope's FS_* types, STRING and any-type outputs by a lowercase
    name of what they carry."""
    wrong, counted = [], 0
    for name, node in sorted(pack_nodes(info).items()):
        for kind, shown in zip(node["output"], node["output_name"]):
            counted += 1
            if kind in COMFY_TYPES:
                ok = shown == kind
            else:
                ok = re.fullmatch(r"[a-z][a-z0-9_]*", shown) is not None
            if not ok:
                wrong.append(f"{name}: {kind} shown as {shown!r}")
    print(f"\n{counted} outputs checked")
    assert wrong == [], "\n".join(wrong)
    assert pack_nodes(info)["FillScopeOutpaintPad"]["output_name"][:2] == ["IMAGE", "MASK"]
    assert pack_nodes(info)["FillScopeBatch"]["output_name"] == ["summary", "IMAGE"]
    assert pack_nodes(info)["FillScopeInspectCLIP"]["output_name"] == ["CLIP", "shapes"]
    assert pack_nodes(info)["FillScopeFluxFillSampler"]["output_name"] == ["latent", "shapes", "LATENT"]


def test_klein_distilled_or_base_is_chosen_on_the_sampler_only(info):
    loader, sampler = info["FillScopeLoadKleinTransformer"], info["FillScopeKleinSampler"]
    loader_inputs = [i for section in loader["input_order"].values() for i in section]
    assert "model_type" not in loader_inputs
    assert loader["input_order"]["required"] == ["source", "variant", "dtype"]
    spec = sampler["input"]["required"]["model_type"]
    assert spec[0] == "COMBO" and spec[1]["options"] == ["auto", "distilled", "base"] and spec[1]["default"] == "auto"
    assert "model_index.json" in spec[1]["tooltip"] and "ComfyUI's MODEL" in spec[1]["tooltip"]


# The node library's folders, by what a user looks for (docs/nodes.md "Categories"): every node of the pack in one
CATEGORIES = {
    "loaders": {"FillScopeLoadCLIPL", "FillScopeLoadCLIPG", "FillScopeLoadT5", "FillScopeLoadQwen3",
                "FillScopeLoadFluxFillTransformer", "FillScopeLoadSD3Transformer", "FillScopeLoadSD3InpaintControlNet",
                "FillScopeLoadKleinTransformer", "FillScopeLoadVAE"},
    "lora": {"FillScopeFluxFillLoRA", "FillScopeSD3LoRA", "FillScopeKleinLoRA"},
    "text": {"FillScopeFluxPrompt", "FillScopeSD3Prompt", "FillScopeCLIPLEncode", "FillScopeCLIPGEncode",
             "FillScopeT5Encode", "FillScopeQwen3Encode", "FillScopeFluxTextCondition", "FillScopeSD3TextCondition",
             "FillScopeFluxTextFromConditioning", "FillScopeSD3TextFromConditioning",
             "FillScopeKleinTextFromConditioning"},
    "flux fill": {"FillScopeFluxFillCondition", "FillScopeFluxFillSampler", "FillScopeFluxFillTiledInpaint"},
    "sd3 controlnet": {"FillScopeSD3InpaintCondition", "FillScopeSD3ControlNetInpaintSampler",
                       "FillScopeSD3ControlNetTiledInpaint"},
    "flux2 klein": {"FillScopeKleinInpaintCondition", "FillScopeKleinEditCondition", "FillScopeKleinSampler",
                    "FillScopeKleinTiledInpaint"},
    # images in and out: a test image with its mask, a latent back to pixels
    "image": {"FillScopeSyntheticImageMask", "FillScopeVAEDecode"},
    # the photo around the model: crop, pad, stitch and paste back
    "compositing": {"FillScopeCropForInpaint", "FillScopeOutpaintPad", "FillScopeStitch", "FillScopePasteBack"},
    "inspect": {"FillScopeInspect", "FillScopeInspectCLIP", "FillScopeInspectVAE", "FillScopeInspectModel",
                "FillScopeShapesReport"},
    "trace": {"FillScopeFluxFillTrace", "FillScopeSD3ControlNetTrace", "FillScopeKleinTrace"},
    "compare": {"FillScopeFluxFillCompareRun", "FillScopeSD3ControlNetCompareRun", "FillScopeKleinCompareRun",
                "FillScopeCompare"},
    "batch": {"FillScopeBatch"},
}


def test_each_node_sits_in_the_category_a_user_looks_in(info):
    shown: dict[str, set] = {}
    for name, node in pack_nodes(info).items():
        shown.setdefault(node["category"], set()).add(name)
    assert shown == {f"FillScope/{folder}": names for folder, names in CATEGORIES.items()}
