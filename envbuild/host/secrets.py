"""What counts as a secret: credentials in URLs, hidden wherever a URL is shown, logged or stored
(plans, logs, layer keys, lock files), and variable names and values that look like tokens (a spec that
would bake one into an image gets a warning). Pure: text in, text out."""

from __future__ import annotations

import re

# scheme://userinfo@ (userinfo: user, user:password, or a token as the user name), and a proxy value
# written without a scheme (user:password@host:port), which only counts with a password.
_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s'\"]+@", re.I)
_BARE_USERINFO = re.compile(r"(?P<lead>^|[\s='\"])[^/@\s:'\"=]+:[^/@\s'\"]+@(?=[\w.\[-])")
_PASSWORD_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s:'\"]*:[^/@\s'\"]+@", re.I)

# Variable names that hold secrets: the last words of the name (HF_TOKEN, DB_PASSWORD, WANDB_API_KEY,
# AWS_SECRET_ACCESS_KEY). Not TOKENIZERS_PARALLELISM, HF_TOKEN_PATH or SORT_KEY.
_SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|PASSWORD|PASSWD|PASSPHRASE|SECRET|API_?KEY|SECRET_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?|AUTH)$", re.I)
# Values that are no secret whatever the name says: empty, a switch, a path or a variable reference.
_HARMLESS_VALUE = re.compile(r"^(|0|1|true|false|yes|no|on|off|none|null|[/~$].*)$", re.I)
# Token formats with a known prefix: Hugging Face, GitHub, GitLab, Slack, PyPI, npm, OpenAI, AWS access keys,
# Weights & Biases' prefixed keys. The part after the prefix is long enough that hf_home or sk-learn never match.
_TOKEN_VALUE = re.compile(
    r"(?<![A-Za-z0-9])(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|pypi-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}"
    r"|AKIA[0-9A-Z]{16}|wandb_v\d+_[A-Za-z0-9_]{20,})")


def redact(text: str) -> str:
    """`https://user:token@host/...` -> `https://***@host/...`, `user:pass@proxy:3128` -> `***@proxy:3128`."""
    text = _USERINFO.sub(r"\g<scheme>***@", text)
    return _BARE_USERINFO.sub(r"\g<lead>***@", text)


def has_credentials(text: str) -> bool:
    """Whether `text` holds a URL with user information (a user name alone may be a token: https://TOKEN@host)."""
    return redact(text) != text


def secret_name(name: str) -> bool:
    """Whether a variable called `name` conventionally holds a secret (HF_TOKEN, DB_PASSWORD, WANDB_API_KEY)."""
    return bool(_SECRET_NAME.search(name))


def secret_reason(name: str | None, value: str) -> str | None:
    """Why `value` (of the variable `name`, when it is one) looks like a secret; None when it does not."""
    if _PASSWORD_URL.search(value) or (_BARE_USERINFO.search(value) and name is not None and "PROXY" in name.upper()):
        return "holds a URL with a user name and password"
    token = _TOKEN_VALUE.search(value)
    if token:
        prefix = re.match(r"github_pat_|wandb_v\d+_|AKIA|[a-z]+[_-]", token.group(0))
        return f"looks like an access token ({prefix.group(0) if prefix else ''}...)"
    if name is not None and secret_name(name) and not _HARMLESS_VALUE.match(value.strip()):
        return f"is named like a secret ({name})"
    return None
