"""One image across ranks (fillscope.parallel) on CPU: fp32 tiny models, 2 local gloo ranks (run_on_ranks).

- Ulysses context parallelism: the tiny FLUX.1 Fill and FLUX.2 [klein] transformers on 2 ranks give the
  single-process output (max relative error <= 1e-5), with their inputs built as the samplers build them; the hooks
  come off afterwards (the model computes as before, bit for bit); sample_flux_fill and sample_klein at parallel=2
  give the single-process latents;
- CFG parallelism: sample_sd3_controlnet_inpaint at parallel=2 (rank 0 the positive pass, rank 1 the negative)
  gives the single-rank sampler's latents;
- the refusals: a degree that does not divide the heads (3; 4 for the tiny 2-head models) lists the valid ones; a
  parallel run without its process group names `parallel`;
- the same rank functions on two Ray actors (fillscope.parallel.ray_ranks): the transformers and the FLUX Fill and
  SD3 samplers within 1e-5 of one process; an input error on a rank comes back as itself.

Cost (issue 32): every start of ranks is interpreters importing torch and diffusers. The module starts one group of
spawned ranks for every comparison (`rank_runs`), one for the refusal, and one pair of Ray actors (`ray_ranks`, a
RayRanks kept for the module) for both Ray tests: the Ray refusal runs on the actors that ran the comparison, which
then run one more group (the refusal left them usable). Moved (session 14): that refusal ran on a run_on_ray_ranks
group of its own; run_on_ray_ranks is one run on a RayRanks of its own, and its refusal of a degree the cluster
cannot hold is still run through it.

Skipped where torch.distributed or gloo is missing (a failure under CI, as every non-CUDA skip: conftest.py).
"""

from __future__ import annotations

import time
from functools import partial

import pytest
import torch
from tiny_models import tokenizers_available

from fillscope import masks
from fillscope.errors import FillScopeInputError
from fillscope.parallel import cfg as cfg_parallel
from fillscope.parallel import context
from fillscope.parallel.launch import in_turn, run_on_ranks
from fillscope.pipelines import flux_fill, klein, sd3_controlnet
from fillscope.specs import flux_image_ids


def _gloo() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


pytestmark = pytest.mark.skipif(not _gloo(), reason="torch.distributed with the gloo backend is not available")

TOLERANCE = 1e-5
WORLD = 2


