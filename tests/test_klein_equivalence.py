"""FillScope's FLUX.2 [klein] pipeline against diffusers' own Flux2KleinInpaintPipeline and Flux2KleinPipeline on
tiny fp32 repository folders (tests/tiny_klein.py): same prompt, image, mask, seed -> the same image (relative
error <= 1e-4), distilled (no CFG) and base (CFG against ""), with and without strength and reference images, and a
"narrow" klein whose widths are not the published ones (tiny_klein.NARROW_*: an 8-channel VAE at 1/4, so 32-channel
tokens of 8 px, distilled): FillScope must take them from the loaded configs as diffusers does.
FillScope's deliberate difference in mask handling (token_mask="cover") is set to diffusers' ("bilinear") here and
pinned down on its own below."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from tiny_klein import (
    NARROW_LATENT_CHANNELS, build_tiny_klein_folder, load_pipeline, qwen_bpe_dir, run_diffusers_edit,
    run_diffusers_inpaint, uint8_image,
)
from tiny_models import tokenizers_available

from fillscope.masks import prepare_image_and_mask
from fillscope.pipelines import klein

pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

TOLERANCE = 1e-4
PROMPT = "a red felt hat on the table"
H, W = 64, 96


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return float((ours - reference).norm() / reference.norm())


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("klein")
    return {"distilled": build_tiny_klein_folder(root / "distilled", seed=0, distilled=True),
            "base": build_tiny_klein_folder(root / "base", seed=0, distilled=False),
            "narrow": build_tiny_klein_folder(root / "narrow", seed=0, distilled=True, narrow=True)}


@pytest.fixture(scope="module")
def stacks(folders):
    return {name: klein.load_stack(str(folder), tokenizer_folders=(None,), dtype="fp32", device="cpu")
            for name, folder in folders.items()}


@pytest.fixture(scope="module")
def pipelines(folders):
    """diffusers' pipeline of a folder, loaded once for the module (from_pretrained was most of each test's time);
    each call gets a fresh scheduler from the folder's config, so a run starts from the state a new load has."""
    loaded = {}

    def get(model: str, inpaint: bool = True):
        if (model, inpaint) not in loaded:
            loaded[model, inpaint] = load_pipeline(folders[model], inpaint=inpaint)
        pipe = loaded[model, inpaint]
        pipe.scheduler = type(pipe.scheduler).from_config(pipe.scheduler.config)
        return pipe

    return get


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(1)
    image = uint8_image(g, H, W)
    mask = torch.zeros(1, H, W)
    mask[:, 16:48, 20:70] = 1.0
    return {"image": image, "mask": mask, "reference": uint8_image(g, 80, 64)}


