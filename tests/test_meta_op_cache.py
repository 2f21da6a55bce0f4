"""fillscope/meta_cache.py: a run on meta weights under the op cache gives what the plain run gives (every
observed boundary shape, every output's shape, stride and dtype), the cache answers repeated calls, and it stays out
of the way where it must: ops that alias or mutate, tensors not on meta, another dispatch mode active (the trace's
FLOP counter and memory estimator), FILLSCOPE_META_OP_CACHE=0."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fillscope import masks
from fillscope.pipelines import flux_fill
from fillscope import meta_cache
from tiny_models import comfy_tokenizer_dirs


def cache_counts():
    cls = meta_cache._mode_class()
    return cls.hits, cls.misses


def small_block(x, w, b):
    """Ops a transformer block asks, twice on the same shapes (the second time from the cache)."""
    outs = []
    for _ in range(2):
        h = torch.nn.functional.linear(x, w, b)
        h = torch.nn.functional.gelu(h, approximate="tanh") + h
        h = torch.cat([h, h], dim=-1).softmax(-1)
        outs.append((h @ h.transpose(-1, -2)).to(torch.bfloat16))
    return outs


def described(t):
    return tuple(t.shape), t.stride(), t.dtype, t.device.type


def test_ops_under_the_cache_give_the_plain_shapes_strides_and_dtypes_and_repeat_from_it():
    x, w, b = (torch.empty(2, 7, 24, device="meta"), torch.empty(40, 24, device="meta"),
               torch.empty(40, device="meta"))
    plain = small_block(x, w, b)
    before = cache_counts()
    with meta_cache.meta_op_cache():
        cached = small_block(x, w, b)
    after = cache_counts()
    assert [described(t) for t in cached] == [described(t) for t in plain]
    assert after[0] > before[0]  # the second pass came from the cache
    assert cached[0].untyped_storage()._cdata != cached[1].untyped_storage()._cdata  # fresh tensors each time


def test_views_and_in_place_ops_run_as_they_are():
    x = torch.empty(4, 6, device="meta")
    with meta_cache.meta_op_cache():
        v = x.view(6, 4)
        y = x.add_(1)
        z = x.t().contiguous()
    assert v.untyped_storage()._cdata == x.untyped_storage()._cdata  # a view still shares its base's storage
    assert y is x
    assert described(z) == ((6, 4), (4, 1), torch.float32, "meta")


def test_tensors_not_on_meta_are_computed():
    a = torch.arange(6.0).reshape(2, 3)
    with meta_cache.meta_op_cache():
        s = (a * 2).sum()
        s2 = (a * 2).sum()
    assert s.item() == s2.item() == 30.0


class CountingMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def test_another_dispatch_mode_sees_every_op_and_the_switch_turns_the_cache_off(monkeypatch):
    x, w, b = (torch.empty(2, 7, 24, device="meta"), torch.empty(40, 24, device="meta"),
               torch.empty(40, device="meta"))
    with CountingMode() as plain:
        small_block(x, w, b)
    with CountingMode() as outer, meta_cache.meta_op_cache():
        small_block(x, w, b)
    assert outer.ops == plain.ops  # the cache stood aside: the outer mode saw every op
    monkeypatch.setenv("FILLSCOPE_META_OP_CACHE", "0")
    before = cache_counts()
    with meta_cache.meta_op_cache():
        small_block(x, w, b)
    assert cache_counts() == before


@pytest.fixture(scope="module")
def flux_meta_stack():
    return flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def run_flux_meta(stack, observe):
    image = torch.rand(1, 512, 768, 3)
    mask = torch.zeros(1, 512, 768)
    mask[:, 128:256, 192:384] = 1
    prepared = masks.prepare_image_and_mask(image, mask)
    return flux_fill.run(stack, "a red brick fireplace", prepared, steps=1, observe=observe).image


def test_a_full_size_flux_fill_run_on_meta_records_the_same_shapes_with_the_cache_and_without(monkeypatch,
                                                                                            flux_meta_stack):
    """flux_fill.run switches the cache on for a meta stack (cached_on_meta): the same boundary shapes, dtypes and
    image as with FILLSCOPE_META_OP_CACHE=0, with the cache answering most of the transformer's calls."""
    stack = flux_meta_stack
    runs = {}
    for switch in ("0", "1"):
        monkeypatch.setenv("FILLSCOPE_META_OP_CACHE", switch)
        seen = {}
        before = cache_counts()
        image = run_flux_meta(stack, lambda name, t: seen.__setitem__(name, (list(t.shape), t.dtype)))
        hits = cache_counts()[0] - before[0]
        runs[switch] = (seen, described(image), hits)
    assert runs["1"][0] == runs["0"][0] and len(runs["0"][0]) >= 12
    assert runs["1"][1] == runs["0"][1] and runs["0"][1][0] == (1, 512, 768, 3)
    assert runs["0"][2] == 0 and runs["1"][2] > 1000


def test_under_the_flop_counter_and_the_memory_estimator_the_cache_changes_no_figure(flux_meta_stack):
    """trace/run.py enters the cache before count_flops' and estimate_peak_memory's modes (they see every op, the
    cache answers the kernels they call): a full-size FLUX Fill denoiser step counts the same FLOPs per module and
    estimates the same resident bytes as without it, and the activation peak within the estimator's own jitter (after a plain warm-up run: a first run builds caches of
    its own)."""
    from fillscope.trace.cost import count_flops, estimate_peak_memory

    stack = flux_meta_stack
    image, mask = masks.synthetic_image_and_mask(512, 384, 0.5)
    prepared = masks.prepare_image_and_mask(image, mask)
    done = flux_fill.run(stack, "a red brick fireplace", prepared, steps=1)
    step = next(fn for label, _, fn in flux_fill.stages(stack, "a red brick fireplace", prepared, done)
                if label == "denoiser step")
    step()
    plain = (count_flops(step), estimate_peak_memory(step))
    before = cache_counts()
    with meta_cache.meta_op_cache():
        cached = (count_flops(step), estimate_peak_memory(step))
    assert cache_counts()[0] - before[0] > 1000  # answered from the cache under both modes
    assert cached[0] == plain[0] and plain[0][0] > 0
    memory = [{k: v for k, v in m["parts"].items() if k != "activations_peak"} for m in (plain[1], cached[1])]
    assert memory[0] == memory[1]
    # the estimator's activation peak moves by a few KiB between two plain runs of the same step (measured: 4,608
    # bytes of 135,830,560, storages' addresses reused in another order), with the cache or without
    peaks = [m["parts"]["activations_peak"] for m in (plain[1], cached[1])]
    assert peaks[0] > 0 and abs(peaks[0] - peaks[1]) <= 64 * 1024, peaks
