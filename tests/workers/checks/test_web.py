"""The web acceptance check against real headless Chromium (system ``chromium`` driven by Playwright).

These run in CI; a machine without Chromium or the ``playwright`` package fails them with the fix
(``bash .ci/setup``) rather than skipping, so a missing browser can never look like a pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workers.host.webcheck import run_web_check
from harness.core.checks.result import CheckResult
from harness.core.checks.spec import WebCheckSpec
from workers.host.webcheck import find_chromium

pytestmark = pytest.mark.integration

TIMEOUT_S = 60

HEAD = '<!doctype html><html><head><meta charset="utf-8">' \
       '<meta name="viewport" content="width=device-width, initial-scale=1">'

GOOD_PAGE = HEAD + """
<link rel="stylesheet" href="css/style.css">
<title>Concerts</title></head><body>
<header><h1 id="title">Upcoming concerts</h1></header>
<main id="list">
  <div class="card">Jazz at noon</div>
  <div class="card sold-out" id="midnight" hidden>Midnight sold-out concert</div>
</main>
<button id="show-sold-out" type="button">Show sold out</button>
<script src="js/app.js"></script>
</body></html>
"""
GOOD_CSS = "body{margin:0;font-family:sans-serif} .card{padding:8px;border:1px solid #ccc}"
GOOD_JS = """
document.getElementById('show-sold-out').addEventListener('click', () => {
  document.getElementById('midnight').hidden = false;
});
"""

SPEC = {
    "page": "index.html",
    "elements": ["#title", "main .card", "Upcoming concerts"],
    "interaction": {"click": "Show sold out", "reveals": "Midnight sold-out concert"},
}


@pytest.fixture(scope="module", autouse=True)
def _chromium_present() -> None:
    exe, why = find_chromium()
    if exe is None:
        pytest.fail(f"headless Chromium is required for the web check tests ({why}): run `bash .ci/setup`")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("the Python package 'playwright' is required for the web check tests: run `bash .ci/setup`")


def write(ws: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return ws


def good_site(ws: Path, **overrides: str) -> Path:
    files = {"index.html": GOOD_PAGE, "css/style.css": GOOD_CSS, "js/app.js": GOOD_JS}
    files.update(overrides)
    return write(ws, files)


def check(ws: Path, **spec) -> CheckResult:
    merged = {**SPEC, **spec}
    return run_web_check(ws, WebCheckSpec.model_validate(merged), timeout_s=TIMEOUT_S)


def detail(r: CheckResult, name: str):
    found = [d for d in r.details if d.name == name]
    assert found, f"no detail {name!r} in {[d.name for d in r.details]}"
    return found[0]


def test_good_page_passes_every_assertion(tmp_path: Path) -> None:
    r = check(good_site(tmp_path))
    assert r.status == "passed", r.summary
    names = [d.name for d in r.details]
    assert names == ["page", "element: #title", "element: main .card", "element: Upcoming concerts",
                     "interaction", "overflow@375px", "console", "offline"]
    assert all(d.status == "passed" for d in r.details)
    assert r.kind == "web" and r.schema_version == 1 and r.duration_s > 0
    assert "375px" in detail(r, "overflow@375px").message
    # round-trips as JSON for the store
    assert CheckResult.model_validate_json(r.model_dump_json()) == r


def test_console_error_fails_that_assertion_only(tmp_path: Path) -> None:
    js = GOOD_JS + "\nconsole.error('boom: chart data missing');\n"
    r = check(good_site(tmp_path, **{"js/app.js": js}))
    assert r.status == "failed"
    console = detail(r, "console")
    assert console.status == "failed" and "boom: chart data missing" in console.message
    assert [d.name for d in r.details if d.status != "passed"] == ["console"]


def test_uncaught_exception_counts_as_console_error(tmp_path: Path) -> None:
    js = GOOD_JS + "\nundefinedFunction();\n"
    r = check(good_site(tmp_path, **{"js/app.js": js}))
    assert detail(r, "console").status == "failed"
    assert "undefinedFunction" in detail(r, "console").message


def test_console_errors_may_be_allowed(tmp_path: Path) -> None:
    js = GOOD_JS + "\nconsole.error('tolerated');\n"
    r = check(good_site(tmp_path, **{"js/app.js": js}), no_console_errors=False)
    assert r.status == "passed", r.summary
    assert "console" not in [d.name for d in r.details]


def test_missing_local_asset_is_a_console_error(tmp_path: Path) -> None:
    ws = good_site(tmp_path)
    (ws / "css/style.css").unlink()
    r = check(ws)
    assert detail(r, "console").status == "failed"
    assert "404" in detail(r, "console").message


def test_missing_element_fails(tmp_path: Path) -> None:
    r = check(good_site(tmp_path), elements=["#title", "#sales-chart", "Quarterly revenue"])
    assert r.status == "failed"
    assert detail(r, "element: #title").status == "passed"
    assert detail(r, "element: #sales-chart").status == "failed"
    assert detail(r, "element: Quarterly revenue").status == "failed"
    assert "#sales-chart" in r.summary


def test_show_sold_out_reveals_the_hidden_card(tmp_path: Path) -> None:
    r = check(good_site(tmp_path), elements=[])
    it = detail(r, "interaction")
    assert it.status == "passed", it.message
    assert "Midnight sold-out concert" in it.message


def test_reveal_by_css_selector_and_css_display_none(tmp_path: Path) -> None:
    page = GOOD_PAGE.replace(' id="midnight" hidden>', ' id="midnight" style="display:none">')
    js = "document.getElementById('show-sold-out').onclick = () => " \
         "{ document.getElementById('midnight').style.display = 'block'; };"
    r = check(good_site(tmp_path, **{"index.html": page, "js/app.js": js}),
              interaction={"click": "#show-sold-out", "reveals": ".sold-out"})
    assert detail(r, "interaction").status == "passed", detail(r, "interaction").message


def test_button_that_reveals_nothing_fails(tmp_path: Path) -> None:
    js = "document.getElementById('show-sold-out').addEventListener('click', () => {});"
    r = check(good_site(tmp_path, **{"js/app.js": js}))
    assert r.status == "failed"
    it = detail(r, "interaction")
    assert it.status == "failed" and "did not reveal" in it.message


def test_card_visible_from_the_start_fails_the_interaction(tmp_path: Path) -> None:
    page = GOOD_PAGE.replace(' id="midnight" hidden>', ' id="midnight">')
    r = check(good_site(tmp_path, **{"index.html": page}))
    it = detail(r, "interaction")
    assert it.status == "failed" and "already visible" in it.message


def test_missing_button_fails_the_interaction(tmp_path: Path) -> None:
    page = GOOD_PAGE.replace("Show sold out", "More")
    r = check(good_site(tmp_path, **{"index.html": page}))
    it = detail(r, "interaction")
    assert it.status == "failed" and "nothing to click" in it.message


def test_page_wider_than_375px_fails_overflow(tmp_path: Path) -> None:
    page = GOOD_PAGE.replace("</main>", '<table id="wide" style="width:900px"><tr><td>Q1</td></tr></table></main>')
    r = check(good_site(tmp_path, **{"index.html": page}))
    assert r.status == "failed"
    ov = detail(r, "overflow@375px")
    assert ov.status == "failed"
    assert "scrollWidth 900px > innerWidth 375px" in ov.message
    assert "table#wide" in ov.message
    # the same page is fine on a desktop viewport
    wide = check(tmp_path, viewport_width=1280)
    assert detail(wide, "overflow@1280px").status == "passed"


def test_external_cdn_is_blocked_and_does_not_hang(tmp_path: Path) -> None:
    page = GOOD_PAGE.replace(
        "</title>", '</title><script src="https://cdn.example.invalid/chart.umd.js"></script>'
        '<link rel="stylesheet" href="https://fonts.example.invalid/css?family=Inter">'
    )
    t0 = time.monotonic()
    r = run_web_check(good_site(tmp_path, **{"index.html": page}), WebCheckSpec.model_validate(SPEC), timeout_s=30)
    assert time.monotonic() - t0 < 30
    assert r.status == "passed", r.summary  # the harness's own block is not a console error
    off = detail(r, "offline")
    assert "https://cdn.example.invalid/chart.umd.js" in off.message
    assert "https://fonts.example.invalid/css?family=Inter" in off.message


def test_code_that_needs_the_blocked_cdn_fails_console(tmp_path: Path) -> None:
    page = GOOD_PAGE.replace("</title>", '</title><script src="https://cdn.example.invalid/chart.umd.js"></script>')
    js = GOOD_JS + "\nnew Chart(document.body, {});\n"
    r = check(good_site(tmp_path, **{"index.html": page, "js/app.js": js}))
    console = detail(r, "console")
    assert console.status == "failed"
    assert "Chart is not defined" in console.message and "blocked" in console.message


def test_missing_page_fails(tmp_path: Path) -> None:
    r = check(good_site(tmp_path), page="dashboard/index.html")
    assert r.status == "failed"
    assert detail(r, "page").status == "failed"
    assert "does not exist" in r.summary


def test_page_outside_workspace_fails(tmp_path: Path) -> None:
    ws = good_site(tmp_path / "ws")
    r = check(ws, page="../index.html")
    assert r.status == "failed" and "outside the workspace" in r.summary


def test_no_chromium_is_untested_never_passed(tmp_path: Path) -> None:
    r = run_web_check(good_site(tmp_path), WebCheckSpec.model_validate(SPEC), chromium="/nonexistent/chromium")
    assert r.status == "untested"
    assert "/nonexistent/chromium" in r.summary
    assert r.details == []


def test_no_chromium_on_path_is_untested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEET_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    r = run_web_check(good_site(tmp_path), WebCheckSpec.model_validate(SPEC))
    assert r.status == "untested" and "no Chromium on PATH" in r.summary


def test_spec_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError):
        WebCheckSpec.model_validate({"page": "index.html", "elemnts": ["#x"]})


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workers.host.webcheck", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_prints_result_json_exit_0_even_when_failed(tmp_path: Path) -> None:
    ws = good_site(tmp_path / "ws")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**SPEC, "elements": ["#nope"]}))
    p = run_cli(str(ws), str(spec))
    assert p.returncode == 0, p.stderr
    r = CheckResult.model_validate_json(p.stdout)
    assert r.status == "failed" and detail(r, "element: #nope").status == "failed"
    assert p.stderr == ""


def test_cli_bad_input_exit_2_one_line(tmp_path: Path) -> None:
    ws = good_site(tmp_path / "ws")
    bad = tmp_path / "bad.json"
    bad.write_text('{"page": 3, "interaction": {"click": "x"}}')
    for args in ([str(ws)], [str(tmp_path / "nope"), str(bad)], [str(ws), str(tmp_path / "missing.json")],
                 [str(ws), str(bad)], [str(ws), str(bad), "--timeout", "soon"]):
        p = run_cli(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)


def test_page_pattern_finds_the_page_wherever_the_agent_put_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    good_site(ws / "Playground" / "forest")
    write(ws, {"Playground/forest/about/index.html": HEAD + "<title>x</title></head><body>about</body></html>",
               ".cache/index.html": "<p>never chosen</p>", "node_modules/x/index.html": "<p>never</p>"})
    r = check(ws, page="**/*.html")
    page = next(d for d in r.details if d.name == "page")
    assert r.status == "passed", r
    assert page.message.startswith("Playground/forest/index.html loaded (matched **/*.html, chosen from 2 matches)")


def test_page_pattern_prefers_index_html_at_the_same_depth(tmp_path: Path) -> None:
    from workers.host.webcheck import find_page

    write(tmp_path, {"site/about.html": "a", "site/index.html": "i", "site/deep/index.html": "d", "z.txt": "z"})
    chosen, n = find_page(tmp_path, "**/*.html")
    assert chosen == tmp_path / "site" / "index.html" and n == 3
    assert find_page(tmp_path, "**/*.htm") == (None, 0)


def test_page_pattern_without_a_match_fails(tmp_path: Path) -> None:
    ws = good_site(tmp_path / "ws")
    r = check(ws, page="**/fleet-qualification-*/index.html")
    assert r.status == "failed" and r.details[0].message == "no file in the workspace matches **/fleet-qualification-*/index.html"
    r = check(ws, page="../**/*.html")
    assert r.status == "failed" and "outside the workspace" in r.details[0].message


def test_counts_need_that_many_visible_matches(tmp_path: Path) -> None:
    ws = good_site(tmp_path / "ws")
    r = check(ws, counts={".card": 1})
    assert r.status == "passed", r
    r = check(ws, counts={".card": 2})  # the second card is hidden until the click
    count = next(d for d in r.details if d.name == "count: .card")
    assert r.status == "failed" and count.message == "1 visible, at least 2 wanted", r
