"""Acceptance checks as pytest files (workers/checks/pytest_files.py), run as the attempt lifecycle runs
them (workers.checks.runner.run_check over the local transport), with real pytest subprocesses: statuses
and messages, the time limit, the `workspace` fixture (a copy), isolation from the agent's own tests, and
the bundled photo renamer check on the demo script's workspace."""

from __future__ import annotations

import json
import os
import textwrap
import time
import tomllib
from pathlib import Path

import pytest

from workers.checks.pytest_files import build_check_command, parse_junit, plugin_source, staged_files
from harness.core.checks.result import CheckResult
from workers.checks.runner import CheckPlace, run_check
from tests.workers.checks.local import HERE, pytest_check, run_here
from workers.transport.local import LocalTransport
from tests.support import REPO

PHOTO_ITEM = REPO / "prompts" / "open" / "07-photo-renamer"
PHOTO_CHECK = PHOTO_ITEM / "checks" / "test_photo_renamer.py"


def write_check(tmp_path: Path, source: str, name: str = "test_check.py") -> Path:
    d = tmp_path / "src-checks"
    d.mkdir(exist_ok=True)
    f = d / name
    f.write_text(textwrap.dedent(source))
    return f


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "marker.txt").write_text("hello")
    return w


def run(ws: Path, *checks: Path, timeout_s: int = 60, values: dict[str, str] | None = None) -> CheckResult:
    return run_here(pytest_check(*checks, values=values), ws, timeout_s)


def test_passing_check(tmp_path, ws):
    f = write_check(tmp_path, """
        def test_one(workspace):
            assert (workspace / "marker.txt").read_text() == "hello"

        def test_two():
            assert 1 + 1 == 2
    """)
    r = run(ws, f)
    assert r.status == "passed", r
    assert r.name == "item-checks" and r.kind == "pytest" and r.schema_version == 1
    assert [(d.name, d.status) for d in r.details] == [("test_check::test_one", "passed"), ("test_check::test_two", "passed")]
    assert r.summary == "2 passed" and r.duration_s > 0


def test_failing_check_keeps_the_message(tmp_path, ws):
    f = write_check(tmp_path, """
        def test_ok():
            pass

        def test_bad(workspace):
            assert (workspace / "marker.txt").read_text() == "bye", "marker should say bye"
    """)
    r = run(ws, f)
    assert r.status == "failed"
    bad = {d.name: d for d in r.details}["test_check::test_bad"]
    assert bad.status == "failed" and "marker should say bye" in bad.message
    assert "1 failed" in r.summary and "test_check::test_bad" in r.summary and "marker should say bye" in r.summary


def test_fixture_error_fails_the_check(tmp_path, ws):
    f = write_check(tmp_path, """
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("setup exploded")

        def test_uses_broken(broken):
            pass
    """)
    r = run(ws, f)
    assert r.status == "failed"
    assert r.details[0].status == "error" and "setup" in r.details[0].message


def test_skipped_is_untested(tmp_path, ws):
    f = write_check(tmp_path, """
        import pytest

        def test_ok():
            pass

        def test_needs_gpu():
            pytest.skip("no GPU here")
    """)
    r = run(ws, f)
    assert [(d.status) for d in r.details] == ["passed", "untested"]
    assert "no GPU here" in r.details[1].message
    assert r.status == "untested"  # untested never counts as passed


def test_time_limit_kills_the_process_group(tmp_path, ws):
    pid_file = tmp_path / "child.pid"
    f = write_check(tmp_path, f"""
        import subprocess, time

        def test_hangs():
            child = subprocess.Popen(["sleep", "300"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
            time.sleep(300)
    """)
    started = time.monotonic()
    r = run(ws, f, timeout_s=6)  # long enough for pytest to start and the test to begin, even on a busy box
    assert time.monotonic() - started < 40
    assert r.status == "error" and r.summary == "timed out after 6 s" and r.details == []
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), "the check's child process survived the time limit"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")  # a zombie is dead, only not yet reaped


def test_no_tests_is_an_error(tmp_path, ws):
    f = write_check(tmp_path, "X = 1\n", name="test_empty.py")
    r = run(ws, f)
    assert r.status == "error" and "no tests ran" in r.summary


def test_bad_or_missing_junit_is_an_error():
    for xml, words in [(None, "no JUnit XML"), (b"", "no JUnit XML"), (b"<testsuites><testsuite>", "unparsable"),
                       (b"<html/>", "unparsable"), (b"<testsuites><testsuite tests='0'/></testsuites>", "no tests ran")]:
        r = parse_junit(xml, "c", 1.5)
        assert r.status == "error" and words in r.summary, (xml, r)
        assert r.duration_s == 1.5 and r.details == []


