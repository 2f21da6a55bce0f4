"""FillScope's FLUX.2 [klein] sampler on ComfyUI's own MODEL (nodes/native_klein.py) in a real ComfyUI 0.3.75 server.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes as one more custom_nodes
folder; this module writes into its models folder the tiny klein folder (tests/tiny_klein.py), the same transformer's
weights under ComfyUI's (BFL) keys in diffusion_models (checkpoint_files.klein_bfl_state: diffusers' own converter,
inverted) and a kohya LoRA over those keys. The test-only node NativeKleinTestTinyKlein
(fillscope_native_klein_test_nodes.py) builds ComfyUI's own Flux2 model at the folder's tiny config and loads that file
strictly.

Checked, on the same weights, seed, condition and text (fp32): FillScope's sampler with its own transformer and with
the native MODEL give the same latents within 1e-4 relative (inpaint with a reference image, distilled and base with
CFG, strength < 1 with a soft mask; the mask-free edit with two images); the same LoRA file through FillScope's klein
LoRA node and through ComfyUI's LoraLoaderModelOnly changes both alike (1e-4); wiring both or neither of transformer /
model, a step cache with the MODEL, a FLUX.1 MODEL, a MODEL with klein 4B's width but the 48 heads ComfyUI 0.3.75
detects, and one placing reference images at other positions are refused in the node's model-free step, naming the
input, and the next prompt runs; ComfyUI's APPLY_MODEL wrappers on the MODEL run at every call (one interrupting after
its 2nd call stops the sampler). And what ComfyUI 0.3.75 itself makes of the real klein 4B / 9B key shapes (built on
the meta device): model_detection's config, which ComfyUI's Flux refuses.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from workflow_helpers import api_node, max_rel, refusal, run_saved, wire_denoiser

pytestmark = pytest.mark.server

FOLDER, WEIGHTS, LORA = "FLUX.2-klein-4B", "native_klein_test.safetensors", "native_klein_test_lora.safetensors"
STEPS = 3


def tiny_transformer(folder):
    from diffusers import Flux2Transformer2DModel

    return Flux2Transformer2DModel.from_pretrained(str(folder / "transformer"), torch_dtype=torch.float32)


@pytest.fixture(scope="module")
def server(test_nodes_server):
    import checkpoint_files as cf
    from tiny_klein import build_tiny_klein_folder

    def prepare(server):
        folder = build_tiny_klein_folder(server.models_dir / "diffusers" / FOLDER, seed=0)
        bfl = {k: v.contiguous() for k, v in cf.klein_bfl_state(tiny_transformer(folder)).items()}
        (server.models_dir / "diffusion_models").mkdir(parents=True, exist_ok=True)
        save_file(bfl, str(server.models_dir / "diffusion_models" / WEIGHTS))
        (server.models_dir / "loras").mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in cf.kohya_lora(bfl).items()}, str(server.models_dir / "loras" / LORA))

    with test_nodes_server.module(prepare) as server:
        yield server


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


# ---- graphs ------------------------------------------------------------------------------------------------------


def graph(info, name: str, *, native: bool, kind: str = "klein", edit: bool = False, base: bool = False,
          lora: bool = False, both: bool = False, neither: bool = False, step_cache: str = "off",
          seed: int = 0, strength: float = 1.0, soft: bool = False, interrupt_at: int = 0,
          inspect: bool = False) -> dict:
    """FillScope's loaders, prompt and condition (inpaint with a reference image, or the edit of two images); the
    sampler on FillScope's transformer or the native MODEL (the LoRA through FillScope's klein LoRA node or ComfyUI's
    LoraLoaderModelOnly; `base`: model_type base, CFG 4 against an empty prompt; `soft`: the mask as soft_mask;
    `interrupt_at`: ComfyUI's own APPLY_MODEL wrapper interrupting after that model call; `inspect`: FillScope Inspect
    Model on the MODEL); its latents saved as `name`."""
    fs = {"source": FOLDER, "dtype": "fp32"}
    g = {
        "q": api_node(info, "FillScopeLoadQwen3", variant="qwen3-4b", **fs),
        "t": api_node(info, "FillScopeLoadKleinTransformer", variant="klein-4b", **fs),
        "v": api_node(info, "FillScopeLoadVAE", kind="flux2", **fs),
        "p": api_node(info, "FillScopeQwen3Encode", qwen3=["q", 0], text="a brass lamp on the desk"),
        "img": api_node(info, "FillScopeSyntheticImageMask", width=128, height=96, mask_fraction=0.5),
        "ref": api_node(info, "FillScopeSyntheticImageMask", width=80, height=64, mask_fraction=0.25),
        "s": api_node(info, "FillScopeKleinSampler", positive=["p", 0], condition=["c", 0], seed=seed, steps=STEPS,
                      guidance=4.0, strength=strength, model_type="base" if base else "auto", step_cache=step_cache),
        "save": api_node(info, "NativeFillTestSaveFSLatent", latent=["s", 0], name=name),
        "m": api_node(info, "NativeKleinTestTinyKlein", folder=FOLDER, weights=WEIGHTS, kind=kind),
    }
    if edit:
        g["c"] = api_node(info, "FillScopeKleinEditCondition", vae=["v", 0], image=["img", 0], image_2=["ref", 0],
                          width=0, height=0)
    else:
        g["c"] = api_node(info, "FillScopeKleinInpaintCondition", vae=["v", 0], image=["img", 0], mask=["img", 1],
                          reference=["ref", 0])
    sampler = g["s"]["inputs"]
    if soft:
        sampler["soft_mask"] = ["img", 1]
    if base:
        g["n"] = api_node(info, "FillScopeQwen3Encode", qwen3=["q", 0], text="")
        sampler["negative"] = ["n", 0]
    before_lora = [("i", "FillScopeInspectModel", {})] if inspect else []
    if interrupt_at:  # tests/comfy_nodes/fillscope_native_model_test_nodes.py
        before_lora.append(("stop", "NativeTestInterruptAtCall", {"call": interrupt_at}))
    wire_denoiser(g, sampler, lambda class_type, **inputs: api_node(info, class_type, **inputs), native=native,
                  both=both, neither=neither, lora=lora, lora_name=LORA, transformer="t",
                  lora_node="FillScopeKleinLoRA", before_lora=before_lora)
    return g


def run(server, info, name: str, **kw) -> torch.Tensor:
    return run_saved(server, graph(info, name, **kw), name)


def refused(server, info, **kw) -> str:
    return refusal(server, graph(info, "refused", **kw))


def assert_model_free_step(msg: str) -> None:
    """Refused in the sampler's prepare (nodes/base.py runs it before any model is placed or sampled)."""
    assert "FillScopeKleinSampler" in msg and "in prepare" in msg, msg
    assert "sample_klein" not in msg and "run_native" not in msg, msg


