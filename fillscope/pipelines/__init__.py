"""One module per model family: the single definition of that family's stages, in order, and `run`, which
calls them. Each module names its FAMILY, TITLE and the COMPONENTS its stack holds. Importing them is cheap
(torch is imported inside the functions)."""

from . import flux_fill, sd3_controlnet

PIPELINES = {pipeline.FAMILY: pipeline for pipeline in (flux_fill, sd3_controlnet)}
