"""How the worker starts the launcher on a host: ``BOOT``, the few lines the host's Python runs (``python3 -S -c BOOT
VERB TOKEN``), and what the worker sends it on stdin (``boot_stdin``): the request marshalled, with the launcher's
source and its compiled code.

Apart because it is the part both sides use: the worker writes with ``boot_stdin`` (workers/attempt.py, and
harness/coordinator/hostclean.py for workers/host/clean.py, which BOOT starts the same way), the host runs ``BOOT``.
No code ever comes from a file on the host (docs/launcher.md, "No launcher file is ever run").
"""

import sys


BOOT = ("import sys,marshal as M\n"
        "i=sys.stdin.buffer;m=M.loads(i.read(int(i.readline())));c=m.pop('code',b'');s=m.pop('source')\n"
        "if c and m.pop('tag','')==sys.version:c=M.loads(c);m['compiled']=b''\n"
        "else:import zlib as Z;c=compile(Z.decompress(s),'fleet-launcher','exec',optimize=2);"
        "m['compiled']=Z.compress(M.dumps(c))\n"
        "g={'__name__':'fleet_launcher'};exec(c,g);r=g['serve'](m);sys.stdout.flush();sys.stderr.flush()\n"
        "__import__('posix')._exit(r or 0)")
"""What the worker runs (``python3 -S -c BOOT VERB TOKEN``): the code and the request come on stdin, as
``boot_stdin`` writes them. Code compiled here is handed to ``serve`` (``compiled``), so that ``run`` can give it to
the worker, for the next starts on this host. It ends with ``posix._exit`` (``os`` is not imported, see ``_Os``) once
its output is flushed: the interpreter's own teardown is time on the worker's wait, and the launcher has nothing to
tear down."""

_COMPILED = {}  # type: dict


def boot_stdin(source, request, compiled=None):
    """What a BOOT start reads on stdin: a line with the length of what follows, then ``request`` marshalled (plain
    data, whose format is the same from Python 3.4 on) with ``source`` (zlib) and compiled code (marshalled, not
    compressed: zlib's import and the decompression were 0.6 ms of every start) for the interpreter whose
    ``sys.version`` is its ``tag``: ``compiled`` (tag, code) when the worker has the host's own (``run`` prints it
    once, zlib-compressed, see ``serve``), else what this process compiled. A host whose interpreter is the tag's runs
    that code and compiles nothing (10 to 16 ms of every start); any other compiles the source. No code ever comes
    from a file on the host."""
    import marshal
    import zlib

    if not isinstance(source, bytes):
        source = source.encode("utf-8")
    if source not in _COMPILED:
        code = compile(source, "fleet-launcher", "exec", optimize=2)
        _COMPILED[source] = (zlib.compress(source, 6), sys.version, marshal.dumps(code))
    source_z, tag, code = _COMPILED[source]
    if compiled is not None:
        tag, code = compiled
    body = dict(request)
    body.update(source=source_z, code=code, tag=tag)
    data = marshal.dumps(body, 4)
    return b"%d\n" % len(data) + data


def boot_request(data):
    """The request in what ``boot_stdin`` wrote, without the code and the source: for tests and people."""
    import marshal

    line, _, rest = bytes(data).partition(b"\n")
    body = marshal.loads(rest[:int(line)])
    for name in ("code", "source", "tag"):
        body.pop(name, None)
    return body
