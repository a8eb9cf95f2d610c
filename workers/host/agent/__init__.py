"""The builtin guarded agent: runs on a fleet host and drives its local model through an
OpenAI-compatible endpoint, with the harness's guard on every tool call.

Started as ``python -m workers.host.agent`` (see ``__main__.py`` and ``docs/builtin-agent.md``). It needs only
the standard library, pydantic and this repository's ``harness.guard`` / ``harness.core.transcript`` code.
"""
