"""FillScope's SD3 ControlNet inpainting path equals diffusers' StableDiffusion3ControlNetInpaintingPipeline on the
same tiny fp32 folders, image, mask, prompts and seed when the residual mapping is switched to diffusers' (VAE
encode by the mean in both), and with the default 1:1 mapping each of the 23 residuals reaches exactly the MMDiT
block of the same index, once. The equality also holds on "narrow" folders whose widths are not the published ones
(tiny_sd3.narrow_config: an 8-channel VAE at 1/4, transformer and ControlNet in/out 8, condition 8 + 1), which
FillScope must take from the loaded configs as diffusers does."""

from __future__ import annotations

import pytest
import torch

from fillscope import masks
from fillscope.pipelines import sd3_controlnet
from fillscope.sampling import static_shift_sigmas
from tiny_sd3 import (
    NARROW_LATENT_CHANNELS, build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder, load_sd3_inpaint_pipeline,
    run_diffusers_sd3_inpaint,
)

H, W = 48, 64
PROMPT, NEGATIVE = "a red brick fireplace in a living room", "blurry"


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("sd3")
    return build_tiny_sd3_folder(root / "sd3", seed=0), build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0)


@pytest.fixture(scope="module")
def stack(folders):
    sd3, cn = folders
    return sd3_controlnet.load_stack(sd3, controlnet=cn, tokenizer_folders=(None, None), dtype="fp32", device="cpu")


