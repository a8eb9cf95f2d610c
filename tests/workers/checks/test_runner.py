"""The check runner protocol (workers/checks/runner.py): one runner per check kind, chosen by the check's
kind, run in a fresh folder over a transport, exactly as the attempt lifecycle runs it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import get_args

import pytest

from workers.checks.runner import RUNNERS, CheckPlace, CheckRunner, run_check, runner_for
from harness.core.checks.spec import CheckSpec, check_kind
from tests.workers.checks.local import HERE, pytest_check, run_here
from workers.transport.local import LocalTransport


def test_every_check_kind_has_one_runner_of_that_kind() -> None:
    kinds = set(get_args(CheckSpec.model_fields["kind"].annotation))
    assert set(RUNNERS) == kinds == {"pytest", "web"}
    for kind, runner in RUNNERS.items():
        assert isinstance(runner, CheckRunner) and runner.kind == kind and runner_for(kind) is runner
    assert {check_kind("test_x.py"), check_kind("page.web.toml")} == kinds


def test_run_check_starts_from_an_empty_folder(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    folder = tmp_path / "folder"
    folder.mkdir()
    # A file an earlier delivery of the same attempt left: a check must not see it.
    (folder / "test_left_over.py").write_text("def test_stale():\n    assert False\n")
    src = tmp_path / "test_fresh.py"
    src.write_text("import pathlib\n\ndef test_alone():\n"
                   "    assert sorted(p.name for p in pathlib.Path(__file__).parent.glob('test_*.py')) == ['test_fresh.py']\n")
    r = run_here(pytest_check(src), ws, 60, folder=folder)
    assert r.status == "passed" and [d.name for d in r.details] == ["test_fresh::test_alone"], r


def test_the_web_runner_runs_the_web_check_command_on_the_host(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    check = CheckSpec(name="site", kind="web", spec={"name": "site", "page": "**/index.html"})
    r = run_here(check, ws, 30, folder=tmp_path / "folder")
    # No page in the workspace: the check says so before any browser starts.
    assert (r.kind, r.name, r.status) == ("web", "site", "failed"), r
    assert r.details[0].name == "page" and "no file in the workspace matches **/index.html" in r.details[0].message
    assert json.loads((tmp_path / "folder" / "spec.json").read_text()) == check.spec


def test_a_web_check_that_does_not_answer_is_an_error(tmp_path: Path) -> None:
    check = CheckSpec(name="site", kind="web", spec={"name": "site"})
    place = CheckPlace(folder=str(tmp_path / "folder"), workspace=str(tmp_path), python=str(tmp_path / "no-python"),
                       timeout_s=30)
    r = run_check(LocalTransport(HERE), check, place)
    assert (r.kind, r.status) == ("web", "error") and r.summary.startswith("the web check did not answer: "), r
    assert "no-python" in r.summary


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_each_runner_is_what_run_check_uses(kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """run_check dispatches by the check's kind through the registry (a replaced runner is the one that runs)."""
    calls: list[tuple[str, str]] = []

    class Recording:
        def __init__(self) -> None:
            self.kind = kind

        def run(self, t, check, at):  # type: ignore[no-untyped-def]
            calls.append((check.name, at.folder))
            return _passed(check)

    monkeypatch.setitem(RUNNERS, kind, Recording())
    check = CheckSpec(name="c", kind=kind)
    place = CheckPlace(folder=str(tmp_path / "f"), workspace=str(tmp_path), python=sys.executable, timeout_s=5)
    assert run_check(LocalTransport(HERE), check, place).status == "passed"
    assert calls == [("c", str(tmp_path / "f"))] and (tmp_path / "f").is_dir()


def _passed(check: CheckSpec):  # type: ignore[no-untyped-def]
    from harness.core.checks.result import CheckResult

    return CheckResult(name=check.name, kind=check.kind, status="passed")


def test_a_check_never_sees_the_hidden_host_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The model's key is in the host's environment (the launcher hands it to the agent); the agent's own test,
    # run by the check, prints the environment into its failure, which checks.json keeps.
    monkeypatch.setenv("QUAL_MODEL_KEY", "sk-check-9d1e")
    monkeypatch.setenv("QUAL_VISIBLE", "visible-77c2")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    src = tmp_path / "test_env.py"
    src.write_text("import os\n\ndef test_env():\n"
                   "    assert False, [os.environ.get(n, 'unset') for n in ('QUAL_VISIBLE', 'QUAL_MODEL_KEY')]\n")
    folder = tmp_path / ".checks"
    place = CheckPlace(folder=str(folder), workspace=str(workspace), python=sys.executable, timeout_s=60,
                       hidden_env=("QUAL_MODEL_KEY",))
    res = run_check(LocalTransport(HERE), pytest_check(src), place)
    shown = res.model_dump_json()
    assert res.status == "failed" and "visible-77c2" in shown, shown[:2000]
    assert "sk-check-9d1e" not in shown and "'visible-77c2', 'unset'" in shown
