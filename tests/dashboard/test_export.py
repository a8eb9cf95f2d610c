"""``fleet dashboard --export``: a sweep's pages as static files whose every link leads to a file of the export."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from pathlib import Path

from harness.store import Store
from tests.dashboard.stores import cid, sweep_of, write_sweep
from tests.support import assert_one_line_error, run_fleet


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "runs")
    write_sweep(store, sweep_of("20261201-010000-nightly", label="nightly", hosts=2, items=2),
                {cid(0, 1): ["HF", "DELIVERED"], cid(0, 2): ["PARTIAL"], cid(1, 1): ["NOTHING"]},
                stops={cid(0, 2): "recursive_delete"})
    return store


def _links(page: Path) -> list[str]:
    html = page.read_text()
    return [urllib.parse.unquote(m) for m in re.findall(r'(?:href|src)="([^"#?]+)', html)
            if not m.startswith(("data:", "http:", "https:"))]


def test_every_link_of_the_export_leads_to_a_file_in_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    out = tmp_path / "site"
    proc = run_fleet("dashboard", "--runs", str(store.root), "--export", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "of 20261201-010000-nightly to" in proc.stdout
    pages = list(out.rglob("*.html"))
    assert (out / "index.html") in pages and (out / "static" / "dashboard.css").is_file()
    for page in pages:
        for link in _links(page):
            assert not link.startswith("/"), f"{page}: absolute link {link}"
            target = (page.parent / link).resolve()
            assert out.resolve() in target.parents and target.exists(), f"{page}: {link} leads nowhere"
    # Every stored file is copied byte for byte, as meta.json recorded it.
    meta_path = store.root / "20261201-010000-nightly" / cid(0, 1) / "attempt-2" / "meta.json"
    meta = json.loads(meta_path.read_text())
    for art in meta["artifacts"]:
        copy = out / "files" / cid(0, 1) / "attempt-2" / art["name"]
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == art["sha256"]
    # Nothing of the server's: no live stream, no override.
    index = (out / "index.html").read_text()
    assert 'data-live=""' in index and "/events" not in index and "override" not in index


def test_an_export_replaces_an_earlier_one_and_refuses_any_other_folder(tmp_path: Path) -> None:
    store = _store(tmp_path)
    out = tmp_path / "site"
    assert run_fleet("dashboard", "--runs", str(store.root), "--export", str(out), cwd=tmp_path).returncode == 0
    (out / "stale.html").write_text("old")
    assert run_fleet("dashboard", "--runs", str(store.root), "--export", str(out), cwd=tmp_path).returncode == 0
    assert not (out / "stale.html").exists() and (out / "index.html").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site")]  # no work folder left beside it

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    proc = run_fleet("dashboard", "--runs", str(store.root), "--export", str(mine), cwd=tmp_path)
    assert_one_line_error(proc, "holds files that are not an earlier export")
    assert (mine / "notes.txt").read_text() == "keep me" and len(list(mine.iterdir())) == 1
    assert_one_line_error(run_fleet("dashboard", "--runs", str(store.root), "--export", str(mine / "notes.txt"),
                                    cwd=tmp_path), "exists and is not a folder")
    assert_one_line_error(run_fleet("dashboard", "--runs", str(store.root), "--export", str(out), "--sweep",
                                    "20261299-000000-none", cwd=tmp_path), "no sweep")
    assert_one_line_error(run_fleet("dashboard", "--runs", str(store.root), "--sweep", "x", cwd=tmp_path),
                          "--sweep goes with --export")


def test_an_agents_html_is_exported_as_text_never_as_a_page(tmp_path: Path) -> None:
    # A published export is served by a static web server that types a file by its name: the agent's index.html
    # (with its planted markup), a .svg or a .js must not come back as a page that runs.
    from tests.dashboard.test_cell import CELL, SWEEP, WORKSPACE, _build

    runs, _ = _build(tmp_path)
    folder = runs / SWEEP / CELL / "attempt-2" / "workspace"
    (folder / "logo.svg").write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>')
    (folder / "index.html.txt").write_bytes(b"the agent's own .txt beside its .html\n")
    out = tmp_path / "site"
    proc = run_fleet("dashboard", "--runs", str(runs), "--export", str(out), "--sweep", SWEEP, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ours = {out / "index.html", *(out / "cells").rglob("*.html"), *(out / "hosts").rglob("*.html")}
    active = [p for p in out.rglob("*") if p.is_file() and p.suffix.lower() in (".html", ".htm", ".svg", ".js")
              and p not in ours and p.parent != out / "static"]
    assert active == []
    kept = out / "text" / CELL / "attempt-2" / "workspace" / "index.html.txt"
    assert kept.read_bytes() == WORKSPACE["index.html"]
    assert (out / "text" / CELL / "attempt-2" / "workspace" / "logo.svg.txt").is_file()
    # The agent's own index.html.txt is a different file, kept under its own name.
    assert (out / "files" / CELL / "attempt-2" / "workspace" / "index.html.txt").read_bytes().startswith(b"the agent's")
    # The cell page's download link leads to the text copy.
    page = out / "cells" / CELL / "index.html"
    targets = {(page.parent / link).resolve() for link in _links(page)}
    assert kept.resolve() in targets
