"""Run the real ``fleet`` entry point in this process and judge what it did with a mutated input.

``harness.cli.main(argv)`` is what the console script calls; here its stdout and stderr go to buffers and its
``SystemExit`` is caught, so hundreds of inputs run in seconds. ``test_subprocess_equals_in_process`` checks on
a few inputs that the real ``fleet`` process prints the same line with the same exit code.

The verdict on one input: exit 0 (the edit left a valid input) with sane output, or exit 2 with exactly one
stderr line ``fleet: error: ...`` that names the file, says something after it, and leaks no Python exception
class (a translated error says what is wrong in the format's own words). Anything else, and any exception that
escapes ``main``, is a finding. With ``FLEET_FUZZ_TALLY=FILE`` every verdict is also appended to FILE as a JSON
line and findings do not fail the test, so the figures (inputs tried, tracebacks) can be counted on a tree that
has findings."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

import harness.cli

LEAKS = re.compile(
    r"Traceback|\b(KeyError|IndexError|TypeError|AttributeError|UnicodeDecodeError|UnicodeEncodeError|"
    r"RecursionError|OverflowError|ZeroDivisionError|AssertionError|JSONDecodeError|TOMLDecodeError|"
    r"DatabaseError|OperationalError|ZstdError|binascii)\b|\bValueError:|internal error|<class "
)


@dataclass
class Run:
    code: int | None
    out: str
    err: str
    escaped: str = ""
    """The exception that escaped main (a traceback to a user), formatted."""


def run_main(*argv: str) -> Run:
    """``fleet ARGV`` in this process: its exit code, stdout, stderr, and any exception that escaped main."""
    out, err = io.StringIO(), io.StringIO()
    code: int | None = 0
    escaped = ""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # as tests.support.run_fleet: an error line must stay one line on 80 columns
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                harness.cli.main(list(argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - what a user would see as a traceback
                escaped = traceback.format_exc()
                code = None
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return Run(code, out.getvalue(), err.getvalue(), escaped)


def problems(run: Run, names: list[str], *, ok_output: str = "", codes: tuple[int, ...] = (2,)) -> list[str]:
    """What is wrong with ``run`` for an input that lives at one of ``names`` (the file, or a folder holding
    it); [] when it is a valid verdict. ``ok_output``: text a successful run's stdout must contain; ``codes``: the
    exit codes of a refusal (2, bad input; a damaged results directory is a StoreError, 1)."""
    if run.escaped:
        last = run.escaped.strip().splitlines()[-1]
        return [f"traceback: {last[:300]}"]
    if run.code == 0:
        found = []
        if ok_output and ok_output not in run.out:
            found.append(f"exit 0 without {ok_output!r} in stdout: {run.out[:200]!r}")
        if any(not line.startswith("fleet: warning: ") for line in run.err.splitlines()):
            found.append(f"exit 0 with stderr {run.err[:300]!r}")
        return found
    lines = run.err.splitlines()
    found = []
    if run.code not in codes:
        found.append(f"exit {run.code} (expected {' or '.join(map(str, codes))})")
    if len(lines) != 1:
        found.append(f"{len(lines)} stderr lines: {run.err[:300]!r}")
    line = lines[0] if lines else ""
    if not line.startswith("fleet: error: "):
        found.append(f"not a `fleet: error:` line: {line[:200]!r}")
    named = [n for n in names if n in line]
    if not named:
        found.append(f"does not name the file: {line[:300]!r}")
    elif not line.split(max(named, key=len), 1)[1].strip(" :"):
        found.append(f"names the file but no problem: {line[:300]!r}")
    if not line.isprintable():
        bad = next(c for c in line if not c.isprintable())
        found.append(f"unescaped {bad!r} in the line (it reaches the terminal): {line[:300]!r}")
    leak = LEAKS.search(run.err + run.out)
    if leak:
        found.append(f"leaks {leak.group(0)!r}: {line[:300]!r}")
    return found


TALLY = os.environ.get("FLEET_FUZZ_TALLY", "")
COUNT: dict[str, int] = {}
"""Inputs judged in this process, per format."""


def judge(fmt: str, edit: str, run: Run, names: list[str], *, ok_output: str = "", codes: tuple[int, ...] = (2,)) -> None:
    """Assert ``run`` is a valid verdict (or, with FLEET_FUZZ_TALLY, record it)."""
    found = problems(run, names, ok_output=ok_output, codes=codes)
    COUNT[fmt] = COUNT.get(fmt, 0) + 1
    if TALLY:
        with open(TALLY, "a", encoding="utf-8") as f:
            f.write(json.dumps({"format": fmt, "edit": edit[:200], "code": run.code, "problems": found,
                                "traceback": bool(run.escaped), "err": run.err[:300], "where": run.escaped[-1500:]}) + "\n")
        return
    assert not found, (fmt, edit, found, run.escaped[-3000:])


def as_names(*paths: Path) -> list[str]:
    return [str(p) for p in paths]
