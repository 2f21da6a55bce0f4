"""Soft masks by differential diffusion (issue 13), the samplers' optional `soft_mask`: ComfyUI's DifferentialDiffusion
node (comfy_extras/nodes_differential_diffusion.py, strength 1) inside its KSampler's inpaint blend
(comfy/samplers.py KSamplerX0Inpaint), on the tiny fp32 models of every family.

- an all-ones soft mask is free at every step: FLUX Fill and SD3 give bitwise the result without one; klein's equals
  its full-mask run (the re-blend keeps nothing);
- an all-zeros soft mask is never free: the sampled latents are the source latents after the last step;
- a ramp mask equals an independent loop written from ComfyUI's formulas (model input and x0 blended with the
  source, Euler as k-diffusion's d = (x - denoised) / sigma) for FLUX Fill and klein;
- the pixel mask reaches the latent grid through the condition's geometry (pad, crop, the model grid's size);
- on the meta device only shapes exist; a wrong-sized or NaN soft mask is refused naming `soft_mask`.

soft_mask=None is today's code path; the equivalence tests against diffusers (test_*_equivalence.py) pin it down.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from tiny_flux import build_tiny_flux_fill_folder
from tiny_klein import build_tiny_klein_folder, uint8_image
from tiny_models import comfy_tokenizer_dirs, tokenizers_available
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

from fillscope import masks
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import flux_fill, klein, sd3_controlnet
from fillscope.sampling import (
    differential_mask,
    differential_range,
    flux_dynamic_mu,
    flux_sigmas,
    initial_noise,
    soft_mask_to_latent,
    truncate_for_denoise,
)
from fillscope.specs import flux_image_ids, flux_scheduler_config, pack_latents, unpack_latents

PROMPT = "a red brick fireplace in a living room"
H, W = 48, 64  # FLUX / SD3: latent 6x8
KH, KW = 64, 96  # klein: token grid 4x6


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def ramp(height, width):
    """A horizontal ramp 0 -> 1 across the image (soft values at every threshold of a short run), [1,H,W]."""
    return torch.linspace(0.0, 1.0, width).expand(1, height, width).contiguous()


def cell_mean(mask, cell):
    """[1,H,W] -> [1,1,H/cell,W/cell]: each cell's mean, written independently of the engine's pooling."""
    b, h, w = mask.shape
    return mask.reshape(b, h // cell, cell, w // cell, cell).mean(dim=(2, 4)).unsqueeze(1)


@pytest.fixture(autouse=True)
def quiet_library_logs():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


# --- FLUX Fill ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def flux_stack(tmp_path_factory):
    folder = build_tiny_flux_fill_folder(tmp_path_factory.mktemp("tiny") / "FLUX.1-Fill-tiny", seed=0)
    return flux_fill.load_stack(folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")


@pytest.fixture(scope="module")
def flux_parts(flux_stack):
    g = torch.Generator().manual_seed(7)
    image = torch.rand(1, H, W, 3, generator=g)
    mask = torch.zeros(1, H, W)
    mask[:, 8:40, 16:48] = 1.0
    prepared = masks.prepare_image_and_mask(image, mask)
    text = flux_fill.encode_prompt(flux_stack["clip_l"], flux_stack["t5"], PROMPT)
    cond = flux_fill.build_fill_condition(flux_stack["vae"], prepared)
    return text, cond


def flux_sample(stack, parts, **kw):
    text, cond = parts
    return flux_fill.sample_flux_fill(stack["transformer"], text, cond, guidance=30.0, **kw)


@pytest.mark.parametrize("denoise", [1.0, 0.6])
def test_flux_all_ones_soft_mask_is_bitwise_no_soft_mask(flux_stack, flux_parts, denoise):
    plain = flux_sample(flux_stack, flux_parts, steps=3, seed=5, denoise=denoise)
    ones = flux_sample(flux_stack, flux_parts, steps=3, seed=5, denoise=denoise, soft_mask=torch.ones(1, H, W))
    assert torch.equal(plain.latents, ones.latents)
    assert "differential_diffusion" not in plain.info
    assert ones.info["differential_diffusion"].startswith("differential diffusion: soft mask 100% > 0, 100% = 1")


def test_flux_all_zeros_soft_mask_returns_the_source_latents(flux_stack, flux_parts):
    _, cond = flux_parts
    out = flux_sample(flux_stack, flux_parts, steps=3, seed=5, soft_mask=torch.zeros(1, H, W))
    assert torch.equal(out.latents, cond.source_latents())


def comfy_reference_flux(stack, parts, soft_latent, *, steps, seed, denoise, guidance=30.0):
    """ComfyUI's KSampler (Euler) with DifferentialDiffusion, written out: at each sigma the denoise mask is
    soft >= (t - t_to) / (t_from - t_to) (timestep = sigma for FLUX's model sampling, t_to from max(sigma_min,
    sigmas[-1]), sigma_min = ModelSamplingFlux(shift=mu).sigmas[0]); the model input's kept positions are the source
    noised to sigma, the x0 prediction's kept positions the source; x += (x - x0) / sigma * (sigma_next - sigma)."""
    text, cond = parts
    model = stack["transformer"].model
    lh, lw = cond.latent_height, cond.latent_width
    sched = flux_scheduler_config()
    mu = flux_dynamic_mu(cond.tokens, sched["base_image_seq_len"], sched["max_image_seq_len"], sched["base_shift"],
                         sched["max_shift"])
    sigmas = truncate_for_denoise(flux_sigmas(steps, mu), steps, denoise)
    sigma_min = (math.exp(mu) / (math.exp(mu) + (1 / (torch.arange(1, 10001) / 10000) - 1)))[0]  # flux_time_shift
    t_from, t_to = sigmas[0], torch.maximum(sigma_min.float(), sigmas[-1])
    noise = initial_noise((1, 16, lh, lw), seed, "cpu", torch.float32)
    source = cond.source_latents()
    x = sigmas[0] * noise + (1.0 - sigmas[0]) * source  # CONST.noise_scaling
    img_ids = flux_image_ids(lh, lw, dtype=torch.float32)
    with torch.inference_mode():
        for i in range(len(sigmas) - 1):
            sigma, sigma_next = sigmas[i], sigmas[i + 1]
            threshold = (sigma - t_to) / (t_from - t_to)
            dm = (soft_latent >= threshold).float()
            x = x * dm + (sigma * noise + (1.0 - sigma) * source) * (1.0 - dm)
            v = model(hidden_states=torch.cat([pack_latents(x), cond.condition], dim=2), timestep=sigma.expand(1),
                      guidance=torch.full([1], guidance), pooled_projections=text.pooled,
                      encoder_hidden_states=text.t5_hidden, txt_ids=text.txt_ids, img_ids=img_ids,
                      return_dict=False)[0]
            denoised = x - unpack_latents(v, lh, lw) * sigma  # CONST.calculate_denoised
            denoised = denoised * dm + source * (1.0 - dm)
            x = x + (x - denoised) / sigma * (sigma_next - sigma)
    return x


