"""Grade overrides in the dashboard: sign in with the token (``/login``, ``/logout``) and override a cell's grade
(``POST /sweeps/ID/cells/CELL/override``), the same ``override_grade`` as ``fleet grade --override``.

- Without a token the dashboard is read-only: every route here answers 403 and nothing else.
- Signing in proves the token once: the cookie holds the reviewer's name and an HMAC-SHA256 of it keyed by the
  token, never the token itself (HttpOnly, SameSite=Strict). A script may instead send ``Authorization: Bearer
  TOKEN`` and an ``author`` field.
- Every POST must come from this dashboard's own pages: its Origin (or, without one, its Referer) must name
  the Host it was sent to. SameSite=Strict alone is not enough (an older browser, a sibling site on another
  port of the same host name).
- Every refusal is one line on the error page with a 4xx status, decided before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import urllib.parse
from typing import Final

import anyio
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from harness.dashboard.context import Dashboard, Links
from harness.core.errors import UsageError, one_line
from harness.grading.override import check_author, check_override_input
from harness.store import override_grade

__all__ = ["routes", "reviewer", "cookie_value", "COOKIE", "READ_ONLY", "LOGOUT"]

COOKIE: Final = "fleet_reviewer"
READ_ONLY: Final = "the dashboard is read-only (started without a token)"
LOGOUT: Final = "/logout"
FORM_MAX: Final = 64 * 1024
"""Bytes of a sign-in or override form: a reason is at most 2,000 characters."""
_PURPOSE: Final = b"fleet dashboard reviewer\n"
"""What the HMAC signs besides the name: the key (the token) is used for nothing else, but say what it signs."""


class _Refused(Exception):
    """A request this module refuses: its status and one line."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _mac(token: str, author: str) -> str:
    return hmac.new(token.encode(), _PURPOSE + author.encode(), hashlib.sha256).hexdigest()


def cookie_value(token: str, author: str) -> str:
    """The sign-in cookie: the name (base64url, a cookie value cannot hold every character) and its HMAC."""
    name = base64.urlsafe_b64encode(author.encode()).decode("ascii").rstrip("=")
    return f"{name}.{_mac(token, author)}"


def _author_of(token: str, value: str) -> str | None:
    """The name a sign-in cookie proves, or None when it proves nothing (malformed, or signed with another token)."""
    name, _, mac = value.partition(".")
    try:
        author = base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not hmac.compare_digest(_mac(token, author).encode(), mac.encode()):
        return None
    return author


def reviewer(dash: Dashboard, request: Request) -> str | None:
    """The name of the reviewer signed in on this request (a valid cookie), else None. A page that includes
    ``override_form.html`` may pass it as ``author``, so the form says who grades or links to the sign-in."""
    value = request.cookies.get(COOKIE)
    if dash.token is None or not value:
        return None
    return _author_of(dash.token, value)


def _token_matches(token: str, given: str) -> bool:
    return hmac.compare_digest(token.encode(), given.encode())


def _check_origin(request: Request, *, bearer: bool) -> None:
    """Refuse a request another site made a browser send: its Origin, or its Referer when it has no Origin, must
    name the Host it was sent to. A request with neither is a script's, allowed only with the token itself."""
    host = (request.headers.get("host") or "").lower()
    origin = request.headers.get("origin")
    if origin is not None:
        # "null" (an opaque origin: a sandboxed frame, a data: page) names no host and so never matches.
        if urllib.parse.urlsplit(origin).netloc.lower() != host or not host:
            raise _Refused(403, f"refused: a cross-site request (Origin {one_line(origin)[:200]!r} is not this dashboard)")
        return
    referer = request.headers.get("referer")
    if referer is not None:
        if urllib.parse.urlsplit(referer).netloc.lower() != host or not host:
            raise _Refused(403, "refused: a cross-site request (its Referer is not a page of this dashboard)")
        return
    if not bearer:
        raise _Refused(403, "refused: the request names neither its Origin nor its Referer (send it from the "
                       "dashboard's page, or with Authorization: Bearer TOKEN)")


