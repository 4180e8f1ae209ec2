"""One rule for secret-looking names, used by output masking, the ledger and job env."""

from __future__ import annotations

import pytest

from gpupoolctl.redact import MASK, looks_secret, masked


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
        "SSHPASS",
        "ansible_httpapi_session_key",
        "LDAP_BIND_PW",
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
        "pwm_fan",
        "session_key_file",
    ],
)
def test_ordinary_names(key):
    assert not looks_secret(key)


def test_masked_hides_secrets_at_any_depth_and_keeps_the_rest() -> None:
    variables = {
        "ansible_host": "10.0.0.1",
        "ansible_become_password": "s1",
        "vault": {"db_password": "s2", "db_host": "db1"},
        "services": [{"name": "api", "token": "s3"}],
        "extra_args": ["--verbose"],
    }
    assert masked(variables) == {
        "ansible_host": "10.0.0.1",
        "ansible_become_password": MASK,
        "vault": {"db_password": MASK, "db_host": "db1"},
        "services": [{"name": "api", "token": MASK}],
        "extra_args": ["--verbose"],
    }
    assert variables["vault"]["db_password"] == "s2"  # a copy: the inventory is untouched
