"""Acceptance checks for 27-log-stats: "write a python cli, logstats.py, that reads an nginx access log (path
as argument) and prints the 10 busiest IPs with their request counts, and how many requests got each status
code. test it on a sample log". Run by the harness on a copy of the workspace (docs/checks-pytest.md).

logstats.py is found anywhere in the workspace (the one under Playground/ first) and run as
``python logstats.py LOG`` on a log in nginx's default "combined" format with 12 client IPs (so the top-10
cut matters) and five status codes, every count distinct. Tolerant of the layout (a table, "IP: count",
JSON-ish lines ...); strict about the numbers: each busiest IP's line carries its count, busier IPs come
first, the two quietest IPs are left out, and each status code's line carries its count.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

RUN_TIMEOUT_S = 60
SKIP_DIRS = {".git", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages"}

# 12 IPs with counts 14 .. 3 (no IP contains a status code or a count as a separate number)
IPS = [f"203.0.113.{n}" for n in (7, 19, 23, 31, 42, 58, 61, 77, 83, 96, 101, 117)]
IP_COUNTS = dict(zip(IPS, range(14, 2, -1)))
STATUS_TARGET = {"200": 61, "304": 11, "404": 17, "500": 6}  # + "301" takes the rest
PATHS = ["/", "/index.html", "/api/items?page=2", "/static/app.js", "/login", "/favicon.ico"]


def make_log() -> tuple[str, dict[str, int]]:
    lines = []
    codes = [c for c, n in STATUS_TARGET.items() for _ in range(n)]
    total = sum(IP_COUNTS.values())
    codes += ["301"] * (total - len(codes))
    i = 0
    for ip, n in IP_COUNTS.items():
        for _ in range(n):
            code = codes[(i * 37) % total]  # 37 is prime to the total: a permutation of the codes
            size = 0 if code == "304" else 512 + i
            minute, second = divmod(i, 60)
            lines.append(
                f'{ip} - - [12/Mar/2025:14:{minute:02d}:{second:02d} +0000] "GET {PATHS[i % len(PATHS)]} HTTP/1.1" '
                f'{code} {size} "-" "Mozilla/5.0 (X11; Linux x86_64; rv:123.0) Gecko/20100101 Firefox/123.0"'
            )
            i += 1
    counts: dict[str, int] = {}
    for line in lines:
        code = line.split('" ', 1)[1].split()[0]
        counts[code] = counts.get(code, 0) + 1
    return "\n".join(lines) + "\n", counts


def find_cli(workspace: Path) -> Path:
    found = []
    for dirpath, dirnames, filenames in os.walk(workspace):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if "logstats.py" in filenames:
            found.append(Path(dirpath) / "logstats.py")
    assert found, "no logstats.py in the workspace (the prompt names the script)"
    return sorted(found, key=lambda p: ("Playground" not in p.relative_to(workspace).parts, len(p.parts), str(p)))[0]


@pytest.fixture
def report(workspace: Path, tmp_path: Path):
    cli = find_cli(workspace)
    text, statuses = make_log()
    log = tmp_path / "access.log"
    log.write_text(text)
    try:
        proc = subprocess.run([sys.executable, str(cli), str(log)], cwd=cli.parent, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"`python logstats.py access.log` still running after {RUN_TIMEOUT_S} s")
    assert proc.returncode == 0, f"`python logstats.py access.log` exited {proc.returncode}; stderr: {proc.stderr[-500:]}"
    assert proc.stdout.strip(), "logstats.py printed nothing"
    return proc.stdout, statuses


def _numbers(line: str) -> set[str]:
    return set(re.findall(r"(?<![\d.])\d+(?![\d.])", line))


def _whole(needle: str) -> re.Pattern[str]:
    """``needle`` not inside a longer number or address (203.0.113.7 is not in 203.0.113.77)."""
    return re.compile(rf"(?<![\d.]){re.escape(needle)}(?![\d.]*\d)")


def _line_with(out: str, needle: str) -> str | None:
    for line in out.splitlines():
        if _whole(needle).search(line):
            return line
    return None


def test_busiest_ips_with_their_counts(report):
    out, _ = report
    top = IPS[:10]
    missing = [ip for ip in top if _line_with(out, ip) is None]
    assert not missing, f"the 10 busiest IPs should all be listed; missing {missing}. Output:\n{out[:1500]}"
    wrong = [f"{ip} ({IP_COUNTS[ip]})" for ip in top if str(IP_COUNTS[ip]) not in _numbers(_line_with(out, ip).replace(ip, ""))]
    assert not wrong, f"these IPs are listed without their request count on the same line: {wrong}. Output:\n{out[:1500]}"


def test_busiest_first_and_only_ten(report):
    out, _ = report
    positions = [_whole(ip).search(out).start() for ip in IPS[:10] if _whole(ip).search(out)]
    assert positions == sorted(positions), f"the IPs should be listed busiest first ({', '.join(IPS[:3])} ...). Output:\n{out[:1500]}"
    extra = [ip for ip in IPS[10:] if _line_with(out, ip) is not None]
    assert not extra, f"only the 10 busiest IPs should be listed, but {extra} (the two quietest) are too"


def test_status_code_counts(report):
    out, statuses = report
    wrong = []
    for code, n in sorted(statuses.items()):
        lines = [line for line in out.splitlines() if _whole(code).search(line) and not any(ip in line for ip in IPS)]
        if not any(str(n) in _numbers(line.replace(code, "", 1)) for line in lines):
            wrong.append(f"{code}: {n}")
    assert not wrong, f"these status codes are not shown with their counts: {wrong}. Output:\n{out[:1500]}"


def test_the_agent_wrote_tests(workspace: Path):
    project = find_cli(workspace).parent
    tests = [p for p in project.rglob("*.py")
             if (p.name.startswith("test_") or p.name.endswith("_test.py")) and "def test" in p.read_text(errors="replace")]
    assert tests, f"no test file with a test in it next to logstats.py ({project.relative_to(workspace)})"
