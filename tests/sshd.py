"""Real OpenSSH sshd servers on loopback addresses, one per simulated node.

A plain module (not a pytest plugin) so that fixtures and benchmarks can share it:

    from tests.sshd import start_fleet
    with start_fleet(32, workdir) as fleet:
        for host in fleet.hosts:
            host.address, host.port          # 127.0.0.2.., a free port each
        fleet.client_key, fleet.known_hosts, fleet.ssh_config
        before = fleet.hosts[0].mark()
        ...                                  # do something over SSH
        fleet.hosts[0].sessions_since(before)  # exec/shell sessions sshd started

Each host is its own `sshd -D -e -f /dev/null` (absolute path, system config ignored) on its
own 127.0.0.x address with its own ed25519 host key and log file (LogLevel VERBOSE), so
connections and sessions can be counted per host. Works as root (PermitRootLogin yes,
StrictModes no, UsePAM no): CI runs as root.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupoolctl.remote import Target, Timeouts

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
READY_TIMEOUT = 10.0
PRIVSEP_DIR = "/run/sshd"
MAX_HOSTS = 253  # 127.0.0.2 .. 127.0.0.254

# What sshd logs once per successful login and once per exec/shell session (VERBOSE).
ACCEPTED_MARK = "Accepted publickey for "
SESSION_MARK = "Starting session: "


# For tests that build SSH targets themselves: short, so a broken server fails fast.
TEST_TIMEOUTS = Timeouts(connect=5, auth=10, command=30)
TargetFactory = Callable[..., Target]


def sshd_missing_reason() -> str | None:
    """Why a real sshd cannot be used here, or None when it can."""
    if not os.path.exists(SSHD):
        return f"{SSHD} not found (install openssh-server)"
    if not os.path.exists(SSH_KEYGEN):
        return "ssh-keygen not found (install openssh-client)"
    return None


def keygen(path: Path, comment: str = "") -> str:
    """Write an unencrypted ed25519 key pair; return the public key line."""
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )
    path.chmod(0o600)
    return path.with_name(path.name + ".pub").read_text().strip()


def free_port(address: str) -> int:
    """A port free on `address` right now (sshd has no Port=0; a retry covers the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


@dataclass
class SshdHost:
    name: str  # the alias in the fleet's ssh_config
    address: str
    port: int
    host_key: Path
    host_public_key: str  # "ssh-ed25519 AAAA... comment"
    log_path: Path
    cache_dir: Path  # XDG_CACHE_HOME of sessions on this host (the agent's zip cache)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def known_hosts_name(self) -> str:
        return f"[{self.address}]:{self.port}"

    def known_hosts_line(self) -> str:
        key_type, key_data = self.host_public_key.split()[:2]
        return f"{self.known_hosts_name} {key_type} {key_data}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def mark(self) -> int:
        """Current log size: pass to *_since() to count only what happens afterwards."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _since(self, mark: int) -> str:
        with open(self.log_path, "rb") as handle:
            handle.seek(mark)
            return handle.read().decode(errors="replace")

    def sessions_since(self, mark: int = 0) -> int:
        """Exec/shell sessions sshd started on this host since `mark`."""
        return self._since(mark).count(SESSION_MARK)

    def connections_since(self, mark: int = 0) -> int:
        """Successful logins (SSH connections) on this host since `mark`."""
        return self._since(mark).count(ACCEPTED_MARK)

    def wait_for_log(self, text: str, mark: int = 0, timeout: float = 5.0) -> bool:
        """sshd children log after the client may have returned: wait a little for a line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self._since(mark):
                return True
            time.sleep(0.02)
        return False


@dataclass
class SshdFleet:
    root: Path
    hosts: list[SshdHost]
    user: str
    client_key: Path
    client_public_key: str
    authorized_keys: Path
    known_hosts: Path
    ssh_config: Path
    options: dict[str, str] = field(default_factory=dict)  # extra sshd options of every host

    def __enter__(self) -> SshdFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def host(self, name: str) -> SshdHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def host_vars(self, host: SshdHost, **extra: Any) -> dict[str, Any]:
        """Inventory variables (Ansible names) that reach `host` directly, no ssh_config."""
        return {
            "ansible_host": host.address,
            "ansible_port": host.port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.client_key),
            **extra,
        }

    def stop(self) -> None:
        for host in self.hosts:
            _stop(host)

    def stop_host(self, name: str) -> None:
        """Stop one host's sshd: new connections are refused (a node that went away);
        sessions' detached children (jobs) go on."""
        _stop(self.host(name))

    def start_host(self, name: str) -> None:
        """Start a stopped host's sshd again, on the same address, port and host key."""
        host = self.host(name)
        if host.process is not None and host.process.poll() is None:
            return
        mark = host.mark()
        _launch(host, _sshd_argv(host, self.authorized_keys, self.options))
        needle = f"Server listening on {host.address} port {host.port}"
        deadline = time.monotonic() + READY_TIMEOUT
        while needle not in host._since(mark):
            if (
                host.process is None
                or host.process.poll() is not None
                or (time.monotonic() > deadline)
            ):
                raise RuntimeError(f"sshd for {host.name} did not start again:\n{host.log_text()}")
            time.sleep(0.01)


