"""The host page over a real store (the real SweepWriter, transcripts written by the real TranscriptWriter) through
real HTTP (Starlette's TestClient): its model, agents and versions, grades over time from the index (and without
it), and the model's measured speed, with numbers worked out by hand here."""

from __future__ import annotations

import html
import re
from pathlib import Path

from starlette.testclient import TestClient

from harness.dashboard.app import make_app
from harness.grading.model import Grade
from harness.core.records import Artifact, Cell
from harness.core.sweep import SweepRecord
from harness.store import Store
from harness.core.transcript import ModelRequest, ModelResponse, RunEnd, RunStart, TranscriptWriter, Usage
from tests.support import finished_result, synthetic_sweep

SCRIPT_MODEL = "<script>alert('model')</script>qwen"
IMG_VERSION = "<img src=x onerror=alert(1)>0.2"
HOST = "host0"


def _transcript(path: Path, replies: list[tuple[float, int | None]], *, version: str = "0.1.0",
                model: str = "qwen") -> bytes:
    """A transcript with one model_response per (latency_s, completion_tokens); None tokens: no usage."""
    with TranscriptWriter(path) as w:
        w.append(RunStart(run_id="r", agent="builtin", agent_version=version, harness_commit="c", model=model,
                          base_url="http://127.0.0.1:9/v1", context=4096, max_output=512, stream=True, timeout_s=60,
                          retries=1, exec_timeout_s=10, workspace="/w", prompt_file="/p", prompt="p",
                          system_prompt="s", tools=[], budget_policy={}, python="3.11", platform="linux"))
        for n, (latency, tokens) in enumerate(replies, start=1):
            w.append(ModelRequest(round=n, max_tokens=512, stream=True, prompt_tokens_estimate=10, messages_added=[]))
            w.append(ModelResponse(round=n, text="ok", tool_calls=[], finish_reason="stop", latency_s=latency,
                                   attempts=1, model=model,
                                   usage=None if tokens is None else Usage(prompt_tokens=5, completion_tokens=tokens,
                                                                           total_tokens=5 + tokens)))
        w.append(RunEnd(outcome="completed", exit_code=0, rounds=len(replies), tool_calls=0, duration_s=1.0,
                        usage=Usage()))
    return path.read_bytes()


def _sweep(sweep_id: str, created_at: str, *, model_id: str = "qwen") -> SweepRecord:
    s = synthetic_sweep(sweep_id, hosts=2, items=3)
    s.label, s.created_at = "nightly", created_at
    s.hosts[HOST] = s.hosts[HOST].model_copy(update={"model_id": model_id, "model_base_url": "http://10.0.0.5:8000/v1",
                                                     "context": 32768, "max_output": 2048, "tags": ["gpu", "a100"]})
    return s


def _record(store: Store, tmp: Path, sweep: SweepRecord, grades: dict[str, str],
            replies: dict[str, list[tuple[float, int | None]]], version: str = "0.1.0") -> None:
    """Save ``sweep``, record one attempt per cell (a transcript with ``replies[cell id]`` when given) and grade it."""
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        for c in sweep.cells:
            artifacts = [Artifact.of("answer.txt", b"done")]
            if c.id in replies:
                data = _transcript(tmp / f"{sweep.id}-{c.item}-{c.host}.jsonl", replies[c.id], version=version)
                artifacts.append(Artifact.of("transcript.jsonl", data))
            assert w.record_attempt(sweep, finished_result(sweep, c, 1, artifacts=artifacts))
            grade = grades.get(c.id, "DELIVERED")
            w.record_grade(sweep, c.id, 1, Grade(grade=grade, outcome="none",  # type: ignore[arg-type]
                                                 failure="model_endpoint" if grade == "HARNESS_FAILURE" else ""))
        w.set_status(sweep, "finished")


def _cell(item: int, host: str = HOST) -> str:
    return Cell.make_id(host, f"{item:02d}-item", "builtin", 1)


OLD, MID, NEW = "20261201-010000-nightly", "20261202-010000-nightly", "20261203-010000-nightly"


