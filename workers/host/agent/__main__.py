"""``python -m workers.host.agent``: the builtin guarded agent's command line.

Bad arguments (a missing prompt file, a workspace that is not a folder, an unset API-key variable)
print one line ``error: ...`` and exit 2 before anything runs. Once the transcript is open, every
ending is recorded in it, and the exit code says which kind it was: 0 the model's result (completed,
or stopped by a guard rule), 75 an infrastructure failure (the endpoint failed after retries), 70 a
bug in the agent, 143/130 stopped by SIGTERM/SIGINT, 74 the out-dir could not be written. A summary
line is printed on stdout.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid
from pathlib import Path
from types import FrameType

from workers.host.agent.chat import ChatClient, RetryPolicy
from workers.host.agent.loop import Interrupted, RunSettings, run_agent
from workers.host.agent.tools import Toolbox, Workspace

HARNESS_ROOT = str(Path(__file__).resolve().parents[3])
"""The harness checkout the agent runs from: kept out of PYTHONPATH for commands the model runs."""


class _UsageError(Exception):
    """One line for stderr, exit 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers.host.agent",
        description="The builtin guarded agent: drives an OpenAI-compatible model with tools in a workspace.",
    )
    parser.add_argument("--prompt-file", required=True, help="the owner's request (UTF-8 text)")
    parser.add_argument("--workspace", required=True, help="the folder the agent works in (must exist)")
    parser.add_argument("--out-dir", required=True,
                        help="where transcript.jsonl, answer.txt and receipt.json are written")
    parser.add_argument("--base-url", required=True, help="the API's base URL, ending in /v1")
    parser.add_argument("--model", required=True, help="the model id to request")
    parser.add_argument("--context", type=int, required=True, help="the model's context size in tokens")
    parser.add_argument("--max-output", type=int, required=True, help="the per-reply output limit in tokens")
    parser.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                        help="stream replies as Server-Sent Events (default) or not")
    parser.add_argument("--api-key-env", default="", help="name of the environment variable holding the API key")
    parser.add_argument("--timeout-s", type=float, default=600.0,
                        help="seconds to wait for the endpoint's next bytes before the attempt fails (default 600)")
    parser.add_argument("--retries", type=int, default=3, help="retries of a failed model request (default 3)")
    parser.add_argument("--retry-backoff-s", type=float, default=2.0,
                        help="wait before the first retry, doubled each time (default 2)")
    parser.add_argument("--exec-timeout-s", type=float, default=120.0,
                        help="default timeout of an exec call (default 120; the model may ask for another)")
    return parser


def _settings(args: argparse.Namespace) -> tuple[RunSettings, str | None, Workspace]:
    for name in ("context", "max_output", "timeout_s", "exec_timeout_s"):
        if getattr(args, name) <= 0:
            raise _UsageError(f"--{name.replace('_', '-')} must be positive")
    if args.retries < 0 or args.retry_backoff_s < 0:
        raise _UsageError("--retries and --retry-backoff-s must not be negative")
    try:
        # Bytes decoded, not read_text: universal newlines would turn the prompt's CR and CRLF into LF.
        prompt = Path(args.prompt_file).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _UsageError(f"--prompt-file {args.prompt_file}: cannot read: {exc}") from None
    try:
        workspace = Workspace(args.workspace)
    except OSError as exc:
        raise _UsageError(f"--workspace {args.workspace}: {exc.strerror or exc}") from None
    if not workspace.root.is_dir():
        raise _UsageError(f"--workspace {args.workspace}: not a folder")
    out_dir = Path(args.out_dir)
    if not out_dir.is_dir():
        raise _UsageError(f"--out-dir {args.out_dir}: not an existing folder")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise _UsageError(f"--api-key-env {args.api_key_env}: the environment variable is not set")
    settings = RunSettings(
        prompt=prompt, prompt_file=str(Path(args.prompt_file).resolve()), out_dir=out_dir, model=args.model,
        base_url=args.base_url.rstrip("/"), context=args.context, max_output=args.max_output, stream=args.stream,
        timeout_s=args.timeout_s, retries=args.retries, exec_timeout_s=args.exec_timeout_s,
    )
    return settings, api_key, workspace


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # Once: while the run records its end, a second signal must not cut that short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings, api_key, workspace = _settings(args)
        run_id = uuid.uuid4().hex
        client = ChatClient(
            settings.base_url, settings.model, api_key=api_key, timeout_s=settings.timeout_s, stream=settings.stream,
            retry=RetryPolicy(retries=args.retries, backoff_s=args.retry_backoff_s), conversation=run_id,
        )
    except (_UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    toolbox = Toolbox(workspace, exec_timeout_s=settings.exec_timeout_s,
                      hidden_env=(args.api_key_env,) if args.api_key_env else (), harness_root=HARNESS_ROOT)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        code, summary = run_agent(settings, client, toolbox, run_id)
    except Interrupted as exc:  # a signal while the end was being recorded
        return 128 + signal.Signals[exc.signal_name].value
    except OSError as exc:
        print(f"error: cannot write the run's files in {settings.out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 74
    print(summary, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