def test_parse_junit_statuses_and_timeout_flag():
    xml = b"""<?xml version="1.0"?><testsuites><testsuite name="pytest">
      <testcase classname="test_a" name="test_ok" time="0.1"/>
      <testcase classname="test_a.TestX" name="test_bad" time="0.1"><failure message="assert 1 == 2">long trace</failure></testcase>
      <testcase classname="" name="test_b" time="0"><error message="collection failure">trace</error></testcase>
      <testcase classname="test_a" name="test_skip" time="0"><skipped type="pytest.skip" message="later">x</skipped></testcase>
    </testsuite></testsuites>"""
    r = parse_junit(xml, "c", 2.0)
    assert r.status == "failed"
    assert [(d.name, d.status, d.message) for d in r.details] == [
        ("test_a::test_ok", "passed", ""),
        ("test_a.TestX::test_bad", "failed", "assert 1 == 2"),
        ("test_b", "error", "collection failure"),
        ("test_a::test_skip", "untested", "later"),
    ]
    assert r.summary.startswith("1 passed, 1 failed, 1 error, 1 untested; first: test_a.TestX::test_bad: assert 1 == 2")
    t = parse_junit(xml, "c", 30.2, timed_out=True, timeout_s=30)
    assert t.status == "error" and t.summary == "timed out after 30 s"


def test_workspace_fixture_is_a_fresh_copy_of_the_workspace(tmp_path, ws):
    (ws / "sub").mkdir()
    (ws / "sub" / "data.txt").write_text("x")
    f = write_check(tmp_path, """
        import os
        from pathlib import Path

        def test_first(workspace):
            assert (workspace / "sub" / "data.txt").read_text() == "x"
            assert workspace.resolve() != Path(os.environ["FLEET_WORKSPACE"]).resolve()
            assert Path(os.environ["FLEET_WORKSPACE"], "marker.txt").read_text() == "hello"
            (workspace / "marker.txt").write_text("changed by a check")
            (workspace / "sub" / "data.txt").unlink()

        def test_second_gets_its_own_copy(workspace):
            assert (workspace / "marker.txt").read_text() == "hello"
            assert (workspace / "sub" / "data.txt").exists()
    """)
    r = run(ws, f)
    assert r.status == "passed", r
    assert (ws / "marker.txt").read_text() == "hello" and (ws / "sub" / "data.txt").read_text() == "x"
    assert sorted(p.name for p in ws.iterdir()) == ["marker.txt", "sub"]


