"""A cell's page (``/sweeps/ID/cells/CELL?attempt=K``) and the sweep's stored files (``/sweeps/ID/files/PATH``).

The page tells one attempt's whole story from its folder: the cell's facts and every attempt, the transcript as
a timeline (``timeline.py``), the delivered answer, the check results, the grade with its history (overrides
too), the workspace's files as escaped text, and a download link for every stored file with its sha256.

Every part is read on its own: a corrupt grade.json, a transcript that does not parse or an attempt imported
without a manifest is one line in its part of the page, and the rest still shows. Nothing stored is ever
markup: templates escape it, an HTML file of the workspace is shown as its source, and the files route serves
bytes as a download (or as plain text) under ``Content-Security-Policy: sandbox``, so nothing it sends can run
as this site. Every path comes from the URL or the store and is checked to stay inside the sweep's folder
(``Store.inside``) before anything is opened.
"""

from __future__ import annotations

import errno
import os
import stat
import urllib.parse
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator

import anyio
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from harness.core.checks.result import CheckResult
from harness.dashboard.context import Dashboard, Links
from harness.dashboard.grading import reviewer
from harness.dashboard.timeline import Clip, Timeline, build_timeline
from harness.core.errors import FleetError, UnsafeStoredPath, UsageError
from harness.core.paths import relpath_problem
from harness.grading.model import CHECKS_ADAPTER, Grade
from harness.grading.gradefiles import read_grade_history
from harness.grading.override import GradeHistory
from harness.views.labels import label
from harness.grading.scale import shown_grade
from harness.core.records import MANIFEST_ADAPTER, AttemptMeta, AttemptSummary, Cell, ManifestEntry, read_meta
from harness.core.recordfile import read_optional
from harness.store import Store
from harness.views.sweeplist import shown_status
from harness.core.transcript import OwnerReceipt, parse_transcript

__all__ = ["routes", "cell_page", "read_cell", "open_stored", "CellView", "AttemptRow", "StoredFile", "Shown",
           "WorkspaceFile", "FILE_CAP", "INLINE_TOTAL"]

FILE_CAP = 256 * 1024
"""Bytes of one stored file shown in the page (a workspace file, answer.txt); the whole is a download."""
INLINE_TOTAL = 2 * 1024 * 1024
"""Bytes of workspace files shown in the page in all; the files after that are listed with their download."""
LOG_CAP = 64 * 1024
"""Bytes of agent.stdout and agent.stderr shown when there is no transcript."""
TRANSCRIPT_CAP = 64 * 1024 * 1024
"""A transcript larger than this is not parsed for the page (download it)."""
MANIFEST_ROWS = 5000
"""Workspace entries listed; a workspace of 100,000 files says how many more there are."""
FILE_CSP = "sandbox; default-src 'none'"
"""A stored file is never a page of this site: sandboxed (no script, its own origin), nothing loaded."""
RECORDS = ("meta.json", "grade.json", "grades.jsonl")
"""Files of an attempt folder that meta.json's artifact list does not name (they are written around it)."""
HTML_SUFFIXES = (".html", ".htm", ".xhtml", ".svg", ".xml")


class StoredFile(BaseModel):
    """A stored file with its download link."""

    name: str = Field(description="Its name under the attempt folder, as stored.")
    original: str = Field(default="", description="Its name on the host when the store renamed it.")
    size: int | None = None
    sha256: str = ""
    href: str = ""


class Shown(BaseModel):
    """Part of a stored file shown in the page."""

    kind: str = Field(description="text, html (shown as its source), binary (a download only), or missing.")
    text: Clip | None = None
    size: int = 0
    problem: str = ""


class WorkspaceFile(BaseModel):
    """One entry of workspace.manifest.json, with its stored copy."""

    entry: ManifestEntry
    file: StoredFile | None = Field(default=None, description="The packed copy; None when it was not packed.")
    shown: Shown | None = Field(default=None, description="Its content in the page; None when not inlined.")


class AttemptRow(BaseModel):
    summary: AttemptSummary
    text: str = Field(description="What the attempt came to: its grade, HARNESS_FAILURE(code) or its status.")
    shown: str = Field(description="shown_grade of the attempt.")
    href: str
    current: bool


