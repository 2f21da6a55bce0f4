"""One module per model family: the single definition of that family's stages, in order, and `run`, which
calls them. Each module names its FAMILY, TITLE and the COMPONENTS its stack holds; a module that runs several
model sizes (klein 4B / 9B) lists them as MODELS, each a name of its own here. Importing them is cheap (torch is
imported inside the functions)."""

from . import flux_fill, klein, sd3_controlnet

PIPELINES = {name: pipeline for pipeline in (flux_fill, sd3_controlnet, klein)
             for name in getattr(pipeline, "MODELS", (pipeline.FAMILY,))}
