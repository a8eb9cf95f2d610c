"""Taking a delivery's files back from its host: one read of its bundle, checked before anything of it is believed.

The launcher packs what the agent left into one bundle (workers/host/launcher/): the delivery's own files (the
streams, streams.json, the workspace's manifest, outputs.json, launcher.log) and frames of the workspace's and the
outputs' files. The worker reads it once and takes it only if its size and sha256 are what the supervisor signed in
packed.json (or the pack verb said); each stream is checked against the signed exit record; a member name that would
leave its folder is refused, whoever made it. Apart from the lifecycle because this is where the host's bytes become
the attempt's artifacts, and every check on them lives in one place.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from harness.core.errors import ArtifactCorrupt
from harness.core.paths import relpath_problem
from workers.delivery.hostrecords import parse_json
from workers.host import launcher
from workers.transport.base import Transport

__all__ = ["BUNDLE_LIMIT", "Delivered", "safe_member"]

BUNDLE_LIMIT = 2 * launcher.MAX_STREAM + launcher.MAX_TOTAL + launcher.OUTPUT_CAPS[1] + 256 * 1024 * 1024
"""The most a delivery's bundle may unpack to: both streams, the workspace and the outputs at their caps, and room
for the manifests of a workspace of many files."""


def safe_member(name: str) -> bool:
    """Whether a bundle member's name stays inside the folder it is read into: a stored path
    (``harness.core.paths.relpath_problem``: relative, real names only, no ``..``; a backslash is an ordinary
    character). A bundle from the host is refused member by member otherwise, whoever made it (defence in depth)."""
    return not relpath_problem(name)


@dataclass
class Delivered:
    """A delivery's files as the worker takes them from its folder on the host, read once."""

    t: Transport
    folder: str
    """The delivery's folder on the host."""
    host: str
    """The host's name, for the errors."""
    bundle: dict | None
    """The delivery's bundle: its size and sha256 as the supervisor signed them in packed.json, or as the pack verb
    said; None when the pack wrote none (a full disk: the files are read one by one)."""
    exit_record: dict
    """The launcher's signed exit record (verified), once the agent ended: each stream's size and sha256."""
    files: dict[str, bytes] | None = None
    """The delivery folder's own files (streams, streams.json, manifest.json, outputs.json, launcher.log), once read."""
    workspace: list[tuple[str, bytes]] = field(default_factory=list)
    outputs: dict[str, bytes] = field(default_factory=dict)
    """The answer file and the adapter's session files and state folders, by their name in the attempt folder."""
    capped: dict[str, dict] = field(default_factory=dict)
    """Streams over the launcher's cap: the whole stream's size and sha256 and the bytes kept (harness/capped.json)."""
    refused: list[str] = field(default_factory=list)
    """Member names refused because they point outside the folder they were read into."""
    streams: dict | None = None
    """streams.json as the launcher's pack wrote it: each output stream's size, sha256 and kept bytes."""

    def take(self) -> dict[str, bytes]:
        """The delivery's files: its bundle, one read, taken only if its size and sha256 are what packed.json (signed) or
        the pack verb said; the workspace's and outputs' frames go to ``workspace`` and ``outputs``, a name that would
        leave its folder to ``refused``. With no bundle (the host's disk was full) the few files the pack wrote are read
        one by one, and nothing of the workspace was packed."""
        if self.files is not None:
            return self.files
        d = self.folder
        delivered: dict[str, bytes] = {}
        if self.bundle is None:
            for name in ("streams.json", "launcher.log", "outputs.json", "manifest.json"):
                data = self._get(f"{d}/{name}")
                if data is not None:
                    delivered[name] = data
            streams = parse_json(delivered.get("streams.json", b"{}"))
            for name in ("agent.stdout", "agent.stderr"):
                info = streams.get(name) if isinstance(streams, dict) else None
                # A stream over the cap keeps nothing here (no room for its head): it is not read at all.
                if not (isinstance(info, dict) and info.get("kept") == 0 and info.get("size")):
                    data = self._get(f"{d}/{name}")
                    if data is not None:
                        delivered[name] = data
            self.files = delivered
            return delivered
        data = self._get(f"{d}/{launcher.BUNDLE}") or b""
        if (len(data), hashlib.sha256(data).hexdigest()) != (self.bundle.get("size"), self.bundle.get("sha256")):
            raise ArtifactCorrupt("the delivery's bundle is not the one its launcher packed (its size or sha256 "
                                  "differs from what the launcher said)", host=self.host)
        try:
            frames = launcher.read_bundle(data, BUNDLE_LIMIT)
        except ValueError as exc:
            raise ArtifactCorrupt(f"the delivery's bundle cannot be read: {exc}", host=self.host) from exc
        for kind, name, body in frames:
            if kind == launcher.FILE:
                delivered[name] = body
            elif not safe_member(name):
                self.refused.append(name)
            elif kind == launcher.WORKSPACE:
                self.workspace.append((name, body))
            else:
                self.outputs[name] = body
        self.files = delivered
        return delivered

    def stream(self, name: str) -> bytes:
        """The agent's stdout or stderr: whole, checked against the signed exit record; or, over the launcher's cap
        (``streams.json``), only its first bytes, with the whole stream's size and sha256 kept in ``capped``
        (``harness/capped.json``): a runaway log must not go whole through the queue and this process."""
        delivered = self.take()
        if self.streams is None:
            loaded = parse_json(delivered.get("streams.json") or b"{}")
            self.streams = loaded if isinstance(loaded, dict) else {}
        info = self.streams.get(name)
        if isinstance(info, dict) and isinstance(info.get("size"), int) and isinstance(info.get("kept"), int) \
                and info["size"] > info["kept"]:
            signed = self.exit_record.get(name) if self.exit_record else None
            if isinstance(signed, dict) and (signed.get("size"), signed.get("sha256")) != (info["size"], info.get("sha256")):
                raise ArtifactCorrupt(f"{name} changed after the agent ended (it is not what the launcher signed)",
                                      host=self.host)
            self.capped[name] = info
            return delivered.get(name, b"")[:info["kept"]]
        data = delivered.get(name) or b""
        self._check_output(name, data)
        return data

    def _check_output(self, name: str, data: bytes) -> None:
        """The agent's output as it left the launcher: the signed exit record holds its size and sha256."""
        want = self.exit_record.get(name) if self.exit_record else None
        if isinstance(want, dict) and (want.get("size"), want.get("sha256")) != (len(data), hashlib.sha256(data).hexdigest()):
            raise ArtifactCorrupt(f"{name} changed after the agent ended (it is not what the launcher signed)",
                                  host=self.host)

    def _get(self, path: str) -> bytes | None:
        try:
            return self.t.get(path)
        except FileNotFoundError:
            return None
