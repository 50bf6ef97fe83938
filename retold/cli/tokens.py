"""``retold token new``: a fresh bearer token for ``retold mcp --http`` or ``retold ui``, and
the entry that lets it in.

The token is printed once and kept nowhere: the config holds only its SHA-256, so the
entry printed beside it is what goes into ``mcp.tokens`` or ``ui.tokens``. The entry is
checked by the same rules the config is checked with when it loads.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

import yaml

from retold.cli.common import EXIT_USAGE, Refused, add_command, cli_config
from retold.config.tokens import (
    McpConfig,
    McpTokenConfig,
    UiConfig,
    UiTokenConfig,
    mcp_token_errors,
    new_token,
    ui_token_errors,
)

__all__ = ["register"]

_FLAGS = {"agent_id": "--agent", "user_id": "--user", "project_id": "--project", "operator": "--operator",
          "tenant": "--tenant"}


def _cmd_token(args: argparse.Namespace) -> int:
    if args.operator is not None and args.kind == "mcp":
        raise Refused("an MCP token acts as one agent and user (--agent, --user); --operator is for"
                      " --for ui", EXIT_USAGE)
    if args.operator is None and not (args.agent and args.user):
        raise Refused(f"--for {args.kind} needs --agent and --user"
                      + (", or --operator for an operator of the inspector" if args.kind == "ui" else ""),
                      EXIT_USAGE)
    if args.operator is not None and (args.agent or args.user or args.project):
        raise Refused("an operator token names no --agent, --user or --project", EXIT_USAGE)
    tenant = cli_config(args).tenancy.tenant  # the tenant whose server will accept it
    token, digest = new_token()
    entry: McpTokenConfig | UiTokenConfig
    if args.kind == "mcp":
        entry = McpTokenConfig(digest, args.agent, args.user, args.project, tenant)
        errors = mcp_token_errors(McpConfig(tokens=(entry,)))
    else:
        entry = UiTokenConfig(digest, args.agent or "", args.user or "", args.project, args.operator, tenant)
        errors = ui_token_errors(UiConfig(tokens=(entry,)))
    if errors:
        field, _, problem = errors[0].removeprefix(f"{args.kind}.tokens[0].").partition(": ")
        raise Refused(f"{_FLAGS.get(field, field)}: {problem}", EXIT_USAGE)
    print(f"token: {token}")
    print(f"add this entry under {args.kind}.tokens in the config; it keeps only the token's SHA-256, so"
          " the token above is shown this once:")
    print(f"  - {_flow(entry)}")
    return 0


def _flow(entry: McpTokenConfig | UiTokenConfig) -> str:
    """The entry as one YAML line, without the fields left at nothing."""
    kept = {f.name: getattr(entry, f.name) for f in fields(entry) if getattr(entry, f.name) not in (None, "")}
    text: str = yaml.safe_dump(kept, default_flow_style=True, sort_keys=False, width=10_000)
    return text.strip()


def register(commands: Any) -> None:
    """Add ``token``."""
    token = add_command(
        commands, "token", _cmd_token, "make a bearer token for retold mcp --http or retold ui",
        "Print a fresh random token, and the entry to paste under mcp.tokens (--for mcp: the agent"
        " and user every request with it acts as) or ui.tokens (--for ui: a principal, or an operator"
        " who sees every scope). The entry holds the token's SHA-256 and the tenant (--tenant, else"
        " the config's); the token itself is stored nowhere, so keep it when it is printed.")
    token.add_argument("action", choices=["new"], help="make a new token")
    token.add_argument("--for", dest="kind", required=True, choices=["mcp", "ui"],
                       help="mcp: retold mcp --http; ui: the inspector, retold ui")
    token.add_argument("--agent", help="agent id the token acts as")
    token.add_argument("--user", help="user id the token acts for")
    token.add_argument("--project", help="project id of the principal, if any")
    token.add_argument("--operator", help="--for ui: an operator name instead of an agent and user")
