"""FillScopeNode: what every FillScope node does around its own work, written once.

A node says what it is in `define_schema()` and does its work in `run(rec, **inputs)`. `execute()`, ComfyUI's
entry point (a classmethod called with the inputs as keyword arguments), wraps it:

- a ShapeRecorder `rec` for the node: the node id from the schema, the title from `title` (default: the display
  name without "FillScope "), the boundary table a Shapes Report uses for the graph from `table`;
- FillScope values arrive as Traced (the value and the records of the nodes upstream): run() gets bare values,
  as keyword arguments in the schema's order;
- inputs of a model socket type (common.MODELS) are loaded for run() under each model's memory policy;
- run() returns the values of the outputs other than `shapes` (one value, or a tuple when there are several);
  outputs of FillScope's own socket types (FS_*) travel on as Traced, ComfyUI's (IMAGE, MASK, STRING) as is;
- a declared `shapes` output gets the record as JSON (schema fillscope.shapes/1), and the node's ui its text
  table and the document (`text`, `fillscope_shapes`). run() may return an io.NodeOutput instead: its
  values as above, and its ui shown in place of the record.
"""

from __future__ import annotations

from contextlib import nullcontext

from comfy_api.latest import io

from ..fillscope.trace.records import (
    ShapeRecorder,
    Traced,
    format_record,
    merge_trails,
    shapes_document,
    shapes_json,
)
from . import common as c
from . import memory

SHAPES = "shapes"  # the id of the shapes output (common.shapes_output)
TRACED_PREFIX = "FS_"  # FillScope's own socket types
MODEL_TYPES = {m.io_type for m in c.MODELS}


class FillScopeNode(io.ComfyNode):
    title: str | None = None  # the shape record's title; default: the display name without "FillScope "
    table: str | None = None  # the boundary table of this node's graph (fillscope/trace/summary.py TABLES)

    @classmethod
    def run(cls, rec: ShapeRecorder, **inputs):
        raise NotImplementedError

    @classmethod
    def execute(cls, **inputs) -> io.NodeOutput:
        schema = cls.SCHEMA or cls.define_schema()  # ComfyUI sets SCHEMA when it registers the node
        inputs = {**{i.id: inputs[i.id] for i in schema.inputs if i.id in inputs}, **inputs}  # in the schema's order
        upstream = [v for v in inputs.values() if isinstance(v, Traced)]
        values = {k: v.value if isinstance(v, Traced) else v for k, v in inputs.items()}
        models = [values[i.id] for i in schema.inputs if i.io_type in MODEL_TYPES and i.id in values]
        rec = ShapeRecorder(schema.node_id, cls.title or schema.display_name.removeprefix("FillScope "), cls.table)
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