def _store(tmp_path: Path) -> Path:
    """Three nightly sweeps. host0's grades: DELIVERED, PARTIAL, HARNESS_FAILURE in each; host1 all DELIVERED.

    Speeds (tokens/s of each reply = tokens / latency):
    - OLD: 100/1.0=100, 100/2.0=50, 100/0.5=200, 400/4.0=100, and one reply without usage: median 100, p90 200.
    - MID: the same as OLD.
    - NEW: 100/2.0=50, 100/4.0=25, 100/1.0=100, 400/8.0=50: median 50 (half), p90 100, largest 400 tokens.
    A wrong formula (total tokens over total latency: 700/7.5=93.3, 700/15=46.7) gives other figures."""
    runs = tmp_path / "runs"
    store = Store(runs)
    grades = {_cell(2): "PARTIAL", _cell(3): "HARNESS_FAILURE"}
    fast = {_cell(1): [(1.0, 100), (2.0, 100), (0.5, 100)], _cell(2): [(4.0, 400), (0.3, None)]}
    slow = {_cell(1): [(2.0, 100), (4.0, 100)], _cell(2): [(1.0, 100), (8.0, 400)]}
    _record(store, tmp_path, _sweep(OLD, "2026-12-01T01:00:00.000Z"), grades, fast)
    _record(store, tmp_path, _sweep(MID, "2026-12-02T01:00:00.000Z"), grades, fast)
    _record(store, tmp_path, _sweep(NEW, "2026-12-03T01:00:00.000Z", model_id=SCRIPT_MODEL), grades, slow,
            version=IMG_VERSION)
    return runs


def _row(page: str, table: str, sweep_id: str) -> str:
    body = page.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    m = re.search(rf'<tr data-sweep="{re.escape(sweep_id)}"[^>]*>(.*?)</tr>', body, re.S)
    assert m, (table, sweep_id)
    return m.group(1)


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def _cls(row: str, name: str) -> str:
    m = re.search(rf'class="num {name}">(.*?)</td>', row, re.S)
    assert m, name
    return _text(m.group(1))


def test_the_speed_per_sweep_is_the_median_and_p90_of_each_replys_tokens_per_second(tmp_path: Path) -> None:
    page = TestClient(make_app(_store(tmp_path))).get(f"/hosts/{HOST}")
    assert page.status_code == 200
    new, old = _row(page.text, "speed", NEW), _row(page.text, "speed", OLD)
    assert (_cls(old, "median-tps"), _cls(old, "p90-tps")) == ("100.0", "200.0")
    assert (_cls(new, "median-tps"), _cls(new, "p90-tps")) == ("50.0", "100.0")
    # Latency: OLD 0.5, 1, 2, 4 -> median 1.5, p90 (nearest rank, 4th of 4) 4; NEW 1, 2, 4, 8 -> 3 and 8.
    assert (_cls(old, "median-latency"), _cls(old, "p90-latency")) == ("1.500 s", "4.000 s")
    assert (_cls(new, "median-latency"), _cls(new, "p90-latency")) == ("3.000 s", "8.000 s")
    assert _cls(old, "replies").startswith("4 (+1 without usage")
    assert _cls(new, "replies") == "4"
    # Half the previous sweep's median: marked slower; the previous one was as fast as the one before it.
    assert f'<tr data-sweep="{NEW}" class="slower">' in page.text
    assert _cls(new, "vs").startswith("50 %") and "slower" in _cls(new, "vs")
    assert _cls(_row(page.text, "speed", MID), "vs") == "100 %"
    # The largest reply links to its cell and attempt.
    assert f'href="/sweeps/{NEW}/cells/{HOST}/02-item/builtin/r1?attempt=1">400</a>' in new


def test_grades_over_time_are_the_hosts_cells_only_newest_first(tmp_path: Path) -> None:
    page = TestClient(make_app(_store(tmp_path))).get(f"/hosts/{HOST}").text
    body = page.split('id="grades"', 1)[1].split("</table>", 1)[0]
    assert body.index(NEW) < body.index(MID) < body.index(OLD)
    row = _text(_row(page, "grades", MID))
    # host0: DELIVERED, PARTIAL, HARNESS_FAILURE -> 1 of 3 graded, 1 of 2 measured; host1's three are not counted.
    assert "1/3 (33 %)" in row and "1/2 (50 %)" in row
    assert "DELIVERED: 1" in row and "PARTIAL: 1" in row and "HARNESS_FAILURE: 1" in row
    assert page.count('class="host-bar"') == 3  # one bar per sweep in the chart


