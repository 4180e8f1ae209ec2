"""Where the pool policy file is: --pool-policy FILE > $GPUPOOL_POLICY >
$XDG_CONFIG_HOME/gpupoolctl/pool.yaml (else ~/.config/gpupoolctl/pool.yaml) when it exists >
none (a static pool). Stdlib only: every job command asks, most have no file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.policy.model import WHAT, PoolPolicy

ENV = "GPUPOOL_POLICY"


def default_policy_path(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_CONFIG_HOME/gpupoolctl/pool.yaml, else ~/.config/gpupoolctl/pool.yaml."""
    config = environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative value is to be ignored: cron's cwd is not the user's.
    if not config or not os.path.isabs(config):
        home = environ.get("HOME") or str(Path.home())
        config = os.path.join(home, ".config")
    return Path(config) / "gpupoolctl" / "pool.yaml"


def policy_path(option: str | Path | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The policy file to read: option > $GPUPOOL_POLICY > the default path when it exists;
    None when there is none. A given value that is empty is a UsageError; one that names
    a missing file is a SourceError naming it (a policy asked for is never skipped)."""
    if option is not None:
        return _given(option, "--pool-policy / GPUPOOL_POLICY")
    if ENV in environ:
        return _given(environ[ENV], ENV)
    default = default_policy_path(environ)
    return default if default.exists() else None


def _given(value: str | Path, origin: str) -> Path:
    if isinstance(value, str):
        if not value.strip():
            raise UsageError(f"{origin} is empty: set it to the pool policy file, or unset it")
        value = Path(value)
    if not value.exists():
        raise SourceError(str(value), None, f"no such {WHAT} (given by {origin})")
    return value


def resolve_policy(
    option: str | Path | None, environ: Mapping[str, str] = os.environ
) -> PoolPolicy:
    """The policy in force: the file policy_path finds, or PoolPolicy() (static) without one."""
    path = policy_path(option, environ)
    if path is None:
        return PoolPolicy()
    # The reader (YAML, the catalogs, ~45 ms) only when there is a file to read; it is
    # handed in by the package (gpupoolctl.policy.resolve_policy), which sits above both.
    from gpupoolctl.policy import load_policy

    return load_policy(path)
