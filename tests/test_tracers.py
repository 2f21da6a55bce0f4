"""fillscope.trace.modules / lines / cost: the tracers' behaviour on tiny models, and the module-level figure of
REFERENCE.md section 4 on the meta full-topology FLUX.1 Fill stack (one denoiser step).

The stack builders and one-step runners here are also what bench/bench_tracing.py measures."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fillscope import masks, text  # noqa: E402
from fillscope.pipelines import flux_fill, sd3_controlnet  # noqa: E402
from fillscope.trace.cost import count_flops, estimate_peak_memory  # noqa: E402
from fillscope.trace.lines import LineTracer  # noqa: E402
from fillscope.trace.modules import ModuleTracer, shape_signature  # noqa: E402
from fillscope.weights import Component  # noqa: E402
from tiny_flux import build_tiny_components  # noqa: E402
from tiny_models import comfy_tokenizer_dirs, tokenizers_available  # noqa: E402

PROMPT = "a red brick fireplace"

# REFERENCE.md section 4: the seed's per-component figures (rows, hits) for one FLUX Fill denoiser step, and its
# stated total. The components sum to 2,030 / 2,052.
SEED_FLUX_COMPONENTS = {"clip_l": (150, 150), "t5": (438, 439), "vae_encode": (97, 105),
                        "transformer": (1220, 1221), "vae_decode": (125, 137)}
SEED_FLUX_TOTAL = (2029, 2051)


# ----------------------------------------------------------------------------------------------------------------
# stacks and one-step runs (shared with bench/bench_tracing.py)
# ----------------------------------------------------------------------------------------------------------------


def _image_and_mask(height, width):
    g = torch.Generator().manual_seed(0)
    image = torch.rand(1, height, width, 3, generator=g)
    mask = torch.zeros(1, height, width)
    mask[:, height // 4 : height // 2, width // 4 : width // 2] = 1
    return masks.prepare_image_and_mask(image, mask)


def flux_meta_stack() -> dict:
    return flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def flux_tiny_stack(seed: int = 0) -> dict:
    """tests/tiny_flux.py's tiny fp32 models as engine Components on the CPU, with ComfyUI's real tokenizers."""
    comps = build_tiny_components(seed)
    clip_dir, t5_dir = comfy_tokenizer_dirs()

    def comp(kind, model, tokenizer=None):
        config = model.config.to_dict() if hasattr(model.config, "to_dict") else dict(model.config)
        return Component(kind, model, "tiny", "tiny (in memory)", "cpu", "fp32", config, tokenizer)

    return {
        "clip_l": comp("clip_l", comps["text_encoder"], text.load_clip_tokenizer(clip_dir)),
        "t5": comp("t5_xxl", comps["text_encoder_2"], text.load_t5_tokenizer(t5_dir)),
        "transformer": comp("flux_fill_transformer", comps["transformer"]),
        "vae": comp("flux_vae", comps["vae"]),
    }


def flux_trace_models(stack) -> dict:
    """What the FLUX figure traces: CLIP-L's text transformer (the module FLUX computes with; the clip_l file's
    text_projection is not part of FLUX), T5, the Fill transformer, the VAE (encoder.* = encode, decoder.* =
    decode): the pipeline's own choice."""
    return flux_fill.traced_modules(stack)


def run_flux_step(stack, height=1024, width=1024, steps=1):
    """CLIP-L encode, T5 encode, VAE encode of the masked image, `steps` transformer forwards, VAE decode."""
    return flux_fill.run(stack, PROMPT, _image_and_mask(height, width), steps=steps).image


def flux_denoiser_step(stack, height=1024, width=1024):
    """A zero-argument function running ONE FLUX Fill denoiser step (inputs prepared outside it)."""
    flux_text = flux_fill.encode_prompt(stack["clip_l"], stack["t5"], PROMPT)
    cond = flux_fill.build_fill_condition(stack["vae"], _image_and_mask(height, width))
    return lambda: flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=1)


def sd3_meta_stack() -> dict:
    return sd3_controlnet.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())


