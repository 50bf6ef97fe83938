"""``retold tenant list|add|drop``: the namespaces a store holds.

A tenant is one customer of a platform: its users, grants, sessions and memories live
apart from every other tenant's (on SQLite in a file of its own, on PostgreSQL behind
row-level security), and every other command reaches one tenant, chosen with
``--tenant``. Dropping a tenant removes everything it holds and cannot be undone.
"""

from __future__ import annotations

import argparse
from typing import Any

from retold.cli.common import EXIT_REFUSED, Refused, add_command, cli_config
from retold.store.location import add_tenant, drop_tenant, list_tenants
from retold.store.postgres.url import redact

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    config = cli_config(args)
    target = config.store.target
    shown = redact(target)
    if args.action == "list":
        for name in list_tenants(target):
            print(name)
        return 0
    if not args.name:
        raise Refused(f"tenant {args.action} needs NAME", EXIT_REFUSED)
    if args.action == "add":
        created = add_tenant(target, args.name, busy_timeout_seconds=config.store.busy_timeout_seconds)
        print(f"added tenant {args.name} to {shown}" if created
              else f"tenant {args.name} already exists in {shown}; nothing changed")
        return 0
    if not args.yes:
        raise Refused(f"dropping tenant {args.name} removes all of its memory and cannot be undone; stop "
                      "the processes that serve it and add --yes to confirm", EXIT_REFUSED)
    removed = drop_tenant(target, args.name)
    print(f"dropped tenant {args.name} from {shown}: removed {len(removed)} "
          f"{'item' if len(removed) == 1 else 'items'}")
    for item in removed:
        print(f"  {item}")
    return 0


def register(commands: Any) -> None:
    """Add ``tenant`` to the ``retold`` parser."""
    parser = add_command(
        commands, "tenant", _run, "list, add or drop the tenants of a store",
        "A tenant is one customer's namespace: its users, grants, sessions, memories and logs are"
        " kept apart from every other tenant's, and every other command works in one tenant (its"
        " --tenant flag). A store without tenants serves the default tenant. `add` creates an"
        " empty tenant; `drop NAME --yes` removes the tenant and everything it holds (stop the"
        " agents and workers serving it first); the default tenant is the store itself and is"
        " never dropped. On PostgreSQL a drop rewrites every table of the store, so other"
        " tenants' reads and writes of a table wait while it is rewritten.")
    parser.add_argument("action", choices=["list", "add", "drop"], help="list the tenants, add or drop NAME")
    parser.add_argument("name", nargs="?", help="tenant name (add and drop): lower-case letters, digits,"
                        " '-' and '_'")
    parser.add_argument("--yes", action="store_true", help="drop: confirm the irreversible removal")
