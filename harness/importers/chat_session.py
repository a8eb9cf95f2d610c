"""Former names of the one recorded-run model, for code written against them (the OpenCode and Hermes importer
tests among it). There is no second model: a "chat session" is a ``RecordedRun``, its call a ``RecordedCall``,
and its events come from the one road, ``harness.importers.events.to_events`` (docs/importers.md).
New code imports those names."""

from __future__ import annotations

from harness.importers.events import to_events as session_events
from harness.importers.recorded import RecordedCall as SessionCall
from harness.importers.recorded import RecordedRound as SessionRound
from harness.importers.recorded import RecordedRun as ChatSession

__all__ = ["ChatSession", "SessionCall", "SessionRound", "session_events"]
