"""ComfyUI node classes (V3 schema). Thin: parse inputs, call the engine in ../fillscope, wrap outputs."""


def all_nodes() -> list:
    from . import flux_fill, image, inspect, loaders, sd3_inpaint, text, trace

    return [*loaders.NODES, *text.NODES, *flux_fill.NODES, *sd3_inpaint.NODES, *image.NODES, *inspect.NODES, *trace.NODES]
