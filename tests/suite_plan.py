"""How the suite is split between pytest-xdist's workers, and what kind each test is (tests/conftest.py applies it).

Kinds (markers set at collection, so `-m` selects them; docs/tests.md gives each kind's time):
  - browser: a test module that drives ComfyUI's frontend in chromium (tests/test_browser_*.py);
  - ray: a test that starts Ray (the `ray_tmp_env` fixture) or torch.distributed ranks (test_context_parallel.py);
  - server: a test that talks to a real ComfyUI server (one of SERVER_FIXTURES, or a module that starts its own);
  - engine: everything else (the engine, its CLIs, the docs and the layering, in this process).

Work units: `make test` runs `pytest -n 2 --dist loadfile --no-loadscope-reorder`: a module is one unit, so its
module-scoped fixtures (a server with its models, a browser page, a Ray cluster) are built once, on one worker
(`--dist loadgroup` with xdist_group marks would allow other groupings, but xdist 3.8.0 cannot rename pytest 9.2's
node ids, so the marks are ignored: measured here). Units are handed out longest first (longest-processing-time first, the classic bound for
two machines): their cost is the time the last measured run gave each module (tests/data/test_durations.json, written
by `python scripts/test_durations.py JUNIT_XML`); a module not in it counts as DEFAULT_SECONDS. Within a module the
order is the file's.

Slow: the tests the last measured run found slow (test_durations.json's "slow_tests") are marked `slow` besides any
`@pytest.mark.slow` in the code; `make test-fast` runs `-m "(engine or smoke) and not slow"`, `make test` everything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "data" / "test_durations.json"
DEFAULT_SECONDS = 10.0

# fixtures that reach a real ComfyUI server (conftest.py's session ones, and the modules' own `server`)
SERVER_FIXTURES = frozenset({"comfy_server", "comfy_models_dir", "served_models", "newest_frontend_server",
                             "test_nodes_server", "server"})
# modules that start their own server or a server-side process without one of those fixture names
SERVER_MODULES = frozenset({"test_source_menus.py", "test_registry_metadata.py", "test_pack.py"})
RAY_MODULES = frozenset({"test_context_parallel.py"})


def kind_of(item) -> str:
    module = Path(str(item.fspath)).name
    fixtures = set(getattr(item, "fixturenames", ()))
    if module.startswith("test_browser_"):
        return "browser"
    if "ray_tmp_env" in fixtures or module in RAY_MODULES:
        return "ray"
    if fixtures & SERVER_FIXTURES or module in SERVER_MODULES:
        return "server"
    return "engine"


def measured() -> dict:
    try:
        data = json.loads(DURATIONS.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def module_seconds(data: dict) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in data["modules"].items()}
    except (KeyError, TypeError, AttributeError, ValueError):
        return {}


def slow_tests(data: dict) -> frozenset:
    """"module.py::test name" of the tests the last measured run found slow (scripts/test_durations.py SLOW_SECONDS)."""
    tests = data.get("slow_tests")
    return frozenset(t for t in tests if isinstance(t, str)) if isinstance(tests, list) else frozenset()


def plan(items: list) -> None:
    """Mark each item with its kind (and `slow` where the last measured run found it slow), and order the modules
    longest first (in place)."""
    data = measured()
    seconds, slow = module_seconds(data), slow_tests(data)
    order: dict[str, int] = {}
    for item in items:
        module = Path(str(item.fspath)).name
        order.setdefault(module, len(order))
        kind = kind_of(item)
        item.add_marker(getattr(pytest.mark, kind))
        item.user_properties.append(("kind", kind))  # in --junitxml: scripts/test_durations.py sums by kind
        if f"{module}::{item.name}" in slow and not item.get_closest_marker("smoke"):
            item.add_marker(pytest.mark.slow)  # left out of make test-fast
    rank = {m: (-seconds.get(m, DEFAULT_SECONDS), i) for m, i in order.items()}
    items.sort(key=lambda item: rank[Path(str(item.fspath)).name])  # stable: a module's own order is kept
