"""Host key checking: known_hosts loaded once per run, unknown keys refused unless the run
accepts new ones (OpenSSH's StrictHostKeyChecking=accept-new), changed keys always refused.

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

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


class HostKeyUnknown(paramiko.SSHException):
    """The server's key is not in known_hosts and the run does not accept new keys."""


class HostKeyChanged(paramiko.SSHException):
    """The server's key differs from the one recorded: refused whatever the options."""


def fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def host_key_name(host: str, port: int) -> str:
    """How known_hosts names a host: bare on port 22, else "[host]:port" (as OpenSSH)."""
    return host if port == 22 else f"[{host}]:{port}"


class KnownHosts:
    """One parsed known_hosts shared by every connection of a run (parsing is slow with big
    files, and per-connection parsing multiplies it by the host count)."""

    def __init__(self, path: str | Path | None = None, accept_new: bool = False) -> None:
        self.path = Path(path or DEFAULT_KNOWN_HOSTS).expanduser()
        self.accept_new = accept_new
        self.keys = paramiko.HostKeys()
        # The system-wide file only joins the default setup, as with OpenSSH; an explicit
        # file (tests, CI) is the whole truth.
        sources = [Path(SYSTEM_KNOWN_HOSTS), self.path] if path is None else [self.path]
        for source in sources:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                self.keys.load(str(source))
        self._lock = threading.Lock()

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
                # Another run may have written it since we loaded the file.
                current = paramiko.HostKeys()
                current.load(str(self.path))
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
        if not self.store.accept_new:
            raise HostKeyUnknown(self.store.unknown_message(self.label, hostname, key))
        self.store.record(self.label, hostname, key)


def _split_name(name: str) -> tuple[str, int]:
    if name.startswith("[") and "]:" in name:
        host, _, port = name[1:].partition("]:")
        return host, int(port)
    return name, 22
