"""The sweeps list with its trends (``/``), one sweep's matrix (``/sweeps/ID``), and the matrix's live updates
(``/sweeps/ID/events``, server-sent events)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import AsyncIterator

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from harness.dashboard.chip import chip_markup, chips_markup
from harness.dashboard.context import Dashboard, Links
from harness.dashboard.listing import read_listing
from harness.dashboard.matrix import Chip, chips_of, read_matrix
from harness.store import JOURNAL
from harness.views.sweeplist import shown_status

__all__ = ["routes", "sweep_page", "chip_html"]


def sweep_page(dash: Dashboard, sweep_id: str, links: Links) -> str:
    """The matrix page of one sweep (the export writes the same)."""
    state = state_token(_state(dash, sweep_id))  # before the read: a change after it is sent live
    matrix = read_matrix(dash.store, sweep_id)
    return dash.render("sweep.html", links, m=matrix, sweep=matrix.sweep, state=state, chips_markup=chips_markup)


def chip_html(dash: Dashboard, chip: Chip, sweep_id: str, links: Links) -> str:
    return str(chip_markup(chip, sweep_id, links))


def _state(dash: Dashboard, sweep_id: str) -> tuple[int, int, int, int] | None:
    """What changes when the sweep's state does: sweep.json's and the journal's identity and size."""
    d = dash.store.sweep_dir(sweep_id)
    out: list[int] = []
    for name in ("sweep.json", JOURNAL):
        try:
            st = os.stat(d / name)
            out += [st.st_mtime_ns, st.st_size]
        except FileNotFoundError:
            out += [0, 0]
    return (out[0], out[1], out[2], out[3])


def state_token(state: tuple[int, int, int, int] | None) -> str:
    return "-".join(map(str, state)) if state else ""


def routes(dash: Dashboard) -> list[BaseRoute]:
    links = Links()

    async def index(request: Request) -> Response:
        label = request.query_params.get("label") or None
        listing = await anyio.to_thread.run_sync(read_listing, dash.store, label)
        return HTMLResponse(dash.render("sweeps.html", links, listing=listing, label=label))

    async def sweep(request: Request) -> Response:
        sweep_id = request.path_params["sweep_id"]
        return HTMLResponse(await anyio.to_thread.run_sync(sweep_page, dash, sweep_id, links))

    async def events(request: Request) -> Response:
        sweep_id = request.path_params["sweep_id"]
        # The state the page was rendered from (``since``): when the sweep changed between the render and
        # this request, every chip is sent once, so nothing that happened in between is missed.
        seen = _state(dash, sweep_id)
        first = await anyio.to_thread.run_sync(dash.store.load_sweep, sweep_id)
        live = shown_status(dash.store, first) in ("planned", "running")
        sent: dict[str, Chip] = chips_of(first, live)
        if request.query_params.get("since") != state_token(seen):
            sent, seen = {}, None

        async def stream() -> AsyncIterator[str]:
            nonlocal sent, seen
            yield "retry: 2000\n\n"
            quiet = 0.0
            while True:
                if await request.is_disconnected():
                    return
                await asyncio.sleep(dash.live_poll_s)
                quiet += dash.live_poll_s
                now = _state(dash, sweep_id)
                if now == seen:
                    if quiet >= 15:
                        quiet = 0.0
                        yield ": keep-alive\n\n"
                    continue
                seen, quiet = now, 0.0
                rec = await anyio.to_thread.run_sync(dash.store.load_sweep, sweep_id)
                status = shown_status(dash.store, rec)
                live_now = status in ("planned", "running")
                chips = chips_of(rec, live_now)
                for cell_id, chip in chips.items():
                    if sent.get(cell_id) != chip:
                        data = json.dumps({"cell": cell_id, "grade": chip.grade,
                                           "html": chip_html(dash, chip, sweep_id, links)})
                        yield f"event: cell\ndata: {data}\n\n"
                sent = chips
                yield f"event: status\ndata: {json.dumps({'status': status})}\n\n"
                if not live_now:
                    yield "event: end\ndata: {}\n\n"
                    return

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return [Route("/", index, name="sweeps"), Route("/sweeps/{sweep_id}", sweep, name="sweep"),
            Route("/sweeps/{sweep_id}/events", events, name="events")]
