"""The scripted model's script: its file format and its playback.

A script stands in for a local model so the harness's agents can be tested without a GPU. It says what
to answer to each chat request: first the ``rules`` are tried (answers chosen by matching the
conversation), then the next of the ``turns`` (consumed in order, per conversation), then the
``fallback``. The format is documented field by field in ``docs/scripted-model.md``.

Several scripts can be played at once (``ScriptSet``): each new conversation is played by the first
script whose ``select`` matches its first user message, else by the first script without ``select``.

Playback (``ScriptPlayer``) is kept apart from HTTP (``server.py``) so that what a script answers can be
reasoned about, and tested, without a socket.
"""

from __future__ import annotations

import glob
import json
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.core.errors import one_line
from harness.core.nesting import loads_json, loads_toml
from harness.core.tomlfile import key_path

__all__ = [
    "SCHEMA_VERSION",
    "ScriptError",
    "Match",
    "Select",
    "ToolCallSpec",
    "Step",
    "Rule",
    "Script",
    "load_script",
    "load_scripts",
    "parse_script",
    "script_paths",
    "ToolCallOut",
    "Answer",
    "ScriptPlayer",
    "ScriptSet",
    "message_text",
]

SCHEMA_VERSION = 1
SCRIPT_SUFFIXES = (".toml", ".json")

DEFAULT_FALLBACK_TEXT = "(scripted model: the script has no more turns)"

