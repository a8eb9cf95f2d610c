"""Acceptance checks for 30-roman-numerals: roman.py with to_roman(n) and from_roman(s) for 1..3999, ValueError
for anything else (0, 4000, "IIII", "hello"), lower case accepted, with tests.
Run by the harness on a copy of the workspace (docs/checks-pytest.md).

roman.py is found anywhere in the workspace (the one under Playground/ first) and imported. Every number
1..3999 must survive the round trip, the canonical (subtractive) form is required, and non-canonical numerals
are rejected.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

SKIP_DIRS = {".git", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages"}
KNOWN = {1: "I", 4: "IV", 9: "IX", 14: "XIV", 40: "XL", 90: "XC", 400: "CD", 944: "CMXLIV", 1994: "MCMXCIV",
         2024: "MMXXIV", 3999: "MMMCMXCIX"}


def find_module(workspace: Path) -> Path:
    found = []
    for dirpath, dirnames, filenames in os.walk(workspace):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if "roman.py" in filenames:
            found.append(Path(dirpath) / "roman.py")
    assert found, "no roman.py in the workspace (the prompt names the module)"
    return sorted(found, key=lambda p: ("Playground" not in p.relative_to(workspace).parts, len(p.parts), str(p)))[0]


@pytest.fixture
def roman(workspace: Path):
    path = find_module(workspace)
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("fleet_check_roman", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(path.parent))


def test_known_values(roman):
    for n, s in KNOWN.items():
        assert roman.to_roman(n) == s, f"to_roman({n}) is {roman.to_roman(n)!r}, expected {s!r}"
        assert roman.from_roman(s) == n, f"from_roman({s!r}) is {roman.from_roman(s)!r}, expected {n}"


def test_round_trip_1_to_3999(roman):
    bad = [n for n in range(1, 4000) if roman.from_roman(roman.to_roman(n)) != n]
    assert not bad, f"from_roman(to_roman(n)) != n for {len(bad)} numbers, first {bad[:5]}"


def test_lower_case_is_accepted(roman):
    assert roman.from_roman("mcmxciv") == 1994


@pytest.mark.parametrize("n", [0, -1, 4000, 10000])
def test_to_roman_out_of_range(roman, n):
    with pytest.raises(ValueError):
        roman.to_roman(n)


@pytest.mark.parametrize("s", ["", "IIII", "VV", "IC", "MMMM", "hello", "XIIV", "IL"])
def test_from_roman_rejects_invalid(roman, s):
    try:
        got = roman.from_roman(s)
    except ValueError:
        return
    pytest.fail(f"from_roman({s!r}) returned {got!r} instead of raising ValueError")


def test_the_agent_wrote_tests(workspace: Path):
    project = find_module(workspace).parent
    tests = [p for p in project.rglob("*.py")
             if (p.name.startswith("test_") or p.name.endswith("_test.py")) and "def test" in p.read_text(errors="replace")]
    assert tests, f"no test file with a test in it next to roman.py ({project.relative_to(workspace)})"
