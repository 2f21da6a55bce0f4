"""ComfyUI node classes (V3 schema). Thin: parse inputs, call the engine in ../fillscope, wrap outputs."""


def all_nodes() -> list:
    from . import flux_fill, inspect, loaders, text

    return [*loaders.NODES, *text.NODES, *flux_fill.NODES, *inspect.NODES]
