"""A host's page (``/hosts/NAME``): its model and endpoint, its agents and their versions, its grades over time and
the model's measured speed.

- Grades over time come from the index's ``cells`` table (one grouped query on its ``cells_by_host`` index), joined
  with its ``sweeps`` rows for the label and date; only a sweep the index does not cover (no plan row, or no cell
  rows for a host its plan lists) is read from its files. With 1,000 indexed sweeps the page reads no sweep.json
  for its grades.
- The model (id, endpoint, context, max output) and the host's transport, OS, slots and tags are the newest sweep's
  ``hosts[NAME]``: one sweep read.
- The speed comes from the transcripts of the newest ``SPEED_SWEEPS`` sweeps that include the host, at most
  ``SPEED_ATTEMPTS`` attempts (the last recorded attempt of each cell, in cell order, shared out between the
  sweeps so each can be compared with the one before). What is measured is said in harness/dashboard/speed.py.
- Parsed transcripts and read sweeps are kept in memory by their file's (path, size, mtime_ns): a reload reads
  nothing again that has not changed.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import anyio
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from harness.dashboard.context import Dashboard, Links
from harness.dashboard.speed import AttemptSpeed, SpeedSummary, attempt_speed, ratio, summarize
from harness.core.errors import FleetError, UsageError
from harness.core.records import AttemptMeta, HostSummary, read_meta
from harness.core.sweep import SweepRecord
from harness.grading.scale import GRADE_ORDER, PassRate, pass_rate, shown_grade
from harness.store import JOURNAL, Store

__all__ = ["routes", "host_page", "read_host", "HostView", "GradePoint", "SweepSpeed", "AgentVersions",
           "SPEED_SWEEPS", "SPEED_ATTEMPTS", "CHART_SWEEPS"]

SPEED_SWEEPS = 3
"""The speed is measured over the newest sweeps that include the host, this many."""
SPEED_ATTEMPTS = 200
"""At most this many attempts' transcripts are read for the speed (shared out between those sweeps)."""
CHART_SWEEPS = 60
"""The grades chart shows the newest this many sweeps."""
SLOWER = 0.75
"""A sweep whose median tokens/s is below this fraction of the previous sweep's is marked slower."""
_CACHE_LIMIT = 4096

_COUNTED = (*GRADE_ORDER, "")
"""The grades a point counts, in the scale's order, then the cells not graded yet."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class GradePoint(_Frozen):
    """The host's cells in one sweep."""

    sweep_id: str
    label: str
    created_at: str
    counts: dict[str, int] = Field(description="Cells per shown grade ('' for not graded yet).")
    rate: PassRate
    agents: list[str]
    cells: int
    source: str = Field(description="'index', or 'files' when the sweep was read because the index lacks it.")


class Bar(_Frozen):
    sweep_id: str
    x: float
    height: float
    text: str
    known: bool


class SweepSpeed(_Frozen):
    sweep_id: str
    label: str
    created_at: str
    speed: SpeedSummary
    vs_previous: float | None = Field(description="Median tokens/s over the previous measured sweep's.")
    slower: bool


class AgentVersions(_Frozen):
    agent: str
    versions: dict[str, int] = Field(description="Version -> attempts seen with it ('' when none was recorded).")
    sweeps: int = Field(description="Sweeps in which this agent ran on the host.")


class HostView(_Frozen):
    name: str
    host: HostSummary | None = Field(description="The newest sweep's record of the host.")
    host_sweep: str
    grades: list[GradePoint] = Field(description="Newest first.")
    bars: list[Bar] = Field(description="The chart: oldest on the left.")
    agents: list[AgentVersions]
    speed: list[SweepSpeed] = Field(description="Newest first.")
    overall: SpeedSummary
    base_urls: list[str] = Field(description="The endpoints the agents were configured with (run_start.base_url).")
    reported_models: list[str] = Field(description="The model ids the endpoint reported in its replies.")
    problems: list[str] = Field(description="Sweeps or transcripts that could not be read, one line each.")


# -- caches: by the file's identity, so a changed file is read again ------------------------------------------------

_transcripts: dict[tuple[str, int, int], AttemptSpeed] = {}
_metas: dict[tuple[str, int, int], tuple[str, str]] = {}


class _SweepFacts(_Frozen):
    """What the host pages need of one sweep, for every host of it."""

    id: str
    label: str
    created_at: str
    hosts: dict[str, HostSummary]
    grades: dict[str, dict[str, int]] = Field(description="host -> 'agent\\0grade' -> cells.")
    cells: dict[str, list[tuple[str, str, int]]] = Field(description="host -> (cell id, agent, last recorded attempt).")


_sweeps: dict[tuple[str, int, int, int, int], _SweepFacts] = {}


