"""The agent's tools on a real filesystem and real processes: confinement, exec limits, edit semantics."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.support import alive
from workers.host.agent.tools import TOOL_NAMES, Toolbox, Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("owner's file\n")
    return tmp_path / "ws"


@pytest.fixture
def tools(root: Path) -> Toolbox:
    return Toolbox(Workspace(root), exec_timeout_s=10, output_cap=4096)


def test_the_five_tools_are_offered() -> None:
    assert TOOL_NAMES == ("read", "write", "edit", "ls", "exec")


@pytest.mark.parametrize("path", ["../outside/secret.txt", "a/../../outside/secret.txt", "a/../b.txt", "~/x.txt"])
def test_relative_escapes_and_dotdot_are_refused(tools: Toolbox, root: Path, path: str) -> None:
    for name, arguments in (("read", {"path": path}), ("write", {"path": path, "content": "x"})):
        out = tools.run(name, arguments)
        assert out.is_error and out.details.status == "error"
        assert "workspace" in out.text or "home" in out.text
    assert (root.parent / "outside" / "secret.txt").read_text() == "owner's file\n"
    assert not (root / "b.txt").exists()


def test_absolute_paths_only_inside(tools: Toolbox, root: Path) -> None:
    outside = tools.run("write", {"path": str(root.parent / "outside" / "new.txt"), "content": "x"})
    assert outside.is_error and "outside the workspace" in outside.text
    assert not (root.parent / "outside" / "new.txt").exists()
    inside = tools.run("write", {"path": str(root / "Playground" / "p" / "a.txt"), "content": "hi"})
    assert not inside.is_error and inside.details.path == "Playground/p/a.txt"
    assert (root / "Playground" / "p" / "a.txt").read_text() == "hi"


def test_symlink_escapes_are_refused(tools: Toolbox, root: Path) -> None:
    (root / "link").symlink_to(root.parent / "outside")
    (root / "file-link").symlink_to(root.parent / "outside" / "secret.txt")
    for arguments in ({"path": "link/secret.txt"}, {"path": "file-link"}):
        out = tools.run("read", arguments)
        assert out.is_error and "through a symbolic link" in out.text
    out = tools.run("write", {"path": "link/new.txt", "content": "x"})
    assert out.is_error and not (root.parent / "outside" / "new.txt").exists()
    edit = tools.run("edit", {"path": "file-link", "old_text": "owner", "new_text": "model"})
    assert edit.is_error and (root.parent / "outside" / "secret.txt").read_text() == "owner's file\n"
    assert tools.run("exec", {"command": "pwd", "cwd": "link"}).is_error
    (root / "inner").mkdir()
    (root / "inner-link").symlink_to(root / "inner")
    assert not tools.run("write", {"path": "inner-link/ok.txt", "content": "fine"}).is_error
    assert (root / "inner" / "ok.txt").read_text() == "fine"


def test_read_in_parts(tools: Toolbox, root: Path) -> None:
    (root / "f.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    whole = tools.run("read", {"path": "f.txt"})
    assert whole.text == (root / "f.txt").read_text() and not whole.details.truncated
    part = tools.run("read", {"path": "f.txt", "offset": 3, "limit": "2"})
    assert part.text == "line 3\nline 4\n"
    (root / "bin").write_bytes(b"\x00\x01\x02")
    assert "binary" in tools.run("read", {"path": "bin"}).text
    assert "does not exist" in tools.run("read", {"path": "missing.txt"}).text
    assert "offset must be at least 1" in tools.run("read", {"path": "f.txt", "offset": 0}).text


def test_edit_replaces_exactly_one_occurrence_unless_told(tools: Toolbox, root: Path) -> None:
    target = root / "app.py"
    target.write_text("a = 1\nb = 1\nprint(a)\n")
    once = tools.run("edit", {"path": "app.py", "old_text": "a = 1", "new_text": "a = 2"})
    assert not once.is_error and once.details.replacements == 1
    assert target.read_text() == "a = 2\nb = 1\nprint(a)\n"
    missing = tools.run("edit", {"path": "app.py", "old_text": "c = 1", "new_text": "c = 2"})
    assert missing.is_error and "not found" in missing.text
    twice = tools.run("edit", {"path": "app.py", "old_text": " = ", "new_text": "="})
    assert twice.is_error and "occurs 2 times" in twice.text
    assert target.read_text() == "a = 2\nb = 1\nprint(a)\n"  # nothing changed by a failed edit
    every = tools.run("edit", {"path": "app.py", "old_text": " = ", "new_text": "=", "replace_all": "true"})
    assert every.details.replacements == 2 and target.read_text() == "a=2\nb=1\nprint(a)\n"
    assert tools.run("edit", {"path": "app.py", "old_text": "", "new_text": "x"}).is_error
    assert "does not exist" in tools.run("edit", {"path": "nope.py", "old_text": "a", "new_text": "b"}).text


def test_ls_and_bad_arguments(tools: Toolbox, root: Path) -> None:
    (root / "Playground" / "p").mkdir(parents=True)
    (root / "a.txt").write_text("abc")
    listing = tools.run("ls", {})
    assert listing.text == "Playground/\na.txt  (3 bytes)"
    assert tools.run("ls", {"path": "Playground"}).text == "p/"
    assert "is not a folder" in tools.run("ls", {"path": "a.txt"}).text
    assert "content is required" in tools.run("write", {"path": "x.txt"}).text
    unknown = tools.run("browser", {"url": "http://example.com"})
    assert unknown.is_error and "unknown tool 'browser'" in unknown.text and "exec" in unknown.text


def test_exec_runs_in_the_workspace_and_reports_the_exit_code(tools: Toolbox, root: Path) -> None:
    (root / "sub").mkdir()
    ok = tools.run("exec", {"command": "pwd; echo err >&2", "cwd": "sub"})
    assert not ok.is_error and ok.details.exit_code == 0 and ok.details.status == "ok"
    assert ok.output == f"{root / 'sub'}\nerr\n" and ok.details.cwd == str(root / "sub")
    assert ok.text.endswith("s]") and "[exit code 0," in ok.text
    failed = tools.run("exec", {"command": "exit 3"})
    assert failed.is_error and failed.details.exit_code == 3 and failed.details.status == "failed"
    assert failed.details.test is None


def test_exec_timeout_ends_the_whole_process_group(tools: Toolbox, root: Path) -> None:
    started = time.monotonic()
    out = tools.run("exec", {"command": "sleep 30 & echo $! > child.pid; sleep 30", "timeout_s": 1})
    assert time.monotonic() - started < 5
    assert out.is_error and out.details.timed_out and out.details.exit_code is None
    assert "timed out after 1 s" in out.text
    assert not alive(int((root / "child.pid").read_text()))


def test_exec_leaves_nothing_running(tools: Toolbox, root: Path) -> None:
    started = time.monotonic()
    out = tools.run("exec", {"command": "sleep 30 & echo $! > bg.pid; echo started"})
    assert time.monotonic() - started < 5 and out.output == "started\n"
    assert not alive(int((root / "bg.pid").read_text()))


def test_exec_output_is_capped_keeping_head_and_tail(tools: Toolbox) -> None:
    out = tools.run("exec", {"command": "echo START; head -c 100000 /dev/zero | tr '\\0' x; echo; echo END"})
    assert out.details.truncated and out.details.bytes == 6 + 100001 + 4
    assert out.output is not None and out.output.startswith("START\n") and out.output.endswith("END\n")
    assert "bytes of output omitted" in out.output and len(out.output) < 4096 + 100


def test_exec_records_a_test_verdict(tools: Toolbox, root: Path) -> None:
    (root / "test_x.py").write_text("import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n")
    out = tools.run("exec", {"command": f"{sys.executable} -m unittest"})
    assert out.details.test is not None
    assert out.details.test.to_json() == {"runner": "unittest", "verdict": "passed", "passed": 1, "failed": 0, "skipped": 0}


def test_exec_hides_the_api_key_and_the_harness_path(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_TEST_KEY", "sk-secret")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/opt/harness", "/opt/other"]))
    tools = Toolbox(Workspace(root), hidden_env=("FLEET_TEST_KEY",), harness_root="/opt/harness")
    out = tools.run("exec", {"command": 'echo "key=${FLEET_TEST_KEY:-unset} path=$PYTHONPATH"'})
    assert out.output == "key=unset path=/opt/other\n"


