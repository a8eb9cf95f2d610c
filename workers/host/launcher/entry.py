"""One request, one verb: ``serve`` (what BOOT calls) and ``main`` (``python3 launch.py < REQUEST.json``, for people).
Last in the assembled script, so the script run as a file has its ``main``.
"""

import sys

from .packer import _pack
from .reaping import _forget, kill, reap
from .start import run
from .wire import loads


VERBS = {"run": run, "pack": _pack, "kill": kill, "reap": reap}


def serve(req):
    """Run one request (a dict with ``verb``; the worker sends it on stdin, see ``BOOT``)."""
    verb = VERBS.get(req.get("verb"))
    if verb is None:
        sys.stderr.write("launcher: unknown verb %r (run|pack|kill|reap)\n" % (req.get("verb"),))
        return 2
    if verb is not run:
        _forget(req)  # run's own comes after the supervisor's fork, off the path of the start
    return verb(req)


def main(argv):
    """``python3 launch.py`` reads one request line from stdin: for people and tests, the worker uses BOOT."""
    if len(argv) != 1:
        sys.stderr.write("usage: launch.py < REQUEST.json (one JSON line with verb, fleet, token, ...)\n")
        return 2
    try:
        req = loads(sys.stdin.readline())
    except ValueError as exc:
        sys.stderr.write("launcher: the request is not JSON: %s\n" % exc)
        return 2
    return serve(req)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
