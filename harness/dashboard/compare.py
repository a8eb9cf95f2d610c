"""Compare two sweeps (``/compare?baseline=X&candidate=Y``) and the replay results (``/replays``, ``/replays/NAME``).

Compare is ``harness.views.comparison.compare_sweeps`` rendered: what ``fleet compare`` prints, with links to both sweeps'
cells. Changed cell groups only unless ``?all=1``, regressions first (the rows' own order).

Replays are the files ``fleet replay ... --json > runs/replays/NAME.json`` leaves: one ``ReplayOutcome`` per line,
per session then per policy, as the command prints them. A page shows one as the command's text does: a line per
(session, policy), a summary per policy, and per further policy the sessions that differ from the first
(``harness.replay.differ``). A file that is not that is one line naming the file, the line and the key; the list
still shows the others. A name is one file name of that folder: a ``/``, a ``..`` or a link that leads out is
refused.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from harness.views.comparison import compare_sweeps
from harness.dashboard.app import error_page
from harness.dashboard.context import Dashboard, Links
from harness.core.errors import FleetError, StoreError, UnsafeStoredPath, UsageError
from harness.core.paths import name_problem, within
from harness.core.records import Cell
from harness.replay.batch import _calls as call_ranges
from harness.replay.differ import Difference, describe_stop, differences
from harness.replay.outcome import ReplayOutcome
from harness.store import Store
from harness.views.sweeplist import previous_sweep, shown_status

__all__ = ["routes", "compare_page", "ReplayFile", "PolicyLine", "PolicyDiff", "read_replay", "list_replays",
           "REPLAYS", "SESSION_LINES"]

REPLAYS = "replays"
"""The folder of the results directory that holds ``fleet replay --json`` files."""
SESSION_LINES = 60
"""Up to this many sessions every (session, policy) line is shown; past it only the differences (``?all=1``)."""

_NAME = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._+-]{0,200}")
"""A replay's name: one file name (``harness.core.paths.name_problem``) of these characters, never with ``..``."""


# -- compare -------------------------------------------------------------------------------------------------------

def compare_page(dash: Dashboard, baseline: str, candidate: str, show_all: bool, links: Links) -> str:
    store = dash.store
    cand = store.load_sweep(candidate)
    base = store.load_sweep(previous_sweep(store, cand) if baseline == "previous" else baseline)
    result = compare_sweeps(base, cand, {rec.id: shown_status(store, rec) for rec in (base, cand)})
    rows = [r for r in result.rows if show_all or r.change != "unchanged"]
    href = links.compare(baseline, candidate)
    return dash.render("compare.html", links, c=result, rows=rows, show_all=show_all, asked=baseline,
                       cell_id=Cell.make_id, all_href=f"{href}&all=1" if href else "")


# -- replays -------------------------------------------------------------------------------------------------------

class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class PolicyLine(_Frozen):
    policy: str
    sessions: int
    stopped: int
    ran_to_end: int
    unrecorded: int
    passed: int


class PolicyDiff(_Frozen):
    baseline: str
    candidate: str
    differences: list[Difference]
    same: int


class ReplayInput(_Frozen):
    source: str
    sha256: str
    sessions: int


class ReplayFile(_Frozen):
    """One ``fleet replay --json`` file, read."""

    name: str
    modified: str = Field(description="The file's modification time (UTC).")
    inputs: list[ReplayInput]
    policies: list[str]
    sessions: list[list[ReplayOutcome]] = Field(description="Per session (in file order), per policy.")
    lines: list[PolicyLine]
    diffs: list[PolicyDiff]


class ReplayProblem(_Frozen):
    name: str
    error: str


_replays: dict[tuple[str, int, int], ReplayFile | str] = {}


def _folder(store: Store) -> Path:
    return store.root / REPLAYS


def _checked(store: Store, name: str) -> Path:
    """The file of replay ``name``, refused (``UnsafeStoredPath``) when the name is not one plain file name or the
    file is a link that leads out of the folder."""
    folder = _folder(store)
    if name_problem(name) or not _NAME.fullmatch(name):
        raise UnsafeStoredPath(str(folder), "name", f"{name!r} is not a replay's name (one file name, no '/' or '..')")
    path = folder / f"{name}.json"
    try:
        real, top = path.resolve(), folder.resolve()
    except (OSError, RuntimeError) as exc:
        raise UnsafeStoredPath(str(path), "", f"cannot follow: {exc}") from None
    if real.parent != top:
        raise UnsafeStoredPath(str(path), "", f"leads outside {folder} (to {real}): not read")
    root = store.root.resolve()
    if top == root or not within(top, root):
        raise UnsafeStoredPath(str(folder), "", f"leads outside the results directory {store.root} (to {top}): not read")
    return path


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = ".".join(str(x) for x in e.get("loc", ()))
    return f"{where}: {e['msg']}" if where else str(e["msg"])


