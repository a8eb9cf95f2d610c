"""The sweeps list (from the index), a sweep's matrix, and its live updates, over real HTTP requests to the app
on results directories the real SweepWriter wrote."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from harness.dashboard.app import make_app
from harness.dashboard.listing import read_listing
from harness.grading.model import Grade
from harness.store import Store
from harness.views.sweeplist import list_sweeps
from tests.dashboard.stores import cid, sweep_of, write_sweep
from tests.support import finished_result


def _nightlies(store: Store) -> list:
    a = write_sweep(store, sweep_of("20261201-010000-nightly", label="nightly", created_at="2026-12-01T01:00:00.000Z",
                                    hosts=2, items=2),
                    {cid(0, 1): ["DELIVERED"], cid(0, 2): ["DELIVERED"], cid(1, 1): ["HF", "DELIVERED"],
                     cid(1, 2): ["PARTIAL"]})
    b = write_sweep(store, sweep_of("20261202-010000-nightly", label="nightly", created_at="2026-12-02T01:00:00.000Z",
                                    hosts=2, items=2),
                    {cid(0, 1): ["PARTIAL"], cid(0, 2): ["DELIVERED"], cid(1, 1): ["HF"], cid(1, 2): ["NOTHING"]},
                    stops={cid(0, 1): "consecutive_failures"})
    c = write_sweep(store, sweep_of("20261202-020000-other", label="other", created_at="2026-12-02T02:00:00.000Z"),
                    {cid(0, 1): ["DELIVERED"]}, finish=False)
    return [a, b, c]


def test_the_list_from_the_index_says_what_the_sweep_files_say(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    from_index = read_listing(store)
    copy = Store(tmp_path / "copy")
    shutil.copytree(store.root, copy.root)
    (copy.root / "index.sqlite").unlink()
    from_files = list_sweeps(copy)
    assert [s.id for s in from_index.sweeps] == [s.id for s in from_files.sweeps]
    for mine, theirs in zip(from_index.sweeps, from_files.sweeps):
        assert mine == theirs, mine.id
    b = from_index.sweeps[1]
    assert (b.rate.delivered, b.rate.graded, b.rate.measured) == (1, 4, 3)
    # A sweep left running by a writer that is gone shows interrupted, as fleet status says.
    assert from_index.sweeps[0].status == "interrupted"
    assert from_index.previous == {"20261202-010000-nightly": "20261201-010000-nightly"}
    [trend] = from_index.trends
    assert trend.label == "nightly" and [p.rate for p in trend.points] == [0.75, 0.25]


def test_the_list_reads_the_index_not_every_sweep_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)

    def no_reading(self: Store, sweep_id: str) -> None:
        raise AssertionError(f"read {sweep_id}'s files")

    monkeypatch.setattr(Store, "load_sweep", no_reading)
    assert len(read_listing(store).sweeps) == 3
    assert len(list_sweeps(store, label="nightly").sweeps) == 2  # fleet sweeps: the same lines


def test_without_the_index_or_with_an_older_one_the_files_are_read(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    want = read_listing(store)
    db = sqlite3.connect(store.root / "index.sqlite")
    with db:
        db.execute("DELETE FROM cells WHERE sweep_id = '20261201-010000-nightly'")  # an index from before the cells table
        db.execute("DROP TABLE sweep_plans")  # and from before the plans: the whole index is set aside
    db.close()
    assert read_listing(store) == want
    (store.root / "index.sqlite").unlink()
    assert read_listing(store) == want


def test_an_unreadable_sweep_is_named_and_the_others_still_show(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    (store.root / "index.sqlite").unlink()
    (store.root / "20261202-010000-nightly" / "sweep.json").write_text("{not json")
    page = TestClient(make_app(store.root)).get("/")
    assert page.status_code == 200
    assert "Unreadable sweeps" in page.text and "20261202-010000-nightly" in page.text
    assert "20261201-010000-nightly" in page.text and "20261202-020000-other" in page.text


def test_the_matrix_colours_each_cell_marks_its_stop_and_the_regressions(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    client = TestClient(make_app(store.root))
    page = client.get("/sweeps/20261202-010000-nightly")
    assert page.status_code == 200
    html = page.text
    chip = html[html.index(f'id="cell-{cid(0, 1)}"'):]
    chip = chip[:chip.index("</a>")]
    # Was DELIVERED the night before, PARTIAL now with a stop: coloured, badged, marked regressed.
    assert "g-partial" in html[html.rindex("<a", 0, html.index(f'id="cell-{cid(0, 1)}"')):html.index(f'id="cell-{cid(0, 1)}"')]
    assert "consecutive_failures" in chip and "regressed" in chip
    assert 'data-grade="HARNESS_FAILURE"' in html and "HARNESS_FAILURE(host_lost)" in html
    # host0 item 1 regressed; host1 item 2 (PARTIAL to NOTHING) changed; host1 item 1 (to a harness failure) unmeasured
    assert "<b>1</b> regressed" in html and html.count("regressed-badge") == 1
    assert f'href="/sweeps/20261202-010000-nightly/cells/{cid(0, 1)}"' in html
    # The first of its label has nothing to regress against.
    first = client.get("/sweeps/20261201-010000-nightly").text
    assert "regressed-badge" not in first and "2 attempts" in first


def test_a_stop_recorded_before_summaries_kept_it_comes_from_the_index(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    d = store.root / "20261202-010000-nightly"
    rec = json.loads((d / "sweep.json").read_text())
    for runs in rec["attempts"].values():
        for a in runs:
            a.pop("stop", None)
    (d / "sweep.json").write_text(json.dumps(rec))
    html = TestClient(make_app(store.root)).get("/sweeps/20261202-010000-nightly").text
    assert "consecutive_failures" in html


@pytest.mark.parametrize("url", ["/sweeps/%2e%2e", "/sweeps/.hidden", "/sweeps/20261299-000000-none", "/sweeps/a%00b"])
def test_a_bad_or_missing_sweep_is_one_line_not_a_traceback(tmp_path: Path, url: str) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    page = TestClient(make_app(store.root), raise_server_exceptions=False).get(url)
    assert page.status_code in (404, 403), page.text
    assert "Traceback" not in page.text and 'class="error-line"' in page.text


def test_stored_strings_are_text_in_the_list_and_the_matrix(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    s = sweep_of("20261201-010000-x", label='<script>alert(1)</script>', items=1)
    s.items["01-item"] = s.items["01-item"].model_copy(update={"title": '<img src=x onerror=alert(1)>'})
    s.hosts["host0"] = s.hosts["host0"].model_copy(update={"model_id": '"><script>alert(2)</script>'})
    write_sweep(store, s, {cid(0, 1): ["DELIVERED"]})
    client = TestClient(make_app(store.root))
    for url in ("/", "/sweeps/20261201-010000-x"):
        html = client.get(url).text
        assert "<script>alert" not in html and "<img src=x" not in html, url
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get("/").text
    matrix = client.get("/sweeps/20261201-010000-x").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in matrix and "&#34;&gt;&lt;script&gt;alert(2)" in matrix


def test_every_page_carries_the_content_security_policy(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    client = TestClient(make_app(store.root), raise_server_exceptions=False)
    for url in ("/", "/sweeps/20261202-010000-nightly", "/static/dashboard.js", "/sweeps/none"):
        r = client.get(url)
        assert "script-src 'self'" in r.headers["content-security-policy"], url
        assert r.headers["x-content-type-options"] == "nosniff"


def _events(client: TestClient, url: str, until: str, timeout: float = 20.0) -> list[tuple[str, dict]]:
    got: list[tuple[str, dict]] = []
    deadline = time.monotonic() + timeout
    with client.stream("GET", url) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                got.append((kind, json.loads(line[6:])))
                if kind == until:
                    break
            assert time.monotonic() < deadline, got
    return got


class _Coordinator(threading.Thread):
    """A writer of one sweep in its own thread (as a coordinator is another process): plans it, marks it running,
    waits for ``go``, then runs ``steps`` (each given the writer and the sweep), then finishes it."""

    def __init__(self, store: Store, sweep, steps, pause: float = 0.3) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.store, self.sweep, self.steps, self.pause = store, sweep, steps, pause
        self.running, self.go = threading.Event(), threading.Event()

    def run(self) -> None:
        with self.store.writer(self.sweep.id) as w:
            w.save_sweep(self.sweep)
            w.set_status(self.sweep, "running")
            self.running.set()
            self.go.wait(20)
            for step in self.steps:
                time.sleep(self.pause)
                step(w, self.sweep)
            time.sleep(self.pause)
            w.set_status(self.sweep, "finished")


def _graded(cell_id: str, grade: str):  # type: ignore[no-untyped-def]
    def step(w, sweep) -> None:  # type: ignore[no-untyped-def]
        w.record_attempt(sweep, finished_result(sweep, sweep.cell(cell_id), 1))
        w.record_grade(sweep, cell_id, 1, Grade(grade=grade, outcome="none"))  # type: ignore[arg-type]
    return step


def _since(page: str) -> str:
    return page.split('data-since="')[1].split('"')[0]


def test_a_running_sweep_sends_each_changed_cell_then_its_end(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    coordinator = _Coordinator(store, sweep_of("20261201-010000-live", items=2), [_graded(cid(0, 2), "PARTIAL")])
    coordinator.start()
    assert coordinator.running.wait(10)
    client = TestClient(make_app(store.root, live_poll_s=0.05))
    page = client.get("/sweeps/20261201-010000-live").text
    assert 'data-live="/sweeps/20261201-010000-live/events"' in page and ">running<" in page
    coordinator.go.set()
    got = _events(client, f"/sweeps/20261201-010000-live/events?since={_since(page)}", until="end")
    coordinator.join(10)
    assert ("status", {"status": "finished"}) in got
    cells = [d for k, d in got if k == "cell"]
    assert cells and {d["cell"] for d in cells} == {cid(0, 2)}  # only the cell that changed
    assert cells[-1]["grade"] == "PARTIAL" and "g-partial" in cells[-1]["html"]
    # A finished sweep's page does not listen.
    assert 'data-live=""' in client.get("/sweeps/20261201-010000-live").text


def test_a_change_between_the_render_and_the_stream_is_not_lost(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    gap = threading.Event()

    def between(w, sweep) -> None:  # type: ignore[no-untyped-def]
        _graded(cid(0, 1), "DELIVERED")(w, sweep)
        gap.set()

    coordinator = _Coordinator(store, sweep_of("20261201-010000-gap", items=2), [between], pause=0.0)
    coordinator.start()
    assert coordinator.running.wait(10)
    client = TestClient(make_app(store.root, live_poll_s=0.05))
    page = client.get("/sweeps/20261201-010000-gap").text
    coordinator.go.set()
    assert gap.wait(10)
    got = _events(client, f"/sweeps/20261201-010000-gap/events?since={_since(page)}", until="end")
    coordinator.join(10)
    sent = {d["cell"]: d["grade"] for k, d in got if k == "cell"}
    assert sent.get(cid(0, 1)) == "DELIVERED"


def test_the_index_keeps_one_row_per_cell_current(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _nightlies(store)
    db = sqlite3.connect(store.root / "index.sqlite")
    rows = {r[0]: r[1:] for r in db.execute(
        "SELECT cell_id, attempts, attempt, status, grade, auto_grade, stop FROM cells WHERE sweep_id = ?",
        ("20261202-010000-nightly",))}
    first = {r[0]: r[1:] for r in db.execute("SELECT cell_id, attempts, attempt, status, grade FROM cells WHERE sweep_id = ?",
                                            ("20261201-010000-nightly",))}
    db.close()
    assert rows[cid(0, 1)] == (1, 1, "finished", "PARTIAL", "PARTIAL", "consecutive_failures")
    assert rows[cid(1, 1)] == (1, 1, "harness_failure", "HARNESS_FAILURE", "", "")
    assert first[cid(1, 1)] == (2, 2, "finished", "DELIVERED")
    assert len(rows) == 4


def test_the_previous_sweeps_states_from_the_index_are_the_ones_its_files_give(tmp_path: Path) -> None:
    # The matrix reads the previous sweep of its label from the index's cells rows; every kind of cell (passed,
    # failed, a harness failure, not graded, an override either way, repetitions that disagree) must come out as
    # compare decides it from the files.
    from harness.views.comparison import _states
    from harness.dashboard.matrix import _indexed_states
    from harness.store import override_grade

    store = Store(tmp_path / "runs")
    prev = write_sweep(store, sweep_of("20261201-010000-n", label="n", hosts=2, items=3, reps=2),
                       {cid(0, 1, 1): ["DELIVERED"], cid(0, 1, 2): ["PARTIAL"], cid(0, 2, 1): ["HF"],
                        cid(0, 2, 2): ["HF", "NOTHING"], cid(0, 3, 1): [""], cid(1, 1, 1): ["PARTIAL"],
                        cid(1, 1, 2): ["PARTIAL"], cid(1, 2, 1): ["DELIVERED"], cid(1, 2, 2): ["DELIVERED"],
                        cid(1, 3, 1): ["HF"]})
    override_grade(store, prev.id, cid(1, 1, 1), 1, "DELIVERED", "the page is fine", "ana")
    override_grade(store, prev.id, cid(1, 2, 2), 1, "HARNESS_FAILURE", "the host's GPU was throttled", "ana")
    from_files = _states(store.load_sweep(prev.id))
    assert len(set(from_files.values())) == 4  # passed, failed, flaky and unmeasured are all there
    assert _indexed_states(store, prev.id) == from_files
    # A sweep the index does not call finished, or whose cells it does not all have, is read from its files.
    running = write_sweep(store, sweep_of("20261201-020000-n", label="n"), {cid(0, 1): ["DELIVERED"]}, finish=False)
    assert _indexed_states(store, running.id) is None
    db = sqlite3.connect(store.root / "index.sqlite")
    with db:
        db.execute("DELETE FROM cells WHERE sweep_id = ? AND cell_id = ?", (prev.id, cid(0, 1, 1)))
    db.close()
    assert _indexed_states(store, prev.id) is None


def test_a_chip_escapes_every_stored_string_in_its_text_and_attributes() -> None:
    # The matrix's chips are built in Python (chip.py), not by the template's autoescape: every field is planted.
    from html.parser import HTMLParser

    from harness.dashboard.chip import chip_markup
    from harness.dashboard.context import Links
    from harness.dashboard.matrix import Chip

    bad = '"><script>alert(1)</script><img src=x onerror=alert(2) x="'
    chip = Chip(cell=f"{bad}/{bad}/{bad}/r2", host=bad, item=bad, agent=bad, rep=2, grade=bad, text=bad,
                automatic=bad, stop=bad, duration_s=3.0, attempts=2, running=True, regressed=True)
    out = str(chip_markup(chip, "20261201-010000-x", Links()))
    tags: list[tuple[str, dict]] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list) -> None:
            tags.append((tag, dict(attrs)))

    Tags().feed(out)
    # One link and its spans, nothing else; every planted string came back whole as an attribute's value.
    assert [t for t, _ in tags] == ["a", "span", "span", "span", "span", "span"]
    a = tags[0][1]
    assert set(a) == {"class", "id", "data-cell", "data-host", "data-item", "data-agent", "data-grade", "href", "title"}
    assert a["data-host"] == a["data-item"] == a["data-agent"] == a["data-grade"] == bad
    assert a["data-cell"] == chip.cell and a["href"].startswith("/sweeps/20261201-010000-x/cells/%22%3E")
    assert "<script>" not in out and "<img" not in out
