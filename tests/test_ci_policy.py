"""The skip policy of tests/conftest.py: under CI only a ``@pytest.mark.cuda`` test on a machine without CUDA may
skip; every other skip (pytest.skip, skipif, a fixture that skips, a module skipped while collected) fails.
Checked by running pytest in a subprocess, with this conftest loaded as a plugin, on generated test files (one
process, a pytest session per CI value: see DRIVER)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

GENERATED = {
    "test_policy_cases.py": """
        import pytest

        @pytest.mark.cuda
        def test_needs_cuda():
            pass

        def test_plain_skip():
            pytest.skip("tokenizers missing")

        @pytest.mark.skipif(True, reason="needs CUDA")  # a CUDA-sounding reason is not the marker
        def test_skipif_without_the_marker():
            pass

        @pytest.fixture
        def server():
            pytest.skip("server missing")

        def test_fixture_skip(server):
            pass

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            assert False

        def test_passes():
            pass
        """,
    "test_policy_module_skip.py": """
        import pytest

        pytest.skip("optional package missing", allow_module_level=True)

        def test_never_collected():
            pass
        """,
}


# One Python process runs the three pytest sessions (CI=true, CI unset, CI=false) one after the other, each with
# its own JUnit file and the generated files imported anew (a module skipped while collected stays half-imported in
# sys.modules otherwise): tests/conftest.py reads CI when it reports (_in_ci), so a session sees only its own value;
# the process imports pytest and torch (conftest.py asks torch about CUDA when a test is marked cuda) once, not three
# times (a process each took ~4-5 s of CPU, most of it those imports).
DRIVER = """
import json, os, sys
import pytest
for ci, junit in json.loads(sys.argv[1]):
    for name, module in list(sys.modules.items()):  # each session imports the generated files anew
        if os.path.dirname(str(getattr(module, "__file__", None) or "")) == os.getcwd():
            del sys.modules[name]
    os.environ.pop("CI", None)
    if ci is not None:
        os.environ["CI"] = ci
    pytest.main([*json.loads(sys.argv[2]), f"--junitxml={junit}"])
"""
CI_VALUES = ("true", None, "false")


def junit_outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """{test name: (passed | skipped | failure | error, junit message)} from a JUnit file."""
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        found = [child for child in case if child.tag in ("skipped", "failure", "error")]
        name = case.get("name") or case.get("classname")
        outcomes[name] = (found[0].tag, found[0].get("message", "")) if found else ("passed", "")
    return outcomes


@pytest.fixture(scope="module")
def policy_runs(tmp_path_factory) -> dict:
    """{CI value (None: unset): {test name: (passed | skipped | failure | error, junit message)}} from pytest runs
    of the generated files, one session per CI value (see DRIVER). No CUDA is visible (CUDA_VISIBLE_DEVICES is
    empty), so a cuda-marked test skips on every machine."""
    import json

    tmp_path = tmp_path_factory.mktemp("ci_policy")
    for name, body in GENERATED.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]))
    junits = {ci: tmp_path / f"junit-{ci or 'unset'}.xml" for ci in CI_VALUES}
    args = ["-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "conftest", "-p", "no:cacheprovider",
            "-q", "--continue-on-collection-errors", *GENERATED]
    cmd = [sys.executable, "-c", DRIVER, json.dumps([[ci, str(junits[ci])] for ci in CI_VALUES]), json.dumps(args)]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    for junit in junits.values():
        assert junit.is_file(), res.stdout[-3000:] + res.stderr[-3000:]
    return {ci: junit_outcomes(junit) for ci, junit in junits.items()}


def run_pytest(policy_runs: dict, ci: str | None) -> dict[str, tuple[str, str]]:
    """The outcomes of the session with CI set to `ci` (None: unset)."""
    return policy_runs[ci]


def test_under_ci_only_a_cuda_skip_stays_a_skip(policy_runs):
    outcomes = run_pytest(policy_runs, "true")
    kinds = {name: kind for name, (kind, _) in outcomes.items()}
    assert kinds["test_needs_cuda"] == "skipped"
    assert kinds["test_passes"] == "passed"
    assert kinds["test_xfail"] == "skipped"  # junit's word for xfailed: an expected failure is not a skip
    assert kinds["test_plain_skip"] == "failure"
    assert kinds["test_skipif_without_the_marker"] == "error"  # skipped at setup: reported as a setup error
    assert kinds["test_fixture_skip"] == "error"
    module = [kind for name, kind in kinds.items() if "test_policy_module_skip" in name]
    assert module == ["error"], outcomes  # skipped while collected
    message = outcomes["test_plain_skip"][1]
    assert "tokenizers missing" in message and "@pytest.mark.cuda" in message


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_skips_stay_skips(policy_runs, ci):
    kinds = {name: kind for name, (kind, _) in run_pytest(policy_runs, ci).items()}
    for name in ("test_needs_cuda", "test_plain_skip", "test_skipif_without_the_marker", "test_fixture_skip"):
        assert kinds[name] == "skipped", (name, kinds)
    assert kinds["test_passes"] == "passed"
    assert [kind for name, kind in kinds.items() if "test_policy_module_skip" in name] == ["skipped"]
