"""FillScope's SD3 ControlNet inpaint sampler on ComfyUI's own SD3 MODEL (nodes/native_sd3.py) in a real ComfyUI 0.3.75
server.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes as one more custom_nodes
folder; this module writes into its models folder a tiny SD3 folder, a tiny inpainting ControlNet folder for it and a
LoRA. The test-only node NativeSD3TestTinySD3 (fillscope_native_sd3_test_nodes.py) builds ComfyUI's own SD3 model from
that folder's transformer weights, converted, detected and built by ComfyUI's own code (comfy.model_detection,
comfy.supported_models.SD3).

The tiny SD3 folder is tests/tiny_sd3.py's (its text encoders, tokenizers and VAE) with a transformer of the width
ComfyUI's MMDiT can be built at: comfy's MMDiT fixes 64 channels a head with `depth` heads and `depth` joint blocks
(hidden = 64 * depth; its diffusers key map swaps the last block's modulation at depth - 1), while tiny_sd3's
transformer has 2 heads of 8 in 24 blocks. Here: depth 4 (4 blocks, 4 heads of 64) and a ControlNet of 3 blocks, the
published 24 / 23 shape in small (diffusers' mapping then adds 0, 0, 1 and skips the context_pre_only last block).

Checked, on the same weights, seed, condition and texts (fp32): FillScope's sampler with its own transformer and with
the native MODEL give the same latents within 1e-4 relative (cfg 1, CFG, CFG with denoise < 1 and a soft mask, and
the diffusers residual mapping); the same PEFT LoRA file through FillScope's SD3 LoRA node and through ComfyUI's
LoraLoaderModelOnly changes both alike (1e-4); wiring both or neither of transformer / model, and a FLUX MODEL, are
refused before the first step, naming the inputs, and the next prompt runs. The residual mapping the native call uses
equals diffusers' rule at the published 24 blocks / 23 residuals.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import save_file
from workflow_helpers import max_rel, refusal, run_saved, wire_denoiser

pytestmark = pytest.mark.server

FOLDER, CONTROLNET, LORA = "SD3-native-tiny", "SD3-native-tiny-controlnet", "native_sd3_test_lora.safetensors"
OTHER_CONTROLNET = "SD3-native-tiny-controlnet-other-width"  # half the heads: residuals of another width
STEPS = 2  # the fewest that still runs a step after the first (the equalities hold step by step)
COMFY_HEAD_DIM = 64  # comfy's MMDiT: hidden_size = 64 * depth, depth heads (mmdit.py "apply magic")
DEPTH = 4


def transformer_config() -> dict:
    from tiny_sd3 import TINY_SD3_TRANSFORMER_CONFIG

    return {**TINY_SD3_TRANSFORMER_CONFIG, "num_layers": DEPTH, "num_attention_heads": DEPTH,
            "attention_head_dim": COMFY_HEAD_DIM, "caption_projection_dim": DEPTH * COMFY_HEAD_DIM}


def build_models(seed: int = 0):
    """The transformer and the inpainting ControlNet (one block fewer, 16 + 1 condition channels), seeded; the
    weights diffusers zero-initialises (the ControlNet's output blocks and condition embedding) refilled, so every
    residual acts."""
    from diffusers import SD3ControlNetModel, SD3Transformer2DModel
    from tiny_models import fill_if_zero, seeded
    from tiny_sd3 import CONTROLNET_FILL_STD

    cfg = transformer_config()
    with seeded(seed * 16 + 1):
        transformer = SD3Transformer2DModel(**cfg).eval()
    with seeded(seed * 16 + 7):
        controlnet = SD3ControlNetModel(**{**cfg, "num_layers": DEPTH - 1, "extra_conditioning_channels": 1}).eval()
    gen = torch.Generator().manual_seed(seed * 16 + 8)
    fill_if_zero(transformer, gen, std=CONTROLNET_FILL_STD)
    fill_if_zero(controlnet, gen, std=CONTROLNET_FILL_STD)
    return transformer, controlnet


def peft_lora(transformer, rank: int = 4, seed: int = 0) -> dict:
    """A LoRA in diffusers/PEFT naming (transformer.<module>.lora_A / lora_B, no alpha: alpha = rank for both
    FillScope and ComfyUI) over every Linear of the joint blocks but the modulations (`norm*`)."""
    g, out = torch.Generator().manual_seed(seed), {}
    for name, module in transformer.named_modules():
        if not isinstance(module, torch.nn.Linear) or not name.startswith("transformer_blocks.") or "norm" in name:
            continue
        out[f"transformer.{name}.lora_A.weight"] = torch.randn(rank, module.in_features, generator=g) * 0.1
        out[f"transformer.{name}.lora_B.weight"] = torch.randn(module.out_features, rank, generator=g) * 0.1
    return out


@pytest.fixture(scope="module")
def server(test_nodes_server):
    from tiny_models import save_model_folder
    from tiny_sd3 import build_tiny_sd3_folder

    def prepare(server):
        diffusers = server.models_dir / "diffusers"
        folder = build_tiny_sd3_folder(diffusers / FOLDER, seed=0)
        transformer, controlnet = build_models(0)
        shutil.rmtree(folder / "transformer")
        save_model_folder(folder / "transformer", transformer)
        save_model_folder(diffusers / CONTROLNET, controlnet)
        from diffusers import SD3ControlNetModel

        cfg = {**transformer_config(), "num_layers": DEPTH - 1, "extra_conditioning_channels": 1}
        heads = cfg["num_attention_heads"] // 2
        save_model_folder(diffusers / OTHER_CONTROLNET, SD3ControlNetModel(
            **{**cfg, "num_attention_heads": heads, "caption_projection_dim": heads * cfg["attention_head_dim"]}))
        (server.models_dir / "loras").mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in peft_lora(transformer).items()}, str(server.models_dir / "loras" / LORA))

    with test_nodes_server.module(prepare) as server:
        yield server


# ---- graphs ------------------------------------------------------------------------------------------------------


def n(class_type, **inputs) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def graph(name: str, *, native: bool, lora: bool = False, flux: bool = False, both: bool = False,
          neither: bool = False, seed: int = 0, cfg: float = 1.0, denoise: float = 1.0, soft: bool = False,
          residual_mapping: str = "one_to_one", controlnet: str = CONTROLNET, controlnet_dtype: str = "fp32") -> dict:
    """FillScope's loaders, prompts and condition; the sampler on FillScope's transformer or the native MODEL (with the
    LoRA through FillScope's SD3 LoRA node or ComfyUI's LoraLoaderModelOnly); its latents saved as `name`."""
    fs = {"source": FOLDER, "dtype": "fp32"}
    text = {"clip_l": ["1", 0], "clip_g": ["2", 0], "t5": ["3", 0]}
    g = {
        "1": n("FillScopeLoadCLIPL", **fs), "2": n("FillScopeLoadCLIPG", **fs), "3": n("FillScopeLoadT5", **fs),
        "4": n("FillScopeLoadSD3Transformer", variant="sd3-medium", **fs),  # a folder: its own config.json
        "5": n("FillScopeLoadSD3InpaintControlNet", source=controlnet, dtype=controlnet_dtype),
        "6": n("FillScopeLoadVAE", kind="sd3", **fs),
        "7": n("FillScopeSD3Prompt", text="a red brick fireplace", **text),
        "8": n("FillScopeSD3Prompt", text="blurry, low quality", **text),
        "9": n("FillScopeSyntheticImageMask", width=128, height=96, mask_fraction=0.5),
        "10": n("FillScopeSD3InpaintCondition", vae=["6", 0], image=["9", 0], mask=["9", 1], invert_mask=False,
                threshold=0.5, grow=0, feather=0, size_mode="pad"),
        "11": n("FillScopeSD3ControlNetInpaintSampler", controlnet=["5", 0], positive=["7", 0], negative=["8", 0],
                condition=["10", 0], seed=seed, steps=STEPS, cfg=cfg, control_scale=0.95, control_start=0.0,
                control_end=1.0, shift=3.0, denoise=denoise, residual_mapping=residual_mapping),
        "12": n("NativeFillTestSaveFSLatent", latent=["11", 0], name=name),
    }
    sampler = g["11"]["inputs"]
    if soft:
        sampler["soft_mask"] = ["9", 1]
    g["m"] = n("NativeSD3TestTinyFlux") if flux else n("NativeSD3TestTinySD3", folder=FOLDER)
    wire_denoiser(g, sampler, n, native=native, both=both, neither=neither, lora=lora, lora_name=LORA,
                  transformer="4", lora_node="FillScopeSD3LoRA")
    return g


def run(server, name: str, **kw) -> torch.Tensor:
    return run_saved(server, graph(name, **kw), name)


_latents: dict = {}  # (the graph's options) -> the latents its run saved, for this module's comparisons


def latents(server, name: str, **kw) -> torch.Tensor:
    """The latents of graph(**kw), run once for the module: the comparisons below read some graphs more than once
    (the native MODEL at cfg 5 in three tests, the diffusers mapping and FillScope's cfg 5 in two); a rerun of the same
    prompt on the same server gives the same bits (CPU, fp32, one thread), so it is run the first time only. The
    prompts after a refusal call run() itself: that a new prompt runs is their point."""
    key = tuple(sorted(kw.items()))
    if key not in _latents:
        _latents[key] = run(server, name, **kw)
    return _latents[key]


def refused(server, **kw) -> str:
    return refusal(server, graph("refused", **kw))


# ---- tests -------------------------------------------------------------------------------------------------------


def test_the_native_residual_mapping_is_diffusers_rule_at_the_published_24_blocks():
    """block_residuals (what the native call hands ComfyUI's MMDiT as control["output"]) against the rule read from
    diffusers' SD3 transformer (tiny_sd3.diffusers_residual_index): 24 blocks, 23 residuals."""
    from fillscope.pipelines.sd3_controlnet import block_residuals
    from tiny_sd3 import diffusers_residual_index

    residuals = list(range(23))
    assert block_residuals(residuals, 24, "diffusers") == [diffusers_residual_index(i) for i in range(24)]
    assert block_residuals(residuals, 24, "one_to_one") == residuals + [None]
    assert block_residuals([], 24, "diffusers") == [None] * 24


def test_an_external_denoiser_with_parallel_2_is_refused_before_anything_runs():
    """CFG parallelism runs FillScope's own transformer on two ranks; an ExternalDenoiser (the native MODEL) is refused
    naming the option, before the models or the condition are looked at."""
    from fillscope.errors import FillScopeInputError
    from fillscope.pipelines.sd3_controlnet import sample_sd3_controlnet_inpaint
    from fillscope.sampling import ExternalDenoiser

    external = ExternalDenoiser(call=None, config=transformer_config(), device="cpu", dtype=torch.float32)
    with pytest.raises(FillScopeInputError) as e:
        sample_sd3_controlnet_inpaint(external, None, None, None, None, parallel=2)
    assert "input 'parallel'" in str(e.value) and "native 'model'" in str(e.value), str(e.value)


CASES = [{"cfg": 1.0}, {"cfg": 5.0}, {"cfg": 5.0, "denoise": 0.75, "soft": True, "seed": 3},
         {"cfg": 5.0, "residual_mapping": "diffusers"}]


@pytest.mark.parametrize("case", CASES, ids=["cfg1", "cfg5", "cfg5-denoise-soft-mask", "cfg5-diffusers-mapping"])
def test_native_sd3_model_gives_the_latents_of_fillscopes_own_transformer(server, case):
    own = latents(server, "own", native=False, **case)
    native = latents(server, "native", native=True, **case)
    assert own.shape == native.shape == (1, 16, 12, 16)
    assert torch.isfinite(native).all()
    print(f"native SD3 MODEL vs FillScope's transformer ({case}): {max_rel(native, own):.2g} relative "
          "(measured, CPU fp32)")
    assert max_rel(native, own) <= 1e-4


def test_the_residual_mapping_changes_the_native_result_as_it_changes_fillscopes(server):
    """The two mappings differ on this model (blocks 1 and 2 get residuals 0 and 1 instead of 1 and 2): the native
    call follows the option, not a mapping of its own."""
    one = latents(server, "native_one", native=True, cfg=5.0)
    dif = latents(server, "native_diffusers", native=True, cfg=5.0, residual_mapping="diffusers")
    print(f"residual mapping effect on the native result: {max_rel(dif, one):.2g} relative (measured)")
    assert max_rel(dif, one) > 1e-3


def test_a_bf16_controlnet_runs_with_the_float32_native_model(server):
    """The native MODEL's latents are float32 (as ComfyUI's samplers keep them); a ControlNet loaded in bf16 gets its
    inputs in its own dtype and its residuals are cast to the MODEL's compute dtype."""
    full = latents(server, "native_cn_fp32", native=True, cfg=5.0)
    half = latents(server, "native_cn_bf16", native=True, cfg=5.0, controlnet_dtype="bf16")
    print(f"bf16 ControlNet vs fp32 ControlNet on the native MODEL: {max_rel(half, full):.2g} relative (measured)")
    assert torch.isfinite(half).all() and max_rel(half, full) <= 5e-2


def test_a_native_lora_changes_the_output_as_fillscopes_sd3_lora_node_does(server):
    base = latents(server, "base", native=False, cfg=5.0)
    own = latents(server, "own_lora", native=False, lora=True, cfg=5.0)
    native = latents(server, "native_lora", native=True, lora=True, cfg=5.0)
    print(f"LoRA: native vs FillScope's SD3 LoRA node {max_rel(native, own):.2g}, LoRA effect {max_rel(own, base):.2g} "
          "relative (measured, CPU fp32)")
    assert max_rel(own, base) > 1e-2  # the LoRA does change the result
    assert max_rel(native, own) <= 1e-4


def test_both_or_neither_denoiser_wired_is_refused_naming_both_inputs(server):
    for kw in ({"native": True, "both": True}, {"native": False, "neither": True}):
        msg = refused(server, **kw)
        assert "input 'transformer'" in msg and "'model'" in msg and "exactly one denoiser" in msg, msg
        assert "FillScopeSD3ControlNetInpaintSampler" in msg and "prepare" in msg, msg
    assert torch.isfinite(run(server, "after_refusal", native=True)).all()


def test_a_flux_model_is_refused_before_the_first_step_naming_the_input(server):
    msg = refused(server, native=True, flux=True)
    assert "input 'model'" in msg and "Flux MODEL" in msg and "comfy.model_base.SD3" in msg, msg
    assert "CheckpointLoaderSimple" in msg, msg  # the fix
    assert "FillScopeSD3ControlNetInpaintSampler" in msg and "prepare" in msg  # refused in the model-free step
    assert torch.isfinite(run(server, "after_flux", native=True)).all()


def test_a_controlnet_of_another_width_than_the_native_model_is_refused_before_the_first_step(server):
    msg = refused(server, native=True, controlnet=OTHER_CONTROLNET)
    width = DEPTH * COMFY_HEAD_DIM
    assert "input 'controlnet'" in msg and f"width {width // 2}" in msg and f"width {width}" in msg, msg
    assert "model input's MMDiT" in msg and "FillScopeSD3ControlNetInpaintSampler" in msg and "prepare" in msg, msg
    assert torch.isfinite(run(server, "after_width", native=True)).all()


# ---- the Compare nodes: FillScope's SD3 against ComfyUI's own, boundary by boundary (issue 25) ----------------------


def test_the_compare_nodes_find_comfyuis_own_sd3_equal_to_fillscopes_at_every_boundary(server):
    """Run A FillScope's SD3 ControlNet pipeline, run B the same with ComfyUI's own SD3 MODEL as the denoiser (CFG
    on, the negative prompt encoded): every boundary both pass agrees within 1e-4 relative; the figures are printed
    under `pytest -s` (measured: tiny fp32, CPU)."""
    import json

    fs = {"source": FOLDER, "dtype": "fp32"}
    text = {"clip_l": ["1", 0], "clip_g": ["2", 0], "t5": ["3", 0]}
    run = {**text, "controlnet": ["5", 0], "vae": ["6", 0], "negative_prompt": "blurry, low quality", "cfg": 4.0,
           "control_scale": 0.95, "dtype": "as loaded", "storage": "as loaded"}
    g = {
        "1": n("FillScopeLoadCLIPL", **fs), "2": n("FillScopeLoadCLIPG", **fs), "3": n("FillScopeLoadT5", **fs),
        "4": n("FillScopeLoadSD3Transformer", variant="sd3-medium", **fs),
        "5": n("FillScopeLoadSD3InpaintControlNet", source=CONTROLNET, dtype="fp32"),
        "6": n("FillScopeLoadVAE", kind="sd3", **fs),
        "9": n("FillScopeSyntheticImageMask", width=128, height=96, mask_fraction=0.5),
        "m": n("NativeSD3TestTinySD3", folder=FOLDER),
        "a": n("FillScopeSD3ControlNetCompareRun", transformer=["4", 0], implementation="fillscope", **run),
        "b": n("FillScopeSD3ControlNetCompareRun", model=["m", 0], implementation="native", **run),
        "c": n("FillScopeCompare", run_a=["a", 0], run_b=["b", 0], image=["9", 0], mask=["9", 1],
               prompt="a red brick fireplace", seed=1, steps=STEPS, filename_prefix="fillscope/sd3_native"),
    }
    server.run(g, timeout=600)
    doc = json.loads(sorted((server.output_dir / "fillscope").glob("sd3_native_*.json"))[-1].read_text())
    shared = [r for r in doc["comparison"]["boundaries"] if r["status"] in ("same", "differs")]
    print("\nFillScope vs ComfyUI native SD3 + FillScope's ControlNet (tiny fp32, CPU, cfg 4), measured:")
    for r in shared:
        print(f"  {r['name']:<28} rel {r['rel_err']:.3e}  max abs {r['max_abs']:.3e}")
    names = {r["name"] for r in shared}
    assert {f"step[{i}].denoiser" for i in range(1, STEPS + 1)} <= names and "decoded_image" in names
    assert all(r["rel_err"] <= 1e-4 for r in shared), doc["comparison"]["first_divergence"]
