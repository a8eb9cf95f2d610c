"""Path safety: the one set of rules for "is this name, or this path, safe to use here?".

Every reader and writer that builds a path from something it did not make (a stored id, an artifact's name, a tar
member from a host, a URL, a check's file name, a path the model asks a tool for, a word of a shell command) asks
one of these rules, so a rule is written once and every caller refuses the same things. A rule says *whether* and,
where it helps, *why*; the caller says it in its own words (its error class and its line stay what users know).

======================  ==============================================================  ===========================
rule                    accepts                                                         used by
======================  ==============================================================  ===========================
``name_problem``        one name: not empty, not ``.`` or ``..``, no ``/`` or ``\\``,     the store's ids (host, item,
                        no NUL. A backslash is refused: a name becomes a folder, a       agent; the sweep's id, not
                        URL part (a browser reads ``\\`` as ``/``) and an export's file  hidden either), a replay's
                                                                                        name (dashboard compare)
``relpath_problem``     a *stored path*: relative POSIX, made only of real names (no     artifact names (the store's
                        empty part, no ``.``, no ``..``), no NUL. What the store keeps   writer), a cell id's folder,
                        is exactly what is read back: ``a//b`` or ``./a`` is refused,    a stored file in a URL
                        not read as another name. A backslash is an ordinary character   (dashboard), a bundle's
                        of a POSIX file name here (the store keeps such names).          members (the attempt)
``item_path_problem``   a path a person wrote in an item (a check's file name):          the catalog
                        relative, no ``..`` part, no backslash (an item written on
                        Windows); empty and ``.`` parts are read as a path reads them.
``climbs``              (a test) whether a path has a ``..`` part                        the agent's tools, web check
``names_home``          (a test) whether a path starts with ``~`` (the home folder)     patterns, the guard's receipt
``within``              a path (already normalized or real) that is ``root`` or below    the callers of ``real_inside``
``real_inside``         a *workspace path*: it may pass through a symbolic link (the     the store (``Store.inside``),
                        agent made it, or the store's reader follows it) if, every       the dashboard, web checks,
                        link followed, it ends inside ``root``                           the agent's tools
``under``               a path as it was written (not normalized) that is ``folder``     the guard's receipt (a test
                        or below it, by its text                                         command's targets)
======================  ==============================================================  ===========================

Two rules differ on purpose and stay two: a *stored path* may not hold a link that leads out, nor an empty or ``.``
part (the store never writes one, so a crafted store is refused), while a *workspace path* is whatever the agent
made, links too, and only its end must lie inside the workspace.

Kept apart, on purpose: the launcher (``workers/host/launcher/``) and the host cleaner (``workers/host/clean.py``)
are sent to the host as source text and run by its bare Python 3.8+, importing the standard library only, so they
keep their own few checks (the launcher's one-name check of a delivery folder it is asked to forget, the cleaner's
"is this attempt folder a running delivery's" by text). ``tests/harness/core/test_paths.py`` runs one table of
hostile names through these rules and through those copies and fails when they disagree, so the copies cannot drift.

Standard library only: the host side (the builtin agent's tools) imports it too. Every rule is a few string
operations (``relpath_problem`` runs for each attempt folder a regrade opens), and only ``real_inside`` touches the
file system.
"""

from __future__ import annotations

from pathlib import Path, PurePath

__all__ = ["name_problem", "relpath_problem", "item_path_problem", "climbs", "names_home", "within", "real_inside",
           "under"]


def name_problem(name: str) -> str:
    """Why ``name`` cannot be one part of a path ('' when it can): in the words ``fleet`` prints after the file and
    the key of a crafted store."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"{name!r} names a folder above or at itself"
    if "/" in name or "\\" in name:
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
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return "has an empty, '.' or '..' part"
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


def under(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it, by its text as written (nothing is normalized: a command's
    word is judged as the command has it). ``folder`` may end in ``/``; ``/`` holds every absolute path."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")
