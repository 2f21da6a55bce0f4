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
    from .nodes.wires import add_route as add_wires_route
    from .nodes.wires import install as record_wires
    from .nodes.example_image import install_example_image

    # the templates' Load Image names fillscope_example.png: into ComfyUI's input folder unless a file of that name is
    # there (never overwritten; a failure is logged, start-up goes on)
    install_example_image()

    class FillScopeExtension(ComfyExtension):
        async def get_node_list(self):
            # ComfyUI 0.3.75 calls no on_load; the server's routes are added after this list is read
            add_routes()  # GET /fillscope/live: the Inspect nodes' records of later calls (nodes/live.py)
            record_wires()  # every node's outputs, GET /fillscope/wires (nodes/wires.py; FILLSCOPE_WIRES=off: none)
            add_wires_route()
            return all_nodes()

    return FillScopeExtension()


__all__ = ["WEB_DIRECTORY", "comfy_entrypoint"]
