"""`fleet hosts check` without a host: which results make a host ready, the closing line, and a table that folds
long values instead of cutting them. (The checks against real sshd hosts are in tests/integration.)"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from harness.cli.hosts_cmd import _hosts_check_table
from harness.coordinator.hostcheck import SCRIPTED, HostCheck, readiness, summary_line
from tests.support import assert_one_line_error, run_fleet, table_column

OFFERED = "SHA256:Q2hhcmxpZSBvZmZlcnMgdGhpcyBrZXkgdG9kYXkgYW5kIGl0IGlzIGxvbmc"
PINNED = "SHA256:QWxwaGEgaXMgdGhlIGtleSB0aGUgaW52ZW50b3J5IHBpbnMgZm9yIGhpbQ"


def _ok(name: str, **fields: object) -> HostCheck:
    data: dict = dict(host=name, ssh="ok", host_key="matches pin", model="ok", disk_free_mb=1000,
                      agents={"builtin": "found", "opencode": "missing: opencode not on PATH"})
    data.update(fields)
    return HostCheck(**data)


def _mismatch(name: str) -> HostCheck:
    return HostCheck(host=name, ssh="connected",
                     host_key=f"MISMATCH: {name}: host key mismatch: 127.0.0.1:2222 offered ssh-ed25519 {OFFERED}, "
                              f"the inventory pins {PINNED}")


def test_a_missing_agent_counts_only_when_the_sweep_asks_for_it() -> None:
    host = _ok("tower1")
    assert readiness(host) == (True, "")
    assert readiness(host, ["builtin"]) == (True, "")
    assert readiness(host, ["opencode"]) == (False, "agent opencode missing: opencode not on PATH")
    # An agent the host does not have in the inventory runs no cell there: it does not count against it.
    assert readiness(host, ["hermes"]) == (True, "")


def test_ssh_pin_and_model_make_a_host_not_ready_and_say_why() -> None:
    assert readiness(_ok("a", model="down: URLError: refused")) == (False, "model down: URLError: refused")
    assert readiness(_ok("a", model=SCRIPTED)) == (True, "")
    assert readiness(HostCheck(host="a", ssh="failed: SSH connect timed out")) == (False, "ssh failed: SSH connect timed out")
    assert readiness(HostCheck(host="mac", ssh="failed: mac: SSH authentication failed")) == (
        False, "ssh failed: SSH authentication failed")  # the closing line names the host once
    ok, why = readiness(_mismatch("c"))
    assert not ok and why.startswith("host key mismatch: 127.0.0.1:2222 offered") and OFFERED in why and PINNED in why


def test_the_closing_line_names_each_host_not_ready() -> None:
    hosts = [_ok("tower1"), _ok("tower2", model="down: URLError: refused"), HostCheck(host="mac", ssh="failed: no route")]
    for h in hosts:
        h.ok, h.why = readiness(h)
    assert summary_line(hosts) == "1 of 3 hosts ready; not ready: tower2 (model down: URLError: refused), mac (ssh failed: no route)"
    assert summary_line(hosts[:1]) == "all 1 host ready"
    assert summary_line([hosts[0], _ok("x", ok=True)]) == "all 2 hosts ready"


def test_the_table_folds_fingerprints_on_a_narrow_terminal_instead_of_cutting_them() -> None:
    out = io.StringIO()
    console = Console(file=out, width=60, color_system=None, highlight=False)
    res = _mismatch("charlie")
    res.ok, res.why = readiness(res)
    console.print(_hosts_check_table("hosts in /inv.toml", [_ok("alpha", ok=True), res]))
    text = out.getvalue()
    assert "…" not in text
    # Fold keeps every character of a cell: the host key column, read back line by line, holds both whole.
    assert OFFERED in table_column(text, 4) and PINNED in table_column(text, 4)
    assert table_column(text, 1) == "alphacharlie" and table_column(text, 2) == "yesno"


def test_hosts_check_names_an_unknown_agent_in_one_line(tmp_path: Path) -> None:
    inv = tmp_path / "inv.toml"
    inv.write_text('schema_version = 1\n[hosts.local]\ntransport = "local"\nworkdir = "/tmp/x"\n'
                   '[hosts.local.model]\nbase_url = "http://127.0.0.1:9/v1"\nid = "m"\ncontext = 4096\nmax_output = 512\n'
                   '[hosts.local.agents.echo]\ncommand = ["echo", "{prompt_file}"]\n')
    proc = run_fleet("hosts", "check", "-i", str(inv), "--agents", "nosuch", cwd=tmp_path)
    assert_one_line_error(proc, "--agents", "'nosuch'")
    # A stray comma counts no agent by mistake: refused, like the sweep's list flags.
    assert_one_line_error(run_fleet("hosts", "check", "-i", str(inv), "--agents", ",", cwd=tmp_path), "--agents", "names nothing")
    assert_one_line_error(run_fleet("hosts", "check", "-i", str(inv), "--hosts", "local,", cwd=tmp_path), "--hosts",
                          "an empty name")


def test_a_host_python_that_answers_something_else_is_that_hosts_failure_not_a_traceback(tmp_path: Path) -> None:
    """The model probe's last line is read as JSON: a wrapper that printed a number there (valid JSON, not the
    probe's object) was a TypeError traceback for the whole command."""
    fake = tmp_path / "python-wrapper"
    fake.write_text("#!/bin/sh\necho 5\n")
    fake.chmod(0o755)
    inv = tmp_path / "inv.toml"
    inv.write_text(f'schema_version = 1\n[hosts.local]\ntransport = "local"\nworkdir = "{tmp_path / "w"}"\n'
                   f'python = "{fake}"\n'
                   '[hosts.local.model]\nbase_url = "http://127.0.0.1:9/v1"\nid = "m"\ncontext = 4096\nmax_output = 512\n'
                   '[hosts.local.agents.echo]\ncommand = ["echo", "{prompt_file}"]\n')
    proc = run_fleet("hosts", "check", "-i", str(inv), "--json", cwd=tmp_path)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 1, proc.stderr
    import json

    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["model"].startswith("down: ") and not host["ok"], host
