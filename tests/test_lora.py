"""LoRA on the FLUX.1 Fill, SD3 and FLUX.2 [klein] transformers (fillscope/lora.py, nodes/lora.py), on tiny fp32
models with tiny LoRA files written here in the published layouts: the patched transformer equals the merged
weights, strength 0 and unloading change nothing (bit for bit), stacks add up, the wrong model's LoRA and a pickle are
refused, fp8 storage, meta, the memory policies, and the FLUX Fill graph in a real ComfyUI server."""

from __future__ import annotations

import json

import checkpoint_files as cf
import pytest
import torch
from safetensors.torch import save_file
from tiny_flux import TINY_TRANSFORMER_CONFIG as FLUX_CONFIG
from tiny_klein import TINY_TRANSFORMER_CONFIG as KLEIN_CONFIG
from tiny_sd3 import TINY_SD3_TRANSFORMER_CONFIG as SD3_CONFIG

from fillscope import lora as L
from fillscope.errors import FillScopeInputError
from fillscope.weights import Component, load_component

KINDS = {"flux": "flux_fill_transformer", "sd3": "sd3_transformer", "klein": "klein_transformer"}


# ---- tiny transformers, their inputs, merged references ----------------------------------------------------


def build(family: str, seed: int = 0):
    from diffusers import Flux2Transformer2DModel, FluxTransformer2DModel, SD3Transformer2DModel

    cls, cfg = {"flux": (FluxTransformer2DModel, FLUX_CONFIG), "sd3": (SD3Transformer2DModel, SD3_CONFIG),
                "klein": (Flux2Transformer2DModel, KLEIN_CONFIG)}[family]
    torch.manual_seed(seed)
    model = cls(**cfg).eval().requires_grad_(False)
    with torch.no_grad():  # diffusers zero-initialises some output layers: give every weight a value
        for p in model.parameters():
            if not p.any():
                p.normal_(0, 0.05)
    return model


def component(model, family: str, device: str = "cpu") -> Component:
    return Component(KINDS[family], model, "tiny", "tiny fp32", device, "fp32", dict(model.config))


