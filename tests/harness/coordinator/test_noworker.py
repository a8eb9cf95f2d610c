"""harness/coordinator/noworker.py: when the workers are asked which queues they consume, what is said, and when a host is
given up. A fake clock and a scripted answer stand in for time and the control broadcast; the real broadcast
against real `fleet worker` processes is tests/integration/test_no_worker.py."""

from __future__ import annotations

from harness.core.failures import classify
from harness.coordinator.noworker import Waiting, WorkerWatch, start_command


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watch(served: set[str] | None, timeout: float | None = None):
    clock, asked, said = Clock(), [], []
    answer = {"served": served}

    def ask():
        asked.append(clock.now)
        return answer["served"]

    w = WorkerWatch(ask=ask, queue_for=lambda h: f"fleet.ns.host.{h}", command_for=lambda h: f"fleet worker --hosts {h}",
                    on_warning=said.append, timeout_s=timeout, clock=clock)
    return w, clock, asked, said, answer


def test_attempts_that_start_at_once_never_cost_a_broadcast() -> None:
    w, clock, asked, said, _ = _watch(set())
    for _ in range(50):  # a normal sweep: every attempt starts within the grace, the watch is handed nothing older
        assert w.check({"alpha": Waiting(clock.now - 1.0, 1)}) == []
        clock.now += 0.2
    assert w.check({}) == []
    assert asked == [] and said == []


def test_a_queue_without_worker_is_warned_about_with_the_command_and_again_every_30_s() -> None:
    w, clock, asked, said, _ = _watch({"fleet.ns.host.alpha"})
    start = clock.now
    waiting = {"alpha": Waiting(start, 1), "bravo": Waiting(start, 2)}
    clock.now = start + 5
    assert w.check(waiting) == []
    assert len(asked) == 1 and len(said) == 1
    assert "no worker consumes fleet.ns.host.bravo: 2 attempt(s) of host bravo waiting for 5 s" in said[0]
    assert "start one with `fleet worker --hosts bravo`" in said[0] and "--no-worker-timeout S" in said[0]
    while clock.now < start + 95:  # the dispatcher's loop, every 0.2 s
        clock.now += 0.2
        assert w.check(waiting) == []
    assert [round(t - start) for t in asked] == [5, 35, 65, 95] and len(said) == 4
    assert all("host bravo" in s for s in said)  # alpha has its worker


def test_a_worker_that_appears_is_said_and_ends_the_warnings() -> None:
    w, clock, asked, said, answer = _watch(set())
    waiting = {"bravo": Waiting(clock.now, 1)}
    clock.now += 6
    w.check(waiting)
    answer["served"] = {"fleet.ns.host.bravo"}
    clock.now += 30
    assert w.check(waiting) == []
    assert said[-1] == "a worker consumes fleet.ns.host.bravo now: host bravo's attempts go on"
    assert w.unserved_for("bravo") == 0


def test_past_the_timeout_the_host_is_given_up_on_a_fresh_answer() -> None:
    w, clock, asked, said, answer = _watch(set(), timeout=20)
    start = clock.now
    waiting = {"bravo": Waiting(start, 1)}
    given = []
    while not given and clock.now < start + 60:
        clock.now += 0.2
        given = w.check(waiting)
    assert given == ["bravo"]
    # First seen without a worker at 5 s; given up 20 s later, on an answer asked then (not the 5 s one).
    assert [round(t - start) for t in asked] == [5, 25]
    assert round(clock.now - start) == 25 and w.unserved_for("bravo") >= 20
    assert "given up as HARNESS_FAILURE(no_worker) in 20 s (--no-worker-timeout 20)" in said[0]


def test_a_worker_found_at_the_deadline_saves_the_host() -> None:
    w, clock, asked, said, answer = _watch(set(), timeout=20)
    start = clock.now
    waiting = {"bravo": Waiting(start, 1)}
    clock.now = start + 5
    w.check(waiting)
    answer["served"] = {"fleet.ns.host.bravo"}
    clock.now = start + 25
    assert w.check(waiting) == []
    assert said[-1].startswith("a worker consumes")


def test_an_unanswered_broadcast_decides_nothing() -> None:
    w, clock, asked, said, answer = _watch(None, timeout=10)
    waiting = {"bravo": Waiting(clock.now, 1)}
    for _ in range(300):
        clock.now += 0.2
        assert w.check(waiting) == []
    assert said == [] and len(asked) == 2  # at 5 s and 35 s: the broker is away, nobody is blamed


def test_a_host_that_stops_waiting_starts_over() -> None:
    w, clock, asked, said, answer = _watch(set(), timeout=20)
    clock.now += 6
    w.check({"bravo": Waiting(clock.now - 6, 1)})
    clock.now += 1
    w.check({})  # its attempt started (or was recorded)
    assert w.unserved_for("bravo") == 0


def test_the_command_names_inventory_namespace_and_broker_shell_quoted() -> None:
    assert start_command("tower2", "inventory/fleet.toml", "", "redis://tower1:6379/0") == (
        "fleet worker --hosts tower2 -i inventory/fleet.toml --broker redis://tower1:6379/0")
    assert start_command("t", "/srv/my fleet.toml", "nightly", "redis://:***@tower1:6379/0") == (
        "FLEET_NAMESPACE=nightly fleet worker --hosts t -i '/srv/my fleet.toml' --broker 'redis://:***@tower1:6379/0'")


def test_no_worker_is_a_harness_failure_that_is_not_retried_nor_counted() -> None:
    from harness.coordinator.verbs import NOT_COUNTED

    assert classify("harness_failure", "no_worker").retry is False
    assert "no_worker" in NOT_COUNTED