@pytest.fixture(autouse=True)
def quiet_library_logs():
    logging.disable(logging.WARNING)  # diffusers warns that a distilled model ignores guidance, on every call
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("model", ["distilled", "base", "narrow"])
@pytest.mark.parametrize("strength", [1.0, 0.6])
@pytest.mark.parametrize("with_reference", [False, True])
def test_inpaint_equals_diffusers_flux2_klein_inpaint_pipeline(pipelines, stacks, inputs, model, strength,
                                                               with_reference):
    reference = inputs["reference"] if with_reference else None
    prepared = prepare_image_and_mask(inputs["image"], inputs["mask"])
    ours = klein.run(stacks[model], PROMPT, prepared, reference=reference, steps=4, seed=3, strength=strength,
                     token_mask="bilinear")
    theirs = run_diffusers_inpaint(
        pipelines(model), prompt=PROMPT, image=inputs["image"].permute(0, 3, 1, 2),
        mask=inputs["mask"][:, None], seed=3, steps=4, strength=strength,
        reference=None if reference is None else reference.permute(0, 3, 1, 2))
    assert ours.latent.info["cfg"] == (model == "base")
    assert ours.latent.info["steps_run"] == (4 if strength == 1.0 else 3)
    token_px, channels = (8, NARROW_LATENT_CHANNELS * 4) if model == "narrow" else (16, 128)
    assert ours.latent.latents.shape == (1, channels, H // token_px, W // token_px)
    assert relative_error(ours.image.permute(0, 3, 1, 2), theirs) <= TOLERANCE


@pytest.mark.parametrize("model", ["distilled", "base", "narrow"])
@pytest.mark.parametrize("n_references", [1, 2])
def test_mask_free_edit_equals_diffusers_flux2_klein_pipeline(pipelines, stacks, inputs, model, n_references):
    references = [inputs["image"], inputs["reference"]][:n_references]
    ours = klein.run_edit(stacks[model], "make it blue", references, steps=3, seed=5)
    theirs = run_diffusers_edit(pipelines(model, inpaint=False), prompt="make it blue",
                                references=references, seed=5, steps=3)
    assert ours.image.shape == (1, H, W, 3)  # the first reference's size, as diffusers
    assert relative_error(ours.image.permute(0, 3, 1, 2), theirs) <= TOLERANCE


def test_text_condition_equals_diffusers_from_the_full_encoder(pipelines, stacks):
    """FillScope builds 28 of the folder's 30 Qwen3 layers and no LM head; the stacked states equal diffusers'
    (which runs the whole Qwen3ForCausalLM)."""
    pipe = pipelines("distilled")
    theirs = pipe._get_qwen3_prompt_embeds(pipe.text_encoder, pipe.tokenizer, PROMPT)
    ours = klein.encode_prompt(stacks["distilled"]["qwen3"], PROMPT)
    assert stacks["distilled"]["qwen3"].model.config.num_hidden_layers == 28
    assert not hasattr(stacks["distilled"]["qwen3"].model, "lm_head")
    assert ours.embeds.shape == theirs.shape == (1, 512, 96)
    assert torch.equal(ours.embeds, theirs)


def test_a_full_mask_repaints_every_token_and_still_equals_diffusers(pipelines, stacks, inputs):
    """A mask over the whole image: nothing is kept, the source is still the reference the transformer sees."""
    full = torch.ones(1, H, W)
    prepared = prepare_image_and_mask(inputs["image"], full)
    ours = klein.run(stacks["distilled"], PROMPT, prepared, steps=4, seed=3, token_mask="bilinear")
    theirs = run_diffusers_inpaint(pipelines("distilled"), prompt=PROMPT,
                                   image=inputs["image"].permute(0, 3, 1, 2), mask=full[:, None], seed=3, steps=4)
    assert bool((ours.condition.token_mask == 1).all())
    assert relative_error(ours.image.permute(0, 3, 1, 2), theirs) <= TOLERANCE


def test_unmasked_tokens_end_exactly_on_the_source_latents(stacks, inputs):
    prepared = prepare_image_and_mask(inputs["image"], inputs["mask"])
    result = klein.run(stacks["distilled"], PROMPT, prepared, steps=4, seed=3)
    kept = result.condition.token_mask[0, :, 0] == 0
    ours = klein.pack_tokens(result.latent.latents)[0]
    source = klein.pack_tokens(result.condition.source)[0]
    assert kept.any() and (~kept).any()
    assert torch.equal(ours[kept], source[kept])


def test_cover_token_mask_keeps_a_thin_mask_that_bilinear_loses():
    """A 4-px line away from the 16x16 blocks' centres: diffusers' bilinear resize samples only the centre pixels
    and repaints nothing; 'cover' repaints every token the line touches."""
    mask = torch.zeros(1, 1, 64, 64)
    mask[:, :, :, 1:5] = 1.0
    assert klein.tokens_from_mask(mask, 4, 4, "bilinear").sum() == 0
    cover = klein.tokens_from_mask(mask, 4, 4, "cover")[0, :, 0].reshape(4, 4)
    assert torch.equal(cover[:, 0], torch.ones(4)) and cover[:, 1:].sum() == 0


def test_same_seed_same_image_and_another_seed_another(stacks, inputs):
    prepared = prepare_image_and_mask(inputs["image"], inputs["mask"])
    first = klein.run(stacks["distilled"], PROMPT, prepared, seed=7).image
    again = klein.run(stacks["distilled"], PROMPT, prepared, seed=7).image
    other = klein.run(stacks["distilled"], PROMPT, prepared, seed=8).image
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_qwen3_tokenizer_from_comfyui_bpe_has_qwen3_special_tokens_and_template():
    import tempfile

    from fillscope.text import load_qwen3_tokenizer, qwen3_chat_text

    def assembled_folders():
        return set(Path(tempfile.gettempdir()).glob("fillscope-qwen3-tokenizer-*"))

    before = assembled_folders()
    tok = load_qwen3_tokenizer.__wrapped__(qwen_bpe_dir())  # past the lru_cache: assembled in this call
    assert assembled_folders() <= before  # the copy it read is gone
    assert tok.convert_ids_to_tokens([151665, 151666, 151667, 151668]) == [
        "<tool_response>", "</tool_response>", "<think>", "</think>"]
    text = qwen3_chat_text(tok, "a red hat")
    assert text == "<|im_start|>user\na red hat<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = tok(text).input_ids
    assert ids[:3] == [151644, 872, 198] and ids[-4:] == [151667, 271, 151668, 271]
    assert tok.pad_token_id == 151643


def test_a_vae_and_transformer_of_different_widths_are_refused_before_the_first_step(stacks, inputs):
    """The narrow VAE's 32-channel tokens for the published-width transformer (128): refused naming both and their
    widths, before the transformer runs; a latent decoded by a VAE of other widths is refused too."""
    from fillscope.errors import FillScopeInputError

    prepared = prepare_image_and_mask(inputs["image"], inputs["mask"])
    cond = klein.build_inpaint_condition(stacks["narrow"]["vae"], prepared)
    text = klein.encode_prompt(stacks["distilled"]["qwen3"], PROMPT)
    calls = []
    handle = stacks["distilled"]["transformer"].model.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        with pytest.raises(FillScopeInputError) as e:
            klein.sample_klein(stacks["distilled"]["transformer"], text, cond, steps=1)
    finally:
        handle.remove()
    assert calls == [] and e.value.input_name == "transformer"
    assert "in_channels 128" in e.value.problem
    assert "FLUX.2 VAE (latent_channels 8 x 2x2 patches = 32 at 1/8)" in e.value.problem
    latent = klein.sample_klein(stacks["narrow"]["transformer"], text, cond, steps=1)
    with pytest.raises(FillScopeInputError) as e:
        klein.decode_to_image(stacks["distilled"]["vae"], latent)
    assert e.value.input_name == "vae" and "128-channel" in e.value.problem and "32 channels" in e.value.problem
