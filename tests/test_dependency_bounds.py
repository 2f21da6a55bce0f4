"""The declared dependency bounds are one table (fillscope/requirements.py) that pyproject.toml and requirements.txt
carry line for line; a too-old package is refused at first use naming it, both versions and the pip command, before
a weight loads; the engine imports no private module of diffusers where a public name exists."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fillscope import requirements as req
from fillscope.errors import FillScopeInputError

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


@pytest.fixture
def fresh(monkeypatch):
    """A process that has checked nothing yet (the check runs once per process)."""
    monkeypatch.setattr(req, "_checked", set())


def installed(monkeypatch, **versions):
    """The metadata lookup answering `versions` for the packages named, the real one for the others."""
    real = req.installed_version
    monkeypatch.setattr(req, "installed_version",
                        lambda name: versions[name] if name in versions else real(name))


def test_pyproject_and_requirements_txt_declare_exactly_the_engine_table():
    assert PYPROJECT["dependencies"] == [r.line for r in req.DEPENDENCIES]
    assert PYPROJECT["optional-dependencies"] == {group: [r.line for r in rs] for group, rs in req.OPTIONAL.items()}
    lines = [ln.strip() for ln in (REPO / "requirements.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines == [r.line for r in req.DEPENDENCIES]


def test_ray_is_capped_to_the_tested_minor_series_and_nothing_else_is_capped():
    capped = {r.name: r.line for rs in req.OPTIONAL.values() for r in rs if r.below} | \
             {r.name: r.line for r in req.DEPENDENCIES if r.below}
    assert capped == {"ray": "ray>=2.60,<2.61"}


def test_this_environment_meets_every_declared_bound(fresh):
    req.check_installed()  # the real metadata of this venv
    for r in req.DEPENDENCIES:
        version = req.installed_version(r.name)
        assert req.problem(r, version) is None, (r.line, version)
        print(f"{r.name} {version} meets {r.line}")
    ray = req.installed_version("ray")
    if ray is not None:
        assert req.problem(req._BY_NAME["ray"], ray) is None, ray


@pytest.mark.parametrize("version, numbers", [("2.14.1+cpu", (2, 14, 1)), ("5.0.0rc1", (5,)), ("0.38.0.dev0", (0, 38)),
                                              ("0.38", (0, 38)), ("0.42.1", (0, 42, 1)), ("10.0.0", (10,))])
def test_release_reads_the_numeric_release_of_a_version(version, numbers):
    assert req.release(version) == numbers


def test_a_too_old_diffusers_is_refused_naming_both_versions_and_the_pip_command(monkeypatch, fresh):
    installed(monkeypatch, diffusers="0.41.0")
    with pytest.raises(FillScopeInputError) as e:
        req.check_installed()
    minimum = req._BY_NAME["diffusers"].minimum
    assert e.value.input_name == "diffusers"
    assert f"diffusers 0.41.0 is installed; FillScope needs diffusers>={minimum}" in str(e.value)
    assert f'pip install "diffusers>={minimum}"' in str(e.value)
    assert "Flux2 block" in str(e.value)  # what of it needs the newer release


def test_an_old_transformers_is_refused_at_the_first_component_load_before_any_weight(monkeypatch, fresh):
    from fillscope import weights

    installed(monkeypatch, transformers="5.1.0")
    with pytest.raises(FillScopeInputError, match=r'transformers 5\.1\.0 is installed.*pip install "transformers>='):
        weights.load_component("flux_vae", "placeholder", device="cpu")  # refused before the VAE is built


def test_a_missing_package_is_refused_as_not_installed(monkeypatch, fresh):
    installed(monkeypatch, safetensors=None)
    with pytest.raises(FillScopeInputError, match=r"safetensors is not installed; FillScope needs safetensors>="):
        req.check_installed()


def test_ray_past_the_tested_minor_series_is_refused_and_a_patch_release_is_not(monkeypatch, fresh):
    installed(monkeypatch, ray="2.61.0")
    with pytest.raises(FillScopeInputError,
                       match=r'ray 2\.61\.0 is installed; FillScope is tested with ray>=2\.60,<2\.61'):
        req.check_installed(("ray",))
    installed(monkeypatch, ray="2.60.3")
    req.check_installed(("ray",))


def test_a_version_with_no_release_number_is_let_through(monkeypatch, fresh):
    installed(monkeypatch, torch="unknown")
    req.check_installed(("torch",))


def test_importing_the_requirements_module_imports_no_heavy_package():
    code = ("import sys, fillscope.requirements as r; r.check_installed(); "
            "print(sorted(m for m in ('torch', 'diffusers', 'transformers', 'safetensors') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# diffusers names with no public equivalent in 0.42.1, each kept with a comment at its import
PRIVATE_KEPT = {("fillscope/parallel/context.py", "diffusers.models.attention_dispatch", "_AttentionBackendRegistry")}


def test_no_private_diffusers_module_or_name_is_imported_where_a_public_one_exists():
    found = set()
    for path in sorted(list((REPO / "fillscope").rglob("*.py")) + list((REPO / "nodes").rglob("*.py"))):
        for module, names in re.findall(r"from (diffusers[\w.]*) import ([\w, ]+)", path.read_text()):
            for name in (n.strip() for n in names.split(",")):
                if any(part.startswith("_") for part in module.split(".")) or name.startswith("_"):
                    found.add((path.relative_to(REPO).as_posix(), module, name))
    assert found == PRIVATE_KEPT
