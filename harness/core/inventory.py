"""The fleet's inventory: TOML files that describe hosts, their model endpoints and their agents.

One file holds one fleet. Format (documented field by field in docs/inventory.md)::

    schema_version = 1
    [defaults]                 # optional: values every host starts from
    user = "qual"
    [hosts.tower1]
    address = "tower1.lan"
    host_key = "ssh-ed25519 AAAA..."      # or "SHA256:..." fingerprint
    os = "linux"
    model = { base_url = "http://127.0.0.1:8080/v1", id = "Qwen3-Coder-Next", context = 131072, max_output = 8192 }
    [hosts.tower1.agents.command]
    command = ["sh", "-c", "my-agent --prompt-file \\"$1\\"", "sh", "{prompt_file}"]

A bad file raises ``InventoryError(file, key path, problem)``.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.core.agents import agent_kind
from harness.core.errors import InventoryError, UsageError
from harness.core.tomlfile import FieldProblem, read_toml, validate
from harness.core.transports import transport_kind

__all__ = ["AgentConfig", "Host", "Inventory", "ModelEndpoint", "load_inventory", "BUNDLED_INVENTORY_DIR"]

INVENTORY_SCHEMA_VERSION: Final = 1
BUNDLED_INVENTORY_DIR = Path(__file__).resolve().parents[2] / "inventory"

_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}=?$")
_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")


_KEY_FIELDS = {"ssh-ed25519": 2, "ssh-rsa": 3, "ecdsa-sha2-nistp256": 3, "ecdsa-sha2-nistp384": 3,
               "ecdsa-sha2-nistp521": 3}
"""Length-prefixed fields of each key type's public blob (RFC 4253 6.6, RFC 5656 3.1, RFC 8709 4), the name first."""


def _key_blob_problem(kind: str, text: str) -> str:
    """Why ``text`` is not the base64 public key blob of a ``kind`` key, or "" when it is one. Checked here, when
    the inventory is read, so that a pin pasted wrong (cut, another key's type, not base64) is one line naming
    the key, not a failure inside the SSH library when a worker first connects."""
    try:
        blob = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return "not valid base64"
    fields: list[bytes] = []
    at = 0
    while at < len(blob):
        if at + 4 > len(blob):
            return "the key data is cut short"
        size = int.from_bytes(blob[at:at + 4], "big")
        if at + 4 + size > len(blob):
            return "the key data is cut short"
        fields.append(blob[at + 4:at + 4 + size])
        at += 4 + size
    if not fields:
        return "no key data"
    if fields[0] != kind.encode():
        named = fields[0].decode("ascii", "replace") if fields[0].isascii() and fields[0] else "something else"
        return f"the key data is a {named!r} key, not {kind!r}"
    if len(fields) != _KEY_FIELDS[kind]:
        return "the key data is cut short" if len(fields) < _KEY_FIELDS[kind] else "the key data has extra fields"
    if kind == "ssh-ed25519" and len(fields[1]) != 32:
        return f"an ed25519 key is 32 bytes, this one is {len(fields[1])}"
    return ""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelEndpoint(_Strict):
    """The host's local model, reached through an OpenAI-compatible API."""

    base_url: str = Field(description="Base URL of the OpenAI-compatible API as seen from the host, ending in /v1.")
    id: str = Field(description="Model id the endpoint serves, e.g. Qwen3-Coder-Next.")
    context: int = Field(gt=0, description="Context size in tokens.")
    max_output: int = Field(gt=0, description="Per-reply output limit in tokens.")
    server: str = Field(default="", description="What serves it (llama.cpp, vllm, ollama, lemonade): for people.")
    api_key_env: str = Field(
        default="", pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$",
        description="Name of a host environment variable holding the API key; the key itself is never stored. "
                    "Every agent on the host gets that variable from the host's environment.")
    scripted: bool = Field(
        default=False,
        description="The coordinator serves this endpoint itself with the items' demo scripts (model.toml); local hosts only.",
    )

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        # A port out of range or a broken [IPv6] host was a ValueError traceback when the scripted model was
        # served, or each time an agent or `hosts check` read the URL.
        try:
            parts = urlsplit(v)
            parts.port
        except ValueError as exc:
            raise ValueError(f"cannot be read: {exc}") from None
        if not parts.hostname:
            raise ValueError("has no host")
        if parts.port == 0:
            raise ValueError("port 0 is no port to reach (1 to 65535)")
        return v.rstrip("/")