def max_rel_err(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest elementwise error relative to the reference's largest magnitude."""
    return float((ours.double() - reference.double()).abs().max() / reference.double().abs().max())


def on_ranks(label: str, *calls):
    """`calls` in turn on one group of WORLD ranks (one start): rank 0's results; the wall time printed (-s)."""
    start = time.perf_counter()
    results = run_on_ranks(in_turn, WORLD, *calls)
    print(f"\n[{label}] {WORLD} ranks: {time.perf_counter() - start:.1f} s")
    return results


def forward(model, degree, inputs):
    return partial(context.forward_context_parallel, model, degree, inputs)


# --- the degree and what a rank holds (no ranks started) ------------------------------------------------------

TINY_HEADS = {"num_attention_heads": 2, "attention_head_dim": 16, "in_channels": 128, "joint_attention_dim": 96}
KLEIN_4B = {"num_attention_heads": 24, "attention_head_dim": 128, "in_channels": 128, "out_channels": None,
            "joint_attention_dim": 7680}


def test_valid_degrees_divide_the_head_count():
    assert context.valid_degrees(KLEIN_4B) == [1, 2, 4, 8]
    assert context.valid_degrees({"num_attention_heads": 12}) == [1, 2, 4]
    assert context.valid_degrees(TINY_HEADS) == [1, 2]


@pytest.mark.parametrize("degree", [3, 4, 0, 2.0])
def test_check_degree_refuses_a_degree_that_does_not_split_the_heads(degree):
    with pytest.raises(FillScopeInputError) as e:
        context.check_degree(degree, TINY_HEADS)
    assert e.value.input_name == "parallel"
    assert "2 attention heads" in e.value.problem and e.value.fix == "use one of 1, 2."


def test_check_degree_lists_every_valid_value_of_a_24_head_transformer():
    with pytest.raises(FillScopeInputError) as e:
        context.check_degree(3, KLEIN_4B)
    assert e.value.fix == "use one of 1, 2, 4, 8."
    context.check_degree(8, KLEIN_4B)


def test_rank_shapes_split_the_tokens_then_the_heads():
    shapes = context.rank_shapes(KLEIN_4B, 2, 4096 + 4096, 512)  # klein inpaint at 1024x1024: noisy + source tokens
    assert shapes["tokens_per_rank"] == 4096 + 256 and shapes["heads_per_rank"] == 12
    assert shapes["hidden_states"] == [1, 4096, 128] and shapes["encoder_hidden_states"] == [1, 256, 7680]
    assert shapes["qkv_before_all_to_all"] == [1, 4352, 24, 128]
    assert shapes["qkv_after_all_to_all"] == [1, 8704, 12, 128]
    assert shapes["output_before_gather"] == [1, 4096, 128] and shapes["output"] == [1, 8192, 128]
    with pytest.raises(FillScopeInputError, match="cannot share 12 text tokens"):
        context.check_tokens(8, 4096, 12)


def test_parallel_sampling_without_its_process_group_is_refused():
    with pytest.raises(FillScopeInputError) as e:
        context.check_parallel(2, TINY_HEADS, 12, 512)
    assert e.value.input_name == "parallel" and "no process group is initialised" in e.value.problem
    with pytest.raises(FillScopeInputError, match="use 1 \\(off\\) or 2"):
        cfg_parallel.check_cfg_parallel(4)


# --- Ulysses: the transformers ---------------------------------------------------------------------------------


def tiny_flux_transformer():
    from diffusers import FluxTransformer2DModel
    from tiny_flux import TINY_TRANSFORMER_CONFIG
    from tiny_models import build_components

    return build_components(0, {"transformer": (1, lambda: FluxTransformer2DModel(**TINY_TRANSFORMER_CONFIG))},
                            None)["transformer"]


def tiny_klein_transformer():
    from diffusers import Flux2Transformer2DModel
    from tiny_klein import TINY_TRANSFORMER_CONFIG
    from tiny_models import build_components

    return build_components(0, {"transformer": (3, lambda: Flux2Transformer2DModel(**TINY_TRANSFORMER_CONFIG))},
                            None)["transformer"]


def flux_inputs(lh=6, lw=8, text_tokens=512):
    """sample_flux_fill's transformer call: noisy ++ condition [1,N,384], T5 [1,512,32], CLIP pooled [1,32],
    timestep, guidance 30, img_ids [N,3] and txt_ids [512,3] as the sampler makes them."""
    g = torch.Generator().manual_seed(11)
    n = (lh // 2) * (lw // 2)
    return dict(hidden_states=torch.randn(1, n, 384, generator=g),
                encoder_hidden_states=torch.randn(1, text_tokens, 32, generator=g),
                pooled_projections=torch.randn(1, 32, generator=g), timestep=torch.tensor([0.83]),
                guidance=torch.full([1], 30.0), img_ids=flux_image_ids(lh, lw), txt_ids=torch.zeros(text_tokens, 3))


def klein_inputs(h=4, w=6, text_tokens=512):
    """sample_klein's inpaint call: noisy tokens ++ the source's reference tokens [1,2N,128], Qwen3 states
    [1,512,96], img_ids (t=0 image, t=10 reference) [1,2N,4], txt_ids [1,512,4]."""
    g = torch.Generator().manual_seed(12)
    n = h * w
    return dict(hidden_states=torch.randn(1, 2 * n, 128, generator=g),
                encoder_hidden_states=torch.randn(1, text_tokens, 96, generator=g), timestep=torch.tensor([0.83]),
                guidance=None,
                img_ids=torch.cat([klein.token_ids(h, w, 0), klein.token_ids(h, w, klein.SOURCE_TIME_OFFSET)], dim=1),
                txt_ids=klein.KleinText(torch.zeros(1, text_tokens, 96), None).text_ids)


TRANSFORMERS = {"flux-fill": (tiny_flux_transformer, flux_inputs), "klein": (tiny_klein_transformer, klein_inputs)}


@pytest.fixture(scope="module")
def transformer_runs(rank_runs):
    """Each family's transformer on the module's group of 2 ranks (rank_runs): before, at degree 2, after; and the
    single-process reference."""
    built, results = rank_runs["transformers"]
    results = iter(results)
    runs = {}
    for family, (model, inputs) in built.items():
        with torch.inference_mode():
            reference = model(**inputs, return_dict=False)[0]
        runs[family] = (reference, *(next(results) for _ in range(3)))
    return runs


@pytest.mark.parametrize("family", list(TRANSFORMERS))
def test_ulysses_on_two_ranks_equals_one_process(transformer_runs, family):
    reference, before, split, after = transformer_runs[family]
    err = max_rel_err(split, reference)
    print(f"\n[{family} transformer] max rel err {err:.2e}")
    assert split.shape == reference.shape and err <= TOLERANCE
    assert torch.equal(before, after)  # the hooks came off: the same computation as before, bit for bit
    assert max_rel_err(before, reference) <= TOLERANCE


def test_context_parallel_refuses_an_sd3_transformer():
    from diffusers import SD3Transformer2DModel

    with pytest.raises(FillScopeInputError, match="SD3Transformer2DModel"):
        context.enable_context_parallel(SD3Transformer2DModel(num_layers=1, attention_head_dim=8, num_attention_heads=2,
                                                              sample_size=8, joint_attention_dim=16,
                                                              caption_projection_dim=16, pooled_projection_dim=8), 2)


# --- the samplers ---------------------------------------------------------------------------------------------

H, W = 48, 64


@pytest.fixture(scope="module")
def prepared():
    """A 48x64 image with a 32x32 hole: FLUX 12 image tokens, klein 12 + 12 reference tokens, SD3 a 6x8 latent."""
    rows, cols = torch.arange(H)[:, None], torch.arange(W)[None, :]
    hole = ((rows >= 8) & (rows < 40) & (cols >= 16) & (cols < 48)).float()[None]  # [1,H,W], 1 = repaint
    return masks.prepare_image_and_mask(torch.rand(1, H, W, 3, generator=torch.Generator().manual_seed(5)), hole)


def flux_fill_sampler(root, prepared):
    from tiny_flux import build_tiny_flux_fill_folder

    stack = flux_fill.load_stack(build_tiny_flux_fill_folder(root / "flux", seed=0), tokenizer_folders=(None, None),
                                 dtype="fp32", device="cpu")
    text = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], "a red brick fireplace")
    cond = flux_fill.build_fill_condition(stack["vae"], prepared)
    return partial(flux_fill.sample_flux_fill, stack["transformer"], text, cond, steps=3, seed=4)


