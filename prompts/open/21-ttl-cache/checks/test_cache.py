"""Acceptance checks for 21-ttl-cache: a ttl_cache.py module with TTLCache(maxsize, ttl, clock=time.monotonic),
put/get/len/in, least-recently-used eviction (a get counts as a use) and expiry after ttl seconds, with tests.
Run by the harness on a copy of the workspace (docs/checks-pytest.md).

The module is found anywhere in the workspace (the one under Playground/ first) and imported; time is a fake
clock passed as ``clock``, so nothing sleeps. Expiry is checked half a second either side of ttl, so either
reading of "older than ttl" at exactly ttl is fine.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import pytest

SKIP_DIRS = {".git", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages"}


def find_module(workspace: Path) -> Path:
    found = []
    for dirpath, dirnames, filenames in os.walk(workspace):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if "ttl_cache.py" in filenames:
            found.append(Path(dirpath) / "ttl_cache.py")
    assert found, "no ttl_cache.py in the workspace (the prompt names the module)"
    return sorted(found, key=lambda p: ("Playground" not in p.relative_to(workspace).parts, len(p.parts), str(p)))[0]


@pytest.fixture
def TTLCache(workspace: Path):
    path = find_module(workspace)
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("fleet_check_ttl_cache", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert hasattr(module, "TTLCache"), f"{path.relative_to(workspace)} has no TTLCache"
        yield module.TTLCache
    finally:
        sys.path.remove(str(path.parent))


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def test_put_get_default_len_and_in(TTLCache):
    cache = TTLCache(4, 60, clock=Clock())
    assert cache.get("a") is None
    assert cache.get("a", "dflt") == "dflt"
    assert "a" not in cache and len(cache) == 0
    cache.put("a", 1)
    cache.put("b", [2])
    assert cache.get("a") == 1 and cache.get("b") == [2]
    assert "a" in cache and len(cache) == 2
    cache.put("a", 10)
    assert cache.get("a") == 10, "put of an existing key must replace its value"
    assert len(cache) == 2, f"put of an existing key must not add an entry: len is {len(cache)}, expected 2"


def test_stored_falsy_values_are_returned(TTLCache):
    cache = TTLCache(4, 60, clock=Clock())
    cache.put("zero", 0)
    cache.put("none", None)
    assert cache.get("zero", "dflt") == 0
    assert "none" in cache


def test_evicts_the_oldest_when_full(TTLCache):
    cache = TTLCache(3, 60, clock=Clock())
    for k in "abcd":
        cache.put(k, k)
    kept = [k for k in "abcd" if k in cache]
    assert kept == ["b", "c", "d"], f"after putting a, b, c, d into maxsize 3, expected b, c, d kept, found {kept}"


def test_get_counts_as_a_use(TTLCache):
    cache = TTLCache(3, 60, clock=Clock())
    for k in "abc":
        cache.put(k, k)
    assert cache.get("a") == "a"
    cache.put("d", "d")
    kept = [k for k in "abcd" if k in cache]
    assert kept == ["a", "c", "d"], f"a was read after b was put, so b should be evicted; kept {kept}"
    assert len(cache) == 3


def test_maxsize_one(TTLCache):
    cache = TTLCache(1, 60, clock=Clock())
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") is None and cache.get("b") == 2 and len(cache) == 1


def test_entries_expire_after_ttl(TTLCache):
    clock = Clock()
    cache = TTLCache(4, 10, clock=clock)
    cache.put("a", 1)
    clock.now += 9.5
    assert cache.get("a") == 1, "an entry 9.5 s old with ttl 10 must still be there"
    cache.put("b", 2)
    clock.now += 1.0
    assert cache.get("a", "gone") == "gone", "an entry 10.5 s old with ttl 10 must be gone"
    assert "a" not in cache
    assert len(cache) == 1, f"len must count only live entries: expected 1 (b), got {len(cache)}"
    clock.now += 10
    assert "b" not in cache and len(cache) == 0


def test_a_get_does_not_extend_the_ttl_but_a_put_does(TTLCache):
    clock = Clock()
    cache = TTLCache(4, 10, clock=clock)
    cache.put("a", 1)
    cache.put("b", 1)
    clock.now += 8
    cache.get("a")
    cache.put("b", 2)
    clock.now += 3
    assert "a" not in cache, "an entry is kept ttl seconds after it was put, reading it does not renew it"
    assert cache.get("b") == 2, "putting a key again starts its ttl over"


def test_default_clock_works(TTLCache):
    cache = TTLCache(2, 60)
    cache.put("a", 1)
    assert cache.get("a") == 1


def test_standard_library_only(workspace: Path):
    path = find_module(workspace)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    local = {p.stem for p in path.parent.glob("*.py")}
    outside = sorted(n for n in names if n not in sys.stdlib_module_names and n not in local and n != "__future__")
    assert not outside, f"ttl_cache.py imports {outside}, outside the standard library"


def test_the_agent_wrote_tests(workspace: Path):
    project = find_module(workspace).parent
    tests = [p for p in project.rglob("*.py")
             if (p.name.startswith("test_") or p.name.endswith("_test.py")) and "def test" in p.read_text(errors="replace")]
    assert tests, f"no test file with a test in it next to ttl_cache.py ({project.relative_to(workspace)})"
