"""Speed settings (fillscope/speed.py) on CPU with fp32 tiny models: a diffusers step cache switched on for one
sampling run (first-block, mag, taylorseer) skips the transformer's tail on some steps, says how often, and comes
off afterwards (the next run equals a run that never had one, bit for bit); first-block at threshold 0 skips nothing; klein keeps
separate cache states for its positive and negative calls; SD3's transformer, first-block on klein and a bad value
are refused; fused
q/k/v projections give the unfused output to float rounding and come apart again exactly; regional torch.compile
gives the eager output."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tokenizers_available

from fillscope import masks, speed
from fillscope.errors import FillScopeInputError
from fillscope.pipelines import flux_fill, klein

pytestmark = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")

H, W = 48, 64
STEPS = 10


@pytest.fixture(scope="module")
def prepared():
    rows, cols = torch.arange(H)[:, None], torch.arange(W)[None, :]
    hole = ((rows >= 8) & (rows < 40) & (cols >= 16) & (cols < 48)).float()[None]
    return masks.prepare_image_and_mask(torch.rand(1, H, W, 3, generator=torch.Generator().manual_seed(5)), hole)


@pytest.fixture(scope="module")
def flux(tmp_path_factory, prepared):
    from tiny_flux import build_tiny_flux_fill_folder

    stack = flux_fill.load_stack(build_tiny_flux_fill_folder(tmp_path_factory.mktemp("flux"), seed=0),
                                 tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    text = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], "a red brick fireplace")
    cond = flux_fill.build_fill_condition(stack["vae"], prepared)

    def sample(**kw):
        return flux_fill.sample_flux_fill(stack["transformer"], text, cond, steps=STEPS, seed=4, **kw)

    return stack, sample, sample()


def rel_err(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


@pytest.mark.parametrize("kind", ["first-block", "mag", "taylorseer"])
def test_a_step_cache_skips_some_steps_says_so_and_comes_off(flux, kind):
    _, sample, plain = flux
    threshold = {"first-block": 10.0, "mag": 10.0, "taylorseer": None}[kind]  # 10: skip whenever allowed
    cached = sample(step_cache=kind, cache_threshold=threshold)
    facts = cached.info
    print(f"\n[{kind}] {facts['last_block_skipped']} of {facts['transformer_calls']} calls skipped the last block, "
          f"rel err {rel_err(cached.latents, plain.latents):.2e}")
    assert facts["step_cache"] == kind and facts["transformer_calls"] == STEPS
    assert 0 < facts["last_block_skipped"] < STEPS
    assert facts["last_block_computed"] + facts["last_block_skipped"] == STEPS
    assert torch.isfinite(cached.latents).all() and not torch.equal(cached.latents, plain.latents)
    assert torch.equal(sample().latents, plain.latents)  # the hooks came off


def test_first_block_at_threshold_zero_skips_nothing(flux):
    _, sample, plain = flux
    exact = sample(step_cache="first-block", cache_threshold=0.0)
    assert exact.info["last_block_skipped"] == 0
    assert rel_err(exact.latents, plain.latents) <= 1e-6


def test_klein_keeps_one_cache_state_for_each_guidance_pass(tmp_path, prepared):
    from tiny_klein import build_tiny_klein_folder

    stack = klein.load_stack(str(build_tiny_klein_folder(tmp_path / "klein", seed=0, distilled=False)),
                             tokenizer_folders=(None,), dtype="fp32", device="cpu")
    text, negative = (klein.encode_prompt(stack["qwen3"], p) for p in ("a red felt hat", ""))
    cond = klein.build_inpaint_condition(stack["vae"], prepared)
    kw = dict(steps=6, seed=4, distilled=False, negative=negative)
    plain = klein.sample_klein(stack["transformer"], text, cond, **kw)
    cached = klein.sample_klein(stack["transformer"], text, cond, step_cache="mag", cache_threshold=10.0, **kw)
    assert cached.info["transformer_calls"] == 12  # 6 steps, a positive and a negative call each
    assert cached.info["last_block_skipped"] > 0 and torch.isfinite(cached.latents).all()
    assert torch.equal(klein.sample_klein(stack["transformer"], text, cond, **kw).latents, plain.latents)
    with pytest.raises(FillScopeInputError, match="FirstBlockCache cannot run FLUX.2's blocks"):
        klein.sample_klein(stack["transformer"], text, cond, step_cache="first-block", **kw)


def test_refusals_name_the_input(flux):
    _, sample, _ = flux
    with pytest.raises(FillScopeInputError) as e:
        sample(step_cache="fast")
    assert e.value.input_name == "step_cache" and "first-block" in e.value.fix
    with pytest.raises(FillScopeInputError) as e:
        sample(step_cache="first-block", cache_threshold=float("nan"))
    assert e.value.input_name == "cache_threshold"
    with pytest.raises(FillScopeInputError, match="not been checked together"):
        sample(step_cache="mag", parallel=2)
    from diffusers import SD3Transformer2DModel

    sd3 = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=16, num_layers=1, attention_head_dim=8,
                                num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16,
                                pooled_projection_dim=16, out_channels=16, pos_embed_max_size=16)
    with pytest.raises(FillScopeInputError, match="no step cache for SD3Transformer2DModel"):
        with speed.step_cache(sd3, "first-block", 4):
            pass


def test_fused_qkv_gives_the_unfused_output(flux):
    from test_context_parallel import flux_inputs, klein_inputs, tiny_flux_transformer, tiny_klein_transformer

    for make, inputs in ((tiny_flux_transformer, flux_inputs), (tiny_klein_transformer, klein_inputs)):
        model, kw = make(), inputs()
        with torch.inference_mode():
            before = model(**kw, return_dict=False)[0]
            with speed.fused_qkv(model):
                fused = model(**kw, return_dict=False)[0]
            after = model(**kw, return_dict=False)[0]
        assert rel_err(fused, before) <= 1e-6, type(model).__name__
        assert torch.equal(after, before)


def test_a_batch_job_takes_the_step_cache_and_records_what_it_skipped(tmp_path):
    import json

    import numpy as np
    from PIL import Image
    from tiny_flux import build_tiny_flux_fill_folder

    from fillscope.batch.manifest import ManifestError, read_manifest
    from fillscope.batch.runner import ModelCache, run_batch

    folder = build_tiny_flux_fill_folder(tmp_path / "flux", seed=0)
    Image.fromarray(np.full((H, W, 3), 128, dtype=np.uint8), "RGB").save(tmp_path / "image.png")
    mask = np.zeros((H, W), dtype=np.uint8)
    mask[8:40, 16:48] = 255
    Image.fromarray(mask, "L").save(tmp_path / "mask.png")
    line = {"id": "cached", "family": "flux-fill", "models": str(folder), "image": "image.png", "mask": "mask.png",
            "prompt": "a red brick fireplace", "seed": 1, "steps": STEPS, "dtype": "fp32",
            "step_cache": "first-block", "cache_threshold": 10}
    (tmp_path / "jobs.jsonl").write_text(json.dumps(line) + "\n")
    summary = run_batch(read_manifest(tmp_path / "jobs.jsonl"), tmp_path / "out", progress=False,
                        cache=ModelCache(1, "cpu"))
    assert summary["ok"] == 1, summary
    facts = json.loads((tmp_path / "out" / "cached.shapes.json").read_text())["node"]["facts"]
    assert facts["step_cache"] == "first-block" and facts["last_block_skipped"] > 0, facts
    (tmp_path / "bad.jsonl").write_text(json.dumps(dict(line, cache_threshold="high")) + "\n")
    with pytest.raises(ManifestError, match='field "cache_threshold"'):
        read_manifest(tmp_path / "bad.jsonl")


def test_regional_compile_gives_the_eager_output():
    """torch.compile of the repeated blocks (inductor on CPU here): within 1e-5 of eager, compiled once."""
    from test_context_parallel import flux_inputs, klein_inputs, tiny_flux_transformer, tiny_klein_transformer

    for make, inputs in ((tiny_flux_transformer, flux_inputs), (tiny_klein_transformer, klein_inputs)):
        model, kw = make(), inputs()
        with torch.inference_mode():
            eager = model(**kw, return_dict=False)[0]
            assert speed.compile_repeated_blocks(model) and not speed.compile_repeated_blocks(model)
            compiled = model(**kw, return_dict=False)[0]
        assert rel_err(compiled, eager) <= 1e-5, type(model).__name__
