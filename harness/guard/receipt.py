"""The receipt after a refused recursive deletion (seed 003): what the owner gets, from host state.

Why: on tower2 (photo-renamer, session fe9ee859) the model wrote the script and its test, the test
passed, and then an unrequested ``... && rm -rf /workspace/test_manual`` was refused. The owner got
only the model-directed refusal text ("Do not retry ... wait for a new owner instruction") and the
run was graded failed although the work existed. After a refusal no model text is accepted, so the
owner now gets a receipt built only from what the host recorded: the files written or changed, the
latest recognized test command, the directory it ran in and that test's state.

Input: a list of small typed events, in the order the calls were admitted, each with times in
seconds on one clock (any epoch):

* ``FileChange``: a successful ``write`` (``change="written"``) or ``edit``/``apply_patch``
  (``change="changed"``) of ``path`` at ``time``;
* ``CommandRun``: a command that ran (exec, background exec): ``command`` as the model wrote it,
  ``cwd`` (the call's workdir; None is the workspace root), ``start``, ``end`` (None: still running
  when tool use stopped), ``output``, ``exit_code``; ``changes_workspace=False`` marks a read-only
  command; ``response_id`` groups sibling calls of one model response (so does it on FileChange).

Calls the guard refused ran nothing and are not events. Read-only tools are not events either.

The receipt is bounded: at most ``MAX_FILE_LINES`` (20) files are listed, each path capped at
``MAX_PATH_CHARS`` (200) keeping its start and file name, the command and directory at
``MAX_COMMAND_CHARS`` (160), so the whole text stays under ``RECEIPT_BOUND`` (8 KiB), far below the
ingress's 32 KiB receipt bound, whatever the model wrote.

Status: the refusal receipt is ``passed`` only when it can stand for the whole result (seed 003):

1. the owner asked for a change to files and for nothing to be said in the reply (no question, no
   explanation, summary, report, results, usage, "tell me", "include ..." -- deliberately broad), and
   no research was requested and no web results were used;
2. a write, edit or apply_patch succeeded in this run;
3. the latest recognized test passed and at least one test it reported passed (a run whose runner
   collected or selected no test is ``no_test_ran``, and the receipt names what the runner said);
4. that test ran in a directory holding a file this run changed (the workspace root and the
   Playground folder cover only their own top-level files; a command naming ``..``, ``~`` or an
   absolute path outside its directory covers nothing);
5. that pass is current: nothing that could change the workspace was admitted after it, no sibling
   call and no other command ran while it ran or ended after it, and none is still running;
6. the rest of the task evaluation passed, and the run is not Operations, exact-download,
   preview-required, managed-extension, managed-team or team-worker work.

Every other case is ``failed``, with the same honest receipt. ``pending`` and ``none`` belong to the
normal delivery path (``verification_status``): a test still running, or no test at all.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.paths import climbs, names_home, under
from harness.guard.verdict import TestVerdict, delivery_verdict, is_test_command, recognize

__all__ = [
    "FileChange",
    "CommandRun",
    "Event",
    "RunFacts",
    "TestState",
    "ReceiptStatus",
    "Receipt",
    "MAX_FILE_LINES",
    "MAX_PATH_CHARS",
    "MAX_COMMAND_CHARS",
    "RECEIPT_BOUND",
    "RECEIPT_LEAD",
    "RECEIPT_COMPLETE",
    "RECEIPT_INCOMPLETE",
    "asks_for_change",
    "asks_for_written_answer",
    "asks_for_research",
    "build_refusal_receipt",
    "latest_test",
    "verification_status",
]

MAX_FILE_LINES = 20
MAX_PATH_CHARS = 200
MAX_COMMAND_CHARS = 160
RECEIPT_BOUND = 8 * 1024
ELLIPSIS = "\u2026"

RECEIPT_LEAD = (
    "Pixel stopped using tools because a command included a recursive deletion that you did not ask for. "
    "That command was refused and did not run.\nResults recorded by Pixel's tools before that:\n"
)
RECEIPT_COMPLETE = "This does not establish complete test coverage or completion of every requested step."
RECEIPT_INCOMPLETE = (
    "This request is not complete. Ask Pixel to continue, or say explicitly if you want a folder deleted."
)
NO_FILES_LINE = "- No file was written or changed with Pixel's file tools.\n"
NO_TEST_LINE = "- No recognized test command ran.\n"
STILL_RUNNING_LINE = "- A command started earlier was still running when tool use stopped.\n"

TestState = Literal[
    "passed_current", "passed_not_current", "overlapped", "no_test_ran", "no_passing_test", "failed",
    "not_finished", "none_ran",
]
ReceiptStatus = Literal["passed", "failed", "pending", "none"]

STATE_TEXT: dict[str, str] = {
    "passed_current": " passed, and no tool call that could change the workspace ran after it.",
    "passed_not_current": (
        " passed, but a later tool call or command could have changed the workspace, so that result is not current."
    ),
    "overlapped": " passed, but another tool call or command ran at the same time, so that result is not current.",
    "no_passing_test": (
        " exited successfully, but no test it reported passed: each was skipped, not run or an expected failure."
    ),
    "failed": " failed.",
    "not_finished": " had not finished, so its result is unknown.",
}
NO_TEST_RAN_TEXT = " ran no test, so no test passed: the runner reported \"{said}\"."
"""A test command whose runner collected or selected no test (seed 003: "the receipt says no test passed"),
with the runner's own words, so the owner can tell it from a failing test."""


