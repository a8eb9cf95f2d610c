"""Session fixtures: one redis-server and four sshd test hosts per test session (xdist worker)."""

from __future__ import annotations

import shutil
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.integration.fleetkit import RedisServer, SSHHost, Worker, keygen

pytestmark = pytest.mark.integration


def _need(binary: str) -> None:
    if shutil.which(binary) is None and not Path(f"/usr/sbin/{binary}").exists():
        pytest.fail(f"{binary} is not installed: run the test command from the README (it installs it)")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory):
    _need("redis-server")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("client")
    key = folder / "id_ed25519"
    pub = keygen(key)
    return key, pub


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory: pytest.TempPathFactory, client_key):
    """Four real sshd hosts on loopback: alpha, bravo, charlie, delta."""
    _need("sshd")
    root = tmp_path_factory.mktemp("hosts")
    hosts = {}
    for name in ("alpha", "bravo", "charlie", "delta"):
        h = SSHHost(name, root / name, client_key[1])
        h.setup()
        h.start()
        hosts[name] = h
    yield hosts
    for h in hosts.values():
        h.stop()


@pytest.fixture
def namespace() -> str:
    """Queues and slot leases of one test, apart from every other test on the same Redis."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def workers(tmp_path: Path, redis_server, namespace):
    """Start `fleet worker` processes; all are stopped when the test ends."""
    started: list[Worker] = []

    def start(hosts: list[str], inventory: Path, concurrency: int | None = None, **env: str) -> Worker:
        w = Worker(tmp_path, redis_server.url, namespace, hosts, inventory, concurrency, env or None)
        started.append(w)
        w.wait_ready()
        return w

    yield start
    for w in started:
        w.stop()


def write_inventory(path: Path, blocks: list[str]) -> Path:
    path.write_text("schema_version = 1\n\n" + "\n".join(blocks))
    return path


def write_prompts(root: Path, prompts: dict[str, str], timeout_s: int = 120) -> Path:
    """Open prompts NN-slug -> text, written byte for byte."""
    for folder, text in prompts.items():
        d = root / "open" / folder
        d.mkdir(parents=True)
        (d / "item.toml").write_text(textwrap.dedent(f"""\
            schema_version = 1
            title = "{folder}"
            timeout_s = {timeout_s}
            """))
        (d / "prompt.md").write_bytes(text.encode())
    return root
