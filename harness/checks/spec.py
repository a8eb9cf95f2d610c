"""Which acceptance checks an item has, in a form that travels to the worker (no shared files).

An open prompt names its checks in ``item.toml`` (``checks = ["test_photo_renamer.py",
"page.web.toml"]``): each is a file in the item's ``checks/`` folder. ``test_*.py`` files are pytest
checks (docs/checks-pytest.md); ``*.web.toml`` files are web checks in Chromium (docs/checks-web.md).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CheckSpec", "check_kind", "load_checks"]


class CheckSpec(BaseModel):
    """One check as sent with an attempt: its kind and the file contents it needs on the host."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["pytest", "web"]
    files: dict[str, str] = Field(default_factory=dict, description="pytest: check file name -> text.")
    spec: dict = Field(default_factory=dict, description="web: the WebCheckSpec as a table.")


def check_kind(name: str) -> Literal["pytest", "web"] | None:
    if name.endswith(".web.toml"):
        return "web"
    if name.endswith(".py") and Path(name).name.startswith("test_"):
        return "pytest"
    return None


def load_checks(item_folder: Path, names: list[str]) -> list[CheckSpec]:
    """Read the named check files of one item folder (the catalog has validated that they exist)."""
    out = []
    for name in names:
        path = item_folder / "checks" / name
        kind = check_kind(name)
        if kind == "pytest":
            out.append(CheckSpec(name=Path(name).stem, kind="pytest", files={path.name: path.read_text(encoding="utf-8")}))
        elif kind == "web":
            spec = tomllib.loads(path.read_text(encoding="utf-8"))
            spec.setdefault("name", name.removesuffix(".web.toml"))
            out.append(CheckSpec(name=spec["name"], kind="web", spec=spec))
    return out
