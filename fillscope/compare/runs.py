"""Running the two sides of a comparison: each RunSpec on its own stack, captured boundary by boundary.

run_spec loads the job's stack as a batch job does (batch.runner.load_stack), applies the run's storage (fp8
blocks, as the loaders' storage option) and attention backend, and runs the family's pipeline (implementation
`fillscope`) or diffusers' own pipeline on the same components (`diffusers`, compare/diffusers_runs.py) with a
BoundaryCapture as its observer. The image compared is the decoded image at the input's size before paste-back (a
paste-back would make the outside of the mask equal by construction). run_compare runs A, then B (a second stack
only when B's models, dtype or storage differ), and lines the captures up (diff.compare_captures).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .capture import BoundaryCapture
from .variants import attention_backend


@dataclass
class RunResult:
    spec: object
    capture: BoundaryCapture
    image: object  # [B,H,W,3] 0..1, the decode at the input's size (no paste-back)
    mask: object  # [B,H,W] what was repainted (the prepared mask at the input's size)
    seconds: float
    facts: dict = field(default_factory=dict)


def _stack_for(spec, device: str, cache: dict):
    from ..batch.runner import load_stack, stack_key

    key = (stack_key(spec.job), spec.storage)
    if key not in cache:
        cache.clear()  # one stack at a time: B's replaces A's when they differ
        stack = load_stack(spec.job, device)
        facts = {}
        if spec.storage == "fp8_e4m3fn":
            from ..fp8 import store_blocks_in_fp8
            from .variants import FP8_COMPONENTS

            for name in FP8_COMPONENTS:
                if name in stack:
                    facts[f"{name} storage"] = store_blocks_in_fp8(stack[name])
        cache[key] = (stack, facts)
    return cache[key]


def run_on_stack(family: str, stack: dict, prompt: str, prepared, *, steps: int, seed: int,
                 implementation: str = "fillscope", blocks: bool = False, attention: str | None = None, spec=None,
                 facts: dict | None = None, **run_kw) -> RunResult:
    """One side of a comparison on a loaded stack: the family's pipeline (`family` = its module name in
    fillscope/pipelines) or diffusers' own (implementation "diffusers"), observed by a BoundaryCapture. run_kw: the
    family's `run` options (guidance, cfg, step_cache, negative_prompt, ...)."""
    from ..pipelines import PIPELINES

    pipeline = next(p for p in PIPELINES.values() if p.__name__.rsplit(".", 1)[-1] == family)
    capture = BoundaryCapture()
    if blocks:
        capture.hook_blocks(stack["transformer"].model)
    start = time.perf_counter()
    try:
        with attention_backend(stack["transformer"], attention):
            image_out = _run(pipeline, family, stack, prompt, prepared, steps, seed, implementation, capture, run_kw)
    finally:
        capture.remove_hooks()
    seconds = time.perf_counter() - start
    repaint = prepared.paste_mask[..., 0]
    facts = {**(facts or {}), **({"attention": attention} if attention else {})}
    return RunResult(spec, capture, image_out.float().cpu(), repaint.float().cpu(), seconds, facts)


def _run(pipeline, family, stack, prompt, prepared, steps, seed, implementation, capture, run_kw):
    if implementation == "diffusers":
        from ..errors import FillScopeInputError
        from .diffusers_runs import run_diffusers

        kw = dict(run_kw)
        callback = kw.pop("callback", None)  # the node's progress: diffusers' loop reports no steps to it
        if kw.pop("step_cache", "off") != "off":
            raise FillScopeInputError("step_cache", "is set on the diffusers run: diffusers' pipeline is run as it "
                                                    "comes, without FillScope's step cache hooks.",
                                      "set step_cache off for the diffusers run (compare caches on FillScope runs).")
        kw.pop("cache_threshold", None)
        image = run_diffusers(family, stack, prompt, prepared, steps=steps, seed=seed, capture=capture, **kw)
        if callback is not None:
            callback(steps, steps)
        return image.permute(0, 2, 3, 1)  # [B,3,H,W] -> IMAGE [B,H,W,3], as FillScope's run gives it
    return pipeline.run(stack, prompt, prepared, steps=steps, seed=seed, observe=capture, **run_kw).image


def prepare_spec(spec):
    """The spec's image and mask as the run reads them (masks.prepare_image_and_mask with the job's mask options)."""
    from ..batch.images import load_image, load_mask
    from ..batch.manifest import mask_options
    from ..masks import prepare_image_and_mask

    job = spec.job
    image, _ = load_image(job.image)
    mask = load_mask(job.mask, job.image)
    mask_kw = {engine: job.options[name] for name, (engine, _) in mask_options().items() if name in job.options}
    return prepare_image_and_mask(image, mask, **mask_kw)


def require_mask(prepared, input_name: str, fix: str) -> None:
    """A comparison's mask repaints something: with an empty mask FillScope's samplers skip sampling and return the
    source (a node warns: nodes/common.py) while diffusers' pipeline samples anyway, so the two runs would do two
    different jobs and every shared boundary would still agree. Refused before any model loads."""
    if prepared.coverage == 0.0:
        from ..errors import FillScopeInputError

        raise FillScopeInputError(input_name, "is empty (after threshold and grow): there is nothing to repaint, so "
                                              "FillScope's run returns the source unchanged without sampling, and the "
                                              "comparison would measure that, not the two runs.", fix)


def run_spec(spec, *, device: str = "auto", cache: dict | None = None, prepared=None) -> RunResult:
    """A RunSpec (a batch job plus how to run it) on its stack (loaded, or the cache's when A's is the same);
    `prepared`: its image and mask, prepared already (prepare_spec)."""
    from ..batch.runner import family_options

    job = spec.job
    prepared = prepare_spec(spec) if prepared is None else prepared
    stack, facts = _stack_for(spec, device, {} if cache is None else cache)
    run_kw = family_options(job)
    if spec.memory:
        from ..placement import placer
        from ..weights import resolve_device

        run_kw["place"] = placer(resolve_device(device, "folder"), spec.memory)
        facts = {**facts, "memory": spec.memory}
    return run_on_stack(job.pipeline.__name__.rsplit(".", 1)[-1], stack, job.prompt, prepared, steps=job.steps,
                        seed=job.seed, implementation=spec.implementation, blocks=spec.blocks,
                        attention=spec.attention, spec=spec, facts=facts, **run_kw)


def run_compare(spec_a, spec_b, *, tolerance: float = 1e-4, device: str = "auto"):
    """(Comparison, RunResult A, RunResult B). Before any model loads: every path of both runs exists
    (spec.check_spec_paths) and both masks repaint something (require_mask)."""
    from .diff import compare_captures
    from .spec import check_spec_paths

    check_spec_paths(spec_a, spec_b)
    prepared = {}
    for spec in (spec_a, spec_b):
        prepared[spec.label] = prepare_spec(spec)
        require_mask(prepared[spec.label], f"{spec.label}.mask",
                     "paint the area to repaint white in the mask; if it is painted, check invert_mask and "
                     "threshold.")
    cache: dict = {}
    spec_a.blocks = spec_b.blocks = spec_a.blocks or spec_b.blocks  # block rows on one side only would compare nothing
    a = run_spec(spec_a, device=device, cache=cache, prepared=prepared[spec_a.label])
    b = run_spec(spec_b, device=device, cache=cache, prepared=prepared[spec_b.label])
    comparison = compare_captures(a.capture, b.capture, tolerance=tolerance, image_a=a.image, image_b=b.image,
                                  mask=a.mask)
    return comparison, a, b
