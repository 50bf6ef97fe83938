"""``retold grant`` and ``revoke``: which agents may read or write a shared scope."""

from __future__ import annotations

import argparse
from typing import Any

from retold.cli.common import actor, add_command, cli_runtime, scope_arg

__all__ = ["register"]


def _cmd_grant(args: argparse.Namespace) -> int:
    read = args.read or not args.write
    with cli_runtime(args, existing=False) as rt:
        rt.host.grant(args.agent, args.scope, read=read, write=args.write, actor=actor(args))
    print(f"granted {args.agent} on {args.scope}: read={'yes' if read else 'no'}"
          f" write={'yes' if args.write else 'no'}")
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    with cli_runtime(args) as rt:
        removed = rt.host.revoke(args.agent, args.scope, actor=actor(args))
    print(f"revoked {args.agent} on {args.scope}" if removed
          else f"{args.agent} had no grant on {args.scope}; nothing changed")
    return 0


def register(commands: Any) -> None:
    """Add ``grant`` and ``revoke``."""
    grant = add_command(commands, "grant", _cmd_grant, "create or update a scope grant",
                        "Give an agent read and/or write access to a shared scope (read only when no"
                        " flag is given).")
    grant.add_argument("agent", help="agent id")
    grant.add_argument("scope", type=scope_arg, help="scope as kind:id")
    grant.add_argument("--read", action="store_true", help="allow reading the scope")
    grant.add_argument("--write", action="store_true", help="allow writing the scope")

    revoke = add_command(commands, "revoke", _cmd_revoke, "remove a scope grant",
                         "Remove an agent's grant on a scope.")
    revoke.add_argument("agent", help="agent id")
    revoke.add_argument("scope", type=scope_arg, help="scope as kind:id")
