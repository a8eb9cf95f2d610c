"""The compare page over a real store (the real SweepWriter) and the replays pages over files the real
``fleet replay --json`` wrote, through real HTTP (Starlette's TestClient). Expected figures are worked out by hand
here; the replay's differ table is checked against what ``fleet replay`` itself prints in text."""

from __future__ import annotations

import html
import os
import re
import shutil
from pathlib import Path

from starlette.testclient import TestClient

from harness.dashboard.app import make_app
from harness.grading.model import Grade
from harness.core.records import Cell
from harness.core.sweep import SweepRecord
from harness.store import Store
from harness.core.transcript import ModelRequest, ModelResponse, OwnerReceipt, ReceiptEvent, RunEnd, RunStart, \
    TranscriptWriter, Usage
from tests.fixtures import PIXEL_FLEET
from tests.support import REPO, finished_result, run_fleet, synthetic_sweep

BASE, CAND = "20261201-010000-nightly", "20261202-010000-nightly"
D, N, P = "DELIVERED", "NOTHING", "PARTIAL"

# Per (host, item): the two repetitions' grades in the baseline and in the candidate.
PLAN = {
    (0, 1): ([D, D], [N, N]),  # regressed
    (0, 2): ([N, N], [D, D]),  # improved
    (0, 3): ([D, D], [D, D]),  # unchanged
    (0, 4): ([D, D], [D, N]),  # regressed: passed -> flaky
    (0, 5): ([N, N], [P, P]),  # changed
    (1, 1): ([D, D], [N, N]),  # regressed
    (1, 2): ([D, D], [N, N]),  # regressed
    (1, 3): ([D, D], [D, D]),  # unchanged
    (1, 4): ([D, D], [D, D]),  # unchanged
    (1, 5): ([N, N], [N, N]),  # unchanged
}


def _id(host: int, item: int, rep: int) -> str:
    return Cell.make_id(f"host{host}", f"{item:02d}-item", "builtin", rep)


def _write(store: Store, sweep_id: str, created_at: str, side: int) -> SweepRecord:
    sweep = synthetic_sweep(sweep_id, hosts=2, items=5, reps=2)
    sweep.label, sweep.created_at = "nightly", created_at
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        for (h, i), sides in PLAN.items():
            for rep, grade in enumerate(sides[side], start=1):
                cell = sweep.cell(_id(h, i, rep))
                assert w.record_attempt(sweep, finished_result(sweep, cell, 1))
                w.record_grade(sweep, cell.id, 1, Grade(grade=grade, outcome="none"))  # type: ignore[arg-type]
        w.set_status(sweep, "finished")
    return sweep


def _runs(tmp_path: Path) -> Path:
    store = Store(tmp_path / "runs")
    _write(store, BASE, "2026-12-01T01:00:00.000Z", 0)
    _write(store, CAND, "2026-12-02T01:00:00.000Z", 1)
    return store.root


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def _table(page: str, table_id: str) -> str:
    return page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]


def _rows(page: str) -> list[tuple[str, str, str]]:
    return re.findall(r'data-change="([a-z]+)" data-host="([^"]+)" data-item="([^"]+)"', _table(page, "rows"))


def test_changed_only_regressions_first_with_the_counts_rates_and_the_exact_sign_test(tmp_path: Path) -> None:
    page = TestClient(make_app(_runs(tmp_path))).get(f"/compare?baseline={BASE}&candidate={CAND}")
    assert page.status_code == 200
    assert _rows(page.text) == [
        ("regressed", "host0", "01-item"), ("regressed", "host0", "04-item"), ("regressed", "host1", "01-item"),
        ("regressed", "host1", "02-item"), ("improved", "host0", "02-item"), ("changed", "host0", "05-item")]
    counts = _text(page.text.split('id="counts"', 1)[1].split("</p>", 1)[0])
    assert "4 regressed" in counts and "1 improved" in counts and "1 changed" in counts and "4 unchanged" in counts
    # b = 4, c = 1: p = 2 * (C(5,0) + C(5,1)) / 2^5 = 12/32 = 3/8.
    sign = _text(page.text.split('id="sign-test"', 1)[1].split("</p>", 1)[0])
    assert "4 regressed, 1 improved" in sign and "p = 0.375" in sign and "exactly 3/8" in sign
    # Pass rates: the baseline 14 of 20 repetitions DELIVERED, the candidate 9 of 20.
    assert "14/20 (70 %)" in _text(page.text.split('id="baseline"', 1)[1].split("</tr>", 1)[0])
    assert "9/20 (45 %)" in _text(page.text.split('id="candidate"', 1)[1].split("</tr>", 1)[0])
    host1 = _text(re.search(r'<tr data-name="host1">(.*?)</tr>', _table(page.text, "per-host"), re.S).group(1))
    assert host1 == "host1 2 0 0 0 0 0 3 8/10 (80 %) 8/10 (80 %) 4/10 (40 %) 4/10 (40 %)"


