"""``fleet compare`` (two sweeps cell by cell, with the ``--fail-on-regressions`` gate) and ``fleet sweeps`` (the
list of sweeps): the commands over several sweeps of a results directory, read only (docs/compare.md).

The comparison, the listing and the regression gate's decision are ``harness.views.comparison`` and
``harness.views.sweeplist``'s; this module prints them and turns a tripped gate into exit 4.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from harness.cli.console import console, warn
from harness.cli.options import common_runs, open_store
from harness.core.errors import RegressionGate, UsageError, one_line

if TYPE_CHECKING:
    from harness.views.comparison import Comparison

__all__ = ["compare", "sweeps_"]


@click.command()
@click.argument("baseline")
@click.argument("candidate")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/compare.md).")
@click.option("--all", "show_all", is_flag=True, help="Show the unchanged cells too.")
@click.option("--fail-on-regressions", "fail_on_regressions", type=click.IntRange(min=0), default=None, metavar="N",
              help="Exit 4 when more than N cell groups regressed (0: any regression fails; for CI).")
@common_runs
def compare(baseline, candidate, as_json, show_all, fail_on_regressions, runs) -> None:
    """Compare two sweeps cell by cell: regressions first, the counts, both pass rates, the exact sign test and
    subtotals per host and agent. BASELINE may be `previous`: the latest earlier sweep with CANDIDATE's label.

    \b
    Examples:
      fleet compare previous 20261204-031500-nightly
      fleet compare 20261203-031500-nightly 20261204-031500-nightly --all
      fleet compare previous 20261204-031500-nightly --fail-on-regressions 0 --json
    """
    from harness.views.comparison import compare_sweeps, regression_gate
    from harness.views.sweeplist import previous_sweep, shown_status

    store = open_store(runs)
    if candidate == "previous":
        raise UsageError("`previous` stands for a BASELINE (the latest earlier sweep with CANDIDATE's label); "
                         "CANDIDATE must be a sweep id")
    cand = store.load_sweep(candidate)
    base = store.load_sweep(previous_sweep(store, cand) if baseline == "previous" else baseline)
    result = compare_sweeps(base, cand, {rec.id: shown_status(store, rec) for rec in (base, cand)})
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        _print_comparison(result, show_all)
    if fail_on_regressions is not None:
        verdict = regression_gate(result, fail_on_regressions)
        if verdict.tripped:
            raise RegressionGate(verdict.message)


def _print_comparison(result: "Comparison", show_all: bool) -> None:
    """The terminal view of a Comparison, in lines that fit 100 columns (names as stored, escaped)."""
    from harness.views.comparison import CHANGES

    def say(text: str) -> None:
        console.print(one_line(text), markup=False, soft_wrap=True)

    b, c = result.baseline, result.candidate
    say(f"baseline  {b.id} ({b.status}, {b.created_at})")
    say(f"candidate {c.id} ({c.status}, {c.created_at})")
    shown = [r for r in result.rows if show_all or r.change != "unchanged"]
    if shown:
        width = max(len(f"{r.host}/{r.item}/{r.agent}") for r in shown)
        say("")
        for r in shown:
            before = r.baseline.summary if r.baseline else "-"
            after = r.candidate.summary if r.candidate else "-"
            say(f"  {r.change:<10}  {f'{r.host}/{r.item}/{r.agent}':<{width}}  {before} -> {after}")
            for name, side in (("baseline", r.baseline), ("candidate", r.candidate)):
                if side is not None and len(side.reps) > 1:
                    reps = ", ".join(f"r{g.rep} {g.shown}" for g in side.reps)
                    say(f"  {'':<10}    {name}: pass@{side.k} {'yes' if side.pass_at_k else 'no'}; {reps}")
    else:
        say("")
        say("  no cell changed" + ("" if show_all else " (--all shows every cell)"))
    say("")
    say(result.counts.line())
    say(f"pass rate, all cells:                 {b.rate.all} -> {c.rate.all}")
    say(f"pass rate, without harness failures:  {b.rate.without_failures} -> {c.rate.without_failures}")
    t = result.test
    exact = f" ({t.p_exact})" if "/" in t.p_exact and len(t.p_exact) <= 20 else ""
    # McNemar's exact test is the sign test over single cells; with repetitions the pairs are cell groups.
    single = all(len(side.reps) <= 1 for r in result.rows for side in (r.baseline, r.candidate) if side is not None)
    what = "exact McNemar, cells both measured" if single else "exact sign test, cell groups both measured"
    say(f"sign test ({what}): b {t.b} regressed, c {t.c} improved, p {t.p:.4g}{exact}")
    for title, subtotals in (("per host", result.per_host), ("per agent", result.per_agent)):
        say("")
        say(f"{title}:")
        width = max((len(s.name) for s in subtotals), default=0)
        for s in subtotals:
            counts = ", ".join(f"{getattr(s.counts, k)} {k}" for k in CHANGES if getattr(s.counts, k))
            say(f"  {s.name:<{width}}  {s.baseline.without_failures} -> {s.candidate.without_failures}; {counts}")


@click.command("sweeps")
@click.option("--label", default=None, help="Only the sweeps with this label.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N sweeps (the newest).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/compare.md).")
@common_runs
def sweeps_(label, limit, as_json, runs) -> None:
    """List the sweeps, newest first: id, label, date, hosts, items, agents, status and pass rate.

    \b
    Examples:
      fleet sweeps
      fleet sweeps --label nightly --limit 7 --json
    """
    from harness.views.sweeplist import list_sweeps

    listing = list_sweeps(open_store(runs), label=label, limit=limit)
    for bad in listing.unreadable:
        warn(one_line(f"sweep {bad.id} cannot be read, so it is not listed: {bad.error}"))
    if as_json:
        sys.stdout.write(listing.model_dump_json(indent=2) + "\n")
        return
    table = [("sweep", "label", "created", "hosts", "items", "agents", "status", "pass, all", "without HF")]
    for s in listing.sweeps:
        table.append((s.id, s.label or "-", s.created_at[:16].replace("T", " "), str(len(s.hosts)), str(s.items),
                      str(len(s.agents)), s.status, s.rate.all, s.rate.without_failures))
    if len(table) == 1:
        console.print("no sweeps" + (f" labelled {label!r}" if label is not None else ""), markup=False)
        return
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        cells = [v.rjust(w) if i in (3, 4, 5) else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))]
        console.print(one_line("  ".join(cells).rstrip()), markup=False, soft_wrap=True)
