"""`python -m fillscope compare SPEC_A SPEC_B` (fillscope/compare): one job run two ways on a tiny fp32 FLUX.1 Fill
folder, compared boundary by boundary: a run against itself is identical everywhere; bf16 against fp32, fp8 storage
against as-loaded and a step cache against none each give per-boundary figures and image PSNR; two meta runs at
1024 and 2048 list the shapes that change and those that stay; a B that changes the job is refused naming the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from fillscope.cli import main
from tiny_flux import tiny_flux_fill_job

@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    spec = {**tiny_flux_fill_job(d, steps=3), "image": "img.png", "mask": "mask.png"}  # read from a.json's folder
    (d / "a.json").write_text(json.dumps(spec))
    return d


def compare(job, b: dict, out: str, *extra) -> tuple[int, dict]:
    code = main(["compare", str(job / "a.json"), json.dumps(b), "--out", str(job / out), *extra])
    return code, json.loads((job / out / "compare.json").read_text())


def rows(doc) -> dict:
    return {r["name"]: r for r in doc["comparison"]["boundaries"]}


def test_a_run_against_itself_is_identical_at_every_boundary_and_exits_0(job):
    code, doc = compare(job, {}, "same")
    c = doc["comparison"]
    assert code == 0 and c["first_divergence"] is None
    assert all(r["status"] == "same" and r["rel_err"] == 0.0 for r in c["boundaries"])
    assert {"t5.hidden", "transformer.input", "step[3].denoiser", "step[3].latent", "decoded_image"} <= set(rows(doc))
    assert c["image"]["psnr_inside"] == "inf" and c["image"]["ssim_all"] == 1.0
    assert (job / "same" / "compare_heatmap.png").is_file() and (job / "same" / "compare.txt").is_file()


def test_bf16_against_fp32_names_the_first_boundary_and_gives_every_steps_figures(job, capsys):
    code, doc = compare(job, {"dtype": "bf16"}, "bf16")
    c = doc["comparison"]
    assert code == 1
    r = rows(doc)
    assert c["first_divergence"] == next(n for n, x in r.items() if x["status"] == "differs")
    assert r["clip_l.input_ids"]["status"] == "same"  # token ids do not depend on the dtype
    for i in (1, 2, 3):
        assert 1e-4 < r[f"step[{i}].denoiser"]["rel_err"] < 0.5 and r[f"step[{i}].latent"]["cosine"] > 0.99
    assert c["first_step"] == 1
    assert 20 < c["image"]["psnr_inside"] < 100 and c["image"]["psnr_outside"] > 0
    assert doc["a"]["dtype"] == "fp32" and doc["b"]["dtype"] == "bf16"
    out = capsys.readouterr().out
    assert "first divergence:" in out and "PSNR inside the mask" in out


def test_fp8_storage_changes_the_transformer_boundaries_not_the_vae_ones(job):
    code, doc = compare(job, {"storage": "fp8_e4m3fn"}, "fp8")
    r = rows(doc)
    assert code == 1 and doc["b"]["storage"] == "fp8_e4m3fn" and "transformer storage" in doc["b"]["facts"]
    assert r["fill_condition"]["status"] == "same" and r["masked_image_latents"]["rel_err"] == 0.0
    assert r["step[1].denoiser"]["status"] == "differs"
    assert doc["comparison"]["image"]["psnr_inside"] not in ("inf", None)


def test_a_step_cache_against_none_gives_per_step_figures(job):
    code, doc = compare(job, {"step_cache": "taylorseer", "steps": 3}, "cache")
    r = rows(doc)
    assert doc["b"]["step_cache"] == "taylorseer"
    assert all(f"step[{i}].denoiser" in r for i in (1, 2, 3))
    assert isinstance(doc["comparison"]["image"]["psnr_all"], (float, str))


def test_blocks_add_every_blocks_output_and_the_first_block_that_differs(job):
    code, doc = compare(job, {"dtype": "bf16", "blocks": True}, "blocks")
    names = set(rows(doc))
    assert any(n.startswith("transformer.call[1].transformer_blocks.0") for n in names)
    assert any(n.startswith("transformer.call[3].single_transformer_blocks.") for n in names)
    assert doc["comparison"]["first_block"].startswith("transformer.call[1].")


def test_two_meta_runs_at_1024_and_2048_list_the_shapes_that_change_and_those_that_stay(tmp_path):
    for s in (1024, 2048):
        Image.fromarray(np.zeros((s, s, 3), np.uint8)).save(tmp_path / f"m{s}.png")
        m = np.zeros((s, s), np.uint8)
        m[s // 4 : 3 * s // 4, s // 4 : 3 * s // 4] = 255
        Image.fromarray(m).save(tmp_path / f"m{s}_mask.png")
    a = {"family": "flux-fill", "models": "meta", "image": str(tmp_path / "m1024.png"),
         "mask": str(tmp_path / "m1024_mask.png"), "prompt": "a lamp", "seed": 1, "steps": 1, "dtype": "bf16"}
    b = {"image": str(tmp_path / "m2048.png"), "mask": str(tmp_path / "m2048_mask.png")}
    main(["compare", json.dumps(a), json.dumps(b), "--out", str(tmp_path / "out")])
    doc = json.loads((tmp_path / "out" / "compare.json").read_text())
    r = rows(doc)
    assert doc["comparison"]["shapes_only"] is True
    assert r["transformer.input"]["shape_a"] == [1, 4096, 384] and r["transformer.input"]["shape_b"] == [1, 16384, 384]
    assert r["transformer.input"]["status"] == "shapes differ"
    assert r["t5.hidden"]["status"] == "same shape" and r["t5.hidden"]["shape_a"] == [1, 512, 4096]
    assert "shapes only" in doc["comparison"]["headline"]
    assert not (tmp_path / "out" / "compare_heatmap.png").exists()  # no values, no pictures


@pytest.mark.parametrize("b, name, text", [
    ({"seed": 2}, "B.seed", "one job two ways"),
    ({"implementation": "native"}, "B.implementation", "running ComfyUI"),
    ({"storage": "fp4"}, "B.storage", "fp8_e4m3fn"),
    ({"dtype": "fp64"}, "B.dtype", "bf16"),
])
def test_a_spec_that_cannot_run_exits_2_naming_its_field(job, capsys, b, name, text):
    code = main(["compare", str(job / "a.json"), json.dumps(b), "--out", str(job / "bad")])
    err = capsys.readouterr().err
    assert code == 2 and f"'{name}'" in err and text in err and "Fix:" in err


def test_the_command_line_prints_the_table_and_writes_the_record(job, capsys):
    """cli.main as `python -m fillscope` calls it, in this process (a subprocess spent most of its time importing
    torch, diffusers and transformers again); that entry point itself: test_manifest_bounds' run_cli tests."""
    code = main(["compare", str(job / "a.json"), '{"dtype": "bf16"}', "--out", str(job / "cli"), "--rows", "5"])
    out = capsys.readouterr()
    assert code == 1, out.err
    assert "boundary" in out.out and "more rows in" in out.out and "first divergence" in out.out
    assert json.loads((job / "cli" / "compare.json").read_text())["schema"] == "fillscope.compare/1"