def test_agent_tests_and_config_in_the_workspace_are_not_collected(tmp_path, ws):
    (ws / "test_agent.py").write_text("def test_agent_fails():\n    assert False, 'agent test collected'\n")
    (ws / "conftest.py").write_text("raise RuntimeError('agent conftest loaded')\n")
    (ws / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option\n")
    (ws / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '--no-such-option'\n")
    (ws / "tests").mkdir()
    (ws / "tests" / "test_more.py").write_text("def test_more():\n    assert False\n")
    f = write_check(tmp_path, """
        def test_sees_agent_files(workspace):
            assert (workspace / "test_agent.py").exists()
    """)
    r = run(ws, f)
    assert r.status == "passed", r
    assert [d.name for d in r.details] == ["test_check::test_sees_agent_files"]


def test_a_check_of_two_files_runs_both(tmp_path, ws):
    a = write_check(tmp_path, "def test_a(workspace):\n    assert (workspace / 'marker.txt').exists()\n", "test_a.py")
    b = write_check(tmp_path, "def test_b():\n    assert False, 'the second file ran'\n", "test_b.py")
    r = run(ws, a, b)
    assert [(d.name, d.status) for d in r.details] == [("test_a::test_a", "passed"), ("test_b::test_b", "failed")], r
    assert r.status == "failed" and "the second file ran" in r.details[1].message


def test_command_and_staging(tmp_path):
    files = staged_files({"test_check.py": "def test_x():\n    pass\n"}, {"marker": "M"})
    assert files["conftest.py"] == plugin_source() and "def workspace" in plugin_source()
    assert set(files) == {"conftest.py", "pytest.ini", "values.json", "test_check.py"}
    assert json.loads(files["values.json"]) == {"marker": "M"}
    stage = str(tmp_path / "stage")
    staged = [stage + "/test_check.py"]
    argv = build_check_command("/usr/bin/python3", staged, "/w/ws", "/tmp/j.xml", 30)
    assert argv[:2] == ["env", "FLEET_WORKSPACE=/w/ws"] and "timeout" in argv and "30s" in argv
    i = argv.index("/usr/bin/python3")
    assert argv[i:i + 3] == ["/usr/bin/python3", "-m", "pytest"]
    for want in (["-p", "no:cacheprovider"], ["--rootdir", stage], ["-c", stage + "/pytest.ini"]):
        assert any(argv[k:k + 2] == want for k in range(len(argv))), want
    assert "--junitxml=/tmp/j.xml" in argv and "-q" in argv and argv[-1] == staged[0]
    with pytest.raises(ValueError):
        build_check_command("python3", [], "/w", "/j.xml", 5)
    with pytest.raises(ValueError):
        build_check_command("python3", ["/a/test_x.py", "/b/test_y.py"], "/w", "/j.xml", 5)


def test_a_check_without_a_report_says_what_the_command_said(tmp_path, ws):
    """A host whose Python cannot be started writes no JUnit XML: the summary keeps the shell's words."""
    check = pytest_check(write_check(tmp_path, "def test_x():\n    pass\n"))
    place = CheckPlace(folder=str(tmp_path / "folder"), workspace=str(ws), python=str(tmp_path / "no-python"),
                       timeout_s=30)
    r = run_check(LocalTransport(HERE), check, place)
    assert r.status == "error" and r.summary.startswith("no JUnit XML (pytest did not write a report) -- pytest said: ")
    assert "no-python" in r.summary, r.summary


# --- the bundled photo renamer check ---

def demo_workspace(root: Path) -> Path:
    """The files the scripted demo model writes (its `write` tool calls in model.toml)."""
    script = tomllib.loads((PHOTO_ITEM / "model.toml").read_text())
    writes = [c["arguments"] for t in script["turns"] for c in t.get("tool_calls", []) if c["name"] == "write"]
    assert len(writes) == 2
    for w in writes:
        p = root / w["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(w["content"])
    return root


def test_photo_renamer_check_passes_on_the_demo_workspace(tmp_path):
    ws = demo_workspace(tmp_path / "ws")
    r = run(ws, PHOTO_CHECK, timeout_s=120)
    assert r.status == "passed", r
    assert {d.name.split("::")[1] for d in r.details} == {
        "test_renamer_renames_photos_by_date_taken_and_loses_nothing", "test_the_agent_wrote_tests"}
    assert sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file()) == [
        "Playground/photo-renamer/rename_photos.py", "Playground/photo-renamer/test_rename_photos.py"]


def test_photo_renamer_check_fails_when_the_renamer_deletes_files(tmp_path):
    ws = demo_workspace(tmp_path / "ws")
    script = ws / "Playground" / "photo-renamer" / "rename_photos.py"
    text = script.read_text()
    # A renamer that renames by date, then "cleans up" the photos it could not date from EXIF.
    bad = text.replace(
        "            os.rename(os.path.join(folder, old), os.path.join(folder, new))",
        "            os.rename(os.path.join(folder, old), os.path.join(folder, new))\n"
        "    for name in os.listdir(folder):\n"
        "        if not name[:1].isdigit():\n"
        "            os.remove(os.path.join(folder, name))",
    )
    assert bad != text
    script.write_text(bad)
    r = run(ws, PHOTO_CHECK, timeout_s=120)
    assert r.status == "failed", r
    d = {x.name.split("::")[1]: x for x in r.details}
    assert d["test_renamer_renames_photos_by_date_taken_and_loses_nothing"].status == "failed"
    assert "lost files" in d["test_renamer_renames_photos_by_date_taken_and_loses_nothing"].message
    assert d["test_the_agent_wrote_tests"].status == "passed"


def test_photo_renamer_check_fails_without_dates_or_tests(tmp_path):
    ws = tmp_path / "ws"
    proj = ws / "Playground" / "renamer"
    proj.mkdir(parents=True)
    # Renames, but to a counter: nothing lost, no dates.
    (proj / "rename.py").write_text(textwrap.dedent("""
        import os, sys
        folder = sys.argv[1]
        for i, name in enumerate(sorted(os.listdir(folder))):
            os.rename(os.path.join(folder, name), os.path.join(folder, f"photo_{i}" + os.path.splitext(name)[1]))
    """))
    r = run(ws, PHOTO_CHECK, timeout_s=120)
    assert r.status == "failed"
    assert all(d.status == "failed" for d in r.details), r
    assert "no script renamed the photos" in r.details[0].message or "no script renamed the photos" in r.details[1].message


def test_values_fixture_gives_the_runs_values(tmp_path):
    ws = tmp_path / "ws"
    (ws / "fleet-qualification-0a1b2c3d4e5f").mkdir(parents=True)
    (ws / "fleet-qualification-0a1b2c3d4e5f" / "result.json").write_text('{"marker": "FLEET-00ff00ff00"}')
    check = write_check(tmp_path, (
        "import json\n"
        "def test_marker(workspace, values):\n"
        "    data = json.loads((workspace / values['project'] / 'result.json').read_text())\n"
        "    assert data['marker'] == values['marker']\n"
    ))
    good = run(ws, check, values={"project": "fleet-qualification-0a1b2c3d4e5f", "marker": "FLEET-00ff00ff00"})
    assert good.status == "passed", good
    bad = run(ws, check, values={"project": "fleet-qualification-0a1b2c3d4e5f", "marker": "FLEET-1111111111"})
    assert bad.status == "failed" and "FLEET-1111111111" in bad.details[0].message, bad
    none = run(ws, check)
    assert none.status == "failed" and "KeyError" in none.details[0].message, none
