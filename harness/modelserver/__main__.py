"""``python -m harness.modelserver --script F``: run the scripted model server in the foreground."""

from __future__ import annotations

import argparse
import sys

from .script import ScriptError, load_scripts
from .server import serve


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and serve until SIGTERM or SIGINT; errors are one line on stderr."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.modelserver",
        description="An OpenAI-compatible model server that answers from a script (see docs/scripted-model.md).",
    )
    parser.add_argument("--script", required=True, action="append",
                        help="a script (.toml or .json), a folder of scripts or a glob; repeat for a set")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free one)")
    parser.add_argument("--model-id", default=None, help="model id to report (default: the script's)")
    parser.add_argument("--log", default=None, help="append every request and its answer to this JSONL file")
    parser.add_argument("--check", action="store_true", help="validate the scripts and exit without serving")
    args = parser.parse_args(argv)
    try:
        if args.check:
            for name in load_scripts(args.script):
                print(f"{name}: valid")
            return 0
        serve(args.script if len(args.script) > 1 else args.script[0], args.host, args.port, args.model_id,
              log_path=args.log)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