def test_each_row_links_both_sweeps_cells_and_marks_the_flaky_group(tmp_path: Path) -> None:
    page = TestClient(make_app(_runs(tmp_path))).get(f"/compare?baseline={BASE}&candidate={CAND}").text
    row = re.search(r'data-host="host0" data-item="04-item".*?</tr>', page, re.S).group(0)
    for sweep_id in (BASE, CAND):
        for rep in (1, 2):
            assert f'href="/sweeps/{sweep_id}/cells/host0/04-item/builtin/r{rep}"' in row
    cand = _text(row.split('class="side cand">', 1)[1])
    assert cand.startswith("flaky 1/2 flaky pass@2") and "r2 NOTHING" in cand
    assert _text(row.split('class="side base">', 1)[1].split("</td>", 1)[0]).startswith("passed 2/2 pass@2")


def test_all_shows_the_unchanged_and_previous_is_the_earlier_sweep_of_the_label(tmp_path: Path) -> None:
    client = TestClient(make_app(_runs(tmp_path)))
    every = client.get(f"/compare?baseline=previous&candidate={CAND}&all=1")
    assert every.status_code == 200 and f"Compare {BASE} → {CAND}" in every.text
    assert [r for r in _rows(every.text) if r[0] == "unchanged"] == [
        ("unchanged", "host0", "03-item"), ("unchanged", "host1", "03-item"), ("unchanged", "host1", "04-item"),
        ("unchanged", "host1", "05-item")]


def test_the_page_is_the_same_without_the_index(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    before = TestClient(make_app(runs)).get(f"/compare?baseline=previous&candidate={CAND}&all=1").text
    (runs / "index.sqlite").unlink()
    after = TestClient(make_app(runs)).get(f"/compare?baseline=previous&candidate={CAND}&all=1").text
    assert after == before


def _error(resp, status: int) -> str:  # type: ignore[no-untyped-def]
    assert resp.status_code == status, resp.text
    line = resp.text.split('class="error-line">', 1)[1].split("</p>", 1)[0]
    assert "\n" not in line and "Traceback" not in resp.text
    return html.unescape(line)


def test_missing_or_bad_parameters_are_one_line(tmp_path: Path) -> None:
    client = TestClient(make_app(_runs(tmp_path)))
    assert "compare needs ?baseline=SWEEP&candidate=SWEEP" in _error(client.get(f"/compare?candidate={CAND}"), 400)
    assert "the candidate must be a sweep id" in _error(client.get(f"/compare?baseline={BASE}&candidate=previous"), 400)
    assert "no sweep 'nope'" in _error(client.get(f"/compare?baseline=nope&candidate={CAND}"), 404)
    assert "no sweep labelled 'nightly' was planned before" in _error(
        client.get(f"/compare?baseline=previous&candidate={BASE}"), 404)
    assert "bad sweep id" in _error(client.get(f"/compare?baseline=..%2F..&candidate={CAND}"), 404)


# -- replays ---------------------------------------------------------------------------------------------------------

EVIL = "<img src=x onerror=alert(1)>"


def _session(path: Path) -> None:
    """A short builtin transcript that delivers: one reply, a receipt, the end."""
    with TranscriptWriter(path) as w:
        w.append(RunStart(run_id="r", agent="builtin", agent_version="0.1.0", harness_commit="c", model="m",
                          base_url="http://127.0.0.1:9/v1", context=4096, max_output=512, stream=True, timeout_s=60,
                          retries=1, exec_timeout_s=10, workspace="/w", prompt_file="/p", prompt="p",
                          system_prompt="s", tools=[], budget_policy={}, python="3.11", platform="linux"))
        w.append(ModelRequest(round=1, max_tokens=512, stream=True, prompt_tokens_estimate=10, messages_added=[]))
        w.append(ModelResponse(round=1, text="done", tool_calls=[], finish_reason="stop", latency_s=0.1, attempts=1,
                               model="m", usage=Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2)))
        w.append(ReceiptEvent(receipt=OwnerReceipt(status="passed", text="done", source="model")))
        w.append(RunEnd(outcome="completed", exit_code=0, rounds=1, tool_calls=0, duration_s=0.2, usage=Usage()))


