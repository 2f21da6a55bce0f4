"""Opt-in speed settings for the FLUX.1 Fill and FLUX.2 [klein] transformers, each switched on for one sampling run
and off again (the model computes as before afterwards, bit for bit).

- `step_cache(model, kind, steps, threshold)`: diffusers' step caches (hooks/first_block_cache.py, mag_cache.py,
  taylorseer_cache.py) reuse the transformer's work of an earlier step when it changes little: `first-block`
  (FirstBlockCache: the first block's residual decides whether the others run; threshold 0.05 by default),
  `mag` (MagCache with diffusers' FLUX.1 [dev] magnitude ratios, interpolated to the step count; threshold 0.06;
  klein uses the same ratios, not calibrated for it),
  `taylorseer` (TaylorSeer: the attention outputs extrapolated between full steps, every 5th step computed). A
  cache trades quality for speed: what it skipped is counted (`StepCacheCount`: the last block's computations
  against the transformer's calls) and reported beside the result; the quality cost is measured in bench/.
  SD3's transformer has no step cache in diffusers, and FirstBlockCache cannot run klein's blocks: both refused.
- `fused_qkv(model)`: q, k and v of every attention as one matmul (diffusers' fuse_qkv_projections), lossless up to
  summation order.
- `compile_repeated_blocks(model)`: regional torch.compile (diffusers' compile_repeated_blocks: each repeated block
  class compiled once, fullgraph), once per model; not undone (the compiled blocks stay). Checked against eager on
  CPU (tests/test_step_cache.py); its speed is a GPU question (bench/gpu_speed.py).

What the samplers use: sample_flux_fill / sample_klein take `step_cache` and `cache_threshold` ("off": none of this
runs, the sampler is unchanged bit for bit).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

from .errors import FillScopeInputError

STEP_CACHES = ("off", "first-block", "mag", "taylorseer")
DEFAULT_THRESHOLDS = {"first-block": 0.05, "mag": 0.06}  # diffusers' defaults
# (cache, model class) pairs diffusers cannot run, measured: its FirstBlockCache subtracts the first block's input
# from its output, and FLUX.2's double block returns a pair it cannot subtract (diffusers 0.42.1: TypeError)
CANNOT_RUN = {("first-block", "Flux2Transformer2DModel"): "diffusers' FirstBlockCache cannot run FLUX.2's blocks"}
KLEIN_STEP_CACHES = tuple(k for k in STEP_CACHES if (k, "Flux2Transformer2DModel") not in CANNOT_RUN)
TAYLORSEER_INTERVAL = 5  # a full step every 5 (diffusers' default cache_interval)
TAYLORSEER_WARMUP = 3  # the first 3 steps always computed (diffusers' default disable_cache_before_step)


def check_step_cache(kind, threshold=None) -> None:
    if kind not in STEP_CACHES:
        raise FillScopeInputError("step_cache", f"is {kind!r}.", f"use one of {', '.join(STEP_CACHES)}.")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold) \
                or threshold < 0:
            raise FillScopeInputError("cache_threshold", f"is {threshold!r}.",
                                      "give a finite number of 0 or more (first-block at 0 never skips; the default: "
                                      f"{DEFAULT_THRESHOLDS.get(kind, 'none')}).")


def cache_config(kind: str, steps: int, threshold: float | None = None):
    """The diffusers config of a step cache for a run of `steps` steps."""
    from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig

    check_step_cache(kind, threshold)
    if kind == "first-block":
        return FirstBlockCacheConfig(threshold=DEFAULT_THRESHOLDS[kind] if threshold is None else float(threshold))
    if kind == "mag":
        from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

        return MagCacheConfig(threshold=DEFAULT_THRESHOLDS[kind] if threshold is None else float(threshold),
                              num_inference_steps=steps, mag_ratios=FLUX_MAG_RATIOS)
    if kind == "taylorseer":
        import torch

        return TaylorSeerCacheConfig(cache_interval=TAYLORSEER_INTERVAL, disable_cache_before_step=TAYLORSEER_WARMUP,
                                     taylor_factors_dtype=torch.float32)
    raise FillScopeInputError("step_cache", f"is {kind!r}: no cache to configure.", "use first-block, mag or taylorseer.")


@dataclass
class StepCacheCount:
    """How often the transformer's last block really ran, against how often the transformer was called."""

    kind: str
    threshold: float | None
    calls: int = 0
    computed: int = 0

    def facts(self) -> dict:
        skipped = self.calls - self.computed
        return {"step_cache": self.kind, "cache_threshold": self.threshold, "transformer_calls": self.calls,
                "last_block_computed": self.computed, "last_block_skipped": skipped}


