"""The embedded default's scripted model takes a free port when the inventory's is busy (two sweeps on one
machine collided on 8765), or the port given with --model-port; the agent is pointed at the port served."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.integration.fleetkit import REPO, free_port, run_embedded

pytestmark = pytest.mark.integration


def _meta_url(runs: Path, sweep_id: str) -> str:
    (meta,) = (runs / sweep_id).glob("*/*/*/*/attempt-1/meta.json")
    return json.loads(meta.read_text())["model"]["base_url"]


def test_a_busy_model_port_is_replaced_by_a_free_one_and_model_port_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)  # another sweep's model server, as far as this sweep can tell
        port = busy.getsockname()[1]
        inv = tmp_path / "local.toml"
        inv.write_text((REPO / "inventory" / "local.toml").read_text().replace(":8765/", f":{port}/"))

        moved = run_embedded(["sweep", "-i", str(inv), "--items", "12", "--json"], tmp_path, home)
        assert moved.returncode == 0, moved.stderr[-3000:]
        result = json.loads(moved.stdout)
        assert [c["grade"] for c in result["cells"]] == ["DELIVERED"]
        notices = [line for line in moved.stderr.splitlines() if "is busy" in line]
        assert len(notices) == 1 and notices[0].startswith(f"fleet: host local: port {port} is busy"), moved.stderr
        served = int(notices[0].rsplit("on port ", 1)[1].split()[0])
        assert served != port
        assert _meta_url(tmp_path / "runs", result["sweep"]) == f"http://127.0.0.1:{served}/v1"

        chosen = free_port()
        forced = run_embedded(["sweep", "-i", str(inv), "--items", "12", "--json", "--model-port", str(chosen)],
                              tmp_path, home)
        assert forced.returncode == 0, forced.stderr[-3000:]
        result = json.loads(forced.stdout)
        assert [c["grade"] for c in result["cells"]] == ["DELIVERED"]
        assert "is busy" not in forced.stderr
        assert _meta_url(tmp_path / "runs", result["sweep"]) == f"http://127.0.0.1:{chosen}/v1"

        # A port given and busy is the caller's mistake: one line, nothing left as "the latest sweep".
        before = sorted(p.name for p in (tmp_path / "runs").iterdir())
        taken = run_embedded(["sweep", "-i", str(inv), "--items", "12", "--model-port", str(port)], tmp_path, home)
        assert taken.returncode == 2, taken.stderr
        assert taken.stderr.strip().splitlines() == [
            f"fleet: error: --model-port {port}: cannot serve the scripted model at 127.0.0.1:{port}: "
            "Address already in use"]
        assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before

    bad = run_embedded(["sweep", "--items", "12", "--model-port", "http"], tmp_path, home)
    assert bad.returncode == 2 and bad.stderr.strip() == "fleet: error: --model-port 'http': expected a TCP port, 1 to 65535"