@pytest.mark.parametrize("denoise", [1.0, 0.75])
def test_flux_ramp_equals_comfyui_differential_diffusion_written_out(flux_stack, flux_parts, denoise):
    soft = ramp(H, W)
    ours = flux_sample(flux_stack, flux_parts, steps=4, seed=9, denoise=denoise, soft_mask=soft)
    ref = comfy_reference_flux(flux_stack, flux_parts, cell_mean(soft, 8), steps=4, seed=9, denoise=denoise)
    assert rel_err(ours.latents, ref) < 1e-5
    plain = flux_sample(flux_stack, flux_parts, steps=4, seed=9, denoise=denoise)
    assert rel_err(ours.latents, plain.latents) > 1e-2  # the soft mask changed the result
    _, cond = flux_parts
    first_col = ours.latents[..., 0]  # the ramp's 0 end: the latent cells average < the last threshold
    assert torch.allclose(first_col, cond.source_latents()[..., 0])


def test_flux_run_passes_the_soft_mask_through(flux_stack):
    image, mask = masks.synthetic_image_and_mask(W, H)
    prepared = masks.prepare_image_and_mask(image, mask)
    done = flux_fill.run(flux_stack, PROMPT, prepared, steps=2, seed=1, soft_mask=torch.zeros(1, H, W))
    assert torch.equal(done.latent.latents, done.condition.source_latents())
    assert "differential_diffusion" in done.latent.info


