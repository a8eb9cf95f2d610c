"""Web acceptance check: open a workspace's HTML page in real headless Chromium and judge it.

Assertions (each one a ``details`` entry of the :class:`CheckResult`):

- ``page``: the page file exists in the workspace and loads over HTTP (status < 400). ``page`` is a path
  relative to the workspace or a glob pattern (``**/*.html``, ``**/fleet-qualification-*/**/index.html``):
  agents put a page wherever they like, so a pattern takes the shallowest match, an ``index.html``
  before other names at the same depth, then the first by name (hidden folders and ``node_modules`` are
  skipped); the detail names the file chosen and how many matched;
- ``console``: no console error and no uncaught exception (when ``no_console_errors``);
- ``element: <sel>``: each named element exists in the DOM;
- ``count: <sel>``: at least N elements matching the selector are visible when the page has loaded
  (``counts = { "article.event-card" = 3 }``);
- ``interaction``: clicking ``click`` makes ``reveals`` go from hidden to visible;
- ``overflow@<w>px``: ``documentElement.scrollWidth <= innerWidth + 1`` at the viewport width;
- ``offline``: informational, always ``passed``: the external URLs the check blocked.

The workspace is served by a stdlib ``ThreadingHTTPServer`` on a free port of 127.0.0.1 so relative assets
load. Every request to a non-loopback host is aborted (the check never touches the network, and a CDN that
cannot be reached does not hang it). The "Failed to load resource" console error Chromium logs for a blocked
URL is *not* counted (the harness caused it); errors that follow from it (``Chart is not defined``) *are*
counted: the page does not work without the network. Blocked URLs are listed in the ``offline`` detail.

Chromium is Playwright driving the system ``chromium`` (Playwright's own browser download is not used).
No Chromium (or no ``playwright`` package) gives ``untested``, never ``passed``; see docs/checks-web.md.

``python -m workers.host.webcheck WORKSPACE SPEC.json [--chromium PATH] [--timeout S]`` prints the result JSON.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import http.server
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from pydantic import ValidationError

from harness.core.checks.result import AssertionResult, CheckResult, fold_status
from harness.core.checks.spec import WebCheckSpec, WebInteraction
from harness.core.paths import climbs, real_inside

__all__ = ["WebCheckSpec", "WebInteraction", "run_web_check", "find_chromium", "find_page", "CHROMIUM_ARGS", "main"]

#: Flags that make the system Chromium behave headless, as root, on a closed network.
#: (``--headless`` and a fresh temporary ``--user-data-dir`` are added by Playwright itself.)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_ENV = "FLEET_CHROMIUM"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
OVERFLOW_TOLERANCE_PX = 1
REVEAL_WAIT_S = 3.0
ELEMENT_WAIT_S = 1.0


# --------------------------------------------------------------------------- chromium


def find_chromium(chromium: str | None = None) -> tuple[str | None, str]:
    """(executable, how it was found) or (None, why not).

    An explicit ``chromium`` (argument, else ``$FLEET_CHROMIUM``) is authoritative: a path or a name that does
    not resolve gives None, with no fallback. Otherwise the usual names are searched on PATH.
    """
    configured = chromium or os.environ.get(CHROMIUM_ENV) or None
    if configured:
        origin = "argument" if chromium else f"${CHROMIUM_ENV}"
        if os.sep in configured:
            if os.path.isfile(configured) and os.access(configured, os.X_OK):
                return configured, f"{configured} ({origin})"
            return None, f"no Chromium executable at {configured} ({origin})"
        found = shutil.which(configured)
        if found:
            return found, f"{found} ({origin})"
        return None, f"{configured!r} ({origin}) is not on PATH"
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found, f"{found} (PATH)"
    return None, f"no Chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)}); install it (apt-get install chromium)"


# --------------------------------------------------------------------------- local server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def send_head(self):
        # Chromium asks for /favicon.ico on its own; a missing one is not the page's fault.
        if self.path.split("?", 1)[0] == "/favicon.ico" and not (Path(self.directory) / "favicon.ico").exists():
            self.send_response(204)
            self.end_headers()
            return None
        return super().send_head()


class _Server:
    """The workspace over HTTP on 127.0.0.1:<free port>, in a daemon thread."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="web-check-http", daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def url(self, rel: str) -> str:
        return f"http://127.0.0.1:{self.port}/{quote(rel)}"


# --------------------------------------------------------------------------- check


def _result(spec: WebCheckSpec, details: list[AssertionResult], t0: float, status=None, summary=None) -> CheckResult:
    status = status or fold_status(details)
    if summary is None:
        bad = [d for d in details if d.status != "passed"]
        if not bad:
            summary = f"all {len(details)} assertions passed"
        else:
            summary = "; ".join(f"{d.name}: {d.message}" for d in bad)
    return CheckResult(
        name=spec.name, kind="web", status=status, summary=summary, details=details,
        duration_s=round(time.monotonic() - t0, 3),
    )


