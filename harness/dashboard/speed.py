"""The model's measured speed, from the transcripts of a host's attempts: pure functions over transcript bytes and
the replies they hold, no I/O.

What a transcript records (docs/transcript.md): each ``model_response`` has ``latency_s``, the time from sending the
request to the whole reply having arrived (the builtin agent's client, streaming or not), and ``usage`` as the
endpoint reported it. No time to the first token is recorded, so the page says *reply latency*, and its *output
tokens per second* is ``completion_tokens / latency_s`` of one reply: it includes the time the server spent on the
prompt before the first token, so it is lower than a pure generation rate, and a longer prompt makes it lower.

A reply counts when it has usage with completion tokens and a latency above zero; an imported session's replies
(latency 0: its agent did not record one) and a reply without usage are counted as not measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.core.transcript import EVENT_ADAPTER, ModelResponse, RunStart

__all__ = ["Reply", "AttemptSpeed", "SpeedSummary", "attempt_speed", "percentile", "summarize", "ratio"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Reply(_Frozen):
    """One measured model reply, and where it is (to link the largest one to its cell)."""

    sweep_id: str = ""
    cell_id: str = ""
    attempt: int = 0
    latency_s: float = Field(description="Request sent to the whole reply received (model_response.latency_s).")
    completion_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.latency_s


class AttemptSpeed(_Frozen):
    """What one transcript tells about the model and the agent."""

    replies: list[Reply] = Field(default_factory=list, description="The measured replies, in file order.")
    unmeasured: int = Field(default=0, description="Replies without usage, completion tokens or a latency.")
    bad_lines: int = Field(default=0, description="Lines that are not a valid event (a torn last line, damage).")
    agent: str = ""
    agent_version: str = ""
    model: str = Field(default="", description="run_start.model: the model id the agent was configured with.")
    base_url: str = ""
    reported_models: list[str] = Field(default_factory=list, description="The model ids the endpoint reported.")


def attempt_speed(data: bytes) -> AttemptSpeed:
    """The replies and the run's configuration of one transcript. Only the ``run_start`` and ``model_response``
    lines are validated (through the transcript's own event models): a 1,000-event transcript is read in a few
    milliseconds. A line that is not a valid event is counted, not fatal: the rest is still measured."""
    replies: list[Reply] = []
    unmeasured = bad = 0
    start: RunStart | None = None
    reported: list[str] = []
    for line in data.split(b"\n"):
        if b'"model_response"' not in line and b'"run_start"' not in line:
            continue
        try:
            event = EVENT_ADAPTER.validate_json(line)
        except (ValidationError, ValueError):
            bad += 1
            continue
        if isinstance(event, RunStart) and start is None:
            start = event
        elif isinstance(event, ModelResponse):
            if event.model and event.model not in reported:
                reported.append(event.model)
            tokens = event.usage.completion_tokens if event.usage else 0
            if tokens > 0 and event.latency_s > 0:
                replies.append(Reply(latency_s=event.latency_s, completion_tokens=tokens))
            else:
                unmeasured += 1
    return AttemptSpeed(replies=replies, unmeasured=unmeasured, bad_lines=bad,
                        agent=start.agent if start else "", agent_version=start.agent_version if start else "",
                        model=start.model if start else "", base_url=start.base_url if start else "",
                        reported_models=reported)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least ``q`` of the values at or below it (p90 of
    ten values is the ninth smallest). None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class SpeedSummary(_Frozen):
    """The speed of a set of replies (one sweep's attempts on a host, or all of them)."""

    attempts: int = Field(description="Attempts whose transcript was read.")
    replies: int = Field(description="Replies measured.")
    unmeasured: int = Field(description="Replies without usage or latency: not in the figures.")
    median_tps: float | None = Field(description="Median over replies of completion_tokens / latency_s.")
    p90_tps: float | None = Field(description="90th percentile (nearest rank) of the same: the fast end.")
    median_latency_s: float | None
    p90_latency_s: float | None = Field(description="90th percentile of reply latency: the slow end.")
    largest: Reply | None = Field(description="The reply with the most completion tokens (the first of a tie).")
    models: list[str] = Field(description="The model ids the agents were configured with (run_start.model).")


def summarize(speeds: Iterable[tuple[AttemptSpeed, str, str, int]]) -> SpeedSummary:
    """One summary of attempts, each given as (its speed, sweep id, cell id, attempt number)."""
    tps: list[float] = []
    latency: list[float] = []
    attempts = unmeasured = 0
    models: list[str] = []
    largest: tuple[Reply, str, str, int] | None = None
    for speed, sweep_id, cell_id, attempt in speeds:
        attempts += 1
        unmeasured += speed.unmeasured
        if speed.model and speed.model not in models:
            models.append(speed.model)
        for r in speed.replies:
            tps.append(r.tokens_per_s)
            latency.append(r.latency_s)
            if largest is None or r.completion_tokens > largest[0].completion_tokens:
                largest = (r, sweep_id, cell_id, attempt)
    return SpeedSummary(attempts=attempts, replies=len(tps), unmeasured=unmeasured,
                        median_tps=statistics.median(tps) if tps else None, p90_tps=percentile(tps, 0.9),
                        median_latency_s=statistics.median(latency) if latency else None,
                        p90_latency_s=percentile(latency, 0.9), models=models,
                        largest=largest[0].model_copy(update={"sweep_id": largest[1], "cell_id": largest[2],
                                                              "attempt": largest[3]}) if largest else None)


def ratio(newer: float | None, older: float | None) -> float | None:
    """newer / older (0.5: half the older speed); None when either is unknown or the older is 0."""
    if newer is None or not older:
        return None
    return newer / older