def test_fillscope_against_diffusers_own_pipeline_is_identical_at_every_shared_boundary(job):
    code, doc = compare(job, {"implementation": "diffusers"}, "diffusers")
    shared = [r for r in doc["comparison"]["boundaries"] if r["status"] in ("same", "differs")]
    assert code == 0 and len(shared) >= 20 and all(r["rel_err"] <= 1e-5 for r in shared)
    assert doc["b"]["implementation"] == "diffusers" and doc["comparison"]["image"]["psnr_all"] in ("inf",) or \
        doc["comparison"]["image"]["psnr_all"] > 100


def test_a_memory_policy_moves_weights_and_no_number(job):
    code, doc = compare(job, {"memory": "sequential"}, "memory")
    assert code == 0 and doc["comparison"]["first_divergence"] is None
    assert doc["b"]["facts"]["memory"] == "sequential" and "memory sequential" in doc["b"]["describe"]


def test_fp8_storage_against_bf16_gives_per_boundary_figures_and_psnr(job):
    a = {**json.loads((job / "a.json").read_text()), "dtype": "bf16"}
    (job / "a_bf16.json").write_text(json.dumps(a))
    code = main(["compare", str(job / "a_bf16.json"), '{"storage": "fp8_e4m3fn"}', "--out", str(job / "fp8_bf16")])
    doc = json.loads((job / "fp8_bf16" / "compare.json").read_text())
    r = rows(doc)
    assert code == 1 and doc["a"]["dtype"] == doc["b"]["dtype"] == "bf16"
    assert r["fill_condition"]["status"] == "same" and r["step[1].denoiser"]["status"] == "differs"
    assert isinstance(doc["comparison"]["image"]["psnr_inside"], float)


# --- issue 35: specs and arguments refused by name, before any model loads -----------------------------------------

