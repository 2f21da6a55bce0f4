"""FillScope engine: FLUX.1 Fill (and later SD3 ControlNet inpainting, FLUX.2 klein) on diffusers, with shape
records. Importable without ComfyUI; torch, diffusers and transformers are imported lazily."""

__version__ = "0.1.0"
