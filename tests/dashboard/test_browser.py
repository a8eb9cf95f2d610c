"""The dashboard in real headless Chromium, served by the real ``fleet dashboard`` command from a results
directory written by the real SweepWriter: the list and the matrix render with no console error and no page
error (a CSP violation is a console error), a chip links to its cell, the filters work and stay in the URL, a
live sweep's chip changes without a reload, the layout holds at 375 px, stored strings are text, and the
server stops on SIGTERM and refuses a port that is taken."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from harness.core.catalog import Item
from harness.grading import Grade
from harness.core.records import AttemptSummary, Cell, HostSummary, utc_now
from harness.core.sweep import SweepRecord
from harness.store import Store
from tests.dashboard.conftest import ARTIFACTS, DashboardServer, Tab, wait_for
from tests.support import assert_one_line_error, finished_result, run_fleet

pytestmark = pytest.mark.integration

HOSTS = ("host0", "host1")
ITEMS = ("01-item", "02-item", "03-item")
AGENTS = ("builtin", "opencode")
BASE = "20261201-000000-a"
CAND = "20261202-000000-b"
HF_GRADE = "HARNESS_FAILURE"

BASE_GRADES = {(h, i, a): "DELIVERED" for h in HOSTS for i in ITEMS for a in AGENTS} | {
    ("host0", "02-item", "opencode"): "PARTIAL", ("host1", "02-item", "builtin"): "CODE_IN_CHAT"}
CAND_GRADES = {
    ("host0", "01-item", "builtin"): "NOTHING",  # regressed
    ("host0", "01-item", "opencode"): "DELIVERED",
    ("host0", "02-item", "builtin"): "DELIVERED",
    ("host0", "02-item", "opencode"): "PARTIAL",  # unchanged (failed in both)
    ("host0", "03-item", "builtin"): "DELIVERED",
    ("host0", "03-item", "opencode"): HF_GRADE,  # unmeasured, not a regression
    ("host1", "01-item", "builtin"): "DELIVERED",
    ("host1", "01-item", "opencode"): "DELIVERED",
    ("host1", "02-item", "builtin"): "CODE_IN_CHAT",
    ("host1", "02-item", "opencode"): "PARTIAL",  # regressed
    ("host1", "03-item", "builtin"): "DELIVERED",
    # host1/03-item/opencode: no attempt (pending)
}
REGRESSED = {Cell.make_id("host0", "01-item", "builtin", 1), Cell.make_id("host1", "02-item", "opencode", 1)}
ALL_CELLS = {Cell.make_id(h, i, a, 1) for h in HOSTS for i in ITEMS for a in AGENTS}

PAYLOADS = ('<img src=x onerror="window.__pwned=1">', "<script>window.__pwned=1</script>")
HOSTILE = " ".join(PAYLOADS)


def plan(sweep_id: str, *, label: str, hosts: tuple[str, ...] = HOSTS, items: tuple[str, ...] = ITEMS,
         agents: tuple[str, ...] = AGENTS, created_at: str = "", title: str = "t", model_id: str = "m") -> SweepRecord:
    its = [Item(id=i, number=i[:2], kind="open", title=title, prompt="p", timeout_s=60) for i in items]
    cells = [Cell(id=Cell.make_id(h, i, a, 1), host=h, item=i, agent=a, rep=1, seed=1)
             for h in hosts for i in items for a in agents]
    summary = HostSummary(name="h", transport="local", os="linux", address="", slots=1, tags=[], model_id=model_id,
                          model_base_url="http://127.0.0.1:9/v1", context=4096, max_output=512)
    return SweepRecord(id=sweep_id, label=label, created_at=created_at or utc_now(), inventory="/inv.toml",
                       prompts="/prompts", harness_commit="test-commit",
                       hosts={h: summary.model_copy(update={"name": h}) for h in hosts},
                       items={i.id: i for i in its}, cells=cells)


def grade_of(name: str) -> Grade:
    return Grade(grade=name, outcome="none", failure="model_endpoint" if name == HF_GRADE else "")  # type: ignore[arg-type]


def write(store: Store, sweep: SweepRecord, grades: dict[tuple[str, str, str], str]) -> None:
    """Save ``sweep`` and record one attempt and its grade per entry of ``grades``, then finish it."""
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        for (h, i, a), g in grades.items():
            cell = sweep.cell(Cell.make_id(h, i, a, 1))
            assert w.record_attempt(sweep, finished_result(sweep, cell, 1))
            w.record_grade(sweep, cell.id, 1, grade_of(g))
        w.set_status(sweep, "finished")


def nightly(tmp_path: Path) -> Path:
    """Two finished sweeps of the label nightly; the second has two regressions against the first."""
    runs = tmp_path / "runs"
    store = Store(runs)
    write(store, plan(BASE, label="nightly", created_at="2026-12-01T00:00:00+00:00"), BASE_GRADES)
    write(store, plan(CAND, label="nightly", created_at="2026-12-02T00:00:00+00:00"), CAND_GRADES)
    return runs


def shown_cells(tab: Tab) -> set[str]:
    """The ids of the matrix's chips a reader sees (laid out, not display: none)."""
    cells = tab.page.evaluate("""() => [...document.querySelectorAll('#matrix .chip')]
        .filter(c => c.checkVisibility()).map(c => c.dataset.cell)""")
    return set(cells)


