"""The `storage = fp8_e4m3fn` switch: the repeated blocks' Linear weights kept in float8 (half their bf16 bytes),
computed in the loader's dtype one layer at a time; close to, not equal to, the bf16 result."""

from __future__ import annotations

import pytest
import torch

from fillscope import masks, placement, text
from fillscope.pipelines import flux_fill
from fillscope.fp8 import store_blocks_in_fp8
from tiny_flux import build_tiny_flux_fill_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_flux_fill_folder(tmp_path_factory.mktemp("tiny") / "f", seed=0)


def _sample(folder, fp8: bool):
    kw = dict(dtype="bf16", device="cpu")
    tr = flux_fill.load_flux_fill_transformer(folder, **kw)
    fact = store_blocks_in_fp8(tr) if fp8 else None
    from fillscope import vae

    stack = {"clip_l": text.load_clip_l(folder, **kw), "t5": text.load_t5(folder, **kw), "transformer": tr,
             "vae": vae.load_vae(folder, **kw)}
    image, mask = masks.synthetic_image_and_mask(64, 48, 0.5)
    done = flux_fill.run(stack, "a cat", masks.prepare_image_and_mask(image, mask), steps=2, seed=3)
    return tr, fact, done.latent.latents


def test_fp8_storage_halves_the_block_weights_and_stays_close_to_bf16(folder):
    ref_tr, _, ref = _sample(folder, fp8=False)
    tr, fact, got = _sample(folder, fp8=True)
    fp8 = {n for n, p in tr.model.named_parameters() if p.dtype == torch.float8_e4m3fn}
    assert fp8 and all(".transformer_blocks." in f".{n}" or "single_transformer_blocks." in n for n in fp8)
    assert tr.model.x_embedder.weight.dtype == torch.bfloat16 and tr.model.proj_out.weight.dtype == torch.bfloat16
    assert tr.model.dtype == torch.bfloat16  # what pipelines cast their inputs to
    block_bytes = sum(p.numel() for n, p in ref_tr.model.named_parameters() if n in fp8)
    assert placement.weight_bytes(ref_tr.model) - placement.weight_bytes(tr.model) == block_bytes  # 2 bytes -> 1
    assert f"{len(fp8)} block weight tensors" in fact
    assert got.dtype == ref.dtype and torch.isfinite(got).all()
    rel = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    assert 0 < rel < 0.1, rel  # e4m3 keeps 3 mantissa bits: close, not equal


def test_fp8_storage_on_meta_gives_the_full_size_figure():
    """FLUX.1 Fill's 12B transformer on meta: what the switch saves at full size (no memory needed)."""
    tr = flux_fill.load_flux_fill_transformer("meta", dtype="bf16")
    before = placement.weight_bytes(tr.model)
    store_blocks_in_fp8(tr)
    after = placement.weight_bytes(tr.model)
    assert before / 2**30 == pytest.approx(22.17, abs=0.01)
    assert 0.5 < after / before < 0.52  # the blocks hold ~99% of the weights


@pytest.fixture(scope="module")
def sd3_folders(tmp_path_factory):
    from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

    root = tmp_path_factory.mktemp("tiny_sd3")
    return build_tiny_sd3_folder(root / "sd3", seed=0), build_tiny_sd3_controlnet_folder(root / "cn", seed=0)


def _sd3_latents(folders, fp8_kinds):
    from fillscope.pipelines import sd3_controlnet
    from tiny_models import comfy_tokenizer_dirs

    stack = sd3_controlnet.load_stack(str(folders[0]), controlnet=str(folders[1]), tokenizer_folders=comfy_tokenizer_dirs(),
                                      dtype="bf16", device="cpu")
    facts = {k: store_blocks_in_fp8(c) for k, c in stack.items() if k in fp8_kinds}
    image, mask = masks.synthetic_image_and_mask(64, 48, 0.5)
    done = sd3_controlnet.run(stack, "a cat", masks.prepare_image_and_mask(image, mask), steps=2, seed=3)
    return stack, facts, done.latent.latents


def test_fp8_storage_of_t5_and_the_sd3_denoisers_stays_close_to_bf16(sd3_folders):
    _, _, ref = _sd3_latents(sd3_folders, ())
    stack, facts, got = _sd3_latents(sd3_folders, ("t5", "transformer", "controlnet"))
    for key in ("t5", "transformer", "controlnet"):
        assert "stored in fp8_e4m3fn" in facts[key], key
        assert any(p.dtype == torch.float8_e4m3fn for p in stack[key].model.parameters()), key
    assert torch.isfinite(got).all()
    rel = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    assert 0 < rel < 0.1, rel


@pytest.fixture(scope="module")
def klein_folder(tmp_path_factory):
    from tiny_klein import build_tiny_klein_folder

    return build_tiny_klein_folder(tmp_path_factory.mktemp("tiny_klein") / "k", seed=0)


def _klein_latents(folder, fp8_kinds):
    from fillscope.pipelines import klein

    stack = klein.load_stack(str(folder), tokenizer_folders=(None,), dtype="bf16", device="cpu")
    facts = {k: store_blocks_in_fp8(c) for k, c in stack.items() if k in fp8_kinds}
    image, mask = masks.synthetic_image_and_mask(64, 48, 0.5)
    done = klein.run(stack, "a cat", masks.prepare_image_and_mask(image, mask), steps=2, seed=3)
    return stack, facts, done.latent.latents


def test_fp8_storage_of_qwen3_and_the_klein_transformer_stays_close_to_bf16(klein_folder):
    _, _, ref = _klein_latents(klein_folder, ())
    stack, facts, got = _klein_latents(klein_folder, ("qwen3", "transformer"))
    qwen_fp8 = [n for n, p in stack["qwen3"].model.named_parameters() if p.dtype == torch.float8_e4m3fn]
    assert qwen_fp8 and all(n.startswith("layers.") for n in qwen_fp8)  # the decoder layers; embeddings stay bf16
    assert any(p.dtype == torch.float8_e4m3fn for p in stack["transformer"].model.single_transformer_blocks.parameters())
    assert "block weight tensors" in facts["qwen3"] and "block weight tensors" in facts["transformer"]
    rel = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    assert torch.isfinite(got).all() and 0 < rel < 0.15, rel
