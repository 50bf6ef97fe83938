"""``retold pack check|show|apply``: the memory pack file that holds each tenant's policies.

``check`` reads a pack file the way a runtime would and says whether it holds; ``show``
prints the pack one tenant runs under, with where each value came from (Retold's
built-in pack, the file's default pack, or the tenant's override). Neither opens a store.
``apply`` re-classifies and re-masks a tenant's stored records under its current pack.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from retold.cli.common import Refused, actor, add_command, cli_config, cli_runtime, print_json
from retold.config.pack import EffectivePack, effective_pack, load_pack_file
from retold.plain import to_plain

__all__ = ["register"]


def _cmd(args: argparse.Namespace) -> int:
    if args.action == "apply":
        return _apply(args)
    if args.yes:
        raise Refused(f"pack {args.action} changes nothing, so it takes no --yes")
    if args.action == "check":
        path = args.file or args.pack or cli_config(args).tenancy.pack
        if not path:
            raise Refused("pack check needs FILE (or tenancy.pack in the config)")
        checked = load_pack_file(path)
        count = len(checked.overrides)
        print(f"ok: {count} tenant override{'' if count == 1 else 's'}")
        return 0
    if args.file:
        raise Refused("pack show takes the file as --pack FILE")
    config = cli_config(args)
    path = args.pack or config.tenancy.pack
    effective = effective_pack(path, args.tenant or config.tenancy.tenant)
    if args.json:
        print_json({"tenant": effective.tenant, "pack_file": path, "pack": effective.pack,
                    "sources": effective.sources()})
    else:
        _print_table(effective, path)
    return 0


def _apply(args: argparse.Namespace) -> int:
    """Re-classify and re-mask the tenant's stored records under its current pack; a dry
    run (no ``--yes``) only counts."""
    if args.file or args.pack:
        raise Refused("pack apply uses the tenant's configured pack (tenancy.pack); set it there, "
                      "so the agents and this command agree")
    with cli_runtime(args) as rt:
        result = rt.operations.apply_pack(apply=args.yes, actor=actor(args))
        tenant = rt.tenant
    if args.json:
        print_json({"tenant": tenant, **dataclasses.asdict(result)})
        return 0
    head = f"tenant {tenant}" + ("" if result.applied else " (dry run, nothing written; --yes applies it)")
    embedded = f"{result.reembedded} re-embedded" if result.applied else f"{result.retexted} to re-embed"
    print(f"{head}: {result.records} records re-classified, {result.changed_class} changed class, "
          f"{result.newly_masked} newly masked, {result.unmasked} unmasked, "
          f"{result.remasked} masked differently, {embedded}")
    return 0


def _print_table(effective: EffectivePack, path: str | None) -> None:
    print(f"tenant {effective.tenant}, pack file {path or 'none (built-in pack)'}")
    # The value goes last: a list of sensitivity classes is long and would push the
    # source column off the screen.
    key_width = max(len(leaf.key) for leaf in effective.leaves)
    source_width = max(len(leaf.source) for leaf in effective.leaves)
    for leaf in effective.leaves:
        print(f"{leaf.key:<{key_width}}  {leaf.source:<{source_width}}  {_text(to_plain(leaf.value))}")


def _text(value: Any) -> str:
    """A value as YAML writes it inline: null, true, [a, b], {name: pii, ...}."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items() if v is not None) + "}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def register(commands: Any) -> None:
    """Register ``pack`` on the ``retold`` parser's subcommands."""
    # resolve: --tenant here names the pack to show, whatever the common flags say it means.
    parser = add_command(
        commands, "pack", _cmd,
        "check a memory pack file, show one tenant's effective pack, or apply it to stored records",
        "Memory packs hold each tenant's memory policies: a default pack plus per-tenant"
        " overrides in one YAML file (docs/packs.md). `check FILE` validates the file and prints"
        " how many tenants it overrides, or one line naming the first bad key; `show` prints the"
        " pack a tenant runs under with each value's source (built-in, pack default or tenant T);"
        " `apply --tenant T --yes` re-classifies every stored record of T under its current pack,"
        " re-masks it and re-embeds what the new mask changed (without --yes it only counts)."
        " A value the file sets wins over the config key it restates; a built-in one defers to it.",
        conflict_handler="resolve")
    parser.add_argument("action", choices=["check", "show", "apply"],
                        help="check a file, show a tenant's pack, or apply it to the stored records")
    parser.add_argument("file", nargs="?", help="check: the pack file (default: tenancy.pack in the config)")
    parser.add_argument("--tenant", help="show, apply: the tenant (default: tenancy.tenant in the config)")
    parser.add_argument("--pack", help="check, show: the pack file (default: tenancy.pack in the config)")
    parser.add_argument("--json", action="store_true",
                        help="show, apply: one JSON object (show: values and sources; apply: the counts)")
    parser.add_argument("--yes", action="store_true",
                        help="apply: write the new classes and masks (without it, a dry run that counts)")