def inputs(family: str, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    if family == "flux":
        n, t = 16, 8
        return dict(hidden_states=r(1, n, 384), encoder_hidden_states=r(1, t, 32), pooled_projections=r(1, 32),
                    timestep=torch.tensor([0.7]), guidance=torch.tensor([30.0]), img_ids=torch.zeros(n, 3),
                    txt_ids=torch.zeros(t, 3), return_dict=False)
    if family == "sd3":
        return dict(hidden_states=r(1, 16, 8, 8), encoder_hidden_states=r(1, 8, SD3_CONFIG["joint_attention_dim"]),
                    pooled_projections=r(1, SD3_CONFIG["pooled_projection_dim"]), timestep=torch.tensor([700.0]),
                    return_dict=False)
    n, t = 16, 8
    return dict(hidden_states=r(1, n, 128), encoder_hidden_states=r(1, t, 96), timestep=torch.tensor([0.7]),
                img_ids=torch.zeros(n, 4), txt_ids=torch.zeros(t, 4), return_dict=False)


def run(model, family: str):
    with torch.inference_mode():
        return model(**inputs(family))[0]


def rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


def factors(shape, rank: int, g) -> tuple:
    out, inn = shape
    return torch.randn(rank, inn, generator=g) * 0.1, torch.randn(out, rank, generator=g) * 0.1


def merged(model, deltas: dict):
    """A copy of `model` with W + delta for each {weight key: delta} (the reference a LoRA must equal)."""
    import copy

    ref = copy.deepcopy(model)
    sd = ref.state_dict()
    for key, d in deltas.items():
        sd[key] = sd[key] + d
    ref.load_state_dict(sd)
    return ref


def linear_weights(model) -> dict:
    return {f"{n}.weight": tuple(m.weight.shape) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def diffusers_lora(model, rank=4, alpha=2.0, seed=0, prefix="transformer.", down="lora_A", up="lora_B"):
    """A diffusers/PEFT LoRA over every Linear of `model`: (tensors, metadata, {weight key: delta})."""
    g = torch.Generator().manual_seed(seed)
    tensors, deltas = {}, {}
    for key, shape in linear_weights(model).items():
        d, u = factors(shape, rank, g)
        tensors[f"{prefix}{key[:-7]}.{down}.weight"], tensors[f"{prefix}{key[:-7]}.{up}.weight"] = d, u
        deltas[key] = alpha / rank * u @ d
    meta = {"lora_adapter_metadata": json.dumps({"transformer.r": rank, "transformer.lora_alpha": alpha})}
    return tensors, meta, deltas


def bfl_state(model, family: str) -> dict:
    return cf.flux_bfl_state(model) if family == "flux" else cf.klein_bfl_state(model)


def bfl_lora(model, family: str, layout: str, rank=4, alpha=8.0, seed=0):
    """A LoRA over every Linear weight of the model's BFL checkpoint (fused qkv, linear1, the final modulation), in
    kohya (lora_unet_*, lora_down/lora_up/alpha) or BFL/ComfyUI (diffusion_model.*, lora_A/lora_B, alpha) keys:
    (tensors, the BFL state dict with the LoRA merged into it)."""
    g = torch.Generator().manual_seed(seed)
    state, tensors = bfl_state(model, family), {}
    for key in sorted(state):
        w = state[key]
        if not key.endswith(".weight") or w.dim() != 2 or "norm" in key:
            continue
        d, u = factors(tuple(w.shape), rank, g)
        module = key[:-7]
        name = "lora_unet_" + module.replace(".", "_") if layout == "kohya" else f"diffusion_model.{module}"
        a, b = ("lora_down", "lora_up") if layout == "kohya" else ("lora_A", "lora_B")
        tensors.update({f"{name}.{a}.weight": d, f"{name}.{b}.weight": u, f"{name}.alpha": torch.tensor(alpha)})
        state[key] = w + alpha / rank * u @ d
    return tensors, state


def write(path, tensors: dict, metadata: dict | None = None):
    save_file({k: v.clone().contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
    return path


def patched(comp, *files_and_strengths):
    return L.with_loras(comp, [(L.read_lora(p, comp), s) for p, s in files_and_strengths])


# ---- equal to the merged weights ----------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["flux", "sd3", "klein"])
def test_diffusers_layout_at_strength_1_equals_the_merged_weights(tmp_path, family):
    model = build(family)
    base = component(model, family)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tensors, meta, deltas = diffusers_lora(model)
    view = patched(base, (write(tmp_path / "peft.safetensors", tensors, meta), 1.0))
    assert rel(run(view.model, family), run(merged(model, deltas), family)) <= 1e-5
    lora = view.extras["lora_stack"][0][0]
    assert len(lora.modules) == len(deltas) and lora.ranks == [4] * len(deltas) and set(lora.scales) == {0.5}
    assert lora.layout.startswith("diffusers") and not lora.warnings
    # copy-on-write: the base is untouched and the copy holds no weight of its own
    assert view is not base and view.model is not model and "lora_stack" not in base.extras
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not any(m._forward_hooks for m in model.modules())
    ptrs = {p.data_ptr() for p in model.parameters()}
    assert all(p.data_ptr() in ptrs for p in view.model.parameters())
    assert torch.equal(run(model, family), run(merged(model, {}), family))


@pytest.mark.parametrize("family, layout", [("flux", "kohya"), ("flux", "bfl"), ("klein", "kohya"), ("klein", "bfl")])
def test_kohya_and_bfl_layouts_equal_merging_in_the_files_own_layout(tmp_path, family, layout):
    """The LoRA merged into the BFL checkpoint and that checkpoint loaded by FillScope's single-file loader (tested
    against ComfyUI's and diffusers' maps) = the LoRA file applied to the diffusers model: q/k/v split from fused
    qkv and linear1, the final modulation's halves swapped, alpha/rank applied."""
    model = build(family)
    tensors, merged_state = bfl_lora(model, family, layout)
    path = write(tmp_path / f"{layout}.safetensors", tensors)
    ref_file = cf.save(tmp_path / "merged.safetensors", merged_state, cf.TINY_HINTS if family == "flux" else None)
    ref = load_component(KINDS[family], ref_file, dtype="fp32", device="cpu").model
    view = patched(component(model, family), (path, 1.0))
    lora = view.extras["lora_stack"][0][0]
    assert rel(run(view.model, family), run(ref, family)) <= 1e-5
    assert not lora.warnings and set(lora.scales) == {2.0}
    assert lora.layout.startswith("kohya" if layout == "kohya" else "BFL")
    assert len(lora.modules) == len(linear_weights(model))  # every Linear, the embedders included


def test_an_xlabs_lora_goes_through_diffusers_xlabs_converter(tmp_path):
    model = build("flux")
    g = torch.Generator().manual_seed(7)
    tensors, deltas = {}, {}
    for src, dsts, inn in (("double_blocks.0.processor.qkv_lora1", ["to_q", "to_k", "to_v"], 32),
                           ("double_blocks.0.processor.proj_lora1", ["to_out.0"], 32),
                           ("double_blocks.0.processor.qkv_lora2", ["add_q_proj", "add_k_proj", "add_v_proj"], 32),
                           ("double_blocks.0.processor.proj_lora2", ["to_add_out"], 32),
                           ("single_blocks.0.processor.qkv_lora", ["to_q", "to_k", "to_v"], 32),
                           ("single_blocks.0.processor.proj_lora", ["proj_out"], 160)):
        d, u = factors((32 * len(dsts), inn), 4, g)
        tensors[f"{src}.down.weight"], tensors[f"{src}.up.weight"] = d, u
        block = "transformer_blocks.0" if src.startswith("double") else "single_transformer_blocks.0"
        for i, dst in enumerate(dsts):
            where = f"{block}.{dst}" if dst == "proj_out" else f"{block}.attn.{dst}"
            deltas[f"{where}.weight"] = u[32 * i: 32 * (i + 1)] @ d
    view = patched(component(model, "flux"), (write(tmp_path / "xlabs.safetensors", tensors), 1.0))
    lora = view.extras["lora_stack"][0][0]
    assert lora.layout.startswith("XLabs") and len(lora.modules) == len(deltas) and not lora.warnings
    assert rel(run(view.model, "flux"), run(merged(model, deltas), "flux")) <= 1e-5


def test_strength_0_is_exactly_no_lora(tmp_path):
    model = build("flux")
    base = component(model, "flux")
    tensors, meta, _ = diffusers_lora(model)
    path = write(tmp_path / "a.safetensors", tensors, meta)
    expected = run(model, "flux")
    zero = patched(base, (path, 0.0))
    assert torch.equal(run(zero.model, "flux"), expected)
    assert not any(L.DOWN in m._buffers for m in zero.model.modules())
    twice = patched(patched(base, (path, 1.0)), (path, -1.0))  # +1 and -1: the ranks cancel to rounding, not bit-exact
    assert rel(run(twice.model, "flux"), expected) <= 1e-5


def test_unloading_restores_the_base_weights_bit_for_bit(tmp_path):
    model = build("klein")
    tensors, meta, _ = diffusers_lora(model, rank=8)
    lora = L.read_lora(write(tmp_path / "a.safetensors", tensors, meta), component(model, "klein"))
    params = {n: (p, p.data.clone()) for n, p in model.named_parameters()}
    buffers = {n: b for n, b in model.named_buffers()}
    expected = run(model, "klein")
    patch = L.apply_loras(model, [(lora, 1.0)])
    assert not torch.equal(run(model, "klein"), expected)
    with pytest.raises(RuntimeError, match="already carries a LoRA patch"):
        L.apply_loras(model, [(lora, 1.0)])
    patch.remove()
    assert dict(model.named_buffers()).keys() == buffers.keys()
    assert not any(m._forward_hooks for m in model.modules())
    for n, p in model.named_parameters():
        assert p is params[n][0] and torch.equal(p.data, params[n][1]) and p.data.dtype == params[n][1].dtype
    assert torch.equal(run(model, "klein"), expected)


def test_two_stacked_loras_equal_the_sum_of_their_deltas(tmp_path):
    model = build("sd3")
    a, meta_a, da = diffusers_lora(model, rank=4, alpha=4.0, seed=1)
    b, meta_b, db = diffusers_lora(model, rank=2, alpha=1.0, seed=2, down="lora_down", up="lora_up")
    pa = write(tmp_path / "a.safetensors", a, meta_a)
    pb = write(tmp_path / "b.safetensors", b, meta_b)
    sums = {k: da[k] + 0.5 * db[k] for k in da}
    ref = run(merged(model, sums), "sd3")
    base = component(model, "sd3")
    assert rel(run(patched(base, (pa, 1.0), (pb, 0.5)).model, "sd3"), ref) <= 1e-5
    chained = patched(patched(base, (pa, 1.0)), (pb, 0.5))  # two LoRA nodes in a row
    assert rel(run(chained.model, "sd3"), ref) <= 1e-5
    assert [(x.name, s) for x, s in chained.extras["lora_stack"]] == [("a.safetensors", 1.0), ("b.safetensors", 0.5)]
    assert chained.extras["lora_patch"].modules["transformer_blocks.0.attn.to_q"]._buffers[L.DOWN].shape[0] == 6


# ---- refused: another model's LoRA, pickles, other adapters -----------------------------------------------------


def sdxl_lora() -> dict:
    g = torch.Generator().manual_seed(3)
    out = {}
    for name, (o, i) in {"down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q": (640, 640),
                         "mid_block_attentions_0_proj_in": (1280, 1280)}.items():
        d, u = factors((o, i), 4, g)
        out.update({f"lora_unet_{name}.lora_down.weight": d, f"lora_unet_{name}.lora_up.weight": u,
                    f"lora_unet_{name}.alpha": torch.tensor(4.0)})
    return out


def sai_sd3_lora(model) -> dict:
    """An SD3 LoRA in kohya/SAI naming (lora_unet_joint_blocks_*), names from ComfyUI's MMDiT map."""
    g = torch.Generator().manual_seed(4)
    out = {}
    for key, w in cf.sd3_sai_state(model).items():
        if key.startswith("joint_blocks.0.") and key.endswith(".weight") and w.dim() == 2:
            name = "lora_unet_" + key[:-7].replace(".", "_")
            out[f"{name}.lora_down.weight"], out[f"{name}.lora_up.weight"] = factors(tuple(w.shape), 2, g)
    return out


@pytest.mark.parametrize("lora_family, model_family, made_for, takes", [
    ("sdxl", "flux", "an SD1.x/SDXL UNet LoRA", "FLUX.1 LoRAs (made for FLUX.1 [dev] or FLUX.1 Fill [dev], width 32)"),
    ("flux", "klein", "a FLUX.1 LoRA (width 32)", "FLUX.2 [klein] LoRAs (width 32, 1 double + 2 single blocks)"),
    ("klein", "flux", "a FLUX.2 LoRA (width 32)", "FLUX.1 LoRAs"),
    ("sd3", "flux", "an SD3/SD3.5 LoRA (width 16)", "FLUX.1 LoRAs"),
    ("flux", "sd3", "a FLUX.1 LoRA (width 32)", "SD3/SD3.5 LoRAs in diffusers/PEFT naming for this transformer"),
])
def test_a_lora_for_another_model_is_refused_naming_what_it_is_and_what_fits(tmp_path, lora_family, model_family,
                                                                          made_for, takes):
    tensors = sdxl_lora() if lora_family == "sdxl" else diffusers_lora(build(lora_family))[0]
    path = write(tmp_path / f"{lora_family}_style.safetensors", tensors)
    with pytest.raises(FillScopeInputError) as e:
        L.read_lora(path, component(build(model_family), model_family))
    msg = str(e.value)
    assert f"'{lora_family}_style.safetensors' is {made_for}" in msg and takes in msg, msg
    assert "input 'lora_name'" in msg and "Fix: choose a LoRA made for this model" in msg


def test_a_lora_of_another_width_and_an_sd3_lora_in_sai_naming_are_refused(tmp_path):
    from diffusers import FluxTransformer2DModel

    wide = FluxTransformer2DModel(**{**FLUX_CONFIG, "num_attention_heads": 3})  # width 48
    path = write(tmp_path / "wide.safetensors", diffusers_lora(wide)[0])
    with pytest.raises(FillScopeInputError, match=r"'wide.safetensors' is a FLUX.1 LoRA \(width 48\).*other shapes"):
        L.read_lora(path, component(build("flux"), "flux"))
    sd3 = build("sd3")
    path = write(tmp_path / "sai.safetensors", sai_sd3_lora(sd3))
    with pytest.raises(FillScopeInputError, match="joint_blocks.*no converter for SD3 LoRAs in that naming"):
        L.read_lora(path, component(sd3, "sd3"))


def test_files_that_are_not_lora_are_refused(tmp_path):
    model = build("flux")
    comp = component(model, "flux")
    base_file = cf.save(tmp_path / "flux1-fill-dev.safetensors", cf.flux_bfl_state(model), cf.TINY_HINTS)
    with pytest.raises(FillScopeInputError, match="'flux1-fill-dev.safetensors' is not a LoRA: it is a FLUX"):
        L.read_lora(base_file, comp)
    te = {"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": torch.zeros(2, 8),
          "lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_up.weight": torch.zeros(8, 2)}
    with pytest.raises(FillScopeInputError, match="text-encoder LoRA"):
        L.read_lora(write(tmp_path / "te.safetensors", te), comp)
    tensors = diffusers_lora(model)[0]
    dora = {**tensors, "transformer.proj_out.lora_magnitude_vector.dora_scale": torch.ones(1, 64)}
    with pytest.raises(FillScopeInputError, match="is a DoRA"):
        L.read_lora(write(tmp_path / "dora.safetensors", dora), comp)


@pytest.mark.parametrize("where", ["down", "alpha tensor", "metadata alpha"])
def test_nan_or_inf_in_a_lora_file_is_refused_when_read_blaming_the_lora(tmp_path, where):
    """Checked once, when the file is read (as checkpoint weights are, fp8.nonfinite_count): the error names the file
    and the tensor and says the LoRA is at fault, not the model (it used to pass and surface at step 1 as the
    transformer's corrupt weights)."""
    model = build("flux")
    comp = component(model, "flux")
    tensors, meta, _ = diffusers_lora(model)
    key = "transformer.proj_out.lora_A.weight"
    if where == "down":
        tensors[key] = tensors[key].clone()
        tensors[key][1, 3] = float("nan")
    elif where == "alpha tensor":
        tensors["transformer.proj_out.alpha"] = torch.tensor(float("inf"))
        key = "transformer.proj_out.alpha"
    else:
        meta = {"lora_adapter_metadata": json.dumps({"transformer.r": 4, "transformer.lora_alpha": float("nan")})}
    path = write(tmp_path / "broken_style.safetensors", tensors, meta)
    with pytest.raises(FillScopeInputError) as e:
        L.read_lora(path, comp)
    msg = str(e.value)
    assert e.value.input_name == "lora_name" and "'broken_style.safetensors'" in msg
    assert "the LoRA file is broken" in msg and "not at fault" in msg and "LoRA again" in e.value.fix
    if where != "metadata alpha":
        assert f"tensor '{key}' in the LoRA file 'broken_style.safetensors' holds 1 NaN/inf values" in msg
    else:
        assert "the alpha nan in its lora_adapter_metadata" in msg


def test_a_pickled_lora_is_refused_without_unpickling(tmp_path, monkeypatch):
    import pickle

    tensors = diffusers_lora(build("flux"))[0]
    torch.save(tensors, tmp_path / "style.pt")
    torch.save(tensors, tmp_path / "renamed.safetensors")  # a zip pickle under a safetensors name

    def never(*a, **k):
        raise AssertionError("unpickled")

    monkeypatch.setattr(pickle, "load", never)
    monkeypatch.setattr(pickle, "loads", never)
    monkeypatch.setattr(torch, "load", never)
    comp = component(build("flux"), "flux")
    with pytest.raises(FillScopeInputError, match=r"'style.pt' is a pickled PyTorch checkpoint.*never unpickles"):
        L.read_lora(tmp_path / "style.pt", comp)
    with pytest.raises(FillScopeInputError, match=r"'renamed.safetensors' is a zip archive"):
        L.read_lora(tmp_path / "renamed.safetensors", comp)


def test_keys_that_match_no_layer_are_reported_not_silently_ignored(tmp_path):
    """A FLUX.1 [dev] LoRA on Fill: its 64-channel img_in cannot patch Fill's 384-channel x_embedder; text-encoder
    tensors and full-weight diffs are not applied; each is said, the rest is applied."""
    model = build("flux")
    tensors, meta, deltas = diffusers_lora(model)
    g = torch.Generator().manual_seed(5)
    d, u = factors((32, 64), 4, g)
    tensors.update({"transformer.x_embedder.lora_A.weight": d, "transformer.x_embedder.lora_B.weight": u,
                    "transformer.pos_proj.lora_A.weight": d, "transformer.pos_proj.lora_B.weight": u,
                    "text_encoder.text_model.encoder.layers.0.mlp.fc1.lora_A.weight": torch.zeros(4, 8),
                    "transformer.norm_out.linear.diff_b": torch.zeros(64)})
    del deltas["x_embedder.weight"]
    view = patched(component(model, "flux"), (write(tmp_path / "dev.safetensors", tensors, meta), 1.0))
    lora = view.extras["lora_stack"][0][0]
    text = " | ".join(lora.warnings)
    assert "x_embedder: LoRA 64 -> 32, model 384 -> 32" in text and "pos_proj" in text
    assert "1 text-encoder tensors not applied" in text and "norm_out.linear.diff_b" in text
    assert "x_embedder" not in lora.modules
    assert rel(run(view.model, "flux"), run(merged(model, deltas), "flux")) <= 1e-5
    facts = L.describe(lora, 0.75)
    assert facts["strength"] == 0.75 and facts["rank"] == "4" and facts["alpha / rank"] == "0.5"
    assert facts["layers patched"] == "29 Linear (20 in the blocks, 9 outside)"
    assert facts["parameters added (factors held; fused layers split)"] == f"{lora.held_parameters:,}"


# ---- fp8 storage, meta, memory policies ---------------------------------------------------------------------


def test_fp8_storage_adds_the_lora_to_the_upcast_layer_and_leaves_the_fp8_weights_alone(tmp_path):
    from fillscope.fp8 import store_blocks_in_fp8

    model = build("flux")
    comp = component(model, "flux")
    store_blocks_in_fp8(comp)
    fp8 = {k: v.clone() for k, v in model.state_dict().items()}
    assert any(v.dtype == torch.float8_e4m3fn for v in fp8.values())
    tensors, meta, deltas = diffusers_lora(model)
    view = patched(comp, (write(tmp_path / "a.safetensors", tensors, meta), 1.0))
    assert any(getattr(m, "_fillscope_fp8", None) for m in view.model.modules())
    upcast = build("flux")  # the values the fp8 layers compute with, the delta on top
    upcast.load_state_dict({k: v.float() for k, v in fp8.items()})
    assert rel(run(view.model, "flux"), run(merged(upcast, deltas), "flux")) <= 1e-5
    assert torch.equal(run(model, "flux"), run(upcast, "flux"))  # the base still computes without the LoRA
    assert all(torch.equal(v.view(torch.uint8) if v.dtype == torch.float8_e4m3fn else v,
                           fp8[k].view(torch.uint8) if v.dtype == torch.float8_e4m3fn else fp8[k])
               for k, v in model.state_dict().items())


def test_meta_transformers_take_loras_in_their_production_shapes(tmp_path):
    """Full-size FLUX.1 Fill and klein 4B on meta: a kohya FLUX.1 LoRA (rank 1, a few layers, the real 3072 widths)
    patches Fill with shapes only (its 64-channel img_in is reported); the same LoRA on klein 4B and a klein LoRA on
    Fill are refused, each naming what it is."""
    flux = load_component("flux_fill_transformer", "meta")
    klein = load_component("klein_transformer", "meta")
    g = torch.Generator().manual_seed(6)
    mods = {"double_blocks_0_img_attn_qkv": (9216, 3072), "double_blocks_3_img_mod_lin": (18432, 3072),
            "single_blocks_37_linear1": (21504, 3072), "final_layer_adaLN_modulation_1": (6144, 3072),
            "img_in": (3072, 64)}
    kohya = {}
    for name, shape in mods.items():
        d, u = factors(shape, 1, g)
        kohya.update({f"lora_unet_{name}.lora_down.weight": d, f"lora_unet_{name}.lora_up.weight": u})
    path = write(tmp_path / "flux_dev_style.safetensors", kohya)
    view = patched(flux, (path, 1.0))
    lora = view.extras["lora_stack"][0][0]
    assert lora.made_for == "a FLUX.1 LoRA (width 3072)" and len(lora.modules) == 3 + 1 + 4 + 1
    assert "img_in -> x_embedder: LoRA 64 -> 3072, model 384 -> 3072" in lora.warnings[0]
    down = view.extras["lora_patch"].modules["single_transformer_blocks.37.proj_mlp"]._buffers[L.DOWN]
    assert down.device.type == "meta" and down.shape == (1, 3072) and down.dtype == torch.bfloat16
    with torch.inference_mode():
        out = view.model(hidden_states=torch.empty(1, 64, 384, device="meta", dtype=torch.bfloat16),
                         encoder_hidden_states=torch.empty(1, 16, 4096, device="meta", dtype=torch.bfloat16),
                         pooled_projections=torch.empty(1, 768, device="meta", dtype=torch.bfloat16),
                         timestep=torch.empty(1, device="meta"), guidance=torch.empty(1, device="meta"),
                         img_ids=torch.empty(64, 3, device="meta"), txt_ids=torch.empty(16, 3, device="meta"),
                         return_dict=False)[0]
    assert out.shape == (1, 64, 64) and out.device.type == "meta"
    with pytest.raises(FillScopeInputError, match=r"is a FLUX.1 LoRA \(width 3072\).*FLUX.2 \[klein\] 4B LoRAs"):
        L.read_lora(path, klein)
    k = {"lora_unet_double_stream_modulation_img_lin.lora_down.weight": torch.zeros(1, 3072),
         "lora_unet_double_stream_modulation_img_lin.lora_up.weight": torch.zeros(18432, 1),
         "lora_unet_single_blocks_0_linear1.lora_down.weight": torch.zeros(1, 3072),
         "lora_unet_single_blocks_0_linear1.lora_up.weight": torch.zeros(27648, 1)}
    kpath = write(tmp_path / "klein_style.safetensors", k)
    assert len(L.read_lora(kpath, klein).modules) == 2
    with pytest.raises(FillScopeInputError, match=r"is a FLUX.2 LoRA for FLUX.2 \[klein\] 4B \(width 3072\)"):
        L.read_lora(kpath, flux)


@pytest.mark.parametrize("policy", ["auto", "keep", "offload", "sequential"])
def test_every_memory_policy_runs_the_patched_copy(tmp_path, policy):
    from fillscope import placement

    model = build("klein")
    base = component(model, "klein")
    tensors, meta, deltas = diffusers_lora(model)
    view = patched(base, (write(tmp_path / "a.safetensors", tensors, meta), 1.0))
    assert view.extras["host_copy"] is not None and base.extras["host_copy"] is not None
    expected = run(merged(model, deltas), "klein")
    for _ in range(2):  # twice: the policy's moves after a use leave it working
        with placement.in_use(view, "cpu", policy):
            assert rel(run(view.model, "klein"), expected) <= 1e-5
    assert not any(m._forward_pre_hooks for m in view.model.modules())
    host = {p.data_ptr() for p, _ in base.extras["host_copy"].params.values()}
    assert all(p.data_ptr() in host for p in view.model.parameters())


def test_a_safetensors_header_whose_length_starts_like_a_pickle_or_zip_is_read(tmp_path):
    """A header of 0x480 bytes starts the file with b"\\x80\\x04" (pickle protocol 4's first bytes), one of 0x4B50
    with b"PK" (zip's): the JSON that follows says it is safetensors, so it is read, not refused as a pickle."""
    from fillscope.checkpoints import read_header

    def header_length(pad: int):
        path = write(tmp_path / f"h{length}.safetensors", {"a.lora_A.weight": torch.zeros(1, 2)}, {"pad": "x" * pad})
        return path, int.from_bytes(path.read_bytes()[:8], "little")

    for length in (0x480, 0x4B50):
        # the smallest pad whose header reaches `length`, searched from a pad whose header is surely shorter (one "x"
        # is one byte of JSON; the header is padded to 8 bytes): ~16 files written, not one per byte of header
        pad = max(0, length - header_length(0)[1] - 16)
        while True:
            path, got = header_length(pad)
            if got >= length:
                break
            pad += 1
        assert int.from_bytes(path.read_bytes()[:8], "little") == length
        assert list(read_header(path)[0]) == ["a.lora_A.weight"]


# ---- the node in a real ComfyUI server --------------------------------------------------------------------------


def fill_graph(lora_name: str, strength: float, steps: int) -> dict:
    src = "FLUX.1-Fill-dev"
    load = {"dtype": "bf16", "device": "cpu", "placeholder_seed": 0}
    mask_opts = {"invert_mask": False, "threshold": 0.5, "grow": 0, "feather": 0, "size_mode": "pad"}
    return {
        "1": {"class_type": "FillScopeLoadCLIPL", "inputs": {"source": src, **load}},
        "2": {"class_type": "FillScopeLoadT5", "inputs": {"source": src, **load}},
        "3": {"class_type": "FillScopeLoadFluxFillTransformer", "inputs": {"source": src, **load}},
        "4": {"class_type": "FillScopeLoadVAE", "inputs": {"source": src, "kind": "flux", **load}},
        "5": {"class_type": "FillScopeCLIPLEncode", "inputs": {"clip_l": ["1", 0], "text": PROMPT}},
        "6": {"class_type": "FillScopeT5Encode", "inputs": {"t5": ["2", 0], "text": PROMPT, "max_length": 512}},
        "7": {"class_type": "FillScopeFluxTextCondition", "inputs": {"t5_embeds": ["6", 0], "clip_embeds": ["5", 0]}},
        "8": {"class_type": "FillScopeSyntheticImageMask", "inputs": {"width": 64, "height": 48, "mask_fraction": 0.5}},
        "9": {"class_type": "FillScopeFluxFillCondition",
              "inputs": {"vae": ["4", 0], "image": ["8", 0], "mask": ["8", 1], **mask_opts}},
        "10": {"class_type": "FillScopeFluxFillLoRA",
               "inputs": {"transformer": ["3", 0], "lora_name": lora_name, "strength": strength}},
        "11": {"class_type": "FillScopeFluxFillSampler",
               "inputs": {"transformer": ["10", 0], "flux_text": ["7", 0], "condition": ["9", 0], "seed": 0,
                          "steps": steps, "guidance": 30.0, "denoise": 1.0}},
        "12": {"class_type": "FillScopeVAEDecode", "inputs": {"vae": ["4", 0], "latent": ["11", 0]}},
        "13": {"class_type": "SaveImage", "inputs": {"images": ["12", 0], "filename_prefix": "fillscope/lora"}},
    }


PROMPT = "a red brick fireplace"


@pytest.mark.server
def test_server_flux_fill_graph_with_the_lora_node_equals_the_engine(served_models, comfy_models_dir):
    """The tiny FLUX Fill graph through ComfyUI with FillScope LoRA (FLUX.1 Fill) between the loader and the sampler =
    the engine running the same LoRA, pixel for pixel; then strength 0 in the same server gives the engine's
    un-patched result: ComfyUI's cached transformer was not changed by the first run."""
    import io

    import numpy as np
    from PIL import Image

    from fillscope.masks import prepare_image_and_mask, synthetic_image_and_mask
    from fillscope.pipelines import flux_fill

    server = served_models
    folder = comfy_models_dir / "diffusers" / "FLUX.1-Fill-dev"
    stack = flux_fill.load_stack(str(folder), tokenizer_folders=(None, None), dtype="bf16", device="cpu")
    tensors, _ = bfl_lora(load_component("flux_fill_transformer", str(folder), dtype="fp32", device="cpu").model,
                          "flux", "kohya", rank=4, alpha=4.0)
    lora_file = write(comfy_models_dir / "loras" / "fill_style.safetensors", {k: v * 3 for k, v in tensors.items()})
    prepared = prepare_image_and_mask(*synthetic_image_and_mask(64, 48, 0.5))

    def pixels(entry):
        saved = entry["outputs"]["13"]["images"][0]
        return np.asarray(Image.open(io.BytesIO(server.view(saved["filename"], saved["subfolder"], saved["type"]))))

    def engine(transformer):
        image = flux_fill.run({**stack, "transformer": transformer}, PROMPT, prepared, steps=3, seed=0).image
        return np.clip(255.0 * image[0].float().numpy(), 0, 255).astype(np.uint8)

    entry = server.run(fill_graph("fill_style.safetensors", 0.8, 3), timeout=600)
    base = stack["transformer"]
    with_lora = engine(L.with_loras(base, [(L.read_lora(lora_file, base), 0.8)]))
    assert np.array_equal(pixels(entry), with_lora)
    node = entry["outputs"]["10"]["fillscope_shapes"][0]["node"]
    assert node["facts"]["lora"] == "fill_style.safetensors" and node["facts"]["strength"] == 0.8
    assert node["facts"]["layout"].startswith("kohya") and node["facts"]["made for"] == "a FLUX.1 LoRA (width 32)"
    assert node["facts"]["layers patched"] == "30 Linear (20 in the blocks, 10 outside)"
    assert any(t["name"].startswith("lora up") and t["role"] == "internal" for t in node["tensors"])

    plain = server.run(fill_graph("fill_style.safetensors", 0.0, 3), timeout=600)
    assert np.array_equal(pixels(plain), engine(base))
    assert not np.array_equal(pixels(plain), with_lora)
    assert any("strength 0" in n for n in plain["outputs"]["10"]["fillscope_shapes"][0]["node"]["notes"])


@pytest.mark.cuda
@pytest.mark.parametrize("policy", ["auto", "offload", "sequential"])
def test_cuda_moves_share_the_base_host_copy_and_equal_the_cpu_result(tmp_path, policy):
    from fillscope import placement

    model = build("flux")
    base = component(model, "flux")
    tensors, meta, _ = diffusers_lora(model)
    view = patched(base, (write(tmp_path / "a.safetensors", tensors, meta), 1.0))
    expected = run(view.model, "flux")
    assert view.extras["host_copy"].pinned_bytes == 0  # the base's CPU tensors, not pinned or counted twice
    for _ in range(2):
        with placement.in_use(view, "cuda", policy):
            with torch.inference_mode():
                out = view.model(**{k: v.cuda() if torch.is_tensor(v) else v for k, v in inputs("flux").items()})[0]
            assert rel(out.cpu(), expected) <= 1e-4
        placement.send_back(view)
    assert view.device == "cpu" and base.device == "cpu"
    host = {p.data_ptr() for p, _ in base.extras["host_copy"].params.values()}
    assert all(p.data_ptr() in host for p in view.model.parameters())
    assert torch.equal(run(model, "flux"), run(merged(model, {}), "flux"))
