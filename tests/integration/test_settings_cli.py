"""sweep, rerun and resume share one path (harness/cli/sweep_cmd.py ``_coordinate``): each logs the resolved settings once,
redacted, to stderr with --verbose and to --log-file, and nowhere without them; --json stays machine-readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_failure_model import _setup
from tests.integration.fleetkit import run_embedded

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-pw"


def _settings_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ": settings: " in line]


def test_sweep_rerun_and_resume_log_their_settings_only_when_asked(tmp_path: Path) -> None:
    inv, cat = _setup(tmp_path)
    # Read by nobody on the embedded default, but shown: its password must not be.
    env = {"FLEET_RETRY_BACKOFF": "0.1", "FLEET_RESULT_BACKEND": f"redis://:{SECRET}@127.0.0.1:1/0"}
    log = tmp_path / "logs" / "fleet.log"
    base = ["-i", str(inv), "--prompts", str(cat), "--hosts", "one", "--agents", "echo", "--json"]

    quiet = run_embedded(["sweep", *base], tmp_path, **env)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert _settings_lines(quiet.stderr) == []

    loud = run_embedded(["sweep", *base, "--verbose", "--log-file", str(log)], tmp_path, **env)
    assert loud.returncode == 0, loud.stderr[-2000:]
    (line,) = _settings_lines(loud.stderr)
    assert line.startswith("fleet sweep: settings: runs=runs, ")
    assert "retry_backoff_s=0.1 (env FLEET_RETRY_BACKOFF)" in line and "result_backend=redis://:***@127.0.0.1:1/0" in line
    assert "start_timeout_s=30" in line  # the embedded coordinator is its own worker
    sweep = json.loads(loud.stdout)
    (cell,) = sweep["cells"]
    assert cell["grade"] == "DELIVERED"

    rerun = run_embedded(["rerun", "one", "01-a", "--sweep", sweep["sweep"], "--json", "-v", "--max-attempts", "2"],
                         tmp_path, FLEET_LOG_FILE=str(log), **env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    (line,) = _settings_lines(rerun.stderr)
    assert line.startswith("fleet rerun: settings: ") and "max_attempts=2 (flag --max-attempts)" in line
    assert f"log_file={log} (env FLEET_LOG_FILE)" in line
    assert json.loads(rerun.stdout)["cells"][0]["attempts"] == 2

    resume = run_embedded(["resume", sweep["sweep"], "--json", "--log-file", str(log)], tmp_path, **env)
    assert resume.returncode == 0, resume.stderr[-2000:]
    assert _settings_lines(resume.stderr) == []  # a log file alone keeps stderr quiet

    logged = log.read_text(encoding="utf-8")
    assert [x.split(" ", 2)[2].split(":")[0] for x in _settings_lines(logged)] == ["fleet sweep", "fleet rerun", "fleet resume"]
    assert SECRET not in logged + loud.stderr + rerun.stderr + resume.stderr
