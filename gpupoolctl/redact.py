"""What counts as a secret, decided in one place: output hides such values, the ledger and
job environments refuse them (both end up in CI logs, `less` and `grep`)."""

from __future__ import annotations

import re

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
)
# Short words only as whole parts of a name: ansible_ssh_pass, ansible_become_pass, DB_PWD.
_WORDS = re.compile(r"(?:^|[_.\-])(?:pass|pwd)(?:$|[_.\-])", re.IGNORECASE)


def looks_secret(key: str) -> bool:
    """True for variable or field names that usually hold a secret."""
    lowered = key.lower()
    if lowered.endswith(("_file", "_path")):  # where a secret lives is not the secret
        return False
    return any(part in lowered for part in _SUBSTRINGS) or bool(_WORDS.search(key))
