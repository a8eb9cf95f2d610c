"""``fleet compare`` and ``fleet sweeps`` on sweeps written through the real store writer: every kind of change,
repetitions (pass@k, flaky), harness failures as unmeasured, the exact sign test, ``previous``, the exit codes
and the listing."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from harness.views.comparison import CHANGES, compare_sweeps, sign_test
from harness.core.errors import UsageError
from harness.grading import Grade
from harness.core.records import Cell
from harness.core.sweep import SweepRecord
from harness.views.report import cell_results, write_report
from harness.grading.scale import pass_rate
from harness.store import Store
from harness.views.sweeplist import list_sweeps, previous_sweep
from tests.support import assert_one_line_error, finished_result, run_fleet, synthetic_sweep

COMPUTED = {"rate", "rate_without_failures"}
"""PassRate's computed fields, left out where a test names the counts."""
HF = "HF"
"""An attempt the harness failed (status harness_failure, reason host_lost), as a grade list's entry."""
HF_GRADE = "HARNESS_FAILURE"
"""An attempt that ran but whose grade is a harness failure (model_endpoint)."""


def _write(store: Store, sweep: SweepRecord, attempts: dict[str, list[str]]) -> SweepRecord:
    """Save ``sweep`` and record, per cell id, one attempt per entry of its list: a grade name, HF_GRADE (graded
    HARNESS_FAILURE), HF (the attempt itself a harness failure) or "" (finished, not graded); a cell left out has
    no attempt (pending)."""
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        for cell_id, grades in attempts.items():
            cell = sweep.cell(cell_id)
            for k, g in enumerate(grades, start=1):
                if g == HF:
                    assert w.record_attempt(sweep, finished_result(sweep, cell, k, status="harness_failure",
                                                                   reason="host_lost", exit_code=None))
                    continue
                assert w.record_attempt(sweep, finished_result(sweep, cell, k))
                if g:
                    w.record_grade(sweep, cell.id, k, Grade(grade=g, outcome="none",  # type: ignore[arg-type]
                                                            failure="model_endpoint" if g == HF_GRADE else ""))
        w.set_status(sweep, "finished")
    return store.load_sweep(sweep.id)


def _sweep(sweep_id: str, *, label: str = "", created_at: str = "", hosts: int = 1, items: int = 3, reps: int = 1,
           drop: tuple[str, ...] = ()) -> SweepRecord:
    s = synthetic_sweep(sweep_id, hosts=hosts, items=items, reps=reps)
    s.label = label
    if created_at:
        s.created_at = created_at
    s.cells = [c for c in s.cells if c.id not in drop]
    return s


def _id(host: int, item: int, rep: int = 1) -> str:
    return Cell.make_id(f"host{host}", f"{item:02d}-item", "builtin", rep)


def _changes(result) -> dict[tuple[str, str], str]:  # type: ignore[no-untyped-def]
    return {(r.host, r.item): r.change for r in result.rows}


