"""Prints how many mutated inputs the fuzz tests tried (the fault-test figure in docs/faults.md)."""

from __future__ import annotations

from tests.harness.fuzz import runner


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if runner.COUNT:
        parts = ", ".join(f"{fmt} {n}" for fmt, n in sorted(runner.COUNT.items()))
        terminalreporter.write_line(f"fuzz: {sum(runner.COUNT.values())} mutated inputs tried ({parts})")
