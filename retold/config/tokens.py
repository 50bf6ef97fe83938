"""The tokens that let a caller in: ``mcp.tokens`` (``retold mcp --http``) and
``ui.tokens`` (``retold ui``). Only a token's SHA-256 is kept, so a leaked config file
grants nothing; each list is checked at load time for what the type check cannot judge
(a real digest, no digest twice, a tenant name, the rules a Principal enforces).

Each token names its tenant (``default`` unless it says otherwise), and a server accepts
only the tokens of the tenant it serves: one config file often starts every tenant's server,
and a token of one tenant must not open another tenant's memory under the same agent and
user ids (:func:`tokens_for`)."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from retold.errors import ConfigError
from retold.tenant import check_tenant

__all__ = ["McpConfig", "McpTokenConfig", "UiConfig", "UiTokenConfig", "mcp_token_errors", "new_token",
           "token_digest", "tokens_for", "ui_token_errors"]


@dataclass(frozen=True, slots=True)
class McpTokenConfig:
    """``mcp.tokens[]:`` - one bearer token of ``retold mcp --http`` and the principal it acts
    as. Only the token's SHA-256 is kept, so a leaked config file grants nothing."""

    sha256: str = ""  # lowercase hex SHA-256 of the token text
    agent_id: str = ""
    user_id: str = ""
    project_id: str | None = None
    tenant: str = "default"  # the only tenant whose server accepts it


@dataclass(frozen=True, slots=True)
class McpConfig:
    """``mcp:`` - the MCP server (docs/integrations.md "MCP server"). Stdio needs nothing
    here; HTTP refuses to start without a token, because it never serves anonymous
    callers."""

    tokens: tuple[McpTokenConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class UiTokenConfig:
    """``ui.tokens[]:`` - one token of ``retold ui`` and whom it stands for: a principal
    (``agent_id``, ``user_id``, optional ``project_id``), who sees exactly what that
    principal's ``memory_get`` shows, or an ``operator``, who sees every scope and whose
    changes are recorded under that name. Only the token's SHA-256 is kept."""

    sha256: str = ""  # lowercase hex SHA-256 of the token text
    agent_id: str = ""
    user_id: str = ""
    project_id: str | None = None
    operator: str | None = None  # set instead of agent_id/user_id
    tenant: str = "default"  # the only tenant whose inspector accepts it


@dataclass(frozen=True, slots=True)
class UiConfig:
    """``ui:`` - the inspector, ``retold ui`` (docs/operations.md "The inspector"). It
    refuses to start without a token: memory is never shown to an anonymous visitor."""

    tokens: tuple[UiTokenConfig, ...] = ()
    page_size: int = 50  # records per list page


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_TOKEN_BYTES = 32  # 256 random bits: long enough that one unsalted SHA-256 is all the hashing needed


def token_digest(token: str) -> str:
    """The lowercase hex SHA-256 of a bearer token: the only form config keeps."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh random token (URL-safe text) and its digest."""
    token = secrets.token_urlsafe(_TOKEN_BYTES)
    return token, token_digest(token)


def mcp_token_errors(mcp: McpConfig) -> list[str]:
    """What is wrong with the MCP token list: the fields the type check cannot judge."""
    errors: list[str] = []
    seen: dict[str, str] = {}
    for i, token in enumerate(mcp.tokens):
        key = f"mcp.tokens[{i}]"
        errors += _digest_errors(key, token.sha256, seen, f"mcp.tokens[{i}]") + _principal_errors(key, token)
        errors += _tenant_errors(key, token.tenant)
    return errors


def ui_token_errors(ui: UiConfig) -> list[str]:
    """What is wrong with the inspector's token list: each names a principal or an operator."""
    errors: list[str] = []
    seen: dict[str, str] = {}
    for i, token in enumerate(ui.tokens):
        key = f"ui.tokens[{i}]"
        errors += _digest_errors(key, token.sha256, seen, f"ui.tokens[{i}]")
        errors += _tenant_errors(key, token.tenant)
        if token.operator is None:
            errors += _principal_errors(key, token)
        elif not token.operator.strip():
            errors.append(f"{key}.operator: must be a non-empty name or null")
        elif token.agent_id or token.user_id or token.project_id is not None:
            errors.append(f"{key}: an operator token names no agent_id, user_id or project_id")
    return errors


T = TypeVar("T", McpTokenConfig, UiTokenConfig)


def tokens_for(tokens: Sequence[T], tenant: str) -> list[T]:
    """The tokens a server of ``tenant`` accepts: those that name it."""
    return [token for token in tokens if token.tenant == tenant]


def _tenant_errors(key: str, tenant: str) -> list[str]:
    try:
        check_tenant(tenant, f"{key}.tenant")
    except ConfigError as exc:
        return [str(exc)]
    return []


def _digest_errors(key: str, digest: str, seen: dict[str, str], where: str) -> list[str]:
    """A token's digest must be a SHA-256 in hex, and no two tokens of a list may share one
    (``seen`` maps each digest met so far to where it was)."""
    if not _SHA256_HEX.fullmatch(digest):
        return [f"{key}.sha256: must be the 64-character lowercase hex SHA-256 of the token"
                " (never the token itself)"]
    if digest in seen:
        return [f"{key}.sha256: the same token as {seen[digest]}"]
    seen[digest] = where
    return []


def _principal_errors(key: str, token: McpTokenConfig | UiTokenConfig) -> list[str]:
    """The rules a Principal enforces, reported at load time rather than on a request."""
    errors: list[str] = []
    for name in ("agent_id", "user_id"):
        value = getattr(token, name)
        if not value.strip():
            errors.append(f"{key}.{name}: must be a non-empty string")
        elif "/" in value:
            errors.append(f"{key}.{name}: must not contain '/', got {value!r}")
    if token.project_id is not None and not token.project_id.strip():
        errors.append(f"{key}.project_id: must be a non-empty string or null")
    return errors