def sd3_text(stack, prompt):
    return sd3_controlnet.encode_prompt(stack["clip_l"], stack["clip_g"], stack["t5"], prompt)


def run_sd3_step(stack, height=1024, width=1024):
    """Prompt and negative through CLIP-L, CLIP-G, T5 (256); VAE encode; ONE step with CFG (ControlNet +
    transformer once each, batch 2); VAE decode."""
    return sd3_controlnet.run(stack, PROMPT, _image_and_mask(height, width), negative_prompt="", steps=1).image


def sd3_denoiser_step(stack, height=1024, width=1024):
    positive, negative = sd3_text(stack, PROMPT), sd3_text(stack, "")
    cond = sd3_controlnet.build_inpaint_condition(stack["vae"], _image_and_mask(height, width))
    return lambda: sd3_controlnet.sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], positive,
                                                             negative, cond, steps=1)


def split_vae(tracer: ModuleTracer, component: str = "vae") -> dict:
    """{"vae_encode": {rows, hits}, "vae_decode": {...}} from the VAE's encoder.* / other rows."""
    out = {"vae_encode": {"rows": 0, "hits": 0}, "vae_decode": {"rows": 0, "hits": 0}}
    for r in tracer.rows:
        if r["component"] == component:
            part = out["vae_encode" if r["module"].startswith("encoder") else "vae_decode"]
            part["rows"] += 1
            part["hits"] += r["hits"]
    return out


# outside CI only: under CI=true conftest.py turns this skip into a failure (`make setup` installs .comfyui)
needs_tokenizers = pytest.mark.skipif(not tokenizers_available(), reason="ComfyUI tokenizer files not found")


# ----------------------------------------------------------------------------------------------------------------
# ModuleTracer
# ----------------------------------------------------------------------------------------------------------------


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x, scale=1.0, extra=None):
        return self.lin(x) * scale


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.act = torch.nn.ReLU()

    def forward(self, x):
        y = self.inner(x=x, scale=2.0)  # keyword call: only with_kwargs hooks see x
        return {"y": self.act(y), "z": None}


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_removed_after_exit_and_after_an_exception():
    model = Outer()
    with ModuleTracer({"m": model}) as tr:
        assert _hook_count(model) == 2 * len(list(model.modules()))
        model(torch.zeros(2, 3))
    assert _hook_count(model) == 0
    assert tr.hits == 4  # root, inner, inner.lin, act

    with pytest.raises(ValueError, match="boom"), ModuleTracer({"m": model}) as tr2:
        model(torch.zeros(2, 3))
        raise ValueError("boom")
    assert _hook_count(model) == 0
    assert tr2.hits == 4

    with pytest.raises(RuntimeError), ModuleTracer({"m": model}):  # an exception inside a forward
        model(torch.zeros(2, 5))  # Linear(3, 4) on 5 features
    assert _hook_count(model) == 0


def test_keyword_inputs_and_nested_outputs_are_recorded():
    model = Outer()
    with ModuleTracer({"m": model}) as tr:
        model(torch.zeros(2, 3))
    (inner,) = tr.calls_of("m", "inner")
    assert inner["class"] == "Inner"
    assert inner["inputs"] == "(x=[2,3],scale=float)"
    assert inner["outputs"] == "[2,4]"
    (root,) = tr.calls_of("m", "")
    assert root["class"] == "Outer" and root["inputs"] == "([2,3])"
    assert root["outputs"] == "{y:[2,4],z:None}"
    assert shape_signature((torch.zeros(1), [None, 3], {"a": torch.zeros(2, 2)})) == "([1],<None,int>,{a:[2,2]})"


