"""Hypothesis strategies that take a real, valid input and break it the ways files really break (and the ways
a hostile file would): bytes flipped, cut, inserted, invalid UTF-8, a BOM, CR/LF variants, values swapped for
huge or negative integers, nan/inf, wrong types, names with control characters, ``/``, ``..`` or NUL, nesting
10,000 deep, and for line formats lines duplicated, dropped, reversed or interleaved.

Every strategy draws *edits* to a seed file rather than whole files, so a failing example shrinks to the one
edit that breaks the reader, and the seeds are the repository's own files (never edited: copies are written)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

DEEP = 10_000
"""Nesting depth of the deep-nesting values: far past Python's recursion limit (1,000)."""

HUGE_INTS = [10**400, -(10**400), 2**63, -(2**63) - 1, 2**64, -1, 0]
ODD_FLOATS = [math.nan, math.inf, -math.inf, 1e308, -0.0]
HOSTILE_NAMES = ["", "a\x00b", "../../etc", "a/b", "..", "x\x1b[2Jy", "\u202etxt", "tab\there", "line\nbreak",
                 "\x7f", "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"), "A" * 300,
                 # names of files an input points at (checks, scripts): NUL, climbing out, absolute
                 "test_a\x00.py", "../../../test_up.py", "/etc/test_abs.py", "sub/../../a.web.toml", "a\x00.web.toml"]
HOSTILE_VALUES: list[Any] = [*HUGE_INTS, *ODD_FLOATS, *HOSTILE_NAMES, True, False, [], {}, [1, "a"], {"x": 1},
                             {"k": [None]}]


def deep_list(depth: int = DEEP) -> str:
    """The text of a JSON/TOML array nested ``depth`` deep (built as text: the value itself could not be built)."""
    return "[" * depth + "]" * depth


def deep_table_json(depth: int = DEEP) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def deep_table_toml(depth: int = DEEP) -> str:
    return "{a = " * depth + "1" + "}" * depth


# --------------------------------------------------------------------------------------------------
# Bytes

def _flip(data: bytes, at: int, bit: int) -> bytes:
    if not data:
        return data
    i = at % len(data)
    return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1:]


def _insert(data: bytes, at: int, blob: bytes) -> bytes:
    i = at % (len(data) + 1)
    return data[:i] + blob + data[i:]


INSERTS = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf", b"\r", b"\n", b"\x1b", b'"', b"{", b"[",
           b"]]", b"\\", b"\xf4\x90\x80\x80", b"=", b"#"]


def byte_edits(data: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    """(what was done, the new bytes) for one byte-level edit of ``data``."""
    n = max(1, len(data))
    pos = st.integers(0, n)
    return st.one_of(
        st.tuples(pos, st.integers(0, 7)).map(lambda a: (f"flip bit {a[1]} at {a[0] % n}", _flip(data, *a))),
        pos.map(lambda a: (f"truncate at {a}", data[:a])),
        st.tuples(pos, st.sampled_from(INSERTS)).map(lambda a: (f"insert {a[1]!r} at {a[0]}", _insert(data, *a))),
        st.just(("BOM", b"\xef\xbb\xbf" + data)),
        st.just(("UTF-16", data.decode("utf-8", "replace").encode("utf-16"))),
        st.just(("CRLF", data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))),
        st.just(("CR only", data.replace(b"\r\n", b"\n").replace(b"\n", b"\r"))),
        st.just(("empty", b"")),
        st.just(("latin-1", data.decode("utf-8", "replace").encode("latin-1", "replace") + b"\xe9")),
    )


# --------------------------------------------------------------------------------------------------
# Structured values (JSON and TOML documents)

