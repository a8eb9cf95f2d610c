"""The path-safety rules (harness/core/paths.py): one table of hostile names through every rule; the rules agree
with the checks they replaced where they were meant to be the same; the launcher's and the host cleaner's own
copies (they run on the host's bare Python and cannot import the rules) agree with them; and no new ad-hoc ``..``
check appears outside the rules."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.paths import (climbs, item_path_problem, name_problem, names_home, real_inside, relpath_problem,
                                under, within)
from tests.support import REPO
from workers.host import clean as host_clean
from workers.host import launcher
from workers.host.launcher import packer, reaping

LONG = "L" * 300
HOSTILE: list[tuple[str, bool, bool, bool, bool]] = [
    # name                one name  stored path  item path  a file may be named so (one part, on a POSIX disk)
    ("../x",               False,    False,       False,     False),
    ("/etc/passwd",        False,    False,       False,     False),
    ("a/../../b",          False,    False,       False,     False),
    ("..",                 False,    False,       False,     False),
    ("a\\b",               False,    True,        False,     True),
    ("\\etc\\passwd",      False,    True,        False,     True),
    ("\x00",               False,    False,       True,      False),
    ("a\x00b",             False,    False,       True,      False),
    (".",                  False,    False,       True,      False),
    ("",                   False,    False,       True,      False),
    ("a//b",               False,    False,       True,      False),
    ("./a",                False,    False,       True,      False),
    ("a/.",                False,    False,       True,      False),
    ("a/",                 False,    False,       True,      False),
    ("~",                  True,     True,        True,      True),
    ("~/x",                False,    True,        True,      False),
    ("...",                True,     True,        True,      True),
    ("..a",                True,     True,        True,      True),
    ("a..",                True,     True,        True,      True),
    (" ",                  True,     True,        True,      True),
    ("x\ny",               True,     True,        True,      True),
    ("\udcff",             True,     True,        True,      True),   # a byte that is not UTF-8, as the host read it
    ("L" * 255,            True,     True,        True,      True),
    (LONG,                 True,     True,        True,      False),  # over NAME_MAX: the store renames it
    ("workspace/" + LONG,  False,    True,        True,      False),
    ("0123abcd",           True,     True,        True,      True),
]
NAMES = [row[0] for row in HOSTILE]


@pytest.mark.parametrize("name, one_name, stored, item, _", HOSTILE, ids=[repr(n)[:24] for n in NAMES])
def test_each_rule_on_the_hostile_names(name: str, one_name: bool, stored: bool, item: bool, _: bool) -> None:
    assert (name_problem(name) == "") is one_name
    assert (relpath_problem(name) == "") is stored
    assert (item_path_problem(name) == "") is item
    assert climbs(name) is (".." in name.split("/"))


def test_the_one_name_rule_says_why_in_the_words_of_a_crafted_store() -> None:
    assert [name_problem(n) for n in ("", "..", "a/b", "a\\b", "a\x00")] == [
        "is empty", "'..' names a folder above or at itself", "'a/b' holds a path separator",
        "'a\\\\b' holds a path separator", "'a\\x00' holds a NUL byte"]


_PATHS = st.text(alphabet=st.sampled_from(["a", "b", ".", "/", "\\", "~", "\x00", " "]), max_size=12)


@given(_PATHS, _PATHS)
def test_the_rules_are_the_checks_they_replaced(path: str, other: str) -> None:
    # The dashboard's stored file in a URL (harness/dashboard/cell.py, before).
    parts = path.split("/")
    assert (relpath_problem(path) != "") == (not path or path.startswith("/") or "\x00" in path
                                             or any(p in ("", ".", "..") for p in parts))
    # The catalog's check file names (harness/core/catalog.py, before).
    assert (item_path_problem(path) != "") == (path.startswith(("/", "\\")) or "\\" in path
                                               or ".." in PurePosixPath(path).parts)
    # The agent's tools and the web check's patterns: a '..' part of the path as pathlib reads it.
    if "\x00" not in path:
        assert climbs(path) == (".." in Path(path).parts)
    # The guard's receipt: a test command's absolute target inside its folder, by its text.
    assert under(path, other) == (path == other or path.startswith(other.rstrip("/") + "/"))
    # The store's, the web check's and the agent's containment of resolved paths.
    a, b = PurePosixPath("/" + path.replace("\x00", "")), PurePosixPath("/" + other.replace("\x00", ""))
    assert within(a, b) == a.is_relative_to(b)


def test_where_a_rule_is_stricter_than_the_check_it_replaced() -> None:
    """A bundle's member, an artifact's name and an attempt's cell id were read as pathlib reads them (an empty or
    '.' part dropped); a stored path is now exactly what is kept and read back, as the dashboard always read it."""
    for name in ("a//b", "./a", "a/.", "a/"):
        assert PurePosixPath(name).parts and ".." not in PurePosixPath(name).parts  # taken before
        assert relpath_problem(name)  # refused now
    assert name_problem("a\\b")  # a sweep id with a backslash: taken before, refused now as every other stored id


def test_a_workspace_path_may_pass_through_a_link_if_it_ends_inside(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(root / "sub", root / "in")
    os.symlink(tmp_path / "outside", root / "out")
    real = root.resolve()
    assert real_inside(root / "in" / "f", real) == (real / "sub" / "f", True)
    assert real_inside(root / "out" / "f", real) == ((tmp_path / "outside" / "f").resolve(), False)
    assert real_inside(root / "sub" / ".." / ".." / "x", real)[1] is False
    assert real_inside(root, real)[1] is True


# -- the host's own copies -----------------------------------------------------------------------------------------


def test_the_launcher_forgets_no_delivery_folder_by_a_name_the_one_name_rule_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's one path check of a request (``_forget``: only ``fleet/deliveries/TOKEN``) is stricter than
    the one-name rule, never looser. Nothing is removed: the removal is recorded instead."""
    removed: list[str] = []
    monkeypatch.setattr(reaping, "_rmtree", removed.append)
    fleet = str(tmp_path / ".fleet")
    forgotten = []
    for name in NAMES:
        removed.clear()
        reaping._forget({"fleet": fleet, "forget": [reaping.delivery_dir(fleet, name)], "token": "f" * 24})
        if removed:
            forgotten.append(name)
    assert [n for n in forgotten if name_problem(n)] == []
    assert forgotten == ["0123abcd"]  # a token's folder is forgotten: the check is not merely refusing everything