@pytest.fixture(scope="module")
def pipe(folders):
    return load_sd3_inpaint_pipeline(*folders)


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """(stack, pipe) of the narrow folders."""
    root = tmp_path_factory.mktemp("sd3_narrow")
    sd3 = build_tiny_sd3_folder(root / "sd3", seed=0, narrow=True)
    cn = build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0, narrow=True)
    stack = sd3_controlnet.load_stack(sd3, controlnet=cn, tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    return stack, load_sd3_inpaint_pipeline(sd3, cn)


def stack_and_pipe(request, widths):
    if widths == "narrow":
        return request.getfixturevalue("narrow")
    return request.getfixturevalue("stack"), request.getfixturevalue("pipe")


@pytest.fixture(scope="module")
def prepared():
    g = torch.Generator().manual_seed(5)
    image = torch.rand(1, H, W, 3, generator=g)
    mask = torch.zeros(1, H, W)
    mask[:, 8:40, 16:48] = 1.0
    return masks.prepare_image_and_mask(image, mask)


def fillscope_run(stack, prepared, **kw):
    done = sd3_controlnet.run(stack, PROMPT, prepared, negative_prompt=NEGATIVE, **kw)
    return done.latent, done.image


def diffusers_run(pipe, prepared, **kw):
    # tensors go through the pipeline untouched: the image already in [-1, 1], the mask already binary
    return run_diffusers_sd3_inpaint(None, None, prepared.image, prepared.mask, PROMPT, NEGATIVE, height=H, width=W,
                                     encode_mode="argmax", pipe=pipe, **kw)


@pytest.mark.parametrize("widths", ["published", "narrow"])
def test_image_matches_diffusers_with_its_residual_mapping(request, prepared, widths):
    stack, pipe = stack_and_pipe(request, widths)
    latent, ours = fillscope_run(stack, prepared, steps=4, cfg=7.0, control_scale=0.95, seed=42,
                                 residual_mapping="diffusers")
    ref = diffusers_run(pipe, prepared, steps=4, guidance_scale=7.0, controlnet_conditioning_scale=0.95, seed=42)
    assert rel_err(ours.permute(0, 3, 1, 2), ref) < 1e-4
    channels, scale = (NARROW_LATENT_CHANNELS, 4) if widths == "narrow" else (16, 8)
    assert latent.latents.shape == (1, channels, H // scale, W // scale)


@pytest.mark.parametrize("widths", ["published", "narrow"])
def test_latents_match_diffusers_with_control_start_and_end(request, prepared, widths):
    stack, pipe = stack_and_pipe(request, widths)
    out, _ = fillscope_run(stack, prepared, steps=5, cfg=4.0, control_scale=0.8, control_start=0.2, control_end=0.7,
                           seed=9, residual_mapping="diffusers")
    ref = diffusers_run(pipe, prepared, steps=5, guidance_scale=4.0, controlnet_conditioning_scale=0.8,
                        control_guidance_start=0.2, control_guidance_end=0.7, seed=9, output_type="latent")
    assert rel_err(out.latents, ref) < 1e-4


def test_default_one_to_one_mapping_differs_from_diffusers(stack, prepared):
    a, _ = fillscope_run(stack, prepared, steps=2, seed=3, residual_mapping="one_to_one")
    b, _ = fillscope_run(stack, prepared, steps=2, seed=3, residual_mapping="diffusers")
    assert not torch.allclose(a.latents, b.latents)


def test_schedule_equals_the_diffusers_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    for steps in (1, 2, 28):
        sched = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
        sched.set_timesteps(steps)
        assert torch.equal(static_shift_sigmas(steps, 3.0), sched.sigmas)


@pytest.mark.parametrize("mapping", ["one_to_one", "diffusers"])
def test_each_residual_reaches_the_block_the_mapping_names(stack, prepared, mapping):
    """Hooks read, after every MMDiT block, what was added to its image stream (the next block's input minus
    the block's own output) and match it against the 23 residuals the ControlNet returned in that call."""
    model, cnet = stack["transformer"].model, stack["controlnet"].model
    blocks = list(model.transformer_blocks)
    raw, after, residuals = {}, {}, []

    def keep_raw(i):
        return lambda m, a, out: raw.__setitem__(i, out[1].clone())

    def keep_next_input(i):
        return lambda m, args, kwargs: after.__setitem__(i, kwargs["hidden_states"].clone())

    handles = [b.register_forward_hook(keep_raw(i), prepend=True) for i, b in enumerate(blocks)]
    handles += [b.register_forward_pre_hook(keep_next_input(i - 1), with_kwargs=True) for i, b in enumerate(blocks) if i]
    handles.append(model.norm_out.register_forward_pre_hook(lambda m, args: after.__setitem__(len(blocks) - 1, args[0].clone())))
    handles.append(cnet.register_forward_hook(lambda m, a, out: residuals.extend(r.clone() for r in out[0])))
    try:
        fillscope_run(stack, prepared, steps=1, residual_mapping=mapping)
    finally:
        for h in handles:
            h.remove()

    assert len(blocks) == 24 and len(residuals) == 23
    added = {}
    for i in range(len(blocks)):
        delta = after[i] - raw[i]
        hits = [k for k, r in enumerate(residuals) if torch.allclose(delta, r, atol=1e-6, rtol=1e-5)]
        assert len(hits) <= 1
        added[i] = hits[0] if hits else (None if delta.abs().max() == 0 else "other")
    if mapping == "one_to_one":
        assert added == {**{i: i for i in range(23)}, 23: None}
        assert sorted(k for k in added.values() if k is not None) == list(range(23))  # each residual once
    else:
        assert added == {**{i: int(i * 23 / 24) for i in range(23)}, 23: None}
        assert list(added.values()).count(0) == 2 and 22 not in added.values()


@pytest.mark.parametrize("narrow_part, refused", [("vae", "transformer"), ("controlnet", "controlnet")])
def test_models_of_different_widths_are_refused_before_the_first_step(stack, narrow, prepared, narrow_part, refused):
    """A narrow (8-channel) VAE or ControlNet with the published-width (16) rest: refused naming the component and
    both widths, before the ControlNet or the transformer runs."""
    from fillscope.errors import FillScopeInputError

    parts = {**stack, narrow_part: narrow[0][narrow_part]}
    cond = sd3_controlnet.build_inpaint_condition(parts["vae"], prepared)
    text = sd3_controlnet.encode_prompt(stack["clip_l"], stack["clip_g"], stack["t5"], PROMPT)
    calls = []
    handles = [parts[n].model.register_forward_pre_hook(lambda m, a: calls.append(1))
               for n in ("transformer", "controlnet")]
    try:
        with pytest.raises(FillScopeInputError) as e:
            sd3_controlnet.sample_sd3_controlnet_inpaint(parts["transformer"], parts["controlnet"], text, None, cond,
                                                         steps=1, cfg=1.0)
    finally:
        for h in handles:
            h.remove()
    assert calls == [] and e.value.input_name == refused
    assert e.value.problem == {
        "vae": "takes in_channels 16 but the SD3 VAE (latent_channels 8 at 1/4) gives 8 latent channels.",
        "controlnet": "takes in_channels 8 but the transformer (in_channels 16) and the SD3 VAE (latent_channels 16 "
                      "at 1/8) have 16 latent channels.",
    }[narrow_part]
