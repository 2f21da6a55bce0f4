"""FillScope's run and diffusers' own pipeline (fillscope.compare.diffusers_runs) on the same tiny fp32 stacks, captured
boundary by boundary under FillScope's names: every boundary both runs expose agrees within a relative error of 1e-5
(float64 ||ours - theirs|| / ||theirs||; where diffusers' tensor is all zeros, e.g. FLUX's txt_ids, the error is the
absolute norm), for FLUX.1 Fill, SD3 + the inpainting ControlNet (residual_mapping="diffusers", CFG on) and FLUX.2
[klein] (base model: CFG on, with a reference image; token_mask="bilinear"). `pytest -s` prints each family's table."""

from __future__ import annotations

import logging

import pytest
import torch
from tiny_flux import build_tiny_flux_fill_folder
from tiny_klein import build_tiny_klein_folder, uint8_image
from tiny_models import tokenizers_available
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

from fillscope.compare.capture import BoundaryCapture
from fillscope.compare.diffusers_runs import run_diffusers
from fillscope.masks import prepare_image_and_mask
from fillscope.pipelines import flux_fill, klein, sd3_controlnet

TOLERANCE = 1e-5
H, W = 48, 64
PROMPT = "a red brick fireplace in a living room"

# case -> (family, steps, the options both runs take (run_diffusers accepts FillScope's options at diffusers'
# behaviour: residual_mapping "diffusers", token_mask "bilinear"), text outputs that must be among the common names)
SD3_TEXTS = ("clip_l.penultimate", "clip_l.text_embeds", "clip_g.penultimate", "clip_g.text_embeds", "t5.hidden",
             "joint_context", "pooled")
CASES = {
    "flux_fill": ("flux_fill", 3, {"guidance": 30.0}, ("clip_l.pooled", "t5.hidden")),
    "flux_fill denoise 0.6": ("flux_fill", 4, {"guidance": 30.0, "denoise": 0.6}, ("clip_l.pooled", "t5.hidden")),
    "sd3_controlnet": ("sd3_controlnet", 2, {"negative_prompt": "blurry", "cfg": 4.0, "control_scale": 0.8,
                                             "residual_mapping": "diffusers"}, SD3_TEXTS),
    "sd3_controlnet control window": ("sd3_controlnet", 3, {"cfg": 1.0, "control_start": 0.3, "control_end": 0.7,
                                                            "shift": 2.0, "residual_mapping": "diffusers"}, SD3_TEXTS),
    "klein base + reference": ("klein", 3, {"guidance": 3.0, "model_type": "base", "token_mask": "bilinear"},
                               ("prompt_embeds",)),
    "klein distilled strength 0.6": ("klein", 4, {"model_type": "distilled", "strength": 0.6, "token_mask": "bilinear"},
                                     ("prompt_embeds",)),
}
MODULES = {"flux_fill": flux_fill, "sd3_controlnet": sd3_controlnet, "klein": klein}


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    diff = float((ours.double() - theirs.double()).norm())
    norm = float(theirs.double().norm())
    return diff / norm if norm > 0 else diff


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    flux = build_tiny_flux_fill_folder(root / "flux", seed=0)
    sd3 = build_tiny_sd3_folder(root / "sd3", seed=0)
    cn = build_tiny_sd3_controlnet_folder(root / "sd3_cn", seed=0)
    kl = build_tiny_klein_folder(root / "klein", seed=0, distilled=False)
    return {
        "flux_fill": flux_fill.load_stack(flux, tokenizer_folders=(None, None), dtype="fp32", device="cpu"),
        "sd3_controlnet": sd3_controlnet.load_stack(sd3, controlnet=cn, tokenizer_folders=(None, None), dtype="fp32",
                                                    device="cpu"),
        "klein": klein.load_stack(str(kl), tokenizer_folders=(None,), dtype="fp32", device="cpu"),
    }


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(7)
    image = uint8_image(g, H, W)
    mask = torch.zeros(1, H, W)
    mask[:, 8:40, 16:48] = 1.0
    mask[:, 20:24, 4:10] = 0.7  # soft values: both sides binarise at 0.5
    return {"prepared": prepare_image_and_mask(image, mask, threshold=0.5), "reference": uint8_image(g, 32, 48)}


@pytest.fixture(autouse=True)
def quiet_library_logs():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def run_both(case, stacks, inputs):
    """(FillScope's capture, diffusers' capture, FillScope's result, diffusers' image), each capture with the
    transformer's block outputs at every call (BoundaryCapture.hook_blocks: both runs call the same module)."""
    family, steps, options, _ = CASES[case]
    if "reference" in case:
        options = {**options, "reference": inputs["reference"]}
    stack, transformer = stacks[family], stacks[family]["transformer"].model
    ours, theirs = BoundaryCapture(), BoundaryCapture()
    ours.hook_blocks(transformer)
    try:
        done = MODULES[family].run(stack, PROMPT, inputs["prepared"], steps=steps, seed=42, observe=ours, **options)
    finally:
        ours.remove_hooks()
    theirs.hook_blocks(transformer)
    try:
        image = run_diffusers(family, stack, PROMPT, inputs["prepared"], steps=steps, seed=42, capture=theirs,
                              **options)
    finally:
        theirs.remove_hooks()
    return ours, theirs, done, image


