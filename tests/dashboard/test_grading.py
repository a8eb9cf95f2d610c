"""Grade overrides in the dashboard over real HTTP (Starlette's TestClient on the real app and a real store):
signing in, the override, and every refusal, each of which leaves the results directory byte for byte as it was."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from harness.dashboard.app import make_app
from harness.dashboard.context import TEMPLATES, Dashboard, Links
from harness.dashboard.grading import COOKIE, READ_ONLY, cookie_value
from harness.grading.gradefiles import read_grade_history
from harness.grading.override import GradeOverride
from harness.store import Store
from tests.harness.grading.test_override import CELL, SWEEP, build_runs, lock_held_elsewhere, tree_digest

TOKEN = "t0k"
HERE = "http://testserver"
URL = Links().override(SWEEP, CELL)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    build_runs(tmp_path / "runs", dispatched=True)
    return tmp_path / "runs"


def _client(runs: Path, token: str | None = TOKEN) -> TestClient:
    return TestClient(make_app(runs, token=token), follow_redirects=False)


def _signed_in(runs: Path, author: str = "alice") -> TestClient:
    client = _client(runs)
    r = client.post("/login", data={"token": TOKEN, "author": author}, headers={"origin": HERE})
    assert r.status_code == 303, r.text
    return client


def _one_line_error(r, status: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert r.status_code == status, (r.status_code, r.text)
    lines = [html.unescape(t) for t in re.findall(r'<p class="error-line">(.*?)</p>', r.text, re.S)]
    assert len(lines) == 1 and "\n" not in lines[0] and needle in lines[0], r.text
    assert "Traceback" not in r.text


def _override_form(**fields: str) -> dict[str, str]:
    return {"attempt": "1", "grade": "PARTIAL", "reason": "the page is blank"} | fields


def test_the_sign_in_page_is_a_form(runs: Path) -> None:
    r = _client(runs).get("/login")
    assert r.status_code == 200
    assert '<form method="post" action="/login"' in r.text
    assert 'name="token"' in r.text and 'type="password"' in r.text and 'name="author"' in r.text
    # Its form posts back with an Origin the check accepts (no-referrer would make a browser send "null").
    assert r.headers["referrer-policy"] == "same-origin"


def test_sign_in_sets_a_cookie_that_proves_the_token_without_holding_it(runs: Path) -> None:
    client = _client(runs)
    r = client.post("/login", data={"token": TOKEN, "author": "alice", "next": "/sweeps/x"}, headers={"origin": HERE})
    assert r.status_code == 303 and r.headers["location"] == "/sweeps/x"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={cookie_value(TOKEN, 'alice')};")
    attrs = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= attrs
    assert TOKEN not in cookie.split(";")[0].split("=", 1)[1]
    # Signed in, the page says who.
    assert "Signed in as <strong>alice</strong>" in client.get("/login").text
    # Somewhere else to go after signing in is never another site.
    r = _client(runs).post("/login", data={"token": TOKEN, "author": "a", "next": "//evil.example/x"},
                           headers={"origin": HERE})
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_the_override_with_the_cookie_is_written_and_goes_back_to_the_cell(runs: Path) -> None:
    client = _signed_in(runs, "alice")
    r = client.post(URL, data=_override_form(author="mallory"), headers={"origin": HERE})
    assert r.status_code == 303, r.text
    assert r.headers["location"] == Links().cell(SWEEP, CELL)
    store = Store(runs)
    last = read_grade_history(store.attempt_dir(SWEEP, CELL, 1))[-1]
    # The author is the signed-in name, not a form field.
    assert isinstance(last, GradeOverride) and (last.grade, last.author, last.automatic, last.reason) == (
        "PARTIAL", "alice", "DELIVERED", "the page is blank")
    summary = store.load_sweep(SWEEP).last(CELL)
    assert summary is not None and summary.override == "PARTIAL"


def test_a_script_overrides_with_the_bearer_token_and_an_author(runs: Path) -> None:
    r = _client(runs).post(URL, data=_override_form(author="ci-bot"), headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 303, r.text
    last = read_grade_history(Store(runs).attempt_dir(SWEEP, CELL, 1))[-1]
    assert isinstance(last, GradeOverride) and last.author == "ci-bot"


def test_a_referer_of_this_dashboard_will_do_without_an_origin(runs: Path) -> None:
    client = _signed_in(runs)
    r = client.post(URL, data=_override_form(), headers={"referer": f"{HERE}/sweeps/{SWEEP}"})
    assert r.status_code == 303, r.text


def test_sign_out_clears_the_cookie(runs: Path) -> None:
    client = _signed_in(runs)
    r = client.post("/logout", headers={"origin": HERE})
    assert r.status_code == 303
    assert r.headers["set-cookie"].startswith(f'{COOKIE}="";') and "max-age=0" in r.headers["set-cookie"].lower()
    before = tree_digest(runs)
    _one_line_error(client.post(URL, data=_override_form(), headers={"origin": HERE}), 403, "sign in")
    assert tree_digest(runs) == before


def test_without_a_token_every_route_is_read_only_and_changes_nothing(runs: Path) -> None:
    client = _client(runs, token=None)
    before = tree_digest(runs)
    _one_line_error(client.get("/login"), 403, READ_ONLY)
    r = client.post("/login", data={"token": "", "author": "a"}, headers={"origin": HERE})
    _one_line_error(r, 403, READ_ONLY)
    assert "set-cookie" not in r.headers
    _one_line_error(client.post("/logout", headers={"origin": HERE}), 403, READ_ONLY)
    forged = {COOKIE: cookie_value("", "alice")}
    for headers in ({"origin": HERE}, {"authorization": "Bearer "}, {"authorization": "Bearer anything"}):
        client.cookies.update(forged)
        _one_line_error(client.post(URL, data=_override_form(author="a"), headers=headers), 403, READ_ONLY)
    assert tree_digest(runs) == before


def test_a_wrong_token_does_not_sign_in(runs: Path) -> None:
    client = _client(runs)
    before = tree_digest(runs)
    for token in ("t0K", "", "t0k ", "t0kt0k"):
        r = client.post("/login", data={"token": token, "author": "alice"}, headers={"origin": HERE})
        _one_line_error(r, 403, "wrong token")
        assert "set-cookie" not in r.headers
    _one_line_error(client.post("/login", data={"author": "alice"}, headers={"origin": HERE}), 403, "wrong token")
    _one_line_error(client.post("/login", data={"token": TOKEN, "author": "  "}, headers={"origin": HERE}), 400,
                    "author's name")
    r = client.post("/login", data={"token": TOKEN, "author": "a"}, headers={"origin": "http://evil.example"})
    _one_line_error(r, 403, "cross-site")
    assert "set-cookie" not in r.headers
    assert tree_digest(runs) == before


OTHER = "http://evil.example"


@pytest.mark.parametrize(("how", "status", "needle"), [
    ("no cookie", 403, "sign in"),
    ("forged cookie: another name", 403, "not valid"),
    ("forged cookie: another token", 403, "not valid"),
    ("forged cookie: garbage", 403, "not valid"),
    ("wrong bearer token", 403, "wrong token"),
    ("basic authorization", 403, "Bearer"),
    ("bearer without author", 400, "author's name"),
    ("cross-site origin", 403, "cross-site"),
    ("null origin", 403, "cross-site"),
    ("cross-site referer", 403, "cross-site"),
    ("no origin nor referer", 403, "neither its Origin nor its Referer"),
    ("missing reason", 400, "needs a reason"),
    ("blank reason", 400, "needs a reason"),
    ("reason too long", 400, "at most 2000"),
    ("bad grade", 400, "is not one of"),
    ("bad attempt", 400, "not an attempt number"),
    ("unknown attempt", 404, "no attempt 9"),
    ("attempt in flight", 404, "still running"),
    ("unknown cell", 404, "no cell"),
    ("unknown sweep", 404, "no sweep"),
    ("a form too large", 413, "at most"),
])
def test_every_refusal_is_one_line_4xx_and_changes_nothing_on_disk(runs: Path, how: str, status: int,
                                                                   needle: str) -> None:
    client = _signed_in(runs) if how != "no cookie" else _client(runs)
    url, form, headers = URL, _override_form(), {"origin": HERE}
    if how.startswith("forged cookie"):
        client.cookies.clear()  # only the forged one is sent
    if how == "forged cookie: another name":
        client.cookies.set(COOKIE, cookie_value(TOKEN, "alice").replace(cookie_value(TOKEN, "alice").split(".")[0],
                                                                         cookie_value(TOKEN, "bob").split(".")[0]))
    elif how == "forged cookie: another token":
        client.cookies.set(COOKIE, cookie_value("not-the-token", "alice"))
    elif how == "forged cookie: garbage":
        client.cookies.set(COOKIE, "%%%.zz")
    elif how == "wrong bearer token":
        headers = {"authorization": "Bearer t0K"}
        form["author"] = "bot"
    elif how == "basic authorization":
        headers = {"origin": HERE, "authorization": "Basic dDBrOnQwaw=="}
    elif how == "bearer without author":
        headers = {"authorization": f"Bearer {TOKEN}"}
    elif how == "cross-site origin":
        headers = {"origin": OTHER}
    elif how == "null origin":
        headers = {"origin": "null"}
    elif how == "cross-site referer":
        headers = {"referer": f"{OTHER}/sweeps/{SWEEP}"}
    elif how == "no origin nor referer":
        headers = {}
    elif how == "missing reason":
        del form["reason"]
    elif how == "blank reason":
        form["reason"] = " \n\t "
    elif how == "reason too long":
        form["reason"] = "x" * 2001
    elif how == "bad grade":
        form["grade"] = "AMAZING"
    elif how == "bad attempt":
        form["attempt"] = "one"
    elif how == "unknown attempt":
        form["attempt"] = "9"
    elif how == "attempt in flight":
        url = Links().override(SWEEP, "host0/04-item/builtin/r1")
    elif how == "unknown cell":
        url = Links().override(SWEEP, "host0/99-item/builtin/r1")
    elif how == "unknown sweep":
        url = Links().override("20990101-000000-nope", CELL)
    elif how == "a form too large":
        form["reason"] = "x" * 70_000
    before = tree_digest(runs)
    _one_line_error(client.post(url, data=form, headers=headers), status, needle)
    assert tree_digest(runs) == before


def test_refused_while_a_coordinator_writes_the_sweep(runs: Path) -> None:
    client = _signed_in(runs)
    store = Store(runs)
    before = tree_digest(runs)
    with lock_held_elsewhere(store, SWEEP):
        _one_line_error(client.post(URL, data=_override_form(), headers={"origin": HERE}), 409, "being written")
    assert tree_digest(runs) == before
    assert client.post(URL, data=_override_form(), headers={"origin": HERE}).status_code == 303


def test_a_path_out_of_the_sweep_is_refused_and_changes_nothing(runs: Path) -> None:
    client = _signed_in(runs)
    before = tree_digest(runs)
    for cell in ("../../etc/r1", "host0/01-item/builtin/r1/../../../../x"):
        r = client.post(f"/sweeps/{SWEEP}/cells/{cell}/override", data=_override_form(), headers={"origin": HERE})
        assert 400 <= r.status_code < 500 and "Traceback" not in r.text
    assert tree_digest(runs) == before


def _form_html(author: object = ..., **ctx: object) -> str:
    dash = Dashboard(store=Store("/nonexistent"), token=TOKEN)
    context = dict(sweep_id=SWEEP, cell_id=CELL, attempt=1, grade="DELIVERED", links=Links()) | ctx
    if author is not ...:
        context["author"] = author
    return dash.env.get_template("override_form.html").render(**context)


def test_the_override_form_posts_to_the_override_link_or_links_to_the_sign_in() -> None:
    signed = _form_html(author="<b>alice</b>")
    assert f'action="{Links().override(SWEEP, CELL)}"' in signed
    assert '<input type="hidden" name="attempt" value="1">' in signed
    assert '<option value="DELIVERED" selected>' in signed and 'name="reason"' in signed
    assert "&lt;b&gt;alice&lt;/b&gt;" in signed and "<b>alice" not in signed
    assert 'href="/login"' not in signed
    anonymous = _form_html(author=None)
    assert 'href="/login"' in anonymous and "<form" not in anonymous
    unknown = _form_html()  # a page that does not say who is signed in: the form and the sign-in link
    assert "<form" in unknown and 'href="/login"' in unknown
    # A cell id with characters a URL must encode stays one percent-encoded link.
    odd = _form_html(author="a", cell_id='h"o/it<em>/a/r1')
    assert 'action="/sweeps/20261201-000000-t/cells/h%22o/it%3Cem%3E/a/r1/override"' in odd


def test_the_templates_have_no_inline_script_or_style() -> None:
    for name in ("override_form.html", "login.html"):
        text = (TEMPLATES / name).read_text()
        assert "<script" not in text and "style=" not in text and "<style" not in text
        assert not re.search(r"\son\w+\s*=", text, re.I) and "javascript:" not in text
