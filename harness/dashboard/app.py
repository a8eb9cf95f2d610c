"""The dashboard's Starlette app: the pages of this package mounted under one set of rules.

- Read-only unless started with a token; a request that would change something needs it (``auth``).
- Every response carries a Content-Security-Policy that allows this app's own scripts and styles only: a
  stored string that somehow reached the page as markup still could not run.
- A ``FleetError`` (no such sweep, a crafted store, a corrupt record) is one line on an error page with its
  status, never a traceback.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harness.core.errors import FleetError, UnsafeStoredPath, UsageError
from harness.store import Store

from harness.dashboard.context import STATIC, Dashboard, Links

__all__ = ["make_app", "PAGES", "CSP"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

PAGES = ("harness.dashboard.sweeps", "harness.dashboard.cell", "harness.dashboard.hosts", "harness.dashboard.compare",
         "harness.dashboard.grading")
"""The page modules, each with ``routes(dash) -> list[BaseRoute]``; a module not written yet is skipped."""


# same-origin, not no-referrer: other sites still learn nothing, but a form of these pages (the override) posts
# with its real Origin; under no-referrer a browser sends "Origin: null" and the cross-site check refuses it.
_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY")]


class _Headers:
    """Pure ASGI (not BaseHTTPMiddleware): a server-sent event stream passes through unbuffered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in _HEADERS if h[0] not in names)]
            await send(message)

        await self.app(scope, receive, with_headers)


def error_page(dash: Dashboard, status: int, text: str) -> HTMLResponse:
    return HTMLResponse(dash.render("error.html", Links(), status=status, text=text), status_code=status)


def _status_of(exc: FleetError) -> int:
    if isinstance(exc, UnsafeStoredPath):
        return 403
    if isinstance(exc, UsageError):
        return 404
    return 500


def make_app(runs: str | Path, token: str | None = None, *, live_poll_s: float = 1.0) -> Starlette:
    """The app serving the results directory ``runs``; ``token``: overrides are allowed to whoever gives it."""
    dash = Dashboard(store=Store(runs), token=token or None, live_poll_s=live_poll_s)
    routes: list[BaseRoute] = []
    for name in PAGES:
        try:
            module = importlib.import_module(name)  # lazy: the pages by name, each mounting its own routes
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        routes.extend(module.routes(dash))
    routes.append(Mount("/static", app=StaticFiles(directory=STATIC), name="static"))

    async def fleet_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, FleetError)
        return error_page(dash, _status_of(exc), str(exc))

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_page(dash, 404, f"no page {request.url.path}")

    app = Starlette(routes=routes, middleware=[Middleware(_Headers)],
                    exception_handlers={FleetError: fleet_error, 404: not_found})
    app.state.dash = dash
    return app
