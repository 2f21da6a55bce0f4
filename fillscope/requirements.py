"""The package versions FillScope needs, and the check that runs them at first use.

`DEPENDENCIES` and `OPTIONAL` are the one table: pyproject.toml's [project] dependencies / optional-dependencies
and requirements.txt carry exactly these lines (tests/test_dependency_bounds.py). pip may resolve an older release
than these inside a ComfyUI whose other packs pin something old (an older transformers pulls an older diffusers);
what is missing then would only show as an AttributeError deep inside a run. `check_installed` reads the installed
versions from the packages' metadata (importing none of them, so ComfyUI's start-up stays cheap) the first time a
component loads, and refuses a too-old one naming the package, both versions and the pip command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import FillScopeInputError


@dataclass(frozen=True)
class Requirement:
    name: str  # the distribution's name, as pip and importlib.metadata know it
    minimum: str  # the lowest release the engine's tests passed with
    below: str | None  # an exclusive upper bound, only where the code leans on the package's private modules
    needs: str  # what of it needs `minimum`: told with the refusal

    @property
    def line(self) -> str:
        """The requirement as pyproject.toml and requirements.txt spell it."""
        return f"{self.name}>={self.minimum}" + (f",<{self.below}" if self.below else "")


# Lower bounds: the lowest releases the engine's tests (FLUX.1 Fill, SD3 and klein equivalence, step caches, LoRA,
# weights) passed with, in a venv holding exactly these (numpy 1.26.0, pillow 10.0.0, sentencepiece 0.2.0,
# protobuf 4.25.0, safetensors 0.8.0, diffusers 0.42.0, transformers 5.2.0). Older ones tried and failed: diffusers
# 0.37.0 / 0.38.0 (no Flux2 block in the step caches' registry), transformers 4.51.0 / 4.56.0 / 4.57.6 / 5.0.0 / 5.1.0.
DEPENDENCIES = (
    # torch: 2.13.0 and 2.14.1 passed; kept at 2.4 (unverified below 2.13) so that pip never replaces the torch
    # build a ComfyUI was installed with (its CUDA / ROCm variant) by PyPI's default one
    Requirement("torch", "2.4", None, "torch.distributed.device_mesh, the fp8 dtypes"),
    Requirement("diffusers", "0.42", None,
                "the step caches on the FLUX.2 [klein] transformer (0.41 and older register no Flux2 block), "
                "Flux2KleinInpaintPipeline, MagCacheConfig, TaylorSeerCacheConfig, ContextParallelConfig"),
    Requirement("transformers", "5.2", None,
                "CLIP's hidden states on request and T5's tied embeddings as FillScope builds them (5.0 and 5.1 "
                "give neither), from_pretrained(dtype=...), the Qwen3 rotary embedding"),
    Requirement("safetensors", "0.8", None, "what diffusers 0.42 requires"),
    Requirement("numpy", "1.26", None, "image arrays"),
    Requirement("pillow", "10.0", None, "image files"),
    Requirement("sentencepiece", "0.2", None, "T5's tokenizer"),
    Requirement("protobuf", "4.25", None, "T5's tokenizer files"),
)

OPTIONAL = {
    "test": (Requirement("pytest", "8", None, "the test suite"),
             Requirement("pytest-xdist", "3.8", None, "make test's two workers (tests/suite_plan.py)")),
    # reach.py joins a cluster through Ray's private modules (ray._raylet.GcsClient,
    # ray._private.services.canonicalize_bootstrap_address, ray._common.network_utils.parse_address), which move
    # between minor releases without notice: capped to the minor series the batch tests ran on.
    "cluster": (Requirement("ray", "2.60", "2.61",
                            "batches over a Ray cluster (fillscope/batch/reach.py uses Ray's private modules)"),),
}

# What a component load needs: checked once per process, before any weights are read.
RUNTIME = ("torch", "diffusers", "transformers", "safetensors")

_BY_NAME = {r.name: r for r in DEPENDENCIES + tuple(r for group in OPTIONAL.values() for r in group)}
_checked: set[str] = set()


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: '2.14.1+cpu' -> (2, 14, 1), '5.0.0rc1' -> (5, 0, 0),
    '0.38.0.dev0' -> (0, 38, 0). Pre-releases count as their release: the bounds name releases."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    if match is None:
        raise ValueError(f"no release number in version {version!r}")
    parts = [int(p) for p in match.group(0).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()  # 0.38 == 0.38.0
    return tuple(parts)


def installed_version(name: str) -> str | None:
    """The installed version of a distribution from its metadata (the package is not imported), or None."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def problem(requirement: Requirement, version: str | None) -> str | None:
    """Why `version` does not meet `requirement` (None when it does, or when its number cannot be read)."""
    if version is None:
        return f"{requirement.name} is not installed; FillScope needs {requirement.line} ({requirement.needs})."
    try:
        have = release(version)
    except ValueError:
        return None  # a local build with no release number: nothing to compare, let it run
    if have < release(requirement.minimum):
        return (f"{requirement.name} {version} is installed; FillScope needs {requirement.line} "
                f"({requirement.needs}).")
    if requirement.below is not None and have >= release(requirement.below):
        return (f"{requirement.name} {version} is installed; FillScope is tested with {requirement.line} "
                f"({requirement.needs}).")
    return None


def check_installed(names=RUNTIME) -> None:
    """Refuses the first package in `names` whose installed version is outside its bounds, with the pip command
    that installs one inside them; each package is checked once per process (a lookup of its metadata)."""
    for name in names:
        if name in _checked:
            continue
        requirement = _BY_NAME[name]
        why = problem(requirement, installed_version(name))
        if why is not None:
            raise FillScopeInputError(
                name, why,
                f'run `pip install "{requirement.line}"` in the Python environment ComfyUI runs with (or '
                "`pip install -r requirements.txt` in the FillScope folder), then restart ComfyUI.")
        _checked.add(name)