class AgentConfig(_Strict):
    """One agent installed on a host. ``kind`` picks the adapter; the name is the inventory key."""

    kind: str = Field(default="command", description="Which adapter drives it: a kind of harness.core.agents.AGENT_KINDS.")
    command: list[str] = Field(
        default_factory=list,
        description="For kind=command: argv run in the workspace; {prompt_file} becomes the prompt file's path.",
    )
    program: str = Field(
        default="",
        description="openclaw/opencode/hermes: the agent's executable, a path or a name on the host's PATH "
        "(default: the kind's usual name).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for this agent only: values "
                                "that travel with each task, so never a secret (docs/environment.md).")
    pass_env: list[Annotated[str, Field(pattern=_ENV_NAME)]] = Field(
        default_factory=list,
        description="Names of the host's own environment variables this agent also gets, read on the host when "
                    "it starts: the way to hand it a secret, whose value then never leaves the host.")
    version_command: list[str] = Field(default_factory=list, description="argv printing the agent's version.")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        agent_kind(v)  # UnknownAgentKind is a ValueError: "unknown kind 'z' (known: ...)"
        return v

    @model_validator(mode="after")
    def _command_needs_argv(self) -> "AgentConfig":
        if self.kind == "command" and not self.command:
            raise FieldProblem("command", "an agent of kind 'command' needs a non-empty list")
        return self


class Host(_Strict):
    """One machine of the fleet."""

    name: str = Field(description="Short host name; the inventory key.")
    transport: str = Field(
        default="ssh", description="How a worker reaches it: a transport of harness.core.transports.TRANSPORT_KINDS."
    )
    address: str = Field(default="", description="DNS name or IP the worker connects to.")
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(default="", description="SSH user.")
    identity_file: str = Field(default="", description="Private key path on the worker's machine (~ expanded).")
    host_key: str = Field(
        default="",
        description="The pinned host key: a known_hosts line, 'TYPE BASE64', or a 'SHA256:...' fingerprint.",
    )
    os: Literal["linux", "macos", "wsl"] = "linux"
    tags: list[str] = Field(default_factory=list)
    workdir: str = Field(default="~/fleet", description="Root on the host under which workspaces are made.")
    python: str = Field(default="python3", description="Python 3 on the host (runs the launcher).")
    slots: int = Field(default=1, ge=1, le=64, description="Runs at once on this host (one model, one GPU: 1).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment for every run on this host.")
    model: ModelEndpoint
    agents: dict[Annotated[str, Field(pattern=_NAME)], AgentConfig] = Field(min_length=1)
    connect_timeout: float = Field(
        default=10.0, gt=0,
        description="Seconds for the whole SSH handshake: TCP connect, banner, key exchange and authentication.")
    keepalive_interval: float = Field(
        default=5.0, gt=0,
        description="Seconds between SSH keepalives on an open connection (each asks the host for a reply).")
    keepalive_count: int = Field(
        default=3, ge=1, le=100,
        description="Keepalive intervals without a reply after which the connection is lost (host_lost).")
    stall_timeout: float = Field(
        default=60.0, gt=0,
        description="Seconds an SFTP upload or download may move no data before the host counts as lost.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.match(_NAME, v):
            raise ValueError("host names are lower-case letters, digits, '-' and '_'")
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str) -> str:
        # A relative folder means a different place to each process that uses it (an SSH session starts in the
        # user's home, a local worker in its own cwd, `fleet hosts clean` in /): attempts and cleaning disagreed.
        if not (v.startswith("/") or v == "~" or v.startswith("~/")):
            raise ValueError(f"{v!r}: an absolute path or one under ~ (e.g. ~/fleet); a relative one means a "
                             "different folder to each process")
        if "\n" in v or "\x00" in v:
            raise ValueError("a folder name without newlines or NUL")
        return v

    @field_validator("host_key")
    @classmethod
    def _host_key(cls, v: str) -> str:
        v = v.strip()
        if not v or _FINGERPRINT.match(v):
            return v
        parts = v.split()
        # A known_hosts line has the host pattern first; keep only "TYPE BASE64".
        if len(parts) >= 3 and parts[1] in _KEY_TYPES:
            parts = parts[1:]
        if len(parts) < 2 or parts[0] not in _KEY_TYPES:
            raise ValueError("expected a known_hosts line, 'TYPE BASE64' or a 'SHA256:...' fingerprint")
        problem = _key_blob_problem(parts[0], parts[1])
        if problem:
            raise ValueError(f"{parts[0]} key: {problem}")
        return f"{parts[0]} {parts[1]}"

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, v: str) -> str:
        transport_kind(v)  # UnknownTransport is a ValueError naming the known ones
        return v

    @model_validator(mode="after")
    def _scripted_is_local(self) -> "Host":
        if self.model.scripted and not transport_kind(self.transport).local:
            raise FieldProblem("model.scripted", "a scripted model is served by the coordinator: local hosts only")
        return self

    @model_validator(mode="after")
    def _transport_needs(self) -> "Host":
        for key in transport_kind(self.transport).needs:
            if not getattr(self, key):
                raise FieldProblem(key, f"required for a host with transport {self.transport!r}")
        return self

    @property
    def default_agent(self) -> str:
        return next(iter(self.agents))


