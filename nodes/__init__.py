"""ComfyUI node classes (V3 schema) on one base class (base.py): each node is its schema and a small `run` that
calls the engine in ../fillscope."""


def all_nodes() -> list:
    # lazy: the node modules import comfy_api, present only once ComfyUI calls comfy_entrypoint
    from . import flux_fill, image, inspect, klein, loaders, sd3_inpaint, text, trace
    from . import native  # ComfyUI CONDITIONING -> FillScope's FLUX / SD3 / klein text
    from . import lora  # LoRA on the FLUX.1 Fill / SD3 / klein transformers
    from . import compositing  # crop and stitch, several regions
    from . import outpaint  # outpaint pad: the larger canvas and the mask of its new area
    from . import batch  # a batch manifest run from ComfyUI (in this process or on Ray)
    from . import inspect_model  # shapes at ComfyUI's own MODEL's boundary, recorded while a sampler runs it
    from . import inspect_values  # Inspect on any link (inspect_calls: what the Inspect nodes share)
    from . import inspect_clip, inspect_vae  # copies of ComfyUI's CLIP / VAE that record the calls later nodes make
    from . import tiled  # large images by overlapping tiles (issue 23)
    from . import compare  # one job run two ways, boundary by boundary (issue 25)

    return [*loaders.NODES, *text.NODES, *flux_fill.NODES, *sd3_inpaint.NODES, *klein.NODES,
            *image.NODES, *inspect.NODES, *trace.NODES, *native.NODES, *lora.NODES, *compositing.NODES,
            *outpaint.NODES, *batch.NODES, *inspect_model.NODES, *inspect_values.NODES,
            *inspect_clip.NODES, *inspect_vae.NODES, *tiled.NODES, *compare.NODES]
