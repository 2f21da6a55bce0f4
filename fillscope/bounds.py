"""The bounds of every number a user gives FillScope, in one table: the node schemas read their min/max from here,
and the batch manifest (batch/manifest.py) and the command line (cli.py) check the same fields against the same
bounds before any model loads (tests/test_manifest_bounds.py walks every node schema against this table).

Each table maps an input's name (the node input's name, which the manifest's key repeats) to its Range.
`number_problem` and `text_problem` say what is wrong with a value, in the words the messages use. A whole number may
come as an integral float (1024.0: JSON writers and some nodes write one); `whole_value` turns it into the int it is."""

from __future__ import annotations

import math
from typing import NamedTuple


class Range(NamedTuple):
    min: int | float
    max: int | float

    @property
    def whole(self) -> bool:
        """Whole numbers only (an INT input): both ends are ints."""
        return isinstance(self.min, int) and isinstance(self.max, int)

    def __str__(self) -> str:
        return f"{_num(self.min)} to {_num(self.max)}"


SEED = Range(0, 2**63 - 1)
STEPS = Range(1, 200)
# the mask inputs every condition node takes (nodes/common.py), the manifest's mask options
MASK = {"threshold": Range(0.0, 1.0), "grow": Range(0, 256), "feather": Range(0, 128)}
STEP_CACHE = {"cache_threshold": Range(0.0, 10.0)}  # the step-cache inputs of the FLUX Fill and klein samplers
# each sampler node's numbers, by pipeline (pipelines.PIPELINES' names)
FLUX_FILL = {"seed": SEED, "steps": STEPS, "guidance": Range(0.0, 100.0), "denoise": Range(0.01, 1.0), **STEP_CACHE}
SD3_CONTROLNET = {"seed": SEED, "steps": STEPS, "cfg": Range(1.0, 30.0), "control_scale": Range(0.0, 2.0),
                  "control_start": Range(0.0, 1.0), "control_end": Range(0.0, 1.0), "shift": Range(0.1, 20.0),
                  "denoise": Range(0.01, 1.0)}
KLEIN = {"seed": SEED, "steps": STEPS, "guidance": Range(0.0, 30.0), "strength": Range(0.01, 1.0), **STEP_CACHE}
SAMPLERS = {"flux-fill": FLUX_FILL, "sd3-controlnet-inpaint": SD3_CONTROLNET, "klein-4b": KLEIN, "klein-9b": KLEIN}
# the trace nodes' image size (`python -m fillscope trace --size WIDTHxHEIGHT`)
TRACE = {"width": Range(16, 8192), "height": Range(16, 8192)}
# the batch node's workers, resident stacks and seconds to wait for a Ray cluster (`python -m fillscope batch
# --workers N --max-resident N --connect-timeout SECONDS`)
BATCH = {"workers": Range(1, 64), "max_resident": Range(1, 16), "connect_timeout": Range(1, 600)}
# tiled sampling (fillscope/tiled/, compositing/tiles.py): a tile's side in px (a multiple of 16; 256 px is 256
# tokens, below which FLUX's schedule is extrapolated; 4096 px is 65,536 tokens) and the fraction of it shared
# with a neighbour (0.5: every pixel sampled twice on each axis)
TILED = {"tile": Range(256, 4096), "overlap": Range(0.0, 0.5)}
# Crop For Inpaint's options beyond the box (compositing/crop_masks.py, crop_boxes.py, crop_split.py)
CROP = {"target": Range(64, 4096), "threshold": Range(0.0, 1.0), "grow": Range(0, 1024), "blend_outside": Range(0, 1024),
        "width": Range(16, 8192), "height": Range(16, 8192), "min_side": Range(0, 8192), "max_side": Range(0, 8192),
        "multiple": Range(1, 512), "min_scale": Range(0.0, 4.0)}
# Compare Runs (compare/): the job both runs share
COMPARE = {"seed": SEED, "steps": STEPS}


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def number_problem(value, bounds: Range) -> str | None:
    """Why `value` is no valid number within `bounds` (None when it is): not a number (a bool is none), a
    fraction where a whole number is wanted (an integral float such as 1024.0 is a whole number), NaN or infinite,
    below or above the range."""
    whole = bounds.whole
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a whole number" if whole else "must be a number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"is not a finite number; give one from {bounds}"
    if whole and isinstance(value, float) and not value.is_integer():
        return f"must be a whole number from {bounds}"
    if not bounds.min <= value <= bounds.max:
        return f"is {'below' if value < bounds.min else 'above'} the range {bounds}"
    return None


def whole_value(value):
    """An integral float (1024.0) as the int it is, for a field number_problem accepted as whole; else `value`."""
    return int(value) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else value


def text_problem(value) -> str | None:
    """Why `value` is no text FillScope can use (None when it is): not a string, a NUL character, a lone
    surrogate (half of a character: no tokeniser or file system takes it). The node inputs are checked alike."""
    if not isinstance(value, str):
        return "must be a string"
    if "\x00" in value:
        return f"holds a NUL character (\\x00) at position {value.index(chr(0))}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"holds a lone surrogate at position {e.start} (half of a character, not valid Unicode)"
    return None


def path_problem(value) -> str | None:
    """Why `value` is no usable path (None when it is): text_problem's, or empty."""
    if isinstance(value, str) and not value.strip():
        return "is empty"
    return text_problem(value)