def test_every_kind_of_change_is_told_apart_and_regressions_come_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    base = _write(store, _sweep("20261201-000000-a", hosts=2, items=6, drop=(_id(1, 6),)), {
        _id(0, 1): ["DELIVERED"], _id(0, 2): ["DELIVERED"], _id(0, 3): ["PARTIAL"], _id(0, 4): ["NOTHING"],
        _id(0, 5): ["DELIVERED"], _id(0, 6): [HF], _id(1, 1): ["CODE_IN_CHAT"], _id(1, 2): ["DELIVERED"],
        _id(1, 3): ["NOTHING"], _id(1, 4): ["DELIVERED"], _id(1, 5): ["PARTIAL"]})
    cand = _write(store, _sweep("20261201-000100-b", hosts=2, items=6, drop=(_id(1, 5),)), {
        _id(0, 1): ["DELIVERED"], _id(0, 2): ["NOTHING"], _id(0, 3): ["DELIVERED"], _id(0, 4): ["PARTIAL"],
        _id(0, 5): [HF_GRADE], _id(0, 6): ["DELIVERED"], _id(1, 1): ["CODE_IN_CHAT"], _id(1, 2): [""],
        _id(1, 3): [HF, "DELIVERED"], _id(1, 4): ["DELIVERED", HF], _id(1, 6): ["PARTIAL"]})
    result = compare_sweeps(base, cand)
    assert _changes(result) == {
        ("host0", "01-item"): "unchanged",
        ("host0", "02-item"): "regressed",
        ("host0", "03-item"): "improved",
        ("host0", "04-item"): "changed",     # NOTHING -> PARTIAL: both fail, neither better
        ("host0", "05-item"): "unmeasured",  # graded HARNESS_FAILURE in the candidate
        ("host0", "06-item"): "unmeasured",  # the attempt itself a harness failure in the baseline
        ("host1", "01-item"): "unchanged",
        ("host1", "02-item"): "unmeasured",  # finished but not graded: no grade to compare
        ("host1", "03-item"): "improved",    # the retry after a harness failure is the cell's grade
        ("host1", "04-item"): "unmeasured",  # the last attempt counts, and it was a harness failure
        ("host1", "05-item"): "gone",
        ("host1", "06-item"): "new",
    }
    assert [r.change for r in result.rows] == sorted((r.change for r in result.rows), key=CHANGES.index)
    assert result.rows[0].change == "regressed" and result.rows[0].baseline and result.rows[0].candidate
    assert (result.rows[0].baseline.summary, result.rows[0].candidate.summary) == ("DELIVERED", "NOTHING")
    assert result.counts.model_dump() == {"regressed": 1, "improved": 2, "changed": 1, "new": 1, "gone": 1,
                                          "unmeasured": 4, "unchanged": 2}
    # Harness failures stay out of the paired test: b and c are the regressions and improvements only.
    assert (result.test.b, result.test.c) == (1, 2)
    # The rates are the report's: 11 cells each; the baseline's cell 0/6 is a harness failure.
    assert result.baseline.rate.model_dump(exclude=COMPUTED) == {"delivered": 5, "graded": 11, "measured": 10}
    assert result.candidate.rate.model_dump(exclude=COMPUTED) == {"delivered": 4, "graded": 10, "measured": 8}
    assert {s.name: (s.counts.regressed, s.counts.improved, s.counts.gone, s.counts.new) for s in result.per_host} == {
        "host0": (1, 1, 0, 0), "host1": (0, 1, 1, 1)}
    assert [(s.name, s.counts.unmeasured) for s in result.per_agent] == [("builtin", 4)]


