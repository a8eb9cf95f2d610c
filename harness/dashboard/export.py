"""``fleet dashboard --export DIR``: one sweep's pages as static HTML, to publish a nightly.

The same templates as the server, with links that are relative file names (``ExportLinks``), so the folder
works opened from disk or served by any static web server:

    DIR/index.html                         the matrix (filters work: they are the page's own script)
    DIR/cells/HOST/ITEM/AGENT/rREP/index.html     a cell (its last attempt); attempt-K.html for each attempt
    DIR/hosts/HOST.html                    each host of the sweep
    DIR/files/...                          every stored file of the sweep's attempts, as the downloads link them
    DIR/text/....txt                       ... but those a static server would serve as active content (an
                                           agent's index.html, .svg, .js) as text: ``exported_file``
    DIR/static/                            the stylesheet and the script
    DIR/.fleet-export                      marks the folder as an export, so a later export may replace it

Nothing is written into DIR until every page is made: the pages go to a new folder beside it, which then
takes DIR's place. A DIR that holds anything but an earlier export is refused (one line), never overwritten.
Live updates and grade overrides are the server's: an export has neither.
"""

from __future__ import annotations

import importlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.core.errors import StoreError, UsageError
from harness.store import Store

from harness.dashboard.context import STATIC, Dashboard, ExportLinks, exported_file
from harness.dashboard.sweeps import sweep_page

__all__ = ["Written", "export_sweep", "MARK"]

MARK = ".fleet-export"


@dataclass(frozen=True)
class Written:
    sweep: str
    pages: int
    files: int


def _page(module: str, name: str) -> Callable[..., str] | None:
    """A page module's render function, if that page exists in this build."""
    try:
        return getattr(importlib.import_module(f"harness.dashboard.{module}"), name, None)  # lazy: a page by its name
    except ModuleNotFoundError:
        return None


def _check_target(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"--export {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARK).is_file():
        raise UsageError(f"--export {out}: the folder holds files that are not an earlier export; give an empty "
                         "or new folder")


def _copy_attempt_files(store: Store, sweep_id: str, folder: Path, work: Path) -> int:
    """Every regular file of an attempt folder (links are stored as links' records, never followed)."""
    n = 0
    top = store.sweep_dir(sweep_id)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in filenames:
            src = Path(dirpath) / name
            st = os.lstat(src)
            if not stat.S_ISREG(st.st_mode):
                continue
            dest = work / exported_file(src.relative_to(top).as_posix())
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest, follow_symlinks=False)
            n += 1
    return n


def export_sweep(store: Store, sweep_id: str, out: Path) -> Written:
    out = Path(out)
    _check_target(out)
    sweep = store.load_sweep(sweep_id)
    dash = Dashboard(store=store, token=None)
    cell_page = _page("cell", "cell_page")
    host_page = _page("hosts", "host_page")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise StoreError(f"--export {out}: cannot write: {exc.strerror or exc}") from None
    pages = files = 0
    try:
        def write(rel: str, html: str) -> None:
            nonlocal pages
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(html, encoding="utf-8")
            pages += 1

        write("index.html", sweep_page(dash, sweep_id, ExportLinks(sweep_id=sweep_id, here="index.html")))
        for c in sweep.cells:
            runs = sweep.attempts.get(c.id) or []
            if cell_page is not None:
                here = f"cells/{c.id}/index.html"
                write(here, cell_page(dash, sweep_id, c.id, None, ExportLinks(sweep_id=sweep_id, here=here)))
                for a in runs:
                    here = f"cells/{c.id}/attempt-{a.attempt}.html"
                    write(here, cell_page(dash, sweep_id, c.id, a.attempt, ExportLinks(sweep_id=sweep_id, here=here)))
            for a in runs:
                folder = store.attempt_dir(sweep_id, c.id, a.attempt)
                if folder.is_dir():
                    files += _copy_attempt_files(store, sweep_id, folder, work)
        if host_page is not None:
            for h in sorted(sweep.hosts):
                here = f"hosts/{h}.html"
                write(here, host_page(dash, h, ExportLinks(sweep_id=sweep_id, here=here)))
        shutil.copytree(STATIC, work / "static")
        (work / MARK).write_text(f"{sweep_id}\n")
        # The new folder takes DIR's place; an earlier export is moved aside first, then removed.
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.rename(out, old / "export")
        os.rename(work, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise StoreError(f"--export {out}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Written(sweep=sweep_id, pages=pages, files=files)
