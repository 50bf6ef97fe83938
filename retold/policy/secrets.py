"""Credentials never become memories: the screen every write path runs first.

A memory outlives the conversation, is shown to other sessions and agents with a grant,
and is copied into snapshots, so a password or key that reached one would leak further
than the transcript it came from. Asking the model not to save secrets is advice, not a
control; this screen refuses them. It recognises the shapes credentials actually take
(provider key prefixes, key blocks, bearer tokens, JSON Web Tokens, ``password: ...``
assignments, URLs with a password, payment card numbers that pass the Luhn check) and
answers with the kind found, never the text, so that neither an error, a log line nor an
audit event repeats the secret. Ordinary text with numbers, hashes, UUIDs and version
strings passes; the labelled corpus in ``tests/data/secrets.json`` holds both sides.
See docs/decisions.md, "Secrets are refused on every write path".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["SecretFound", "SecretKind", "find_secret", "screen"]

SecretKind = Literal[
    "private_key", "aws_key", "api_key", "bearer_token", "jwt", "password", "card_number",
    "connection_string",
]

_LABELS: dict[SecretKind, str] = {
    "private_key": "a private key block",
    "aws_key": "an AWS access key",
    "api_key": "an API key or access token",
    "bearer_token": "a bearer or basic authorization credential",
    "jwt": "a JSON Web Token",
    "password": "a password",
    "card_number": "a payment card number",
    "connection_string": "a connection string with a password",
}


@dataclass(frozen=True)
class SecretFound:
    """Which field held which kind of credential; the credential itself is never kept."""

    kind: SecretKind
    field: str

    @property
    def message(self) -> str:
        return (f"{self.field} appears to contain {_LABELS[self.kind]}; credentials are never stored "
                "as memories, so nothing was written. Save the fact without the secret (for example "
                "'the user has a staging API key').")


def screen(**fields: str | None) -> SecretFound | None:
    """The first of ``fields`` (in the order given) that holds a credential, or None."""
    for name, text in fields.items():
        kind = find_secret(text) if text else None
        if kind is not None:
            return SecretFound(kind, name)
    return None


def find_secret(text: str) -> SecretKind | None:
    """The kind of the first credential found in ``text``, or None."""
    for kind, pattern, accept in _DETECTORS:
        for match in pattern.finditer(text):
            if accept(match):
                return kind
    return None


# -- what a credential looks like ------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"^(?:[*x•#.?_-]+|[<{\[$%].*|.*[>}\]]|\.\.\.)$", re.IGNORECASE)
# Words that follow "password:" or "token is" in prose about credentials rather than in a
# credential: "password: reset it in the portal", "the token is required".
_PROSE = frozenset({
    "a", "an", "the", "my", "your", "our", "their", "his", "her", "its", "this", "that", "it", "none",
    "null", "nil", "empty", "unset", "set", "blank", "hidden", "redacted", "masked", "required",
    "optional", "needed", "mandatory", "missing", "incorrect", "invalid", "wrong", "correct",
    "expired", "reset", "changed", "rotated", "updated", "stored", "saved", "hashed", "encrypted",
    "protected", "managed", "weak", "strong", "long", "short", "same", "different", "not", "no", "yes",
    "true", "false", "ok", "okay", "too", "also", "still", "only", "being", "be", "field", "policy",
    "prompt", "manager", "please", "change", "enter", "use", "see", "ask", "here", "there", "sent",
    "shared", "unknown", "command", "password", "passwd", "secret", "token", "key", "pwd",
})


def _random(value: str, min_length: int) -> bool:
    """Long enough, with a digit and a letter: keys and tokens, not words or numbers."""
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    return len(value) >= min_length and has_digit and has_alpha


def _plain_value(value: str) -> str:
    return value.strip("\"'`").rstrip(".,;:)!?")


# A value that is a name called or indexed (``Column(String``, ``input()``, ``form["pw"]``,
# ``hash(password)``) is code that computes or stores a password, not a password.
_CODE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*[(\[]")


def _assigned_password(match: re.Match[str]) -> bool:
    value = _plain_value(match.group("value"))
    return (len(value) >= 4 and value.casefold() not in _PROSE and not _PLACEHOLDER.match(value)
            and not _CODE.match(match.group("value"))
            and not value.startswith(("/", "~/", "./", "http")))  # PWD=/home/... is a folder


def _prose_password(match: re.Match[str]) -> bool:
    value = _plain_value(match.group("value"))
    if len(value) < 6 or value.isdigit() or value.isalpha() or value.casefold() in _PROSE:
        return False
    return not _PLACEHOLDER.match(value)


def _token_value(min_length: int) -> Callable[[re.Match[str]], bool]:
    def accept(match: re.Match[str]) -> bool:
        value = _plain_value(match.group("value"))
        return _random(value, min_length) and not _PLACEHOLDER.match(value)
    return accept


def _url_password(match: re.Match[str]) -> bool:
    value = match.group("value")
    documented = value.casefold() in {"password", "pass", "pwd", "secret", "token"}  # user:password@host
    return not documented and not _PLACEHOLDER.match(value)


def _card(match: re.Match[str]) -> bool:
    raw = match.group(0)
    digits = re.sub(r"[ -]", "", raw)
    groups = re.split(r"[ -]", raw)
    if len(groups) > 1 and any(len(g) < 3 for g in groups):  # "12 34 56 ..." is a list, not a card
        return False
    return 13 <= len(digits) <= 19 and _card_prefix(digits) and _luhn(digits)


def _card_prefix(digits: str) -> bool:
    """Issuer ranges of the major card networks: Visa, Mastercard, Amex, Discover, JCB,
    Diners, UnionPay."""
    two, four = int(digits[:2]), int(digits[:4])
    return (digits[0] == "4" or 51 <= two <= 55 or 2221 <= four <= 2720 or two in (34, 37)
            or digits.startswith(("6011", "65", "644", "645", "646", "647", "648", "649"))
            or two in (35, 36, 38, 30, 62))


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _always(_: re.Match[str]) -> bool:
    return True


_KEY_NAMES = (r"api[_ -]?key|secret[_ -]?key|client[_ -]?secret|access[_ -]?key|access[_ -]?token"
              r"|auth[_ -]?token|refresh[_ -]?token|private[_ -]?token|session[_ -]?token|secret|token")
_PASSWORD_NAMES = r"password|passwd|passphrase|passcode|pwd"

_DETECTORS: tuple[tuple[SecretKind, re.Pattern[str], Callable[[re.Match[str]], bool]], ...] = (
    ("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"), _always),
    ("aws_key", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), _always),
    ("aws_key", re.compile(r"(?i)aws.{0,30}?(?:secret|private).{0,20}?[:=]\s*[\"']?"
                           r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"), _token_value(40)),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"), _always),
    ("api_key", re.compile(
        r"(?<![A-Za-z0-9_-])(?:"
        r"sk-ant-[A-Za-z0-9_-]{20,}"                      # Anthropic
        r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
        r"|glpat-[A-Za-z0-9_-]{20,}"                      # GitLab
        r"|xox[abposr]-[A-Za-z0-9-]{10,}"                 # Slack
        r"|[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"          # Stripe secret and restricted keys
        r"|AIza[0-9A-Za-z_-]{35}"                         # Google
        r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"    # SendGrid
        r"|hf_[A-Za-z0-9]{30,}"                           # Hugging Face
        r"|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,}"   # package registries
        r"|dop_v1_[a-f0-9]{64}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"  # DigitalOcean, Shopify
        r")"), _always),
    ("api_key", re.compile(r"hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+"), _always),
    ("api_key", re.compile(r"(?<![A-Za-z0-9_-])sk-(?:proj-|svcacct-|admin-)?(?P<value>[A-Za-z0-9_-]{20,})"),
     _token_value(20)),  # OpenAI: "sk-" then a random run, unlike "sk-learn-compatible-..."
    ("bearer_token", re.compile(r"(?i)\bbearer\s+(?P<value>[A-Za-z0-9\-._~+/]{16,}=*)"), _token_value(16)),
    ("bearer_token", re.compile(
        r"(?i)\bauthorization\s*[:=]\s*[\"']?basic\s+(?P<value>[A-Za-z0-9+/]{8,}={0,2})"), _token_value(8)),
    ("connection_string", re.compile(
        r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@]*:(?P<value>[^\s:/@]+)@[^\s/@]+"), _url_password),
    ("connection_string", re.compile(r"(?i)\b(?:AccountKey|SharedAccessKey)\s*=\s*[A-Za-z0-9+/]{20,}={0,2}"),
     _always),
    ("password", re.compile(
        rf"(?i)(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{{0,40}}?(?:{_PASSWORD_NAMES})[\"']?\s*[:=]\s*[\"']?"
        r"(?P<value>[^\s\"',;]+)"), _assigned_password),
    ("password", re.compile(
        rf"(?i)\b(?:{_PASSWORD_NAMES})(?:\s+(?:for|to|of|on)(?:\s+[\w.@-]+){{1,3}})?\s+(?:is|was)\s*:?\s*"
        r"[\"'`]?(?P<value>[^\s\"'`,;]+)"), _prose_password),
    ("api_key", re.compile(
        rf"(?i)(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{{0,40}}?(?:{_KEY_NAMES})[\"']?(?:\s*(?:[:=]|\bis\b)\s*|\s+)[\"'`]?"
        r"(?P<value>[A-Za-z0-9_\-./+=]{16,})"), _token_value(16)),
    # Not inside a path: "/articles/360012345678901" is a page's id.
    ("card_number", re.compile(r"(?<![\d./-])\d(?:[ -]?\d){12,18}(?![\d-])"), _card),
)
