"""``fleet replay``, ``fleet import``, ``fleet transcript check`` and ``fleet guard verdict``: recorded sessions and
transcripts read offline, on this machine, with no queue, host or store writer.

These are the one-shot commands whose start-up counts (tests/harness/cli/test_cli_startup.py): `fleet replay` and
`fleet import` load what they need inside ``loading()`` (harness/cli/loading.py: the collector off, then frozen) and
print plain lines, without rich.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import click

from harness.cli.console import console
from harness.cli.options import common_runs, resolve_settings
from harness.core.errors import UsageError

__all__ = ["replay", "import_", "transcript", "guard"]


@click.command()
@click.argument("sources", nargs=-1, required=True)
@click.option("--policy", "policies", multiple=True, metavar="P",
              help="default, a policy file (.toml), git:REF or cmd:COMMAND; repeat to compare (default: default).")
@click.option("--edit", "edits", multiple=True, metavar="E",
              help="A counterfactual: SESSION:CALL=RESULT, SESSION:CALL+=TOOL:RESULT or SESSION:CALL=drop.")
@click.option("--format", "fmt", default=None, metavar="F",
              help="The sources' format when it cannot be told from their content (transcript, pixel-fleet, ...).")
@click.option("--jobs", type=click.IntRange(min=1, max=256), default=None,
              help="Worker processes (default: one per core).")
@click.option("--all", "show_all", is_flag=True, help="Print every session's line, however many.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per (session, policy) per line.")
@common_runs
def replay(sources, policies, edits, fmt, jobs, show_all, as_json, runs) -> None:
    """Replay recorded sessions (a sweep id, a folder, or session files) through guard policies, offline.

    \b
    Examples:
      fleet replay 20261204-031500-nightly
      fleet replay imported/ --policy default --policy my-guard.toml
      fleet replay session.json --policy git:HEAD~1 --policy default --json
    """
    from harness.cli.loading import loading

    with loading():
        from harness.importers import IMPORTERS
        from harness.replay.batch import print_progress, render_json, render_text, run_replay
        from harness.replay.sources import TRANSCRIPT

    if fmt is not None and fmt != TRANSCRIPT and fmt not in IMPORTERS:
        raise UsageError(f"unknown --format {fmt!r}: expected one of {', '.join([TRANSCRIPT, *sorted(IMPORTERS)])}")
    settings = resolve_settings(runs=runs)
    run = run_replay(sources, policies, edits, fmt, jobs, Path(settings.runs), None if as_json else print_progress,
                     guard_timeout=settings.replay_guard_timeout_s)
    for line in render_json(run) if as_json else render_text(run, show_all):
        click.echo(line)


@click.command("import")
@click.argument("format_name", metavar="FORMAT")
@click.argument("path")
@click.option("--out", "out", default=None, help="Folder for the runs' folders (default: ./imported/<file stem>).")
def import_(format_name, path, out) -> None:
    """Import another agent's recorded sessions (FORMAT: pixel-fleet, openclaw-jsonl, openclaw-sqlite, opencode,
    hermes) as attempt-like folders, one per run,
    grade each (grade.json, grades.jsonl) and print it.

    \b
    Examples:
      fleet import pixel-fleet tests/fixtures/pixel-fleet/photo-renamer-bfb62a2b.json
      fleet import openclaw-jsonl ~/.openclaw/agents/main/sessions/abc.jsonl --out imported/abc
    """
    from harness.cli.loading import loading

    with loading():
        from harness.importers import grade_folder, importer
        from harness.grading.gradefiles import write_grade_files

        source = importer(format_name)
    out_dir = Path(out) if out else Path("imported") / Path(path).stem
    for folder in source.import_to_folder(path, out_dir):
        g = grade_folder(folder)
        write_grade_files(folder, g)
        stop = f"; stop: {g.stop.text}" + (f" at call {g.stop.at_call}" if g.stop.at_call else "") if g.stop else ""
        console.print(f"{folder}: {g.grade} (outcome {g.outcome}{stop})", markup=False, soft_wrap=True)


@click.group()
def transcript() -> None:
    """Read normalized transcripts (docs/transcript.md)."""


@transcript.command("check")
@click.argument("file")
def transcript_check(file) -> None:
    """Validate a transcript.jsonl line by line and print how many events of each kind it holds.

    \b
    Examples:
      fleet transcript check runs/SWEEP/local/07-photo-renamer/builtin/r1/attempt-1/transcript.jsonl
    """
    from harness.core.transcript import read_transcript

    events = read_transcript(file)
    kinds = Counter(e.event for e in events)
    shown = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no events"
    console.print(f"{file}: {len(events)} event(s): {shown}", markup=False, soft_wrap=True)


@click.group()
def guard() -> None:
    """Check the guard's rules on real output."""


@guard.command("verdict")
@click.argument("file")
@click.option("--exit-code", type=int, default=None, help="The test command's exit status.")
@click.option("--command", "command", default=None, help="The test command that printed the output.")
def guard_verdict(file, exit_code, command) -> None:
    """What the test-verdict recognizer makes of a test command's output (FILE, or - for stdin), as JSON.

    \b
    Examples:
      python -m pytest -q > out.txt; fleet guard verdict out.txt --exit-code $? --command 'python -m pytest -q'
      python -m unittest 2>&1 | fleet guard verdict - --command 'python -m unittest'
    """
    from harness.guard.verdict import recognize

    if file == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise UsageError(f"{file}: cannot read: {exc.strerror or exc}") from None
    verdict = recognize(data.decode("utf-8", errors="replace"), exit_code=exit_code, command=command)
    json.dump(verdict.to_json(), sys.stdout)
    sys.stdout.write("\n")
