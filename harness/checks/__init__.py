"""Independent acceptance checks run against an item's workspace (see docs/checks-web.md).

The web names are imported lazily so ``python -m harness.checks.web`` runs without a runpy warning.
"""

from harness.checks.result import AssertionResult, CheckResult, CheckStatus

__all__ = ["AssertionResult", "CheckResult", "CheckStatus", "WebCheckSpec", "WebInteraction", "run_web_check"]


def __getattr__(name: str):
    if name in ("WebCheckSpec", "WebInteraction", "run_web_check"):
        from harness.checks import web

        return getattr(web, name)
    raise AttributeError(f"module 'harness.checks' has no attribute {name!r}")
