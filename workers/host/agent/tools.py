"""The builtin agent's tools: ``read``, ``write``, ``edit``, ``ls`` and ``exec``, confined to the workspace.

Why confinement: the agent runs on a fleet host in one attempt's workspace, next to other attempts
and the owner's files. Every path a file tool receives must name something inside the workspace: a
``..`` component, an absolute path elsewhere, ``~``, or a symbolic link whose target is outside is
refused with an error the model can read, and the call fails without touching anything.

``exec`` runs a shell command with the workspace (or a folder inside it) as its working directory. It
is not a sandbox: the command can do whatever the host user can. What it guarantees is bounded cost:
a timeout (the command's whole process group is ended), an output cap (head and tail kept, the middle
dropped, so a test runner's summary at the end survives), and nothing left running afterwards
(every command runs in its own process group, ended when the command returns). Its environment is
the agent's, minus the model's API key and the harness's own ``PYTHONPATH`` entry, so code the model
writes can read neither.

A tool returns a ``ToolOutcome``: the text the model sees, whether it is an error, and the
structured ``ToolDetails`` recorded in the transcript and read by the guard.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from harness.guard.verdict import is_test_command, recognize
from harness.core.paths import climbs, names_home, real_inside, within
from harness.core.transcript import ToolDetails

__all__ = [
    "TOOL_NAMES",
    "TOOL_SPECS",
    "ToolError",
    "ToolOutcome",
    "Workspace",
    "Toolbox",
]

READ_LIMIT_CHARS = 64 * 1024
"""Most text ``read`` returns at once; the rest is read with ``offset``."""
READ_MAX_FILE = 8 * 1024 * 1024
LS_MAX_ENTRIES = 500
EXEC_OUTPUT_CAP = 16 * 1024
"""Bytes of a command's output the model sees: a quarter from the start, the rest from the end."""
EXEC_MAX_TIMEOUT_S = 1800.0
KILL_GRACE_S = 1.0


class ToolError(Exception):
    """Bad input to a tool (arguments, path): the call fails with this message and runs nothing."""


@dataclass(frozen=True)
class ToolOutcome:
    is_error: bool
    text: str
    """What the model sees."""
    details: ToolDetails
    output: str | None = None
    """exec: the command's output (capped) without the exit-code line, for the test verdict and receipt."""


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_PATH = {"type": "string", "description": "Path relative to the workspace (or absolute inside it)."}

