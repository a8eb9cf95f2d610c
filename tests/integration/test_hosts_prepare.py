"""`fleet hosts prepare`: the coordinator's own code lands in a venv on the host, once per release."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.conftest import write_inventory
from tests.integration.fleetkit import run_fleet

pytestmark = pytest.mark.integration


def test_prepare_installs_the_release_once_and_reuses_it(tmp_path, ssh_hosts, client_key, namespace):
    from workers.install import source_release

    host = ssh_hosts["bravo"]
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0])])
    first = run_fleet(["hosts", "prepare", "--inventory", str(inv)], namespace)
    assert first.returncode == 0, first.stdout + first.stderr
    release = source_release().id
    assert f"release {release}" in first.stdout
    root = host.workdir / "harness" / release
    ready = root / ".ready"
    assert ready.is_file()
    # The host's venv runs the guard from the shipped source, not from this checkout.
    probe = subprocess.run(
        [str(root / "venv" / "bin" / "python"), "-c",
         "import harness.guard, harness, sys; print(harness.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
    )
    assert probe.returncode == 0, probe.stderr
    assert str(root / "venv") in probe.stdout
    stamp = ready.stat().st_mtime_ns
    again = run_fleet(["hosts", "prepare", "--inventory", str(inv)], namespace)
    assert again.returncode == 0, again.stderr
    assert ready.stat().st_mtime_ns == stamp  # reused, not reinstalled


def test_two_attempts_installing_at_once_share_one_install(tmp_path):
    """Two attempts on a fresh host both need the release: one installs, the other waits and then uses that
    install; it must never remove and redo a venv the first one is already running from."""
    import threading

    from harness.core.inventory import Host
    from workers.install import ensure_harness, source_release
    from workers.transport.local import LocalTransport

    host = Host.model_validate({"name": "fresh", "transport": "local", "workdir": str(tmp_path / "host"),
                                "model": {"base_url": "http://127.0.0.1:9/v1", "id": "m", "context": 1, "max_output": 1},
                                "agents": {"builtin": {"kind": "builtin"}}})
    seen: dict[int, tuple[str, int]] = {}

    def attempt(n: int) -> None:
        python = ensure_harness(LocalTransport(host), host)
        seen[n] = (python, (tmp_path / "host" / "harness" / source_release().id / ".ready").stat().st_ino)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    assert set(seen) == {1, 2}
    ready = tmp_path / "host" / "harness" / source_release().id / ".ready"
    # One install: both saw the same .ready, which is still the one there now, and the venv still runs.
    assert seen[1][1] == seen[2][1] == ready.stat().st_ino
    probe = subprocess.run([seen[1][0], "-c", "import harness.guard"], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
