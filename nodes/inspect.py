"""Inspection nodes: a synthetic image + mask of any size (for meta traces) and the shapes report (FillScope's
shapes documents and this prompt's Inspect Model / CLIP / VAE records, delivered by nodes/live.py)."""

from __future__ import annotations

import json
import os
import re

from comfy_api.latest import io

from ..fillscope.errors import FillScopeInputError
from ..fillscope.masks import synthetic_image_and_mask
from ..fillscope.trace.records import MAX_JSON_DEPTH, json_depth
from ..fillscope.trace.records import SCHEMA as SHAPES_SCHEMA
from ..fillscope.trace.report.shapes_page import render_shapes_page
from ..fillscope.trace.summary import (
    boundary_rows,
    crop_line,
    format_rows,
    format_sections,
    record_section,
    wire_section,
)
from . import common as c
from . import live
from . import tooltips as tips
from . import wires
from .base import FillScopeNode


class SyntheticImageMask(FillScopeNode):
    title = "Synthetic image + mask"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeSyntheticImageMask",
            display_name="Synthetic Image + Mask",
            category=c.CATEGORY + "/image",
            description="A deterministic gradient test image and a centred rectangular repaint mask of any size.",
            inputs=[
                io.Int.Input("width", default=1024, min=16, max=8192, step=1, tooltip=tips.SYNTHETIC_WIDTH),
                io.Int.Input("height", default=1024, min=16, max=8192, step=1, tooltip=tips.SYNTHETIC_HEIGHT),
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


def next_number(filename_prefix: str, width: int = 0, height: int = 0) -> tuple[str, str, int, str]:
    """(folder, name, counter, subfolder) for a node's files in ComfyUI's output folder: the counter one past the
    highest of any file there named `<name>_<digits>.<ext>` or `<name>_<digits>_.<ext>`, so every run writes new
    files. ComfyUI's get_save_image_path resolves the prefix (folders, %date% variables, %width% / %height% of an
    image), keeps it inside the output folder and creates the folder, but counts only names with the trailing
    underscore of its image nodes (name_00001_.png): alone, it gives the FillScope files (name_00001.json) 1 every
    time."""
    import folder_paths

    full_dir, name, counter, subfolder, _ = folder_paths.get_save_image_path(
        filename_prefix, folder_paths.get_output_directory(), width, height)
    numbered = re.compile(re.escape(os.path.normcase(name)) + r"_(\d+)_?\.[^.]+")
    highest = counter - 1
    for entry in os.listdir(full_dir):
        match = numbered.fullmatch(os.path.normcase(entry))
        if match:
            highest = max(highest, int(match.group(1)))
    return full_dir, name, highest + 1, subfolder


def output_stem(filename_prefix: str) -> tuple[str, str, str]:
    """(folder, stem, subfolder) for a node's files: `<name>_<counter>` (5 digits, next_number's counter)."""
    full_dir, name, counter, subfolder = next_number(filename_prefix)
    return full_dir, f"{name}_{counter:05}", subfolder


def png_metadata(cls):
    """The PNG text chunks Save Image writes: the prompt, and the canvas' workflow (extra_pnginfo), so the picture
    dropped on ComfyUI reopens its graph; none under ComfyUI's --disable-metadata."""
    from comfy.cli_args import args
    from PIL.PngImagePlugin import PngInfo

    if args.disable_metadata:
        return None
    info = PngInfo()
    if cls.hidden.prompt is not None:
        info.add_text("prompt", json.dumps(cls.hidden.prompt))
    for key, value in (cls.hidden.extra_pnginfo or {}).items():
        info.add_text(key, json.dumps(value))
    return info


def save_images_with_report(cls, images, filename_prefix: str) -> tuple[str, str, str, list[dict]]:
    """Save IMAGE `images` as ComfyUI's Save Image does (PNG, the prompt and workflow in its metadata, one number per
    image, `<name>_<counter>_.png`) and return (folder, the report's stem, subfolder, the images' ui entries). The
    report takes the first image's stem (`<name>_00007_` beside `<name>_00007_.png`): one node, one look at the
    folder, so the report and the image of a run always share their number, whatever order ComfyUI runs its output
    nodes in (docs/traces-and-reports.md). The trailing underscore keeps the report's files in ComfyUI's own count:
    a Save Image with the same prefix later never reuses their number."""
    import numpy as np
    from PIL import Image

    full_dir, name, counter, subfolder = next_number(filename_prefix, images.shape[2], images.shape[1])
    metadata = png_metadata(cls)
    saved = []
    for i, image in enumerate(images):
        file = f"{name.replace('%batch_num%', str(i))}_{counter + i:05}_.png"
        pixels = np.clip(255.0 * image.float().cpu().numpy(), 0, 255).astype(np.uint8)  # as Save Image rounds
        Image.fromarray(pixels).save(os.path.join(full_dir, file), pnginfo=metadata, compress_level=4)
        saved.append({"filename": file, "subfolder": subfolder, "type": "output"})
    return full_dir, f"{name.replace('%batch_num%', '0')}_{counter:05}_", subfolder, saved


SHAPES_FIX = "wire a FillScope node's shapes output (the last node of the graph: its trail holds every node upstream)."
# the nodes whose records nodes/live.py delivers after they ran (the Shapes Report tables them beside the shapes)
LIVE_NODES = {"FillScopeInspectModel": "Inspect Model", "FillScopeInspectCLIP": "Inspect CLIP",
              "FillScopeInspectVAE": "Inspect VAE"}


def read_shapes(shapes: str, name: str = "shapes") -> dict:
    """The shapes document of a FillScope node's `shapes` output; FillScopeInputError(name) for anything else.
    Its nesting is counted first: JSON nested deeper than a shape record would exhaust the recursion of Python's JSON
    reader (and of the writer and the table code after it)."""
    depth = json_depth(shapes) if isinstance(shapes, str) else 0
    if depth > MAX_JSON_DEPTH:
        raise FillScopeInputError(name, f"is JSON nested {depth:,} arrays/objects deep; a FillScope shape record "
                                        f"nests at most {MAX_JSON_DEPTH} deep (the limit), so it is not one.",
                                  SHAPES_FIX)
    try:
        doc = json.loads(shapes)
    except (TypeError, ValueError) as e:
        raise FillScopeInputError(name, f"is not JSON ({e}; it starts {ascii(str(shapes)[:40])}).", SHAPES_FIX) from None
    if not isinstance(doc, dict) or doc.get("schema") != SHAPES_SCHEMA:
        found = ascii(doc.get("schema"))[:40] if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        raise FillScopeInputError(name, f"is not a FillScope shape record: schema {found}, expected "
                                        f"'{SHAPES_SCHEMA}'.", SHAPES_FIX)
    trail = doc.get("trail", [])
    records = [doc.get("node")] + (trail if isinstance(trail, list) else [None])
    for rec in records:
        if not (isinstance(rec, dict) and isinstance(rec.get("id"), str) and isinstance(rec.get("tensors"), list)
                and all(isinstance(t, dict) for t in rec["tensors"])):
            raise FillScopeInputError(name, f"is a '{SHAPES_SCHEMA}' document whose node or trail is not a list "
                                            "of node records (id, title, tensors).", SHAPES_FIX)
    return doc


def live_records(prompt_id: str | None) -> list[tuple[str, dict]]:
    """(node id, record) of every record nodes/live.py delivered for this prompt so far (Inspect Model / CLIP / VAE,
    finished when the sampler, encoder or decoder that called their MODEL, CLIP or VAE ran), in delivery order."""
    out = []
    for node_id, output in live.records_of(prompt_id or "").items():
        docs = output.get("fillscope_shapes") or [None]
        record = docs[0].get("node") if isinstance(docs[0], dict) else None
        if isinstance(record, dict) and isinstance(record.get("tensors"), list):
            out.append((str(node_id), record))
    return out


def inspect_nodes(prompt, leave_out=()) -> list[str]:
    """"Inspect Model 'ID'" for each Inspect Model / CLIP / VAE node of the prompt (the API graph), but `leave_out`."""
    return [f"{LIVE_NODES[node['class_type']]} '{k}'" for k, node in (prompt or {}).items()
            if isinstance(node, dict) and node.get("class_type") in LIVE_NODES and str(k) not in leave_out]


def nothing_to_report(prompt, prompt_id) -> FillScopeInputError:
    """Neither a shapes document nor an Inspect record: what the graph lacks, and how to wire it."""
    inspecting = inspect_nodes(prompt)
    if wires.status() != "on" and not inspecting:
        return FillScopeInputError(
            "shapes", f"is not wired, and the wire recorder is {wires.status()}: there is nothing to report.",
            "wire a FillScope node's shapes output to shapes, or start ComfyUI without FILLSCOPE_WIRES=off so that "
            "every wire of the prompt is recorded.")
    if not inspecting:
        return FillScopeInputError(
            "shapes", "is not wired, and this prompt has no Inspect Model / Inspect CLIP / Inspect VAE node whose "
                      "records the report could table: there is nothing to report.",
            "wire a FillScope node's shapes output to shapes, or put FillScope Inspect Model / Inspect VAE / Inspect "
            "CLIP on the graph's MODEL / VAE / CLIP and wire the graph's last output (e.g. VAE Decode's IMAGE) to "
            "after.")
    return FillScopeInputError(
        "shapes", f"is not wired, and no Inspect node of this prompt ({', '.join(inspecting)}) has delivered a "
                  f"record for it (prompt {prompt_id}): nothing called their MODEL / CLIP / VAE before this report "
                  "ran. Either 'after' is not wired to what those calls make, or ComfyUI reused the cached outputs "
                  "of the sampler / encoder / decoder and ran none of them again.",
        "wire the graph's last output (e.g. VAE Decode's IMAGE) to after; to measure again with an unchanged graph, "
        "change an input of the sampler (the seed) so that it runs.")


class ShapesReport(FillScopeNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeShapesReport",
            display_name="Shapes Report",
            category=c.CATEGORY + "/inspect",
            description=("Gathers the shapes of every FillScope node upstream and the records of this prompt's "
                         "Inspect Model / CLIP / VAE nodes (ComfyUI's own MODEL, CLIP, VAE as the sampler, encoders "
                         "and decoders called them) and writes them to the output folder: a page with the table "
                         "(HTML, shown in the FillScope sidebar), JSON and text; with `images` wired, the run's image "
                         "too, under the same number. In a graph of ComfyUI's own nodes (no shapes wired, no Inspect "
                         "Model / CLIP / VAE), every wire of the prompt that ran before it, node by node, with the "
                         "calls made to the MODEL / CLIP / VAE on it."),
            inputs=[
                io.String.Input("shapes", force_input=True, optional=True,
                                tooltip="A FillScope node's shapes output (its trail includes everything upstream). "
                                        "Optional: left unwired, the report tables every wire of the prompt that ran before it "
                                        "(wire after to the graph's last output)."),
                io.String.Input("filename_prefix", default="fillscope/shapes", tooltip=tips.REPORT_PREFIX),
                io.String.Input("shapes_2", force_input=True, optional=True,
                                tooltip="Another branch's shapes output, for a graph whose branches meet only through "
                                        "IMAGE/MASK (crop and stitch: wire the VAE Decode's shapes here)."),
                io.AnyType.Input("after", optional=True,
                                 tooltip="Any output (e.g. VAE Decode's IMAGE): the report runs after that node, so "
                                         "the records of the Inspect Model / CLIP / VAE nodes it needed (the sampler's "
                                         "run, the decode) are complete. Its value is not read."),
                io.Image.Input("images", optional=True,
                               tooltip="The run's image (e.g. Paste Back's or Stitch's IMAGE): saved as PNG with the "
                                       "report under one number (name_00007_.png beside name_00007_.html), so each "
                                       "report names its image. Leave it unwired to keep Save Image separate."),
            ],
            outputs=[],
            is_output_node=True,
            hidden=[io.Hidden.prompt, io.Hidden.extra_pnginfo],
        )

    @classmethod
    def run(cls, rec, filename_prefix, shapes=None, shapes_2=None, after=None, images=None):
        docs = [read_shapes(s, name) for s, name in ((shapes_2, "shapes_2"), (shapes, "shapes")) if s is not None]
        prompt_id = live.current_prompt_id()
        sections = [record_section(node_id, record) for node_id, record in live_records(prompt_id)]
        prompt = getattr(getattr(cls, "hidden", None), "prompt", None)
        if not docs and not inspect_nodes(prompt):
            # a graph of ComfyUI's own nodes (no FillScope shapes, no Inspect Model / CLIP / VAE chosen to table):
            # every wire the recorder wrote in this prompt so far, node by node in the order they ran
            sections = [wire_section(r) for r in wires.records_of(prompt_id or "").values()]
        if not docs and not sections:
            raise nothing_to_report(prompt, prompt_id)
        # Inspect nodes of the graph that delivered nothing for this prompt (their sampler / decoder ran from
        # ComfyUI's cache, or after this report): said, so a table without them is not read as complete
        silent = inspect_nodes(prompt, {s["node"] for s in sections})
        try:
            rows = boundary_rows(docs) if docs else []
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:  # a record missing its fields
            raise FillScopeInputError("shapes", f"is not a FillScope shape record ({SHAPES_SCHEMA}): "
                                                f"{type(e).__name__} {e} while reading its tensors.", SHAPES_FIX) from None
        # the Inspect sections first: FillScope's table ends with its seed verdict, read off the text's last line
        parts = [format_sections(sections)] if sections else []
        if silent:
            parts.insert(0, f"no record in this prompt from {', '.join(silent)}: what calls their MODEL / CLIP / VAE "
                            "ran from ComfyUI's cache or after this report")
        if docs:
            table = format_rows(rows)
            crop = crop_line(docs, rows)
            if crop:
                table += "\ncrop: " + crop
            parts.append(table)
        else:
            crop = None
        text = "\n\n".join(parts)
        all_rows = [r for s in sections for r in s["rows"]] + rows
        if images is not None and len(images):
            full_dir, stem, subfolder, saved = save_images_with_report(cls, images, filename_prefix)
        else:
            (full_dir, stem, subfolder), saved = output_stem(filename_prefix), []
        doc = docs[-1] if docs else None
        report = {"schema": SHAPES_SCHEMA, "boundaries": all_rows, "shapes": doc, **({"crop": crop} if crop else {}),
                  **({"shapes_2": docs[0]} if len(docs) == 2 else {}),
                  **({"images": [s["filename"] for s in saved]} if saved else {})}
        if sections or silent:
            report.update(prompt_id=prompt_id, inspect=sections, not_recorded=silent)
        json_text = json.dumps(report, indent=1)
        # the page a person reads (the viewer shows it); the JSON beside it for programs, the text for a terminal
        page = render_shapes_page(stem, rows=rows, sections=sections, json_text=json_text, json_name=stem + ".json",
                                  crop=crop, not_recorded=silent, images=[s["filename"] for s in saved],
                                  prompt_id=prompt_id if (sections or silent) else None)
        for ext, content in ((".json", json_text), (".html", page), (".txt", text + "\n")):
            with open(os.path.join(full_dir, stem + ext), "w", encoding="utf-8") as f:
                f.write(content)
        # the JSON first (what programs read as a Shapes Report's file), its page second: the viewer shows the page
        files = [{"filename": stem + ext, "subfolder": subfolder, "type": "output"} for ext in (".json", ".html")]
        ui = {"text": [text], "fillscope_report": files, "fillscope_boundaries": all_rows}
        if saved:
            ui["images"] = saved  # the frontend previews them on the node, as on Save Image
        return io.NodeOutput(ui=ui)


NODES = [SyntheticImageMask, ShapesReport]