def _identity(path: Path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def _remember(cache: dict, key: object, value: object) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _facts_of(sweep: SweepRecord) -> _SweepFacts:
    grades: dict[str, Counter[str]] = defaultdict(Counter)
    cells: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for c in sorted(sweep.cells, key=lambda c: c.id):
        # The last recorded attempt, as the index's cells row counts it (an attempt in flight is not a result yet).
        recorded = [a for a in sweep.attempts.get(c.id) or [] if a.status != "dispatched"]
        a = recorded[-1] if recorded else None
        grades[c.host][f"{c.agent}\0{shown_grade(a)}"] += 1
        if a is not None:
            cells[c.host].append((c.id, c.agent, a.attempt))
    return _SweepFacts(id=sweep.id, label=sweep.label, created_at=sweep.created_at, hosts=sweep.hosts,
                       grades={h: dict(n) for h, n in grades.items()}, cells=dict(cells))


def _sweep_facts(store: Store, sweep_id: str) -> _SweepFacts:
    d = store.sweep_dir(sweep_id)
    key = (str(d.resolve()), *_identity(d / "sweep.json"), *_identity(d / JOURNAL))
    facts = _sweeps.get(key)
    if facts is None:
        facts = _facts_of(store.load_sweep(sweep_id))
        _remember(_sweeps, key, facts)
    return facts


# -- grades over time ------------------------------------------------------------------------------------------------

def _point(sweep_id: str, label: str, created_at: str, by_agent_grade: dict[tuple[str, str], int], source: str) -> GradePoint:
    counts: Counter[str] = Counter()
    agents = set()
    for (agent, grade), n in by_agent_grade.items():
        counts[grade] += n
        agents.add(agent)
    ordered = {g: counts[g] for g in _COUNTED if counts.get(g)}
    ordered.update({g: n for g, n in sorted(counts.items()) if g not in ordered})
    grades = [g for g, n in counts.items() for _ in range(n)]
    return GradePoint(sweep_id=sweep_id, label=label, created_at=created_at, counts=ordered, rate=pass_rate(grades),
                      agents=sorted(agents), cells=sum(counts.values()), source=source)


def _from_index(store: Store, name: str) -> tuple[dict[str, GradePoint], set[str]]:
    """The host's grade points of the sweeps the index covers, and the ids of every sweep the index covers (for the
    host or not): a covered sweep without a point does not include the host."""
    got = store.query_index(("SELECT id, label, created_at FROM sweeps", ()), ("SELECT sweep_id, hosts FROM sweep_plans", ()),
                            ("SELECT sweep_id, agent, grade, COUNT(*) FROM cells WHERE host = ? "
                             "GROUP BY sweep_id, agent, grade", (name,)))
    if got is None:
        return {}, set()  # an index of an older layout, or damaged: the sweeps are read from their files
    sweeps = {r[0]: (r[1] or "", r[2] or "") for r in got[0]}
    plans, rows = got[1], got[2]
    cells: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
    for sweep_id, agent, grade, n in rows:
        cells[sweep_id][(agent or "", grade or "")] = int(n)
    covered: set[str] = set()
    points: dict[str, GradePoint] = {}
    for sweep_id, hosts_json in plans:
        if sweep_id not in sweeps:
            continue
        try:
            hosts = json.loads(hosts_json)
        except (TypeError, ValueError):
            continue
        if not isinstance(hosts, list):
            continue
        if name in hosts and sweep_id not in cells:
            continue  # planned with the host, but its cells' rows are not in the index (recorded before it kept them)
        covered.add(sweep_id)
        if name in hosts:
            label, created_at = sweeps[sweep_id]
            points[sweep_id] = _point(sweep_id, label, created_at, cells[sweep_id], "index")
    return points, covered


def _grades(store: Store, name: str, problems: list[str]) -> list[GradePoint]:
    points, covered = _from_index(store, name)
    on_disk = store.list_sweeps()
    for sweep_id in on_disk:
        if sweep_id in covered:
            continue
        try:
            facts = _sweep_facts(store, sweep_id)
        except FleetError as exc:
            problems.append(str(exc))
            continue
        if name in facts.hosts or name in facts.grades:
            pairs: dict[tuple[str, str], int] = {}
            for key, n in facts.grades.get(name, {}).items():
                agent, grade = key.split("\0", 1)
                pairs[(agent, grade)] = n
            points[sweep_id] = _point(sweep_id, facts.label, facts.created_at, pairs, "files")
    present = set(on_disk)
    return sorted((p for p in points.values() if p.sweep_id in present), key=lambda p: (p.created_at, p.sweep_id),
                  reverse=True)


def _bars(points: list[GradePoint]) -> list[Bar]:
    shown = list(reversed(points[:CHART_SWEEPS]))
    n = max(len(shown), 1)
    bars = []
    for k, p in enumerate(shown):
        rate = p.rate.rate
        bars.append(Bar(sweep_id=p.sweep_id, x=k / n, height=rate if rate is not None else 0.0,
                        text=f"{p.sweep_id}: {p.rate.all}", known=rate is not None))
    return bars


# -- speed and agents ------------------------------------------------------------------------------------------------

def _transcript_speed(store: Store, sweep_id: str, folder: Path) -> AttemptSpeed | None:
    path = folder / "transcript.jsonl"
    size, mtime = _identity(path)
    if size < 0:
        return None
    key = (str(path), size, mtime)
    speed = _transcripts.get(key)
    if speed is None:
        store.inside(sweep_id, path, str(path), "transcript.jsonl")
        speed = attempt_speed(path.read_bytes())
        _remember(_transcripts, key, speed)
    return speed


def _indexed_cells(store: Store, name: str, sweep_id: str) -> list[tuple[str, str, int]] | None:
    """The host's cells of an indexed sweep with their last recorded attempt, in cell order, from the index's
    ``cells`` rows (the sweep's file is not read); None when the index cannot be read."""
    got = store.query_index(("SELECT cell_id, agent, attempt FROM cells WHERE host = ? AND sweep_id = ? AND attempt > 0 "
                             "ORDER BY cell_id", (name, sweep_id)))
    if got is None:
        return None
    rows = got[0]
    return [(str(c), str(a or ""), int(n)) for c, a, n in rows]


def _meta_version(folder: Path) -> tuple[str, str]:
    """(agent_kind, agent_version) from meta.json, for an attempt that left no transcript."""
    path = folder / "meta.json"
    size, mtime = _identity(path)
    key = (str(path), size, mtime)
    found = _metas.get(key)
    if found is None:
        found = ("", "")
        if size >= 0:
            try:
                meta = read_meta(path)
            except FleetError:
                meta = None
            if isinstance(meta, AttemptMeta):
                found = (meta.agent_kind, meta.agent_version)
        _remember(_metas, key, found)
    return found


def read_host(store: Store, name: str) -> HostView:
    problems: list[str] = []
    grades = _grades(store, name, problems)
    if not grades:
        raise UsageError(f"no host {name!r} in any sweep of {store.root}")
    newest = grades[0]
    host: HostSummary | None = None
    try:
        host = _sweep_facts(store, newest.sweep_id).hosts.get(name)
    except FleetError as exc:
        problems.append(str(exc))
    recent = [p for p in grades if p.cells][:SPEED_SWEEPS]
    share = SPEED_ATTEMPTS // max(len(recent), 1)
    per_sweep: list[tuple[GradePoint, list[tuple[AttemptSpeed, str, str, int]]]] = []
    versions: dict[str, Counter[str]] = defaultdict(Counter)
    base_urls: list[str] = []
    reported: list[str] = []
    for point in recent:
        measured: list[tuple[AttemptSpeed, str, str, int]] = []
        cells = _indexed_cells(store, name, point.sweep_id) if point.source == "index" else None
        if cells is None:
            try:
                cells = _sweep_facts(store, point.sweep_id).cells.get(name, [])
            except FleetError as exc:
                problems.append(str(exc))
                continue
        for cell_id, agent, attempt in cells[:share]:
            try:
                folder = store.attempt_dir(point.sweep_id, cell_id, attempt)
                speed = _transcript_speed(store, point.sweep_id, folder)
                if speed is None:
                    versions[agent][_meta_version(folder)[1]] += 1
                    continue
            except (FleetError, OSError) as exc:
                problems.append(f"{point.sweep_id}/{cell_id}/attempt-{attempt}: {exc}")
                continue
            versions[agent][speed.agent_version] += 1
            for url in [speed.base_url] if speed.base_url else []:
                if url not in base_urls:
                    base_urls.append(url)
            reported.extend(m for m in speed.reported_models if m not in reported)
            if speed.bad_lines:
                problems.append(f"{folder / 'transcript.jsonl'}: {speed.bad_lines} line(s) not a valid event, skipped")
            measured.append((speed, point.sweep_id, cell_id, attempt))
        per_sweep.append((point, measured))
    speeds: list[SweepSpeed] = []
    summaries = [summarize(m) for _, m in per_sweep]
    for k, ((point, _), summary) in enumerate(zip(per_sweep, summaries)):
        older = next((s for s in summaries[k + 1:] if s.median_tps is not None), None)
        vs = ratio(summary.median_tps, older.median_tps if older else None)
        speeds.append(SweepSpeed(sweep_id=point.sweep_id, label=point.label, created_at=point.created_at, speed=summary,
                                 vs_previous=vs, slower=vs is not None and vs < SLOWER))
    agent_sweeps: Counter[str] = Counter(a for p in grades for a in p.agents)
    agents = [AgentVersions(agent=a, versions=dict(sorted(versions.get(a, Counter()).items())), sweeps=agent_sweeps[a])
              for a in sorted(agent_sweeps)]
    return HostView(name=name, host=host, host_sweep=newest.sweep_id, grades=grades, bars=_bars(grades), agents=agents,
                    speed=speeds, overall=summarize(x for _, m in per_sweep for x in m), base_urls=base_urls,
                    reported_models=reported, problems=problems[:20])


def host_page(dash: Dashboard, name: str, links: Links) -> str:
    return dash.render("host.html", links, h=read_host(dash.store, name))


def routes(dash: Dashboard) -> list[BaseRoute]:
    links = Links()

    async def host(request: Request) -> Response:
        name = request.path_params["name"]
        return HTMLResponse(await anyio.to_thread.run_sync(host_page, dash, name, links))

    return [Route("/hosts/{name}", host, name="host")]
