"""Memory policies: where weights live during and after a use, and that the results do not change."""

from __future__ import annotations

import pytest
import torch

from fillscope import flux_fill, masks, placement, text, vae
from tiny_flux import build_tiny_flux_fill_folder


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("tiny") / "f", seed=0)
    kw = dict(dtype="fp32", device="cpu")
    return {"clip_l": text.load_clip_l(folder, **kw), "t5": text.load_t5(folder, **kw),
            "transformer": flux_fill.load_flux_fill_transformer(folder, **kw), "vae": vae.load_vae(folder, **kw)}


def run(stack, policy):
    image, mask = masks.synthetic_image_and_mask(64, 48, 0.5)
    with placement.in_use(stack["clip_l"], "cpu", policy), placement.in_use(stack["t5"], "cpu", policy):
        clip, t5 = text.encode_clip(stack["clip_l"], "a cat"), text.encode_t5(stack["t5"], "a cat")
    with placement.in_use(stack["vae"], "cpu", policy):
        cond = flux_fill.build_fill_condition(stack["vae"], masks.prepare_image_and_mask(image, mask))
    with placement.in_use(stack["transformer"], "cpu", policy):
        out = flux_fill.sample_flux_fill(stack["transformer"], text.flux_text_condition(t5, clip), cond, steps=2)
    return out.latents


def test_every_policy_gives_the_same_latents(stack):
    reference = run(stack, "keep")
    for policy in ("auto", "offload", "sequential"):
        assert torch.equal(run(stack, policy), reference), policy


def test_auto_offloads_encoders_and_keeps_denoisers():
    assert placement.resolve_policy("auto", "t5_xxl") == "offload"
    assert placement.resolve_policy("auto", "flux_vae") == "offload"
    assert placement.resolve_policy("auto", "flux_fill_transformer") == "keep"
    assert placement.resolve_policy("auto", "sd3_controlnet") == "keep"


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
        placement.resolve_policy("fast", "t5_xxl")
