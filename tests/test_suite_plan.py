"""tests/suite_plan.py on this very session: every collected test has its kind, the measured slow ones are marked
`slow` (so `make test-fast` leaves them out) except a smoke test, and modules go out longest first."""

from __future__ import annotations

from pathlib import Path

import suite_plan

KINDS = ("engine", "server", "browser", "ray")


def test_every_collected_test_has_one_kind(request):
    for item in request.session.items:
        # a module may carry a kind's mark of its own too (a browser module marked server): the plan gives one kind
        kinds = [v for k, v in item.user_properties if k == "kind"]
        assert len(kinds) == 1 and kinds[0] in KINDS, f"{item.nodeid}: kinds {kinds}"
        assert item.get_closest_marker(kinds[0]), item.nodeid


def test_the_measured_slow_tests_are_marked_slow_and_a_smoke_test_never(request):
    slow = suite_plan.slow_tests(suite_plan.measured())
    assert slow, "tests/data/test_durations.json lists no slow test: write it with scripts/test_durations.py --write"
    for item in request.session.items:
        listed = f"{Path(str(item.fspath)).name}::{item.name}" in slow
        if item.get_closest_marker("smoke"):
            assert not item.get_closest_marker("slow"), f"{item.nodeid}: a smoke test must stay in make test-fast"
        elif listed:
            assert item.get_closest_marker("slow"), f"{item.nodeid} is in slow_tests but not marked slow"


def test_modules_go_out_longest_first(request):
    seconds = suite_plan.module_seconds(suite_plan.measured())
    order = list(dict.fromkeys(Path(str(item.fspath)).name for item in request.session.items))
    costs = [seconds.get(m, suite_plan.DEFAULT_SECONDS) for m in order]
    assert costs == sorted(costs, reverse=True)


def test_a_malformed_durations_file_plans_nothing_special():
    assert suite_plan.module_seconds({}) == {}
    assert suite_plan.module_seconds({"modules": ["not", "a", "dict"]}) == {}
    assert suite_plan.slow_tests({"slow_tests": "test_x.py::test_y"}) == frozenset()
    assert suite_plan.slow_tests({"slow_tests": ["test_x.py::test_y", 3]}) == {"test_x.py::test_y"}