def test_the_model_comes_from_the_newest_sweep_and_stored_strings_are_escaped(tmp_path: Path) -> None:
    page = TestClient(make_app(_store(tmp_path))).get(f"/hosts/{HOST}").text
    assert "<script>alert" not in page and "<img src=x" not in page
    model = page.split('id="model-id">', 1)[1].split("</dd>", 1)[0]
    assert model.startswith("&lt;script&gt;") and html.unescape(model) == SCRIPT_MODEL  # the newest sweep's, as text
    assert "http://10.0.0.5:8000/v1" in page and "32768" in page and "gpu, a100" in page
    agents = _text(page.split('id="agents"', 1)[1].split("</table>", 1)[0])
    # The versions of the recent attempts' transcripts: 2 attempts with a transcript in each sweep.
    assert "0.1.0 (4)" in agents and f"{IMG_VERSION} (2)" in agents


def test_without_the_index_the_page_is_the_same(tmp_path: Path) -> None:
    runs = _store(tmp_path)
    client = TestClient(make_app(runs))
    before = client.get(f"/hosts/{HOST}").text
    (runs / "index.sqlite").unlink()
    after = TestClient(make_app(runs)).get(f"/hosts/{HOST}").text
    for table in ("grades", "speed", "agents"):
        assert _text(before.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]) == \
            _text(after.split(f'id="{table}"', 1)[1].split("</table>", 1)[0])


def test_grades_of_indexed_sweeps_are_read_from_the_index_not_their_files(tmp_path: Path) -> None:
    runs = _store(tmp_path)
    store = Store(runs)
    extra = [f"2026113{n}-010000-nightly" for n in range(5)]
    for n, sweep_id in enumerate(extra):
        _record(store, tmp_path, _sweep(sweep_id, f"2026-11-3{n}T01:00:00.000Z"), {}, {})
    for sweep_id in extra:  # older than the three the speed reads: only the index can tell their grades now
        (runs / sweep_id / "sweep.json").write_text("not json")
    page = TestClient(make_app(runs)).get(f"/hosts/{HOST}")
    assert page.status_code == 200
    for sweep_id in extra:
        assert "3/3 (100 %)" in _text(_row(page.text, "grades", sweep_id))


def test_a_changed_transcript_is_read_again(tmp_path: Path) -> None:
    runs = _store(tmp_path)
    client = TestClient(make_app(runs))
    assert _cls(_row(client.get(f"/hosts/{HOST}").text, "speed", NEW), "median-tps") == "50.0"
    path = runs / NEW / _cell(1) / "attempt-1" / "transcript.jsonl"
    _transcript(path, [(1.0, 300), (1.0, 300)])  # rewritten: 300 tokens/s twice
    # NEW's replies: 300, 300 and cell 2's 100, 50 -> median (100 + 300) / 2 = 200
    assert _cls(_row(client.get(f"/hosts/{HOST}").text, "speed", NEW), "median-tps") == "200.0"


def test_a_host_no_sweep_has_is_one_line_404(tmp_path: Path) -> None:
    page = TestClient(make_app(_store(tmp_path))).get("/hosts/tower9")
    assert page.status_code == 404
    line = page.text.split('class="error-line">', 1)[1].split("</p>", 1)[0]
    assert "no host &#39;tower9&#39;" in line and "\n" not in line


def test_p90_is_the_nearest_rank_and_a_bad_line_is_counted_not_fatal(tmp_path: Path) -> None:
    from harness.dashboard.speed import attempt_speed, percentile

    assert percentile([float(v) for v in range(10, 0, -1)], 0.9) == 9.0  # the 9th smallest of ten
    assert percentile([float(v) for v in range(1, 12)], 0.9) == 10.0  # ceil(9.9) = 10th of eleven
    assert percentile([], 0.9) is None
    data = _transcript(tmp_path / "t.jsonl", [(2.0, 50), (0.0, 10), (1.0, None)])
    torn = data + b'{"schema_version": 1, "seq": 9, "event": "model_response", "round": 4, "te'
    speed = attempt_speed(torn)
    assert [(r.latency_s, r.completion_tokens) for r in speed.replies] == [(2.0, 50)]
    assert speed.unmeasured == 2 and speed.bad_lines == 1 and speed.agent_version == "0.1.0"
