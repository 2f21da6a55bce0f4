"""FillScopeNode: what every FillScope node does around its own work, written once.

A node says what it is in `define_schema()` and does its work in `run(rec, **inputs)` (and, optionally, the part
that needs no model in `prepare(rec, **inputs)`, before any model is placed). `execute()`, ComfyUI's
entry point (a classmethod called with the inputs as keyword arguments), wraps it:

- a ShapeRecorder `rec` for the node: the node id from the schema, the title from `title` (default: the display
  name, which leaves "FillScope" to the canvas' node-source badge), the boundary table a Shapes Report uses for the graph from `table`;
- FillScope values arrive as Traced (the value and the records of the nodes upstream): run() gets bare values,
  as keyword arguments in the schema's order;
- inputs of a model socket type (common.MODELS) are loaded for run() under each model's memory policy;
- run() returns the values of the outputs other than `shapes` (one value, or a tuple when there are several);
  outputs of FillScope's own socket types (FS_*) travel on as Traced, ComfyUI's (IMAGE, MASK, STRING) as is;
- a declared `shapes` output gets the record as JSON (schema fillscope.shapes/1), and the node's ui its text
  table and the document (`text`, `fillscope_shapes`). run() may return an io.NodeOutput instead: its
  values as above, and its ui shown in place of the record.

Before any of that (before a model is placed on the device, before run()), `check_inputs` checks every input the
schema declares against the schema, and a bad one is a FillScopeInputError naming it (ComfyUI reports it as the
node's execution error; the server keeps running). It runs here, at execution, rather than in `validate_inputs`
(prompt time) because ComfyUI 0.3.75 skips its own min/max checks for every input a node's validate_inputs names
(for all of them when it takes **kwargs), never checks a value that arrives through a link, never checks a V3
Combo against its options, lets NaN through its min/max comparisons, and sees no IMAGE/MASK values at prompt time.
Widget values out of range are still refused at prompt time by ComfyUI itself.
"""

from __future__ import annotations

import inspect
import math
import os
from contextlib import nullcontext

from comfy_api.latest import io

from ..fillscope.errors import FillScopeInputError
from ..fillscope.trace.records import (
    ShapeRecorder,
    Traced,
    format_record,
    merge_trails,
    shapes_document,
    shapes_json,
)
from ..fillscope.weights import Component
from . import common as c
from . import memory

SHAPES = "shapes"  # the id of the shapes output (common.shapes_output)
TRACED_PREFIX = "FS_"  # FillScope's own socket types
MODEL_TYPES = {m.io_type for m in c.MODELS}
PIXEL_TYPES = ("IMAGE", "MASK")  # ComfyUI's tensors: finite values only
# filename_prefix: what one path part (a file or folder name) and a whole path may hold on common file systems
# (ext4, NTFS, APFS: 255 bytes a name; 1024 keeps clear of PATH_MAX with the output folder in front), less what the
# nodes add to the file name ("_00001" and ".json" / ".html")
PATH_PART_BYTES, PATH_TOTAL_BYTES, FILE_SUFFIX_BYTES = 255, 1024, 16