def test_the_rates_are_the_reports(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    sweep = _write(store, _sweep("20261201-000000-a", items=6), {
        _id(0, 1): ["DELIVERED"], _id(0, 2): [HF], _id(0, 3): [HF_GRADE], _id(0, 4): ["PARTIAL"], _id(0, 5): [""]})
    report = pass_rate(r.grade for r in cell_results(store, sweep))
    assert report.model_dump(exclude=COMPUTED) == {"delivered": 1, "graded": 4, "measured": 2}
    assert compare_sweeps(sweep, sweep).baseline.rate == report
    assert list_sweeps(store).sweeps[0].rate == report
    # And the report shows that rate for the sweep's one host.
    write_report(store, sweep)
    rate = compare_sweeps(sweep, sweep).baseline.rate
    assert f"| host0 | {rate.all} | {rate.without_failures} |" in (store.sweep_dir(sweep.id) / "REPORT.md").read_text()
    assert (rate.all, rate.without_failures) == ("1/4 (25 %)", "1/2 (50 %)")


def test_repetitions_are_grouped_with_pass_at_k_and_a_flaky_mark(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    base = _write(store, _sweep("20261201-000000-a", items=4, reps=3), {
        **{_id(0, 1, r): ["DELIVERED"] for r in (1, 2, 3)},
        **{_id(0, 2, r): ["PARTIAL"] for r in (1, 2, 3)},
        _id(0, 3, 1): ["DELIVERED"], _id(0, 3, 2): [HF], _id(0, 3, 3): [HF],
        _id(0, 4, 1): ["DELIVERED"], _id(0, 4, 2): ["NOTHING"], _id(0, 4, 3): ["NOTHING"]})
    cand = _write(store, _sweep("20261201-000100-b", items=4, reps=3), {
        _id(0, 1, 1): ["DELIVERED"], _id(0, 1, 2): ["PARTIAL"], _id(0, 1, 3): ["DELIVERED"],
        _id(0, 2, 1): ["DELIVERED"], _id(0, 2, 2): ["PARTIAL"], _id(0, 2, 3): [HF],
        **{_id(0, 3, r): [HF] for r in (1, 2, 3)},
        _id(0, 4, 1): ["NOTHING"], _id(0, 4, 2): ["DELIVERED"], _id(0, 4, 3): ["DELIVERED"]})
    result = compare_sweeps(base, cand)
    rows = {r.item: r for r in result.rows}
    assert _changes(result) == {("host0", "01-item"): "regressed", ("host0", "02-item"): "improved",
                                ("host0", "03-item"): "unmeasured", ("host0", "04-item"): "unchanged"}
    one = rows["01-item"]
    assert one.baseline and one.candidate
    assert (one.baseline.state, one.baseline.k, one.baseline.passes, one.baseline.pass_at_k) == ("passed", 3, 3, True)
    assert (one.candidate.state, one.candidate.k, one.candidate.passes, one.candidate.pass_at_k) == ("flaky", 3, 2, True)
    assert [(g.rep, g.grade) for g in one.candidate.reps] == [(1, "DELIVERED"), (2, "PARTIAL"), (3, "DELIVERED")]
    two = rows["02-item"]
    assert two.baseline and two.candidate
    assert (two.baseline.state, two.baseline.pass_at_k) == ("failed", False)
    # A harness failure is not a repetition measured: k is 2 of the 3.
    assert (two.candidate.state, two.candidate.k, two.candidate.passes) == ("flaky", 2, 1)
    assert two.candidate.reps[2].grade == "HARNESS_FAILURE(host_lost)" and not two.candidate.reps[2].measured
    three = rows["03-item"]
    assert three.baseline and three.candidate
    assert (three.baseline.state, three.baseline.k) == ("passed", 1) and three.candidate.state == "unmeasured"
    # Flaky both times (1 of 3, then 2 of 3) with the same grades: no step up or down, and nothing else changed.
    assert rows["04-item"].candidate and rows["04-item"].candidate.summary == "flaky 2/3"
    assert (result.test.b, result.test.c) == (1, 1) and result.test.p == 1.0


@pytest.mark.parametrize(("b", "c", "p"), [
    (0, 5, 0.0625), (5, 0, 0.0625), (1, 9, 0.021484375), (9, 1, 0.021484375), (3, 3, 1.0), (7, 7, 1.0), (0, 0, 1.0),
    (0, 1, 1.0), (2, 10, 0.0385742187500),  # 2 * (1 + 12 + 66) / 4096 = 158/4096
])
def test_the_sign_test_is_exact(b: int, c: int, p: float) -> None:
    t = sign_test(b, c)
    assert (t.b, t.c) == (b, c)
    assert t.p == p
    assert Fraction(t.p_exact) == Fraction(p)


def test_the_sign_test_stays_exact_for_many_pairs() -> None:
    # 2 * sum_{i<=100} C(400, i) / 2^400: a float sum of the terms would lose it; integers keep every digit.
    t = sign_test(100, 300)
    assert 0 < t.p < 1e-20 and Fraction(t.p_exact).denominator & (Fraction(t.p_exact).denominator - 1) == 0


def test_previous_is_the_latest_earlier_sweep_with_the_same_label(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    done = {_id(0, 1): ["DELIVERED"]}
    first = _write(store, _sweep("20261201-010000-nightly", label="nightly", created_at="2026-12-01T01:00:00.000Z"), done)
    _write(store, _sweep("20261201-020000-other", label="other", created_at="2026-12-01T02:00:00.000Z"), done)
    second = _write(store, _sweep("20261201-030000-nightly", label="nightly", created_at="2026-12-01T03:00:00.000Z"), done)
    third = _write(store, _sweep("20261201-040000-nightly", label="nightly", created_at="2026-12-01T04:00:00.000Z"), done)
    unlabelled = _write(store, _sweep("20261201-050000-sweep", created_at="2026-12-01T05:00:00.000Z"), done)
    assert previous_sweep(store, third) == second.id
    assert previous_sweep(store, second) == first.id
    with pytest.raises(UsageError, match="no sweep labelled 'nightly' was planned before 20261201-010000-nightly"):
        previous_sweep(store, first)
    with pytest.raises(UsageError, match="has no label"):
        previous_sweep(store, unlabelled)
    # Without the index the sweep files say the same.
    (store.root / "index.sqlite").unlink()
    assert previous_sweep(store, third) == second.id

    proc = run_fleet("compare", "previous", third.id, "--json", "--runs", str(store.root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["baseline"]["id"], data["candidate"]["id"]) == (second.id, third.id)
    assert_one_line_error(run_fleet("compare", "previous", first.id, "--runs", str(store.root), cwd=tmp_path),
                          "no sweep labelled 'nightly'")
    assert_one_line_error(run_fleet("compare", "previous", unlabelled.id, "--runs", str(store.root), cwd=tmp_path),
                          "has no label")


def _two_sweeps(tmp_path: Path) -> tuple[Store, SweepRecord, SweepRecord]:
    store = Store(tmp_path / "runs")
    base = _write(store, _sweep("20261201-000000-a", label="ci", items=4), {
        _id(0, 1): ["DELIVERED"], _id(0, 2): ["DELIVERED"], _id(0, 3): ["NOTHING"], _id(0, 4): ["DELIVERED"]})
    cand = _write(store, _sweep("20261201-000100-ci", label="ci", items=4), {
        _id(0, 1): ["PARTIAL"], _id(0, 2): ["NOTHING"], _id(0, 3): ["DELIVERED"], _id(0, 4): ["DELIVERED"]})
    return store, base, cand


@pytest.mark.parametrize(("threshold", "code"), [("0", 4), ("1", 4), ("2", 0), ("5", 0)])
def test_fail_on_regressions_exits_4_past_the_threshold(tmp_path: Path, threshold: str, code: int) -> None:
    store, base, cand = _two_sweeps(tmp_path)
    proc = run_fleet("compare", base.id, cand.id, "--fail-on-regressions", threshold, "--runs", str(store.root),
                     cwd=tmp_path)
    assert proc.returncode == code, proc.stderr
    assert "2 regressed, 1 improved" in proc.stdout  # the comparison is printed either way
    if code:
        assert proc.stderr.splitlines() == [f"fleet: error: --fail-on-regressions {threshold}: 2 regressed: "
                                            "host0/01-item/builtin, host0/02-item/builtin"]
    else:
        assert proc.stderr == ""


def test_without_a_threshold_regressions_exit_0(tmp_path: Path) -> None:
    store, base, cand = _two_sweeps(tmp_path)
    proc = run_fleet("compare", base.id, cand.id, "--json", "--runs", str(store.root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1
    assert data["counts"]["regressed"] == 2 and data["test"] == {"b": 2, "c": 1, "p": 1.0, "p_exact": "1"}
    assert [(r["item"], r["change"]) for r in data["rows"]] == [
        ("01-item", "regressed"), ("02-item", "regressed"), ("03-item", "improved"), ("04-item", "unchanged")]
    assert data["rows"][0]["baseline"]["reps"] == [{"rep": 1, "grade": "DELIVERED", "measured": True, "passed": True,
                                                  "override": False, "automatic": "", "rerun": False}]
    assert data["baseline"]["rate"] == {"delivered": 3, "graded": 4, "measured": 4, "rate": 0.75,
                                        "rate_without_failures": 0.75}


@pytest.mark.parametrize("args", [
    ("20261201-000000-a", "20991231-000000-nope"),
    ("20991231-000000-nope", "20261201-000100-ci"),
    ("../etc", "20261201-000100-ci"),
    ("20261201-000000-a", "20261201-000100-ci", "--fail-on-regressions", "-1"),
    ("20261201-000000-a", "20261201-000100-ci", "--fail-on-regressions", "many"),
])
def test_a_bad_id_or_threshold_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    store, _, _ = _two_sweeps(tmp_path)
    assert_one_line_error(run_fleet("compare", *args, "--runs", str(store.root), cwd=tmp_path))


def test_the_terminal_view_shows_what_changed_regressions_first(tmp_path: Path) -> None:
    store, base, cand = _two_sweeps(tmp_path)
    proc = run_fleet("compare", base.id, cand.id, "--runs", str(store.root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rows = [line.split() for line in lines if line.startswith("  ") and "/builtin" in line]
    assert rows == [["regressed", "host0/01-item/builtin", "DELIVERED", "->", "PARTIAL"],
                    ["regressed", "host0/02-item/builtin", "DELIVERED", "->", "NOTHING"],
                    ["improved", "host0/03-item/builtin", "NOTHING", "->", "DELIVERED"]]
    assert "pass rate, all cells:                 3/4 (75 %) -> 2/4 (50 %)" in lines
    assert "pass rate, without harness failures:  3/4 (75 %) -> 2/4 (50 %)" in lines
    assert "sign test (exact McNemar, cells both measured): b 2 regressed, c 1 improved, p 1" in lines
    assert "  host0  3/4 (75 %) -> 2/4 (50 %); 2 regressed, 1 improved, 1 unchanged" in lines
    assert max(len(line) for line in lines) <= 100
    every = run_fleet("compare", base.id, cand.id, "--all", "--runs", str(store.root), cwd=tmp_path)
    assert "  unchanged   host0/04-item/builtin  DELIVERED -> DELIVERED" in every.stdout.splitlines()


def test_repetitions_are_listed_in_the_terminal_view(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    base = _write(store, _sweep("20261201-000000-a", items=1, reps=2), {_id(0, 1, 1): ["DELIVERED"], _id(0, 1, 2): ["DELIVERED"]})
    cand = _write(store, _sweep("20261201-000100-b", items=1, reps=2), {_id(0, 1, 1): ["DELIVERED"], _id(0, 1, 2): [HF, "PARTIAL"]})
    proc = run_fleet("compare", base.id, cand.id, "--runs", str(store.root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert "regressed   host0/01-item/builtin  passed 2/2 -> flaky 1/2" in lines
    assert "baseline: pass@2 yes; r1 DELIVERED, r2 DELIVERED" in lines
    assert "candidate: pass@2 yes; r1 DELIVERED, r2 PARTIAL" in lines


def test_sweeps_lists_newest_first_with_labels_limits_and_rates(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    # Created in this order; the ids sort otherwise ("b" before "c" in the same second), the dates decide.
    _write(store, _sweep("20261201-010000-c", label="c", created_at="2026-12-01T01:00:00.100Z", hosts=2),
           {_id(0, 1): ["DELIVERED"], _id(1, 1): [HF]})
    _write(store, _sweep("20261201-010000-b", label="b", created_at="2026-12-01T01:00:00.900Z"),
           {_id(0, 1): ["DELIVERED"], _id(0, 2): ["NOTHING"]})
    _write(store, _sweep("20261201-020000-c", label="c", created_at="2026-12-01T02:00:00.000Z", items=2), {})
    listing = list_sweeps(store)
    assert [s.id for s in listing.sweeps] == ["20261201-020000-c", "20261201-010000-b", "20261201-010000-c"]
    first = listing.sweeps[2]
    assert (first.hosts, first.items, first.agents, first.cells, first.status) == (["host0", "host1"], 3, ["builtin"], 6,
                                                                                 "finished")
    assert first.rate.model_dump(exclude=COMPUTED) == {"delivered": 1, "graded": 2, "measured": 1}
    assert [s.id for s in list_sweeps(store, label="c").sweeps] == ["20261201-020000-c", "20261201-010000-c"]
    assert [s.id for s in list_sweeps(store, label="c", limit=1).sweeps] == ["20261201-020000-c"]
    assert list_sweeps(store, label="none").sweeps == []
    # The same listing from the sweep files alone (a results directory copied without its index).
    (store.root / "index.sqlite").unlink()
    assert list_sweeps(store) == listing

    proc = run_fleet("sweeps", "--runs", str(store.root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["sweep", "label", "created", "hosts", "items", "agents", "status", "pass,", "all",
                                "without", "HF"]
    assert lines[3].split() == ["20261201-010000-c", "c", "2026-12-01", "01:00", "2", "3", "1", "finished", "1/2", "(50",
                                "%)", "1/1", "(100", "%)"]
    assert [line.split()[0] for line in lines[1:]] == [s.id for s in listing.sweeps]
    js = run_fleet("sweeps", "--json", "--label", "c", "--limit", "1", "--runs", str(store.root), cwd=tmp_path)
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    assert data["schema_version"] == 1 and [s["id"] for s in data["sweeps"]] == ["20261201-020000-c"]
    assert data["sweeps"][0]["rate"] == {"delivered": 0, "graded": 0, "measured": 0, "rate": None,
                                         "rate_without_failures": None}
    empty = run_fleet("sweeps", "--runs", str(tmp_path / "nothing"), cwd=tmp_path)
    assert (empty.returncode, empty.stdout) == (0, "no sweeps\n")
    assert_one_line_error(run_fleet("sweeps", "--limit", "0", "--runs", str(store.root), cwd=tmp_path))