class CellView(BaseModel):
    """Everything the cell page shows of one attempt; each ``problems`` key is a part that could not be read."""

    sweep_id: str
    cell: Cell
    item_title: str
    model_id: str
    live: bool
    shown_grade: str = Field(description="The cell's grade as counted (its last attempt, an override first).")
    rows: list[AttemptRow]
    attempt: int = Field(default=0, description="The attempt shown; 0 for a cell with no attempt yet.")
    summary: AttemptSummary | None = None
    folder: str = Field(default="", description="The attempt folder, relative to the sweep's folder.")
    meta: AttemptMeta | None = None
    grade: Grade | None = None
    checks: list[CheckResult] = Field(default_factory=list)
    checks_from: str = ""
    history: GradeHistory = Field(default_factory=list)
    timeline: Timeline | None = None
    transcript: StoredFile | None = None
    receipt: OwnerReceipt | None = None
    answer: Shown | None = None
    answer_file: StoredFile | None = None
    logs: list[tuple[StoredFile, Shown]] = Field(default_factory=list)
    workspace: list[WorkspaceFile] | None = None
    workspace_more: int = 0
    artifacts: list[StoredFile] = Field(default_factory=list)
    records: list[StoredFile] = Field(default_factory=list)
    problems: dict[str, str] = Field(default_factory=dict)


# -- stored files, opened safely ------------------------------------------------------------------------------


def _refuse(sweep_id: str, path: str, why: str) -> UnsafeStoredPath:
    return UnsafeStoredPath(f"sweep {sweep_id}", f"file {path!r}", why)


def open_stored(store: Store, sweep_id: str, rel: str) -> tuple[BinaryIO, os.stat_result]:
    """The stored file ``rel`` (relative to the sweep's folder), open for reading, with its status.

    ``..``, an absolute path, a NUL, an empty part or the sweep's ``.lock`` is refused before anything is looked at;
    a path that, every link followed, leads outside the sweep's folder is an ``UnsafeStoredPath`` (403); what is
    missing or not a regular file (a folder, a FIFO) is a ``UsageError`` (404). The file opened is the one
    checked: the resolved path, without following a link, and its type is checked on the open file."""
    top = store.sweep_dir(sweep_id)
    if relpath_problem(rel):
        raise _refuse(sweep_id, rel, "is not a path inside the sweep's folder")
    if rel == ".lock":
        raise UsageError(f"sweep {sweep_id}: {rel!r} is not a stored file")
    path = top / PurePosixPath(rel)
    try:
        store.inside(sweep_id, path, f"sweep {sweep_id}", rel)
    except UnsafeStoredPath:
        raise _refuse(sweep_id, rel, "leads outside the sweep's folder") from None
    try:
        real = path.resolve(strict=True)
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"sweep {sweep_id}: no stored file {rel!r}") from None
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:  # swapped for a link since the check
            raise _refuse(sweep_id, rel, "is a symbolic link") from None
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"sweep {sweep_id}: {rel!r}: cannot read: {why}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UsageError(f"sweep {sweep_id}: {rel!r} is not a stored file")
    return os.fdopen(fd, "rb"), st


def _head(store: Store, sweep_id: str, rel: str, cap: int) -> tuple[bytes, int]:
    """At most ``cap`` bytes of the stored file and its whole size."""
    f, st = open_stored(store, sweep_id, rel)
    with f:
        return f.read(cap), st.st_size


