"""MemoryTransport's own contract: first matching reply answers, `on` overrides, files in memory."""

from __future__ import annotations

import pytest

from harness.core.errors import HostLost
from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from workers.transport import TRANSPORTS, MemoryTransport, ShellResult

HOST = Host(name="m", transport="local", agents={"a": AgentConfig(command=["true"])},
            model=ModelEndpoint(base_url="http://127.0.0.1:1/v1", id="m", context=1024, max_output=64))


def test_replies_files_and_the_record_of_scripts() -> None:
    t = MemoryTransport(HOST, [(r"^echo ", "hi\n"), (r"^echo bye", "never: the earlier reply matches first")])
    assert t.shell("echo bye") == ShellResult(0, "hi\n", "")
    t.on(r"^echo bye", ShellResult(3, "", "no"))
    assert t.shell("echo bye").exit_code == 3 and t.shell("echo hello").stdout == "hi\n"
    unanswered = t.shell("uname -a")
    assert unanswered.exit_code == 127 and "no reply scripted for: uname -a" in unanswered.stderr

    def touch(script: str, tr: MemoryTransport) -> str:
        tr.files[script.split()[1]] = b""
        return "made"

    t.on(r"^touch ", touch)
    assert t.shell("touch /w/x").stdout == "made" and t.get("/w/x") == b""
    t.put("/w/y", b"data")
    assert t.get("/w/y") == b"data"
    with pytest.raises(FileNotFoundError):
        t.get("/w/none")
    t.on(r"^sleep", HostLost("gone", host="m"))
    with pytest.raises(HostLost):
        t.shell("sleep 1")
    assert t.scripts == ["echo bye", "echo bye", "echo hello", "uname -a", "touch /w/x", "sleep 1"]
    assert t.ran(r"^echo") == ["echo bye", "echo bye", "echo hello"]


def test_no_inventory_can_choose_it() -> None:
    assert MemoryTransport not in TRANSPORTS.values() and MemoryTransport.kind == ""