def test_rows_count_distinct_signatures_and_hits_count_calls():
    model = Outer()
    with ModuleTracer({"m": model}) as tr:
        model(torch.zeros(2, 3))
        model(torch.ones(2, 3))  # same shapes: no new rows
        model(torch.zeros(5, 3))  # new shapes: a new row per module
    assert tr.hits == 12
    assert len(tr.rows) == 8
    assert tr.per_component() == {"m": {"rows": 8, "hits": 12}}
    assert [r["hits"] for r in tr.calls_of("m", "inner.lin")] == [2, 1]
    assert all(r["wall_s"] >= 0 for r in tr.rows)
    with tr:  # entered again: adds to the same rows
        model(torch.zeros(2, 3))
    assert tr.hits == 16 and len(tr.rows) == 8 and _hook_count(model) == 0


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_components(0)


def test_tiny_flux_blocks_show_keyword_inputs_and_a_module_shared_by_components_counts_once(tiny):
    transformer = tiny["transformer"]
    with ModuleTracer({"transformer": transformer, "again": transformer.transformer_blocks}) as tr:
        transformer(hidden_states=torch.randn(1, 16, 384), timestep=torch.tensor([1.0]),
                    guidance=torch.tensor([30.0]), pooled_projections=torch.randn(1, 32),
                    encoder_hidden_states=torch.randn(1, 8, 32), txt_ids=torch.zeros(8, 3),
                    img_ids=torch.zeros(16, 3), return_dict=False)
    (block,) = tr.calls_of("transformer", "transformer_blocks.0")
    assert "hidden_states=[1,16,32]" in block["inputs"] and "encoder_hidden_states=[1,8,32]" in block["inputs"]
    (single,) = tr.calls_of("transformer", "single_transformer_blocks.0")
    assert "hidden_states=[1,16,32]" in single["inputs"]
    assert tr.per_component()["again"] == {"rows": 0, "hits": 0}  # its modules are traced as the transformer's


# ----------------------------------------------------------------------------------------------------------------
# LineTracer
# ----------------------------------------------------------------------------------------------------------------


def _write_pkg(root: Path, name: str) -> Path:
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "work.py").write_text(textwrap.dedent("""\
        import torch


        def double(x):
            y = x * 2
            n = 3
            for _ in range(n):
                y = y + 1
            return y
        """))
    return pkg


def test_line_tracer_records_only_files_under_its_roots(tmp_path, monkeypatch):
    traced = _write_pkg(tmp_path / "a", "traced_pkg_ft")
    _write_pkg(tmp_path / "b", "other_pkg_ft")
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    from other_pkg_ft import work as other
    from traced_pkg_ft import work

    before = sys.gettrace()
    before_threads = threading.gettrace()
    with LineTracer([traced]) as lt:
        work.double(torch.zeros(2, 5))
        other.double(torch.zeros(2, 5))
    assert sys.gettrace() is before and threading.gettrace() is before_threads
    assert lt.files() == ["traced_pkg_ft/work.py"]
    by_line = {}
    for r in lt.rows:
        by_line.setdefault(r["line"], []).append(r)
    assert by_line[5][0]["locals"] == "x=[2,5]" and by_line[5][0]["hits"] == 1  # y = x * 2
    # loop body: 3 hits, y already a tensor [2,5]; non-tensor locals (n, _) are not in the key
    assert [(r["locals"], r["hits"]) for r in by_line[8]] == [("x=[2,5],y=[2,5]", 3)]
    assert lt.hits == sum(r["hits"] for r in lt.rows) == 1 + 1 + 4 + 3 + 1
    assert lt.tracer == ("sys.monitoring" if sys.version_info >= (3, 12) else "sys.settrace")
    assert lt.python == sys.version.split()[0]


def test_line_tracer_default_roots_are_diffusers_and_transformers(tiny):
    with LineTracer() as lt:
        tiny["vae"].encode(torch.zeros(1, 3, 16, 16))
        tiny["text_encoder"](torch.zeros(1, 5, dtype=torch.long))
    files = lt.files()
    assert any(f.startswith("diffusers/models/autoencoders/") for f in files)
    assert any(f.startswith("transformers/models/clip/") for f in files)
    assert all(f.split("/")[0] in ("diffusers", "transformers") for f in files)
    assert not any("torch/" in f for f in files)


