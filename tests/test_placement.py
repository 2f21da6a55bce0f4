"""Memory policies: where weights live during and after a use, and that the results do not change."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
import torch

from fillscope import masks, placement
from fillscope.pipelines import flux_fill
from tiny_flux import build_tiny_flux_fill_folder


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("tiny") / "f", seed=0)
    return flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")


def run(stack, policy):
    image, mask = masks.synthetic_image_and_mask(64, 48, 0.5)
    # stage by stage, each under the policy, as the nodes place them
    done = flux_fill.run(stack, "a cat", masks.prepare_image_and_mask(image, mask), steps=2,
                         place=placement.placer("cpu", policy))
    return done.latent.latents


def test_every_policy_gives_the_same_latents(stack):
    reference = run(stack, "keep")
    for policy in ("auto", "offload", "sequential"):
        assert torch.equal(run(stack, policy), reference), policy


def test_auto_leaves_a_component_resident_after_use_and_offload_sends_it_back(stack):
    vae_ = stack["vae"]
    with placement.in_use(vae_, "cpu", "auto"):
        pass
    assert placement.RESIDENCY.is_resident(vae_)
    with placement.in_use(vae_, "cpu", "offload"):
        assert placement.RESIDENCY.is_resident(vae_)
    assert not placement.RESIDENCY.is_resident(vae_)


def test_evictions_go_least_recently_used_first_and_spare_kept_components():
    # (key, bytes, last used, evictable): "kept" is a `keep` component, never sent back by the budget
    others = [("vae", 1, 3, True), ("t5", 9, 1, True), ("kept", 5, 0, False), ("clip", 1, 1, True)]
    assert placement.plan_evictions(22, others, budget=22) == ["t5", "clip", "vae"]
    assert placement.plan_evictions(10, others, budget=22) == ["t5"]
    assert placement.plan_evictions(4, others, budget=22) == []


def _flux_prompt(st):
    return [("text", [st["clip_l"], st["t5"]]), ("encode", [st["vae"]]), ("denoise", [st["transformer"]]),
            ("decode", [st["vae"]])]


def _sd3_prompt(st):
    return [("text", [st["clip_l"], st["clip_g"], st["t5"]]), ("encode", [st["vae"]]),
            ("denoise", [st["transformer"], st["controlnet"]]), ("decode", [st["vae"]])]


@pytest.fixture(scope="module")
def meta_stacks():
    from fillscope.pipelines import PIPELINES
    from tiny_models import comfy_tokenizer_dirs

    return {name: PIPELINES[name].load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs(), dtype="bf16")
            for name in ("flux-fill", "sd3-controlnet-inpaint")}


def test_auto_never_holds_more_than_the_largest_component_or_the_current_use(meta_stacks):
    for name, prompt in (("flux-fill", _flux_prompt), ("sd3-controlnet-inpaint", _sd3_prompt)):
        st = meta_stacks[name]
        largest = max(placement.weight_bytes(c.model) for c in st.values())
        uses = prompt(st) + prompt(st)
        for use, (label, group) in zip(placement.replay(uses, "auto"), uses):
            needed = sum(placement.weight_bytes(c.model) for c in group)
            assert use["resident_bytes"] <= max(largest, needed), (name, label)


def test_auto_samples_flux_fill_with_the_transformer_alone_and_keeps_sd3_denoisers_for_decode(meta_stacks):
    flux = meta_stacks["flux-fill"]
    uses = placement.replay(_flux_prompt(flux) * 2, "auto")
    denoise = [u for u in uses if u["use"] == "denoise"]
    assert all(u["resident_bytes"] == placement.weight_bytes(flux["transformer"].model) for u in denoise)
    assert uses[-1]["sent_back"] == ["flux_fill_transformer"]  # its decode would otherwise pass the step's peak

    sd3 = meta_stacks["sd3-controlnet-inpaint"]
    again = [("denoise", [sd3["transformer"], sd3["controlnet"]]), ("decode", [sd3["vae"]])]
    uses = placement.replay(_sd3_prompt(sd3) + again, "auto")
    assert [u["loaded_bytes"] for u in uses[-2:]] == [0, 0]  # a new seed moves nothing


def _round_trip(comp, to_compute):
    copy = placement._host_copy(comp) or placement._make_host_copy(comp)
    before = {n: p.data_ptr() for n, p in comp.model.named_parameters()}
    values = comp.model.shared.weight.clone()
    to_compute(copy)
    moved = {n: p.data_ptr() for n, p in comp.model.named_parameters()}
    assert comp.model.shared.weight is comp.model.encoder.embed_tokens.weight  # ties survive
    copy.point_to_host()
    assert {n: p.data_ptr() for n, p in comp.model.named_parameters()} == before
    assert torch.equal(comp.model.shared.weight, values)
    return before, moved


def test_going_back_points_at_the_kept_cpu_tensors_instead_of_copying(stack):
    """Offload by pointer: the compute copies (clones stand in for GPU tensors on this CPU machine) are dropped
    and every parameter points at its kept CPU tensor again, tied ones included."""
    def clone_all(copy):
        for p, host in copy.params.values():
            p.data = host.clone()

    before, moved = _round_trip(stack["t5"], clone_all)
    assert not set(before.values()) & set(moved.values())


@pytest.mark.cuda  # (run by bench/gpu_memory.py's machine)
def test_cuda_round_trip_by_pointer_from_pinned_memory(stack):
    t5 = stack["t5"]
    _round_trip(t5, lambda copy: copy.copy_to("cuda"))
    assert all(p.is_pinned() for p in t5.model.parameters())


def test_a_move_that_fails_half_way_leaves_every_weight_in_cpu_memory(stack, monkeypatch):
    """Out of memory half-way through bringing a component in must not leave it half on the device: every
    parameter points at its CPU copy again and the component says it is on the CPU. (This machine has no GPU:
    the per-tensor copy is replaced by one that clones, then fails like the allocator would.)"""
    tr = stack["transformer"]
    copy = placement._host_copy(tr) or placement._make_host_copy(tr)
    before = {n: p.data_ptr() for n, p in tr.model.named_parameters()}
    copied = []

    def copy_then_run_out(param, host, device):
        if len(copied) == len(copy.params) // 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected half-way through the move)")
        copied.append(host.clone())
        return copied[-1]

    monkeypatch.setattr(placement, "_copy_like", copy_then_run_out)
    with pytest.raises(torch.OutOfMemoryError):
        placement.move(tr, "cuda")
    assert copied and tr.device == "cpu"
    assert {n: p.data_ptr() for n, p in tr.model.named_parameters()} == before


def test_replay_takes_the_decisions_the_engine_path_takes(stack, monkeypatch):
    """The meta estimate (bench_memory_policies) replays uses through `replay`; the engine's `in_use` must keep
    the same components resident, use by use (here the tiny components, where CLIP-L is the largest)."""
    uses = [("text", [stack["clip_l"], stack["t5"]]), ("encode", [stack["vae"]]), ("denoise", [stack["transformer"]]),
            ("decode", [stack["vae"]])] * 2
    monkeypatch.setattr(placement, "RESIDENCY", placement.Residency())
    for comp in stack.values():
        placement.RESIDENCY.register(comp)  # as the loaders do
    seen = []
    for _, group in uses:
        with ExitStack() as ctx:
            for comp in group:
                ctx.enter_context(placement.in_use(comp, "cpu", "auto"))
            seen.append(placement.RESIDENCY.resident_bytes())
    expected = [u["resident_bytes"] for u in placement.replay([(label, group) for label, group in uses], "auto")]
    assert seen == expected
    assert any(u["sent_back"] for u in placement.replay(uses, "auto"))  # the budget did bite


def test_sequential_hooks_are_gone_after_the_use(stack):
    tr = stack["transformer"]
    with placement.in_use(tr, "cpu", "sequential"):
        hooked = sum(len(m._forward_pre_hooks) for m in tr.model.modules())
    assert hooked > 0
    assert sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in tr.model.modules()) == 0
    assert tr.device == "cpu"


def test_unknown_policy_names_the_input():
    from fillscope.errors import FillScopeInputError

    with pytest.raises(FillScopeInputError, match="'memory'"):
        placement.resolve_policy("fast")
