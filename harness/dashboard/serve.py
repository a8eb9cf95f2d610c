"""Run the dashboard's app with uvicorn: one line saying where it listens, a clear line when the port is taken."""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path

import uvicorn

from harness.core.errors import UsageError
from harness.dashboard.app import make_app

__all__ = ["serve"]


def serve(runs: Path, bind: str, port: int, token: str | None) -> None:
    if not runs.is_dir():
        raise UsageError(f"{runs}: no results directory (run a sweep first, or give --runs)")
    # Bind first, ourselves: a taken port or a bad address is one line, not uvicorn's log and traceback.
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, port))
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc.strerror or exc}"
        raise UsageError(f"--host {bind} --port {port}: the address {why}") from None
    sock.listen(128)
    host, real_port = sock.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    mode = "grade overrides allowed with the token" if token else "read-only (no token)"
    print(f"fleet dashboard: http://{shown}:{real_port}/ serving {runs} ({mode}); Ctrl-C stops it", flush=True)
    if bind not in ("127.0.0.1", "::1", "localhost"):
        print(f"fleet dashboard: warning: listening on {bind}, not loopback: anyone who reaches it reads every "
              "stored transcript", file=sys.stderr, flush=True)
    config = uvicorn.Config(make_app(runs, token), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
