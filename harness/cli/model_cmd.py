"""``fleet model serve``: the scripted model server (an OpenAI-compatible stand-in for a host's local model,
docs/scripted-model.md), run by hand or checked with ``--check``. The embedded default starts its own in-process.
"""

from __future__ import annotations

import click

from harness.cli.console import console
from harness.core.errors import UsageError

__all__ = ["model"]


@click.group()
def model() -> None:
    """The scripted model server (an OpenAI-compatible stand-in for a host's local model)."""


@model.command("serve")
@click.option("--script", "script", required=True, multiple=True,
              help="Script file, folder or glob (TOML or JSON, see docs/scripted-model.md); repeat for a script set.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8765, show_default=True, help="0 picks a free port.")
@click.option("--model-id", default=None, help="Model id to serve (default: the script's, else scripted-model).")
@click.option("--log", "log_path", default=None, help="Append every request and answer to this JSONL file.")
@click.option("--check", is_flag=True, help="Read and validate the scripts, print them, and exit without serving.")
def model_serve(script, host, port, model_id, log_path, check) -> None:
    """Serve a script over HTTP until interrupted; prints `listening on URL` first.

    \b
    Examples:
      fleet model serve --script prompts/open/07-photo-renamer/model.toml --port 8765
      fleet model serve --script 'prompts/open/*/model.toml' --check
    """
    from harness.modelserver import ScriptError, load_scripts, serve

    try:
        if check:
            for name in load_scripts(list(script)):
                console.print(f"{name}: valid", markup=False, soft_wrap=True)
            return
        serve(list(script), host=host, port=port, model_id=model_id, log_path=log_path)
    except ScriptError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