def refusal(job, capsys, a, b, *extra) -> str:
    """The one message of a compare that exits 2."""
    code = main(["compare", str(a), b, "--out", str(job / "refused"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "Fix:" in err, err
    return err


@pytest.fixture
def no_model_loads(monkeypatch):
    """A compare that gets as far as loading a stack fails the test."""
    from fillscope.batch import runner

    def load_stack(*a, **k):
        raise AssertionError("a model loaded")

    monkeypatch.setattr(runner, "load_stack", load_stack)


def test_a_spec_nested_thousands_deep_is_refused_by_its_depth_as_a_manifest_line_is(job, capsys, tmp_path):
    deep = '{"dtype": ' + "[" * 5000 + "]" * 5000 + "}"
    err = refusal(job, capsys, job / "a.json", deep)
    assert "'SPEC_B'" in err and "nests 5001 levels deep" in err and "at most 8" in err and "Recursion" not in err
    (tmp_path / "deep.json").write_text(deep)
    err = refusal(job, capsys, tmp_path / "deep.json", "{}")
    assert "'SPEC_A'" in err and f"the file {tmp_path / 'deep.json'}" in err and "nests 5001" in err


@pytest.mark.parametrize("text, kind", [("[1,2]", "an array"), (" [] ", "an array"), ("42", "a number"),
                                        ("null", "null")])
def test_inline_json_that_is_not_an_object_is_refused_as_such_not_read_as_a_file_name(job, capsys, text, kind):
    err = refusal(job, capsys, job / "a.json", text)
    assert "'SPEC_B'" in err and f"is JSON but {kind}, not an object" in err and "cannot be read" not in err


def test_a_tolerance_over_its_bound_is_refused_as_over_the_bound_not_as_not_positive(job, capsys):
    for value, says in (("1e308", "is over the bound"), ("1e6", "is over the bound"), ("0", "is not positive"),
                        ("-1e-4", "is not positive"), ("nan", "is not a finite number")):
        with pytest.raises(SystemExit) as e:
            main(["compare", str(job / "a.json"), "{}", f"--tolerance={value}"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "--tolerance" in err and says in err and "1e-4" in err, (value, err)
        assert len(err.strip().splitlines()) == 1


def test_a_missing_model_of_run_b_is_refused_naming_b_models_before_any_model_loads(job, capsys, no_model_loads):
    missing = job / "missing" / "flux1-fill-dev.safetensors"
    err = refusal(job, capsys, job / "a.json", json.dumps({"models": {"default": str(job / "flux"),
                                                                       "clip_l": str(missing)}}))
    assert "input 'B.models'" in err and f"B.models clip_l '{missing}'" in err and "does not exist" in err
    assert "menu" not in err and "Nothing has loaded" in err
    err = refusal(job, capsys, job / "a.json", json.dumps({"models": str(missing)}))
    assert "input 'B.models'" in err and all(f"B.models {c} " in err for c in ("clip_l", "t5", "transformer", "vae"))


def test_an_empty_mask_is_refused_naming_the_spec_field_before_any_model_loads(job, capsys, no_model_loads):
    Image.fromarray(np.zeros((64, 96), np.uint8)).save(job / "empty_mask.png")
    a = {**json.loads((job / "a.json").read_text()), "image": str(job / "img.png"), "mask": str(job / "empty_mask.png")}
    err = refusal(job, capsys, json.dumps(a), '{"implementation": "diffusers"}')
    assert "input 'A.mask'" in err and "is empty" in err and "nothing to repaint" in err


def test_runs_that_agree_at_every_shared_boundary_but_not_in_their_images_headline_it_and_exit_1(job, capsys,
                                                                                                 monkeypatch):
    """The report of issue 35: an empty mask let FillScope return the source without sampling while diffusers
    repainted; every boundary both passed agreed, and the comparison said so and exited 0. With the up-front refusal
    lifted, the images' difference is what the headline reports and the exit code follows it."""
    from fillscope.compare import runs

    monkeypatch.setattr(runs, "require_mask", lambda *a, **k: None)
    Image.fromarray(np.zeros((64, 96), np.uint8)).save(job / "empty_mask.png")
    a = {**json.loads((job / "a.json").read_text()), "image": str(job / "img.png"), "mask": str(job / "empty_mask.png")}
    code = main(["compare", json.dumps(a), '{"implementation": "diffusers"}', "--out", str(job / "empty")])
    doc = json.loads((job / "empty" / "compare.json").read_text())
    c = doc["comparison"]
    assert code == 1 and c["first_divergence"] is None and c["differs"] is True
    assert c["headline"].startswith("the images differ (rel err ") and "no boundary over" not in c["headline"]
    assert c["image"]["rel_err"] > 1e-4 and "outside" in c["headline"]
    assert "the images differ" in capsys.readouterr().out