def _replay_runs(tmp_path: Path) -> tuple[Path, list[str]]:
    """runs/replays/nightly.json written by `fleet replay --json` over a transcript whose session name carries
    markup and the recorded pixel-fleet rounds, under two policies; and what the command prints in text."""
    runs = _runs(tmp_path)
    evil = tmp_path / f"{EVIL}.jsonl"
    _session(evil)
    args = [str(evil), str(PIXEL_FLEET / "inspection-budget-replay-round106-107.json"), "--policy", "default",
            "--policy", "docs/examples/no-deferral.toml"]
    out = run_fleet("replay", *args, "--json", "--jobs", "1", cwd=REPO)
    assert out.returncode == 0, out.stderr
    (runs / "replays").mkdir()
    (runs / "replays" / "nightly.json").write_text(out.stdout)
    text = run_fleet("replay", *args, "--jobs", "1", cwd=REPO)
    assert text.returncode == 0, text.stderr
    return runs, text.stdout.splitlines()


def test_a_replay_is_the_differ_table_fleet_replay_prints(tmp_path: Path) -> None:
    runs, printed = _replay_runs(tmp_path)
    client = TestClient(make_app(runs))
    page = client.get("/replays/nightly")
    assert page.status_code == 200
    assert "<img src=x" not in page.text and html.escape(EVIL, quote=False) in page.text
    text = _text(page.text)
    head = next(line for line in printed if line.startswith("default -> no-deferral: "))
    assert head.replace("->", "→") in text  # "default → no-deferral: 2 of 4 sessions differ, 2 byte-identical"
    diff = printed[printed.index(head) + 1:]
    diff = diff[:diff.index("")]
    assert diff, "the fixture's rounds differ between the two policies"
    table = _table(page.text, "lines")  # every session's line is there too
    differ = page.text.split('data-candidate="no-deferral"', 1)[1].split("</table>", 1)[0]
    for line in diff:
        session, changes, detail = re.split(r"\s{2,}", line.strip(), maxsplit=2)
        assert f"{session} {changes} {detail}" in _text(differ)
    for line in (x for x in printed if x.startswith("policy ")):
        assert line in text
    assert EVIL in _text(table)


def test_the_list_names_a_bad_file_and_still_shows_the_others(tmp_path: Path) -> None:
    runs, _ = _replay_runs(tmp_path)
    (runs / "replays" / "broken.json").write_text('{"hello": 1}\n')
    page = TestClient(make_app(runs)).get("/replays")
    assert page.status_code == 200
    listed = _table(page.text, "replays")
    assert 'href="/replays/nightly"' in listed and "default, no-deferral" in _text(listed)
    problems = _text(page.text.split('id="problems"', 1)[1].split("</ul>", 1)[0])
    assert "broken.json: line 1:" in problems and "source" in problems
    assert "broken" not in listed
    assert "line 1" in _error(TestClient(make_app(runs)).get("/replays/broken"), 500)


def test_a_name_that_leaves_the_folder_or_a_link_out_is_refused(tmp_path: Path) -> None:
    runs, _ = _replay_runs(tmp_path)
    outside = tmp_path / "elsewhere.json"
    shutil.copy(runs / "replays" / "nightly.json", outside)
    os.symlink(outside, runs / "replays" / "out.json")
    client = TestClient(make_app(runs))
    assert "leads outside" in _error(client.get("/replays/out"), 403)
    assert "not a replay's name" in _error(client.get("/replays/..%2Felsewhere"), 403)
    assert "not a replay's name" in _error(client.get("/replays/a/b"), 403)
    listing = client.get("/replays")
    assert "leads outside" in _text(listing.text.split('id="problems"', 1)[1]) and 'href="/replays/out"' not in listing.text
    assert _error(client.get("/replays/missing"), 404).startswith("no replay 'missing'")


def test_a_replays_folder_that_is_a_link_out_is_refused(tmp_path: Path) -> None:
    runs, _ = _replay_runs(tmp_path)
    shutil.move(runs / "replays", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", runs / "replays")
    client = TestClient(make_app(runs))
    assert "leads outside the results directory" in _error(client.get("/replays/nightly"), 403)
    assert 'href="/replays/nightly"' not in client.get("/replays").text


def test_a_reviewers_override_counts_and_the_page_says_so(tmp_path: Path) -> None:
    from harness.store import override_grade

    runs = _runs(tmp_path)
    # host1/05-item r2 was NOTHING in both: overridden to DELIVERED in the candidate, the group becomes flaky.
    override_grade(Store(runs), CAND, _id(1, 5, 2), None, "DELIVERED", "the checks missed the file", "ana")
    page = TestClient(make_app(runs)).get(f"/compare?baseline={BASE}&candidate={CAND}").text
    assert ("improved", "host1", "05-item") in _rows(page)
    row = re.search(r'data-host="host1" data-item="05-item".*?</tr>', page, re.S).group(0)
    cand = _text(row.split('class="side cand">', 1)[1])
    assert cand.startswith("flaky 1/2 (1 by override)") and "r2 DELIVERED* override of NOTHING" in cand
    assert "10/20 (50 %)" in _text(page.split('id="candidate"', 1)[1].split("</tr>", 1)[0])
