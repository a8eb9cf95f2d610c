"""The prompt catalog: open prompts and qualification rounds, read into ``Item`` records.

- An open prompt is a folder ``prompts/open/NN-slug/`` with ``item.toml`` (metadata) and ``prompt.md``
  (the exact text the agent gets).
- A qualification round is ``prompts/rounds/<name>.toml``: tasks with templated prompts, run
  ``repetitions`` times, whose variables are drawn per run from a recorded seed.

Both become ``Item`` records. Placeholders in prompt text are ``{{name}}`` (double braces, so code in a
prompt keeps its single braces). Variable generators: ``{hex:N}`` N random hex digits, ``{int:A-B}`` an
integer in [A, B], ``{choice:a|b|c}`` one of the options; anything else is literal. See docs/prompts.md.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.core.checks.spec import CheckSpecError, check_kind, load_checks
from harness.core.files import FileProblem, read_regular_file
from harness.core.errors import CatalogError, UsageError
from harness.core.paths import item_path_problem
from harness.core.tomlfile import read_toml, validate

__all__ = ["Item", "Catalog", "load_catalog", "read_prompt", "render", "draw_values", "BUNDLED_PROMPTS_DIR"]

CATALOG_SCHEMA_VERSION: Final = 1
BUNDLED_PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_GENERATOR = re.compile(r"\{(hex|int|choice):([^{}]+)\}")
_OPEN_DIR = re.compile(r"^(\d{2,3})-[a-z0-9][a-z0-9-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Item(_Strict):
    """One thing a cell runs: an open prompt or a round task. Stored in sweep.json with the plan."""

    id: str = Field(description="Stable id: '07-photo-renamer' for open prompts, 'qualification.website' for tasks.")
    number: str = Field(default="", description="The NN of an open prompt ('07'), so --items 07 selects it.")
    kind: Literal["open", "round"]
    title: str
    prompt: str = Field(description="Prompt text, with {{name}} placeholders for the round's variables.")
    timeout_s: int = Field(gt=0, le=24 * 3600, description="Wall-clock limit of one attempt on the host.")
    checks: list[str] = Field(default_factory=list, description="Acceptance checks that apply (grading).")
    deliverable: Literal["workspace", "answer"] = Field(
        default="workspace", description="workspace: files are the product; answer: a written answer is."
    )
    vars: dict[str, str] = Field(default_factory=dict, description="Template variables: name -> generator spec.")
    round: str = Field(default="", description="The round a task belongs to.")
    repetitions: int = Field(default=1, ge=1, description="Runs per sweep (rounds); multiplied by --repeat.")
    source: str = Field(default="", description="File the item was read from.")
    folder: str = Field(
        default="",
        description="Folder holding the item's checks/ and demo model.toml: the open prompt's folder, or "
        "rounds/NAME/TASK/ for a round task ('' when a round task has neither).",
    )

    @model_validator(mode="before")
    @classmethod
    def _folder_of_older_sweeps(cls, data: Any) -> Any:
        # sweep.json of a sweep planned before Item.folder existed (commit 9735d71) has none: an open prompt's
        # checks/ and model.toml were then always in its source folder, and a round task had neither.
        if isinstance(data, dict) and "folder" not in data and data.get("kind") == "open":
            return {**data, "folder": data.get("source", "")}
        return data

    @property
    def check_folder(self) -> str:
        """Where ``checks/`` and ``model.toml`` are: ``folder`` (the name the dispatcher and coordinator use)."""
        return self.folder


class _OpenMeta(_Strict):
    schema_version: Literal[1] = CATALOG_SCHEMA_VERSION
    title: str
    timeout_s: int = Field(default=900, gt=0, le=24 * 3600)
    checks: list[str] = Field(default_factory=list)
    deliverable: Literal["workspace", "answer"] = "workspace"
    vars: dict[str, str] = Field(default_factory=dict)


class _Task(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    title: str
    prompt: str
    timeout_s: int = Field(default=900, gt=0, le=24 * 3600)
    checks: list[str] = Field(default_factory=list)
    deliverable: Literal["workspace", "answer"] = "workspace"
    vars: dict[str, str] = Field(default_factory=dict)


class _Round(_Strict):
    schema_version: Literal[1] = CATALOG_SCHEMA_VERSION
    title: str = ""
    repetitions: int = Field(default=1, ge=1, le=1000)
    tasks: list[_Task] = Field(min_length=1)

    @field_validator("tasks")
    @classmethod
    def _unique(cls, v: list[_Task]) -> list[_Task]:
        ids = [t.id for t in v]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"duplicate task id {', '.join(sorted(dup))}")
        return v


def _check_placeholders(
    prompt: str, vars: dict[str, str], file: str, key: str, vars_file: str = "", vars_key: str = "vars"
) -> None:
    """Every placeholder of ``prompt`` (at ``file``/``key``) has a var; every var's generators are valid
    (errors name ``vars_file``, default ``file``, at ``vars_key.NAME``)."""
    missing = sorted({m for m in _PLACEHOLDER.findall(prompt) if m not in vars})
    if missing:
        raise CatalogError(file, key, f"placeholder {{{{{missing[0]}}}}} has no entry in vars")
    for name, spec in vars.items():
        for kind, arg in _GENERATOR.findall(spec):
            try:
                _generate(kind, arg, random.Random(0))
            except ValueError as exc:
                raise CatalogError(vars_file or file, f"{vars_key}.{name}", str(exc)) from None


def _check_check_files(folder: Path, names: list[str], vars: dict[str, str], file: str, key: str) -> None:
    """Each named check is a ``checks/test_*.py`` or ``checks/*.web.toml`` file of ``folder`` that parses,
    and every ``{{name}}`` placeholder in a web check has a var."""
    for i, name in enumerate(names):
        if item_path_problem(name):
            # A check is the item's own file: a name climbing out of checks/ would run any file as its check.
            raise CatalogError(file, f"{key}[{i}]", f"{name!r}: a check is a file inside the item's checks/ folder "
                                                    "(no '..', no absolute path)")
        if check_kind(name) is None:
            raise CatalogError(file, f"{key}[{i}]", f"{name!r}: a check is a checks/test_*.py or checks/*.web.toml file")
        path = folder / "checks" / name
        if not path.is_file():
            raise CatalogError(file, f"{key}[{i}]", f"{path} not found")
        try:
            load_checks(folder, [name], {v: "" for v in vars}, strict=True)
        except CheckSpecError as exc:
            raise CatalogError(str(path), exc.key, exc.problem) from None


MAX_PROMPT_BYTES = 4 * 1024 * 1024
"""A prompt file's limit: far above any real prompt, far below what would hurt the coordinator's memory."""


def read_prompt(path: Path) -> str:
    """A prompt file's text, byte for byte: decoded as UTF-8 without newline translation (``read_text`` would
    turn every CR and CRLF into LF, and the agent would get a different prompt from the one in the file). A NUL
    byte or bytes that are not UTF-8 are refused with the offset: a prompt is text, and no agent's command line
    or JSON request would carry it unchanged."""
    try:
        data = read_regular_file(path, MAX_PROMPT_BYTES, "a prompt")
    except FileProblem as exc:
        raise CatalogError(str(path), "", str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogError(str(path), "", f"byte {exc.start}: not UTF-8 text ({exc.reason})") from None
    if "\x00" in text:
        raise CatalogError(str(path), "", f"byte {data.index(0)}: a NUL byte (a prompt is text)")
    return text


def load_open_item(folder: Path) -> Item:
    """Read one ``prompts/open/NN-slug/`` folder."""
    m = _OPEN_DIR.match(folder.name)
    if not m:
        raise CatalogError(str(folder), "", "open prompt folders are named NN-slug (e.g. 07-photo-renamer)")
    meta_file = folder / "item.toml"
    meta = validate(_OpenMeta, read_toml(meta_file, CatalogError), str(meta_file), CatalogError)
    prompt_file = folder / "prompt.md"
    prompt = read_prompt(prompt_file)
    if not prompt.strip():
        raise CatalogError(str(prompt_file), "", "prompt is empty")
    _check_check_files(folder, meta.checks, meta.vars, str(meta_file), "checks")
    _check_placeholders(prompt, meta.vars, str(prompt_file), "", vars_file=str(meta_file))
    return Item(
        id=folder.name,
        number=m.group(1),
        kind="open",
        title=meta.title,
        prompt=prompt,
        timeout_s=meta.timeout_s,
        checks=meta.checks,
        deliverable=meta.deliverable,
        vars=meta.vars,
        source=str(folder),
        folder=str(folder),
    )


def load_round(file: Path) -> list[Item]:
    """Read one ``prompts/rounds/<name>.toml`` into its task items."""
    name = file.stem
    data = validate(_Round, read_toml(file, CatalogError), str(file), CatalogError)
    items = []
    for i, task in enumerate(data.tasks):
        _check_placeholders(task.prompt, task.vars, str(file), f"tasks[{i}].prompt", vars_key=f"tasks[{i}].vars")
        # A task's checks and demo script live in rounds/NAME/TASK/ (checks/, model.toml), like an open prompt's.
        folder = file.parent / name / task.id
        _check_check_files(folder, task.checks, task.vars, str(file), f"tasks[{i}].checks")
        items.append(
            Item(
                id=f"{name}.{task.id}",
                kind="round",
                title=task.title,
                prompt=task.prompt,
                timeout_s=task.timeout_s,
                checks=task.checks,
                deliverable=task.deliverable,
                vars=task.vars,
                round=name,
                repetitions=data.repetitions,
                source=str(file),
                folder=str(folder) if folder.is_dir() else "",
            )
        )
    return items


class Catalog(BaseModel):
    """Every open prompt and round found under one prompts directory.

    Read with ``partial=True`` (what a sweep does), an item folder or round file that does not validate is
    kept in ``broken`` with its one-line error, and only a selection that asks for it fails: one bad folder
    under prompts/ must not stop a night's sweeps of the other items."""

    root: str
    open_items: list[Item]
    rounds: dict[str, list[Item]]
    broken: dict[str, CatalogError] = Field(default_factory=dict, exclude=True)
    """Open prompt folder name (NN-slug) -> why it cannot be read."""
    broken_rounds: dict[str, CatalogError] = Field(default_factory=dict, exclude=True)
    """Round name -> why it cannot be read. Apart from ``broken``: a round file named like a folder (01-smoke.toml)
    was taken for an open prompt, and failed every sweep of the open prompts."""
    skipped: list[str] = Field(default_factory=list, exclude=True)
    """Folders under open/ that are not items (not named NN-slug), each said as a warning line."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def select(self, items: list[str] | None, round_name: str | None) -> list[Item]:
        """Open prompts by NN or id (all of them when neither items nor a round is given), plus a round's tasks."""
        chosen: list[Item] = []
        if items:
            for want in items:
                found = [i for i in self.open_items if want in (i.number, i.id)]
                found += [i for r in self.rounds.values() for i in r if i.id == want]
                if not found:
                    self._raise_if_broken(want)
                    known = ", ".join(i.number or i.id for i in self.open_items)
                    raise UsageError(f"{self.root}: unknown item {want!r} (open prompts: {known})")
                chosen.extend(f for f in found if f not in chosen)
        elif not round_name:
            for name, error in self.broken.items():
                if _OPEN_DIR.match(name):
                    raise error  # every open prompt was asked for, this one among them
            chosen = list(self.open_items)
        if round_name:
            if round_name not in self.rounds:
                if round_name in self.broken_rounds:
                    raise self.broken_rounds[round_name]
                known = ", ".join(self.rounds) or "none"
                raise UsageError(f"{self.root}: unknown round {round_name!r} (rounds: {known})")
            chosen.extend(i for i in self.rounds[round_name] if i not in chosen)
        return chosen

    def _raise_if_broken(self, want: str) -> None:
        for name, error in self.broken.items():
            m = _OPEN_DIR.match(name)
            if m and want in (m.group(1), name):
                raise error
        for name, error in self.broken_rounds.items():
            if want.startswith(f"{name}."):
                raise error


def load_catalog(root: str | Path | None = None, *, partial: bool = False) -> Catalog:
    """Read every item under ``root`` (default: the bundled ``prompts/``). The first item or round that does
    not validate raises, unless ``partial``: then it is kept in ``Catalog.broken`` and fails only a selection
    that asks for it, and a folder under open/ that is no item is skipped with a line in ``Catalog.skipped``."""
    base = Path(root) if root else BUNDLED_PROMPTS_DIR
    if not base.is_dir():
        raise CatalogError(str(base), "", "prompts directory not found")
    broken: dict[str, CatalogError] = {}
    skipped: list[str] = []
    open_dir = base / "open"
    open_items = []
    for d in sorted(open_dir.iterdir()) if open_dir.is_dir() else []:
        if not d.is_dir():
            continue
        if partial and not _OPEN_DIR.match(d.name):
            skipped.append(f"{d}: not an open prompt (folders are named NN-slug, e.g. 07-photo-renamer); skipped")
            continue
        try:
            open_items.append(load_open_item(d))
        except CatalogError as exc:
            if not partial:
                raise
            broken[d.name] = exc
    numbers = [i.number for i in open_items]
    dup = sorted({n for n in numbers if numbers.count(n) > 1})
    if dup and not partial:
        raise CatalogError(str(open_dir), "", f"two open prompts share the number {dup[0]}")
    for number in dup:
        # Read for a sweep, a leftover copy (03-site beside 03-site-old) fails only the sweeps that ask for 03.
        twins = [i for i in open_items if i.number == number]
        error = CatalogError(str(open_dir), "", f"two open prompts share the number {number} "
                                                f"({', '.join(i.id for i in twins)})")
        for twin in twins:
            broken[twin.id] = error
        open_items = [i for i in open_items if i.number != number]
    rounds_dir = base / "rounds"
    rounds = {}
    broken_rounds: dict[str, CatalogError] = {}
    for f in sorted(rounds_dir.glob("*.toml")) if rounds_dir.is_dir() else []:
        try:
            rounds[f.stem] = load_round(f)
        except CatalogError as exc:
            if not partial:
                raise
            broken_rounds[f.stem] = exc
    return Catalog(root=str(base), open_items=open_items, rounds=rounds, broken=broken, broken_rounds=broken_rounds,
                   skipped=skipped)


def _generate(kind: str, arg: str, rng: random.Random) -> str:
    if kind == "hex":
        n = int(arg) if arg.isdigit() else 0
        if not 1 <= n <= 64:
            raise ValueError(f"{{hex:{arg}}}: the length must be 1..64")
        return "".join(rng.choice("0123456789abcdef") for _ in range(n))
    if kind == "int":
        lo, sep, hi = arg.partition("-")
        if not (sep and lo.strip().isdigit() and hi.strip().isdigit()) or int(lo) > int(hi):
            raise ValueError(f"{{int:{arg}}}: expected A-B with A <= B")
        return str(rng.randint(int(lo), int(hi)))
    options = arg.split("|")
    if not all(options):
        raise ValueError(f"{{choice:{arg}}}: empty option")
    return rng.choice(options)


def draw_values(vars: dict[str, str], seed: int) -> dict[str, str]:
    """Draw every variable from ``seed``. The same seed gives the same values, so a run can be reproduced."""
    rng = random.Random(seed)
    return {
        name: _GENERATOR.sub(lambda m: _generate(m.group(1), m.group(2), rng), spec) for name, spec in sorted(vars.items())
    }


def render(prompt: str, values: dict[str, str]) -> str:
    """Fill ``{{name}}`` placeholders; the text is otherwise untouched, byte for byte."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], prompt)