class FillScopeNode(io.ComfyNode):
    title: str | None = None  # the shape record's title; default: the display name
    table: str | None = None  # the boundary table of this node's graph (fillscope/trace/summary.py TABLES)
    places_models = True  # False: the node reads its models' configs and shapes only (LoRA): they stay where they are

    @classmethod
    def prepare(cls, rec: ShapeRecorder, **inputs) -> dict:
        """Work on the inputs that needs no model (e.g. checking and preparing an image and mask), done before any
        model is placed on the device, so a bad input is refused without moving weights; returns run()'s inputs."""
        return inputs

    @classmethod
    def run(cls, rec: ShapeRecorder, **inputs):
        raise NotImplementedError

    @classmethod
    def execute(cls, **inputs) -> io.NodeOutput:
        schema = cls.SCHEMA or cls.define_schema()  # ComfyUI sets SCHEMA when it registers the node
        inputs = {**{i.id: inputs[i.id] for i in schema.inputs if i.id in inputs}, **inputs}  # in the schema's order
        upstream = [v for v in inputs.values() if isinstance(v, Traced)]
        values = {k: v.value if isinstance(v, Traced) else v for k, v in inputs.items()}
        check_inputs(schema, values, validated_by_node(cls))
        models = [values[i.id] for i in schema.inputs
                  if model_input(i) and i.id in values and cls.places_models and isinstance(values[i.id], Component)]
        rec = ShapeRecorder(schema.node_id, cls.title or schema.display_name, cls.table)
        values = cls.prepare(rec, **values)
        with memory.use(*models, rec=rec) if models else nullcontext():
            result = cls.run(rec, **values)
        outputs = schema.outputs or []
        ui = None
        if isinstance(result, io.NodeOutput):
            result, ui = result.args, result.ui
        elif sum(o.id != SHAPES for o in outputs) == 1:
            result = (result,)
        record, trail = rec.finish(), merge_trails(*upstream)
        results, out = iter(result), []
        for o in outputs:
            if o.id == SHAPES:
                out.append(shapes_json(record, trail))
                if ui is None:
                    ui = {"text": [format_record(record)], "fillscope_shapes": [shapes_document(record, trail)]}
            else:
                value = next(results)
                out.append(Traced(value, trail + [record]) if o.io_type.startswith(TRACED_PREFIX) else value)
        return io.NodeOutput(*out, ui=ui)


def model_input(inp) -> bool:
    """An input of a model socket type, alone or among the types of a MultiType input (FS_VAE,VAE: a ComfyUI VAE
    there is not a FillScope component and places itself)."""
    return bool(set(str(inp.get_io_type()).split(",")) & MODEL_TYPES)


# ---- input checks (see the module docstring) -------------------------------------------------------------------


def validated_by_node(cls) -> set:
    """The inputs a node's own `validate_inputs` takes (a loader's `source`): ComfyUI hands those to it instead of
    its own checks, and so does check_inputs (a source's menu is read from disk and may be newer than the schema)."""
    func = getattr(cls.validate_inputs, "__func__", None)
    if func is None or func is io.ComfyNode.validate_inputs.__func__:
        return set()
    return set(inspect.getfullargspec(cls.validate_inputs).args) - {"cls"}


def check_inputs(schema, values: dict, skip=()) -> None:
    """Every input of `schema` present in `values`, checked against its declaration: FLOAT/INT finite and within
    min/max, COMBO one of its options, STRING valid text (no NUL, no lone surrogate; filename_prefix a path that
    fits), IMAGE/MASK finite. An absent optional input (or None) is fine. Raises FillScopeInputError naming the
    first bad input."""
    for inp in schema.inputs:
        if inp.id not in values or inp.id in skip or (values[inp.id] is None and inp.optional):
            continue
        value, kind = values[inp.id], inp.io_type
        if kind in ("FLOAT", "INT"):
            _check_number(inp, value)
        elif kind == "COMBO":
            _check_choice(inp, value)
        elif kind == "STRING":
            _check_text(inp, value)
        elif kind in PIXEL_TYPES:
            _check_pixels(inp, value)


