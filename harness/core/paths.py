"""Path safety: the one set of rules for "is this name, or this path, safe to use here?".

Every reader and writer that builds a path from something it did not make (a stored id, an artifact's name, a tar
member from a host, a URL, a check's file name, a path the model asks a tool for, a word of a shell command) asks
one of these rules, so a rule is written once and every caller refuses the same things. A rule says *whether* and,
where it helps, *why*; the caller says it in its own words (its error class and its line stay what users know).

=====================  ===================================================  ======================================
rule                   accepts                                              asked by
=====================  ===================================================  ======================================
``name_problem``       one name: not empty, not ``.`` or ``..``, no ``/``,  the store's ids (a cell's host, item
                       no ``\\``, no NUL. The backslash too: a name is a    and agent; a sweep's id, not hidden
                       folder, a part of a URL (a browser reads ``\\`` as   either, its backslash allowed: the
                       ``/``) and a file of an export                       store always read such folders); a
                                                                            replay's name (dashboard)
``relpath_problem``    a *stored path*: relative POSIX, made only of real   artifact names (the store's writer), a
                       names (no empty part, no ``.``, no ``..``), no NUL;  cell id's folder (``Store.attempt_dir``),
                       a backslash is an ordinary character. What is kept   a stored file in a URL (dashboard), a
                       is what is read back: ``a//b`` is no other name      bundle's members (``safe_member``)
``item_path_problem``  a path a person wrote in an item: relative, no       a check's file name (the catalog)
                       ``..`` part, no backslash (an item written on
                       Windows); empty and ``.`` parts read as a path
                       reads them (``./test_a.py``)
``climbs``             (a test) a ``..`` part                               the agent's tools, a web check's page
``names_home``         (a test) a start at a home folder (``~``)            pattern, a test command's words (guard)
``within``             a normalized or real path that is ``root`` or below  ``real_inside``, a replay's folder
``real_inside``        a *workspace path*: it may pass through a symbolic   ``Store.inside`` (the dashboard's
                       link, if, every link followed, it ends inside        files too), a web check's page, the
                       ``root``                                             agent's tools
``relative_inside``    an absolute path inside ``root``, shown from it      the importers' tool paths (Hermes,
                       (normalized); None when it lies outside              OpenCode)
``under``              a path as written, not normalized, that is           a test command's absolute targets (the
                       ``folder`` or below it, by its text                  guard's receipt)
=====================  ===================================================  ======================================

Two kinds of path differ on purpose and stay two rules. A *stored path* is judged by its text first
(``relpath_problem``: the store writes no other, so anything else was crafted), and a link in the store may lead only
inside the sweep's folder and never be a record file (``Store.inside``, ``Store.attempt_dir``). A *workspace path* is
whatever the agent made: a link on its way is allowed when its end lies inside the workspace (``real_inside``); the
agent's tools refuse a ``..`` or ``~`` by its text too, so the model is told why.

Kept apart, on purpose: the launcher (``workers/host/launcher/``) and the host cleaner (``workers/host/clean.py``)
are sent to the host as source text and run by its bare Python 3.8+, importing the standard library only, so they
cannot import this module and keep their own few checks: the launcher forgets only a folder
``fleet/deliveries/TOKEN`` (a hex token), and names a bundle's members from a folder's own entries (which the worker
then takes only as stored paths); the cleaner keeps an attempt folder a running delivery's root is in, by its text.
``tests/harness/core/test_paths.py`` runs one table of hostile names through these rules and through those copies,
and fails when they disagree, so the copies cannot drift.

Standard library only: the host side (the builtin agent's tools) imports it too. Every rule is a few string
operations (``relpath_problem`` runs for each attempt folder a regrade opens), and only ``real_inside`` touches the
file system.
"""

from __future__ import annotations

import posixpath
from pathlib import Path, PurePath

__all__ = ["name_problem", "relpath_problem", "item_path_problem", "climbs", "names_home", "within", "real_inside",
           "relative_inside", "under"]


def name_problem(name: str, *, backslash: bool = False) -> str:
    """Why ``name`` cannot be one part of a path ('' when it can): in the words ``fleet`` prints after the file and
    the key of a crafted store. ``backslash``: a backslash is an ordinary character (a sweep's folder: the store
    always read those, and `fleet sweep` makes none)."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"{name!r} names a folder above or at itself"
    if "/" in name or (not backslash and "\\" in name):
        return f"{name!r} holds a path separator"
    if "\x00" in name:
        return f"{name!r} holds a NUL byte"
    return ""


def relpath_problem(path: str) -> str:
    """Why ``path`` is not a stored path ('' when it is): a relative POSIX path made only of real names. The
    callers say it in their own words (an artifact refused, a URL that is not a path inside the sweep's folder)."""
    if not path:
        return "is empty"
    if path.startswith("/"):
        return "is absolute"
    if "\x00" in path:
        return "holds a NUL byte"
    if "//" in path or path.endswith("/"):
        return "has an empty part"
    wrapped = f"/{path}/"  # every part between two '/': found by text, no list made (a workspace has 100,000 files)
    if "/./" in wrapped or "/../" in wrapped:
        return "has a '.' or '..' part"
    return ""


def item_path_problem(path: str) -> str:
    """Why ``path``, written in an item, cannot name a file inside the item's folder ('' when it can)."""
    if path.startswith("/") or "\\" in path:
        return "is absolute or holds a backslash"
    if climbs(path):
        return "has a '..' part"
    return ""


def climbs(path: str) -> bool:
    """Whether ``path`` has a ``..`` part (as ``Path(path).parts`` would hold: ``/`` is the only separator)."""
    return ".." in path.split("/")


def names_home(path: str) -> bool:
    """Whether ``path`` starts at a home folder (``~``, ``~user``): a shell, not the file system, says where."""
    return path.startswith("~")


def within(path: PurePath, root: PurePath) -> bool:
    """Whether ``path`` is ``root`` or lies below it, part by part (``/a/bc`` is not below ``/a/b``). Both are
    taken as they are: normalize or resolve them first (``real_inside``)."""
    return path == root or root in path.parents


def real_inside(path: Path, root: Path) -> tuple[Path, bool]:
    """``path`` with every symbolic link followed (``Path.resolve``, not strict: what does not exist yet is taken
    as written), and whether that lies in ``root``, a real (resolved) path. A link loop or an unreadable link is the
    ``OSError`` or ``RuntimeError`` of ``resolve``, for the caller to say."""
    real = path.resolve()
    return real, within(real, root)


def relative_inside(path: str, root: str) -> str | None:
    """An absolute ``path`` as seen from ``root`` (normalized, ``.`` for ``root`` itself) when it lies inside
    ``root``, else None: how an importer shows a tool's path in the transcript, relative to the workspace when it is
    in it."""
    rel = posixpath.relpath(path, root)
    return None if climbs(rel) else rel


def under(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it, by its text as written (nothing is normalized: a command's
    word is judged as the command has it). ``folder`` may end in ``/``; ``/`` holds every absolute path."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")
