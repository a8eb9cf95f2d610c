"""Acceptance checks written as ordinary pytest files, run against an attempt's workspace.

How it runs (``PytestRunner`` in :mod:`workers.checks.runner`, on a fleet host and in the tests alike):

1. **Stage.** The check's files go into an empty *check directory* together with three files this
   module writes: ``conftest.py`` (:func:`plugin_source`, the ``workspace`` and ``values`` fixtures),
   ``pytest.ini`` (:data:`INI_SOURCE`, an empty configuration) and ``values.json`` (the run's values).
   :func:`staged_files` gives the whole directory as ``{name: text}``; the transport ships it.
2. **Run.** :func:`build_check_command` gives the argv: ``env`` sets ``FLEET_WORKSPACE``, clears
   ``PYTEST_ADDOPTS`` and turns off plugin autoloading (whatever pytest plugins a host's Python has,
   pytest-randomly, pytest-xdist ..., must not change how checks run; it also starts faster), coreutils
   ``timeout`` enforces the time limit on the whole process group, and pytest runs only the named check
   files with ``-c CHECKDIR/pytest.ini --rootdir CHECKDIR``, so nothing of the workspace is collected or
   configured: not the agent's own tests, not its ``conftest.py``, ``pytest.ini`` or ``pyproject.toml``.
   The host needs only Python with pytest and coreutils.
3. **Parse.** The JUnit XML pytest writes becomes a :class:`CheckResult` (:func:`parse_junit`).

Checks get a **copy** of the workspace. The ``workspace`` fixture copies ``$FLEET_WORKSPACE`` into a
fresh temporary directory for each test and returns the copy's path. Checks typically *run* what the
agent wrote (a script that renames files, a program that writes its output), and that code is the
model's, not the check author's: on the real workspace one careless run could change or delete the
very files that are kept as the attempt's record and graded. A copy costs a little time for small
project folders and makes every test independent of the others, which is the simpler rule to write
checks against. The original's path is in ``FLEET_WORKSPACE``; checks must not write there.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

from harness.core.checks.result import AssertionResult, CheckResult, CheckStatus

__all__ = [
    "CHECK_KIND",
    "INI_SOURCE",
    "JUNIT_NAME",
    "KILL_GRACE_S",
    "build_check_command",
    "parse_junit",
    "plugin_source",
    "staged_files",
    "timed_out_exit",
]

CHECK_KIND = "pytest"
WORKSPACE_ENV = "FLEET_WORKSPACE"
JUNIT_NAME = "junit.xml"
KILL_GRACE_S = 5
"""Seconds between the polite TERM and the KILL when the time limit is exceeded."""
MESSAGE_LIMIT = 2000
"""A detail's message is cut to this many characters."""

INI_SOURCE = """\
# Written by the fleet harness: the checks' own configuration, so no configuration file of the
# graded workspace (pytest.ini, pyproject.toml, setup.cfg, tox.ini) applies to them.
[pytest]
addopts =
junit_family = xunit2
"""

_PLUGIN_SOURCE = '''\
"""Written by the fleet harness next to an item's acceptance checks (docs/checks-pytest.md).

``workspace``: a fresh copy of the attempt's workspace (path in $FLEET_WORKSPACE) for each test, so
nothing a check runs can change the graded files.
``values``: the values drawn for this run of a round task (project folder, marker ...), name -> text;
empty for an item without variables.
"""
import json
import os
import shutil
from pathlib import Path

import pytest

_SKIP = shutil.ignore_patterns("__pycache__", ".pytest_cache")


@pytest.fixture
def workspace(tmp_path_factory):
    source = os.environ.get("FLEET_WORKSPACE")
    if not source or not os.path.isdir(source):
        raise RuntimeError(f"FLEET_WORKSPACE is not a directory: {source!r}")
    copy = tmp_path_factory.mktemp("workspace", numbered=True) / "ws"
    shutil.copytree(source, copy, symlinks=True, ignore=_SKIP)
    return Path(copy)


@pytest.fixture
def values():
    path = Path(__file__).with_name("values.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
'''


def plugin_source() -> str:
    """Text of the ``conftest.py`` that goes next to the check files (the ``workspace`` fixture)."""
    return _PLUGIN_SOURCE


def staged_files(check_files: dict[str, str], values: dict[str, str] | None = None) -> dict[str, str]:
    """Everything a check directory holds, as ``{file name: text}``: the check's own files (``CheckSpec.files``)
    and the harness's ``conftest.py``, ``pytest.ini`` and ``values.json`` (the ``values`` fixture's source).
    Check files are named ``test_*.py``, so they never take one of those three names."""
    return {**check_files, "conftest.py": plugin_source(), "pytest.ini": INI_SOURCE,
            "values.json": json.dumps(values or {}, indent=2, sort_keys=True)}


