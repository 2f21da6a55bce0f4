"""Single-file checkpoints: what a .safetensors file is, from its header alone, and loading one component out of it.

- header.py: reading the safetensors header; pickles, GGUF and truncated files refused before anything is loaded.
- detect.py: `sniff(path)` / `classify(header)`: the components a file holds (`Part`s: key prefix, on-disk layout,
  the config its shapes say; family readers in flux.py, sd3.py, klein.py (FLUX.2 [klein] transformer, Qwen3, the
  LLM encoders and DiTs met next to them), vae.py (16-channel and FLUX.2 VAEs), text_encoders.py, shape and hint
  helpers in shapes.py), or what it is and which kind of loader takes it (info.py).
- wrong_kind.py: the error for a file of another kind, naming loaders through a caller's `describe`.
- convert.py: file keys -> model keys (FLUX.1 and FLUX.2 BFL plans, diffusers' SAI/LDM converters, ComfyUI's scaled
  and mixed-precision fp8).
- assemble.py: `load_single_file(kind, path, ...)`: the model built on meta, the part's tensors assigned (Qwen3:
  only the layers FLUX.2 [klein] reads, specs.qwen3_kept_config).
"""

from .assemble import load_part, load_single_file
from .convert import Move, convert_part, flux_bfl_plan, klein_bfl_plan
from .detect import classify, sniff
from .header import (
    DTYPE_NAMES, FP8_CODES, OTHER_SUFFIXES, PICKLE_SUFFIXES, SAFE_SUFFIXES, WEIGHT_SUFFIXES, TensorInfo, is_single_file,
    read_header, refuse_unsafe_suffix,
)
from .info import OTHER_LOADERS, CheckpointInfo, Part
from .shapes import HINT_KEY
from .wrong_kind import WANTS, WrongKindError, engine_loader_name, take_with_text, wrong_kind_error

__all__ = [
    "DTYPE_NAMES", "FP8_CODES", "HINT_KEY", "OTHER_LOADERS", "OTHER_SUFFIXES", "PICKLE_SUFFIXES", "SAFE_SUFFIXES",
    "WANTS", "WEIGHT_SUFFIXES", "CheckpointInfo", "Move", "Part", "TensorInfo", "WrongKindError", "classify",
    "convert_part", "engine_loader_name", "flux_bfl_plan", "is_single_file", "klein_bfl_plan", "load_part", "load_single_file",
    "read_header", "refuse_unsafe_suffix", "sniff", "take_with_text", "wrong_kind_error",
]
