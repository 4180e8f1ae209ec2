"""One rule for secret-looking names, used by output masking, the ledger and job env."""

from __future__ import annotations

import pytest

from gpupoolctl.redact import looks_secret


@pytest.mark.parametrize(
    "key",
    [
        "ansible_password",
        "ansible_ssh_pass",
        "ansible_become_pass",
        "DB_PWD",
        "db_passwd",
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "ansible_ssh_private_key_passphrase",
        "pass",
        "OPENAI_API_KEY",
        "vault_credentials",
    ],
)
def test_secret_names(key):
    assert looks_secret(key)


@pytest.mark.parametrize(
    "key",
    [
        "ansible_host",
        "ansible_ssh_private_key_file",
        "vault_password_file",
        "passthrough",
        "compass_heading",
        "bypass",
        "site",
        "sim",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
    ],
)
def test_ordinary_names(key):
    assert not looks_secret(key)
