"""Inspect nodes on ComfyUI's own values: put one on any link of a graph built from ComfyUI's nodes and its face shows
what passed (FillScope's shape record, as FillScope's own nodes show theirs).

- FillScope Inspect (any type in, the very same object out): records the tensors of a LATENT (samples, noise_mask,
  any other tensor key), a CONDITIONING (each entry's tensor as cond[i] and every tensor in its dict: pooled_output,
  concat_latent_image, concat_mask, reference_latents[j] ...; other keys as facts), an IMAGE, a MASK, a bare
  tensor; anything else as a short fact (its type). The value's type is read off the graph (the upstream node's
  output type), else off the value. The object itself is handed on untouched, so downstream nothing changes.
"""

from __future__ import annotations

from comfy_api.latest import io

from ..fillscope.trace.records import ShapeRecorder
from . import common as c
from .inspect_calls import CATEGORY, MAX_TENSORS, InspectNode, is_tensor, short
from .wire_values import value_leaves


def upstream_type(prompt, node_id, input_name: str = "value", depth: int = 16) -> tuple[str, str] | None:
    """(socket type, upstream node's class) of the link into `input_name` of node `node_id`, read off the prompt and
    the upstream class's RETURN_TYPES (through chains of Inspect nodes); None where it cannot be told."""
    try:
        import nodes as comfy_nodes

        for _ in range(depth):
            link = prompt[str(node_id)]["inputs"][input_name]
            source, slot = str(link[0]), int(link[1])
            class_type = prompt[source]["class_type"]
            kind = str(comfy_nodes.NODE_CLASS_MAPPINGS[class_type].RETURN_TYPES[slot])
            if kind != "*" or class_type != Inspect.NODE_ID:
                return kind, class_type
            node_id = source
    except Exception:  # a prompt without the link (an expanded graph), a class that is gone ...
        return None
    return None


def guess_type(value) -> str:
    """The socket type a value looks like, when the graph does not say."""
    if isinstance(value, dict) and is_tensor(value.get("samples")):
        return "LATENT"
    if (isinstance(value, list) and value and all(isinstance(e, (list, tuple)) and len(e) == 2 and is_tensor(e[0])
                                                  and isinstance(e[1], dict) for e in value)):
        return "CONDITIONING"
    if is_tensor(value):
        if value.ndim == 4 and value.shape[-1] in (1, 3, 4) and value.is_floating_point():
            return "IMAGE"
        if value.ndim == 3 and value.is_floating_point():
            return "MASK"
        return "tensor"
    return type(value).__name__


class _Budget:
    def __init__(self, rows: int = MAX_TENSORS):
        self.left, self.skipped = rows, 0


def record_tree(rec: ShapeRecorder, name: str, value, budget: _Budget, depth: int = 0) -> None:
    """Every tensor in `value` (tensors, lists/tuples and dicts of them, FillScope's Traced and dataclass-like
    objects are not opened) as a measured row named by its path; scalars and other objects as facts."""
    for path, leaf in value_leaves(value, name, depth, max_depth=4):
        if is_tensor(leaf):
            if budget.left > 0:
                budget.left -= 1
                rec.tensor(path, leaf)
            else:
                budget.skipped += 1
        else:
            rec.fact(path or "value", short(leaf))


def record_value(rec: ShapeRecorder, value, kind: str) -> None:
    budget = _Budget()
    if kind == "LATENT" and isinstance(value, dict):
        for key, item in value.items():
            record_tree(rec, key, item, budget, 1)
        samples = value.get("samples")
        if is_tensor(samples):
            rec.fact("batch", samples.shape[0])
    elif kind == "CONDITIONING" and isinstance(value, (list, tuple)):
        rec.fact("entries", len(value))
        for i, entry in enumerate(value):
            if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], dict):
                record_tree(rec, f"cond[{i}]", entry[0], budget, 1)
                for key, item in entry[1].items():
                    record_tree(rec, f"cond[{i}].{key}", item, budget, 1)
            else:
                record_tree(rec, f"cond[{i}]", entry, budget, 1)
    elif is_tensor(value):
        name = {"IMAGE": "image", "MASK": "mask"}.get(kind, "tensor")
        record_tree(rec, name, value, budget)
        if kind == "IMAGE" and value.ndim == 4:
            rec.fact("batch, height, width, channels", list(value.shape))
        elif kind == "MASK" and value.ndim >= 2:
            rec.fact("coverage (mean)", round(float(value.float().mean()), 6) if value.device.type != "meta" else None)
    elif isinstance(value, (dict, list, tuple)):
        record_tree(rec, "", value, budget)
    else:
        rec.fact("class", f"{type(value).__module__}.{type(value).__qualname__}")
        for attr in ("model", "first_stage_model", "cond_stage_model"):  # MODEL / VAE / CLIP: the model's class only
            inner = getattr(value, attr, None)
            if inner is not None:
                rec.fact(f"{attr} class", type(inner).__name__)
                break
    if budget.skipped:
        rec.fact("tensors not listed", budget.skipped)
        rec.note(f"{budget.skipped} more tensors not listed (a record lists {MAX_TENSORS})")


class Inspect(InspectNode):
    NODE_ID = "FillScopeInspect"
    title = "Inspect"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id=cls.NODE_ID,
            display_name="Inspect",
            category=CATEGORY,
            description=("Put on any link: hands on the very same value, unchanged, and shows its shapes (LATENT, "
                         "CONDITIONING, IMAGE, MASK, tensors; other values by type)."),
            inputs=[io.AnyType.Input("value", tooltip="Any value: LATENT, CONDITIONING, IMAGE, MASK, MODEL ...")],
            outputs=[io.AnyType.Output("same", display_name="value",  # ids unique between inputs and outputs (V3)
                                       tooltip="The input, the very same object (nothing downstream changes)."),
                     c.shapes_output()],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt],
        )

    @classmethod
    def execute(cls, value) -> io.NodeOutput:
        out = super().execute(value=value)
        # FillScope's own values arrive as Traced and run() gets the bare value: hand on the very object that came in
        return io.NodeOutput(value, *out.args[1:], ui=out.ui)

    @classmethod
    def run(cls, rec, value):
        found = upstream_type(getattr(getattr(cls, "hidden", None), "prompt", None), cls.graph_id())
        told = found is not None and found[0] != "*"
        kind = found[0] if told else guess_type(value)
        rec.fact("type", kind if told else f"{kind} (read off the value)")
        if found:
            rec.fact("from", found[1])
        try:
            record_value(rec, value, kind)
        except Exception as e:  # never fail on a value: the graph must run as without this node
            rec.warn(f"could not read the value's shapes ({type(e).__name__}: {e})")
        return value


NODES = [Inspect]
