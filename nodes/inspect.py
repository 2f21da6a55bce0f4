"""Inspection nodes: a synthetic image + mask of any size (for meta traces) and the shapes report."""

from __future__ import annotations

import json
import os
import re

from comfy_api.latest import io

from ..fillscope.errors import FillScopeInputError
from ..fillscope.masks import synthetic_image_and_mask
from ..fillscope.trace.records import MAX_JSON_DEPTH, json_depth
from ..fillscope.trace.records import SCHEMA as SHAPES_SCHEMA
from ..fillscope.trace.summary import boundary_rows, crop_line, format_rows
from . import common as c
from .base import FillScopeNode


class SyntheticImageMask(FillScopeNode):
    title = "Synthetic image + mask"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSyntheticImageMask",
            display_name="FillScope Synthetic Image + Mask",
            category=c.CATEGORY + "/inspect",
            description="A deterministic gradient test image and a centred rectangular repaint mask of any size.",
            inputs=[
                io.Int.Input("width", default=1024, min=16, max=8192, step=1),
                io.Int.Input("height", default=1024, min=16, max=8192, step=1),
                io.Float.Input("mask_fraction", default=0.5, min=0.0, max=1.0, step=0.05,
                               tooltip="Side of the centred mask as a fraction of the image (0 = empty mask)."),
            ],
            outputs=[io.Image.Output("image"), io.Mask.Output("mask"), c.shapes_output()],
        )

    @classmethod
    def run(cls, rec, width, height, mask_fraction):
        image, mask = synthetic_image_and_mask(width, height, mask_fraction)
        rec.tensor("image", image)
        rec.tensor("mask", mask)
        rec.fact("repaint coverage", f"{float(mask.mean()):.1%}")
        return image, mask


def output_stem(filename_prefix: str) -> tuple[str, str, str]:
    """(folder, stem, subfolder) for a node's files in ComfyUI's output folder: `<name>_<counter>` (5 digits), the
    counter one past the highest of any file there named `<name>_<digits>.<ext>` or `<name>_<digits>_.<ext>`, so
    every run writes new files. ComfyUI's get_save_image_path resolves the prefix (folders, %date% variables),
    keeps it inside the output folder and creates the folder, but counts only names with the trailing underscore
    of its image nodes (name_00001_.png): alone, it gives the FillScope files (name_00001.json) 1 every time."""
    import folder_paths

    full_dir, name, counter, subfolder, _ = folder_paths.get_save_image_path(filename_prefix, folder_paths.get_output_directory())
    numbered = re.compile(re.escape(os.path.normcase(name)) + r"_(\d+)_?\.[^.]+")
    highest = counter - 1
    for entry in os.listdir(full_dir):
        match = numbered.fullmatch(os.path.normcase(entry))
        if match:
            highest = max(highest, int(match.group(1)))
    return full_dir, f"{name}_{highest + 1:05}", subfolder


SHAPES_FIX = "wire a FillScope node's shapes output (the last node of the graph: its trail holds every node upstream)."


def read_shapes(shapes: str) -> dict:
    """The shapes document of a FillScope node's `shapes` output; FillScopeInputError('shapes') for anything else.
    Its nesting is counted first: JSON nested deeper than a shape record would exhaust the recursion of Python's JSON
    reader (and of the writer and the table code after it)."""
    depth = json_depth(shapes) if isinstance(shapes, str) else 0
    if depth > MAX_JSON_DEPTH:
        raise FillScopeInputError("shapes", f"is JSON nested {depth:,} arrays/objects deep; a FillScope shape record "
                                            f"nests at most {MAX_JSON_DEPTH} deep (the limit), so it is not one.",
                                  SHAPES_FIX)
    try:
        doc = json.loads(shapes)
    except (TypeError, ValueError) as e:
        raise FillScopeInputError("shapes", f"is not JSON ({e}; it starts {ascii(str(shapes)[:40])}).", SHAPES_FIX) from None
    if not isinstance(doc, dict) or doc.get("schema") != SHAPES_SCHEMA:
        found = ascii(doc.get("schema"))[:40] if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        raise FillScopeInputError("shapes", f"is not a FillScope shape record: schema {found}, expected "
                                            f"'{SHAPES_SCHEMA}'.", SHAPES_FIX)
    trail = doc.get("trail", [])
    records = [doc.get("node")] + (trail if isinstance(trail, list) else [None])
    for rec in records:
        if not (isinstance(rec, dict) and isinstance(rec.get("id"), str) and isinstance(rec.get("tensors"), list)
                and all(isinstance(t, dict) for t in rec["tensors"])):
            raise FillScopeInputError("shapes", f"is a '{SHAPES_SCHEMA}' document whose node or trail is not a list "
                                                "of node records (id, title, tensors).", SHAPES_FIX)
    return doc


class ShapesReport(FillScopeNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeShapesReport",
            display_name="FillScope Shapes Report",
            category=c.CATEGORY + "/inspect",
            description="Gathers the shapes of every FillScope node upstream and writes them (JSON + text table) to the output folder.",
            inputs=[
                io.String.Input("shapes", force_input=True, tooltip="A FillScope node's shapes output (its trail includes everything upstream)."),
                io.String.Input("filename_prefix", default="fillscope/shapes"),
                io.String.Input("shapes_2", force_input=True, optional=True,
                                tooltip="Another branch's shapes output, for a graph whose branches meet only through "
                                        "IMAGE/MASK (crop and stitch: wire the VAE Decode's shapes here)."),
            ],
            outputs=[],
            is_output_node=True,
        )

    @classmethod
    def run(cls, rec, shapes, filename_prefix, shapes_2=None):
        doc = read_shapes(shapes)
        docs = [doc] if shapes_2 is None else [read_shapes(shapes_2), doc]
        try:
            rows = boundary_rows(docs)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:  # a record missing its fields
            raise FillScopeInputError("shapes", f"is not a FillScope shape record ({SHAPES_SCHEMA}): "
                                                f"{type(e).__name__} {e} while reading its tensors.", SHAPES_FIX) from None
        table = format_rows(rows)
        crop = crop_line(docs, rows)
        if crop:
            table += "\ncrop: " + crop
        full_dir, stem, subfolder = output_stem(filename_prefix)
        report = {"schema": doc.get("schema"), "boundaries": rows, "shapes": doc, **({"crop": crop} if crop else {}),
                  **({"shapes_2": docs[0]} if shapes_2 is not None else {})}
        with open(os.path.join(full_dir, stem + ".json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(full_dir, stem + ".txt"), "w") as f:
            f.write(table + "\n")
        files = [{"filename": stem + ".json", "subfolder": subfolder, "type": "output"}]
        return io.NodeOutput(ui={"text": [table], "fillscope_report": files, "fillscope_boundaries": rows})


NODES = [SyntheticImageMask, ShapesReport]