# --------------------------------------------------------------------------------------------------
# Input events


class FileChange(BaseModel):
    """A file tool call that succeeded: ``write`` creates or replaces, ``edit``/``apply_patch`` changes."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["file_change"] = "file_change"
    path: str
    time: float
    change: Literal["written", "changed"] = "written"
    response_id: str | None = None


class CommandRun(BaseModel):
    """A command that ran (foreground or background); ``end`` None means it was still running."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["command"] = "command"
    command: str
    cwd: str | None = None
    start: float
    end: float | None = None
    output: str = ""
    exit_code: int | None = None
    changes_workspace: bool = True
    response_id: str | None = None


Event = Annotated[FileChange | CommandRun, Field(discriminator="kind")]


class RunFacts(BaseModel):
    """What the receipt needs to know about the run besides its events."""

    model_config = ConfigDict(frozen=True)

    request_text: str
    web_results_used: bool = False
    other_checks_passed: bool = True
    """The rest of the task evaluation passed without a publication receipt."""
    excluded_work: bool = False
    """Operations, exact-download, preview-required, managed-extension, managed-team or team-worker work."""
    workspace_root: str = "/workspace"


class Receipt(BaseModel):
    """What the owner is delivered after the refusal."""

    model_config = ConfigDict(frozen=True)

    status: ReceiptStatus
    text: str
    test_state: TestState
    test_verdict: TestVerdict | None = None
    reasons: tuple[str, ...] = ()
    """Why the status is not passed (empty when passed): for graders and replay diffs."""


# --------------------------------------------------------------------------------------------------
# The owner's words

_ODS_SUFFIX = re.compile(r"\n*\[ODS Portal delivery requirement:.*\]\s*$", re.S)
_REPLY_CONTENT = re.compile(
    r"\b(?:explain\w*|explanation|describ\w*|description|summar\w*|overview|report\w*|results?|usage"
    r"|instructions?|how\s+(?:it|this|that)\s+works|how\s+to\s+(?:run|use)|document\w*|walk-?\s?through"
    r"|walk\s+me\s+through|compar\w*|citations?|cite|tell\s+me|show\s+me|give\s+me|let\s+me\s+know|include\w*"
    r"|reply|answer\w*|respon[sd]\w*|say\s+how|share)\b",
    re.I,
)
_POLITE_REQUEST = re.compile(r"^\s*(?:please\s+)?(?:can|could|would|will)\s+you\s+(?:please\s+)?", re.I)
_WH_QUESTION = re.compile(r"^\s*(?:what|why|how|which|who|where|when|is|are|does|do|did)\b", re.I)
_CHANGE = re.compile(
    r"\b(?:write|create|make|build|fix|add|update|change|edit|implement|refactor|modify|generate|rewrite"
    r"|rename|set\s+up|scaffold|patch|convert|port|develop|save|extend)\b",
    re.I,
)
_RESEARCH = re.compile(
    r"\b(?:search|look\s+up|research|browse|google|cite|citations?|sources?)\b"
    r"|\b(?:on|from)\s+the\s+(?:web|internet)\b",
    re.I,
)


def _owner_words(text: str) -> str:
    return _ODS_SUFFIX.sub("", text or "")


def asks_for_written_answer(request_text: str) -> bool:
    """Whether the owner asked for anything to be said in the reply (broad: a wrong match keeps failed)."""
    text = _owner_words(request_text)
    if _REPLY_CONTENT.search(text):
        return True
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        if sentence.rstrip().endswith("?") and not _POLITE_REQUEST.match(sentence):
            return True  # "Can you write ...?" is a request, not a question
        if _WH_QUESTION.match(sentence):
            return True
    return False