# ---- tests -------------------------------------------------------------------------------------------------------


CASES = {"inpaint-reference": {}, "inpaint-reference-cfg": {"base": True, "seed": 3},
         "inpaint-strength-soft-mask": {"strength": 0.75, "soft": True, "seed": 7},
         "edit-two-images": {"edit": True, "seed": 5}}


@pytest.mark.parametrize("case", list(CASES))
def test_native_model_gives_the_latents_of_fillscopes_own_transformer(server, info, case):
    kw = CASES[case]
    own = run(server, info, f"own_{case}", native=False, **kw)
    native = run(server, info, f"native_{case}", native=True, **kw)
    assert own.shape == native.shape == (1, 128, 6, 8)
    assert torch.isfinite(native).all() and own.abs().max() > 0.1
    print(f"native klein MODEL vs FillScope's transformer ({case}): {max_rel(native, own):.2g} relative "
          "(measured, CPU fp32)")
    assert max_rel(native, own) <= 1e-4


def test_a_native_lora_changes_the_output_as_fillscopes_lora_node_does(server, info):
    base = run(server, info, "lora_base", native=False)
    own = run(server, info, "lora_own", native=False, lora=True)
    native = run(server, info, "lora_native", native=True, lora=True)
    print(f"klein LoRA: native (LoraLoaderModelOnly) vs FillScope's LoRA node {max_rel(native, own):.2g}, LoRA effect "
          f"{max_rel(own, base):.2g} relative (measured, CPU fp32)")
    assert max_rel(own, base) > 1e-2  # the LoRA does change the result
    assert max_rel(native, own) <= 1e-4


def test_both_or_neither_denoiser_wired_or_a_step_cache_with_the_model_is_refused(server, info):
    for kw in ({"native": True, "both": True}, {"native": False, "neither": True}):
        msg = refused(server, info, **kw)
        assert "input 'transformer'" in msg and "'model'" in msg and "exactly one denoiser" in msg, msg
        assert_model_free_step(msg)
    msg = refused(server, info, native=True, step_cache="taylorseer")
    assert "input 'step_cache'" in msg and "native 'model'" in msg, msg
    assert_model_free_step(msg)
    assert torch.isfinite(run(server, info, "after_refusal", native=True)).all()


def test_a_flux1_model_is_refused_before_the_first_step_naming_the_input(server, info):
    msg = refused(server, info, native=True, kind="flux1")
    assert "input 'model'" in msg and "FLUX.1 MODEL (comfy.model_base.Flux)" in msg and "Flux2" in msg, msg
    assert_model_free_step(msg)
    assert torch.isfinite(run(server, info, "after_flux1", native=True)).all()


def test_a_model_with_the_heads_comfyui_0_3_75_detects_for_klein_is_refused_naming_the_version(server, info):
    msg = refused(server, info, native=True, kind="klein4b_48_heads")
    assert "input 'model'" in msg and "FLUX.2 [klein] 4B's width but 48 heads x 64" in msg, msg
    assert "24 heads x 128" in msg and "ComfyUI 0.3.75" in msg and "48 heads" in msg, msg
    assert_model_free_step(msg)
    assert torch.isfinite(run(server, info, "after_48_heads", native=True)).all()