_GLOB_CHARS = frozenset("*?[")
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})


def is_pattern(page: str) -> bool:
    return any(c in _GLOB_CHARS for c in page)


def find_page(root: Path, pattern: str) -> tuple[Path | None, int]:
    """The page a glob pattern names in ``root`` (see the module docstring) and how many files matched."""
    found = []
    for path in root.glob(pattern):
        rel = path.relative_to(root)
        if not path.is_file() or any(p.startswith(".") or p in _SKIPPED_DIRS for p in rel.parts[:-1]):
            continue
        found.append((len(rel.parts), rel.name != "index.html", rel.as_posix(), path))
    return (min(found)[3], len(found)) if found else (None, 0)


def _page_path(workspace: Path, rel: str) -> tuple[Path | None, str]:
    if Path(rel).is_absolute():
        return None, f"page {rel!r} must be relative to the workspace"
    root = workspace.resolve()
    if is_pattern(rel):
        if climbs(rel):
            return None, f"page {rel!r} is outside the workspace"
        match, n = find_page(root, rel)
        if match is None:
            return None, f"no file in the workspace matches {rel}"
        rel = match.relative_to(root).as_posix()
    # A workspace path: a link the agent made may be on its way, if its end is inside the workspace.
    target, inside = real_inside(root / rel, root)
    if not inside:
        return None, f"page {rel!r} is outside the workspace"
    if not target.is_file():
        return None, f"{rel} does not exist in the workspace"
    return target, ""


def run_web_check(
    workspace: Path, spec: WebCheckSpec, timeout_s: float = 60, chromium: str | None = None
) -> CheckResult:
    """Open ``spec.page`` of ``workspace`` in headless Chromium and check it; never raises for a bad page."""
    t0 = time.monotonic()
    workspace = Path(workspace)
    target, why = _page_path(workspace, spec.page)
    if target is None:
        return _result(spec, [AssertionResult(name="page", status="failed", message=why)], t0)
    exe, how = find_chromium(chromium)
    if exe is None:
        return _result(spec, [], t0, status="untested", summary=f"untested: {how}")
    try:
        import playwright.sync_api  # noqa: F401  # lazy: a host without playwright says untested
    except ImportError:
        return _result(spec, [], t0, status="untested",
                       summary="untested: the Python package 'playwright' is not installed (pip install playwright)")
    rel = target.relative_to(workspace.resolve()).as_posix()
    note = ""
    if is_pattern(spec.page):
        n = find_page(workspace.resolve(), spec.page)[1]
        note = f" (matched {spec.page}" + (f", chosen from {n} matches)" if n > 1 else ")")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_browser(workspace.resolve(), rel, spec, timeout_s, exe, t0, note)
    # Playwright's sync API refuses to run inside an event loop: give it a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_run_browser, workspace.resolve(), rel, spec, timeout_s, exe, t0, note).result()


