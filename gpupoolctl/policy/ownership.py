"""Who may end a piece of work (release an allocation, cancel or stop a job): its owner, or
a pool admin. Pure: the caller says who acts and whether that user is a pool admin
(policy.actor.is_pool_admin), and checks inside the ledger transaction that records the
act, so the owner it checks against is the one the act ends.

    message = refusal("cancel", "job", "j-42", job["owner"], user="bob", admin=False)
    if message:
        raise NotOwner(message)
    record["as_admin"] = as_admin(job["owner"], user="bob", admin=True)   # only when True
"""

from __future__ import annotations

from collections.abc import Iterable

from gpupoolctl.errors import GpupoolError

ADMINS_WHERE = "pool admins: the admins: section of the pool policy file"
SHOWN = 3  # a refusal over many jobs names this many of them


class NotOwner(GpupoolError):
    """Someone who neither owns the work nor is a pool admin asked to end it (exit 1)."""


def permitted(owner: str | None, *, user: str, admin: bool) -> bool:
    """Whether `user` may end work owned by `owner` (None: no owner recorded, so only a
    pool admin may)."""
    return admin or (owner is not None and owner == user)


def as_admin(owner: str | None, *, user: str, admin: bool) -> bool:
    """Whether ending work owned by `owner` is allowed only because `user` is a pool admin:
    what the record of the act says (`"as_admin": true`)."""
    return admin and owner != user


def refusal(
    action: str, kind: str, ident: str, owner: str | None, *, user: str, admin: bool
) -> str | None:
    """None when `user` may `action` the `kind` `ident` owned by `owner`; otherwise why not,
    in one line: "cancel j-42: it is alice's job; only alice or a pool admin may cancel it
    (pool admins: ...)"."""
    if permitted(owner, user=user, admin=admin):
        return None
    if owner is None:
        return (
            f"{action} {ident}: the {kind} has no recorded owner; only a pool admin may "
            f"{action} it ({ADMINS_WHERE})"
        )
    return (
        f"{action} {ident}: it is {owner}'s {kind}; only {owner} or a pool admin may "
        f"{action} it ({ADMINS_WHERE})"
    )


def refusal_of_many(
    action: str,
    verb: str,
    kind: str,
    works: Iterable[tuple[str, str | None]],
    *,
    user: str,
    admin: bool,
    shown: int = SHOWN,
) -> str | None:
    """None when `user` may `verb` every (ident, owner) of `works`; otherwise one line that
    names the first `shown` of those owned by others: "drain --now n1: it would stop other
    users' jobs: j-3 (alice's), j-7 (carol's) and 2 more; only their owners or a pool admin
    may stop them (pool admins: ...)"."""
    others = [(i, o) for i, o in works if not permitted(o, user=user, admin=admin)]
    if not others:
        return None
    named = ", ".join(f"{i} ({o}'s)" if o else f"{i} (no owner)" for i, o in others[:shown])
    if len(others) > shown:
        named += f" and {len(others) - shown} more"
    return (
        f"{action}: it would {verb} other users' {kind}s: {named}; only their owners or a "
        f"pool admin may {verb} them ({ADMINS_WHERE})"
    )
