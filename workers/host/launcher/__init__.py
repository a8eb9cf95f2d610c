"""The launcher: the harness's code on the host, run there with the host's Python.

It must run on any host (Linux, macOS, WSL) with nothing but a Python 3.8+ standard library, so it
imports nothing from the harness. The worker never runs a copy of it that lies on the host: every call
sends its source on stdin with the request (``BOOT`` reads them), so an agent that rewrites a file it found
cannot make the worker run its code. Nothing of it is written into the attempt folder.

Its records live in a per-delivery folder, ``WORKDIR/.fleet/deliveries/TOKEN/`` (mode 0700), outside the
attempt folder; the agent is not told that path. ``TOKEN`` is random per delivery (per ``run_attempt``
call): a launcher writes only into its own delivery's folder, so an old delivery can never write into a
new one. ``WORKDIR/.fleet/running/TOKEN.json`` lists the deliveries whose agent runs on this host.

Verbs (the request's ``verb``):

``run``   Starts the agent in a session of its own and supervises it: a background supervisor (it
          outlives the SSH session) writes ``started.json`` and ``exit.json``, both signed (HMAC-SHA256) with
          a key that came on stdin and lives only in memory, ends the whole agent tree at the item's
          deadline, at the end, when a later delivery supersedes it, and when no signed heartbeat came from
          the worker for ``heartbeat_s``. The supervisor prints the signed start record (or the start error)
          itself; the foreground process exits 0 once it forked it.
          With ``prepare`` it first does what comes before the agent, in the same Python start: the reap
          below, the attempt folder made afresh, the prompt and the adapter's files written into it, and the
          host's facts (uname, Python version, disk free) printed on a line of their own. With ``pack``, the
          supervisor packs (as the verb below) once the agent's tree ended by itself, after exit.json (which
          then says ``"packing": true``), and writes a signed ``packed.json`` when done.
``kill``  Ends the agent tree of one delivery (the worker's timeout or revoke).
``reap``  Before a new attempt: ends what earlier deliveries left running that this one replaces (the same
          cell and attempt delivered again, the same host slot) or that nobody supervises (launcher gone).
``pack``  Writes the workspace's tarball and manifest into the delivery folder (size-capped, vendored folders
          skipped); links are recorded with their target and never followed, FIFOs and devices never opened,
          names that are not UTF-8 escaped with their bytes kept. The request's ``outputs`` (the answer file,
          an adapter's session files and state folders) go into ``outputs.tar.gz`` and ``outputs.json`` by
          the same rules.

The agent's environment is what ``agent_env`` makes (an allow-list, the host variables ``pass_env`` names,
the adapter's values), never the launcher's own whole.

The agent tree is every process that carries the delivery's marker variable (Linux: /proc/PID/environ),
that is in the agent's session, or that descends from the agent or the supervisor (on Linux the
supervisor is a child subreaper, so a child that calls setsid and is orphaned is re-parented to it, not to
init). Kill: TERM, a grace, KILL, repeated until none is left.

Files are written to a temporary name and renamed, so the worker never reads half a file.

**One script, many modules.** The host runs one source text, and this package is that text by concern: each module
below holds one, and ``source()`` assembles them, in ``MODULES`` order, into the script the worker sends (the
modules' imports of each other dropped: in the script they share one namespace). The script is the same bytes for
the same files, so the code compiled from it (kept by the worker per source, and per host once the host gave its own
back) stays that text's. The worker also imports the package itself, for the records (``sign``, ``verify``,
``read_bundle``, ``boot_stdin``): this face re-exports their names.

======================  ==========================================================================================
``lean``                ``os`` on ``posix`` alone; the C modules under ``stat``, ``signal``, ``hashlib``, ``hmac``
``boot``                ``BOOT`` and what the worker sends on its stdin (``boot_stdin``)
``wire``                JSON without ``json``; records written whole; answer lines
``signing``             HMAC-SHA256 records and heartbeats
``fileops``             ``command -v``, ``rm -rf`` and file hashes without ``shutil`` or ``hashlib``
``delivery``            a delivery's folder, running entry, reserve and wake FIFO
``tree``                the agent tree, how it ends, whether a supervisor lives
``spawn``               the agent's environment and start; the subreaper
``bundle``              the bundle's format: its writer and its reader
``packer``              the pack (workspace, outputs, streams) and the ``pack`` verb
``reaping``             the ``kill`` and ``reap`` verbs; forgetting delivery folders
``supervisor``          the supervisor, from the agent's start to its signed end and pack
``start``               the ``run`` verb up to the supervisor's fork (start lock, prepare)
``serve``               ``serve`` (what BOOT calls) and ``main``
======================  ==========================================================================================
"""

