"""Host key checking: known_hosts loaded once per run, unknown keys refused unless the run
accepts new ones (OpenSSH's StrictHostKeyChecking=accept-new), changed keys always refused.

known_hosts is read as OpenSSH reads it, not with paramiko's HostKeys.load, which raises on
the marker lines OpenSSH documents: keys marked `@revoked` are refused whatever the options,
`@cert-authority` lines are skipped (paramiko cannot check host certificates, so such hosts
count as unknown), and a line that does not parse is skipped as OpenSSH skips it.

Only imported by the ssh transport (it imports paramiko).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import threading
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


class HostKeyUnknown(paramiko.SSHException):
    """The server's key is not in known_hosts and the run does not accept new keys."""


class HostKeyChanged(paramiko.SSHException):
    """The server's key differs from the one recorded: refused whatever the options."""


class HostKeyRevoked(paramiko.SSHException):
    """The server's key is marked @revoked in known_hosts: refused whatever the options."""


def fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def host_key_name(host: str, port: int) -> str:
    """How known_hosts names a host: bare on port 22, else "[host]:port" (as OpenSSH)."""
    return host if port == 22 else f"[{host}]:{port}"


def _key_id(key: paramiko.PKey) -> tuple[str, str]:
    return key.get_name(), key.get_base64()


class _HostKeys(paramiko.HostKeys):
    def read(self, path: Path, revoked: dict[tuple[str, str], Path]) -> None:
        """Add the plain entries of an OpenSSH known_hosts file; note its @revoked keys."""
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, text in enumerate(handle, 1):
                line = text.strip()
                if not line or line.startswith("#"):
                    continue
                marker = None
                if line.startswith("@"):
                    marker, _, line = line.replace("\t", " ").partition(" ")
                    line = line.strip()
                try:
                    entry = HostKeyEntry.from_line(line, number)
                except (InvalidHostKey, paramiko.SSHException, ValueError):
                    continue
                if entry is None:
                    continue
                if marker == "@revoked":
                    revoked.setdefault(_key_id(entry.key), path)
                elif marker is None:
                    self._entries.append(entry)

    def drop(self, revoked: dict[tuple[str, str], Path]) -> None:
        """Forget revoked keys, so that paramiko never finds one known: it then asks the
        policy, which refuses it (or reports a changed key when the host has others)."""
        self._entries = [e for e in self._entries if _key_id(e.key) not in revoked]


class KnownHosts:
    """One parsed known_hosts shared by every connection of a run (parsing is slow with big
    files, and per-connection parsing multiplies it by the host count)."""

    def __init__(self, path: str | Path | None = None, accept_new: bool = False) -> None:
        self.path = Path(path or DEFAULT_KNOWN_HOSTS).expanduser()
        self.accept_new = accept_new
        self.keys = _HostKeys()
        self.revoked: dict[tuple[str, str], Path] = {}  # key -> the file that revokes it
        # The system-wide file only joins the default setup, as with OpenSSH; an explicit
        # file (tests, CI) is the whole truth.
        sources = [Path(SYSTEM_KNOWN_HOSTS), self.path] if path is None else [self.path]
        for source in sources:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                self.keys.read(source, self.revoked)
        self.keys.drop(self.revoked)
        self._lock = threading.Lock()

    def is_revoked(self, key: paramiko.PKey) -> bool:
        return _key_id(key) in self.revoked

    def attach(self, client: paramiko.SSHClient, label: str) -> None:
        """Make `client` check against this store, never AutoAdd (fabric's default)."""
        # paramiko has no public setter for an already parsed HostKeys; its connect() reads
        # _system_host_keys first, and this avoids re-parsing the file per connection.
        client._system_host_keys = self.keys  # type: ignore[attr-defined]
        client.set_missing_host_key_policy(_Policy(self, label))

    def unknown_message(self, label: str, name: str, key: paramiko.PKey) -> str:
        host, port = _split_name(name)
        scan = f"ssh-keyscan -p {port} {shlex.quote(host)} >> {shlex.quote(str(self.path))}"
        return (
            f"host key of {label} ({name}, {fingerprint(key)}) is not in {self.path}; "
            f"refused. Verify it, then re-run with --accept-new-host-keys or add it: {scan}"
        )

    def revoked_message(self, label: str, name: str, key: paramiko.PKey) -> str:
        source = self.revoked.get(_key_id(key), self.path)
        return (
            f"host key of {label} ({name}, {fingerprint(key)}) is marked @revoked in "
            f"{source}: refused, even with --accept-new-host-keys. The host must get a new "
            "key, or someone is presenting a key that was taken out of service."
        )

    def changed_message(
        self, label: str, name: str, offered: paramiko.PKey, expected: paramiko.PKey
    ) -> str:
        return (
            f"HOST KEY CHANGED for {label} ({name}): it offered {fingerprint(offered)} but "
            f"{self.path} has {fingerprint(expected)}. Someone may be intercepting the "
            "connection (man-in-the-middle), or the host was reinstalled. Refused, even with "
            "--accept-new-host-keys. If the change is expected, remove the old key: "
            f"ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(str(self.path))}"
        )

    def record(self, label: str, name: str, key: paramiko.PKey) -> None:
        """accept-new: remember the key in memory and append it to the file, under a thread
        lock and an flock so concurrent connections and runs never interleave lines."""
        with self._lock:
            known = self.keys.lookup(name)
            if known is not None:  # another connection of this run recorded it meanwhile
                self._check_same(label, name, key, known)
                return
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "r+b") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                # Another run may have written it (or revoked it) since we loaded the file.
                current = _HostKeys()
                revoked: dict[tuple[str, str], Path] = {}
                current.read(self.path, revoked)
                if _key_id(key) in revoked:
                    self.revoked.update(revoked)
                    raise HostKeyRevoked(self.revoked_message(label, name, key))
                current.drop(revoked)
                on_disk = current.lookup(name)
                if on_disk is not None:
                    self._check_same(label, name, key, on_disk)
                else:
                    handle.seek(0, os.SEEK_END)
                    if handle.tell() > 0:
                        handle.seek(-1, os.SEEK_END)
                        if handle.read(1) != b"\n":
                            handle.write(b"\n")
                    handle.write(f"{name} {key.get_name()} {key.get_base64()}\n".encode())
                    handle.flush()
                    os.fsync(handle.fileno())
            self.keys.add(name, key.get_name(), key)

    def _check_same(
        self, label: str, name: str, key: paramiko.PKey, known: dict[str, paramiko.PKey]
    ) -> None:
        expected = known.get(key.get_name())
        if expected != key:
            expected = expected or next(iter(known.values()))
            raise HostKeyChanged(self.changed_message(label, name, key, expected))


class _Policy(paramiko.MissingHostKeyPolicy):
    def __init__(self, store: KnownHosts, label: str) -> None:
        self.store = store
        self.label = label

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if self.store.is_revoked(key):
            raise HostKeyRevoked(self.store.revoked_message(self.label, hostname, key))
        if not self.store.accept_new:
            raise HostKeyUnknown(self.store.unknown_message(self.label, hostname, key))
        self.store.record(self.label, hostname, key)


def _split_name(name: str) -> tuple[str, int]:
    if name.startswith("[") and "]:" in name:
        host, _, port = name[1:].partition("]:")
        return host, int(port)
    return name, 22
