"""FillScope's FLUX Fill sampler on ComfyUI's own MODEL (nodes/native_model.py) in a real ComfyUI 0.3.75 server.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes as one more custom_nodes
folder; this module writes into its models folder the tiny FLUX Fill folder (tests/tiny_flux.py) and a LoRA for it. The
test-only node NativeFillTestTinyFluxFill (fillscope_native_fill_test_nodes.py) builds ComfyUI's own FluxInpaint model
at that folder's tiny config with its transformer weights converted to ComfyUI's keys by ComfyUI's own map.

Checked, on the same weights, seed, condition and text (fp32): FillScope's sampler with its own transformer and with
the native MODEL give the same latents within 1e-4 relative (plain, and with denoise < 1 and a soft mask); the same
kohya LoRA file through FillScope's LoRA node and through ComfyUI's LoraLoaderModelOnly changes both alike (1e-4);
an APPLY_MODEL wrapper on the MODEL is called at every step (one
that interrupts after its 2nd call stops the sampler there); wiring both or neither of transformer / model, and a MODEL of another text width, are refused before the first
step, naming the inputs, and the next prompt runs.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from workflow_helpers import max_rel, refusal, run_saved, wire_denoiser

pytestmark = pytest.mark.server

FOLDER, LORA = "FLUX.1-Fill-dev", "native_fill_test_lora.safetensors"
STEPS = 4


def kohya_lora(seed: int = 0, rank: int = 4, alpha: float = 8.0) -> dict:
    """A kohya LoRA of the tiny FLUX Fill transformer's BFL checkpoint (checkpoint_files.kohya_lora), as
    tests/test_lora.py writes them."""
    import checkpoint_files as cf
    from tiny_flux import build_tiny_components

    return cf.kohya_lora(cf.flux_bfl_state(build_tiny_components(0)["transformer"]), seed, rank, alpha)


@pytest.fixture(scope="module")
def server(test_nodes_server):
    from tiny_flux import build_tiny_flux_fill_folder

    def prepare(server):
        build_tiny_flux_fill_folder(server.models_dir / "diffusers" / FOLDER, seed=0)
        (server.models_dir / "loras").mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in kohya_lora().items()}, str(server.models_dir / "loras" / LORA))

    with test_nodes_server.module(prepare) as server:
        yield server


# ---- graphs ------------------------------------------------------------------------------------------------------


def n(class_type, **inputs) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def graph(name: str, *, native: bool, lora: bool = False, context_in_dim: int = 0, both: bool = False,
          neither: bool = False, seed: int = 0, denoise: float = 1.0, soft: bool = False,
          interrupt_at: int = 0) -> dict:
    """FillScope's loaders, prompt and condition; the sampler on FillScope's transformer or the native MODEL (with
    the LoRA through FillScope's LoRA node or ComfyUI's LoraLoaderModelOnly); its latents saved as `name`."""
    fs = {"source": FOLDER, "dtype": "fp32"}
    g = {
        "1": n("FillScopeLoadCLIPL", **fs), "2": n("FillScopeLoadT5", **fs),
        "3": n("FillScopeLoadFluxFillTransformer", **fs), "4": n("FillScopeLoadVAE", kind="flux", **fs),
        "5": n("FillScopeFluxPrompt", clip_l=["1", 0], t5=["2", 0], text="a red brick fireplace", max_length=512),
        "6": n("FillScopeSyntheticImageMask", width=128, height=96, mask_fraction=0.5),
        "7": n("FillScopeFluxFillCondition", vae=["4", 0], image=["6", 0], mask=["6", 1], invert_mask=False,
               threshold=0.5, grow=0, feather=0, size_mode="pad"),
        "8": n("FillScopeFluxFillSampler", flux_text=["5", 0], condition=["7", 0], seed=seed, steps=STEPS,
               guidance=30.0, denoise=denoise),
        "9": n("NativeFillTestSaveFSLatent", latent=["8", 0], name=name),
        "m": n("NativeFillTestTinyFluxFill", folder=FOLDER, context_in_dim=context_in_dim),
    }
    sampler = g["8"]["inputs"]
    if soft:
        sampler["soft_mask"] = ["6", 1]
    # interrupt_at: ComfyUI's own APPLY_MODEL wrapper (tests/comfy_nodes/fillscope_native_model_test_nodes.py)
    stop = [("stop", "NativeTestInterruptAtCall", {"call": interrupt_at})] if interrupt_at else []
    wire_denoiser(g, sampler, n, native=native, both=both, neither=neither, lora=lora, lora_name=LORA,
                  transformer="3", lora_node="FillScopeFluxFillLoRA", before_lora=stop)
    return g


def run(server, name: str, **kw) -> torch.Tensor:
    return run_saved(server, graph(name, **kw), name)


def refused(server, **kw) -> str:
    return refusal(server, graph("refused", **kw))


# ---- tests -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [{}, {"denoise": 0.75, "soft": True, "seed": 3}], ids=["plain", "denoise-soft-mask"])
def test_native_model_gives_the_latents_of_fillscopes_own_transformer(server, case):
    own = run(server, "own", native=False, **case)
    native = run(server, "native", native=True, **case)
    assert own.shape == native.shape == (1, 16, 12, 16)
    assert torch.isfinite(native).all()
    print(f"native MODEL vs FillScope's transformer ({case or 'plain'}): {max_rel(native, own):.2g} relative (measured, CPU fp32)")
    assert max_rel(native, own) <= 1e-4


def test_a_native_lora_changes_the_output_as_fillscopes_lora_node_does(server):
    base = run(server, "base", native=False)
    own = run(server, "own_lora", native=False, lora=True)
    native = run(server, "native_lora", native=True, lora=True)
    print(f"LoRA: native vs FillScope's LoRA node {max_rel(native, own):.2g}, LoRA effect {max_rel(own, base):.2g} relative "
          "(measured, CPU fp32)")
    assert max_rel(own, base) > 1e-2  # the LoRA does change the result
    assert max_rel(native, own) <= 1e-4


def test_both_or_neither_denoiser_wired_is_refused_naming_both_inputs(server):
    for kw in ({"native": True, "both": True}, {"native": False, "neither": True}):
        msg = refused(server, **kw)
        assert "input 'transformer'" in msg and "'model'" in msg and "exactly one denoiser" in msg, msg
    assert torch.isfinite(run(server, "after_refusal", native=True)).all()


def test_a_native_model_of_another_text_width_is_refused_before_the_first_step(server):
    msg = refused(server, native=True, context_in_dim=48)
    assert "input 'flux_text'" in msg and "context_in_dim 48" in msg and "[1, 512, 32]" in msg, msg
    assert "FillScopeFluxFillSampler" in msg and "prepare" in msg  # refused in the node's model-free step
    assert torch.isfinite(run(server, "after_width", native=True)).all()


def test_the_models_apply_model_wrappers_run_at_every_step(server):
    """The patcher's wrappers reach the call (nodes/native_model.py merges them into transformer_options as ComfyUI's
    samplers do): a wrapper that interrupts after the 2nd model call stops the sampler, and the next prompt runs."""
    entry = server.wait(server.queue(graph("interrupted", native=True, interrupt_at=2)), timeout=600,
                        raise_on_error=False)
    assert any(kind == "execution_interrupted" for kind, _ in entry["status"]["messages"]), entry["status"]
    assert not (server.output_dir / "fillscope_native_fill" / "interrupted.safetensors").exists()
    assert torch.isfinite(run(server, "after_interrupt", native=True)).all()


def test_the_latent_output_keeps_the_source_outside_the_mask_and_a_differential_diffusion_patch_is_named(server):
    """Issue 35: the sampler's LATENT, wired to ComfyUI's nodes, is the source's latent outside the mask (ComfyUI's
    VAEEncode of the same image, within the two VAEs' fp32 difference) as KSampler's noise_mask leaves it, and the
    record says so; DifferentialDiffusion on the MODEL, which this sampler does not apply, is a warning."""
    import torch.nn.functional as F
    from safetensors.torch import load_file

    g = graph("dd", native=True)
    sampler = g["8"]["inputs"]
    g["dd"] = n("DifferentialDiffusion", model=sampler["model"], strength=1.0)
    sampler["model"] = ["dd", 0]
    g["v"] = n("InspectTestTinyVAE", folder=FOLDER)
    g["enc"] = n("VAEEncode", pixels=["6", 0], vae=["v", 0])
    g["s1"] = n("NativeTestSaveNativeLatent", samples=["8", 2], name="dd_latent")
    g["s2"] = n("NativeTestSaveNativeLatent", samples=["enc", 0], name="dd_source")
    entry = server.run(g, timeout=600)
    folder = server.output_dir / "fillscope_native"
    out, source = (load_file(str(folder / f"{k}.safetensors"))["samples"] for k in ("dd_latent", "dd_source"))
    doc = entry["outputs"]["8"]["fillscope_shapes"][0]["node"]
    assert any(t.startswith("the MODEL carries ComfyUI's DifferentialDiffusion patch") for t in doc["warnings"])
    assert any(t.startswith("LATENT output: outside the mask the source's latent") for t in doc["notes"])
    # the synthetic mask (FillScopeSyntheticImageMask, half the side, centred) at the latent's size, as ComfyUI's
    # samplers resize a noise_mask (bilinear)
    mask = torch.zeros(1, 1, 96, 128)
    mask[..., 24:72, 32:96] = 1.0
    small = F.interpolate(mask, size=tuple(out.shape[-2:]), mode="bilinear")[0, 0]
    outside, inside = small == 0, small == 1
    assert int(outside.sum()) > 0 and int(inside.sum()) > 0
    kept = (out - source)[..., outside].abs().max()
    repainted = (out - source)[..., inside].abs().max()
    print(f"\n[native latent] outside the mask |LATENT - VAEEncode| max {float(kept):.2e}; inside {float(repainted):.3f}")
    assert float(kept) <= 1e-4 and float(repainted) > 1e-2
