"""The suite's measured times from a pytest JUnit XML file (pytest --junitxml=FILE): per module, per kind, slowest tests.

    python scripts/test_durations.py JUNIT_XML [--write] [--top N]

Prints the time per kind (engine / server / browser / ray: tests/suite_plan.py writes each test's kind as a JUnit
property; "?" for a file written without it), the slowest modules and the slowest N tests. --write stores the per-module seconds in tests/data/test_durations.json, which
tests/suite_plan.py reads to hand the longest modules out first. The times are JUnit's per test: setup + call +
teardown, so a module's server or browser start-up is in its first test's time. --write also lists the tests that
took SLOW_SECONDS or more ("slow_tests"): tests/suite_plan.py marks them `slow`, which `make test-fast` leaves out.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "test_durations.json"
# a test this slow (setup + call + teardown) is left out of `make test-fast` (the edit loop's budget: 3 minutes on
# two cores for the engine's tests and the server smoke test); `make test` runs it
SLOW_SECONDS = 1.5


def read(junit: Path) -> list[tuple[str, str, float, str]]:
    """(module file name, test name, seconds, kind) for every test case."""
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname = case.get("classname") or ""
        module = classname.split(".")[1] if classname.startswith("tests.") else classname.split(".")[0]
        kind = next((p.get("value") for p in case.iter("property") if p.get("name") == "kind"), "?")
        cases.append((module + ".py", case.get("name") or "", float(case.get("time") or 0.0), kind))
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path)
    ap.add_argument("--write", action="store_true", help=f"store the per-module seconds in {OUT.relative_to(REPO)}")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)
    if not args.junit.is_file():
        print(f"no such file: {args.junit}", file=sys.stderr)
        return 2
    cases = read(args.junit)
    modules: dict[str, float] = defaultdict(float)
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for module, _, seconds, kind in cases:
        modules[module] += seconds
        kinds[kind][0] += 1
        kinds[kind][1] += seconds
    total = sum(modules.values())
    print(f"{len(cases)} tests, {total:.0f} s summed over tests ({len(modules)} modules)")
    for kind, (count, seconds) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind:8s} {count:5d} tests {seconds:8.0f} s")
    ranked = sorted(modules.items(), key=lambda kv: -kv[1])
    print("\nslowest modules:")
    for module, seconds in ranked[: args.top]:
        print(f"  {seconds:8.1f} s  {module}")
    print(f"\nslowest {args.top} tests (setup + call + teardown):")
    for module, name, seconds, _ in sorted(cases, key=lambda c: -c[2])[: args.top]:
        print(f"  {seconds:8.1f} s  {module}::{name}")
    if args.write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        slow = sorted(f"{module}::{name}" for module, name, seconds, _ in cases if seconds >= SLOW_SECONDS)
        OUT.write_text(json.dumps({"source": "scripts/test_durations.py (JUnit XML of a full run)",
                                   "modules": {m: round(s, 1) for m, s in sorted(modules.items())},
                                   "slow_seconds": SLOW_SECONDS, "slow_tests": slow},
                                  indent=1) + "\n")
        print(f"\nwrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