def _last_linear(model):
    """The last nn.Linear of the transformer's last single block: it runs only when that block really computes."""
    import torch

    blocks = getattr(model, "single_transformer_blocks", None)
    if not blocks:
        return None
    linears = [m for m in blocks[-1].modules() if isinstance(m, torch.nn.Linear)]
    return linears[-1] if linears else None


@contextlib.contextmanager
def step_cache(model, kind: str = "off", steps: int = 28, threshold: float | None = None):
    """The step cache on `model` for the block (None when kind is "off"); yields its StepCacheCount."""
    check_step_cache(kind, threshold)
    if kind == "off":
        yield None
        return
    from diffusers import CacheMixin

    if not isinstance(model, CacheMixin):
        raise FillScopeInputError("step_cache", f"is {kind!r}, and diffusers has no step cache for "
                                                f"{type(model).__name__}.", "set step_cache to off for this model.")
    why = CANNOT_RUN.get((kind, type(model).__name__))
    if why:
        raise FillScopeInputError("step_cache", f"is {kind!r}: {why}.", "use mag or taylorseer for this model.")
    count = StepCacheCount(kind, DEFAULT_THRESHOLDS.get(kind) if threshold is None else float(threshold))

    def on_call(*_):
        count.calls += 1

    def on_compute(*_):
        count.computed += 1

    handles = [model.register_forward_pre_hook(on_call)]
    last = _last_linear(model)
    if last is not None:
        handles.append(last.register_forward_pre_hook(on_compute))
    model.enable_cache(cache_config(kind, steps, threshold))
    try:
        yield count
    finally:
        model.disable_cache()
        for h in handles:
            h.remove()


def cache_context(model, count: StepCacheCount | None, name: str):
    """The cache's state for one kind of call (diffusers keeps one per context: "cond", "uncond"), as diffusers'
    pipelines set it around each transformer call; nothing when no cache runs."""
    return model.cache_context(name) if count is not None else contextlib.nullcontext()


def check_with_parallel(kind: str, parallel: int) -> None:
    if kind != "off" and parallel != 1:
        raise FillScopeInputError("step_cache", f"is {kind!r} with parallel {parallel}: the two have not been checked "
                                                "together.", "use one of them (step_cache off, or parallel 1).")


@contextlib.contextmanager
def fused_qkv(model, enabled: bool = True):
    """q, k, v as one projection for the block (diffusers' fuse_qkv_projections), separate again after."""
    if not enabled:
        yield model
        return
    if not hasattr(model, "fuse_qkv_projections"):
        raise FillScopeInputError("fuse_qkv", f"{type(model).__name__} cannot fuse its projections.",
                                  "switch fuse_qkv off for this model.")
    model.fuse_qkv_projections()
    try:
        yield model
    finally:
        model.unfuse_qkv_projections()


def compile_repeated_blocks(model) -> bool:
    """Regional torch.compile of the model's repeated blocks, once (True when this call compiled them). The compile
    itself happens at the next forward."""
    if getattr(model, "_fillscope_compiled", False):
        return False
    if not getattr(model, "_repeated_blocks", None):
        raise FillScopeInputError("compile", f"{type(model).__name__} names no repeated blocks to compile.",
                                  "switch compile off for this model.")
    model.compile_repeated_blocks(fullgraph=True)
    model._fillscope_compiled = True
    return True