def klein_sampler(root, prepared):
    """A base model under CFG: two transformer calls a step, both split."""
    from tiny_klein import build_tiny_klein_folder

    stack = klein.load_stack(str(build_tiny_klein_folder(root / "klein", seed=0, distilled=False)),
                             tokenizer_folders=(None,), dtype="fp32", device="cpu")
    text, negative = (klein.encode_prompt(stack["qwen3"], p) for p in ("a red felt hat", ""))
    cond = klein.build_inpaint_condition(stack["vae"], prepared)
    return partial(klein.sample_klein, stack["transformer"], text, cond, steps=3, seed=4, distilled=False,
                   negative=negative)


def sd3_sampler(root, prepared):
    from tiny_sd3 import build_tiny_sd3_controlnet_folder, build_tiny_sd3_folder

    stack = sd3_controlnet.load_stack(build_tiny_sd3_folder(root / "sd3", seed=0),
                                      controlnet=build_tiny_sd3_controlnet_folder(root / "cn", seed=0),
                                      tokenizer_folders=(None, None), dtype="fp32", device="cpu")
    encoders = stack["clip_l"], stack["clip_g"], stack["t5"]
    positive = sd3_controlnet.encode_prompt(*encoders, "a red brick fireplace in a living room")
    negative = sd3_controlnet.encode_prompt(*encoders, "blurry")
    cond = sd3_controlnet.build_inpaint_condition(stack["vae"], prepared)
    return partial(sd3_controlnet.sample_sd3_controlnet_inpaint, stack["transformer"], stack["controlnet"],
                   positive, negative, cond, steps=3, cfg=5.0, seed=4)


SAMPLERS = {"flux-fill": flux_fill_sampler, "klein": klein_sampler, "sd3": sd3_sampler}


@pytest.fixture(scope="module")
def rank_runs(tmp_path_factory, prepared):
    """Every call this module makes on spawned ranks but the refusal, on one group of 2 ranks (one start: two
    interpreters importing torch and diffusers; issue 32): each family's transformer before, at degree 2 and after;
    then, where ComfyUI's tokenizer files are found, each family's sampler at parallel=2. ("transformers": (the
    models and inputs, their results), "samplers": (the samplers, their results) or None.)"""
    built = {family: (make(), inputs()) for family, (make, inputs) in TRANSFORMERS.items()}
    calls = [forward(model, degree, inputs) for model, inputs in built.values() for degree in (1, 2, 1)]
    samplers = None
    if tokenizers_available():
        root = tmp_path_factory.mktemp("parallel")
        samplers = {family: build(root, prepared) for family, build in SAMPLERS.items()}
        calls += [partial(sample, parallel=2) for sample in samplers.values()]
    results = on_ranks("transformers and samplers", *calls)
    n = len(calls) - (len(samplers) if samplers else 0)
    return {"transformers": (built, results[:n]), "samplers": (samplers, results[n:]) if samplers else None}


@pytest.fixture(scope="module")
def sampler_runs(rank_runs):
    """Each family's sampler at parallel=2 on the module's group of 2 ranks (rank_runs), rank 0's result, and the
    single-process run of the same call."""
    if rank_runs["samplers"] is None:
        pytest.skip("ComfyUI tokenizer files not found")
    samplers, split = rank_runs["samplers"]
    return {family: (sample, sample(), result) for (family, sample), result in zip(samplers.items(), split)}