# --- SD3 -----------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sd3_parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("sd3")
    stack = sd3_controlnet.load_stack(build_tiny_sd3_folder(root / "sd3", seed=0),
                                      controlnet=build_tiny_sd3_controlnet_folder(root / "cn", seed=0),
                                      tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    g = torch.Generator().manual_seed(5)
    image = torch.rand(1, H, W, 3, generator=g)
    mask = torch.zeros(1, H, W)
    mask[:, 8:40, 16:48] = 1.0
    prepared = masks.prepare_image_and_mask(image, mask)
    enc = stack["clip_l"], stack["clip_g"], stack["t5"]
    positive, negative = sd3_controlnet.encode_prompt(*enc, PROMPT), sd3_controlnet.encode_prompt(*enc, "blurry")
    cond = sd3_controlnet.build_inpaint_condition(stack["vae"], prepared)
    return stack, positive, negative, cond


def sd3_sample(parts, **kw):
    stack, positive, negative, cond = parts
    return sd3_controlnet.sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], positive, negative,
                                                        cond, cfg=4.0, **kw)


@pytest.mark.parametrize("denoise", [1.0, 0.6])
def test_sd3_all_ones_soft_mask_is_bitwise_no_soft_mask(sd3_parts, denoise):
    plain = sd3_sample(sd3_parts, steps=3, seed=2, denoise=denoise)
    ones = sd3_sample(sd3_parts, steps=3, seed=2, denoise=denoise, soft_mask=torch.ones(1, H, W))
    assert torch.equal(plain.latents, ones.latents)
    assert "differential_diffusion" in ones.info and "differential_diffusion" not in plain.info


def test_sd3_all_zeros_soft_mask_returns_the_source_latents(sd3_parts):
    out = sd3_sample(sd3_parts, steps=3, seed=2, soft_mask=torch.zeros(1, H, W))
    assert torch.equal(out.latents, sd3_parts[3].source_latents())


