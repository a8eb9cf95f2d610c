"""The store's SQLite index, ``runs/index.sqlite``: what the dashboard, ``fleet sweeps`` and ``fleet compare`` query
without reading every sweep's files.

Derived, never the record: every row is made from the sweep's state (sweep.json and its journal) and the attempt's
files, by the writer in the same step that writes those (``SweepWriter``), so the index can be deleted and rebuilt.
Here: the schema, the connection a writer keeps open, the read-only query, and each table's row as the writer
inserts it. A reader whose index is missing or damaged reads the files instead (``query_index`` says None).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from harness.core.errors import StoreError
from harness.core.records import AttemptResult, AttemptSummary, Cell
from harness.core.sweep import SweepRecord
from harness.grading import Grade
from harness.grading.override import GradeOverride
from harness.grading.scale import shown_grade

__all__ = ["SCHEMA", "Statement", "connect_index", "query_index", "sweep_rows", "CELLS", "cell_row", "attempt_rows",
           "GRADES", "grade_row", "override_row"]

Statement = tuple[str, list | tuple]
"""One SQL statement and its parameters: a tuple for one row, a list of tuples for many (``executemany``)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY, label TEXT, created_at TEXT, finished_at TEXT, status TEXT,
    harness_commit TEXT, cells INTEGER
);
CREATE TABLE IF NOT EXISTS attempts (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, host TEXT, item TEXT, agent TEXT,
    status TEXT, reason TEXT, exit_code INTEGER, duration_s REAL, started_at TEXT, ended_at TEXT,
    model TEXT, harness_commit TEXT, path TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt)
);
CREATE TABLE IF NOT EXISTS grades (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, grader_version INTEGER, grade TEXT, outcome TEXT,
    stop TEXT, graded_at TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt, grader_version, graded_at)
);
CREATE TABLE IF NOT EXISTS artifacts (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, name TEXT, size INTEGER, sha256 TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt, name)
);
CREATE TABLE IF NOT EXISTS sweep_plans (
    sweep_id TEXT PRIMARY KEY, hosts TEXT, items INTEGER, agents TEXT
);
CREATE TABLE IF NOT EXISTS cells (
    sweep_id TEXT, cell_id TEXT, host TEXT, item TEXT, agent TEXT, rep INTEGER, attempts INTEGER,
    attempt INTEGER, status TEXT, grade TEXT, auto_grade TEXT, override TEXT, stop TEXT, duration_s REAL,
    PRIMARY KEY (sweep_id, cell_id)
);
CREATE INDEX IF NOT EXISTS cells_by_host ON cells (host, sweep_id);
CREATE TABLE IF NOT EXISTS overrides (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, grade TEXT, automatic TEXT, reason TEXT, author TEXT, at TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt, at)
);
"""


CELLS = "INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
GRADES = "INSERT OR REPLACE INTO grades VALUES (?,?,?,?,?,?,?,?)"


def connect_index(root: Path) -> sqlite3.Connection:
    """A connection to ``root``'s index, made (with its tables) if there is none: a writer's, kept open while it
    writes (opening one per attempt costs more than the attempt's rows)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(root / "index.sqlite", timeout=30)
        db.executescript(SCHEMA)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"{root / 'index.sqlite'}: {exc}") from exc
    return db


def query_index(root: Path, *queries: tuple[str, tuple]) -> list[list[tuple]] | None:
    """Each query's rows from ``root``'s index, opened read-only on one connection (reading must work on a read-only
    copy and must never create an index); None when there is no index or it cannot be read (an older layout, a damaged
    file): the caller reads the sweeps' files instead."""
    path = root / "index.sqlite"
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return [db.execute(sql, params).fetchall() for sql, params in queries]
        finally:
            db.close()
    except sqlite3.Error:
        return None


def sweep_rows(sweep: SweepRecord) -> list[Statement]:
    """The sweep's row and its plan's shape (what the dashboard's list shows without reading sweep.json)."""
    return [
        ("INSERT OR REPLACE INTO sweeps VALUES (?,?,?,?,?,?,?)",
         (sweep.id, sweep.label, sweep.created_at, sweep.finished_at, sweep.status, sweep.harness_commit,
          len(sweep.cells))),
        ("INSERT OR REPLACE INTO sweep_plans VALUES (?,?,?,?)",
         (sweep.id, json.dumps(sorted(sweep.hosts)), len(sweep.items), json.dumps(sorted({c.agent for c in sweep.cells})))),
    ]


def cell_row(sweep_id: str, c: Cell, runs: list[AttemptSummary]) -> tuple:
    """The cell's row of the ``cells`` table (``CELLS``) from its attempts ``runs``: its last recorded attempt as the
    dashboard's list and host pages count it (``shown_grade``: an override wins, a harness failure is
    HARNESS_FAILURE)."""
    recorded = [a for a in runs if a.status != "dispatched"]
    a = recorded[-1] if recorded else None
    return (sweep_id, c.id, c.host, c.item, c.agent, c.rep, len(recorded), a.attempt if a else 0,
            a.status if a else "pending", shown_grade(a), a.grade if a else "", a.override if a else "",
            a.stop if a else "", a.duration_s if a else 0.0)


def attempt_rows(sweep_id: str, result: AttemptResult, path: str) -> list[Statement]:
    """A recorded attempt's row (its folder at ``path`` under the results directory) and its artifacts' rows."""
    return [
        ("INSERT OR REPLACE INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
         (sweep_id, result.cell_id, result.attempt, result.host, result.item, result.agent,
          result.status, result.reason, result.exit_code, result.duration_s, result.started_at,
          result.ended_at, str(result.model.get("id", "")), result.harness_commit, path)),
        ("INSERT OR REPLACE INTO artifacts VALUES (?,?,?,?,?,?)",
         [(sweep_id, result.cell_id, result.attempt, a.name, a.size, a.sha256) for a in result.artifacts]),
    ]


def grade_row(sweep_id: str, cell_id: str, attempt: int, grade: Grade) -> Statement:
    """The ``grades`` row of an attempt's grade, with its statement (``GRADES``)."""
    return (GRADES, (sweep_id, cell_id, attempt, grade.grader_version, grade.grade, grade.outcome,
                     grade.stop.reason if grade.stop else "", grade.graded_at))


def override_row(sweep_id: str, cell_id: str, attempt: int, override: GradeOverride) -> Statement:
    """The ``overrides`` row of a reviewer's grade, with its statement."""
    return ("INSERT OR REPLACE INTO overrides VALUES (?,?,?,?,?,?,?,?)",
            (sweep_id, cell_id, attempt, override.grade, override.automatic, override.reason, override.author,
             override.at))
