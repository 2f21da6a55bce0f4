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

    key = (stack_key(spec.job), spec.storage, spec.attention)
    if key not in cache:
        cache.clear()  # one stack at a time: B's replaces A's when they differ
        stack = load_stack(spec.job, device)
        facts = {}
        if spec.storage == "fp8_e4m3fn":
            from ..fp8 import store_blocks_in_fp8

            for name in ("transformer", "t5", "qwen3"):
                if name in stack:
                    facts[f"{name} storage"] = store_blocks_in_fp8(stack[name])
        if spec.attention:
            _set_attention(stack["transformer"], spec.attention)
            facts["attention"] = spec.attention
        cache[key] = (stack, facts)
    return cache[key]


def _set_attention(comp, backend: str) -> None:
    from ..errors import FillScopeInputError

    model = comp.model
    if not hasattr(model, "set_attention_backend"):
        raise FillScopeInputError("attention", f"this diffusers version's {type(model).__name__} has no attention "
                                               "backends to choose from.", "leave attention out of the spec.")
    try:
        model.set_attention_backend(backend)
    except (ValueError, ImportError, RuntimeError) as e:
        raise FillScopeInputError("attention", f"is {backend!r}: diffusers refused it ({e}).",
                                  "name a backend diffusers offers here, e.g. \"native\" or \"_native_math\".") from None


def run_spec(spec, *, device: str = "auto", cache: dict | None = None) -> RunResult:
    from ..batch.images import load_image, load_mask
    from ..batch.manifest import mask_options
    from ..batch.runner import family_options
    from ..masks import prepare_image_and_mask

    job = spec.job
    image, _ = load_image(job.image)
    mask = load_mask(job.mask, job.image)
    mask_kw = {engine: job.options[name] for name, (engine, _) in mask_options().items() if name in job.options}
    prepared = prepare_image_and_mask(image, mask, **mask_kw)
    run_kw = family_options(job)
    stack, facts = _stack_for(spec, device, {} if cache is None else cache)
    capture = BoundaryCapture()
    if spec.blocks:
        capture.hook_blocks(stack["transformer"].model)
    start = time.perf_counter()
    try:
        if spec.implementation == "diffusers":
            from .diffusers_runs import run_diffusers

            image_out = run_diffusers(job.pipeline.__name__.rsplit(".", 1)[-1], stack, job.prompt, prepared,
                                      steps=job.steps, seed=job.seed, capture=capture, **run_kw)
        else:
            done = job.pipeline.run(stack, job.prompt, prepared, steps=job.steps, seed=job.seed, observe=capture,
                                    **run_kw)
            image_out = done.image
    finally:
        capture.remove_hooks()
    seconds = time.perf_counter() - start
    repaint = prepared.paste_mask[..., 0] if prepared.paste_mask is not None else mask
    return RunResult(spec, capture, image_out.float().cpu(), repaint.float().cpu(), seconds, facts)


def run_compare(spec_a, spec_b, *, tolerance: float = 1e-4, device: str = "auto"):
    """(Comparison, RunResult A, RunResult B)."""
    from .diff import compare_captures

    cache: dict = {}
    spec_a.blocks = spec_b.blocks = spec_a.blocks or spec_b.blocks  # block rows on one side only would compare nothing
    a = run_spec(spec_a, device=device, cache=cache)
    b = run_spec(spec_b, device=device, cache=cache)
    comparison = compare_captures(a.capture, b.capture, tolerance=tolerance, image_a=a.image, image_b=b.image,
                                  mask=a.mask)
    return comparison, a, b