def _parse(path: Path, name: str) -> ReplayFile:
    try:
        data = path.read_bytes()
        st = os.stat(path)
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    outcomes: list[ReplayOutcome] = []
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            outcomes.append(ReplayOutcome.model_validate_json(line))
        except ValidationError as exc:
            raise StoreError(f"{path}: line {n}: {_first_error(exc)} (not a fleet replay --json line)") from None
    if not outcomes:
        raise StoreError(f"{path}: holds no fleet replay --json line")
    policies: list[str] = []
    by_session: dict[str, dict[str, ReplayOutcome]] = {}
    inputs: dict[tuple[str, str], set[str]] = {}
    for o in outcomes:
        if o.policy not in policies:
            policies.append(o.policy)
        per = by_session.setdefault(o.session, {})
        if o.policy in per:
            raise StoreError(f"{path}: session {o.session!r}, policy {o.policy!r}: given twice")
        per[o.policy] = o
        inputs.setdefault((o.source, o.sha256), set()).add(o.session)
    sessions: list[list[ReplayOutcome]] = []
    for session, per in by_session.items():
        missing = [p for p in policies if p not in per]
        if missing:
            raise StoreError(f"{path}: session {session!r}: no line for policy {missing[0]!r}")
        sessions.append([per[p] for p in policies])
    lines = []
    for k, policy in enumerate(policies):
        column = [per[k] for per in sessions]
        stopped = sum(o.stopped for o in column)
        unrecorded = sum(o.unrecorded_call is not None for o in column)
        lines.append(PolicyLine(policy=policy, sessions=len(column), stopped=stopped,
                                ran_to_end=len(column) - stopped - unrecorded, unrecorded=unrecorded,
                                passed=sum(o.receipt_status == "passed" for o in column)))
    diffs = []
    for k, policy in enumerate(policies[1:], start=1):
        found, same = differences([per[0] for per in sessions], [per[k] for per in sessions])
        diffs.append(PolicyDiff(baseline=policies[0], candidate=policy, differences=found, same=same))
    modified = datetime.fromtimestamp(st.st_mtime, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return ReplayFile(name=name, modified=modified,
                      inputs=[ReplayInput(source=s, sha256=h, sessions=len(n)) for (s, h), n in inputs.items()],
                      policies=policies, sessions=sessions, lines=lines, diffs=diffs)


def read_replay(store: Store, name: str) -> ReplayFile:
    """Replay ``name`` (``runs/replays/NAME.json``), read once per version of the file."""
    path = _checked(store, name)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"no replay {name!r} in {_folder(store)} (write one with "
                         f"fleet replay ... --json > {_folder(store)}/NAME.json)") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    key = (str(path), st.st_size, st.st_mtime_ns)
    found = _replays.get(key)
    if found is None:
        try:
            found = _parse(path, name)
        except StoreError as exc:
            found = str(exc)
        if len(_replays) > 256:
            _replays.pop(next(iter(_replays)))
        _replays[key] = found
    if isinstance(found, str):
        raise StoreError(found)
    return found


def list_replays(store: Store) -> tuple[list[ReplayFile], list[ReplayProblem]]:
    """Every replay file, newest first, and the files that could not be read with their one line each."""
    folder = _folder(store)
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [ReplayProblem(name=str(folder), error=f"{folder}: cannot list: {exc.strerror or exc}")]
    files, problems = [], []
    for file_name in names:
        name = file_name[: -len(".json")]
        try:
            files.append(read_replay(store, name))
        except FleetError as exc:
            problems.append(ReplayProblem(name=name, error=str(exc)))
    files.sort(key=lambda f: (f.modified, f.name), reverse=True)
    return files, problems


def _detail(d: Difference) -> str:
    """What changed, in the words ``fleet replay`` uses under its differences."""
    a, b = d.baseline, d.candidate
    out = []
    if {"newly stopped", "no longer stopped", "stopped elsewhere", "unrecorded"} & set(d.changes):
        out.append(f"stop {describe_stop(a)} -> {describe_stop(b)}")
    if "refusals changed" in d.changes:
        out.append(f"refused {call_ranges(a.refused_calls)} -> {call_ranges(b.refused_calls)}")
    if "receipt changed" in d.changes:
        out.append(f"receipt {a.receipt_status} -> {b.receipt_status}")
    if "text changed" in d.changes and a.delivered_sha256 and b.delivered_sha256:
        out.append(f"text {a.delivered_sha256[:12]} -> {b.delivered_sha256[:12]}")
    return "; ".join(out)


def _stop(o: ReplayOutcome) -> str:
    if o.unrecorded_call is not None:
        if o.unrecorded_call <= o.calls:
            return f"call {o.unrecorded_call} would run, but the recording holds no result for it"
        return f"goes on past the end of the recording (nothing after call {o.calls} was recorded)"
    return describe_stop(o) if o.stopped else "ran to the end"


def routes(dash: Dashboard) -> list[BaseRoute]:
    links = Links()

    async def compare(request: Request) -> Response:
        q = request.query_params
        baseline, candidate = q.get("baseline", ""), q.get("candidate", "")
        if not baseline or not candidate:
            return error_page(dash, 400, "compare needs ?baseline=SWEEP&candidate=SWEEP (baseline may be previous)")
        if candidate == "previous":
            return error_page(dash, 400, "`previous` stands for a baseline (the latest earlier sweep with the "
                              "candidate's label); the candidate must be a sweep id")
        show_all = q.get("all", "") in ("1", "true", "yes")
        return HTMLResponse(await anyio.to_thread.run_sync(compare_page, dash, baseline, candidate, show_all, links))

    async def replays(request: Request) -> Response:
        files, problems = await anyio.to_thread.run_sync(list_replays, dash.store)
        return HTMLResponse(dash.render("replays.html", links, files=files, problems=problems,
                                        folder=str(_folder(dash.store))))

    async def replay(request: Request) -> Response:
        name = request.path_params["name"]
        show_all = request.query_params.get("all", "") in ("1", "true", "yes")
        r = await anyio.to_thread.run_sync(read_replay, dash.store, name)
        every = show_all or len(r.sessions) <= SESSION_LINES
        return HTMLResponse(dash.render("replay.html", links, r=r, every=every, detail=_detail, stop=_stop,
                                        calls=call_ranges))

    return [Route("/compare", compare, name="compare"), Route("/replays", replays, name="replays"),
            Route("/replays/{name:path}", replay, name="replay")]
