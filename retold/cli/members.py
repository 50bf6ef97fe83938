"""``retold members add|remove|list``: who belongs to a shared (project or org) scope.

An agent's grant on a shared scope reaches only the users who belong to it: those whose
session names the project, and those added here. The command wraps
:class:`retold.host.MemoryHost`, so every change is logged as a ``membership.changed``
event.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from retold.cli.common import add_command, cli_runtime, scope_arg
from retold.clock import to_iso
from retold.models import Scope

if TYPE_CHECKING:
    from retold.store.members import Member

__all__ = ["register"]


def register(commands: Any) -> None:
    """Register ``members`` on the ``retold`` parser's subcommands."""

    def run(args: argparse.Namespace) -> int:
        if args.action != "list" and not args.user:
            parser.error(f"members {args.action} needs USER")
        actor = str(args.actor or "admin")
        if args.action == "add":
            # Like `retold grant`, adding may be the first thing done to a new store.
            with cli_runtime(args, existing=False) as rt:
                added = rt.host.add_member(args.scope, args.user, actor=actor)
            print(f"added {args.user} to {args.scope}" if added
                  else f"{args.user} was already a member of {args.scope}; nothing changed")
        elif args.action == "remove":
            with cli_runtime(args) as rt:
                removed = rt.host.remove_member(args.scope, args.user, actor=actor)
            print(f"removed {args.user} from {args.scope}" if removed
                  else f"{args.user} was not a member of {args.scope}; nothing changed")
        else:
            with cli_runtime(args) as rt:
                members = rt.host.members(args.scope)
            _print_members(args.scope, members, as_json=args.json)
        return 0

    parser = add_command(
        commands, "members", run, "add, remove or list the members of a shared scope",
        "Manage who belongs to a project or org scope. An agent granted such a scope reads and"
        " writes it only in sessions of its members: users added here, and (for a project) users"
        " whose session names that project. Each change is logged as a membership.changed event.")
    parser.add_argument("action", choices=["add", "remove", "list"],
                        help="add or remove USER, or list the scope's explicit members")
    parser.add_argument("scope", type=scope_arg, help="project or org scope as kind:id, e.g. project:apollo")
    parser.add_argument("user", nargs="?", help="user id (add and remove)")
    parser.add_argument("--json", action="store_true", help="list: one JSON object per line")


def _print_members(scope: Scope, members: list[Member], *, as_json: bool) -> None:
    for member in members:
        if as_json:
            print(json.dumps({"scope": str(scope), "user_id": member.user_id,
                              "added_at": to_iso(member.added_at), "added_by": member.added_by}))
        else:
            print(f"{member.user_id}  added {to_iso(member.added_at)} by {member.added_by}")
    if not members and not as_json:
        implicit = " (users whose session names the project still belong)" if scope.kind == "project" else ""
        print(f"{scope} has no explicit members{implicit}")