def _decode(data: bytes, cut: bool) -> str | None:
    """``data`` as text, or None when it is not text (a NUL, or not UTF-8 except a character the cap cut)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(data) - 3:
            try:
                return data[:exc.start].decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None


def _show(store: Store, sweep_id: str, rel: str, cap: int) -> Shown:
    """The stored file as shown in the page: its first ``cap`` bytes as escaped text, or a download only."""
    try:
        data, size = _head(store, sweep_id, rel, cap)
    except FleetError as exc:
        # Missing, not a regular file, or a link out of the sweep's folder: said, never read.
        return Shown(kind="missing", problem=str(exc))
    text = _decode(data, size > len(data))
    if text is None:
        return Shown(kind="binary", size=size)
    kind = "html" if rel.lower().endswith(HTML_SUFFIXES) else "text"
    return Shown(kind=kind, text=Clip(text=text, more=size - len(text.encode("utf-8"))), size=size)


# -- the attempt's parts -----------------------------------------------------------------------------------


def _stored(links: Links, sweep_id: str, folder: str, name: str, size: int | None = None, sha256: str = "",
            original: str = "") -> StoredFile:
    return StoredFile(name=name, original=original, size=size, sha256=sha256,
                      href=links.file(sweep_id, f"{folder}/{name}"))


def _pick_attempt(runs: list[AttemptSummary], wanted: int | str | None, cell_id: str) -> AttemptSummary | None:
    """The attempt ``wanted`` (a number, from the URL or the export), the last one when None; None for a cell
    with no attempt yet (it is pending)."""
    if wanted is None or wanted == "":
        return runs[-1] if runs else None
    try:
        k = int(wanted)
    except ValueError:
        raise UsageError(f"attempt {wanted!r} is not a number") from None
    for a in runs:
        if a.attempt == k:
            return a
    raise UsageError(f"cell {cell_id} has no attempt {k} (attempts: {', '.join(str(a.attempt) for a in runs) or 'none yet'})")


def read_cell(store: Store, sweep_id: str, cell_id: str, attempt: int | str | None, links: Links) -> CellView:
    """The cell page's data for ``attempt`` (a number from the URL; None: the last attempt)."""
    sweep = store.load_sweep(sweep_id)
    live = shown_status(store, sweep) in ("planned", "running")
    try:
        cell = sweep.cell(cell_id)
    except KeyError:
        raise UsageError(f"sweep {sweep_id} has no cell {cell_id!r}") from None
    runs = sweep.attempts.get(cell.id) or []
    a = _pick_attempt(runs, attempt, cell.id)
    rows = [AttemptRow(summary=r, text=label(r, live)[0], shown=shown_grade(r),
                       href=links.cell(sweep_id, cell.id, r.attempt), current=a is not None and r.attempt == a.attempt)
            for r in runs]
    item = sweep.items.get(cell.item)
    host = sweep.hosts.get(cell.host)
    view = CellView(sweep_id=sweep_id, cell=cell, item_title=item.title if item else "",
                    model_id=host.model_id if host else "", live=live, shown_grade=shown_grade(runs[-1] if runs else None),
                    rows=rows)
    if a is None:
        return view
    view.attempt, view.summary, view.folder = a.attempt, a, f"{cell.id}/attempt-{a.attempt}"
    try:
        path = store.attempt_dir(sweep_id, cell.id, a.attempt)
    except UnsafeStoredPath as exc:
        view.problems["attempt"] = str(exc)
        return view
    if not path.is_dir():
        view.problems["attempt"] = ("no result recorded yet: the attempt is in flight" if a.status == "dispatched"
                                    else f"the attempt's folder {view.folder} is missing")
        return view
    _read_meta(view, path, links)
    _read_grades(view, path)
    _read_transcript(store, view, path, links)
    _read_workspace(store, view, path, links)
    return view


def _read_meta(view: CellView, path: Path, links: Links) -> None:
    if not (path / "meta.json").is_file():
        view.problems["meta"] = ("no result recorded yet: the attempt is in flight"
                                 if view.summary is not None and view.summary.status == "dispatched"
                                 else f"{view.folder}/meta.json is missing")
        return
    try:
        meta = read_meta(path / "meta.json")
    except FleetError as exc:
        view.problems["meta"] = str(exc)
        return
    if not isinstance(meta, AttemptMeta):
        view.problems["meta"] = f"{view.folder}/meta.json: an imported session's record, not a sweep attempt's"
        return
    view.meta = meta
    view.artifacts = [_stored(links, view.sweep_id, view.folder, art.name, art.size, art.sha256, art.original or "")
                      for art in meta.artifacts]
    listed = {art.name for art in meta.artifacts}
    view.records = [_stored(links, view.sweep_id, view.folder, name) for name in RECORDS
                    if name not in listed and (path / name).is_file()]


def _read_grades(view: CellView, path: Path) -> None:
    try:
        view.grade = read_optional(path / "grade.json", Grade)
    except FleetError as exc:
        view.problems["grade"] = str(exc)
    if view.grade is not None and view.grade.checks:
        view.checks, view.checks_from = view.grade.checks, "grade.json"
    else:
        try:
            checks = read_optional(path / "checks.json", CHECKS_ADAPTER)
        except FleetError as exc:
            view.problems["checks"] = str(exc)
            checks = None
        if checks is not None:
            view.checks, view.checks_from = checks, "checks.json"
    try:
        view.history = read_grade_history(path)
    except FleetError as exc:
        view.problems["history"] = str(exc)


def _read_transcript(store: Store, view: CellView, path: Path, links: Links) -> None:
    """The timeline, or (no transcript: an agent that writes none, an attempt that failed before it started) the
    agent's own output; then the delivered answer."""
    sweep_id, folder = view.sweep_id, view.folder
    name = f"{folder}/transcript.jsonl"
    if (path / "transcript.jsonl").is_file():
        view.transcript = _stored(links, sweep_id, folder, "transcript.jsonl")
        try:
            data, size = _head(store, sweep_id, name, TRANSCRIPT_CAP + 1)
            view.transcript.size = size
            if size > TRANSCRIPT_CAP:
                view.problems["transcript"] = (f"transcript.jsonl is {size:,} bytes, over the {TRANSCRIPT_CAP:,} the page "
                                               "reads: download it")
            else:
                view.timeline = build_timeline(parse_transcript(data, "transcript.jsonl"))
        except FleetError as exc:
            view.problems["transcript"] = str(exc)
    else:
        view.problems["transcript"] = "no transcript.jsonl in this attempt"
        for log in ("agent.stdout", "agent.stderr"):
            if (path / log).exists():
                view.logs.append((_stored(links, sweep_id, folder, log), _show(store, sweep_id, f"{folder}/{log}", LOG_CAP)))
        try:
            view.receipt = read_optional(path / "receipt.json", OwnerReceipt)
        except FleetError as exc:
            view.problems["receipt"] = str(exc)
    if (path / "answer.txt").exists():
        view.answer_file = _stored(links, sweep_id, folder, "answer.txt")
        view.answer = _show(store, sweep_id, f"{folder}/answer.txt", FILE_CAP)