def test_a_model_placing_references_elsewhere_is_refused(server, info):
    msg = refused(server, info, native=True, kind="klein_ref_index_scale_1")
    assert "input 'model'" in msg and "time index k x 1 (ref_index_scale)" in msg and "k x 10" in msg, msg
    assert_model_free_step(msg)


@pytest.mark.parametrize("variant", ["klein-4b", "klein-9b"])
def test_what_comfyui_detects_from_the_real_klein_key_shapes(variant):
    """The published klein transformer's BFL keys and shapes on the meta device (FillScope's meta build's config ->
    ComfyUI's own Flux2 state dict, whose keys FillScope's klein_bfl_plan maps back onto exactly the meta build's
    diffusers keys and shapes) through comfy.model_detection: ComfyUI 0.3.75 reads every size right but fixes 48
    heads, and its Flux refuses that config."""
    import checkpoint_files as cf

    cf.comfy()  # ComfyUI on sys.path, CPU mode
    import comfy.ldm.flux.model
    import comfy.model_detection
    import comfy.ops
    from comfyui_version import __version__ as comfyui_version

    from fillscope.checkpoints.convert import klein_bfl_plan
    from fillscope.pipelines import klein

    comp = klein.load_klein_transformer("meta", variant=variant)
    config = dict(comp.config)
    bfl = {k: torch.empty(v.shape, device="meta") for k, v in cf.comfy_flux2(config).state_dict().items()}
    mapped = {}
    for move in klein_bfl_plan(bfl):
        shape = list(bfl[move.src].shape)
        if move.rows:
            shape[0] = move.rows[1] - move.rows[0]
        mapped[move.dst] = tuple(shape)
    assert mapped == {k: tuple(v.shape) for k, v in comp.model.state_dict().items()}

    detected = comfy.model_detection.detect_unet_config(bfl, "")
    model_config = comfy.model_detection.model_config_from_unet(bfl, "")
    print(f"ComfyUI {comfyui_version} detects {variant}: {type(model_config).__name__} {detected}")
    heads, head = config["num_attention_heads"], config["attention_head_dim"]
    right = {"image_model": "flux2", "hidden_size": heads * head, "depth": config["num_layers"],
             "depth_single_blocks": config["num_single_layers"], "context_in_dim": config["joint_attention_dim"],
             "in_channels": 128, "out_channels": 128, "patch_size": 1, "axes_dim": list(config["axes_dims_rope"]),
             "theta": config["rope_theta"], "mlp_ratio": config["mlp_ratio"], "guidance_embed": False,
             "ref_index_scale": 10.0, "default_ref_method": "index"}
    assert {k: detected[k] for k in right} == right
    assert type(model_config).__name__ == "Flux2"
    if detected["num_heads"] == heads:  # a ComfyUI that detects klein
        return
    assert comfyui_version == "0.3.75" and detected["num_heads"] == 48
    with pytest.raises(ValueError) as e:
        comfy.ldm.flux.model.Flux(dtype=torch.float32, device="meta", operations=comfy.ops.disable_weight_init,
                                  **detected)
    print(f"  ComfyUI's Flux refuses it: {e.value}")
    assert ("expected positional dim 64" if variant == "klein-4b" else "divisible by num_heads 48") in str(e.value)


def test_the_models_apply_model_wrappers_run_at_every_call(server, info):
    """The patcher's wrappers reach klein's calls (nodes/native_model.py's NativeRun): a wrapper that interrupts after
    the 2nd model call stops the sampler there (CFG: the 1st step's negative pass), and the next prompt runs."""
    entry = server.wait(server.queue(graph(info, "interrupted", native=True, base=True, interrupt_at=2)), timeout=600,
                        raise_on_error=False)
    assert any(kind == "execution_interrupted" for kind, _ in entry["status"]["messages"]), entry["status"]
    assert not (server.output_dir / "fillscope_native_fill" / "interrupted.safetensors").exists()
    assert torch.isfinite(run(server, info, "after_interrupt", native=True)).all()


def test_the_sampler_takes_transformer_or_model_both_optional_with_tooltips(info):
    node = info["FillScopeKleinSampler"]
    assert node["input_order"]["required"] == ["positive", "condition", "seed", "steps", "guidance", "strength",
                                               "model_type"]
    assert node["input_order"]["optional"] == ["transformer", "model", "negative", "soft_mask", "step_cache",
                                               "cache_threshold"]
    optional = node["input"]["optional"]
    assert optional["model"][0] == "MODEL" and "ComfyUI's own FLUX.2 [klein] MODEL" in optional["model"][1]["tooltip"]
    assert "or wire model instead" in optional["transformer"][1]["tooltip"]


def test_inspect_model_on_the_klein_model_leaves_the_latents_bit_for_bit(server, info):
    """FillScope Inspect Model's wrappers and hooks (OUTER_SAMPLE with the NativeRun, APPLY_MODEL with klein's
    ref_latents) ride along one run of the klein sampler and change nothing."""
    plain = run(server, info, "inspect_plain", native=True, base=True)
    inspected = run(server, info, "inspect_on", native=True, base=True, inspect=True)
    assert torch.equal(plain, inspected)