# ----------------------------------------------------------------------------------------------------------------
# cost
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_linear_flops_are_2mnk_and_attention_counts_on_every_device(device):
    m, k, n = 7, 11, 13
    lin = torch.nn.Linear(k, n, device=device)
    x = torch.zeros(m, k, device=device)
    total, per_module = count_flops(lambda: lin(x))
    assert total == 2 * m * n * k
    assert per_module["Global"] == total and per_module["Linear"] == total

    b, h, L, d = 1, 2, 64, 16
    q = torch.zeros(b, h, L, d, device=device)
    total, _ = count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert total == 4 * b * h * L * L * d  # QK^T and PV; the CPU kernel has no torch formula: mapped here


def test_peak_memory_follows_tensor_lifetimes():
    x = torch.zeros(256, 1024, device="meta")  # 1 MiB float32, made before the call: resident
    lin = torch.nn.Linear(1024, 1024, bias=False, device="meta")  # 4 MiB parameter

    def fn():
        a = x * 2
        b = a * 2
        del a  # freed: never three at once
        c = b * 2
        del b
        return lin(c).sum()

    est = estimate_peak_memory(fn)
    mib = 2**20
    assert est["parts"]["parameters"] == 4 * mib
    assert est["parts"]["other_resident"] == mib
    # never a, b and c at once: the peak is c, lin(c) and the 4-byte sum
    assert est["parts"]["activations_peak"] == 2 * mib + 4
    assert est["parts"]["activations_left"] == 0  # nothing the call made outlives it
    assert est["bytes"] == 7 * mib + 4
    assert est["provenance"].startswith("estimated on meta")


@pytest.mark.cuda
def test_measure_peak_cuda_sees_what_the_call_allocates():
    from fillscope.trace.cost import measure_peak_cuda

    def fn():
        x = torch.empty(2**18, device="cuda")  # 1 MiB, freed on return
        return float(x.zero_().sum())

    got = measure_peak_cuda(fn)
    assert got["provenance"] == "measured on CUDA"
    assert got["bytes"] - got["before_bytes"] >= 2**20


# ----------------------------------------------------------------------------------------------------------------
# the full-topology FLUX.1 Fill figure (meta device)
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flux_meta():
    return flux_meta_stack()


@needs_tokenizers
def test_flux_fill_one_step_module_trace_matches_the_seed(flux_meta):
    with ModuleTracer(flux_trace_models(flux_meta)) as tr:
        image = run_flux_step(flux_meta)
    assert list(image.shape) == [1, 1024, 1024, 3]
    per = {k: (v["rows"], v["hits"]) for k, v in tr.per_component().items() if k != "vae"}
    per.update({k: (v["rows"], v["hits"]) for k, v in split_vae(tr).items()})
    assert per == SEED_FLUX_COMPONENTS  # every component figure of the seed, exactly
    rows, hits = len(tr.rows), tr.hits
    assert (rows, hits) == (2030, 2052)  # = the seed's components' sum; its stated total is one less
    assert abs(rows / SEED_FLUX_TOTAL[0] - 1) < 0.01 and abs(hits / SEED_FLUX_TOTAL[1] - 1) < 0.01
    # the 57 blocks are called with keyword arguments: their inputs are in the key
    (block,) = tr.calls_of("transformer", "single_transformer_blocks.37")
    assert block["inputs"].startswith("(hidden_states=[1,4096,3072],encoder_hidden_states=[1,512,3072],temb=[1,3072]")


@needs_tokenizers
def test_flux_fill_one_denoiser_step_costs_74_4_tflop_and_22_6_gib(flux_meta):
    step = flux_denoiser_step(flux_meta)
    total, per_module = count_flops(step)
    assert round(total / 1e12, 1) == 74.4
    assert per_module["FluxTransformer2DModel"] == total
    est = estimate_peak_memory(step)
    assert est["parts"]["parameters"] == 11_902_391_360 * 2  # the transformer's bf16 weights, nothing else
    assert 0.3 * 2**30 < est["parts"]["activations_peak"] < 1.0 * 2**30
    assert est["parts"]["activations_left"] == 0