import functools
import os

from .boot import BOOT, boot_request, boot_stdin
from .bundle import BUNDLE, BUNDLE_MAGIC, FILE, HASH_INLINE, MAX_LOG, OUTPUT, WORKSPACE, read_bundle
from .delivery import RESERVE, RESERVE_BYTES, WAKE, delivery_dir
from .fileops import _rmtree, _which
from .lean import _Os
from .packer import (MAX_DEPTH, MAX_FILE, MAX_STREAM, MAX_TOTAL, OUTPUT_CAPS, SKIP_DIRS, WORKSPACE_CAPS, pack)
from .reaping import STALE_DELIVERY_S, kill, reap
from .signing import heartbeat_line, hmac_sha256, sign, verify
from .spawn import AGENT_ENV_NAMES, AGENT_ENV_PREFIXES, StartError, _fork_exec, _posix_spawn, _spawn, agent_env
from .start import NEARLY_FULL_BYTES, START_LOCK_S, _disk_nearly_full, run
from .tree import LINUX, MARKER_VAR, TERM_GRACE, end_tree, launcher_alive, stopped
from .entry import VERBS, main, serve
from .wire import dumps, loads

# The private names above (_Os, _rmtree, _which, _spawn, _posix_spawn, _fork_exec, _disk_nearly_full) are for the
# tests, which check each against what it stands in for.
__all__ = [
    "MODULES", "source", "assemble",
    "BOOT", "boot_stdin", "boot_request",
    "dumps", "loads", "hmac_sha256", "sign", "verify", "heartbeat_line",
    "delivery_dir", "RESERVE", "RESERVE_BYTES", "WAKE",
    "LINUX", "MARKER_VAR", "TERM_GRACE", "end_tree", "launcher_alive", "stopped",
    "AGENT_ENV_NAMES", "AGENT_ENV_PREFIXES", "agent_env", "StartError",
    "BUNDLE", "BUNDLE_MAGIC", "FILE", "WORKSPACE", "OUTPUT", "MAX_LOG", "HASH_INLINE", "read_bundle",
    "SKIP_DIRS", "MAX_FILE", "MAX_TOTAL", "WORKSPACE_CAPS", "OUTPUT_CAPS", "MAX_STREAM", "MAX_DEPTH", "pack",
    "STALE_DELIVERY_S", "kill", "reap", "START_LOCK_S", "NEARLY_FULL_BYTES", "run", "VERBS", "serve", "main",
]

MODULES = ("lean", "boot", "wire", "signing", "fileops", "delivery", "tree", "spawn", "bundle", "packer", "reaping",
           "supervisor", "start", "entry")
"""The modules of the script, in its order: each imports only modules before it (tests/workers/host/
test_launcher_source.py checks that, and that every module of the package is here)."""


def assemble(folder: str) -> bytes:
    """The launcher's script from the modules in ``folder``: each in ``MODULES`` order, under a line that names it,
    without its imports of the package's other modules (``from .NAME import ...`` at the start of a line: in the
    script they are one namespace) and without an ``import NAME`` line an earlier module has already (each is work
    on every start, for nothing). Nothing else is changed, so the same files give the same bytes."""
    parts = [b"# The fleet launcher: workers/host/launcher/ in one script (workers.host.launcher.source()).\n"]
    imported: set[bytes] = set()
    for name in MODULES:
        with open(os.path.join(folder, name + ".py"), "rb") as f:
            lines = f.read().splitlines(keepends=True)
        parts.append(b"\n\n# -- %s.py\n\n" % name.encode())
        open_paren = False
        for line in lines:
            if open_paren:  # the rest of a parenthesised ``from .NAME import (...)``
                open_paren = b")" not in line
            elif line.startswith(b"from ."):
                open_paren = b"(" in line and b")" not in line
            elif line.startswith(b"import ") and line.rstrip() in imported:
                pass
            else:
                if line.startswith(b"import "):
                    imported.add(line.rstrip())
                parts.append(line)
    return b"".join(parts)


@functools.lru_cache(maxsize=None)
def source() -> bytes:
    """The script the worker sends with every launcher request (workers/attempt.py ``LAUNCHER_SOURCE``), assembled
    once per process from this package's files."""
    return assemble(os.path.dirname(os.path.abspath(__file__)))
