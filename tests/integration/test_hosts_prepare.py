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