def _read_workspace(store: Store, view: CellView, path: Path, links: Links) -> None:
    try:
        manifest = read_optional(path / "workspace.manifest.json", MANIFEST_ADAPTER)
    except FleetError as exc:
        view.problems["workspace"] = str(exc)
        return
    if manifest is None:
        return
    # A packed file is the artifact workspace/PATH; one the store renamed keeps that name as its ``original``.
    stored = {(art.original or art.name): art for art in (view.meta.artifacts if view.meta else [])}
    budget = INLINE_TOTAL
    files: list[WorkspaceFile] = []
    for entry in manifest[:MANIFEST_ROWS]:
        wf = WorkspaceFile(entry=entry)
        if entry.packed:
            art = stored.get(f"workspace/{entry.path}")
            name = art.name if art is not None else f"workspace/{entry.path}"
            wf.file = _stored(links, view.sweep_id, view.folder, name, entry.size, entry.sha256 or "")
            if budget > 0:
                wf.shown = _show(store, view.sweep_id, f"{view.folder}/{name}", min(FILE_CAP, budget))
                if wf.shown.text is not None:
                    budget -= len(wf.shown.text.text.encode("utf-8"))
        files.append(wf)
    view.workspace, view.workspace_more = files, max(0, len(manifest) - MANIFEST_ROWS)


def cell_page(dash: Dashboard, sweep_id: str, cell_id: str, attempt: int | str | None, links: Links,
              author: str | None = None) -> str:
    """The cell page for one attempt (the export writes the same). ``author``: the reviewer signed in on the
    request, for the override form ("" when nobody is; None when the page does not know)."""
    view = read_cell(dash.store, sweep_id, cell_id, attempt, links)
    # The override form's context (override_form.html): the attempt shown and the grade it counts as now.
    form = {"sweep_id": sweep_id, "cell_id": view.cell.id, "attempt": view.attempt,
            "grade": shown_grade(view.summary), **({"author": author} if author is not None else {})}
    return dash.render("cell.html", links, v=view, inline_total=INLINE_TOTAL, **form)


# -- routes -----------------------------------------------------------------------------------------------


def _disposition(kind: str, name: str) -> str:
    """``attachment`` (or ``inline``) with the file's name: plain ASCII, and the exact name percent-encoded."""
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in name) or "file"
    return f"{kind}; filename=\"{plain}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    with f:
        while True:
            data = f.read(256 * 1024)
            if not data:
                return
            yield data


def routes(dash: Dashboard) -> list[BaseRoute]:
    links = Links()

    async def cell(request: Request) -> Response:
        sweep_id, cell_id = request.path_params["sweep_id"], request.path_params["cell_id"]
        attempt = request.query_params.get("attempt")
        author = reviewer(dash, request)
        return HTMLResponse(await anyio.to_thread.run_sync(cell_page, dash, sweep_id, cell_id, attempt, links, author))

    async def file(request: Request) -> Response:
        sweep_id, rel = request.path_params["sweep_id"], request.path_params["path"]
        f, st = await anyio.to_thread.run_sync(open_stored, dash.store, sweep_id, rel)
        view = request.query_params.get("view") == "1"
        name = rel.rsplit("/", 1)[-1]
        headers = {"Content-Length": str(st.st_size), "Content-Security-Policy": FILE_CSP,
                   "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                   "Content-Disposition": _disposition("inline" if view else "attachment", name)}
        # A sync iterator: Starlette reads it in a worker thread, a chunk at a time, never the whole file.
        return StreamingResponse(_chunks(f), headers=headers,
                                 media_type="text/plain; charset=utf-8" if view else "application/octet-stream")

    return [Route("/sweeps/{sweep_id}/cells/{cell_id:path}", cell, methods=["GET"], name="cell"),
            Route("/sweeps/{sweep_id}/files/{path:path}", file, methods=["GET"], name="file")]

