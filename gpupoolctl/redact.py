"""What counts as a secret, decided in one place: output hides such values, the ledger and
job environments refuse them (both end up in CI logs, `less` and `grep`)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

MASK = "***"

_SUBSTRINGS = (
    "password",
    "passphrase",
    "passwd",
    "secret",
    "token",
    "private_key",
    "privatekey",
    "api_key",
    "apikey",
    "credential",
    "session_key",  # ansible_httpapi_session_key
    "sshpass",  # SSHPASS: sshpass -e reads the password from it
)
# Short words only as whole parts of a name: ansible_ssh_pass, ansible_become_pass, DB_PWD,
# LDAP_BIND_PW.
_WORDS = re.compile(r"(?:^|[_.\-])(?:pass|pwd|pw)(?:$|[_.\-])", re.IGNORECASE)


# Field names repeat (every ledger record checks the same few): remembering the answer
# keeps the check off a writer's path under the lock. Bounded, as names may come from users.
@lru_cache(maxsize=4096)
def looks_secret(key: str) -> bool:
    """True for variable or field names that usually hold a secret."""
    lowered = key.lower()
    if lowered.endswith(("_file", "_path")):  # where a secret lives is not the secret
        return False
    return any(part in lowered for part in _SUBSTRINGS) or bool(_WORDS.search(key))


def masked(value: Any) -> Any:
    """A copy of `value` with the value of every secret-looking key replaced by MASK, at
    any depth: a variable may be a mapping (`db: {password: ...}`) or a list of them."""
    if isinstance(value, dict):
        return {k: MASK if looks_secret(str(k)) else masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked(item) for item in value]
    return value
