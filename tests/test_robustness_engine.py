"""The engine's robustness guards on the tiny folders: NaN/inf from any model stops the sampler with an error that
names where it came from (never a silent black image), and a batch of images with one mask draws its initial
noise as diffusers does (one randn of [B,16,h,w] from the one generator) and matches diffusers'
num_images_per_prompt=B run."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from fillscope import masks, vae
from fillscope.pipelines import flux_fill, sd3_controlnet
from fillscope.errors import FillScopeInputError
from fillscope.sampling import require_finite_first_step, require_finite_result
from fillscope.specs import pack_latents
from tiny_flux import argmax_vae_encode as flux_argmax_vae_encode
from tiny_flux import build_tiny_flux_fill_folder, load_fill_pipeline
from tiny_sd3 import argmax_vae_encode as sd3_argmax_vae_encode
from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder, load_sd3_inpaint_pipeline

H, W = 48, 64
PROMPT, NEGATIVE = "a red brick fireplace", "blurry"


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def poisoned(comp, param: str, value: float = float("nan")):
    """A copy of a loaded component with one weight element set to `value` (the original stays intact)."""
    model = copy.deepcopy(comp.model)
    with torch.no_grad():
        dict(model.named_parameters())[param].view(-1)[0] = value
    return dataclasses.replace(comp, model=model)


def image_and_mask(batch: int = 1):
    g = torch.Generator().manual_seed(3)
    image = torch.rand(1, H, W, 3, generator=g).expand(batch, -1, -1, -1).contiguous()
    mask = torch.zeros(1, H, W)  # one mask for the whole batch
    mask[:, 8:40, 16:48] = 1.0
    return image, mask


# ---- FLUX Fill ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flux_folder(tmp_path_factory):
    return build_tiny_flux_fill_folder(tmp_path_factory.mktemp("flux") / "FLUX.1-Fill-tiny", seed=0)


@pytest.fixture(scope="module")
def flux(flux_folder):
    stack = flux_fill.load_stack(flux_folder, tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    stack["text"] = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], PROMPT)
    return stack


def flux_sample(stack, *, batch=1, transformer=None, vae_comp=None, flux_text=None, **kw):
    image, mask = image_and_mask(batch)
    cond = flux_fill.build_fill_condition(vae_comp or stack["vae"], masks.prepare_image_and_mask(image, mask))
    return flux_fill.sample_flux_fill(transformer or stack["transformer"], flux_text or stack["text"], cond,
                                      **{"steps": 3, "seed": 11, **kw})


def test_flux_nan_weight_in_the_transformer_is_an_error_at_step_1(flux):
    steps_seen = []
    with pytest.raises(FillScopeInputError) as e:
        flux_sample(flux, transformer=poisoned(flux["transformer"], "proj_out.weight"),
                    callback=lambda i, n: steps_seen.append(i))
    msg = str(e.value)
    assert "input 'transformer'" in msg and "the transformer produced NaN/inf at step 1" in msg
    assert "its weights contain NaN/inf (tensor 'proj_out.weight' holds 1 of " in msg and "Fix:" in msg
    assert "download it again" in msg and "LoRA" not in msg  # the weights scanned: they are at fault, and said so
    assert steps_seen == []  # stopped before the first step completed: no wasted steps, no image


def test_flux_inf_weight_is_caught_too(flux):
    with pytest.raises(FillScopeInputError, match="produced NaN/inf at step 1"):
        flux_sample(flux, transformer=poisoned(flux["transformer"], "x_embedder.weight", float("inf")))


def test_flux_nan_from_the_vae_names_the_condition(flux):
    with pytest.raises(FillScopeInputError) as e:
        flux_sample(flux, vae_comp=poisoned(flux["vae"], "encoder.conv_in.weight"))
    assert "input 'condition'" in str(e.value) and "the VAE" in str(e.value)


def test_flux_nan_from_the_text_encoder_names_the_text(flux):
    bad = dataclasses.replace(flux["text"], t5_hidden=flux["text"].t5_hidden.clone())
    bad.t5_hidden[0, 0, 0] = float("nan")
    with pytest.raises(FillScopeInputError) as e:
        flux_sample(flux, flux_text=bad)
    assert "input 'flux_text'" in str(e.value) and "text encoder" in str(e.value)


def test_flux_nan_in_a_later_step_is_an_error_not_a_black_image(flux):
    calls = []

    def nan_on_second_call(module, args, kwargs, output):
        calls.append(1)
        if len(calls) == 2:
            return (torch.full_like(output[0], float("nan")),)
        return output

    handle = flux["transformer"].model.register_forward_hook(nan_on_second_call, with_kwargs=True)
    try:
        with pytest.raises(FillScopeInputError) as e:
            flux_sample(flux, steps=3)
    finally:
        handle.remove()
    assert "the sampled latent holds NaN/inf" in str(e.value) and "fp16 probably overflowed" in str(e.value)


def test_flux_finite_run_is_unchanged_by_the_guard(flux):
    a = flux_sample(flux).latents
    b = flux_sample(flux).latents
    assert torch.isfinite(a).all() and torch.equal(a, b)


def test_flux_batch_noise_is_one_draw_of_the_whole_batch(flux):
    seen = {}
    out = flux_sample(flux, batch=3, observe=lambda name, t: seen.setdefault(name, t.clone()))
    expected = torch.randn((3, 16, H // 8, W // 8), generator=torch.Generator("cpu").manual_seed(11))
    assert torch.equal(seen["initial_noise"], expected)
    assert list(seen["transformer.input"].shape) == [3, (H // 16) * (W // 16), 384]
    assert list(out.latents.shape) == [3, 16, H // 8, W // 8]
    single = flux_sample(flux, batch=1).latents
    assert rel_err(out.latents[:1], single) < 1e-5  # the batch's first draw is the batch-of-1 draw
    assert rel_err(out.latents[1:2], out.latents[:1]) > 1e-2  # each image gets its own noise


def test_flux_batch_matches_diffusers_num_images_per_prompt(flux, flux_folder):
    image, mask = image_and_mask(2)
    ours = flux_sample(flux, batch=2, steps=3, guidance=30.0, seed=5).latents
    pipe = load_fill_pipeline(flux_folder)
    with flux_argmax_vae_encode():
        ref = pipe(prompt=PROMPT, image=image[:1].permute(0, 3, 1, 2), mask_image=mask[:, None], height=H, width=W,
                   num_inference_steps=3, guidance_scale=30.0, generator=torch.Generator("cpu").manual_seed(5),
                   num_images_per_prompt=2, output_type="latent", max_sequence_length=512).images  # [2,N,64]
    assert ref.shape[0] == 2
    assert rel_err(pack_latents(ours), ref) < 1e-4


def test_guards_skip_meta_tensors():
    meta = torch.empty(2, 3, device="meta")
    require_finite_first_step("transformer", meta, (("condition", meta, "the VAE"),))
    require_finite_result("transformer", meta)


# ---- a NaN first step with LoRAs attached (issue 20): the LoRAs named, the weights blamed only when at fault -------


def write_lora(path, model, modules: dict):
    """A diffusers/PEFT LoRA file of rank 2 over {Linear name: (down value, up value)} of `model` (alpha = rank)."""
    from safetensors.torch import save_file

    linears = dict(model.named_modules())
    tensors = {}
    for name, (down, up) in modules.items():
        m = linears[name]
        tensors[f"transformer.{name}.lora_A.weight"] = torch.full((2, m.in_features), down)
        tensors[f"transformer.{name}.lora_B.weight"] = torch.full((m.out_features, 2), up)
    save_file(tensors, str(path))
    return path


def test_a_lora_that_overflows_at_step_1_is_named_and_the_weights_are_not_blamed(flux, tmp_path):
    """Finite LoRA files (checked when read) whose product overflows fp32 at step 1: the message lists every LoRA of
    the stack with its strength, says the weights are finite, and the fix is to detach them one at a time."""
    from fillscope import lora as L

    base = flux["transformer"]
    mild = write_lora(tmp_path / "mild.safetensors", base.model, {"proj_out": (0.01, 0.01)})
    huge = write_lora(tmp_path / "huge.safetensors", base.model, {"proj_out": (1e20, 1e20)})  # finite in fp32
    patched = L.with_loras(base, [(L.read_lora(mild, base), 0.5), (L.read_lora(huge, base), 1.0)])
    steps_seen = []
    with pytest.raises(FillScopeInputError) as e:
        flux_sample(flux, transformer=patched, callback=lambda i, n: steps_seen.append(i))
    msg = str(e.value)
    assert e.value.input_name == "transformer" and steps_seen == []
    assert ("the transformer with LoRAs mild.safetensors (strength 0.5), huge.safetensors (strength 1) produced "
            "NaN/inf at step 1, although its weights, the LoRA files and its inputs are finite: one of those "
            "LoRAs") in msg
    assert "detach the LoRAs" in e.value.fix and "download" not in msg and "weights contain" not in msg
    assert torch.isfinite(flux_sample(flux, steps=1).latents).all()  # the base, shared with the copy, is untouched


def small_component(lora_stack=(), dtype="fp32"):
    from fillscope.weights import Component

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    return Component("flux_fill_transformer", model, "tiny", "tiny", "cpu", dtype,
                     extras={"lora_stack": list(lora_stack)} if lora_stack else {})


def test_first_step_guard_tells_weights_lora_factors_and_overflow_apart():
    from types import SimpleNamespace

    from fillscope.lora import DOWN, UP

    nan_out = torch.full((1, 4), float("nan"))
    comp = small_component()  # finite weights, no LoRA: the compute dtype overflowed
    with pytest.raises(FillScopeInputError) as e:
        require_finite_first_step("transformer", nan_out.half(), component=dataclasses.replace(comp, dtype="fp16"))
    assert "although its weights and inputs are finite: the computation overflowed float16" in e.value.problem
    assert e.value.fix == "load the models with dtype bf16 (or fp32)." and "weights file" not in str(e.value)

    with torch.no_grad():
        comp.model[0].bias[1] = float("inf")  # a weight at fault: named, and only then blamed
    with pytest.raises(FillScopeInputError) as e:
        require_finite_first_step("transformer", nan_out, component=comp)
    assert "its weights contain NaN/inf (tensor '0.bias' holds 1 of 4 values)" in e.value.problem
    assert "download it again" in e.value.fix

    stack = [(SimpleNamespace(name="a.safetensors"), 1.0), (SimpleNamespace(name="b.safetensors"), 0.25)]
    comp = small_component(stack, dtype="fp16")
    comp.model[0].register_buffer(DOWN, torch.ones(2, 4), persistent=False)
    comp.model[0].register_buffer(UP, torch.full((4, 2), float("inf")), persistent=False)  # scaled past fp16
    with pytest.raises(FillScopeInputError) as e:
        require_finite_first_step("transformer", nan_out, component=comp)
    assert e.value.problem.startswith("the transformer with LoRAs a.safetensors (strength 1), b.safetensors "
                                      "(strength 0.25) produced NaN/inf at step 1: the LoRA factors on layer '0'")
    assert "lower the LoRAs' strengths" in e.value.fix


@pytest.mark.parametrize("batches, name, found, batch", [((3, 2), "reference_2", 2, 3), ((2, 1, 3), "image", 2, 3)])
def test_klein_edit_reference_batches_that_fit_neither_1_nor_the_batch_are_refused_before_encoding(batches, name,
                                                                                                   found, batch):
    """The edit condition's references against each other (the inpaint condition's reference against the image batch
    runs through a server, tests/test_server_hardening.py): refused before the VAE is touched (it has no model here)."""
    from fillscope.pipelines import klein
    from fillscope.specs import shipped_config
    from fillscope.weights import Component

    vae = Component("flux2_vae", None, "none", "none", "cpu", "fp32", shipped_config("flux2_vae"))
    images = [torch.rand(n, 32, 32, 3) for n in batches]
    with pytest.raises(FillScopeInputError) as e:
        klein.build_edit_condition(vae, images)
    assert e.value.input_name == name
    assert e.value.problem.startswith(f"holds a batch of {found} images for a batch of {batch} (the largest image "
                                      "batch)")


# ---- SD3 + inpainting ControlNet -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sd3_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("sd3")
    return build_tiny_sd3_folder(root / "sd3", seed=0), build_tiny_sd3_controlnet_folder(root / "controlnet", seed=0)


@pytest.fixture(scope="module")
def sd3(sd3_folders):
    folder, cn = sd3_folders
    stack = sd3_controlnet.load_stack(folder, controlnet=cn, tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    for name, prompt in (("positive", PROMPT), ("negative", NEGATIVE)):
        stack[name] = sd3_controlnet.encode_prompt(stack["clip_l"], stack["clip_g"], stack["t5"], prompt)
    return stack


def sd3_sample(stack, *, batch=1, transformer=None, controlnet=None, **kw):
    image, mask = image_and_mask(batch)
    cond = sd3_controlnet.build_inpaint_condition(stack["vae"], masks.prepare_image_and_mask(image, mask))
    return sd3_controlnet.sample_sd3_controlnet_inpaint(
        transformer or stack["transformer"], controlnet or stack["controlnet"], stack["positive"], stack["negative"],
        cond, **{"steps": 3, "seed": 11, "cfg": 4.0, **kw},
    )


def test_sd3_nan_weight_in_the_transformer_is_an_error_at_step_1(sd3):
    with pytest.raises(FillScopeInputError) as e:
        sd3_sample(sd3, transformer=poisoned(sd3["transformer"], "proj_out.weight"))
    assert "input 'transformer'" in str(e.value) and "produced NaN/inf at step 1" in str(e.value)


def test_sd3_nan_weight_in_the_controlnet_names_the_controlnet(sd3):
    bad = poisoned(sd3["controlnet"], "pos_embed_input.proj.weight")
    with pytest.raises(FillScopeInputError) as e:
        sd3_sample(sd3, controlnet=bad)
    assert "input 'controlnet'" in str(e.value) and "the ControlNet's weights contain NaN/inf" in str(e.value)


def test_sd3_batch_noise_and_diffusers_num_images_per_prompt(sd3, sd3_folders):
    seen = {}
    ours = sd3_sample(sd3, batch=2, steps=3, cfg=4.0, control_scale=0.9, seed=5, residual_mapping="diffusers",
                      observe=lambda name, t: seen.setdefault(name, t.clone())).latents
    expected = torch.randn((2, 16, H // 8, W // 8), generator=torch.Generator("cpu").manual_seed(5))
    assert torch.equal(seen["initial_noise"], expected)
    assert list(seen["transformer.input"].shape) == [4, 16, H // 8, W // 8]  # CFG: negative batch, positive batch
    image, mask = image_and_mask(1)
    prepared = masks.prepare_image_and_mask(image, mask)
    pipe = load_sd3_inpaint_pipeline(*sd3_folders)
    with sd3_argmax_vae_encode(pipe):
        ref = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, control_image=prepared.image, control_mask=prepared.mask,
                   height=H, width=W, num_inference_steps=3, guidance_scale=4.0, controlnet_conditioning_scale=0.9,
                   generator=torch.Generator("cpu").manual_seed(5), num_images_per_prompt=2, output_type="latent",
                   max_sequence_length=256).images
    assert ref.shape[0] == 2
    assert rel_err(ours, ref) < 1e-4


def test_flux_condition_refuses_the_sd3_vae_before_encoding():
    """Both VAEs have 16 latent channels: the kind is what tells them apart, before any encode or sampling."""
    image, mask = image_and_mask(1)
    with pytest.raises(FillScopeInputError) as e:
        flux_fill.build_fill_condition(vae.load_vae("meta", kind="sd3"), masks.prepare_image_and_mask(image, mask))
    assert e.value.input_name == "vae" and "SD3 VAE" in e.value.problem and "kind to flux" in e.value.fix


# ---- inputs checked before they can do harm (issue 10): NaN/inf scalars, images and masks -----------------------
# With NaN in one of these the guards after sampling would blame the weights (or a NaN threshold / cfg would go
# through silently); each is refused up front, naming the input.


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), -0.1, 1.5])
def test_prepare_refuses_a_threshold_that_is_not_a_number_from_0_to_1(threshold):
    image, mask = image_and_mask()
    with pytest.raises(FillScopeInputError) as e:
        masks.prepare_image_and_mask(image, mask, threshold=threshold)
    assert e.value.input_name == "threshold" and repr(threshold) in e.value.problem and "Fix:" in str(e.value)


@pytest.mark.parametrize("threshold", [0.5, 0.0])  # binarised, and a soft mask
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("name", ["image", "mask"])
def test_prepare_refuses_nan_or_inf_in_the_image_or_the_mask(name, bad, threshold):
    image, mask = image_and_mask()
    (image if name == "image" else mask)[0, 5, 7] = bad
    with pytest.raises(FillScopeInputError) as e:
        masks.prepare_image_and_mask(image, mask, threshold=threshold)
    assert e.value.input_name == name and "NaN/inf" in e.value.problem and "Fix:" in str(e.value)
    assert f"holds {3 if name == 'image' else 1} NaN/inf values" in e.value.problem


@pytest.mark.parametrize("guidance", [float("nan"), float("inf"), float("-inf")])
def test_flux_nan_guidance_is_named_not_blamed_on_the_weights(flux, guidance):
    steps_seen = []
    with pytest.raises(FillScopeInputError) as e:
        flux_sample(flux, guidance=guidance, callback=lambda i, n: steps_seen.append(i))
    assert e.value.input_name == "guidance" and repr(guidance) in e.value.problem and "Fix:" in str(e.value)
    assert "weights" not in str(e.value) and steps_seen == []


def test_flux_guidance_is_checked_before_anything_is_touched():
    with pytest.raises(FillScopeInputError, match="input 'guidance'"):
        flux_fill.sample_flux_fill(None, None, None, guidance=float("nan"))  # the models are never looked at


@pytest.mark.parametrize("name", ["cfg", "control_scale", "control_start", "control_end", "shift"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_sd3_nan_or_inf_scalars_are_named_not_blamed_on_the_weights(sd3, name, bad):
    steps_seen = []
    with pytest.raises(FillScopeInputError) as e:
        sd3_sample(sd3, **{name: bad}, callback=lambda i, n: steps_seen.append(i))
    assert e.value.input_name == name and repr(bad) in e.value.problem and "Fix:" in str(e.value)
    assert "weights" not in str(e.value) and steps_seen == []


def test_sd3_nan_cfg_does_not_switch_cfg_off_silently():
    with pytest.raises(FillScopeInputError, match="input 'cfg': is nan"):
        sd3_controlnet.sample_sd3_controlnet_inpaint(None, None, None, None, None, cfg=float("nan"))
