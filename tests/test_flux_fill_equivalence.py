"""FillScope's FLUX Fill path equals diffusers' FluxFillPipeline on the same tiny fp32 folder, image, mask and
seed (mask binarised at 0.5 and VAE encode by the mean in both; no paste-back); also on a "narrow" folder whose
widths are not the published ones (tiny_flux.narrow_configs: an 8-channel VAE at 1/4, condition 32 + 64, transformer
in 128 / out 32), which FillScope must take from the loaded configs as diffusers does."""

from __future__ import annotations

import pytest
import torch

from fillscope import masks
from fillscope.pipelines import flux_fill
from fillscope.sampling import initial_noise
from fillscope.specs import pack_latents
from tiny_flux import NARROW_LATENT_CHANNELS, build_tiny_flux_fill_folder, load_fill_pipeline, run_diffusers_fill

H, W = 48, 64
PROMPT = "a red brick fireplace in a living room"


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_flux_fill_folder(tmp_path_factory.mktemp("tiny") / "FLUX.1-Fill-tiny", seed=0)


@pytest.fixture(scope="module")
def stack(folder):
    return flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")


@pytest.fixture(scope="module")
def pipe(folder):
    return load_fill_pipeline(folder)


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """(stack, pipe) of the narrow folder."""
    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("tiny") / "FLUX.1-Fill-narrow", seed=0, narrow=True)
    return (flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu"),
            load_fill_pipeline(folder))


def stack_and_pipe(request, widths):
    if widths == "narrow":
        return request.getfixturevalue("narrow")
    return request.getfixturevalue("stack"), request.getfixturevalue("pipe")


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(7)
    image = torch.rand(1, H, W, 3, generator=g)
    mask = torch.zeros(1, H, W)
    mask[:, 8:40, 16:48] = 1.0
    mask[:, 20:24, 4:10] = 0.7  # soft values: both sides binarise at 0.5
    return image, mask


def fillscope_run(stack, image, mask, *, steps, seed, denoise=1.0):
    prepared = masks.prepare_image_and_mask(image, mask, threshold=0.5)
    done = flux_fill.run(stack, PROMPT, prepared, steps=steps, guidance=30.0, seed=seed, denoise=denoise)
    return done.latent, done.image


def diffusers_run(pipe, image, mask, *, steps, seed, strength=1.0, output_type="pt"):
    return run_diffusers_fill(
        None, image.permute(0, 3, 1, 2), mask[:, None], PROMPT, height=H, width=W, steps=steps,
        guidance_scale=30.0, seed=seed, strength=strength, encode_mode="argmax", output_type=output_type, pipe=pipe,
    )


@pytest.mark.parametrize("widths", ["published", "narrow"])
def test_image_matches_diffusers_fill_pipeline(request, inputs, widths):
    stack, pipe = stack_and_pipe(request, widths)
    image, mask = inputs
    latent, ours = fillscope_run(stack, image, mask, steps=4, seed=42)
    ref = diffusers_run(pipe, image, mask, steps=4, seed=42)
    assert ours.shape == (1, H, W, 3)
    channels, scale = (NARROW_LATENT_CHANNELS, 4) if widths == "narrow" else (16, 8)
    assert latent.latents.shape == (1, channels, H // scale, W // scale)
    assert rel_err(ours.permute(0, 3, 1, 2), ref) < 1e-4


def test_latents_match_diffusers_fill_pipeline(stack, pipe, inputs):
    image, mask = inputs
    out, _ = fillscope_run(stack, image, mask, steps=3, seed=3)
    ref = diffusers_run(pipe, image, mask, steps=3, seed=3, output_type="latent")
    assert rel_err(pack_latents(out.latents), ref) < 1e-4


@pytest.mark.parametrize("widths", ["published", "narrow"])
def test_denoise_below_one_matches_diffusers_strength(request, inputs, widths):
    stack, pipe = stack_and_pipe(request, widths)
    image, mask = inputs
    out, ours = fillscope_run(stack, image, mask, steps=5, seed=11, denoise=0.6)
    assert out.info["steps_run"] == 3
    ref = diffusers_run(pipe, image, mask, steps=5, seed=11, strength=0.6)
    assert rel_err(ours.permute(0, 3, 1, 2), ref) < 1e-4


def test_same_seed_gives_diffusers_initial_noise():
    from diffusers.utils.torch_utils import randn_tensor

    ours = initial_noise((1, 16, H // 8, W // 8), 1234, "cpu", torch.float32)
    ref = randn_tensor((1, 16, H // 8, W // 8), generator=torch.Generator("cpu").manual_seed(1234),
                       device=torch.device("cpu"), dtype=torch.float32)
    assert torch.equal(ours, ref)


def test_different_seeds_give_different_results(stack, inputs):
    image, mask = inputs
    _, a = fillscope_run(stack, image, mask, steps=2, seed=1)
    _, b = fillscope_run(stack, image, mask, steps=2, seed=2)
    assert not torch.allclose(a, b)


def test_sampler_reports_every_step_and_stops_when_the_callback_raises(stack, inputs):
    image, mask = inputs
    flux_text = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], PROMPT)
    cond = flux_fill.build_fill_condition(stack["vae"], masks.prepare_image_and_mask(image, mask))
    calls = []
    flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=3, callback=lambda i, n: calls.append((i, n)))
    assert calls == [(1, 3), (2, 3), (3, 3)]

    class Interrupted(Exception):
        pass

    def interrupt_at_two(i, n):
        calls.append(i)
        if i == 2:
            raise Interrupted

    calls.clear()
    with pytest.raises(Interrupted):
        flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=5, callback=interrupt_at_two)
    assert calls == [1, 2]


def test_a_vae_and_transformer_of_different_widths_are_refused_before_the_first_step(stack, narrow, inputs):
    """The narrow VAE's condition for the published-width transformer: refused naming both and their widths, before
    the transformer runs."""
    from fillscope.errors import FillScopeInputError

    image, mask = inputs
    cond = flux_fill.build_fill_condition(narrow[0]["vae"], masks.prepare_image_and_mask(image, mask))
    text = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], PROMPT)
    calls = []
    handle = stack["transformer"].model.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        with pytest.raises(FillScopeInputError) as e:
            flux_fill.sample_flux_fill(stack["transformer"], text, cond, steps=1)
    finally:
        handle.remove()
    assert calls == [] and e.value.input_name == "transformer"
    assert e.value.problem == ("takes in_channels 384 but the FLUX VAE (latent_channels 8 at 1/4) gives noisy 32 + "
                               "condition 96 (masked latents 32 + mask 64) = 128.")
