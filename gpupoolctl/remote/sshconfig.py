"""OpenSSH client config for the ssh transport: parsed once per run, shared by connections.

Fabric resolves HostName, Port, User, IdentityFile, ConnectTimeout and ProxyJump (into a chain
of gateway Connections) from it. Only imported by the ssh transport (it imports fabric).
"""

from __future__ import annotations

from pathlib import Path

import fabric
import paramiko

from gpupoolctl.errors import SourceError, UsageError


def load_fabric_config(ssh_config: str | Path | None = None) -> fabric.Config:
    """A fabric Config for the run. With a path, that file alone is read (like `ssh -F`);
    without, fabric's default: ~/.ssh/config, then /etc/ssh/ssh_config."""
    if ssh_config is None:
        for default in DEFAULT_FILES:  # fabric reads them later: a broken one fails here
            path = Path(default).expanduser()
            if path.is_file():
                _parse(path)
        return fabric.Config()
    path = Path(ssh_config).expanduser()
    try:
        parsed = _parse(path)
    except OSError as exc:
        raise UsageError(f"cannot read ssh config {path}: {exc.strerror or exc}") from None
    return fabric.Config(ssh_config=parsed)


DEFAULT_FILES = ("~/.ssh/config", "/etc/ssh/ssh_config")


def _parse(path: Path) -> paramiko.SSHConfig:
    """The file parsed by paramiko; a line it cannot read is one SourceError naming it."""
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise SourceError(str(path), None, f"ssh config: {exc}") from None
    except UnicodeDecodeError as exc:
        raise SourceError(str(path), None, f"ssh config is not UTF-8 text ({exc.reason})") from None