def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in ``doc`` (dict keys and list indexes), parents before children."""
    out: list[tuple[Any, ...]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(prefix + (k,))
            out += paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append(prefix + (i,))
            out += paths(v, prefix + (i,))
    return out


class Deep:
    """A placeholder for a value nested 10,000 deep: the serializers write its text directly."""

    def __init__(self, kind: str, depth: int = DEEP) -> None:
        self.kind = kind
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.kind}, {self.depth})"


def _copy(doc: Any) -> Any:
    return json.loads(json.dumps(doc)) if not isinstance(doc, (dict, list)) else (
        {k: _copy(v) for k, v in doc.items()} if isinstance(doc, dict) else [_copy(v) for v in doc])


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


def set_at(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = _copy(doc)
    _parent(out, path)[path[-1]] = value
    return out


def delete_at(doc: Any, path: tuple[Any, ...]) -> Any:
    out = _copy(doc)
    del _parent(out, path)[path[-1]]
    return out


def rename_at(doc: Any, path: tuple[Any, ...], name: str) -> Any:
    out = _copy(doc)
    parent = _parent(out, path)
    if isinstance(parent, dict):
        parent[name] = parent.pop(path[-1])
    return out


def duplicate_at(doc: Any, path: tuple[Any, ...]) -> Any:
    """A list element twice (duplicated ids, calls, tasks)."""
    out = _copy(doc)
    parent = _parent(out, path)
    if isinstance(parent, list):
        parent.insert(path[-1], _copy(parent[path[-1]]))
    return out


def value_edits(doc: Any) -> st.SearchStrategy[tuple[str, Any]]:
    """(what was done, the new document) for one edit at one key path of ``doc``."""
    ps = paths(doc)
    if not ps:
        return st.just(("unchanged", doc))
    path = st.sampled_from(ps)
    # 10,000 deep breaks a parser; 900 parses (under the recursion limit) and is for what walks the value after.
    deep = [Deep(kind, depth) for kind in ("list", "table") for depth in (DEEP, 900, 101)]
    value = st.one_of(st.sampled_from(HOSTILE_VALUES), st.sampled_from(deep))
    return st.one_of(
        st.tuples(path, value).map(lambda a: (f"set {list(a[0])} = {a[1]!r:.40}", set_at(doc, a[0], a[1]))),
        path.map(lambda p: (f"delete {list(p)}", delete_at(doc, p))),
        st.tuples(path, st.sampled_from(HOSTILE_NAMES)).map(
            lambda a: (f"rename {list(a[0])} to {a[1]!r:.40}", rename_at(doc, a[0], a[1]))),
        path.map(lambda p: (f"duplicate {list(p)}", duplicate_at(doc, p))),
        st.just(("root is a list", [doc])),
        st.just(("root is deep", Deep("list"))),
    )


def to_json(value: Any) -> str:
    """JSON text, with nan/inf as Python writes them and ``Deep`` values written 10,000 deep."""
    if isinstance(value, Deep):
        return deep_list(value.depth) if value.kind == "list" else deep_table_json(value.depth)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_json(v) for v in value) + "]"
    return json.dumps(value)


def _toml_value(value: Any) -> str:
    if isinstance(value, Deep):
        return deep_list(value.depth) if value.kind == "list" else deep_table_toml(value.depth)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string (\uXXXX escapes included)
    if value is None:
        return '""'  # TOML has no null
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(doc: Any) -> str:
    """TOML text of ``doc``: every top-level key on its own line, everything below it inline."""
    if not isinstance(doc, dict):
        return f"root = {_toml_value(doc)}\n"
    return "".join(f"{json.dumps(str(k))} = {_toml_value(v)}\n" for k, v in doc.items())


# --------------------------------------------------------------------------------------------------
# Line formats (JSONL)

def line_edits(data: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    """(what was done, the new bytes) for one edit of a JSONL file's lines, or of one line's JSON value."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    n = len(lines)
    if not n:
        return st.just(("unchanged", data))

    def join(ls: list[bytes]) -> bytes:
        return b"\n".join(ls) + b"\n"

    idx = st.integers(0, n - 1)

    def dup(i: int) -> bytes:
        return join(lines[: i + 1] + [lines[i]] + lines[i + 1:])

    def drop(i: int) -> bytes:
        return join(lines[:i] + lines[i + 1:])

    def swap(a: tuple[int, int]) -> bytes:
        ls = list(lines)
        ls[a[0]], ls[a[1]] = ls[a[1]], ls[a[0]]
        return join(ls)

    def interleave(k: int) -> bytes:
        k = max(1, k % max(1, n))
        return join(lines[k:] [::2] + lines[:k] + lines[k:][1::2])

    def one_line(i: int) -> st.SearchStrategy[tuple[str, bytes]]:
        try:
            doc = json.loads(lines[i])
        except ValueError:
            return st.just(("unchanged", data))
        return value_edits(doc).map(
            lambda e: (f"line {i + 1}: {e[0]}", join(lines[:i] + [to_json(e[1]).encode()] + lines[i + 1:])))

    return st.one_of(
        idx.map(lambda i: (f"duplicate line {i + 1}", dup(i))),
        idx.map(lambda i: (f"drop line {i + 1}", drop(i))),
        st.tuples(idx, idx).map(lambda a: (f"swap lines {a[0] + 1} and {a[1] + 1}", swap(a))),
        st.just(("reverse the lines", join(lines[::-1]))),
        idx.map(lambda k: (f"interleave at {k}", interleave(k))),
        st.just(("the file twice", join(lines + lines))),
        st.just(("no newline at the end", b"\n".join(lines))),
        idx.flatmap(one_line),
    )