def test_every_member_the_launcher_packs_is_a_stored_path(tmp_path: Path) -> None:
    """The launcher writes a bundle's member names from the folder's own entries; the worker takes each only if it
    is a stored path (``safe_member``). Every name a file may have must pass, or a real file would be refused as
    hostile."""
    base = tmp_path / "attempt-1"
    names = [n for n, *_, on_disk in HOSTILE if on_disk]
    for i, name in enumerate(names):
        folder = base / "workspace" / f"d{i}"
        folder.mkdir(parents=True)
        (folder / name).write_bytes(b"x")
        (base / "workspace" / name).mkdir()
        (base / "workspace" / name / "f").write_bytes(b"y")
    out = tmp_path / "out"
    out.mkdir()
    assert packer.pack(str(base), str(out), ["workspace/d0/"])
    frames = launcher.read_bundle((out / launcher.BUNDLE).read_bytes(), 1 << 30)
    members = [name for kind, name, _ in frames if kind != launcher.FILE]
    assert len(members) == 2 * len(names) + 1
    assert [m for m in members if relpath_problem(m)] == []


def test_the_cleaner_keeps_an_attempt_folder_exactly_when_a_running_root_is_under_it(tmp_path: Path) -> None:
    """The host cleaner's own containment check (a running delivery's root is the attempt folder or below it, by
    text, once normalized) is ``under``."""
    work = tmp_path / "work"
    attempts = [str(work / "runs" / "s" / "h" / f"attempt-{k}") for k in (1, 10, 2)]
    for a in attempts:
        os.makedirs(a)
        os.utime(a, (1, 1))
    first = attempts[0]
    roots = [first, first + "/", first + "/workspace", first + "0", first + "/../attempt-2", first.replace("/s/", "//s/"),
             first + "/..", "../x", "/etc/passwd", "a\\b", ".", "~", first + "\\x"]
    running = work / ".fleet" / "running"
    running.mkdir(parents=True)
    for root in roots:
        (running / "d.json").write_text(json.dumps({"root": root}))
        answer = host_clean.clean({"workdir": str(work), "keep_release": "r", "keep_attempts_days": 0, "dry_run": True})
        kept = {k["path"] for k in answer["kept"] if k["why"] == "its attempt is running"}
        assert kept == {a for a in attempts if under(os.path.normpath(root), a)}, root


# -- no check of its own -------------------------------------------------------------------------------------------

_OWN_COPIES = ("harness/core/paths.py", "workers/host/clean.py", "workers/host/launcher/")


def _dotdot_checks(tree: ast.AST) -> list[int]:
    """Lines that test for a '..' by hand: ``".." in x``, ``".." not in x``, ``x in (".", "..")``, ``x == ".."``,
    ``x.startswith("../")``."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("startswith", "endswith") and node.args
                and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).strip("/") == ".."):
            lines.append(node.lineno)
        if not isinstance(node, ast.Compare):
            continue
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.Eq, ast.NotEq)) and any(
                    isinstance(side, ast.Constant) and side.value == ".." for side in (left, right)):
                lines.append(node.lineno)
            if isinstance(op, (ast.In, ast.NotIn)):
                literal = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else []
                if (isinstance(left, ast.Constant) and left.value == "..") or any(
                        isinstance(e, ast.Constant) and e.value == ".." for e in literal):
                    lines.append(node.lineno)
            left = right
    return lines


def test_no_path_check_of_its_own_outside_the_rules() -> None:
    """A ``..`` test written by hand is a path rule written twice: use harness/core/paths.py. The launcher and the
    host cleaner keep their own (the host's bare Python cannot import it); the tests above hold them to it."""
    found = {}
    for top in ("harness", "workers"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(_OWN_COPIES):
                continue
            lines = _dotdot_checks(ast.parse(path.read_text(encoding="utf-8")))
            if lines:
                found[rel] = lines
    assert found == {}


def test_the_scan_sees_each_form_of_the_check() -> None:
    code = ('a = ".." in p\nb = ".." not in p.parts\nc = x in (".", "..")\nd = x in {"", ".."}\ne = x == ".."\n'
            'f = p.startswith("../")\ng = x != "x"\n')
    assert _dotdot_checks(ast.parse(code)) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(("path", "shown"), [("/ws/a.py", "a.py"), ("/ws/sub/../b.py", "b.py"), ("/ws", "."),
                                             ("/wsx/a.py", None), ("/etc/passwd", None), ("/ws/../ws2/a", None)])
def test_an_absolute_path_is_shown_from_the_workspace_only_inside_it(path: str, shown: str | None) -> None:
    from harness.core.paths import relative_inside

    assert relative_inside(path, "/ws") == shown
