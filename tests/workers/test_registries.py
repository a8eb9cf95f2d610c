"""The plug-in points are registries declared once: agent kinds (harness.core.agents) with their adapter classes
(workers.adapters), transports (harness.core.transports) with their classes (workers.transport), and the readers
of those declarations (the inventory, grading, the builtin adapter, connect_for)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import agents
from harness.core.agents import AGENT_KINDS, EXIT_INFRASTRUCTURE, AgentKind, UnknownAgentKind
from harness.grading.evidence import evidence_from_attempt
from harness.core.records import AttemptResult
from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from harness.core.transports import TRANSPORT_KINDS, UnknownTransport
from workers.adapters import ADAPTERS, BuiltinAdapter, adapter_for
from workers.adapters.registry import registered
from workers.transport import TRANSPORTS, LocalTransport, SSHTransport, connect_for
from workers.transport import registry as transport_registry
from tests.support import REPO

ROOT = REPO
MODEL = ModelEndpoint(base_url="http://127.0.0.1:8080/v1", id="m", context=65536, max_output=1024)


def test_every_declared_agent_kind_has_exactly_one_adapter_that_carries_its_declaration() -> None:
    assert set(ADAPTERS) == set(AGENT_KINDS)
    for name, cls in ADAPTERS.items():
        assert cls.kind is AGENT_KINDS[name], name
        adapter = adapter_for("a", AgentConfig(kind=name, command=["true"]))
        assert type(adapter) is cls and adapter.kind.name == name


def test_an_adapter_cannot_register_an_undeclared_kind_or_take_a_kind_twice() -> None:
    with pytest.raises(UnknownAgentKind, match=r"unknown kind 'aider' \(known: builtin, command, hermes, openclaw, opencode\)"):
        registered("aider")

    class Another(BuiltinAdapter):
        pass

    with pytest.raises(RuntimeError, match="two adapters"):
        registered("builtin")(Another)
    assert ADAPTERS["builtin"] is BuiltinAdapter


def test_the_builtin_agent_and_its_adapter_share_the_declared_infrastructure_exit() -> None:
    from workers.host.agent import loop

    assert BuiltinAdapter.kind.infrastructure_exit == EXIT_INFRASTRUCTURE == loop.EXIT_INFRASTRUCTURE == 75
    assert [k.name for k in AGENT_KINDS.values() if k.infrastructure_exit is not None] == ["builtin"]


def test_the_builtin_adapter_reads_its_exit_code_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BuiltinAdapter, "kind", dataclasses.replace(BuiltinAdapter.kind, infrastructure_exit=99))
    adapter = BuiltinAdapter("builtin", AgentConfig(kind="builtin"))
    end = b'{"event": "run_end", "outcome": "infrastructure", "reason": "model_http_503"}\n'
    assert adapter.infrastructure_failure(99, {"transcript.jsonl": end}) == "the model endpoint failed: model_http_503"
    assert adapter.infrastructure_failure(75, {"transcript.jsonl": end}) is None


def _attempt_folder(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir()
    result = AttemptResult(sweep_id="s", cell_id="h/i/a/r1", attempt=1, status="finished", exit_code=0, host="h",
                           agent="a", item="i", agent_kind=kind)
    (folder / "meta.json").write_text(json.dumps(result.meta()), encoding="utf-8")
    return folder


def test_grading_expects_a_transcript_exactly_for_the_kinds_that_declare_one(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for name, kind in AGENT_KINDS.items():
        assert evidence_from_attempt(_attempt_folder(tmp_path, name), None).expects_transcript is kind.transcript, name
    assert {k for k, v in AGENT_KINDS.items() if v.transcript} == {"builtin", "openclaw", "opencode", "hermes"}
    # A kind declared tomorrow is graded from its declaration, with no second list to keep.
    monkeypatch.setitem(AGENT_KINDS, "aider", AgentKind("aider", True, None, "a kind declared in one place"))
    assert evidence_from_attempt(_attempt_folder(tmp_path, "aider"), None).expects_transcript is True
    assert evidence_from_attempt(_attempt_folder(tmp_path, "unknown-old-kind"), None).expects_transcript is False


def test_the_inventory_accepts_exactly_the_declared_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AGENT_KINDS:
        assert AgentConfig(kind=name, command=["true"]).kind == name
    with pytest.raises(ValueError, match="unknown kind 'aider'"):
        AgentConfig(kind="aider", command=["true"])
    monkeypatch.setitem(AGENT_KINDS, "aider", AgentKind("aider", False, None, "declared here only"))
    assert AgentConfig(kind="aider", command=["true"]).kind == "aider"
    assert agents.agent_kind("aider").summary == "declared here only"


def test_every_declared_transport_has_exactly_one_class_and_connect_for_picks_it() -> None:
    assert set(TRANSPORTS) == set(TRANSPORT_KINDS)
    assert (TRANSPORTS["ssh"], TRANSPORTS["local"]) == (SSHTransport, LocalTransport)
    local = Host(name="here", transport="local", model=MODEL, agents={"a": AgentConfig(command=["true"])})
    ssh = Host(name="there", address="there.lan", user="q", host_key="SHA256:" + "A" * 43, model=MODEL,
               agents={"a": AgentConfig(command=["true"])})
    assert type(connect_for(local)) is LocalTransport and type(connect_for(ssh)) is SSHTransport
    for name, cls in TRANSPORTS.items():
        assert cls.kind == name


def test_a_transport_class_cannot_register_an_undeclared_name_or_take_a_name_twice() -> None:
    with pytest.raises(UnknownTransport, match=r"unknown transport 'telnet' \(known: local, ssh\)"):
        transport_registry.registered("telnet")

    class Another(LocalTransport):
        pass

    with pytest.raises(RuntimeError, match="two classes"):
        transport_registry.registered("local")(Another)
    assert TRANSPORTS["local"] is LocalTransport


def test_a_host_needs_what_its_transport_declares() -> None:
    with pytest.raises(ValueError, match="required for a host with transport 'ssh'"):
        Host(name="there", address="there.lan", user="q", model=MODEL, agents={"a": AgentConfig(command=["true"])})
    with pytest.raises(ValueError, match="unknown transport 'telnet'"):
        Host(name="there", transport="telnet", model=MODEL, agents={"a": AgentConfig(command=["true"])})
    with pytest.raises(ValueError, match="local hosts only"):
        Host(name="there", address="there.lan", user="q", host_key="SHA256:" + "A" * 43,
             model=MODEL.model_copy(update={"scripted": True}), agents={"a": AgentConfig(command=["true"])})


def test_loading_an_inventory_imports_no_worker_module() -> None:
    """The registries the inventory reads are import-light: loading one must not pull in the adapters,
    the transports, Celery or Fabric (a coordinator reading a file pays for none of them)."""
    code = (
        "import sys\n"
        "from harness.core.inventory import load_inventory\n"
        "inv = load_inventory('inventory/fleet.toml')\n"
        "assert len(inv.hosts) == 6\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('workers', 'celery', 'fabric', 'paramiko', 'kombu'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _table_column(doc: str, key: str) -> set[str]:
    """The quoted values in the 'type' column of the row for ``key`` of a docs table."""
    (row,) = [line for line in doc.splitlines() if line.startswith(f"| `{key}` |")]
    return set(re.findall(r'"([a-z]+)"', row.split("|")[2]))


def test_the_inventory_docs_list_exactly_the_declared_kinds_and_transports() -> None:
    doc = (ROOT / "docs" / "inventory.md").read_text(encoding="utf-8")
    assert _table_column(doc, "kind") == set(AGENT_KINDS)
    assert _table_column(doc, "transport") == set(TRANSPORT_KINDS)
    for name in AGENT_KINDS:
        assert f"| `{name}` |" in doc, f"docs/inventory.md has no row for kind {name!r}"