def asks_for_change(request_text: str) -> bool:
    """Whether the owner asked for files to be created or changed."""
    return bool(_CHANGE.search(_owner_words(request_text)))


def asks_for_research(request_text: str) -> bool:
    """Whether the owner asked for research, web searching or citations."""
    return bool(_RESEARCH.search(_owner_words(request_text)))


# --------------------------------------------------------------------------------------------------
# Where a test ran and what it covers

_LEADING_CD = re.compile(r"""^\s*cd\s+(?:"([^"]*)"|'([^']*)'|([^\s;&|]+))\s*(?:&&|;)\s*""")
_CONTROL = re.compile(r"[\x00-\x1f\x7f`]")


def _normal(path: str) -> str:
    return posixpath.normpath(path) if path else path


def _split_leading_cd(command: str, cwd: str) -> tuple[str, str]:
    """(the command without its leading ``cd``s, the directory it ran in). A leading cd wins over cwd."""
    directory = cwd
    while True:
        match = _LEADING_CD.match(command)
        if not match:
            return command.strip(), directory
        target = next(group for group in match.groups() if group is not None)
        directory = target if target.startswith(("/", "~")) else posixpath.join(directory, target)
        directory = directory if directory.startswith("~") else _normal(directory)
        command = command[match.end() :]


def _display(text: str, limit: int) -> str:
    """Inline-code safe (no backticks or control characters) and bounded."""
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def _display_path(path: str) -> str:
    """A path capped at MAX_PATH_CHARS, keeping its start and its file name."""
    path = _CONTROL.sub(" ", path)
    if len(path) <= MAX_PATH_CHARS:
        return path
    name = path.rsplit("/", 1)[-1]
    tail = min(max(len(name) + 1, 80), MAX_PATH_CHARS - 41)
    return path[: MAX_PATH_CHARS - 1 - tail] + ELLIPSIS + path[-tail:]