def chip(tab: Tab, cell_id: str) -> dict[str, Any]:
    return tab.page.evaluate("""(id) => { const c = document.getElementById('cell-' + id);
        return c ? {cls: [...c.classList], grade: c.querySelector('.grade').textContent, href: c.getAttribute('href')} : null; }""",
                             cell_id)


def cells_where(grades: dict[tuple[str, str, str], str], **want: str) -> set[str]:
    keys = {(h, i, a) for h in HOSTS for i in ITEMS for a in AGENTS}
    return {Cell.make_id(h, i, a, 1) for (h, i, a) in keys
            if want.get("host", h) == h and want.get("agent", a) == a
            and ("grade" not in want or grades.get((h, i, a), "") == want["grade"])}


def save_png(tab: Tab, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    tab.page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    assert len(data) > 5_000, len(data)
    return path


# --------------------------------------------------------------------------- the list and the matrix


def test_the_list_and_the_matrix_render_without_console_or_page_errors(tmp_path: Path, fleet_dashboard,
                                                                       open_page) -> None:
    server: DashboardServer = fleet_dashboard(nightly(tmp_path))
    tab = open_page(server)

    response = tab.goto("/")
    assert response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    rows = tab.page.locator("table.sweeps tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td").first.inner_text() == CAND  # newest first
    assert tab.page.locator(".trend-chart .trend-point").count() == 2  # the nightly's trend
    tab.assert_clean()

    tab.page.locator(f"table.sweeps a:text-is('{CAND}')").click()
    tab.page.wait_for_url(server.url + f"sweeps/{CAND}")
    assert tab.page.locator("#matrix .chip").count() == len(ALL_CELLS)
    assert shown_cells(tab) == ALL_CELLS
    # The script ran (it writes the count of shown chips): it was allowed by the CSP.
    assert tab.page.locator("#shown").inner_text() == f"{len(ALL_CELLS)} of {len(ALL_CELLS)} cells shown"
    assert tab.page.locator("#sweep-status").inner_text() == "finished"
    regressed = set(tab.page.evaluate("() => [...document.querySelectorAll('#matrix .chip.regressed')].map(c => c.dataset.cell)"))
    assert regressed == REGRESSED
    # The stylesheet applied (a class colours the chip): it was allowed by the CSP too.
    delivered = tab.page.locator(".chip.g-delivered").first
    assert delivered.evaluate("c => getComputedStyle(c).backgroundColor") == "rgb(31, 136, 61)"
    tab.assert_clean()
    save_png(tab, "matrix.png")


def test_a_chip_links_to_its_cell(tmp_path: Path, fleet_dashboard, open_page) -> None:
    server = fleet_dashboard(nightly(tmp_path))
    tab = open_page(server)
    tab.goto(f"/sweeps/{CAND}")
    cell_id = Cell.make_id("host1", "02-item", "opencode", 1)
    assert chip(tab, cell_id)["href"] == f"/sweeps/{CAND}/cells/{cell_id}"
    with tab.page.expect_navigation() as nav:
        tab.page.locator(f"[id='cell-{cell_id}']").click()
    response = nav.value
    assert tab.page.url == f"{server.url}sweeps/{CAND}/cells/{cell_id}"
    if response.status == 200:
        assert cell_id in tab.page.locator("main").inner_text()
        save_png(tab, "cell.png")
    else:
        # No cell page on this branch yet: the error page, one line, with its status.
        assert response.status == 404
        tab.expect_error(r"Failed to load resource: the server responded with a status of 404")
        assert tab.page.locator("h1").inner_text() == "error 404"
    tab.assert_clean()


# --------------------------------------------------------------------------- filters


def test_the_filters_show_exactly_the_chosen_chips_and_stay_in_the_url(tmp_path: Path, fleet_dashboard,
                                                                      open_page) -> None:
    server = fleet_dashboard(nightly(tmp_path))
    tab = open_page(server)
    tab.goto(f"/sweeps/{CAND}")
    page = tab.page
    form = page.locator("#filters")

    form.locator("select[name=host]").select_option("host1")
    assert shown_cells(tab) == cells_where(CAND_GRADES, host="host1")
    assert page.url.endswith(f"/sweeps/{CAND}?host=host1")
    # The other host's column goes too, its heading with it, so each chip stays under its own host.
    assert page.locator("#matrix td[data-host=host0]").first.is_hidden()
    headings = page.evaluate("() => [...document.querySelectorAll('#matrix thead th')].filter(h => h.checkVisibility()).map(h => h.innerText.split('\\n')[0])")
    assert headings == ["item", "host1"], headings

    form.locator("select[name=host]").select_option("")
    form.locator("select[name=agent]").select_option("opencode")
    assert shown_cells(tab) == cells_where(CAND_GRADES, agent="opencode")

    form.locator("select[name=agent]").select_option("")
    form.locator("select[name=grade]").select_option("PARTIAL")
    assert shown_cells(tab) == cells_where(CAND_GRADES, grade="PARTIAL") == {
        Cell.make_id("host0", "02-item", "opencode", 1), Cell.make_id("host1", "02-item", "opencode", 1)}
    form.locator("select[name=grade]").select_option("none")
    assert shown_cells(tab) == {Cell.make_id("host1", "03-item", "opencode", 1)}

    form.locator("select[name=grade]").select_option("")
    form.locator("input[name=regressed]").check()
    assert shown_cells(tab) == REGRESSED
    # Rows without a shown chip are hidden: only the regressed items' rows are left.
    rows = page.evaluate("() => [...document.querySelectorAll('#matrix tbody tr')].filter(r => r.checkVisibility()).map(r => r.dataset.item)")
    assert rows == ["01-item", "02-item"]

    form.locator("select[name=host]").select_option("host1")
    expected = {Cell.make_id("host1", "02-item", "opencode", 1)}
    assert shown_cells(tab) == expected
    assert page.url.endswith(f"/sweeps/{CAND}?host=host1&regressed=1")
    assert page.locator("#shown").inner_text() == f"1 of {len(ALL_CELLS)} cells shown"

    page.reload(wait_until="load")
    assert page.url.endswith(f"/sweeps/{CAND}?host=host1&regressed=1")
    assert shown_cells(tab) == expected
    assert form.locator("select[name=host]").input_value() == "host1"
    assert form.locator("input[name=regressed]").is_checked()

    # A link with the filter in it (a bookmark) shows the same.
    other = open_page(server)
    other.goto(f"/sweeps/{CAND}?agent=builtin&grade=DELIVERED")
    assert shown_cells(other) == cells_where(CAND_GRADES, agent="builtin", grade="DELIVERED")
    tab.assert_clean()
    other.assert_clean()


# --------------------------------------------------------------------------- live updates


def test_a_live_sweeps_chip_changes_without_a_reload(tmp_path: Path, fleet_dashboard, open_page) -> None:
    runs = tmp_path / "runs"
    store = Store(runs)
    sweep = plan("20261203-000000-live", label="live", hosts=("host0",), items=("01-item",))
    first, second = (sweep.cell(Cell.make_id("host0", "01-item", a, 1)) for a in AGENTS)
    # This test process is the sweep's writer (as a coordinator is): the server sees the lock held.
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        server = fleet_dashboard(runs)
        assert store.is_being_written(sweep.id)
        tab = open_page(server)
        tab.goto(f"/sweeps/{sweep.id}")
        page = tab.page
        assert page.locator("#sweep-status").inner_text() == "running"
        assert chip(tab, first.id)["grade"] == "pending"
        page.evaluate("() => { window.__sameDocument = 'yes'; }")

        w.dispatched(sweep, first.id, AttemptSummary(attempt=1, task_id="t1", status="dispatched",
                                                      dispatched_at=utc_now()))
        wait_for(lambda: "running" in chip(tab, first.id)["cls"], what="the chip turning running")
        assert chip(tab, first.id)["grade"] == "running"

        assert w.record_attempt(sweep, finished_result(sweep, first, 1))
        w.record_grade(sweep, first.id, 1, grade_of("DELIVERED"))
        wait_for(lambda: chip(tab, first.id)["grade"] == "DELIVERED", what="the chip's grade turning DELIVERED")
        now = chip(tab, first.id)
        assert "g-delivered" in now["cls"] and "g-none" not in now["cls"] and "running" not in now["cls"]
        assert chip(tab, second.id)["grade"] == "pending"  # the other cell did not change
        assert page.locator(f"[id='cell-{first.id}']").get_attribute("data-grade") == "DELIVERED"

        assert w.record_attempt(sweep, finished_result(sweep, second, 1))
        w.record_grade(sweep, second.id, 1, grade_of("PARTIAL"))
        wait_for(lambda: "g-partial" in chip(tab, second.id)["cls"], what="the second chip turning PARTIAL")
        w.set_status(sweep, "finished")
    wait_for(lambda: page.locator("#sweep-status").inner_text() == "finished", what="the status turning finished")
    # No navigation happened: the same document, its marker still set, one navigation entry.
    assert page.evaluate("() => window.__sameDocument") == "yes"
    assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1
    assert page.url == f"{server.url}sweeps/{sweep.id}"
    tab.assert_clean()


# --------------------------------------------------------------------------- layout, screenshots


def test_the_layout_holds_at_375_px(tmp_path: Path, fleet_dashboard, open_page) -> None:
    runs = nightly(tmp_path)
    hosts = tuple(f"gpu-tower-{n:02d}" for n in range(8))  # far wider than a phone
    write(Store(runs), plan("20261204-000000-wide", label="wide", hosts=hosts),
          {(h, i, a): "DELIVERED" for h in hosts for i in ITEMS for a in AGENTS})
    server = fleet_dashboard(runs)
    tab = open_page(server, width=375, height=800)
    for path in ("/", f"/sweeps/{CAND}", "/sweeps/20261204-000000-wide"):
        tab.goto(path)
        width = tab.page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 375, (path, width)
    box = tab.page.evaluate("""() => { const s = document.querySelector('.scroll');
        return {scroll: s.scrollWidth, client: s.clientWidth, overflow: getComputedStyle(s).overflowX,
                inside: s.contains(document.getElementById('matrix'))}; }""")
    # The matrix is wider than the screen and scrolls inside its own box, not the page.
    assert box["inside"] and box["overflow"] == "auto" and box["client"] <= 375 < box["scroll"], box
    tab.page.evaluate("() => { document.querySelector('.scroll').scrollLeft = 200; }")
    assert tab.page.evaluate("() => document.querySelector('.scroll').scrollLeft") > 0
    assert tab.page.evaluate("() => window.scrollX") == 0
    save_png(tab, "matrix-375px.png")
    tab.assert_clean()


# --------------------------------------------------------------------------- stored strings


def test_stored_markup_is_text_in_the_browser(tmp_path: Path, fleet_dashboard, open_page) -> None:
    runs = tmp_path / "runs"
    store = Store(runs)
    for n, sid in enumerate(("20261201-000000-x", "20261202-000000-y")):
        write(store, plan(sid, label=HOSTILE, title=HOSTILE, model_id=HOSTILE, hosts=("host0",),
                          created_at=f"2026-12-0{n + 1}T00:00:00+00:00"),
              {("host0", i, a): "DELIVERED" for i in ITEMS for a in AGENTS})
    server = fleet_dashboard(runs)
    tab = open_page(server)
    for path in ("/", "/sweeps/20261202-000000-y"):
        tab.goto(path)
        page = tab.page
        assert page.evaluate("() => typeof window.__pwned") == "undefined"
        # No element was made from the stored strings: no img with that handler, no script but the app's own.
        assert page.evaluate("() => document.querySelectorAll('img, [onerror]').length") == 0
        scripts = page.evaluate("() => [...document.scripts].map(s => [s.getAttribute('src'), s.text])")
        assert scripts == [["/static/dashboard.js", ""]], scripts
        text = page.locator("main").inner_text()
        for payload in PAYLOADS:
            assert payload in text, (path, payload)
    # The item's title is the row header's tooltip: the attribute holds the string as it was stored.
    title = tab.page.locator("#matrix tbody th.item-col").first.get_attribute("title")
    assert title == HOSTILE
    # The label's link is made by Links: the markup is percent-encoded in the URL, and it lists the label.
    tab.goto("/")
    tab.page.locator("table.sweeps tbody tr").first.locator("td").nth(1).locator("a").click()
    tab.page.wait_for_load_state("load")
    assert "%3Cscript%3E" in tab.page.url
    assert tab.page.locator("table.sweeps tbody tr").count() == 2
    assert tab.page.evaluate("() => typeof window.__pwned") == "undefined"
    tab.assert_clean()


# --------------------------------------------------------------------------- the server itself


def test_the_server_refuses_a_taken_port_and_stops_on_sigterm(tmp_path: Path, fleet_dashboard) -> None:
    runs = nightly(tmp_path)
    server: DashboardServer = fleet_dashboard(runs)
    second = run_fleet("dashboard", "--runs", str(runs), "--port", str(server.port), cwd=tmp_path)
    line = assert_one_line_error(second, f"--port {server.port}", "in use")
    assert second.stdout == "", second.stdout
    assert line
    assert server.proc.poll() is None  # the first one still serves
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass
    # SIGTERM stops it promptly (stop() fails the test after a few seconds), the way every fleet command ends
    # when interrupted: exit 130 and one line.
    assert server.stop() == 130
    assert [line for line in server.stderr if line.strip()] == ["fleet: interrupted\n"], server.stderr
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