@pytest.mark.parametrize("case", list(CASES))
def test_every_common_boundary_agrees_with_diffusers(stacks, inputs, case):
    family, _, _, texts = CASES[case]
    if family == "klein" and not tokenizers_available():
        pytest.skip("ComfyUI tokenizer files not found (klein's Qwen3 tokenizer)")
    ours, theirs, done, image = run_both(case, stacks, inputs)
    steps_run = done.latent.info["steps_run"]
    common = [name for name in ours.names if name in theirs.seen]
    required = {*texts, "transformer.input", "decoded_image",
                *(f"step[{i}].{part}" for i in range(1, steps_run + 1) for part in ("denoiser", "latent"))}
    assert required <= set(common), f"missing from the common boundaries: {sorted(required - set(common))}"
    assert any(n.startswith("transformer.call[") for n in common)
    assert sorted(n for n in theirs.names if n.startswith("step[")) == sorted(n for n in ours.names if n.startswith("step["))

    rows, failures = [], []
    for name in common:
        a, b = ours.seen[name], theirs.seen[name]
        assert a.shape == b.shape, f"{name}: FillScope {a.shape} vs diffusers {b.shape}"
        err = relative_error(a.value, b.value)
        rows.append((name, a.shape, err))
        if not err <= TOLERANCE:
            failures.append(f"{name}: {err:.3g}")
    blocks = [r for r in rows if r[0].startswith("transformer.call[")]
    print(f"\n{case}: {len(common)} common boundaries, {steps_run} steps (measured in this run; relative error, "
          "float64)")
    for name, shape, err in rows:
        if not name.startswith("transformer.call["):
            print(f"  {name:34s} {str(list(shape)):22s} {err:.3e}")
    print(f"  {'transformer.call[k] block outputs':34s} {len(blocks):4d} tensors{'':12s} max {max(r[2] for r in blocks):.3e}")
    print(f"  max over all: {max(r[2] for r in rows):.3e}")
    print(f"  only FillScope: {', '.join(n for n in ours.names if n not in theirs.seen) or '-'}")
    print(f"  only diffusers: {', '.join(n for n in theirs.names if n not in ours.seen) or '-'}")
    assert not failures, f"over {TOLERANCE}: {'; '.join(failures)}"
    # the pipelines' final images agree too ([B,3,H,W] in [0,1])
    assert relative_error(done.image.permute(0, 3, 1, 2), image) <= TOLERANCE


def test_run_diffusers_leaves_the_stack_as_it_was(stacks, inputs):
    """The hooks and instance wraps on FillScope's modules are gone after the call: a second FillScope run observes
    the same values as the first."""
    stack = stacks["flux_fill"]
    first, second = BoundaryCapture(), BoundaryCapture()
    flux_fill.run(stack, PROMPT, inputs["prepared"], steps=1, seed=3, observe=first)
    run_diffusers("flux_fill", stack, PROMPT, inputs["prepared"], steps=1, seed=3, capture=BoundaryCapture())
    flux_fill.run(stack, PROMPT, inputs["prepared"], steps=1, seed=3, observe=second)
    for model in (c.model for c in stack.values()):
        assert not model._forward_hooks and not model._forward_pre_hooks
        assert "decode" not in vars(model) and "encode" not in vars(model)
    assert first.names == second.names
    assert all(torch.equal(first.seen[n].value, second.seen[n].value) for n in first.names)


def test_unknown_family_options_without_a_diffusers_counterpart_and_several_prompts_are_refused(stacks, inputs):
    from fillscope.errors import FillScopeInputError

    def refused(family, prompt=PROMPT, **options):
        with pytest.raises(FillScopeInputError) as e:
            run_diffusers(family, stacks.get(family, stacks["flux_fill"]), prompt, inputs["prepared"], steps=1, seed=0,
                          capture=BoundaryCapture(), **options)
        return e.value

    assert refused("sdxl").input_name == "family"
    e = refused("flux_fill", cfg=3.0)
    assert e.input_name == "options" and "cfg" in e.problem
    assert refused("sd3_controlnet", residual_mapping="one_to_one").input_name == "residual_mapping"
    assert refused("sd3_controlnet", denoise=0.5).input_name == "denoise"
    assert refused("flux_fill", prompt="a cat\n---\na dog").input_name == "prompt"


def test_a_real_difference_shows_first_at_the_boundary_it_reaches(stacks, inputs):
    """FillScope's default residual mapping (residual i after SD3 block i) against diffusers' (block i <- residual
    int(i * 23 / 24)): blocks 0 and 1 get residual 0 in both, block 1 then residual 1 vs 0, so the captures agree up
    to block 1's output and part from block 2's output on, and at transformer.output."""
    stack = stacks["sd3_controlnet"]
    options = {"cfg": 1.0, "control_scale": 0.95}
    ours, theirs = BoundaryCapture(), BoundaryCapture()
    for capture, call in ((ours, lambda: sd3_controlnet.run(stack, PROMPT, inputs["prepared"], steps=1, seed=1,
                                                            observe=ours, residual_mapping="one_to_one", **options)),
                          (theirs, lambda: run_diffusers("sd3_controlnet", stack, PROMPT, inputs["prepared"], steps=1,
                                                         seed=1, capture=theirs, **options))):
        capture.hook_blocks(stack["transformer"].model)
        try:
            call()
        finally:
            capture.remove_hooks()

    def err(name):
        return relative_error(ours.seen[name].value, theirs.seen[name].value)

    block = "transformer.call[1].transformer_blocks.{}".format
    same = ("joint_context", "inpaint_condition", "controlnet.residual[0]", "transformer.input", block(0), block(1))
    parted = (block(2), "transformer.output", "step[1].latent", "decoded_image")
    print("\nSD3 one_to_one (FillScope) vs diffusers' mapping, relative error measured in this run:")
    for name in same + parted:
        print(f"  {name:44s} {err(name):.3e}")
    assert all(err(name) <= TOLERANCE for name in same)
    assert all(err(name) > 1e-3 for name in parted)
