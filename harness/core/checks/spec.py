"""Which acceptance checks an item has, in a form that travels to the worker (no shared files), and what a web
check asks of a page.

An open prompt names its checks in ``item.toml`` (``checks = ["test_photo_renamer.py",
"page.web.toml"]``), a round task in its ``checks`` key: each is a file in the item's ``checks/`` folder
(``prompts/open/NN-slug/checks/``, ``prompts/rounds/NAME/TASK/checks/``). ``test_*.py`` files are pytest
checks (docs/checks-pytest.md); ``*.web.toml`` files are web checks in Chromium (docs/checks-web.md).

A round's values drawn for the cell (project folder, marker ...) travel with the check: a web check's
strings may hold ``{{name}}`` placeholders, filled here; a pytest check gets them from its ``values``
fixture.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["CheckSpec", "CheckSpecError", "check_kind", "load_checks", "fill_placeholders", "WebCheckSpec",
           "WebInteraction"]


class WebInteraction(BaseModel):
    """Click ``click`` (a CSS selector, or a button's / element's text); ``reveals`` must go hidden -> visible."""

    model_config = ConfigDict(extra="forbid")

    click: str = Field(min_length=1)
    reveals: str = Field(min_length=1)


class WebCheckSpec(BaseModel):
    """What a web deliverable must do. Selectors: CSS, or text; a Playwright prefix (``css=``, ``text=``,
    ``role=``, ``xpath=``) forces the engine."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    name: str = "web"
    page: str = Field(default="index.html", min_length=1)
    elements: list[str] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict, description="selector -> least number visible at load")
    interaction: WebInteraction | None = None
    viewport_width: int = Field(default=375, ge=200, le=4000)
    viewport_height: int = Field(default=800, ge=200, le=4000)
    no_console_errors: bool = True


_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class CheckSpecError(ValueError):
    """A check file that cannot be used: ``key`` inside the file, ``problem`` in words."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


class CheckSpec(BaseModel):
    """One check as sent with an attempt: its kind and the file contents it needs on the host."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["pytest", "web"]
    files: dict[str, str] = Field(default_factory=dict, description="pytest: check file name -> text.")
    spec: dict = Field(default_factory=dict, description="web: the WebCheckSpec as a table, placeholders filled.")
    values: dict[str, str] = Field(default_factory=dict, description="The cell's drawn values (pytest: ``values`` fixture).")


def check_kind(name: str) -> Literal["pytest", "web"] | None:
    if name.endswith(".web.toml"):
        return "web"
    if name.endswith(".py") and Path(name).name.startswith("test_"):
        return "pytest"
    return None


def fill_placeholders(data: Any, values: dict[str, str], key: str = "") -> Any:
    """``data`` with ``{{name}}`` in every string replaced by ``values[name]``; an unknown name is a
    :class:`CheckSpecError` at its key."""

    def one(text: str, where: str) -> str:
        def sub(m: re.Match[str]) -> str:
            if m.group(1) not in values:
                raise CheckSpecError(where, f"placeholder {{{{{m.group(1)}}}}} is not a variable of the item")
            return values[m.group(1)]

        return _PLACEHOLDER.sub(sub, text)

    if isinstance(data, str):
        return one(data, key)
    if isinstance(data, dict):
        return {k: fill_placeholders(v, values, f"{key}.{k}" if key else str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [fill_placeholders(v, values, f"{key}[{i}]") for i, v in enumerate(data)]
    return data


def load_checks(item_folder: Path, names: list[str], values: dict[str, str] | None = None,
                strict: bool = False) -> list[CheckSpec]:
    """Read the named check files of one item folder, with the cell's ``values`` filled in.

    ``strict`` (the catalog, when it loads an item) also validates each web check and compiles each pytest
    check, raising :class:`CheckSpecError`; the dispatcher trusts what the catalog validated.
    """
    values = values or {}
    out = []
    for name in names:
        path = Path(item_folder) / "checks" / name
        kind = check_kind(name)
        text = path.read_text(encoding="utf-8")
        if kind == "pytest":
            if strict:
                try:
                    compile(text, str(path), "exec")
                except SyntaxError as exc:
                    raise CheckSpecError(f"line {exc.lineno}", f"not valid Python: {exc.msg}") from None
            out.append(CheckSpec(name=Path(name).stem, kind="pytest", files={path.name: text}, values=values))
        elif kind == "web":
            try:
                raw = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise CheckSpecError("(syntax)", str(exc)) from None
            raw.setdefault("name", name.removesuffix(".web.toml"))
            spec = fill_placeholders(raw, values)
            if strict:
                try:
                    WebCheckSpec.model_validate(spec)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    loc = ".".join(str(x) for x in err["loc"])
                    raise CheckSpecError(loc, err["msg"].lower()) from None
            out.append(CheckSpec(name=spec["name"], kind="web", spec=spec, values=values))
    return out
