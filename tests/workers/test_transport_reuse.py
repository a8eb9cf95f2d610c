"""A worker reuses one connection per host, but never one made with other limits than the host now has."""

from __future__ import annotations

from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from workers import tasks

MODEL = ModelEndpoint(base_url="http://127.0.0.1:8080/v1", id="m", context=65536, max_output=1024)


def test_a_host_whose_limits_changed_gets_a_connection_with_the_new_ones() -> None:
    host = Host(name="reuse-here", transport="local", model=MODEL, agents={"a": AgentConfig(command=["true"])})
    try:
        first = tasks._transport(host)
        assert tasks._transport(host) is first
        for change in ({"keepalive_count": 7}, {"keepalive_interval": 1.5}, {"stall_timeout": 9.0},
                       {"connect_timeout": 2.0}):
            changed = host.model_copy(update=change)
            t = tasks._transport(changed)
            assert t is not first, change
            assert t.host == changed
    finally:
        for key in [k for k in tasks._transports if k[0] == host.name]:
            del tasks._transports[key]