def _names_outside(command: str, directory: str) -> bool:
    """Whether the test command names a parent, home, or an absolute path outside its directory."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for index, word in enumerate(words):
        value = re.sub(r"^\d*[<>]+&?", "", word.split("=", 1)[1] if word.startswith("--") and "=" in word else word)
        if not value or value in ("/dev/null", "-") or value.isdigit():
            continue
        if climbs(value) or names_home(value):
            return True
        if value.startswith("/") and index > 0:  # the program itself (/usr/bin/python3) is not a target
            if not under(value, directory):
                return True
    return False


def _covers(directory: str, command: str, changed: list[str], root: str) -> bool:
    """Whether a test run in ``directory`` can stand for a file this run changed."""
    if directory.startswith("~") or _names_outside(command, directory):
        return False
    root = root.rstrip("/") or "/"
    shared = {root, posixpath.join(root, "Playground")}
    if directory in shared or directory.lower() == posixpath.join(root, "playground").lower():
        # The root and the Playground folder hold other projects: only their own top-level files.
        return any(posixpath.dirname(path) == directory for path in changed)
    prefix = directory.rstrip("/") + "/"
    return any(path.startswith(prefix) for path in changed)


# --------------------------------------------------------------------------------------------------
# The latest test and its state


def latest_test(events: Sequence[FileChange | CommandRun]) -> CommandRun | None:
    """The latest recognized test command by admission (start time, then list order)."""
    tests = [
        (event.start, index, event)
        for index, event in enumerate(events)
        if isinstance(event, CommandRun) and is_test_command(event.command)
    ]
    return max(tests, key=lambda item: (item[0], item[1]))[2] if tests else None


def _interval(event: FileChange | CommandRun) -> tuple[float, float | None]:
    return (event.time, event.time) if isinstance(event, FileChange) else (event.start, event.end)


def _currency(test: CommandRun, events: Sequence[FileChange | CommandRun]) -> TestState:
    """passed_current unless something that could change the workspace ran after or beside the pass.

    A pass is dated from when the test started (a background test is not dated from the poll that
    completed it). Admitted after it, or ending after it (or still running): not current. Running
    while it ran, or a sibling of the same model response in either order: overlapped.
    """
    assert test.end is not None
    stale = overlapped = False
    for event in events:
        if event is test or (isinstance(event, CommandRun) and not event.changes_workspace):
            continue
        if test.response_id is not None and event.response_id == test.response_id:
            overlapped = True
            continue
        start, end = _interval(event)
        if start > test.start or end is None or end > test.end:
            stale = True
        elif start == test.start or end > test.start:
            overlapped = True
    return "passed_not_current" if stale else "overlapped" if overlapped else "passed_current"


def _test_state(
    test: CommandRun | None, events: Sequence[FileChange | CommandRun]
) -> tuple[TestState, TestVerdict | None]:
    if test is None:
        return "none_ran", None
    if test.end is None:
        return "not_finished", None
    verdict = recognize(test.output, test.exit_code, test.command)
    if verdict.verdict in ("no_test_ran", "no_passing_test"):
        return verdict.verdict, verdict
    if verdict.verdict != "passed":
        return "failed", verdict  # "unrecognized" too: a false failure, never a false pass
    return _currency(test, events), verdict


# --------------------------------------------------------------------------------------------------
# The receipt


def _file_lines(events: Sequence[FileChange | CommandRun], root: str) -> tuple[list[str], dict[str, str]]:
    kinds: dict[str, str] = {}
    for event in events:
        if isinstance(event, FileChange):
            path = event.path if event.path.startswith("/") else posixpath.join(root, event.path)
            path = _normal(path)
            kinds[path] = "written" if event.change == "written" or kinds.get(path) == "written" else "changed"
    paths = sorted(kinds)
    lines = [f"- File {kinds[path]}: `{_display_path(path)}`.\n" for path in paths[:MAX_FILE_LINES]]
    extra = paths[MAX_FILE_LINES:]
    if extra:
        extra_kinds = {kinds[path] for path in extra}
        verb = extra_kinds.pop() if len(extra_kinds) == 1 else "written or changed"
        noun = "file was" if len(extra) == 1 else "files were"
        lines.append(f"- {len(extra)} additional {noun} {verb}.\n")
    return lines, kinds


def build_refusal_receipt(events: Sequence[FileChange | CommandRun], facts: RunFacts) -> Receipt:
    """The owner's receipt after a refused recursive deletion, and whether it keeps ``passed``."""
    root = _normal(facts.workspace_root) or "/workspace"
    file_lines, kinds = _file_lines(events, root)
    test = latest_test(events)
    state, verdict = _test_state(test, events)

    body = "".join(file_lines) or NO_FILES_LINE
    covered = False
    if test is None:
        body += NO_TEST_LINE
    else:
        command, directory = _split_leading_cd(test.command, _normal(test.cwd or root))
        if state == "no_test_ran" and verdict is not None:
            said = _display(verdict.said or "no test ran", MAX_COMMAND_CHARS).replace('"', "'")
            state_text = NO_TEST_RAN_TEXT.format(said=said)
        else:
            state_text = STATE_TEXT[state]
        body += (
            f"- The latest recognized test command, `{_display(command, MAX_COMMAND_CHARS)}` in "
            f"`{_display(directory, MAX_COMMAND_CHARS)}`,{state_text}\n"
        )
        covered = _covers(directory, command, list(kinds), root)
    if any(isinstance(event, CommandRun) and event.end is None for event in events):
        body += STILL_RUNNING_LINE

    reasons: list[str] = []
    if asks_for_written_answer(facts.request_text):
        reasons.append("written_answer_requested")
    if not asks_for_change(facts.request_text):
        reasons.append("no_change_requested")
    if asks_for_research(facts.request_text) or facts.web_results_used:
        reasons.append("research")
    if not kinds:
        reasons.append("no_file_change")
    if state != "passed_current":
        reasons.append(f"test_{state}")
    elif not covered:
        reasons.append("test_not_covering_changes")
    if not facts.other_checks_passed:
        reasons.append("other_checks_failed")
    if facts.excluded_work:
        reasons.append("excluded_work")

    status: ReceiptStatus = "failed" if reasons else "passed"
    text = RECEIPT_LEAD + body + (RECEIPT_COMPLETE if status == "passed" else RECEIPT_INCOMPLETE)
    return Receipt(status=status, text=text, test_state=state, test_verdict=verdict, reasons=tuple(reasons))


def verification_status(
    events: Sequence[FileChange | CommandRun], *, skipped_only_passes: bool = True
) -> ReceiptStatus:
    """The normal delivery path's test status: none ran, pending (still running), passed or failed.

    ``skipped_only_passes`` keeps seed 003's recorded behaviour: outside the deletion receipt, an
    exit-0 run in which no test passed still counts as passing ("left for a separate change").
    """
    test = latest_test(events)
    if test is None:
        return "none"
    if test.end is None:
        return "pending"
    # delivery_verdict, not the verdict: a run where no test ran gates exactly as it did before it had a
    # name (exit 0 as "no passing test", exit 5 as failed), so no delivery or continuation moves.
    verdict = delivery_verdict(recognize(test.output, test.exit_code, test.command), test.exit_code)
    if verdict == "passed" or (verdict == "no_passing_test" and skipped_only_passes):
        return "passed"
    return "failed"
