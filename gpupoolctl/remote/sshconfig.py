"""OpenSSH client config for the ssh transport: parsed once per run, shared by connections.

Fabric resolves HostName, Port, User, IdentityFile, ConnectTimeout and ProxyJump (into a chain
of gateway Connections) from it. Only imported by the ssh transport (it imports fabric).
"""

from __future__ import annotations

from pathlib import Path

import fabric
import paramiko

from gpupoolctl.errors import UsageError


def load_fabric_config(ssh_config: str | Path | None = None) -> fabric.Config:
    """A fabric Config for the run. With a path, that file alone is read (like `ssh -F`);
    without, fabric's default: ~/.ssh/config, then /etc/ssh/ssh_config."""
    if ssh_config is None:
        return fabric.Config()
    path = Path(ssh_config).expanduser()
    try:
        parsed = paramiko.SSHConfig.from_path(str(path))
    except OSError as exc:
        raise UsageError(f"cannot read ssh config {path}: {exc.strerror or exc}") from None
    return fabric.Config(ssh_config=parsed)
