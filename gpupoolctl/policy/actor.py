"""Who is acting, as the pool admins check needs it: the acting user's Unix groups, and
whether the pool policy's `admins:` makes that user a pool admin. Stdlib only.

    admin = is_pool_admin(policy.admins, current_user())   # root always is
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable
from typing import Any

from gpupoolctl.policy.model import Admins

Groups = Callable[[str], frozenset[str]]
"""groups(user): the names of the Unix groups `user` is in."""


def unix_groups(
    user: str,
    *,
    getpwnam: Callable[[str], Any] = pwd.getpwnam,
    getgrouplist: Callable[[str, int], list[int]] = os.getgrouplist,
    getgrgid: Callable[[int], Any] = grp.getgrgid,
) -> frozenset[str]:
    """The names of the groups `user` is in (the primary group and the supplementary ones);
    empty when the user has no passwd entry (a bare uid in a container). A group id without
    a name is left out: a policy names groups by name."""
    try:
        entry = getpwnam(user)
    except KeyError:
        return frozenset()
    try:
        gids = list(getgrouplist(user, entry.pw_gid))
    except OSError:
        gids = [entry.pw_gid]
    names = set()
    for gid in gids:
        try:
            names.add(str(getgrgid(gid).gr_name))
        except KeyError:
            continue
    return frozenset(names)


def is_pool_admin(admins: Admins, user: str, groups: Groups = unix_groups) -> bool:
    """Whether `user` is a pool admin by `admins` (root always is). The groups are looked up
    only when the answer depends on them."""
    if admins.includes(user, frozenset()):
        return True
    return bool(admins.groups) and admins.includes(user, groups(user))
