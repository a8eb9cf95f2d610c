"""The shell of one poll on the host: the worker's heartbeat, then a wait there for the launcher's next record.

Apart from the lifecycle because it is a program of its own, run by the host's ``/bin/sh`` on every poll (several a
second on a short attempt): how it waits, what it costs (no process of its own where the shell's built-ins do) and how
it stays safe against an agent that writes into the delivery folder are its concern alone; the lifecycle only reads
what it prints (a record's line, ``STOPPED``, ``GONE`` or nothing). Tests run it on a real ``sh``.
"""

from __future__ import annotations

import math

__all__ = ["POLL_TICK_S", "WAKE_LINES", "poll_script"]

WAKE_LINES = 20
"""The most lines one wait on the wake FIFO reads (the supervisor writes two per delivery; more are an agent's)."""

POLL_TICK_S = 0.01
"""The host-side wait counts in these: the first looks for exit.json come every tick, the later ones every five."""


def poll_script(delivery: str, beat: str, window_s: float, launcher_pid: int, target: str = "exit.json") -> str:
    """One poll on the host: write the heartbeat, then wait for exit.json while the launcher lives, for up to
    ``window_s``; print exit.json, STOPPED, GONE or nothing. ``delivery`` and ``beat`` come quoted.

    The wait blocks on the delivery's wake FIFO (workers/host/launcher/ WAKE): the supervisor writes a line into it once
    exit.json (then packed.json) is there, so the end is seen at once, and nothing on the host wakes at intervals to
    look. A timer in the background signals the poll (USR1) at the window's end, which ends its read; any line only
    makes the poll look again, and after ``WAKE_LINES`` of them it stops reading (the worker waits the rest of the
    window). The FIFO is opened for reading and writing, so the open never waits for a writer. Where there is no FIFO
    (a file system without them, or an agent removed it) the poll looks every 10 ms for the first 0.1 s, then every
    50 ms.

    A ``sleep`` that takes whole seconds only (POSIX asks no more) sleeps 1 s instead: that look counts as 1 s, so
    the window stays ``window_s``. Counted as one look, a 2 s window took 40 s: past the poll's own 30 s + window
    timeout (the attempt was lost), and far past the heartbeats the launcher waits for."""
    ticks = int(window_s / POLL_TICK_S)
    # Written in place, not renamed: one write of a line, and a half-written line the supervisor might read fails its
    # MAC and is ignored (the next poll beats again, well within the bound). A rename was a process (mv) per poll.
    beat_part = f"printf %s {beat} > heartbeat; " if target == "exit.json" else ""  # once the agent ended, no beat
    # Records are read with the shell's own `read` (a record is one line), never by a process of their own: a cat, a
    # grep and another cat were 4 ms of each poll. r FILE sets x to FILE's line if FILE is a regular file (a FIFO in a
    # record's place would hold a reader for ever) that has one.
    read_fn = 'r() { x=; [ -f "$1" ] || return 1; IFS= read -r x < "$1"; [ -n "$x" ]; }; '
    # w FILE SECONDS WHOLE TICKS: wait until FILE is there, the launcher is gone or SECONDS passed (WHOLE where sleep
    # takes whole seconds only; TICKS of 10 ms where there is no wake FIFO). The window's end is a signal from a timer
    # in the background (USR1, trapped: it ends a `read` that waits in dash and in bash as sh), not a line in the FIFO
    # alone: an agent can write half a line into it, or read lines out of it, and either held a wait on a line for
    # ever. A shell whose read goes on after a trap (bash as bash) gets an empty line as well, and one still waiting a
    # second later is ended (TERM; the worker polls again). A wait reads at most
    # WAKE_LINES lines (an agent that floods the FIFO would keep it reading), then leaves the rest of the window to
    # the worker. A timer's signal that comes late (the wait ended as its window did) meets a trap that does nothing:
    # USR1's own action would end the poll. `command exec`: a redirection that fails (the FIFO went) must not end the
    # shell, as it would for the special built-in exec. The timer's output goes to /dev/null: its sleep outlives the
    # poll, and would hold the command's output open (and the worker) until it ends. A record already there starts no
    # timer (a subshell and a sleep: most of a short attempt's poll).
    wait_fn = (
        "w() { if [ -e \"$1\" ]; then return; elif [ -p wake ] && { command exec 3<>wake; } 2>/dev/null; then "
        "e=0; c=0; trap 'e=1' USR1; (sleep $2 2>/dev/null || sleep $3; kill -USR1 $$; echo >&3; sleep 1; kill $$) "
        ">/dev/null 2>&1 & t=$!; "
        f"while [ $e = 0 ] && [ $c -lt {WAKE_LINES} ] && [ ! -e \"$1\" ] && kill -0 {launcher_pid} 2>/dev/null && "
        "IFS= read -r y <&3; do c=$((c+1)); done; kill $t 2>/dev/null; trap : USR1; exec 3>&-; "
        f"else n=0; while [ ! -e \"$1\" ] && [ $n -lt $4 ] && kill -0 {launcher_pid} 2>/dev/null; do "
        "if [ $n -lt 10 ]; then s=0.01; k=1; else s=0.05; k=5; fi; "
        "if sleep $s 2>/dev/null; then n=$((n+k)); else sleep 1; n=$((n+100)); fi; done; fi; }; ")
    whole = max(1, math.ceil(window_s))
    # An exit record that says the supervisor is packing: wait for packed.json too (up to 2 s more), and print it on
    # the next line, so the end of a short attempt costs one round trip, not two.
    then_packed = ("printf '%s\\n' \"$x\"; case $x in *'\"packing\": true'*) w packed.json 2 2 200; "
                   "r packed.json && printf '%s\\n' \"$x\";; esac; true"
                   if target == "exit.json" else "printf '%s\\n' \"$x\"")
    # Stopped (SIGSTOP): the state field of /proc/PID/stat, read by the shell; `ps` where there is no /proc (macOS).
    stopped = (f"if [ -r /proc/{launcher_pid}/stat ]; then IFS= read -r x < /proc/{launcher_pid}/stat; "
               f"case ${{x##*) }} in [Tt]*) echo STOPPED;; esac; else ps -o stat= -p {launcher_pid} 2>/dev/null | "
               f"grep -q '^[Tt]' && echo STOPPED; fi; true")
    return (
        f"cd {delivery} 2>/dev/null || {{ echo GONE; exit 0; }}; {beat_part}{read_fn}{wait_fn}"
        f"{'w ' + target + ' ' + format(window_s, '.3f') + ' ' + str(whole) + ' ' + str(ticks) + '; ' if ticks else ''}"
        f"if r {target}; then {then_packed}; "
        f"elif kill -0 {launcher_pid} 2>/dev/null; then {stopped}; "
        f"elif r {target}; then {then_packed}; else echo GONE; fi"
    )
