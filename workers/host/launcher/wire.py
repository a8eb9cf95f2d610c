"""JSON on the host: the launcher's records on the disk and its answer lines to the worker.

``dumps`` and ``loads`` are the json module's, on its C parts (``_json``): the json module pulls in ``re``, 9 ms of a
start. A record is written whole (a temporary name, then a rename), so the worker never reads half of one; an answer
is one JSON line on stdout (``_say``), which is what the worker reads of each call.
"""

import sys

from .lean import os


def _no_default(obj):
    raise TypeError("not JSON: %r" % (obj,))


def _make_json():
    """``dumps`` and ``loads`` as the json module's, on its C parts (``_json``), which need no ``re``: the json module
    costs 9 ms of a start. Any interpreter without them gets the json module's."""
    try:
        import _json

        _json.make_encoder(None, _no_default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)
    except (ImportError, AttributeError, TypeError):
        import json

        def json_loads(text):
            try:
                return json.loads(text)
            except RecursionError:
                raise ValueError("JSON nested deeper than this interpreter reads")

        return (lambda obj, canonical=False: json.dumps(obj, sort_keys=canonical,
                                                        separators=(",", ":") if canonical else None)), json_loads
    constants = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}

    def dumps(obj, canonical=False):
        """As ``json.dumps(obj)``; ``canonical``: as ``json.dumps(obj, sort_keys=True, separators=(",", ":"))``."""
        key, item = (":", ",") if canonical else (": ", ", ")
        encode = _json.make_encoder(None, _no_default, _json.encode_basestring_ascii, None, key, item, canonical,
                                    False, True)
        return "".join(encode(obj, 0))

    class _Context(object):  # what json.decoder.JSONDecoder gives the C scanner
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = constants.__getitem__

    scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # what it reads of a JSONDecoder, no more
    space = " \t\n\r"

    def loads(text):
        """As ``json.loads(text)`` (str or UTF-8 bytes); a ValueError for anything that is not one JSON value."""
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8")
        start = len(text) - len(text.lstrip(space))
        try:
            value, end = scan(text, start)
        except StopIteration as exc:
            raise ValueError("not JSON (at character %s)" % exc.value)
        except RecursionError:
            raise ValueError("JSON nested deeper than this interpreter reads")
        if text[end:].strip(space):
            raise ValueError("not JSON: extra data at character %d" % end)
        return value

    return dumps, loads


dumps, loads = _make_json()


def _load_json(path):
    with open(path, "rb") as f:
        return loads(f.read())


def _write_json(path, data, durable=True):
    """Written to a temporary name and renamed (a reader never sees half of it). ``durable``: synced to the disk
    first. A record that dies with the host's processes anyway (the start record, the running entry, what pack
    writes for the worker to read next) is not: a sync is milliseconds on the path to the agent's start."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(data))
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _say(obj):
    """One answer line on stdout, for the worker."""
    sys.stdout.write(dumps(obj) + "\n")