def _run_browser(root: Path, rel: str, spec: WebCheckSpec, timeout_s: float, exe: str, t0: float,
                 note: str = "") -> CheckResult:
    from playwright.sync_api import Error as PlaywrightError  # lazy: only some hosts have playwright
    from playwright.sync_api import sync_playwright  # lazy: only some hosts have playwright

    deadline = t0 + timeout_s

    def left_ms(cap_s: float | None = None) -> float:
        s = max(0.5, deadline - time.monotonic())
        return 1000 * (min(s, cap_s) if cap_s else s)

    details: list[AssertionResult] = []
    console_errors: list[str] = []
    blocked: list[str] = []

    def on_route(route) -> None:
        host = urlsplit(route.request.url).hostname or ""
        if host in LOCAL_HOSTS:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort("blockedbyclient")

    def on_console(msg) -> None:
        if msg.type != "error":
            return
        loc_url = (msg.location or {}).get("url", "")
        if loc_url in blocked and msg.text.startswith("Failed to load resource"):
            return  # the harness blocked it; see the module docstring
        console_errors.append(msg.text)

    def on_pageerror(err) -> None:
        console_errors.append(f"uncaught {err}")

    with _Server(root) as server:
        try:
            with sync_playwright() as pw:
                try:
                    browser = pw.chromium.launch(
                        executable_path=exe, args=CHROMIUM_ARGS, headless=True, timeout=left_ms(30)
                    )
                except PlaywrightError as e:
                    return _result(spec, [], t0, status="error",
                                   summary=f"error: Chromium {exe} did not start: {_first_line(e)}")
                try:
                    ctx = browser.new_context(
                        viewport={"width": spec.viewport_width, "height": spec.viewport_height},
                        service_workers="block",
                    )
                    ctx.route("**/*", on_route)
                    page = ctx.new_page()
                    page.set_default_timeout(left_ms(15))
                    page.on("console", on_console)
                    page.on("pageerror", on_pageerror)
                    _check_page(page, server.url(rel), rel, spec, details, left_ms, console_errors, blocked, note)
                finally:
                    browser.close()
        except PlaywrightError as e:
            details.append(AssertionResult(name="browser", status="error", message=_first_line(e)))
    return _result(spec, details, t0)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _check_page(page, url, rel, spec, details, left_ms, console_errors, blocked, note="") -> None:
    from playwright.sync_api import Error as PlaywrightError  # lazy: only some hosts have playwright

    try:
        resp = page.goto(url, wait_until="load", timeout=left_ms())
    except PlaywrightError as e:
        details.append(AssertionResult(name="page", status="failed", message=f"{rel} did not load: {_first_line(e)}"))
        return
    if resp is not None and resp.status >= 400:
        details.append(AssertionResult(name="page", status="failed", message=f"{rel} answered HTTP {resp.status}"))
        return
    details.append(AssertionResult(name="page", status="passed", message=f"{rel} loaded{note}"))
    try:  # let scripts that render after load settle; a page that never goes idle is fine
        page.wait_for_load_state("networkidle", timeout=left_ms(3))
    except PlaywrightError:
        pass

    for sel in spec.elements:
        loc = _resolve(page, sel, left_ms(ELEMENT_WAIT_S))
        name = f"element: {sel}"
        if loc is None:
            details.append(AssertionResult(name=name, status="failed", message=f"no element matches {sel!r}"))
        else:
            details.append(AssertionResult(name=name, status="passed", message=f"{loc.count()} match(es)"))

    for sel, least in spec.counts.items():
        details.append(_check_count(page, sel, least, left_ms(ELEMENT_WAIT_S)))

    if spec.interaction is not None:
        details.append(_check_interaction(page, spec.interaction, left_ms))

    details.append(_check_overflow(page, spec.viewport_width))

    if spec.no_console_errors:
        # collected after the interaction: an error thrown by the click handler counts too
        if console_errors:
            shown = "; ".join(e[:200] for e in console_errors[:5])
            more = f" (+{len(console_errors) - 5} more)" if len(console_errors) > 5 else ""
            msg = f"{len(console_errors)} console error(s): {shown}{more}"
            if blocked:
                msg += f" [note: {len(blocked)} external request(s) were blocked]"
            details.append(AssertionResult(name="console", status="failed", message=msg))
        else:
            details.append(AssertionResult(name="console", status="passed", message="no console errors"))

    details.append(AssertionResult(
        name="offline", status="passed",
        message=("blocked external requests: " + ", ".join(sorted(set(blocked))[:10])) if blocked
        else "no external requests",
    ))


def _css_or_text(page, sel: str):
    """A locator for ``sel``: an explicit engine prefix as is; CSS when it is valid CSS and matches; else text."""
    if sel.split("=", 1)[0] in {"css", "text", "xpath", "role", "id", "data-testid", "internal:text"} and "=" in sel:
        return page.locator(sel)
    try:
        loc = page.locator(f"css={sel}")
        if loc.count() > 0:
            return loc
    except Exception:  # invalid CSS: it is text
        pass
    return page.get_by_text(sel)


def _resolve(page, sel: str, wait_ms: float):
    """The matching locator, waiting up to ``wait_ms`` for it to be attached; None when nothing matches."""
    end = time.monotonic() + wait_ms / 1000
    while True:
        loc = _css_or_text(page, sel)
        try:
            if loc.count() > 0:
                return loc
        except Exception:
            return None
        if time.monotonic() >= end:
            return None
        time.sleep(0.1)


def _visible_count(page, sel: str, cap: int = 200) -> int:
    loc = _css_or_text(page, sel)
    try:
        return sum(1 for i in range(min(loc.count(), cap)) if loc.nth(i).is_visible())
    except Exception:
        return 0


def _check_count(page, sel: str, least: int, wait_ms: float) -> AssertionResult:
    name = f"count: {sel}"
    end = time.monotonic() + wait_ms / 1000
    while True:
        n = _visible_count(page, sel)
        if n >= least:
            return AssertionResult(name=name, status="passed", message=f"{n} visible (at least {least} wanted)")
        if time.monotonic() >= end:
            return AssertionResult(name=name, status="failed", message=f"{n} visible, at least {least} wanted")
        time.sleep(0.1)


def _any_visible(page, sel: str) -> bool:
    loc = _css_or_text(page, sel)
    try:
        n = min(loc.count(), 20)
        return any(loc.nth(i).is_visible() for i in range(n))
    except Exception:
        return False