TOOL_SPECS: list[dict[str, Any]] = [
    _spec(
        "read",
        "Read a text file. Long files are returned in parts: pass offset (first line, from 1) and limit (lines).",
        {"path": _PATH, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
        ["path"],
    ),
    _spec(
        "write",
        "Create or replace a file with the given content (parent folders are created).",
        {"path": _PATH, "content": {"type": "string"}},
        ["path", "content"],
    ),
    _spec(
        "edit",
        "Replace old_text with new_text in a file. old_text must match exactly and occur once, "
        "unless replace_all is true.",
        {"path": _PATH, "old_text": {"type": "string"}, "new_text": {"type": "string"},
         "replace_all": {"type": "boolean"}},
        ["path", "old_text", "new_text"],
    ),
    _spec(
        "ls",
        "List a folder: sub-folders end with '/', files show their size.",
        {"path": {**_PATH, "description": "Folder relative to the workspace; default: the workspace."}},
        [],
    ),
    _spec(
        "exec",
        "Run a shell command and return its output (stdout and stderr together) and exit code. "
        "Runs in the workspace, or in cwd (a folder inside it). Output is capped; nothing keeps running after it.",
        {"command": {"type": "string"}, "cwd": {"type": "string", "description": "Folder inside the workspace."},
         "timeout_s": {"type": "integer", "description": "Seconds before the command is ended."}},
        ["command"],
    ),
]
TOOL_NAMES: tuple[str, ...] = tuple(spec["function"]["name"] for spec in TOOL_SPECS)


class Workspace:
    """The run's workspace folder and the rule that every tool path stays inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve(strict=True)

    def resolve(self, raw: object, *, default: str | None = None) -> Path:
        """The real path ``raw`` names inside the workspace; ``ToolError`` when it is not inside."""
        if raw is None and default is not None:
            raw = default
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("path must be a non-empty string")
        if "\0" in raw:
            raise ToolError("path must not contain a NUL character")
        if climbs(raw):
            raise ToolError(f"path {raw!r} contains '..': paths must stay inside the workspace {self.root}")
        if names_home(raw):
            raise ToolError(f"path {raw!r} names the home folder: paths must stay inside the workspace {self.root}")
        candidate = Path(raw)
        joined = candidate if candidate.is_absolute() else self.root / candidate
        # A workspace path: it may pass through a link the agent made, if it ends inside the workspace.
        try:
            resolved, inside = real_inside(joined, self.root)
        except (OSError, RuntimeError) as exc:
            raise ToolError(f"path {raw!r} cannot be resolved: {exc}") from None
        if not inside:
            how = " through a symbolic link" if within(joined.absolute(), self.root) else ""
            raise ToolError(f"path {raw!r} is outside the workspace {self.root}{how}")
        return resolved

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."


def _int_arg(arguments: Mapping[str, Any], key: str, default: int | None, minimum: int) -> int | None:
    value = arguments.get(key, default)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # small models often quote numbers; the meaning is not in doubt
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ToolError(f"{key} must be an integer")
    if value < minimum:
        raise ToolError(f"{key} must be at least {minimum}")
    return int(value)


def _bool_arg(arguments: Mapping[str, Any], key: str) -> bool:
    value = arguments.get(key, False)
    value = {"true": True, "false": False}.get(value.strip().lower(), value) if isinstance(value, str) else value
    if not isinstance(value, bool):
        raise ToolError(f"{key} must be true or false")
    return value


def _str_arg(arguments: Mapping[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str):
        raise ToolError(f"{key} is required and must be a string")
    return value


class _Capture:
    """Keeps the head and the tail of a stream of bytes, and counts all of them."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 4
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_size += len(data)
            while self.tail_size - len(self.tail[0]) >= self.tail_cap:
                self.tail_size -= len(self.tail.popleft())

    def text(self) -> tuple[str, bool]:
        tail = b"".join(self.tail)
        kept_tail = tail[-self.tail_cap:] if self.tail_cap else b""
        omitted = self.total - len(self.head) - len(kept_tail)
        head = self.head.decode("utf-8", "replace")
        if omitted <= 0:
            return head + tail.decode("utf-8", "replace"), False
        marker = f"\n[... {omitted} bytes of output omitted ...]\n"
        return head + marker + kept_tail.decode("utf-8", "replace"), True


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """TERM the command's process group (the shell leads it), then KILL what is left of it."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            proc.poll()  # reap the shell: an unreaped zombie would keep its group "alive"
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.02)


def _pump(stream: IO[bytes], capture: _Capture) -> None:
    """Read a command's output until every writer closed it."""
    while chunk := stream.read1(65536):  # type: ignore[attr-defined]
        capture.add(chunk)


class Toolbox:
    """The tools of one run. ``hidden_env`` names environment variables commands must not see."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        exec_timeout_s: float = 120.0,
        output_cap: int = EXEC_OUTPUT_CAP,
        hidden_env: tuple[str, ...] = (),
        harness_root: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.exec_timeout_s = exec_timeout_s
        self.output_cap = output_cap
        self._env = self._command_env(hidden_env, harness_root)
        self._shell = shutil.which("bash") or "/bin/sh"
        self._tools: dict[str, Callable[[Mapping[str, Any]], ToolOutcome]] = {
            "read": self._read, "write": self._write, "edit": self._edit, "ls": self._ls, "exec": self._exec,
        }

    @staticmethod
    def _command_env(hidden: tuple[str, ...], harness_root: str | None) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in hidden}
        if harness_root and "PYTHONPATH" in env:
            kept = [part for part in env["PYTHONPATH"].split(os.pathsep)
                    if part and os.path.realpath(part) != os.path.realpath(harness_root)]
            if kept:
                env["PYTHONPATH"] = os.pathsep.join(kept)
            else:
                del env["PYTHONPATH"]
        return env

    def run(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Run one tool call; bad input becomes an error outcome, never an exception."""
        started = time.monotonic()
        tool = self._tools.get(name)
        try:
            if tool is None:
                raise ToolError(f"unknown tool {name!r}; the tools are: {', '.join(TOOL_NAMES)}")
            return tool(arguments)
        except ToolError as exc:
            return ToolOutcome(True, f"error: {exc}",
                               ToolDetails(status="error", duration_s=round(time.monotonic() - started, 3)))

    # -- file tools --------------------------------------------------------------------------------

    def _read(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        path = self.workspace.resolve(arguments.get("path"))
        offset = _int_arg(arguments, "offset", 1, 1) or 1
        limit = _int_arg(arguments, "limit", None, 1)
        rel = self.workspace.relative(path)
        try:
            if not path.is_file():
                raise ToolError(f"{rel} is not a file" if path.exists() else f"{rel} does not exist")
            size = path.stat().st_size
            if size > READ_MAX_FILE:
                raise ToolError(f"{rel} is {size} bytes, more than read handles ({READ_MAX_FILE}); use exec (head, sed -n)")
            data = path.read_bytes()
        except OSError as exc:
            raise ToolError(f"cannot read {rel}: {exc.strerror or exc}") from None
        if b"\0" in data[:8192]:
            raise ToolError(f"{rel} is a binary file")
        lines = data.decode("utf-8", "replace").splitlines(keepends=True)
        chosen = lines[offset - 1: None if limit is None else offset - 1 + limit]
        text, truncated, taken = "", False, 0
        for line in chosen:
            if len(text) + len(line) > READ_LIMIT_CHARS:
                truncated = True
                break
            text += line
            taken += 1
        if truncated or (limit is None and offset - 1 + taken < len(lines)):
            text += f"\n[... {rel} has {len(lines)} lines; continue with offset={offset + taken}]"
            truncated = True
        details = ToolDetails(status="ok", path=rel, bytes=len(text.encode()), truncated=truncated)
        return ToolOutcome(False, text, details)

    def _write(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        path = self.workspace.resolve(arguments.get("path"))
        content = _str_arg(arguments, "content")
        rel = self.workspace.relative(path)
        data = content.encode("utf-8")
        try:
            existed = path.exists()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except OSError as exc:
            raise ToolError(f"cannot write {rel}: {exc.strerror or exc}") from None
        verb = "Replaced" if existed else "Created"
        return ToolOutcome(False, f"{verb} {rel} ({len(data)} bytes).", ToolDetails(status="ok", path=rel, bytes=len(data)))

    def _edit(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        path = self.workspace.resolve(arguments.get("path"))
        old, new = _str_arg(arguments, "old_text"), _str_arg(arguments, "new_text")
        replace_all = _bool_arg(arguments, "replace_all")
        if not old:
            raise ToolError("old_text must not be empty")
        rel = self.workspace.relative(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ToolError(f"{rel} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"cannot read {rel}: {exc}") from None
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_text was not found in {rel} (it must match exactly, including whitespace)")
        if count > 1 and not replace_all:
            raise ToolError(f"old_text occurs {count} times in {rel}; include more context, or set replace_all")
        replaced = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        try:
            path.write_text(replaced, encoding="utf-8")
        except OSError as exc:
            raise ToolError(f"cannot write {rel}: {exc.strerror or exc}") from None
        n = count if replace_all else 1
        noun = "occurrence" if n == 1 else "occurrences"
        return ToolOutcome(False, f"Edited {rel}: replaced {n} {noun}.",
                           ToolDetails(status="ok", path=rel, replacements=n))

    def _ls(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        path = self.workspace.resolve(arguments.get("path"), default=".")
        rel = self.workspace.relative(path)
        try:
            entries = sorted(os.scandir(path), key=lambda entry: entry.name)
        except FileNotFoundError:
            raise ToolError(f"{rel} does not exist") from None
        except NotADirectoryError:
            raise ToolError(f"{rel} is not a folder") from None
        except OSError as exc:
            raise ToolError(f"cannot list {rel}: {exc.strerror or exc}") from None
        lines = []
        for entry in entries[:LS_MAX_ENTRIES]:
            if entry.is_symlink():
                lines.append(f"{entry.name}@")
            elif entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(f"{entry.name}  ({entry.stat().st_size} bytes)")
        truncated = len(entries) > LS_MAX_ENTRIES
        if truncated:
            lines.append(f"[... {len(entries) - LS_MAX_ENTRIES} more entries]")
        text = "\n".join(lines) if lines else f"{rel} is empty."
        return ToolOutcome(False, text, ToolDetails(status="ok", path=rel, truncated=truncated))

    # -- exec --------------------------------------------------------------------------------------

    def _exec(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        command = _str_arg(arguments, "command")
        if not command.strip():
            raise ToolError("command must not be empty")
        cwd = self.workspace.resolve(arguments.get("cwd"), default=".")
        if not cwd.is_dir():
            raise ToolError(f"cwd {self.workspace.relative(cwd)} is not an existing folder")
        timeout = _int_arg(arguments, "timeout_s", None, 1)
        timeout_s = min(float(timeout), EXEC_MAX_TIMEOUT_S) if timeout is not None else self.exec_timeout_s
        capture = _Capture(self.output_cap)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                [self._shell, "-c", command], cwd=cwd, env=self._env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"cannot start {self._shell}: {exc.strerror or exc}") from None
        assert proc.stdout is not None
        reader = threading.Thread(target=_pump, args=(proc.stdout, capture), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _end_group(proc)  # a timeout, an interrupt, or children left in the background
            proc.wait()
            reader.join(timeout=2.0)
        duration = round(time.monotonic() - started, 3)
        output, truncated = capture.text()
        exit_code = None if timed_out or proc.returncode < 0 else proc.returncode
        test = recognize(output, exit_code, command) if is_test_command(command) else None
        failed = timed_out or exit_code != 0
        if timed_out:
            trailer = f"[timed out after {timeout_s:g} s; the command was ended]"
        elif exit_code is None:
            trailer = f"[ended by signal {-proc.returncode}, {duration:g} s]"
        else:
            trailer = f"[exit code {exit_code}, {duration:g} s]"
        text = (output.rstrip("\n") + "\n" if output.strip() else "") + trailer
        details = ToolDetails(
            status="failed" if failed else "ok", duration_s=duration, exit_code=exit_code, timed_out=timed_out,
            cwd=str(cwd), bytes=capture.total, truncated=truncated, test=test,
        )
        return ToolOutcome(failed, text, details, output)
