"""Reading a header's key patterns and shapes, and the config hints a file may carry.

What shapes cannot tell (attention heads where no qk-norm weight gives the head width, FLUX's rope axes, the VAE's
group-norm groups) takes the real models' values (head width 64 for SD3 and CLIP, rope (16, 56, 56) for head width
128, 32 groups); a file of other sizes (a test model) says it in its safetensors metadata under HINT_KEY, a JSON
object of config values (flat, or per component: {"<component>": {...}}).
"""

from __future__ import annotations

import json
import re

from ..specs import COMPONENTS

HINT_KEY = "fillscope.config"
HINTABLE = {"axes_dims_rope", "num_attention_heads", "attention_head_dim", "sample_size", "norm_num_groups",
            "hidden_act", "layer_norm_eps", "layer_norm_epsilon", "eos_token_id", "bos_token_id", "pad_token_id"}


class Keys:
    """Key/shape queries over a header, relative to a prefix."""

    def __init__(self, tensors: dict, prefix: str = ""):
        self.t = tensors
        self.p = prefix

    def has(self, key: str) -> bool:
        return self.p + key in self.t

    def shape(self, key: str):
        info = self.t.get(self.p + key)
        return info.shape if info is not None else None

    def count(self, block_prefix: str) -> int:
        """Number of blocks 'block_prefix.N.' (N = 0.. max)."""
        pat = re.compile(re.escape(self.p + block_prefix) + r"(\d+)\.")
        found = {int(m.group(1)) for k in self.t if (m := pat.match(k))}
        return max(found) + 1 if found else 0

    def indices(self, pattern: str) -> list[int]:
        pat = re.compile(re.escape(self.p) + pattern)
        return sorted({int(m.group(1)) for k in self.t if (m := pat.fullmatch(k))})

    def any_startswith(self, s: str) -> bool:
        full = self.p + s
        return any(k.startswith(full) for k in self.t)


def read_hints(metadata: dict) -> dict:
    """The config hints in a file's metadata ({} when there are none or they are not a JSON object)."""
    raw = metadata.get(HINT_KEY)
    if not raw:
        return {}
    try:
        hints = json.loads(raw)
        return hints if isinstance(hints, dict) else {}
    except ValueError:
        return {}


def hints_for(hints: dict, component: str) -> dict:
    """The hints for one component: `{"<component>": {...}}` entries over flat (file-wide) ones."""
    flat = {k: v for k, v in hints.items() if k not in COMPONENTS}
    own = hints.get(component)
    return {**flat, **own} if isinstance(own, dict) else flat


def apply_hints(config: dict, hints: dict) -> dict:
    return {**config, **{k: v for k, v in hints.items() if k in config or k in HINTABLE}}


def attention_heads(width: int, head_dim: int | None, hints: dict, key: str = "num_attention_heads") -> tuple[int, int]:
    """(heads, head width) of an attention of `width`: from the hints, else from a known head width, else 64."""
    if key in hints:
        n = int(hints[key])
        return n, width // n
    if head_dim is None:
        head_dim = int(hints.get("attention_head_dim", 64))
    if width % head_dim:
        raise ValueError(f"width {width} is not a multiple of the head width {head_dim}")
    return width // head_dim, head_dim