def _stop(host: SshdHost) -> None:
    process = host.process
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _sshd_argv(host: SshdHost, authorized_keys: Path, extra_options: dict[str, str]) -> list[str]:
    options = {
        "ListenAddress": f"{host.address}:{host.port}",
        "HostKey": str(host.host_key),
        "PidFile": "none",
        "AuthorizedKeysFile": str(authorized_keys),
        "PubkeyAuthentication": "yes",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "PermitRootLogin": "yes",
        "StrictModes": "no",  # tmp folders are not root-only
        "UsePAM": "no",
        "UseDNS": "no",
        "LogLevel": "VERBOSE",  # logs "Starting session" per exec: sessions are countable
        "MaxStartups": "200",  # a benchmark's burst must not hit random early drops
        "SetEnv": f"XDG_CACHE_HOME={host.cache_dir}",  # keep root's real cache untouched
        **extra_options,
    }
    argv = [SSHD, "-D", "-e", "-f", "/dev/null"]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    return argv


def _launch(host: SshdHost, argv: list[str]) -> None:
    log = open(host.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        host.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    finally:
        log.close()


def _wait_ready(host: SshdHost, deadline: float) -> bool:
    """True once sshd listens; False if it died (e.g. the port was taken meanwhile)."""
    needle = f"Server listening on {host.address} port {host.port}"
    while time.monotonic() < deadline:
        assert host.process is not None
        if host.process.poll() is not None:
            return False
        if needle in host.log_text():
            return True
        time.sleep(0.01)
    raise RuntimeError(f"sshd for {host.name} not ready in {READY_TIMEOUT}s:\n{host.log_text()}")


def start_fleet(
    count: int,
    root: str | os.PathLike[str],
    *,
    first_address: int = 2,
    name_prefix: str = "node",
    extra_options: dict[str, str] | None = None,
) -> SshdFleet:
    """Start `count` sshd hosts on 127.0.0.<first_address>..., files under `root`.

    Returns once every sshd listens. Writes: client key + authorized_keys, known_hosts with
    "[127.0.0.x]:PORT" entries for every host, and an ssh_config with one `Host <name>`
    alias each (HostName, Port, User, IdentityFile, UserKnownHostsFile)."""
    if not 1 <= count <= MAX_HOSTS - first_address + 2:
        raise ValueError(f"count must be within 1..{MAX_HOSTS - first_address + 2}")
    reason = sshd_missing_reason()
    if reason:
        raise RuntimeError(reason)
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and not os.path.isdir(PRIVSEP_DIR):
        # sshd refuses to start without it; the service's init script normally creates it.
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
    user = getpass.getuser()
    client_key = base / "client_ed25519"
    client_public = keygen(client_key, "gpupoolctl-test-client")
    authorized_keys = base / "authorized_keys"
    authorized_keys.write_text(client_public + "\n")
    hosts: list[SshdHost] = []
    for index in range(count):
        name = f"{name_prefix}{index + 1}"
        folder = base / name
        folder.mkdir(exist_ok=True)
        (folder / "cache").mkdir(mode=0o700, exist_ok=True)
        address = f"127.0.0.{first_address + index}"
        key = folder / "ssh_host_ed25519_key"
        public = keygen(key, name)
        hosts.append(
            SshdHost(
                name,
                address,
                free_port(address),
                key,
                public,
                folder / "sshd.log",
                folder / "cache",
            )
        )
    fleet = SshdFleet(
        base,
        hosts,
        user,
        client_key,
        client_public,
        authorized_keys,
        base / "known_hosts",
        base / "ssh_config",
        dict(extra_options or {}),
    )
    options = fleet.options
    try:
        pending = list(hosts)
        for _attempt in range(5):
            for host in pending:
                _launch(host, _sshd_argv(host, authorized_keys, options))
            deadline = time.monotonic() + READY_TIMEOUT
            failed = [host for host in pending if not _wait_ready(host, deadline)]
            for host in failed:  # lost the port race: pick another port and retry
                if "Address already in use" not in host.log_text():
                    raise RuntimeError(f"sshd for {host.name} exited:\n{host.log_text()}")
                host.port = free_port(host.address)
            pending = failed
            if not pending:
                break
        if pending:
            raise RuntimeError(f"could not bind sshd for {[h.name for h in pending]}")
    except BaseException:
        fleet.stop()
        raise
    fleet.known_hosts.write_text("".join(h.known_hosts_line() + "\n" for h in hosts))
    fleet.ssh_config.write_text(
        "".join(
            f"Host {h.name}\n"
            f"    HostName {h.address}\n"
            f"    Port {h.port}\n"
            f"    User {user}\n"
            f"    IdentityFile {client_key}\n"
            f"    UserKnownHostsFile {fleet.known_hosts}\n\n"
            for h in hosts
        )
    )
    return fleet


def openssh_run(
    fleet: SshdFleet, host: SshdHost, command: str, timeout: float = 10.0
) -> subprocess.CompletedProcess[str]:
    """Run `command` with the OpenSSH client through the fleet's ssh_config (for checks
    and for benchmarks that compare against plain ssh)."""
    return subprocess.run(
        ["ssh", "-F", str(fleet.ssh_config), "-o", "BatchMode=yes", host.name, command],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