async def _form(request: Request) -> FormData:
    """The posted form, refused when it is larger than any real one (the length is known before it is read)."""
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        raise _Refused(411, "refused: the form has no Content-Length")
    if int(length) > FORM_MAX:
        raise _Refused(413, f"refused: the form is {int(length)} bytes; at most {FORM_MAX}")
    try:
        return await request.form(max_files=0, max_fields=20)
    except Exception as exc:  # a malformed body (multipart or not): python-multipart's own errors vary
        raise _Refused(400, f"refused: the form cannot be read: {one_line(str(exc))[:200]}") from None


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _local_path(value: str | None) -> str:
    """Where to go after signing in: a path of this dashboard, never another site (``//evil``, ``https://...``)."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value and one_line(value) == value:
        return value
    return "/"


def routes(dash: Dashboard) -> list[BaseRoute]:
    links = Links()

    def refused(status: int, text: str) -> HTMLResponse:
        return HTMLResponse(dash.render("error.html", links, status=status, text=text), status_code=status)

    def writable() -> str:
        if dash.token is None:
            raise _Refused(403, READ_ONLY)
        return dash.token

    async def login_page(request: Request) -> Response:
        try:
            writable()
        except _Refused as exc:
            return refused(exc.status, exc.text)
        # Back where the reviewer came from (the cell page), when that was a page of this dashboard.
        back = request.query_params.get("next")
        referer = request.headers.get("referer")
        if back is None and referer:
            parts = urllib.parse.urlsplit(referer)
            if parts.netloc.lower() == (request.headers.get("host") or "").lower():
                back = parts.path + (f"?{parts.query}" if parts.query else "")
        return _page(HTMLResponse(dash.render("login.html", links, author=reviewer(dash, request),
                                              next=_local_path(back), logout=LOGOUT)))

    async def login(request: Request) -> Response:
        try:
            token = writable()
            _check_origin(request, bearer=False)
            form = await _form(request)
            if not _token_matches(token, _field(form, "token")):
                raise _Refused(403, "wrong token")
            try:
                author = check_author(_field(form, "author"))
            except UsageError as exc:
                raise _Refused(400, str(exc)) from None
        except _Refused as exc:
            return refused(exc.status, exc.text)
        response = RedirectResponse(_local_path(_field(form, "next")), status_code=303)
        response.set_cookie(COOKIE, cookie_value(token, author), httponly=True, samesite="strict", path="/")
        return response

    async def logout(request: Request) -> Response:
        try:
            writable()
            _check_origin(request, bearer=False)
        except _Refused as exc:
            return refused(exc.status, exc.text)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, httponly=True, samesite="strict", path="/")
        return response

    async def override(request: Request) -> Response:
        sweep_id, cell_id = request.path_params["sweep_id"], request.path_params["cell_id"]
        try:
            token = writable()
            auth = request.headers.get("authorization")
            bearer = auth is not None and auth[:7].lower() == "bearer "
            _check_origin(request, bearer=bearer)
            if auth is not None and not bearer:
                raise _Refused(403, "refused: Authorization must be Bearer TOKEN")
            if bearer:
                assert auth is not None
                if not _token_matches(token, auth[7:].strip()):
                    raise _Refused(403, "wrong token")
            else:
                cookie = request.cookies.get(COOKIE)
                if not cookie:
                    raise _Refused(403, "sign in with the dashboard's token first (/login)")
                signed = _author_of(token, cookie)
                if signed is None:
                    raise _Refused(403, "refused: the sign-in cookie is not valid (sign in again)")
            form = await _form(request)
            author = _field(form, "author") if bearer else signed or ""
            attempt_text = _field(form, "attempt").strip()
            if not attempt_text.isdigit() or not 0 < int(attempt_text) < 1_000_000:
                raise _Refused(400, f"attempt {one_line(attempt_text)[:40]!r} is not an attempt number")
            try:
                grade, reason, author = check_override_input(_field(form, "grade"), _field(form, "reason"), author)
            except UsageError as exc:
                raise _Refused(400, str(exc)) from None
            if await anyio.to_thread.run_sync(dash.store.is_being_written, sweep_id):
                raise _Refused(409, f"sweep {sweep_id} is being written by a coordinator; override its grades when "
                               "it has ended")
            try:
                await anyio.to_thread.run_sync(override_grade, dash.store, sweep_id, cell_id, int(attempt_text),
                                               grade, reason, author)
            except UsageError as exc:
                # No such sweep, cell or recorded attempt (404), or a coordinator took the lock just now (409).
                busy = await anyio.to_thread.run_sync(dash.store.is_being_written, sweep_id)
                raise _Refused(409 if busy else 404, str(exc)) from None
        except _Refused as exc:
            return refused(exc.status, exc.text)
        return RedirectResponse(links.cell(sweep_id, cell_id), status_code=303)

    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route(LOGOUT, logout, methods=["POST"]),
        Route("/sweeps/{sweep_id}/cells/{cell_id:path}/override", override, methods=["POST"]),
    ]


def _page(response: Response) -> Response:
    # The sign-in form posts back here: a same-origin policy lets the browser say where the post comes from
    # (with no-referrer its Origin would be "null" and the post refused as cross-site); other sites get nothing.
    response.headers["referrer-policy"] = "same-origin"
    return response
