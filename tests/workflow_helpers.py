"""Reading the shipped API workflows and what a run left in /history (shared by the server tests)."""

from __future__ import annotations

import json
from pathlib import Path

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"


def load_api(name: str) -> dict:
    return json.loads((WORKFLOWS / f"{name}.api.json").read_text())


def node_id(prompt: dict, class_type: str) -> str:
    return next(k for k, v in prompt.items() if v["class_type"] == class_type)


def shapes_doc(entry: dict, prompt: dict, class_type: str) -> dict:
    """The shapes document a node of `class_type` left in a /history entry."""
    return entry["outputs"][node_id(prompt, class_type)]["fillscope_shapes"][0]


def tensors(doc: dict) -> dict:
    return {t["name"]: t for t in doc["node"]["tensors"]}


def with_synthetic_image(prompt: dict, width: int, height: int, mask_fraction: float) -> dict:
    """The prompt with its LoadImage replaced by a Synthetic Image + Mask node of the given size."""
    load = node_id(prompt, "LoadImage")
    prompt["90"] = {"class_type": "FillScopeSyntheticImageMask",
                    "inputs": {"width": width, "height": height, "mask_fraction": mask_fraction}}
    for node in prompt.values():
        for key, value in node["inputs"].items():
            if isinstance(value, list) and value[0] == load:
                node["inputs"][key] = ["90", value[1]]
    del prompt[load]
    return prompt
