"""Where and how to reach one inventory host, resolved from its merged variables."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.nics import VAR as SIM_NICS_VAR
from gpupoolctl.hw.nics import NicSpecError, parse_nics
from gpupoolctl.hw.shown import shown
from gpupoolctl.hw.sites import VAR as SITE_LINKS_VAR
from gpupoolctl.hw.sites import SiteLink, SiteLinkError, parse_site_links

# Ansible's behavioural variables win over our short names when both are set, as the
# longer name is the more deliberate one.
_ALIASES: dict[str, tuple[str, ...]] = {
    "address": ("ansible_host", "host"),
    "port": ("ansible_port", "port"),
    "user": ("ansible_user", "user"),
    "identity_file": ("ansible_ssh_private_key_file", "identity_file"),
    "python": ("ansible_python_interpreter", "python"),
    "transport": ("ansible_connection", "transport"),
}

TRANSPORTS = ("ssh", "local")

# What OpenSSH (valid_hostname / valid_ruser, since 9.6) refuses in a host or user name: an
# ssh_config's ProxyCommand gets them through %h / %r, and fabric re-parses the host name as
# ssh_config text, so a newline there would add config lines (a ProxyCommand of its own).
_HOST_META = frozenset("'`\"$\\;&<>|(){}")
_USER_META = frozenset("'`\";&<>|(){}")


@dataclass(frozen=True)
class SimSpec:
    template: str
    state_dir: str | None = None
    # The node's NICs instead of its template's (inventory var sim_nics; hw/nics.py).
    nics: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True)
class Target:
    name: str  # the inventory alias: what patterns match and what output shows
    address: str | None  # None: let ~/.ssh/config resolve the alias (HostName)
    port: int | None
    user: str | None
    identity_file: str | None
    python: str
    transport: str
    sim: SimSpec | None
    # Set when the host's variables are unusable: that host fails with this reason and the
    # others carry on (one bad host never stops a run).
    invalid: str | None = None
    # Where a multi-node job's other nodes reach this one (gpupool_rendezvous_addr): the
    # cluster fabric often is not the network the workstation comes in on.
    rendezvous_addr: str | None = None
    # The host's `site` var (None: unset), and what links the pool's sites
    # (gpupool_site_links, set on `all`; gpupoolctl.hw.sites).
    site: str | None = None
    site_links: tuple[SiteLink, ...] = ()

    def peer_address(self) -> str:
        """The address other nodes should use for this host."""
        if self.rendezvous_addr:
            return self.rendezvous_addr
        if self.transport == "local":
            return "127.0.0.1"
        return self.address or self.name


def _first(variables: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if variables.get(key) is not None:
            return variables[key]
    return None


def target_from_vars(name: str, variables: dict[str, Any]) -> Target:
    """Build a Target from a host's merged inventory variables; bad variables make an
    `invalid` target rather than an error, so that only this host fails."""
    try:
        return _target(name, variables)
    except UsageError as exc:
        return Target(name, None, None, None, None, "python3", "ssh", None, invalid=str(exc))


def _target(name: str, variables: dict[str, Any]) -> Target:
    port = _first(variables, _ALIASES["port"])
    if port is not None:
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise UsageError(
                f"host {shown(name)}: port must be a number, got {shown(port)}"
            ) from None
        if not 0 < port < 65536:
            raise UsageError(f"host {shown(name)}: port {port} is out of range 1-65535")
    transport = str(_first(variables, _ALIASES["transport"]) or "ssh")
    if transport == "paramiko":  # Ansible's name for the same thing
        transport = "ssh"
    if transport not in TRANSPORTS:
        raise UsageError(
            f"host {shown(name)}: transport {shown(transport)} is not one of "
            f"{', '.join(TRANSPORTS)}"
        )
    sim_value = variables.get("sim")
    sim: SimSpec | None = None
    if isinstance(sim_value, str) and sim_value:
        sim = SimSpec(template=sim_value, state_dir=variables.get("sim_state_dir"))
    elif isinstance(sim_value, dict) and sim_value.get("template"):
        sim = SimSpec(template=str(sim_value["template"]), state_dir=sim_value.get("state_dir"))
    elif sim_value not in (None, False, ""):
        raise UsageError(f"host {shown(name)}: sim must be a template name, got {shown(sim_value)}")
    if sim is not None and variables.get(SIM_NICS_VAR) is not None:
        sim = replace(sim, nics=_sim_nics(name, variables[SIM_NICS_VAR]))
    address = _first(variables, _ALIASES["address"])
    identity = _first(variables, _ALIASES["identity_file"])
    user = _first(variables, _ALIASES["user"])
    if transport == "ssh":
        # With no address the alias itself is the host name ssh resolves.
        _check_host(name, str(address) if address is not None else name)
        if user is not None:
            _check_user(name, str(user))
    return Target(
        name=name,
        address=str(address) if address is not None else None,
        port=port,
        user=str(user) if user is not None else None,
        identity_file=str(identity) if identity is not None else None,
        python=str(_first(variables, _ALIASES["python"]) or "python3"),
        transport=transport,
        sim=sim,
        rendezvous_addr=_text(variables.get("gpupool_rendezvous_addr")),
        site=_text(variables.get("site")),
        site_links=_site_links(name, variables.get(SITE_LINKS_VAR)),
    )


def _sim_nics(name: str, value: Any) -> tuple[dict[str, Any], ...]:
    # load_inventory has checked it already; vars from elsewhere fail this host only.
    try:
        return tuple(parse_nics(value))
    except NicSpecError as exc:
        raise UsageError(f"host {shown(name)}: {exc}") from None


def _site_links(name: str, value: Any) -> tuple[SiteLink, ...]:
    # load_inventory has checked it already; vars from elsewhere fail this host only.
    try:
        return parse_site_links(value)
    except SiteLinkError as exc:
        raise UsageError(f"host {shown(name)}: {exc}") from None


def _check_host(name: str, host: str) -> None:
    if (
        not host
        or host.startswith("-")
        or any(c in _HOST_META or c.isspace() or not c.isprintable() for c in host)
    ):
        raise UsageError(
            f"host {shown(name)}: {shown(host)} is not a host name or address (no spaces, control "
            "characters, shell punctuation or leading '-')"
        )


def _check_user(name: str, user: str) -> None:
    if (
        not user
        or user.startswith("-")
        or user.endswith("\\")
        or any(c in _USER_META or not c.isprintable() for c in user)
        or any(c.isspace() and user[i + 1 : i + 2] == "-" for i, c in enumerate(user))
    ):
        raise UsageError(
            f"host {shown(name)}: user {shown(user)} is not a login name (no control characters, "
            "quotes or shell punctuation, no leading '-')"
        )


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