def _click_target(page, sel: str):
    button = page.get_by_role("button", name=sel)
    try:
        if button.count() > 0:
            return button.first
    except Exception:
        pass
    loc = _css_or_text(page, sel)
    try:
        return loc.first if loc.count() > 0 else None
    except Exception:
        return None


def _check_interaction(page, it: WebInteraction, left_ms) -> AssertionResult:
    from playwright.sync_api import Error as PlaywrightError  # lazy: only some hosts have playwright

    name = "interaction"
    if _any_visible(page, it.reveals):
        return AssertionResult(name=name, status="failed",
                               message=f"{it.reveals!r} is already visible before clicking {it.click!r}")
    target = _click_target(page, it.click)
    if target is None:
        return AssertionResult(name=name, status="failed", message=f"nothing to click: no element matches {it.click!r}")
    try:
        target.click(timeout=left_ms(5))
    except PlaywrightError as e:
        return AssertionResult(name=name, status="failed", message=f"clicking {it.click!r} failed: {_first_line(e)}")
    end = time.monotonic() + min(REVEAL_WAIT_S, left_ms() / 1000)
    while True:
        if _any_visible(page, it.reveals):
            return AssertionResult(name=name, status="passed", message=f"clicking {it.click!r} revealed {it.reveals!r}")
        if time.monotonic() >= end:
            return AssertionResult(name=name, status="failed",
                                   message=f"clicking {it.click!r} did not reveal {it.reveals!r} within {REVEAL_WAIT_S:g}s")
        time.sleep(0.1)


_OVERFLOW_JS = """(tol) => {
  const de = document.documentElement;
  const iw = window.innerWidth, sw = de.scrollWidth;
  const culprits = [];
  if (sw > iw + tol) {
    for (const el of document.body ? document.body.querySelectorAll('*') : []) {
      const r = el.getBoundingClientRect();
      if (r.right > iw + tol && r.width > 0) {
        let d = el.tagName.toLowerCase();
        if (el.id) d += '#' + el.id;
        else if (typeof el.className === 'string' && el.className.trim()) d += '.' + el.className.trim().split(/\\s+/).join('.');
        culprits.push(d + ' (right ' + Math.round(r.right) + 'px)');
        if (culprits.length >= 3) break;
      }
    }
  }
  return {scrollWidth: sw, innerWidth: iw, culprits};
}"""


def _check_overflow(page, width: int) -> AssertionResult:
    name = f"overflow@{width}px"
    try:
        m = page.evaluate(_OVERFLOW_JS, OVERFLOW_TOLERANCE_PX)
    except Exception as e:
        return AssertionResult(name=name, status="error", message=f"could not measure: {_first_line(e)}")
    sw, iw = m["scrollWidth"], m["innerWidth"]
    if sw > iw + OVERFLOW_TOLERANCE_PX:
        extra = f"; widest: {', '.join(m['culprits'])}" if m["culprits"] else ""
        return AssertionResult(name=name, status="failed",
                               message=f"overflows horizontally: scrollWidth {sw}px > innerWidth {iw}px{extra}")
    return AssertionResult(name=name, status="passed", message=f"scrollWidth {sw}px <= innerWidth {iw}px")


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``python -m workers.host.webcheck WORKSPACE SPEC.json [--chromium PATH] [--timeout S]``.

    Prints the CheckResult JSON and exits 0 whatever the verdict; exits 2 with one line on bad input.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    opts: dict[str, str] = {}
    pos: list[str] = []
    usage = "usage: python -m workers.host.webcheck WORKSPACE SPEC.json [--chromium PATH] [--timeout SECONDS]"
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            print(usage)
            return 0
        if a in ("--chromium", "--timeout"):
            if i + 1 >= len(args):
                return _bad(f"{a} needs a value")
            opts[a] = args[i + 1]
            i += 2
            continue
        if a.startswith("--"):
            return _bad(f"unknown option {a}; {usage}")
        pos.append(a)
        i += 1
    if len(pos) != 2:
        return _bad(usage)
    workspace, spec_path = Path(pos[0]), Path(pos[1])
    if not workspace.is_dir():
        return _bad(f"workspace {workspace} is not a directory")
    try:
        spec = WebCheckSpec.model_validate(json.loads(spec_path.read_text(encoding="utf-8")))
    except OSError as e:
        return _bad(f"cannot read spec {spec_path}: {e.strerror or e}")
    except json.JSONDecodeError as e:
        return _bad(f"spec {spec_path} is not JSON: {e}")
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        return _bad(f"spec {spec_path} is invalid: {where}: {err['msg']}")
    try:
        timeout = float(opts.get("--timeout", "60"))
    except ValueError:
        return _bad(f"--timeout must be a number, not {opts['--timeout']!r}")
    result = run_web_check(workspace, spec, timeout_s=timeout, chromium=opts.get("--chromium"))
    print(result.model_dump_json(indent=2))
    return 0


def _bad(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
