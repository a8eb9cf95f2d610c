"""The override in real headless Chromium (Playwright driving the system ``chromium``) against the real app served
by uvicorn on loopback: refused without signing in (nothing on disk changes), signed in with the token through the
sign-in page, the override form posts and the override is written; no console errors (a CSP violation is one).

The form is shown on a stand-in page that includes ``override_form.html`` as the cell page does, through
``base.html`` and the app's headers (the cell page is another module's). It runs in CI; a machine without
Chromium fails with the fix (``bash .ci/setup``) rather than skipping."""

from __future__ import annotations

import contextlib
from typing import Any
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from workers.host.webcheck import CHROMIUM_ARGS, find_chromium
from harness.dashboard.app import make_app
from harness.dashboard.context import Links
from harness.grading.gradefiles import read_grade_history
from harness.grading.override import GradeOverride
from harness.store import Store
from tests.harness.grading.test_override import CELL, SWEEP, build_runs, tree_digest

pytestmark = pytest.mark.integration

STAND_IN = '{% extends "base.html" %}{% block main %}{% include "override_form.html" %}{% endblock %}'


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    runs = tmp_path / "runs"
    build_runs(runs)
    app = make_app(runs, token="t0k")
    dash = app.state.dash

    async def cell_stand_in(request: Request) -> HTMLResponse:
        return HTMLResponse(dash.env.from_string(STAND_IN).render(
            links=Links(), writable=True, sweep_id=SWEEP, cell_id=CELL, attempt=1, grade="DELIVERED"))

    app.router.routes.insert(0, Route("/stand-in", cell_stand_in))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", runs
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_the_override_in_chromium_refused_without_signing_in_then_written(served: tuple[str, Path], chromium: Any) -> None:

    base, runs = served
    exe, why = find_chromium()
    assert exe is not None, f"{why} (bash .ci/setup installs it)"
    errors: list[str] = []
    # The session's one browser (conftest): a second sync_playwright in the same worker is refused.
    with contextlib.nullcontext(chromium) as browser:
        try:
            page = browser.new_page(viewport={"width": 375, "height": 800})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            before = tree_digest(runs)
            # Not signed in: the form is there, its post is refused with one line, and nothing is written.
            page.goto(f"{base}/stand-in")
            page.select_option("select[name=grade]", "PARTIAL")
            page.fill("textarea[name=reason]", "the page is blank")
            with page.expect_response(lambda r: r.request.method == "POST") as posted:
                page.click("form.override-form button[type=submit]")
            assert posted.value.status == 403
            assert "sign in with the dashboard's token first" in page.inner_text("p.error-line")
            assert tree_digest(runs) == before
            # Sign in through the page's link; the sign-in page brings the reviewer back.
            page.goto(f"{base}/stand-in")
            page.click("text=Sign in with the dashboard's token")
            page.fill("input[name=token]", "t0k")
            page.fill("input[name=author]", "alice")
            page.click("form.override-form button[type=submit]")
            page.wait_for_url(f"{base}/stand-in")
            page.select_option("select[name=grade]", "PARTIAL")
            page.fill("textarea[name=reason]", "the page is blank")
            with page.expect_response(lambda r: r.request.method == "POST") as posted:
                page.click("form.override-form button[type=submit]")
            assert posted.value.status == 303
            assert page.url == base + Links().cell(SWEEP, CELL)  # back to the cell page
            cookies = {c["name"]: c for c in page.context.cookies()}
            assert cookies["fleet_reviewer"]["httpOnly"] and cookies["fleet_reviewer"]["sameSite"] == "Strict"
        finally:
            page.context.close()
    last = read_grade_history(Store(runs).attempt_dir(SWEEP, CELL, 1))[-1]
    assert isinstance(last, GradeOverride) and (last.grade, last.author, last.reason) == (
        "PARTIAL", "alice", "the page is blank")
    # The 403, the favicon and the cell page (not on this branch) are error statuses the browser logs; nothing else.
    assert all("status of 40" in e for e in errors), errors