class Inventory(_Strict):
    """A validated inventory file."""

    schema_version: Literal[1] = INVENTORY_SCHEMA_VERSION
    path: str = Field(default="", description="The file it was read from, as the user named it (for messages).")
    absolute_path: str = Field(default="", description="The same file's absolute path, recorded with a sweep so "
                               "`resume` and `rerun` find it from any folder.")
    sha256: str = Field(default="", description="sha256 of the file's bytes, recorded with a sweep: a later "
                        "`resume` says when the inventory changed since.")
    hosts: dict[str, Host]

    def select(self, names: list[str] | None) -> list[Host]:
        """The hosts named (in the order given), or all of them; an unknown name is a UsageError."""
        if not names:
            return list(self.hosts.values())
        unknown = [n for n in names if n not in self.hosts]
        if unknown:
            raise UsageError(f"{self.path}: unknown host {', '.join(unknown)} (known: {', '.join(self.hosts)})")
        # Once each: `hosts check --hosts a,a` checked a twice and said "all 2 hosts ready".
        return [self.hosts[n] for n in dict.fromkeys(names)]


def _merge(defaults: dict[str, Any], host: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in host.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = INVENTORY_SCHEMA_VERSION
    defaults: dict[str, Any] = Field(default_factory=dict)
    hosts: dict[str, dict[str, Any]] = Field(min_length=1)


def load_inventory(path: str | Path | None = None) -> Inventory:
    """Read and validate an inventory file; with no path, the embedded default ``inventory/local.toml``."""
    file = Path(path) if path else BUNDLED_INVENTORY_DIR / "local.toml"
    name = str(file)
    raw = validate(_File, read_toml(file, InventoryError), name, InventoryError)
    if raw.schema_version != INVENTORY_SCHEMA_VERSION:
        raise InventoryError(name, "schema_version", f"unsupported version {raw.schema_version} (this harness reads 1)")
    hosts: dict[str, Host] = {}
    for host_name, table in raw.hosts.items():
        if not isinstance(table, dict):
            raise InventoryError(name, f"hosts.{host_name}", "must be a table")
        data = _merge(raw.defaults, table)
        data["name"] = host_name
        hosts[host_name] = validate(Host, data, name, InventoryError, prefix=f"hosts.{host_name}")
    try:
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
    except OSError as exc:  # read_toml read it a moment ago: a file that vanished since
        raise InventoryError(name, "", f"cannot read: {exc.strerror or exc}") from None
    return Inventory(path=name, absolute_path=str(file.resolve()), sha256=digest, hosts=hosts)
