"""Fixtures for the dashboard's browser tests: the real ``fleet dashboard`` server as a subprocess, and real
headless Chromium (Playwright driving the system ``/usr/bin/chromium``; Playwright's own browser download is
never used).

- ``fleet_dashboard``: a factory, ``fleet_dashboard(runs) -> DashboardServer``; each server listens on a free
  loopback port of its own (``--port 0``, the port read from its first line), and is stopped with SIGTERM at
  the end of the test, which fails if it does not exit within a few seconds.
- ``chromium``: one browser per test session (per xdist worker).
- ``open_page``: a factory, ``open_page(server, width=1280, height=800) -> Tab``; each tab has a fresh
  browser context whose base URL is the server's, and collects every console error and page error (an
  uncaught exception; a CSP violation is a console error). A test fails if any was collected and not
  expected (``Tab.expect_error``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support import REPO, fleet_argv

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
"""Screenshots the tests save (ignored by git; CI may keep them)."""
START_S = 20.0
STOP_S = 5.0
_LISTENING = re.compile(r"^fleet dashboard: (http://\S+/) ")


@dataclass
class DashboardServer:
    """A running ``fleet dashboard --runs DIR --port 0`` process."""

    runs: Path
    proc: subprocess.Popen[str]
    url: str
    port: int
    stderr: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def stop(self) -> int:
        """SIGTERM; the exit code. Fails the test if the server takes longer than STOP_S to exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"fleet dashboard did not exit within {STOP_S} s of SIGTERM")
        for reader in self.readers:
            reader.join(timeout=STOP_S)  # everything it printed is in ``stderr``
        return self.proc.returncode


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["FLEET_HARNESS_COMMIT"] = "test-commit"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start_dashboard(runs: Path, *args: str) -> DashboardServer:
    """Start the real command and wait for its "fleet dashboard: http://..." line."""
    proc = subprocess.Popen([*fleet_argv(), "dashboard", "--runs", str(runs), "--port", "0", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=runs.parent)
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    ready = threading.Event()
    errors: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            ready.set()
        ready.set()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            errors.append(line)

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for reader in readers:
        reader.start()
    if not ready.wait(START_S) or not lines:
        proc.kill()
        proc.wait()
        pytest.fail(f"fleet dashboard printed no address within {START_S} s; stderr: {''.join(errors)!r}")
    m = _LISTENING.match(lines[0])
    if m is None:
        proc.kill()
        proc.wait()
        pytest.fail(f"fleet dashboard's first line is not its address: {lines[0]!r}; stderr: {''.join(errors)!r}")
    url = m.group(1)
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    assert url == f"http://127.0.0.1:{port}/", url  # loopback by default
    return DashboardServer(runs=runs, proc=proc, url=url, port=port, stderr=errors, readers=readers)


@pytest.fixture
def fleet_dashboard() -> Iterator[Callable[..., DashboardServer]]:
    servers: list[DashboardServer] = []

    def start(runs: Path, *args: str) -> DashboardServer:
        server = start_dashboard(runs, *args)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
        assert "Traceback" not in "".join(server.stderr), "".join(server.stderr)


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no Chromium at {CHROMIUM}: run the test command from the README (it installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@dataclass
class Tab:
    """A page in a fresh browser context, with the console errors and page errors it has seen."""

    page: Any
    server: DashboardServer
    errors: list[str] = field(default_factory=list)
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def goto(self, path: str) -> Any:
        """Open ``path`` (relative to the server's root) and wait for it to load; the response."""
        return self.page.goto(self.server.url.rstrip("/") + path, wait_until="load")

    def expect_error(self, pattern: str) -> None:
        """A console error the test causes on purpose (a 404 page's "Failed to load resource")."""
        self.expected.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.expected)]

    def assert_clean(self) -> None:
        assert self.unexpected() == [], self.unexpected()


@pytest.fixture
def open_page(chromium: Any, fleet_dashboard: Any) -> Iterator[Callable[..., Tab]]:
    """Depends on ``fleet_dashboard`` so its contexts close before the servers are stopped."""
    tabs: list[tuple[Any, Tab]] = []

    def open_tab(server: DashboardServer, width: int = 1280, height: int = 800) -> Tab:
        context = chromium.new_context(viewport={"width": width, "height": height})
        context.set_default_timeout(10_000)
        # Nothing but the dashboard: a request that leaves loopback is aborted (and would show as an error).
        context.route(re.compile(r"^(?!http://127\.0\.0\.1:\d+/).*"), lambda route: route.abort())
        page = context.new_page()
        tab = Tab(page=page, server=server)

        def on_console(msg: Any) -> None:
            if msg.type == "error":
                loc = msg.location or {}
                tab.errors.append(f"console error: {msg.text} ({loc.get('url', '')})")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: tab.errors.append(f"page error: {exc}"))
        tabs.append((context, tab))
        return tab

    yield open_tab
    problems = []
    for context, tab in tabs:
        context.close()
        problems += tab.unexpected()
    if problems:
        pytest.fail("console or page errors: " + "; ".join(problems))


def wait_for(predicate: Callable[[], Any], timeout_s: float = 10.0, what: str = "the condition") -> Any:
    """Poll ``predicate`` until it returns something true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.05)
