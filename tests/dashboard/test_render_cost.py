"""What drawing a page costs beside its size: the templates are read once, not once per chip (a 10,000-cell
matrix includes chip.html 10,000 times; with Jinja's auto-reload each include asked the file system whether
the template had changed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.dashboard.context import TEMPLATES, Dashboard, Links
from harness.dashboard.sweeps import sweep_page
from tests.dashboard.stores import runs_of, sweep_of, write_sweep


def test_the_matrix_reads_its_templates_once_not_once_per_chip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = runs_of(tmp_path)
    sweep = write_sweep(store, sweep_of("20261201-000000-a", hosts=2, items=40), {})
    dash = Dashboard(store=store)
    page = sweep_page(dash, sweep.id, Links())  # the first page loads the templates
    assert page.count('class="chip ') == 80
    looked: list[str] = []
    real_stat = os.stat

    def stat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith(str(TEMPLATES)):
            looked.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    again = sweep_page(dash, sweep.id, Links())
    assert again.count('class="chip ') == 80
    assert looked == [], f"{len(looked)} looks at the template files for one page of 80 chips"
