"""Inventory files: the bundled ones load, defaults merge, host keys normalise, and every bad file gives
one InventoryError naming the file, the key path and the problem."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from harness.core.errors import InventoryError, UsageError
from harness.core.inventory import BUNDLED_INVENTORY_DIR, load_inventory

# A real ed25519 public key (made with ssh-keygen for these tests) and its OpenSSH fingerprint,
# as `ssh-keygen -lf` prints it.
KEY_B64 = "AAAAC3NzaC1lZDI1NTE5AAAAINp+KAVIeeJtmTE2mHUtyrWs6pTWHU1PACBUX+WdKpp4"
FINGERPRINT = "SHA256:9h/Uvd7qlnwKQekoZ3tRMtVryl1yaFOqRvKOirUmpB4"

GOOD = f"""\
schema_version = 1

[hosts.box]
address = "box.lan"
user = "qual"
host_key = "ssh-ed25519 {KEY_B64}"
model = {{ base_url = "http://127.0.0.1:8080/v1", id = "m", context = 4096, max_output = 512 }}

[hosts.box.agents.echo]
command = ["echo", "{{prompt_file}}"]
"""


def write(tmp_path: Path, text: str, name: str = "fleet.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def edit(old: str, new: str) -> str:
    assert GOOD.count(old) == 1, old
    return GOOD.replace(old, new)


def test_fingerprint_constant_is_the_keys_fingerprint() -> None:
    digest = hashlib.sha256(base64.b64decode(KEY_B64)).digest()
    assert "SHA256:" + base64.b64encode(digest).decode().rstrip("=") == FINGERPRINT


# -- the bundled inventories -----------------------------------------------------------------------


def test_local_inventory_is_the_default() -> None:
    inv = load_inventory()
    assert inv.path == str(BUNDLED_INVENTORY_DIR / "local.toml")
    assert list(inv.hosts) == ["local"]
    host = inv.hosts["local"]
    assert host.transport == "local"
    assert host.host_key == "" and host.address == ""  # the local transport needs no SSH settings
    assert host.slots == 1
    assert host.model.base_url == "http://127.0.0.1:8765/v1"
    assert host.model.scripted  # the coordinator serves the items' demo scripts there
    assert host.default_agent == "builtin" and host.agents["builtin"].kind == "builtin"
    agent = host.agents["receipt-echo"]
    assert agent.kind == "command" and "{prompt_file}" in agent.command


def test_a_scripted_model_is_for_local_hosts_only(tmp_path: Path) -> None:
    f = tmp_path / "inv.toml"
    f.write_text(
        'schema_version = 1\n[hosts.box]\naddress = "b"\nuser = "u"\nhost_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"\n'
        'model = { base_url = "http://127.0.0.1:8765/v1", id = "m", context = 1, max_output = 1, scripted = true }\n'
        '[hosts.box.agents.builtin]\nkind = "builtin"\n'
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(f)
    assert str(err.value) == f"{f}: hosts.box.model.scripted: a scripted model is served by the coordinator: local hosts only"


def test_fleet_inventory_has_the_six_hosts() -> None:
    inv = load_inventory(BUNDLED_INVENTORY_DIR / "fleet.toml")
    assert list(inv.hosts) == ["tower1", "tower2", "tower3", "strixy", "mac-mini", "laptop"]
    for host in inv.hosts.values():
        assert host.transport == "ssh"
        # [defaults] merged into every host
        assert host.user == "qual"
        assert host.identity_file == "~/.ssh/fleet_ed25519"
        assert host.slots == 1
        assert list(host.agents) == ["builtin", "openclaw", "opencode", "hermes"]
        assert {a.kind for a in host.agents.values()} == {"builtin", "openclaw", "opencode", "hermes"}
        assert host.agents["openclaw"].env["PATH"].startswith("/opt/fleet-agents/node_modules/.bin:")
        assert host.host_key.startswith("SHA256:")
    assert inv.hosts["strixy"].port == 2222 and inv.hosts["strixy"].os == "wsl"
    assert inv.hosts["tower1"].port == 22
    assert inv.hosts["mac-mini"].os == "macos" and inv.hosts["mac-mini"].python == "/opt/homebrew/bin/python3"
    assert inv.hosts["laptop"].model.max_output == 4096
    assert inv.hosts["tower2"].model.id == "Qwen3-Coder-Next"


# -- defaults and normalisation ------------------------------------------------------------------


def test_defaults_merge_deeply_and_hosts_override(tmp_path: Path) -> None:
    text = f"""\
schema_version = 1
[defaults]
user = "qual"
slots = 2
tags = ["lab"]
model = {{ context = 8192, max_output = 1024, server = "llama.cpp" }}
[defaults.agents.builtin]
kind = "builtin"

