"""The pool policy file: what the scheduling loop may do.

    policy = resolve_policy(settings.pool_policy)   # PoolPolicy() without a file: static
    rule = policy.elastic.rule_for(host, vendor, model, in_hosts)   # None: not elastic
    parse_policy(text, "pool.yaml")   # SourceError "pool.yaml:12: ...; expected ..."

Sections: `elastic:` (which cards may be re-cut, into what, how often), `health:` (when a
silent node is lost, whether it returns to service by itself), `teams:` (members and quota
scopes: nominal, borrowing and lending limits), `windows:` (times of the week, in a time
zone, that replace teams' quotas and the elastic section; policy.quota_in_force and
policy.elastic_in_force say what holds at a time), `admins:` (pool admins). This package
sits below sched/ and jobs/ (they read it). The values (policy.model) are stdlib only; they
and the readers (policy.load) are imported on first use, so a scheduler that only holds a policy
does not load the YAML reader and the catalogs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupoolctl.policy.model import (
        ElasticPolicy,
        ElasticRule,
        HealthPolicy,
        InHosts,
        PoolPolicy,
    )

# Even the values load on first use: the ledger imports policy.ownership for every command,
# and the model's nine frozen dataclasses cost a read-only command ~13 ms it never needs.
_MODEL = ("ElasticPolicy", "ElasticRule", "HealthPolicy", "InHosts", "PoolPolicy")
_WHERE = ("default_policy_path", "policy_path", "resolve_policy")
_LOADERS = ("load_policy", "parse_policy", *_WHERE)

__all__ = [
    "ElasticPolicy",
    "ElasticRule",
    "HealthPolicy",
    "InHosts",
    "PoolPolicy",
    "default_policy_path",
    "load_policy",
    "parse_policy",
    "policy_path",
    "resolve_policy",
]


def __getattr__(name: str) -> Any:
    if name in _MODEL:
        from gpupoolctl.policy import model

        return getattr(model, name)
    if name in _WHERE:
        from gpupoolctl.policy import where

        return getattr(where, name)
    if name in _LOADERS:
        from gpupoolctl.policy import load

        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