def _show(value, limit: int = 60) -> str:
    """A value as the message shows it: ASCII only (a NUL or a lone surrogate is escaped), at most `limit` chars."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _num(x) -> str:
    return str(x) if isinstance(x, int) else repr(float(x))


def _check_number(inp, value) -> None:
    name, lo, hi = inp.id, getattr(inp, "min", None), getattr(inp, "max", None)
    bounds = (f"from {_num(lo)} to {_num(hi)}" if lo is not None and hi is not None else
              f"of at least {_num(lo)}" if lo is not None else f"of at most {_num(hi)}" if hi is not None else "")
    default = getattr(inp, "default", None)
    fix = (f"set {name} to a number {bounds}".rstrip()
           + (f" (the default is {_num(default)})" if isinstance(default, (int, float)) else "")
           + "; if a node is wired to it, check what that node computes.")
    what = "a whole number" if inp.io_type == "INT" else "a finite number"
    if isinstance(value, (str, bytes)):
        raise FillScopeInputError(name, f"is the text {_show(value)}, not a number.", fix)
    try:
        number = value if isinstance(value, int) else float(value)
    except (TypeError, ValueError, OverflowError):
        raise FillScopeInputError(name, f"is {type(value).__name__} {_show(value)}, not a number.", fix) from None
    if isinstance(number, float) and not math.isfinite(number):
        raise FillScopeInputError(name, f"is {number!r}; it must be {what} {bounds}.".replace(" .", "."), fix)
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise FillScopeInputError(name, f"is {_num(number)}; it must be {bounds}.", fix)


def _check_choice(inp, value) -> None:
    options = list(getattr(inp, "options", None) or [])
    try:
        ok = any(type(value) is type(o) and value == o for o in options)
    except Exception:  # a value that cannot even be compared
        ok = False
    if ok:
        return
    shown = ", ".join(_show(o) for o in options[:20]) + (f", ... ({len(options)} in all)" if len(options) > 20 else "")
    default = getattr(inp, "default", None)
    raise FillScopeInputError(
        inp.id, f"{_show(value)} is not one of its choices ({shown}).",
        "choose one of the menu's entries" + (f" (the default is {_show(default)})." if default is not None else "."))


def _check_text(inp, value) -> None:
    name = inp.id
    if not isinstance(value, str):
        raise FillScopeInputError(name, f"is {type(value).__name__} {_show(value)}, not text.", f"pass a string as {name}.")
    if "\x00" in value:
        raise FillScopeInputError(
            name, f"holds a NUL character (\\x00) at position {value.index(chr(0))}: no prompt, file name or path "
                  "may contain one.", f"remove the NUL character from {name}.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise FillScopeInputError(
            name, f"holds a lone surrogate ({_show(value[e.start])}) at position {e.start}: half of a character, "
                  "not valid Unicode, so it can be neither tokenised nor saved.",
            f"remove it from {name} (it is usually an emoji cut in half where the text was built or copied).") from None
    if name == "filename_prefix":
        _check_filename_prefix(name, value)


def _check_filename_prefix(name, value: str) -> None:
    fix = "use a shorter relative prefix inside the output folder, e.g. 'fillscope/shapes' (folders separated by '/')."
    if not value.strip():
        raise FillScopeInputError(name, "is empty: the files would be hidden files named after the counter.",
                                  "give a prefix such as 'fillscope/shapes' (a folder, '/', a file name).")
    size = len(value.encode("utf-8"))
    if size > PATH_TOTAL_BYTES:
        raise FillScopeInputError(name, f"is {size} bytes long; a path of more than {PATH_TOTAL_BYTES} bytes cannot be "
                                        "created on common file systems.", fix)
    parts = value.replace("\\", "/").split("/")
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        limit = PATH_PART_BYTES - (FILE_SUFFIX_BYTES if last else 0)
        size = len(part.encode("utf-8"))
        if size > limit:
            raise FillScopeInputError(
                name, f"has a {'file' if last else 'folder'} name of {size} bytes ({_show(part, 30)}); a file system "
                      f"allows {PATH_PART_BYTES} bytes per name"
                      + (f", and the node adds up to {FILE_SUFFIX_BYTES} (counter and extension) to the last one." if last else "."),
                fix)
    norm = os.path.normpath(value)
    if os.path.isabs(value) or norm == os.pardir or norm.startswith(os.pardir + os.sep):
        raise FillScopeInputError(name, f"{_show(value)} points outside ComfyUI's output folder, where nothing is saved.",
                                  "use a relative prefix without a leading '..', e.g. 'fillscope/shapes'.")


def _check_pixels(inp, value) -> None:
    import torch

    if not isinstance(value, torch.Tensor) or value.device.type == "meta" or not value.is_floating_point():
        return
    if bool(torch.isfinite(value.sum())):  # one reduction decides the finite case: no whole-image mask of flags
        return
    finite = torch.isfinite(value)
    if bool(finite.all()):
        return
    bad, nan = int(finite.numel() - finite.sum()), int(torch.isnan(value).sum())
    kind = inp.io_type
    harm = ("a NaN mask binarises to an empty mask (the source comes back unchanged) or poisons a soft one"
            if kind == "MASK" else "NaN/inf pixels would go through the VAE and come out as NaN")
    raise FillScopeInputError(
        inp.id, f"holds {bad:,} of {value.numel():,} values that are NaN or inf ({nan:,} NaN): {kind} values must be "
                f"finite numbers from 0 to 1, and {harm}.",
        f"check the node that makes this {kind} (a NaN or infinite widget value upstream, a division by zero); "
        "every value must be a finite number.")