[hosts.a]
address = "a.lan"
host_key = "ssh-ed25519 {KEY_B64}"
model = {{ base_url = "http://127.0.0.1:8080/v1/", id = "m-a" }}

[hosts.b]
address = "b.lan"
user = "other"
slots = 3
tags = ["gpu"]
host_key = "ssh-ed25519 {KEY_B64}"
model = {{ base_url = "https://b.lan/v1", id = "m-b", context = 65536 }}
[hosts.b.agents.echo]
command = ["echo", "hi"]
"""
    inv = load_inventory(write(tmp_path, text))
    a, b = inv.hosts["a"], inv.hosts["b"]
    assert (a.user, a.slots, a.tags) == ("qual", 2, ["lab"])
    assert (a.model.id, a.model.context, a.model.max_output, a.model.server) == ("m-a", 8192, 1024, "llama.cpp")
    assert a.model.base_url == "http://127.0.0.1:8080/v1"  # trailing slash dropped
    assert list(a.agents) == ["builtin"]
    # a host's value replaces the default; tables merge key by key; lists are replaced, not joined
    assert (b.user, b.slots, b.tags) == ("other", 3, ["gpu"])
    assert (b.model.context, b.model.max_output) == (65536, 1024)
    assert list(b.agents) == ["builtin", "echo"]
    assert b.default_agent == "builtin"


@pytest.mark.parametrize(
    "pin",
    [
        f"ssh-ed25519 {KEY_B64}",
        f"ssh-ed25519 {KEY_B64} qual@box",  # a .pub file's line, with its comment
        f"[127.0.0.1]:2222 ssh-ed25519 {KEY_B64}",  # `ssh-keyscan -p 2222 127.0.0.1` output
        f"box.lan,10.0.0.5 ssh-ed25519 {KEY_B64}",
        f"|1|c2FsdA==|aGFzaA== ssh-ed25519 {KEY_B64}",  # hashed known_hosts entry
        f"  ssh-ed25519   {KEY_B64}  ",
    ],
)
def test_host_key_forms_normalise_to_type_and_base64(tmp_path: Path, pin: str) -> None:
    inv = load_inventory(write(tmp_path, edit(f'host_key = "ssh-ed25519 {KEY_B64}"', f'host_key = "{pin}"')))
    assert inv.hosts["box"].host_key == f"ssh-ed25519 {KEY_B64}"


@pytest.mark.parametrize("pin", [FINGERPRINT, FINGERPRINT + "="])
def test_host_key_fingerprint_is_kept(tmp_path: Path, pin: str) -> None:
    inv = load_inventory(write(tmp_path, edit(f'host_key = "ssh-ed25519 {KEY_B64}"', f'host_key = "{pin}"')))
    assert inv.hosts["box"].host_key == pin


@pytest.mark.parametrize(
    "pin",
    ["ssh-dss AAAAB3NzaC1kc3M=", "SHA256:tooshort", "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", KEY_B64],
)
def test_bad_host_key_names_the_key(tmp_path: Path, pin: str) -> None:
    path = write(tmp_path, edit(f'host_key = "ssh-ed25519 {KEY_B64}"', f'host_key = "{pin}"'))
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert err.value.key == "hosts.box.host_key"
    assert str(err.value).startswith(f"{path}: hosts.box.host_key: ")


# -- bad files ---------------------------------------------------------------------------------------

BAD = {
    "unknown host key": (edit('user = "qual"', 'user = "qual"\ncolour = "red"'), "hosts.box.colour", "unknown key"),
    "unknown model key": (edit('id = "m",', 'id = "m", ctx = 3,'), "hosts.box.model.ctx", "unknown key"),
    "unknown top-level key": (GOOD + '\n[host]\nx = 1\n', "host", "unknown key"),
    "missing model": (edit("model = {", "# model = {"), "hosts.box.model", "required key is missing"),
    "bad os": (edit('user = "qual"', 'user = "qual"\nos = "windows"'), "hosts.box.os", "'linux', 'macos' or 'wsl'"),
    "slots 0": (edit('user = "qual"', 'user = "qual"\nslots = 0'), "hosts.box.slots", "greater than or equal to 1"),
    "bad base_url": (
        edit("http://127.0.0.1:8080/v1", "127.0.0.1:8080/v1"), "hosts.box.model.base_url", "http:// or https://"
    ),
    "base_url port out of range": (
        edit("http://127.0.0.1:8080/v1", "http://127.0.0.1:99999/v1"), "hosts.box.model.base_url",
        "cannot be read: Port out of range 0-65535",
    ),
    "base_url broken IPv6 host": (
        edit("http://127.0.0.1:8080/v1", "http://[::1/v1"), "hosts.box.model.base_url", "cannot be read: Invalid IPv6 URL"
    ),
    "base_url port 0": (edit("http://127.0.0.1:8080/v1", "http://127.0.0.1:0/v1"), "hosts.box.model.base_url", "port 0"),
    "base_url without a host": (edit("http://127.0.0.1:8080/v1", "http:///v1"), "hosts.box.model.base_url", "has no host"),
    "context 0": (edit("context = 4096", "context = 0"), "hosts.box.model.context", "greater than 0"),
    "keepalive_count 0": (
        edit('user = "qual"', 'user = "qual"\nkeepalive_count = 0'), "hosts.box.keepalive_count",
        "greater than or equal to 1",
    ),
    "keepalive_interval 0": (
        edit('user = "qual"', 'user = "qual"\nkeepalive_interval = 0'), "hosts.box.keepalive_interval", "greater than 0"
    ),
    "stall_timeout text": (
        edit('user = "qual"', 'user = "qual"\nstall_timeout = "soon"'), "hosts.box.stall_timeout", "number"
    ),
    "ssh host without host_key": (
        edit("host_key =", "# host_key ="), "hosts.box.host_key", "required for a host with transport 'ssh'"
    ),
    "ssh host without address": (
        edit("address =", "# address ="), "hosts.box.address", "required for a host with transport 'ssh'"
    ),
    "command agent with empty command": (
        edit('command = ["echo", "{prompt_file}"]', "command = []"), "hosts.box.agents.echo.command", "non-empty"
    ),
    "unknown agent kind": (
        edit('command = ["echo"', 'kind = "aider"\ncommand = ["echo"'), "hosts.box.agents.echo.kind",
        "unknown kind 'aider' (known: builtin, command, hermes, openclaw, opencode)",
    ),
    "unknown transport": (
        edit('user = "qual"', 'user = "qual"\ntransport = "telnet"'), "hosts.box.transport",
        "unknown transport 'telnet' (known: local, ssh)",
    ),
    "no agents": (
        edit('[hosts.box.agents.echo]\ncommand = ["echo", "{prompt_file}"]\n', ""),
        "hosts.box.agents",
        "required key is missing",
    ),
    "wrong schema_version": (
        edit("schema_version = 1", "schema_version = 2"), "schema_version", "unsupported version 2"
    ),
    "upper-case host name": (edit("[hosts.box]", "[hosts.Box]").replace("hosts.box.", "hosts.Box."), "hosts.Box.name", "lower-case"),
    "no hosts": ("schema_version = 1\n", "hosts", "required key is missing"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inventory_names_file_and_key(tmp_path: Path, case: str) -> None:
    text, key, problem = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    e = err.value
    assert (e.file, e.key) == (str(path), key)
    assert problem in e.problem
    assert str(e) == f"{path}: {key}: {e.problem}"
    assert "\n" not in str(e)
    assert "Value error" not in str(e)


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    text = edit("[hosts.box.agents.echo]", "[hosts.box.agents.echo")
    line = text.splitlines().index("[hosts.box.agents.echo") + 1
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert err.value.file == str(path) and err.value.key == ""
    assert str(err.value).startswith(f"{path}: not valid TOML: ")
    assert f"line {line}" in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert str(err.value) == f"{path}: file not found"
    assert err.value.exit_code == 2


def test_select_hosts(tmp_path: Path) -> None:
    text = GOOD + GOOD.split("schema_version = 1\n", 1)[1].replace("hosts.box", "hosts.other")
    inv = load_inventory(write(tmp_path, text))
    assert [h.name for h in inv.select(None)] == ["box", "other"]
    assert [h.name for h in inv.select([])] == ["box", "other"]
    assert [h.name for h in inv.select(["other", "box"])] == ["other", "box"]
    assert [h.name for h in inv.select(["other", "box", "other"])] == ["other", "box"]  # named twice: once
    with pytest.raises(UsageError) as err:
        inv.select(["box", "nope"])
    msg = str(err.value)
    assert "unknown host nope" in msg and inv.path in msg and "box, other" in msg
    assert err.value.exit_code == 2


@pytest.mark.parametrize("workdir", ["fleet-work", "./fleet", "~user/fleet", "..", "a\nb"])
def test_a_workdir_that_is_not_absolute_or_under_home_is_refused(tmp_path: Path, workdir: str) -> None:
    # Relative, it meant the SSH session's home to an attempt and / to `fleet hosts clean`.
    inv = tmp_path / "inv.toml"
    inv.write_text('schema_version = 1\n[hosts.box]\ntransport = "local"\nworkdir = ' + json.dumps(workdir) + "\n"
                   'model = { base_url = "http://127.0.0.1:9/v1", id = "m", context = 1, max_output = 1 }\n'
                   '[hosts.box.agents.echo]\ncommand = ["echo"]\n')
    with pytest.raises(InventoryError, match=r"hosts\.box\.workdir: "):
        load_inventory(str(inv))
