"""FillScope: mask-guided editing (FLUX.1 Fill, SD3 ControlNet inpainting) for ComfyUI, with shape inspection.

ComfyUI entry point. Nothing heavy is imported here: diffusers and transformers load the first time a node
runs. Deliberately no NODE_CLASS_MAPPINGS: its presence makes ComfyUI ignore comfy_entrypoint.
"""

WEB_DIRECTORY = "./web"


async def comfy_entrypoint():
    # lazy: comfy_api exists only inside ComfyUI, and the nodes are imported when ComfyUI asks for them
    from comfy_api.latest import ComfyExtension

    from .nodes import all_nodes
    from .nodes.live import add_routes

    class FillScopeExtension(ComfyExtension):
        async def get_node_list(self):
            # ComfyUI 0.3.75 calls no on_load; the server's routes are added after this list is read
            add_routes()  # GET /fillscope/live: the Inspect nodes' records of later calls (nodes/live.py)
            return all_nodes()

    return FillScopeExtension()


__all__ = ["WEB_DIRECTORY", "comfy_entrypoint"]