def build_check_command(python: str, check_files: list[str], workspace: str, junit_path: str, timeout_s: int) -> list[str]:
    """argv that runs pytest on ``check_files`` (already staged, :func:`staged_files`) against ``workspace``.

    All check files must be in one check directory (the one holding the staged ``conftest.py`` and
    ``pytest.ini``). Run it with that directory as the working directory, preferably. Exit status:
    pytest's (0 all passed, 1 some failed, 2-5 usage/collection problems), or :func:`timed_out_exit`
    codes when the time limit was exceeded.
    """
    if not check_files:
        raise ValueError("no check files")
    dirs = {os.path.dirname(os.path.abspath(f)) for f in check_files}
    if len(dirs) != 1:
        raise ValueError(f"check files must be in one staged check directory, got {sorted(dirs)}")
    check_dir = dirs.pop()
    return [
        "env", f"{WORKSPACE_ENV}={os.path.abspath(workspace)}", "PYTEST_ADDOPTS=", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1",
        "PYTHONDONTWRITEBYTECODE=1",
        "timeout", "--kill-after", f"{KILL_GRACE_S}s", f"{int(timeout_s)}s",
        python, "-m", "pytest",
        "-c", os.path.join(check_dir, "pytest.ini"), "--rootdir", check_dir,
        "-p", "no:cacheprovider", "--import-mode=importlib",
        "--basetemp", os.path.join(check_dir, ".basetemp"),
        f"--junitxml={junit_path}", "-q",
        *[os.path.abspath(f) for f in check_files],
    ]


def timed_out_exit(returncode: int | None) -> bool:
    """Whether an exit status of :func:`build_check_command`'s argv means the time limit was hit.

    124: coreutils ``timeout`` sent TERM; 137 (or -9 seen from Python): it had to KILL.
    """
    return returncode in (124, 137, -9)


def _cut(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _error(name: str, duration_s: float, summary: str, details: list | None = None) -> CheckResult:
    return CheckResult(name=name, kind=CHECK_KIND, status="error", summary=summary, details=details or [], duration_s=duration_s)


def parse_junit(xml_bytes: bytes | None, name: str, duration_s: float, *, timed_out: bool = False,
                timeout_s: float | None = None) -> CheckResult:
    """pytest's JUnit XML -> :class:`CheckResult`.

    Each ``testcase`` is a detail: ``passed``; ``failed`` (a ``failure`` element, with its message);
    ``error`` (an ``error`` element: a fixture or collection error); ``untested`` (``skipped``, which
    includes xfail). The check is ``passed`` when every testcase passed, ``failed`` when any failed or
    erred, ``untested`` when none failed but some were skipped (as
    :func:`harness.core.checks.fold_status`: untested never counts as passed), and ``error`` when there is no testcase, the XML is
    missing or unparsable, or ``timed_out`` (whatever XML there is, is ignored then).
    """
    if timed_out:
        limit = f"{timeout_s:g} s" if timeout_s is not None else "the time limit"
        return _error(name, duration_s, f"timed out after {limit}")
    if not xml_bytes:
        return _error(name, duration_s, "no JUnit XML (pytest did not write a report)")
    try:
        root = ET.fromstring(xml_bytes)
    except ET.ParseError as exc:
        return _error(name, duration_s, f"unparsable JUnit XML: {exc}")
    if root.tag not in ("testsuites", "testsuite"):
        return _error(name, duration_s, f"unparsable JUnit XML: root element <{root.tag}>")
    details: list[AssertionResult] = []
    for case in root.iter("testcase"):
        cls, test = case.get("classname") or "", case.get("name") or "?"
        detail_name = f"{cls}::{test}" if cls else test
        status: CheckStatus = "passed"
        message: str | None = ""
        for child in case:
            if child.tag == "failure":
                status, message = "failed", child.get("message") or child.text
                break
            if child.tag == "error":
                status, message = "error", child.get("message") or child.text
                break
            if child.tag == "skipped":
                status, message = "untested", child.get("message") or child.text
        details.append(AssertionResult(name=detail_name, status=status, message=_cut(message)))
    if not details:
        return _error(name, duration_s, "no tests ran (no testcase in the JUnit XML)")
    counts = {s: sum(d.status == s for d in details) for s in ("passed", "failed", "error", "untested")}
    words = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    bad = [d for d in details if d.status in ("failed", "error")]
    if bad:
        first = bad[0]
        first_line = first.message.splitlines()[0] if first.message else ""
        summary = f"{words}; first: {first.name}" + (f": {first_line}" if first_line else "")
        status = "failed"
    elif counts["untested"]:
        status, summary = "untested", words
    else:
        status, summary = "passed", words
    return CheckResult(name=name, kind=CHECK_KIND, status=status, summary=_cut(summary), details=details, duration_s=duration_s)