def sampler_error(sampler_runs, family):
    _, reference, split = sampler_runs[family]
    err = max_rel_err(split.latents, reference.latents)
    print(f"\n[{family} sampler] max rel err {err:.2e}")
    return err


def test_flux_fill_sampler_at_parallel_2_equals_one_process(sampler_runs):
    sample, _, split = sampler_runs["flux-fill"]
    assert sampler_error(sampler_runs, "flux-fill") <= TOLERANCE
    assert split.info["context_parallel"]["image_tokens_per_rank"] == 6
    assert split.info["context_parallel"]["text_tokens_per_rank"] == 256
    with pytest.raises(FillScopeInputError, match="no process group"):
        sample(parallel=2)


def test_klein_sampler_at_parallel_2_equals_one_process(sampler_runs):
    _, reference, split = sampler_runs["klein"]
    assert sampler_error(sampler_runs, "klein") <= TOLERANCE
    assert split.info["cfg"] and split.info["context_parallel"]["tokens_per_rank"] == (12 + 12 + 512) // 2


def test_sd3_cfg_parallel_sampler_equals_the_single_rank_sampler(sampler_runs):
    sample, reference, split = sampler_runs["sd3"]
    assert "cfg_passes" not in reference.info  # one rank: one pass a step, the batch [negative, positive]
    assert sampler_error(sampler_runs, "sd3") <= TOLERANCE
    assert split.info["cfg_parallel"] == "positive pass on this rank of 2"  # rank 0's result
    assert split.info["controlnet_steps"] == reference.info["controlnet_steps"] == 3
    with pytest.raises(FillScopeInputError) as e:
        sample(parallel=3)
    assert e.value.input_name == "parallel" and e.value.fix == "use 1 (off) or 2."


def test_an_input_error_on_a_rank_comes_back_as_itself():
    with pytest.raises(FillScopeInputError) as e:
        run_on_ranks(context.check_degree, WORLD, 4, TINY_HEADS)
    assert e.value.input_name == "parallel" and e.value.fix == "use one of 1, 2."


# --- the same rank functions on Ray actors ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster(ray_tmp_env):
    """A local Ray with 2 CPUs (HOME, RAY_TMPDIR and TMPDIR in a temporary folder), stopped after the module."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'fillscope[cluster]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=256 * 1024**2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_ranks(ray_cluster):
    """One group of WORLD rank actors (ray_ranks.RayRanks) for the module's runs on Ray: the actors' start (an
    interpreter importing torch and diffusers) paid once (issue 32); each run forms its own process group."""
    from fillscope.parallel.ray_ranks import RayRanks

    with RayRanks(WORLD) as ranks:
        yield ranks


def test_ray_actor_ranks_equal_one_process(ray_ranks, transformer_runs, sampler_runs):
    """Two Ray actors joined in a gloo group run the transformers (Ulysses) and the FLUX Fill and SD3 (CFG parallel)
    samplers as the spawned ranks do: within 1e-5 of one process."""
    models = {family: (make(), inputs()) for family, (make, inputs) in TRANSFORMERS.items()}
    calls = [forward(model, 2, inputs) for model, inputs in models.values()]
    calls += [partial(sampler_runs[family][0], parallel=2) for family in ("flux-fill", "sd3")]
    start = time.perf_counter()
    results = ray_ranks.run(in_turn, *calls)
    print(f"\n[ray ranks] {WORLD} actors: {time.perf_counter() - start:.1f} s")
    for (family, _), split in zip(models.items(), results):
        assert max_rel_err(split, transformer_runs[family][0]) <= TOLERANCE, family
    for family, split in zip(("flux-fill", "sd3"), results[2:]):
        assert max_rel_err(split.latents, sampler_runs[family][1].latents) <= TOLERANCE, family
    assert results[3].info["cfg_parallel"] == "positive pass on this rank of 2"


def test_an_input_error_on_a_ray_rank_comes_back_as_itself(ray_cluster, ray_ranks):
    """On the module's rank actors (ray_ranks: the same processes as the test above, when it ran): the refusal comes
    back as itself, and the actors still run the next group. run_on_ray_ranks, a group of its own for one run,
    refuses a degree the cluster cannot hold before any actor starts."""
    from fillscope.parallel.ray_ranks import run_on_ray_ranks

    with pytest.raises(FillScopeInputError) as e:
        ray_ranks.run(context.check_degree, 4, TINY_HEADS)
    assert e.value.input_name == "parallel" and e.value.fix == "use one of 1, 2."
    assert ray_ranks.run(context.valid_degrees, TINY_HEADS) == [1, 2]  # the refusal left the ranks usable
    with pytest.raises(FillScopeInputError, match="3 CPU\\(s\\) are needed and the Ray cluster has 2"):
        run_on_ray_ranks(context.check_degree, 3, 2, TINY_HEADS)
