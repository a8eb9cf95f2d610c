"""Recursive-delete refusal (seed 003): refuse ``rm -rf`` and its equivalents unless the owner asked.

Why: a qualification model once deleted an owner's whole project tree, and refused models then
retried the same effect through ``find -delete``, ``shutil.rmtree`` or ``sh -c``. So the guard
refuses every recursive deletion the owner's request did not explicitly ask for, and after one
refusal it stops tool use for the rest of the turn (the latch): every later call is refused too, so
a substitute cannot run. On tower2 (photo-renamer, session fe9ee859) the refused call was an
unrequested "manual test" ending ``&& rm -rf /workspace/test_manual``.

What counts as a recursive deletion (``find_recursive_delete``): a command is parsed as shell --
quotes, ``&&``/``||``/``;``/``|``/``&``, newlines, subshells, ``$(...)`` and backticks, redirections
and heredocs -- into simple commands, and each simple command is judged by the program it runs,
after wrappers (``sudo``, ``env``, ``xargs``, ``timeout``, ``nohup``, ``npx`` ...):

* ``rm`` with ``-r``/``-R``/``--recursive`` in any option form (``-rf``, ``-fr``, ``-r -f``,
  ``--recursive --force``); ``-f`` is not required: ``rm -R dir`` deletes a tree too;
* ``find ... -delete`` and ``find ... -exec``/``-execdir``/``-ok`` running ``rm``;
* ``git clean -d -f``, ``git rm -r`` (without ``--cached``), ``rsync --delete``, ``rimraf``;
* Windows: ``rmdir /s``, ``rd /s``, ``del /s``, PowerShell ``Remove-Item -Recurse`` and its aliases;
* code run inline: ``python -c`` / heredoc with ``shutil.rmtree`` (or a shell string passed to
  ``os.system``/``subprocess``), ``node -e`` with ``rmSync(..., {recursive: true})``, ``perl``/``ruby -e``;
* a shell string that is executed: ``bash -c '...'``, ``sh -c``, ``eval``, ``su -c``, ``ssh host '...'``,
  ``cmd /c``, ``powershell -Command``, a heredoc or here-string fed to a shell, or text piped into a
  bare shell (``echo 'rm -rf x' | sh``).

Decision on quoted text: ``echo "rm -rf x"`` (or a ``grep``, a commit message, a ``cat > file``
heredoc) only *prints or stores* the words; nothing deletes, so it is not refused. The same words
are refused as soon as something executes them (``| sh``, ``bash -c``, ``eval``). A command the
parser cannot read (an unclosed quote) falls back to a plain-text scan, which refuses any
deletion-shaped text: for unreadable input a false refusal is the safe error.

Not seen (documented limits): a deletion inside a script file the command runs (``bash clean.sh``,
``python3 cleanup.py``), or behind a variable (``$RM -rf x``).
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "RECURSIVE_DELETE_REFUSAL",
    "RECURSIVE_DELETE_CONTRACT",
    "find_recursive_delete",
    "owner_asked_for_delete",
    "GuardDecision",
    "DeleteGuard",
]

RECURSIVE_DELETE_REFUSAL = (
    "Pixel stopped tool use for this turn because a recursive deletion was not authorized. "
    "The deletion was blocked, but earlier actions may have completed. "
    "Do not retry through another command, tool, or agent. "
    "Explain what was attempted and wait for a new owner instruction."
)
"""The model-facing refusal text, as the tower2 session recorded it (also returned for every later call)."""

RECURSIVE_DELETE_CONTRACT = (
    "Do not delete directories recursively (rm -rf or equivalents) unless the owner asked; "
    "ODS refuses that and may stop tool use for the turn. "
    "Keep temporary test inputs inside the project folder and leave cleanup to the owner."
)
"""The one disclosure sentence seed 003 adds to the workspace guide, so the model knows the rule."""

MAX_NESTING = 6
"""How deep shell strings inside shell strings are followed (``bash -c "eval '...'"``)."""


# --------------------------------------------------------------------------------------------------
# A small shell reader: enough structure to know which program each simple command runs.


class _Unreadable(Exception):
    """The text is not shell this reader understands (e.g. an unclosed quote)."""


@dataclass
class _Simple:
    start: int
    words: list[str] = field(default_factory=list)
    end: int = 0
    stdin_from: _Simple | None = None  # the previous pipeline stage
    heredoc: str | None = None  # body of a heredoc or here-string fed to this command


_REDIRECT = re.compile(r"(<<<|<<-|<<|>>|>&|<&|&>>|&>|>\||<>|>|<)")
_SEPARATORS = ("&&", "||", "|&", ";;", "|", ";", "&", "\n", "(", ")")


def _closing_paren(text: str, open_index: int) -> int:
    """Index of the ``)`` matching the ``(`` at ``open_index``, skipping quoted text."""
    depth, i = 0, open_index
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char in "'\"":
            close = text.find(char, i + 1)
            if close < 0:
                raise _Unreadable("unclosed quote")
            i = close + 1
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _Unreadable("unclosed parenthesis")


def _read_shell(text: str) -> tuple[list[_Simple], list[str]]:
    """Split shell text into simple commands, and collect the texts of nested substitutions."""
    commands: list[_Simple] = []
    nested: list[str] = []
    current = _Simple(start=0)
    word: str | None = None
    drop_next = False  # the next word is a redirection target, not an argument
    heredoc_next: str | None = None  # "delimiter" or "herestring": what the next word is
    pending: list[tuple[str, bool, _Simple]] = []  # heredocs whose bodies start at the next newline
    i, n = 0, len(text)

    def end_word() -> None:
        nonlocal word, drop_next, heredoc_next
        if word is None:
            return
        if heredoc_next == "herestring":
            current.heredoc = word
        elif heredoc_next is not None:
            pending.append((word, heredoc_next == "strip", current))
        elif drop_next:
            drop_next = False
        else:
            current.words.append(word)
        if heredoc_next is not None:
            heredoc_next = None
        word = None

    def end_command(at: int, separator: str) -> None:
        nonlocal current
        end_word()
        current.end = at
        if current.words or current.heredoc is not None:
            commands.append(current)
        previous = current
        current = _Simple(start=at + len(separator))
        if separator in ("|", "|&") and previous.words:
            current.stdin_from = previous

    while i < n:
        char = text[i]
        if char == "\n":
            end_word()  # a heredoc delimiter right before the newline registers its body here
        if char == "\n" and pending:
            end_command(i, "\n")
            i += 1
            for delimiter, strip_tabs, owner in pending:
                body: list[str] = []
                while i < n:
                    line_end = text.find("\n", i)
                    line_end = n if line_end < 0 else line_end
                    line = text[i:line_end]
                    i = line_end + 1
                    if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                        break
                    body.append(line)
                owner.heredoc = "\n".join(body)
            pending.clear()
            current = _Simple(start=min(i, n))
            continue
        if char in " \t":
            end_word()
            i += 1
            continue
        if char == "#" and word is None:
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        if word is None and text.startswith(("<(", ">("), i):
            close = _closing_paren(text, i + 1)
            nested.append(text[i + 2 : close])
            i = close + 1
            continue
        if word is None or word.isdigit():
            redirect = _REDIRECT.match(text, i)
            if redirect and not text.startswith("&&", i):
                if word is not None:
                    word = None  # a file descriptor number such as the 2 in 2>&1
                operator = redirect.group(1)
                i = redirect.end()
                if operator in (">&", "<&"):
                    fd = re.match(r"[0-9]+-?|-", text[i:])
                    if fd:
                        i += fd.end()
                        continue
                if operator in ("<<", "<<-"):
                    heredoc_next = "strip" if operator == "<<-" else "plain"
                elif operator == "<<<":
                    heredoc_next = "herestring"
                else:
                    drop_next = True
                continue
        separator = next((s for s in _SEPARATORS if text.startswith(s, i)), None)
        if separator is not None:
            end_command(i, separator)
            i += len(separator)
            continue
        if char == "'":
            close = text.find("'", i + 1)
            if close < 0:
                raise _Unreadable("unclosed single quote")
            word = (word or "") + text[i + 1 : close]
            i = close + 1
            continue
        if char == '"':
            j, buffer = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`\n':
                    buffer.append(text[j + 1])
                    j += 2
                elif text.startswith("$(", j):
                    close = _closing_paren(text, j + 1)
                    nested.append(text[j + 2 : close])
                    buffer.append(text[j : close + 1])
                    j = close + 1
                elif text[j] == "`":
                    close = text.find("`", j + 1)
                    if close < 0:
                        raise _Unreadable("unclosed backtick")
                    nested.append(text[j + 1 : close])
                    buffer.append(text[j : close + 1])
                    j = close + 1
                else:
                    buffer.append(text[j])
                    j += 1
            if j >= n:
                raise _Unreadable("unclosed double quote")
            word = (word or "") + "".join(buffer)
            i = j + 1
            continue
        if char == "\\":
            if i + 1 < n and text[i + 1] == "\n":
                i += 2
                continue
            word = (word or "") + text[i + 1 : i + 2]
            i += 2
            continue
        if text.startswith("$(", i):
            close = _closing_paren(text, i + 1)
            nested.append(text[i + 2 : close])
            word = (word or "") + text[i : close + 1]
            i = close + 1
            continue
        if char == "`":
            close = text.find("`", i + 1)
            if close < 0:
                raise _Unreadable("unclosed backtick")
            nested.append(text[i + 1 : close])
            word = (word or "") + text[i : close + 1]
            i = close + 1
            continue
        word = (word or "") + char
        i += 1
    end_command(n, "")
    return commands, nested


# --------------------------------------------------------------------------------------------------
# Which program a simple command runs

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time"})
_WRAPPER_OPTIONS_WITH_VALUE: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-U", "-C", "-D", "-r", "-t", "-T", "--user", "--group"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "--unset", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "command": frozenset(),
    "builtin": frozenset(),
    "setsid": frozenset(),
    "unbuffer": frozenset(),
    "xargs": frozenset({"-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a", "--max-args", "--max-procs", "--delimiter"}),
    "npx": frozenset({"-p", "--package"}),
    "pnpx": frozenset(),
    "bunx": frozenset(),
    "busybox": frozenset(),
}
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"})
_PYTHON = re.compile(r"^(?:python(?:\d+(?:\.\d+)?)?|py|pypy3?)$")
_NODE = frozenset({"node", "nodejs", "deno", "bun"})
_POWERSHELL = frozenset({"powershell", "pwsh"})
_PS_REMOVE = frozenset({"remove-item", "ri"})
_PS_REMOVE_ALIASES = frozenset({"del", "erase", "rd", "rmdir"})  # PowerShell rm -Recurse is caught as rm
_PS_RECURSE = re.compile(r"^-r(?:e(?:c(?:u(?:r(?:s(?:e)?)?)?)?)?)?(?::\$?true)?$", re.I)


def _program(word: str) -> str:
    name = posixpath.basename(word.replace("\\", "/")).lower()
    return name[:-4] if name.endswith(".exe") else name


def _strip_wrappers(words: list[str]) -> list[str]:
    """Drop assignments, keywords and wrapper programs (with their options) in front of the program."""
    while words:
        name = _program(words[0])
        if _ASSIGNMENT.match(words[0]) or words[0] in _KEYWORDS:
            words = words[1:]
            continue
        if name == "timeout":
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[2:] if words[0] in ("-s", "-k", "--signal", "--kill-after") else words[1:]
            words = words[1:]  # the duration
            continue
        if name in ("pnpm", "yarn", "npm") and len(words) > 1 and words[1] in ("dlx", "exec"):
            words = words[2:]
            continue
        if name not in _WRAPPER_OPTIONS_WITH_VALUE:
            return words
        with_value = _WRAPPER_OPTIONS_WITH_VALUE[name]
        words = words[1:]
        while words and (words[0].startswith("-") or (name == "env" and _ASSIGNMENT.match(words[0]))):
            option = words[0]
            if option == "--":
                words = words[1:]
                break
            if name == "env" and option in ("-S", "--split-string") and len(words) > 1:
                words = words[1].split() + words[2:]
                break
            words = words[2:] if option in with_value else words[1:]
    return words


def _options_until_operand(args: list[str]) -> tuple[list[str], list[str]]:
    options: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return options, args[index + 1 :]
        if not arg.startswith("-") or arg == "-":
            return options, args[index:]
        options.append(arg)
    return options, []


def _rm_is_recursive(args: list[str]) -> bool:
    for arg in args:
        if arg == "--":
            return False
        if arg.startswith("--"):
            if len(arg) >= 3 and "--recursive".startswith(arg):
                return True
        elif arg.startswith("-") and re.fullmatch(r"-[A-Za-z]*[rR][A-Za-z]*", arg):
            return True
    return False


def _shell_code_argument(args: list[str]) -> tuple[str | None, bool]:
    """(the -c string of a shell, whether the shell reads commands from stdin)."""
    for index, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return (args[index + 1] if index + 1 < len(args) else None), False
        if not arg.startswith("-"):
            return None, False  # a script file: its contents are not visible here
    return None, True


_RMTREE = re.compile(r"[\w.]*\brmtree\s*\([^)\n]*\)?")
_PY_SHELL_CALL = re.compile(
    r"\b(?:system|popen|run|call|check_call|check_output|Popen|getoutput|getstatusoutput|exec|execSync|spawnSync)\s*\("
)
_STRING_LITERAL = re.compile(r"""(?:'([^'\\\n]*(?:\\.[^'\\\n]*)*)'|"([^"\\\n]*(?:\\.[^"\\\n]*)*)")""")
_ARGV_RM = re.compile(r"""['"]rm['"]\s*,\s*['"](?:-[A-Za-z]*[rR][A-Za-z]*|--recursive)['"]""")
_JS_RECURSIVE = re.compile(r"\b(?:rm|rmdir)(?:Sync)?\s*\([^\n]*?recursive\s*:\s*true\b[^\n]*?\)?")
_JS_OTHER = re.compile(r"\brimraf\b[^\n]*|\bfs(?:Extra)?\.remove(?:Sync)?\s*\([^\n]*?\)")
_PERL_RUBY = re.compile(r"\b(?:rmtree|remove_tree|rm_rf|rm_r)\b[^\n;]*")


def _inline_code(code: str, depth: int) -> str | None:
    """A recursive deletion in Python, JavaScript, Perl or Ruby code run inline."""
    for pattern in (_RMTREE, _JS_RECURSIVE, _JS_OTHER, _PERL_RUBY, _ARGV_RM):
        match = pattern.search(code)
        if match:
            return match.group(0).strip()
    # A shell string handed to os.system / subprocess / child_process runs as shell.
    if depth < MAX_NESTING:
        for call in _PY_SHELL_CALL.finditer(code):
            for literal in _STRING_LITERAL.finditer(code[call.end() : call.end() + 400]):
                fragment = _find(literal.group(1) or literal.group(2) or "", depth + 1)
                if fragment:
                    return fragment
    return None


def _simple_command(command: _Simple, text: str, depth: int) -> str | None:
    """The offending fragment if this one simple command deletes recursively."""
    words = _strip_wrappers(command.words)
    fragment = text[command.start : command.end].strip() or " ".join(command.words)
    if not words:
        return None
    name, args = _program(words[0]), words[1:]

    if name == "rm" and _rm_is_recursive(args):
        return fragment
    if name == "find":
        if "-delete" in args:
            return fragment
        for index, arg in enumerate(args):
            if arg in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next((k for k in range(index + 1, len(args)) if args[k] in (";", "+", "\\;")), len(args))
                executed = _strip_wrappers(args[index + 1 : end])
                if executed and (_program(executed[0]) == "rm" or _simple_words(executed, depth)):
                    return fragment
        return None
    if name == "git" and args:
        sub, rest = args[0], args[1:]
        flags = "".join(a[1:] for a in rest if a.startswith("-") and not a.startswith("--"))
        if sub == "clean" and "d" in flags and ("f" in flags or "--force" in rest) and "n" not in flags:
            return fragment
        if sub == "rm" and _rm_is_recursive(rest) and "--cached" not in rest:
            return fragment
        return None
    if name == "rsync" and any(a.startswith("--delete") for a in args):
        return fragment
    if name == "rimraf" or name == "del-cli":
        return fragment
    if name in ("rmdir", "rd", "del", "erase") and any(a.lower() == "/s" for a in args):
        return fragment
    if (name in _PS_REMOVE or name in _PS_REMOVE_ALIASES) and any(_PS_RECURSE.match(a) for a in args):
        return fragment  # PowerShell Remove-Item -Recurse, or an alias of it (rm, del, rd ...)

    if depth >= MAX_NESTING:
        return None
    if name in _SHELLS or (name == "busybox" and args and args[0] in _SHELLS):
        if name == "busybox":
            args = args[1:]
        code, reads_stdin = _shell_code_argument(args)
        if code is not None:
            return _find(code, depth + 1)
        if reads_stdin and command.heredoc is not None:
            return _find(command.heredoc, depth + 1)
        if reads_stdin and command.stdin_from is not None:
            return _find(" ".join(command.stdin_from.words[1:]), depth + 1)
        return None
    if name in ("eval", "watch"):
        return _find(" ".join(a for a in args if not a.startswith("-")), depth + 1)
    if name == "su" and "-c" in args and args.index("-c") + 1 < len(args):
        return _find(args[args.index("-c") + 1], depth + 1)
    if name == "ssh":
        options_with_value = set("bcDEeFIiJLlmOopQRSWw")
        index = 0
        while index < len(args) and args[index].startswith("-"):
            flag = args[index]
            index += 2 if len(flag) == 2 and flag[1] in options_with_value else 1
        remote = args[index + 1 :]
        return _find(" ".join(remote), depth + 1) if remote else None
    if name in ("cmd",):
        for index, arg in enumerate(args):
            if arg.lower() in ("/c", "/k"):
                return _find(" ".join(args[index + 1 :]), depth + 1)
        return None
    if name in _POWERSHELL:
        for index, arg in enumerate(args):
            if arg.lower() in ("-command", "-c", "/c", "-commandwithargs"):
                return _find(" ".join(args[index + 1 :]), depth + 1)
            if arg.lower() in ("-file", "-f", "-encodedcommand", "-e", "-ec"):
                return None
        options, operands = _options_until_operand(args)
        return _find(" ".join(operands), depth + 1) if operands else None
    inline: str | None = None
    if _PYTHON.match(name):
        options, operands = _options_until_operand(args)
        if "-c" in args and args.index("-c") + 1 < len(args):
            inline = args[args.index("-c") + 1]
        elif (not operands or operands[0] == "-") and command.heredoc is not None:
            inline = command.heredoc
        elif (not operands or operands[0] == "-") and command.stdin_from is not None:
            inline = " ".join(command.stdin_from.words[1:])
    elif name in _NODE:
        for flag in ("-e", "--eval", "-p", "--print"):
            if flag in args and args.index(flag) + 1 < len(args):
                inline = args[args.index(flag) + 1]
        if inline is None and (not args or args == ["-"]) and command.heredoc is not None:
            inline = command.heredoc
    elif name in ("perl", "ruby"):
        for flag in ("-e", "-E"):
            if flag in args and args.index(flag) + 1 < len(args):
                inline = args[args.index(flag) + 1]
    if inline is not None:
        return _inline_code(inline, depth)
    return None


def _simple_words(words: list[str], depth: int) -> str | None:
    """Judge a word list (e.g. the command ``find -exec`` runs) as a simple command."""
    joined = " ".join(words)
    return _simple_command(_Simple(start=0, words=list(words), end=len(joined)), joined, depth + 1)


_FALLBACK = re.compile(
    r"\brm\s+(?:-{1,2}[A-Za-z-]+\s+)*(?:-[A-Za-z]*[rR]|--recursive\b)[^\n;&|]*"
    r"|\S*find\b[^\n;&|]*\s-delete\b"
    r"|-exec(?:dir)?\s+rm\b[^\n;&|]*"
    r"|[\w.]*\brmtree\b[^\n]*"
    r"|\brimraf\b[^\n;&|]*"
    r"|\bRemove-Item\b[^\n]*\s-Recurse\b[^\n;&|]*"
    r"|\b(?:rd|rmdir|del)\s+/s\b[^\n;&|]*",
    re.I,
)


def _find(text: str, depth: int) -> str | None:
    try:
        commands, nested = _read_shell(text)
    except _Unreadable:
        match = _FALLBACK.search(text)
        return match.group(0).strip() if match else None
    for command in commands:
        fragment = _simple_command(command, text, depth)
        if fragment:
            return fragment
    if depth < MAX_NESTING:
        for inner in nested:
            fragment = _find(inner, depth + 1)
            if fragment:
                return fragment
    return None


def find_recursive_delete(command: str) -> str | None:
    """The fragment of ``command`` that deletes recursively, or None when nothing does."""
    if not isinstance(command, str) or not command.strip():
        return None
    return _find_cached(command)


@functools.lru_cache(maxsize=4096)
def _find_cached(command: str) -> str | None:
    # A pure function of the text, and the dearest step of a call's check (a shell read): a run repeats its
    # commands (the same test, the same listing), and a replay of many runs repeats them again.
    return _find(command, 0)


# --------------------------------------------------------------------------------------------------
# "unless the owner asked"

_ODS_SUFFIX = re.compile(r"\n*\[ODS Portal delivery requirement:.*\]\s*$", re.S)
_DELETE_VERB = re.compile(
    r"\b(?:delete|remove|erase|wipe|purge|nuke|clean\s+up|clear\s+out|rm\s+-\w*r\w*|rm\s+--recursive)\b", re.I
)
_TREE_WORDS = re.compile(
    r"\b(?:director(?:y|ies)|folders?|dirs?|trees?|recursively|subfolders?|subdirector(?:y|ies)|everything"
    r"|all\s+(?:the\s+)?(?:files|contents)|node_modules|__pycache__|venv|\.venv)\b",
    re.I,
)
_DIRECTORY_PATH = re.compile(r"(?:^|\s)[`'\"]?(~?[\w.-]*/[\w./-]*)")
_NEGATION = re.compile(
    r"\b(?:do\s+not|don'?t|never|without|no\s+need\s+to|not|avoid|instead\s+of)\s+(?:\w+\s+){0,2}$", re.I
)
_SOMETHING_ELSE_DELETES = re.compile(
    r"\b(?:script|program|function|tool|app|code|command|cli|utility|module)\s+(?:that|which|to)\b[^.!?\n]*$", re.I
)


def _tree_object(after: str) -> bool:
    """Whether the words right after a delete verb name a directory tree, not a file or a line."""
    words = after.split()[:8]
    scope = " ".join(words)
    if _TREE_WORDS.search(scope) or (words and re.match(r"-\w*r", words[0])):
        return True
    for match in _DIRECTORY_PATH.finditer(" " + scope):
        leaf = match.group(1).rstrip("`'\",").rstrip("/").rsplit("/", 1)[-1]
        if "." not in leaf.lstrip("."):  # /workspace/test_manual, build/, ./out: no file extension
            return True
    return False


def owner_asked_for_delete(request_text: str) -> bool:
    """Whether the owner's request explicitly asks for a recursive deletion (a folder or tree).

    Deliberately narrow: the verb must be an instruction to delete (not negated: "do not delete",
    "without removing"), its object must be a directory-like target ("the build folder",
    "/workspace/test_manual", "everything", "recursively"), and it must not describe what a program
    to be written will do ("a script that deletes empty folders", "a tool to remove old folders").
    A wrong "no" only refuses a deletion the owner can then ask for explicitly; a wrong "yes" could
    lose their work.
    """
    text = _ODS_SUFFIX.sub("", request_text or "")
    for verb in _DELETE_VERB.finditer(text):
        sentence_start = max(text.rfind(mark, 0, verb.start()) for mark in (".", "!", "?", "\n", ";"))
        before = text[sentence_start + 1 : verb.start()]
        if _NEGATION.search(before) or _SOMETHING_ELSE_DELETES.search(before):
            continue
        after = re.split(r"[!?;\n]|\.(?:\s|$)", text[verb.end() : verb.end() + 200], maxsplit=1)[0]
        if _tree_object(after):
            return True
    return False


# --------------------------------------------------------------------------------------------------
# The decision and the latch


class GuardDecision(BaseModel):
    """The guard's answer for one tool call."""

    model_config = ConfigDict(frozen=True)

    allowed: bool
    reason: str | None = None
    """The model-facing refusal text; None when allowed."""
    fragment: str | None = None
    """The recursive deletion found in this call (None for a latch refusal or an allowed call)."""
    stop_turn: bool = False
    """Tool use is over for this turn: this and every later call are refused."""


_COMMAND_KEYS = ("command", "cmd", "script")


def _commands_in(tool: str, arguments: Mapping[str, Any] | None, depth: int = 0) -> list[str]:
    """The shell texts a tool call would run: exec/bash ``command``, a wrapped ``tool_call`` ``args``,
    and text written into a running process's stdin."""
    if not isinstance(arguments, Mapping) or depth > 3:
        return []
    found = [arguments[key] for key in _COMMAND_KEYS if isinstance(arguments.get(key), str)]
    if tool == "process" and isinstance(arguments.get("data"), str):
        found.append(arguments["data"])
    for key in ("args", "arguments", "params"):
        if isinstance(arguments.get(key), Mapping):
            found.extend(_commands_in(tool, arguments[key], depth + 1))
    return found


class DeleteGuard:
    """Per-turn state: refuse an unrequested recursive deletion, then refuse everything after it.

    The latch is the point: after a refusal the model cannot "try another way" in the same turn,
    and the owner gets a receipt built from host state (see ``receipt.py``) instead of model text.
    """

    def __init__(self, request_text: str) -> None:
        self.authorized = owner_asked_for_delete(request_text)
        self.refusal: GuardDecision | None = None

    @property
    def stopped(self) -> bool:
        """Whether a refusal has ended tool use for this turn."""
        return self.refusal is not None

    def check(self, tool: str, arguments: Mapping[str, Any] | None) -> GuardDecision:
        """Decide one tool call before it runs."""
        if self.refusal is not None:
            return GuardDecision(allowed=False, reason=RECURSIVE_DELETE_REFUSAL, stop_turn=True)
        if self.authorized:
            return GuardDecision(allowed=True)
        for command in _commands_in(tool, arguments):
            fragment = find_recursive_delete(command)
            if fragment:
                self.refusal = GuardDecision(
                    allowed=False, reason=RECURSIVE_DELETE_REFUSAL, fragment=fragment, stop_turn=True
                )
                return self.refusal
        return GuardDecision(allowed=True)