# ``{{values.NAME}}``: namespaced so that braces and ``$VAR`` in scripted code are never taken for one.
_PLACEHOLDER = re.compile(r"\{\{\s*values\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ScriptError(ValueError):
    """A script that cannot be used, printed as one line ``FILE: KEY: PROBLEM``.

    A ``ValueError`` rather than a harness error so this package stays importable on its own; the CLI
    translates it into its own input error.
    """

    def __init__(self, file: str, key: str, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        where = f"{file}: {key}" if key else file
        super().__init__(one_line(f"{where}: {problem}"))


def _check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
    return pattern


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt key would otherwise be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Match(_Strict):
    """Conditions on the request; all the given ones must hold. Substring tests are case-sensitive."""

    last_user_contains: str | None = None
    """The last message with role ``user`` contains this text."""
    last_user_regex: str | None = None
    """The last ``user`` message matches this regular expression (``re.search``)."""
    last_tool_contains: str | None = None
    """One of the tool results that end the conversation (the results just returned) contains this text."""
    last_tool_regex: str | None = None
    """One of the tool results that end the conversation matches this regular expression."""
    tool_available: str | None = None
    """The request offers a tool with this function name in ``tools``."""

    @field_validator("last_user_regex", "last_tool_regex")
    @classmethod
    def _regex_compiles(cls, pattern: str | None) -> str | None:
        return pattern if pattern is None else _check_regex(pattern)

    @model_validator(mode="after")
    def _not_empty(self) -> Match:
        if all(v is None for v in self.__dict__.values()):
            raise ValueError("a match needs at least one condition")
        return self


class Select(_Strict):
    """Which conversations a script of a set plays: all the given conditions must hold on the
    conversation's first ``user`` message, when the conversation starts. Substring tests are case-sensitive."""

    first_user_contains: str | None = None
    """The first message with role ``user`` contains this text."""
    first_user_regex: str | None = None
    """The first ``user`` message matches this regular expression (``re.search``)."""
    system_contains: str | None = None
    """A ``system`` (or ``developer``) message contains this text: which agent is talking (each agent has
    its own system prompt), so one item can have a script per agent."""
    tool_available: str | None = None
    """The request's ``tools`` offer a function with this name (another way to tell agents apart)."""

    @field_validator("first_user_regex")
    @classmethod
    def _regex_compiles(cls, pattern: str | None) -> str | None:
        return pattern if pattern is None else _check_regex(pattern)

    @model_validator(mode="after")
    def _not_empty(self) -> Select:
        if all(v is None for v in self.__dict__.values()):
            raise ValueError("a select needs at least one condition")
        return self


class ToolCallSpec(_Strict):
    """One tool call the model makes."""

    name: str = Field(min_length=1)
    """The function name."""
    arguments: Any = Field(default_factory=dict)
    """A table (sent as its JSON text) or a string sent verbatim, which may be invalid JSON on purpose."""

    @field_validator("arguments")
    @classmethod
    def _table_or_string(cls, value: Any) -> Any:
        if not isinstance(value, (dict, str)):
            raise ValueError("arguments must be a table or a JSON string")
        return value


class Step(_Strict):
    """One answer: a reply (text and/or tool calls), an HTTP error, or a hang."""

    text: str | None = None
    """The reply's content. ``{{values.NAME}}`` placeholders are filled from the conversation."""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    """Tool calls; their ids are ``call_<turn>_<n>`` (request number in the conversation, call number)."""
    cut_at_output_limit: bool = False
    """The reply was cut at the output limit: ``finish_reason`` is ``length``."""
    cut_arguments_at: int | None = Field(default=None, ge=0)
    """With a cut reply: characters of the last tool call's arguments JSON kept (default: half)."""
    delay: float = Field(default=0.0, ge=0)
    """Seconds to wait before answering anything (prompt processing)."""
    tokens_per_second: float | None = Field(default=None, gt=0)
    """Generation rate: paces streamed chunks, and delays a non-streamed reply by the same total."""
    http_status: int | None = Field(default=None, ge=400, le=599)
    """Answer with this HTTP error status instead of a reply."""
    error_body: str | None = None
    """The error's body, sent verbatim (default: an OpenAI-style error JSON)."""
    hang: bool = False
    """Never answer: hold the connection until the client gives up."""

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        replies = self.text is not None or bool(self.tool_calls)
        kinds = [replies, self.http_status is not None, self.hang]
        if sum(kinds) != 1:
            raise ValueError("give exactly one of: text and/or tool_calls, http_status, hang")
        if self.error_body is not None and self.http_status is None:
            raise ValueError("error_body needs http_status")
        if self.cut_arguments_at is not None and not (self.cut_at_output_limit and self.tool_calls):
            raise ValueError("cut_arguments_at needs cut_at_output_limit and tool_calls")
        return self


class Rule(Step):
    """A step chosen by matching the conversation rather than by its place in the script."""

    match: Match
    """When the rule answers."""
    times: int | None = Field(default=None, ge=1)
    """How many times per conversation it may answer (default: every time it matches)."""


class Script(_Strict):
    """A whole script. Build it with ``load_script`` or ``parse_script``, which also check placeholders."""

    schema_version: Literal[1]
    """Format version of this file; only 1 exists."""
    model_id: str | None = None
    """The model id the server reports, unless the server is given one."""
    context_size: int | None = Field(default=None, ge=1)
    """Context size in tokens the server reports and enforces, unless the server is given one."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Per-reply output limit in tokens, unless the server is given one."""
    select: Select | None = None
    """In a set of scripts, the conversations this one plays; without it, the set's fallback script."""
    values: dict[str, str] = Field(default_factory=dict)
    """Name -> regular expression found in the conversation, used as ``{{values.NAME}}``."""
    rules: list[Rule] = Field(default_factory=list)
    """Tried in order before the turns; the first that matches answers."""
    turns: list[Step] = Field(default_factory=list)
    """Consumed in order, one per request not answered by a rule, separately for each conversation."""
    fallback: Step = Field(default_factory=lambda: Step(text=DEFAULT_FALLBACK_TEXT))
    """The answer once the turns are used up."""

    @field_validator("values")
    @classmethod
    def _check_values(cls, values: dict[str, str]) -> dict[str, str]:
        for name, pattern in values.items():
            if not _IDENTIFIER.fullmatch(name):
                raise ValueError(f"value name {name!r} is not an identifier")
            _check_regex(pattern)
        return values

    def steps(self) -> list[tuple[str, Step]]:
        """Every step with its key path, for checks and for naming the answer's source."""
        return (
            [(f"rules[{i}]", r) for i, r in enumerate(self.rules)]
            + [(f"turns[{i}]", t) for i, t in enumerate(self.turns)]
            + [("fallback", self.fallback)]
        )


def _problem(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key is missing"
    return str(error["msg"]).removeprefix("Value error, ")


def _string_leaves(value: Any, path: str) -> list[tuple[str, str]]:
    """(key path, text) of every string inside tool-call arguments, where placeholders may sit."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _string_leaves(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _string_leaves(v, f"{path}[{i}]")]
    return []


def _templated_texts(step: Step, path: str) -> list[tuple[str, str]]:
    texts = [(f"{path}.text", step.text)] if step.text is not None else []
    for n, call in enumerate(step.tool_calls):
        texts += _string_leaves(call.arguments, f"{path}.tool_calls[{n}].arguments")
    return texts


def parse_script(data: Any, file: str = "<script>") -> Script:
    """Validate already-parsed script data; ``file`` names it in errors."""
    try:
        script = Script.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = exc.error_count() - 1
        problem = _problem(first) + (f" (and {more} more)" if more else "")
        raise ScriptError(file, key_path(tuple(first["loc"])), problem) from None
    for step_path, step in script.steps():
        for key, text in _templated_texts(step, step_path):
            for name in _PLACEHOLDER.findall(text):
                if name not in script.values:
                    raise ScriptError(file, key, f"{{{{values.{name}}}}} is not declared under values")
    return script


def load_script(path: str | Path) -> Script:
    """Read a ``.toml`` or ``.json`` script."""
    path = Path(path)
    file = str(path)
    suffix = path.suffix.lower()
    if suffix not in SCRIPT_SUFFIXES:
        raise ScriptError(file, "", "a script must be a .toml or .json file")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(file, "", f"cannot read: {exc}") from None
    try:
        data = loads_toml(raw) if suffix == ".toml" else loads_json(raw)
    except tomllib.TOMLDecodeError as exc:
        raise ScriptError(file, "(syntax)", str(exc)) from None
    except json.JSONDecodeError as exc:
        raise ScriptError(file, "(syntax)", f"{exc.msg} (at line {exc.lineno}, column {exc.colno})") from None
    return parse_script(data, file)


_GLOB_MAGIC = re.compile(r"[*?[]")


def _is_script_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SCRIPT_SUFFIXES


def script_paths(paths_or_dir: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The script files named by one argument or several, in order, each file once.

    Each argument is a directory (its ``*.toml`` and ``*.json`` files, not recursive, sorted by name), a
    glob pattern that names no existing file (its matching ``.toml``/``.json`` files, sorted; ``**``
    recurses), or a file, kept as given so that ``load_script`` reports it if it is missing or not a
    script. A directory or pattern that yields no script raises ``ScriptError``. This is what
    ``fleet model serve --script A --script DIR`` expands its arguments with.
    """
    specs = [paths_or_dir] if isinstance(paths_or_dir, (str, os.PathLike)) else list(paths_or_dir)
    found: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            files = sorted((p for p in path.iterdir() if _is_script_file(p)), key=lambda p: p.name)
            if not files:
                raise ScriptError(str(path), "", "no .toml or .json script in this directory")
        elif not path.exists() and _GLOB_MAGIC.search(str(spec)):
            files = sorted(p for p in map(Path, glob.glob(str(spec), recursive=True)) if _is_script_file(p))
            if not files:
                raise ScriptError(str(spec), "", "no .toml or .json script matches this pattern")
        else:
            files = [path]
        found += files
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def load_scripts(paths_or_dir: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> dict[str, Script]:
    """Load a set of scripts: file path (as expanded by ``script_paths``) -> script, in order.

    The result can be given to ``ScriptSet`` or ``ScriptedModelServer(scripts=...)``; its keys name
    the scripts in the request log. The first bad script raises ``ScriptError``.
    """
    return {str(path): load_script(path) for path in script_paths(paths_or_dir)}


@dataclass(frozen=True)
class ToolCallOut:
    """A tool call as it goes on the wire: arguments already a JSON string (possibly truncated)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """What to answer one request: a step of the script rendered for its conversation."""

    turn: int
    """The request's number within its conversation, from 1."""
    source: str
    """The step's key path in the script: ``rules[0]``, ``turns[2]`` or ``fallback``."""
    step: Step
    content: str = ""
    tool_calls: tuple[ToolCallOut, ...] = ()
    finish_reason: Literal["stop", "tool_calls", "length"] = "stop"
    missing_values: tuple[str, ...] = ()
    """Placeholders left as written because their regular expression found nothing."""
    script: str | None = None
    """The name of the script that answered (its file path in a set loaded from files), if it has one."""


def message_text(message: Any) -> str:
    """The text of a chat message whose content is a string, a list of parts, or null."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request.get("messages", []) if isinstance(m, dict)]


def _first_user(messages: list[dict[str, Any]]) -> str | None:
    return next((message_text(m) for m in messages if m.get("role") == "user"), None)


def _last_user(messages: list[dict[str, Any]]) -> str | None:
    users = [m for m in messages if m.get("role") == "user"]
    return message_text(users[-1]) if users else None


def _last_tool_results(messages: list[dict[str, Any]]) -> list[str]:
    results: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(message_text(message))
    return results


def _tool_names(request: dict[str, Any]) -> set[str]:
    names = set()
    for tool in request.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _matches(match: Match, request: dict[str, Any]) -> bool:
    """Whether every condition of ``match`` holds for this request."""
    messages = _messages(request)
    user = _last_user(messages)
    tools = _last_tool_results(messages)
    checks = [
        (match.last_user_contains, lambda s: user is not None and s in user),
        (match.last_user_regex, lambda p: user is not None and re.search(p, user) is not None),
        (match.last_tool_contains, lambda s: any(s in r for r in tools)),
        (match.last_tool_regex, lambda p: any(re.search(p, r) for r in tools)),
        (match.tool_available, lambda name: name in _tool_names(request)),
    ]
    return all(check(wanted) for wanted, check in checks if wanted is not None)


def _selects(select: Select, request: dict[str, Any]) -> bool:
    """Whether every condition of ``select`` holds for the conversation that ``request`` starts."""
    messages = _messages(request)
    user = _first_user(messages)
    system = [message_text(m) for m in messages if m.get("role") in ("system", "developer")]
    checks = [
        (select.first_user_contains, lambda s: user is not None and s in user),
        (select.first_user_regex, lambda p: user is not None and re.search(p, user) is not None),
        (select.system_contains, lambda s: any(s in t for t in system)),
        (select.tool_available, lambda name: name in _tool_names(request)),
    ]
    return all(check(wanted) for wanted, check in checks if wanted is not None)


def _find_values(script: Script, request: dict[str, Any]) -> dict[str, str]:
    """First match of each value's regex in the system, user and tool messages, in order (group 1 if any)."""
    texts = [message_text(m) for m in _messages(request) if m.get("role") in ("system", "user", "tool")]
    found: dict[str, str] = {}
    for name, pattern in script.values.items():
        compiled = re.compile(pattern)
        for text in texts:
            hit = compiled.search(text)
            if hit:
                found[name] = hit.group(1) if compiled.groups else hit.group(0)
                break
    return found


def _fill(value: Any, found: dict[str, str], missing: set[str]) -> Any:
    if isinstance(value, str):

        def replace(hit: re.Match[str]) -> str:
            if hit.group(1) in found:
                return found[hit.group(1)]
            missing.add(hit.group(1))
            return hit.group(0)

        return _PLACEHOLDER.sub(replace, value)
    if isinstance(value, dict):
        return {k: _fill(v, found, missing) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, found, missing) for v in value]
    return value


def _render(
    script: Script, source: str, step: Step, turn: int, request: dict[str, Any], name: str | None = None
) -> Answer:
    found = _find_values(script, request) if script.values else {}
    missing: set[str] = set()
    content = _fill(step.text or "", found, missing)
    calls = []
    for n, spec in enumerate(step.tool_calls, start=1):
        arguments = _fill(spec.arguments, found, missing)
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        calls.append(ToolCallOut(id=f"call_{turn}_{n}", name=spec.name, arguments=text))
    finish: Literal["stop", "tool_calls", "length"] = "tool_calls" if calls else "stop"
    if step.cut_at_output_limit:
        finish = "length"
        if calls:
            last = calls[-1]
            keep = step.cut_arguments_at if step.cut_arguments_at is not None else len(last.arguments) // 2
            calls[-1] = ToolCallOut(last.id, last.name, last.arguments[:keep])
    return Answer(turn, source, step, content, tuple(calls), finish, tuple(sorted(missing)), name)


@dataclass
class _Conversation:
    requests: int = 0
    next_turn: int = 0
    rule_hits: Counter[int] = field(default_factory=Counter)


class ScriptPlayer:
    """Plays a script to many conversations at once, each consuming its own turns. Thread-safe."""

    def __init__(self, script: Script, name: str | None = None) -> None:
        self.script = script
        self.name = name
        """Put in every ``Answer.script``."""
        self._lock = threading.Lock()
        self._conversations: dict[str, _Conversation] = {}

    def play(self, conversation: str, request: dict[str, Any]) -> Answer:
        """Choose and render the answer to ``request`` (a chat completion body) in ``conversation``."""
        with self._lock:
            state = self._conversations.setdefault(conversation, _Conversation())
            state.requests += 1
            source, step = self._choose(state, request)
            turn = state.requests
        return _render(self.script, source, step, turn, request, self.name)

    def _choose(self, state: _Conversation, request: dict[str, Any]) -> tuple[str, Step]:
        for i, rule in enumerate(self.script.rules):
            if (rule.times is None or state.rule_hits[i] < rule.times) and _matches(rule.match, request):
                state.rule_hits[i] += 1
                return f"rules[{i}]", rule
        if state.next_turn < len(self.script.turns):
            state.next_turn += 1
            return f"turns[{state.next_turn - 1}]", self.script.turns[state.next_turn - 1]
        return "fallback", self.script.fallback

    def reset(self) -> None:
        """Forget every conversation, so the next request of each starts the script again."""
        with self._lock:
            self._conversations.clear()


class ScriptSet:
    """Several scripts played at once, one per conversation. Thread-safe.

    A new conversation is played by the first script whose ``select`` holds on its first user message,
    else by the first script without ``select`` (the fallback script); that choice holds for the rest of
    the conversation. ``scripts`` is name -> script (as ``load_scripts`` returns), or a sequence of
    scripts named ``scripts[0]``, ``scripts[1]``...
    """

    def __init__(self, scripts: Mapping[str, Script] | Sequence[Script]) -> None:
        if isinstance(scripts, Mapping):
            named = dict(scripts)
        else:
            named = {f"scripts[{i}]": script for i, script in enumerate(scripts)}
        if not named:
            raise ValueError("a script set needs at least one script")
        self.scripts: dict[str, Script] = named
        """Name -> script, in the order they are tried."""
        self._players = {name: ScriptPlayer(script, name) for name, script in named.items()}
        self._lock = threading.Lock()
        self._chosen: dict[str, str] = {}

    def select(self, request: dict[str, Any]) -> str | None:
        """The name of the script that would play a conversation starting with ``request``, or None."""
        for name, script in self.scripts.items():
            if script.select is not None and _selects(script.select, request):
                return name
        return next((name for name, script in self.scripts.items() if script.select is None), None)

    def chosen(self, conversation: str) -> str | None:
        """The name of the script playing ``conversation``, if it has started."""
        with self._lock:
            return self._chosen.get(conversation)

    def play(self, conversation: str, request: dict[str, Any]) -> Answer | None:
        """The answer from the conversation's script (chosen now if it is new); None when no script
        selects a new conversation, which then stays unstarted (nothing is consumed)."""
        with self._lock:
            name = self._chosen.get(conversation)
            if name is None:
                name = self.select(request)
                if name is None:
                    return None
                self._chosen[conversation] = name
            player = self._players[name]
        return player.play(conversation, request)

    def reset(self) -> None:
        """Forget every conversation and its choice of script."""
        with self._lock:
            self._chosen.clear()
            for player in self._players.values():
                player.reset()