def test_sd3_ramp_keeps_the_source_where_the_ramp_stays_below_the_schedule(sd3_parts):
    """The soft value decides from which step a latent cell is free: cells below the last step's threshold end on
    the source, the others do not, and the result differs from the run without a soft mask. (SD3's schedule ends
    near its sigma_min, so the last step's threshold is ~0.006: the ramp's left quarter is 0 to keep some cells.)"""
    from fillscope.sampling import static_shift_sigma_min, static_shift_sigmas

    soft = ramp(H, W)
    soft[..., : W // 4] = 0.0
    out = sd3_sample(sd3_parts, steps=4, seed=2, soft_mask=soft, shift=3.0)
    sigmas = static_shift_sigmas(4, 3.0)
    first, end = differential_range(sigmas, static_shift_sigma_min(3.0))
    never_free = ~differential_mask(cell_mean(soft, 8), float(sigmas[-2]), first, end)[0, 0]  # [6,8]
    source = sd3_parts[3].source_latents()
    assert never_free.any() and (~never_free).any()
    assert torch.equal(out.latents[0][:, never_free], source[0][:, never_free])
    assert not torch.allclose(out.latents[0][:, ~never_free], source[0][:, ~never_free])
    assert rel_err(out.latents, sd3_sample(sd3_parts, steps=4, seed=2, shift=3.0).latents) > 1e-2


# --- klein ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def klein_parts(tmp_path_factory):
    if not tokenizers_available():
        pytest.skip("ComfyUI tokenizer files not found")
    folder = build_tiny_klein_folder(tmp_path_factory.mktemp("klein") / "distilled", seed=0, distilled=True)
    stack = klein.load_stack(str(folder), tokenizer_folders=(None,), dtype="fp32", device="cpu")
    g = torch.Generator().manual_seed(1)
    image = uint8_image(g, KH, KW)
    mask = torch.zeros(1, KH, KW)
    mask[:, 16:48, 20:70] = 1.0
    text = klein.encode_prompt(stack["qwen3"], PROMPT)
    cond = klein.build_inpaint_condition(stack["vae"], masks.prepare_image_and_mask(image, mask))
    full = klein.build_inpaint_condition(stack["vae"], masks.prepare_image_and_mask(image, torch.ones(1, KH, KW)))
    return stack, text, cond, full


def klein_sample(parts, cond=None, **kw):
    stack, text, default_cond, _ = parts
    return klein.sample_klein(stack["transformer"], text, cond or default_cond, distilled=True, **kw)


@pytest.mark.parametrize("strength", [1.0, 0.6])
def test_klein_all_ones_soft_mask_equals_the_full_mask_run(klein_parts, strength):
    """The soft mask replaces the token mask in the re-blend: all ones re-blends nothing, as a full token mask."""
    full = klein_sample(klein_parts, klein_parts[3], steps=3, seed=4, strength=strength)
    ones = klein_sample(klein_parts, steps=3, seed=4, strength=strength, soft_mask=torch.ones(1, KH, KW))
    assert torch.equal(full.latents, ones.latents)


def test_klein_all_zeros_soft_mask_returns_the_source_latents(klein_parts):
    out = klein_sample(klein_parts, steps=3, seed=4, soft_mask=torch.zeros(1, KH, KW))
    assert torch.equal(out.latents, klein_parts[2].source)


def comfy_reference_klein(parts, soft_tokens, *, steps, seed, strength):
    """As comfy_reference_flux, on klein's tokens (distilled: one call a step, no guidance)."""
    stack, text, cond, _ = parts
    model = stack["transformer"].model
    h, w, n = cond.latent_height, cond.latent_width, cond.tokens
    mu = klein.compute_empirical_mu(n, steps)
    sigmas = truncate_for_denoise(flux_sigmas(steps, mu), steps, strength)
    sigma_min = (math.exp(mu) / (math.exp(mu) + (1 / (torch.arange(1, 10001) / 10000) - 1)))[0]
    t_from, t_to = sigmas[0], torch.maximum(sigma_min.float(), sigmas[-1])
    noise = klein.pack_tokens(initial_noise((1, 128, h, w), seed, "cpu", torch.float32))
    source = klein.pack_tokens(cond.source)
    x = sigmas[0] * noise + (1.0 - sigmas[0]) * source
    img_ids = torch.cat([klein.token_ids(h, w, 0, 1, "cpu"), cond.reference_ids], dim=1)
    with torch.inference_mode():
        for i in range(len(sigmas) - 1):
            sigma, sigma_next = sigmas[i], sigmas[i + 1]
            dm = (soft_tokens >= (sigma - t_to) / (t_from - t_to)).float()
            x = x * dm + (sigma * noise + (1.0 - sigma) * source) * (1.0 - dm)
            v = model(hidden_states=torch.cat([x, cond.references], dim=1), timestep=sigma.expand(1), guidance=None,
                      encoder_hidden_states=text.embeds, txt_ids=text.text_ids, img_ids=img_ids,
                      return_dict=False)[0][:, :n]
            denoised = x - v * sigma
            denoised = denoised * dm + source * (1.0 - dm)
            x = x + (x - denoised) / sigma * (sigma_next - sigma)
    return klein.unpack_tokens(x, h, w)


@pytest.mark.parametrize("strength", [1.0, 0.7])
def test_klein_ramp_equals_comfyui_differential_diffusion_written_out(klein_parts, strength):
    soft = ramp(KH, KW)
    ours = klein_sample(klein_parts, steps=4, seed=6, strength=strength, soft_mask=soft)
    ref = comfy_reference_klein(klein_parts, klein.pack_tokens(cell_mean(soft, 16)), steps=4, seed=6,
                                strength=strength)
    assert rel_err(ours.latents, ref) < 1e-5
    assert rel_err(ours.latents, klein_sample(klein_parts, steps=4, seed=6, strength=strength).latents) > 1e-2


def test_klein_edit_condition_refuses_a_soft_mask(klein_parts):
    stack, text, _, _ = klein_parts
    edit = klein.build_edit_condition(stack["vae"], [uint8_image(torch.Generator().manual_seed(2), KH, KW)])
    with pytest.raises(FillScopeInputError) as e:
        klein.sample_klein(stack["transformer"], text, edit, steps=1, soft_mask=torch.ones(1, KH, KW))
    assert e.value.input_name == "soft_mask" and "edit" in e.value.problem


# --- the schedule position and the mask's way to the latent grid ----------------------------------------------------

def test_threshold_is_one_at_the_first_step_and_above_zero_at_the_last():
    sigmas = flux_sigmas(28, 1.15)
    first, end = differential_range(sigmas, 0.0003)
    v = torch.tensor([0.0, 0.5, 1.0])
    assert differential_mask(v, float(sigmas[0]), first, end).tolist() == [False, False, True]
    assert differential_mask(v, float(sigmas[-2]), first, end).tolist() == [False, True, True]
    free_steps = [differential_mask(v, float(s), first, end) for s in sigmas[:-1]]
    assert all(bool((a <= b).all()) for a, b in zip(free_steps, free_steps[1:]))  # free once, free after


def geometry_of(height, width, size_mode):
    image, mask = masks.synthetic_image_and_mask(width, height)
    return masks.prepare_image_and_mask(image, mask, size_mode=size_mode).geometry


def test_pad_replicates_the_edge_and_crop_crops_as_the_image():
    soft = ramp(40, 60)  # pad -> 48x64 grid (latent 6x8), crop -> 32x48 (latent 4x6) at (top 4, left 6)
    padded = soft_mask_to_latent(soft, geometry_of(40, 60, "pad"), 1, 6, 8)
    expected = torch.nn.functional.pad(soft[:, None], (0, 4, 0, 8), mode="replicate")[:, 0]
    assert padded.shape == (1, 1, 6, 8) and torch.allclose(padded, cell_mean(expected, 8))
    cropped = soft_mask_to_latent(soft, geometry_of(40, 60, "crop"), 1, 4, 6)
    assert torch.allclose(cropped, cell_mean(soft[:, 4:36, 6:54], 8))
    at_grid = soft_mask_to_latent(expected, geometry_of(40, 60, "pad"), 1, 6, 8)  # already the model grid's size
    assert torch.equal(at_grid, padded)
    batch = soft_mask_to_latent(soft[0], geometry_of(40, 60, "pad"), 3, 6, 8)  # [H,W], expanded to the batch
    assert batch.shape == (3, 1, 6, 8)


# --- meta: shapes only ---------------------------------------------------------------------------------------------

def test_meta_flux_fill_with_a_soft_mask_gives_the_shapes():
    """One step for each run (it ran 2 for the first): no shape or note below depends on the step count, and every
    step is a full-size FLUX forward on meta weights (seconds of Python meta kernels)."""
    stack = flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())
    image, mask = masks.synthetic_image_and_mask(256, 192)
    prepared = masks.prepare_image_and_mask(image, mask)
    seen = {}
    done = flux_fill.run(stack, PROMPT, prepared, steps=1, soft_mask=mask,
                         observe=lambda name, t: seen.__setitem__(name, (list(t.shape), t.device.type)))
    assert seen["soft_mask.latent"] == ([1, 1, 24, 32], "cpu")
    assert seen["latent.unpacked"] == ([1, 16, 24, 32], "meta")
    assert list(done.image.shape) == [1, 192, 256, 3]
    assert done.latent.info["differential_diffusion"].startswith("differential diffusion: soft mask 25% > 0")
    meta_mask = torch.empty(1, 192, 256, device="meta")  # a soft mask that is itself meta: no value is read
    out = flux_fill.sample_flux_fill(stack["transformer"], done.text, done.condition, steps=1, soft_mask=meta_mask)
    assert out.latents.device.type == "meta" and "meta: shapes only" in out.info["differential_diffusion"]


