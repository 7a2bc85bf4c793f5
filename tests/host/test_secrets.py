"""What counts as a secret (envbuild.host.secrets): redaction of credentials in URLs, and the names and
values a spec's env: would bake into an image."""

from __future__ import annotations

import pytest

from envbuild.host.secrets import has_credentials, redact, secret_name, secret_reason


@pytest.mark.parametrize(("text", "expected"), [
    ("https://user:s3cret@pypi.site/simple", "https://***@pypi.site/simple"),
    ("https://ghp_TOKENONLY@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
    ("--index-url http://u:p@h:8080/simple --extra-index-url file:///opt/pypi/simple",
     "--index-url http://***@h:8080/simple --extra-index-url file:///opt/pypi/simple"),
    ("APPTAINERENV_UV_EXTRA_INDEX_URL='http://a:b@h/x https://c:d@i/y'", "APPTAINERENV_UV_EXTRA_INDEX_URL='http://***@h/x https://***@i/y'"),
    ("APPTAINERENV_https_proxy=proxyuser:pw@proxy.site:3128", "APPTAINERENV_https_proxy=***@proxy.site:3128"),
    ("Looking in indexes: http://envuser:****@127.0.0.1:9/simple", "Looking in indexes: http://***@127.0.0.1:9/simple"),
])
def test_redact_hides_every_form_of_user_information(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert has_credentials(text)


@pytest.mark.parametrize("text", [
    "https://pypi.org/simple", "file:///opt/pypi/simple", "/opt/wheels", "git@github.com:org/repo.git",
    "--bind /etc/ssl/certs/ca.crt:/.envbuild-host/ca-bundle.pem:ro", "see http://h2/y", "me@example.org",
])
def test_text_without_credentials_is_unchanged(text: str) -> None:
    assert redact(text) == text
    assert not has_credentials(text)


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "DB_PASSWORD", "WANDB_API_KEY",
                                  "AWS_SECRET_ACCESS_KEY", "MY_SECRET", "OPENAI_APIKEY", "TOKEN", "password"])
def test_secret_names(name: str) -> None:
    assert secret_name(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "HF_TOKEN_PATH", "SORT_KEY", "HF_HOME", "PASSWORD_FILE", "KEYRING"])
def test_names_that_are_no_secret(name: str) -> None:
    assert not secret_name(name)


@pytest.mark.parametrize(("name", "value", "why"), [
    ("HF_TOKEN", "abc123", "named like a secret"),
    ("NOTE", "hf_" + "a1" * 15, "access token (hf_"),
    ("X", "use ghp_" + "B" * 36, "access token (ghp_"),
    ("X", "wandb_v1_" + "c" * 30, "access token"),
    ("X", "glpat-" + "d" * 20, "access token"),
    ("X", "AKIA" + "E" * 16, "access token"),
    ("PIP_EXTRA_INDEX_URL", "https://bob:pw@mirror.site/simple", "user name and password"),
    ("HTTPS_PROXY", "bob:pw@proxy:3128", "user name and password"),
    (None, "pip install --index-url https://u:p@m/simple six", "user name and password"),
])
def test_secret_values(name: str | None, value: str, why: str) -> None:
    reason = secret_reason(name, value)
    assert reason is not None and why in reason


@pytest.mark.parametrize(("name", "value"), [
    ("TOKENIZERS_PARALLELISM", "false"), ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"), ("HF_TOKEN", ""),
    ("HF_TOKEN", "/scratch/me/token"), ("HF_TOKEN", "$HOME/.hf-token"), ("HF_HOME", "/scratch/hf"),
    ("NOTE", "hf_home"), ("NOTE", "sk-learn"), ("URL", "https://mirror.site/simple"), (None, "git@github.com:org/repo"),
    ("GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567"),
])
def test_values_that_are_no_secret(name: str | None, value: str) -> None:
    assert secret_reason(name, value) is None