# --------------------------------------------------------------------------------------------------
# SQLite stores

SqliteEdit = Callable[[Path], None]


def _tables(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
    finally:
        con.close()


def _columns(db: Path) -> list[tuple[str, str]]:
    con = sqlite3.connect(db)
    try:
        return [(t, c[1]) for t in _tables(db) for c in con.execute(f'pragma table_info("{t}")')]
    finally:
        con.close()


def sqlite_edits(db: Path) -> st.SearchStrategy[tuple[str, SqliteEdit]]:
    """(what was done, an edit to apply to a copy of ``db``): bit flips in the file, a table dropped, a
    column's value of a wrong type, a blob (zstd frame) corrupted, the file cut."""
    size = db.stat().st_size
    tables = _tables(db)
    columns = _columns(db)

    def flips(spots: list[tuple[int, int]]) -> SqliteEdit:
        def edit(p: Path) -> None:
            data = bytearray(p.read_bytes())
            for at, bit in spots:
                data[at % len(data)] ^= 1 << bit
            p.write_bytes(bytes(data))
        return edit

    def sql(statement: str) -> SqliteEdit:
        def edit(p: Path) -> None:
            con = sqlite3.connect(p)
            try:
                con.executescript(statement)
                con.commit()
            finally:
                con.close()
        return edit

    def cut(at: int) -> SqliteEdit:
        return lambda p: p.write_bytes(p.read_bytes()[:at])

    bad_values = ["x'00ff'", "'not json'", "'{\"a\":'", "-1", str(2**63 - 1), "9e999", "''", "null", "'" + "[" * 50 + "'",
                  "'a' || char(0) || 'b'", "'{}'", "'[]'", "'{\"type\": 1}'", "zeroblob(8)", "x'28b52ffd00'"]
    return st.one_of(
        st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 7)), min_size=1, max_size=8).map(
            lambda s: (f"flip {s}", flips(s))),
        st.lists(st.tuples(st.integers(100, size - 1), st.integers(0, 7)), min_size=1, max_size=8).map(
            lambda s: (f"flip past the header {s}", flips(s))),
        st.sampled_from(tables).map(lambda t: (f"drop table {t}", sql(f'drop table "{t}"'))),
        st.tuples(st.sampled_from(columns), st.sampled_from(bad_values)).map(
            lambda a: (f"set {a[0][0]}.{a[0][1]} = {a[1]}", sql(f'update "{a[0][0]}" set "{a[0][1]}" = {a[1]}'))),
        st.tuples(st.sampled_from(columns), st.sampled_from(bad_values)).map(
            lambda a: (f"set one row's {a[0][0]}.{a[0][1]} = {a[1]}",
                       sql(f'update "{a[0][0]}" set "{a[0][1]}" = {a[1]} where rowid = (select min(rowid) from "{a[0][0]}")'))),
        st.sampled_from(columns).map(
            lambda c: (f"duplicate the rows of {c[0]}", sql(f'insert into "{c[0]}" select * from "{c[0]}"'))),
        st.integers(0, size).map(lambda a: (f"cut at {a}", cut(a))),
    )
