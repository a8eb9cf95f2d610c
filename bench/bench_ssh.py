"""One small SSH command over the harness's transport, on a real loopback sshd with a pinned key.

* **figure**: `Transport.shell("true")` as shipped (TCP_NODELAY on the socket), median and p90 of N runs;
* **baseline**, measured in the same run on the same connection: the socket's TCP_NODELAY turned off again
  (paramiko's default: each small packet waits on Nagle's algorithm and the peer's delayed ACK).

Run: .venv/bin/python bench/bench_ssh.py [--runs 50] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.inventory import load_inventory  # noqa: E402
from harness.core.records import utc_now  # noqa: E402
from tests.integration.fleetkit import SSHHost, keygen  # noqa: E402
from workers.transport import connect_for  # noqa: E402
from bench.record import record  # noqa: E402


def _times(t, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        t.shell("true", timeout=10)
        out.append((time.perf_counter() - start) * 1000)
    return sorted(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
    key = root / "id_ed25519"
    host = SSHHost("bench", root / "bench", keygen(key))
    host.setup()
    host.start()
    try:
        inv = root / "inv.toml"
        inv.write_text("schema_version = 1\n" + host.toml(key))
        t = connect_for(load_inventory(str(inv)).hosts["bench"])
        t.open()
        sock = t._transport().sock
        _times(t, 5)  # warm: the first channel of a connection costs more
        shipped = _times(t, args.runs)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
        baseline = _times(t, args.runs)
        t.close()
    finally:
        host.stop()

    def p90(xs: list[float]) -> float:
        return xs[int(len(xs) * 0.9) - 1]

    row = {
        "runs": args.runs,
        "shell_true_median_ms": round(statistics.median(shipped), 1), "shell_true_p90_ms": round(p90(shipped), 1),
        "baseline_no_nodelay_median_ms": round(statistics.median(baseline), 1),
        "baseline_no_nodelay_p90_ms": round(p90(baseline), 1),
        "measured_at": utc_now(),
    }
    print(json.dumps(row, indent=1))
    record(args.json_path, "ssh_command", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