# --- bad soft masks ------------------------------------------------------------------------------------------------

def bad_masks():
    nan = torch.full((1, H, W), 0.5)
    nan[0, 3, 4] = float("nan")
    inf = torch.zeros(1, H, W)
    inf[0, 0, 0] = float("inf")
    return {"wrong size": torch.ones(1, 64, 64), "latent size": torch.ones(1, H // 8, W // 8), "NaN": nan,
            "inf": inf, "batch": torch.ones(2, H, W), "not a mask": torch.ones(2, 1, 3, H, W)}


@pytest.mark.parametrize("case", list(bad_masks()))
def test_a_bad_soft_mask_is_refused_naming_soft_mask(flux_stack, flux_parts, sd3_parts, case):
    bad = bad_masks()[case]
    calls = []
    for sample in (lambda **kw: flux_sample(flux_stack, flux_parts, **kw), lambda **kw: sd3_sample(sd3_parts, **kw)):
        with pytest.raises(FillScopeInputError) as e:
            sample(steps=1, soft_mask=bad, callback=lambda i, n: calls.append(i))
        assert e.value.input_name == "soft_mask" and e.value.fix
        assert "soft_mask" in str(e.value)
    assert calls == []  # refused before any step
    if case in ("wrong size", "latent size"):
        assert f"{W}x{H}" in e.value.problem
    if case in ("NaN", "inf"):
        assert "NaN/inf" in e.value.problem
