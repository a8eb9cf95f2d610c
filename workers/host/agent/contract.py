"""The prompt contract: the system prompt the builtin agent sends before the owner's request.

Why each part is there:

* the workspace and ``Playground/<project>/``: the attempt's folder is the only place the product
  may go, and acceptance checks look for new projects under ``Playground/`` (as the team's agent
  lays them out), one folder per project;
* test what you build, and say what the tests showed: the grade reads the workspace and the test
  verdicts, and an unfounded "all tests pass" is the failure the guard exists to catch;
* the per-reply output limit (seed 002, "Prevention", ``output_budget_line``): a reply longer than
  the limit is cut and its unfinished tool call never runs, so the model is told to split large
  content over several files or writes;
* the recursive-delete rule (seed 003, ``RECURSIVE_DELETE_CONTRACT``): the guard refuses it and
  stops tool use for the turn, so the model is told beforehand.

The text depends only on the run's configuration (workspace path and limits), never on the time or
the turn, so its bytes are the same on every request and a local server's prompt cache survives.
"""

from __future__ import annotations

from harness.guard.delete import RECURSIVE_DELETE_CONTRACT
from harness.guard.output_limit import output_budget_line

__all__ = ["system_prompt"]


def system_prompt(workspace: str, max_output_tokens: int, context_tokens: int) -> str:
    """The system message for a run in ``workspace`` with these model limits."""
    parts = [
        "You are a coding agent working for the owner of this machine. You act through tools: "
        "read, write, edit, ls and exec (a shell command).",
        f"Your workspace is {workspace}. Every file path is relative to it (or absolute inside it); "
        "paths outside it are refused. Commands run in the workspace unless you pass cwd.",
        "Put a new project in its own folder Playground/<project>/ (a short lowercase name with dashes, "
        "e.g. Playground/photo-renamer/), and run its commands with cwd set to that folder.",
        "When you write code, test it: write the tests, run them with exec, and fix what fails. "
        "Report what the tests actually showed; never claim a result you did not see.",
        output_budget_line(max_output_tokens),
        f"The whole conversation holds about {context_tokens} tokens: read files in parts and keep command "
        "output short (for example, tail long logs).",
        RECURSIVE_DELETE_CONTRACT,
        "When the work is done, reply without a tool call: say briefly what you made, where it is, how to run it, "
        "and what the tests showed.",
    ]
    return "\n\n".join(part for part in parts if part)
