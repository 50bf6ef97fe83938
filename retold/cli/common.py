"""What every ``retold`` command shares: the common flags, how a command finds its config
and opens its runtime, argument types, JSON output, and the refusal a command raises to
print one line and exit."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from retold.cli_failure import EXIT_ERROR
from retold.config import Config
from retold.config.env import load_config_from_environment, store_target
from retold.models import Scope
from retold.tenant import DEFAULT_TENANT
from retold.util import to_plain

if TYPE_CHECKING:
    from retold.runtime import Runtime

__all__ = [
    "EXIT_PENDING", "EXIT_REFUSED", "EXIT_UNRESOLVED", "EXIT_USAGE", "Parser", "Refused", "actor",
    "add_command", "cli_config", "cli_runtime", "positive", "print_json", "scope_arg",
]

EXIT_UNRESOLVED = 2  # migrate exits 2 while unmapped legacy rows remain
EXIT_REFUSED = 2  # an irreversible command without --yes
EXIT_PENDING = 3  # extract: no hosted model is configured, so the session stays pending
EXIT_USAGE = 2  # mcp: a transport asked for without what it needs (identity, tokens, the extra)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the CLI contract: one line on stderr, exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


class Refused(Exception):
    """A command refused to run as asked; the message is the one line to print."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help="SQLite store file or PostgreSQL URL (default: $RETOLD_STORE, "
                        "else store.url or store.path from the config)")
    parser.add_argument("--tenant", help="the tenant to read and write (default: $RETOLD_TENANT, else "
                        "tenancy.tenant from the config, else default)")
    parser.add_argument("--config", help="config YAML (default: $RETOLD_CONFIG; defaults apply without "
                        "either)")
    parser.add_argument("--as", dest="actor", default=None,
                        help="operator identity recorded on audit events (default: admin)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="after a one-line error, print its causes and traceback")


def add_command(
    commands: Any, name: str, run: Callable[[argparse.Namespace], int], help_text: str, description: str,
    **parser_options: Any,
) -> argparse.ArgumentParser:
    """Add one command with the common flags; ``run(args)`` returns its exit code.
    ``parser_options`` go to the command's parser (``conflict_handler="resolve"`` lets a
    command give one of the common flags another meaning)."""
    sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=description,
                                                       **parser_options)
    _common(sub)
    sub.set_defaults(run=run)
    return sub


def cli_config(args: argparse.Namespace) -> Config:
    """The config as workers and agents find it (the file, then RETOLD_* variables), with
    this command's flags on top."""
    overrides: dict[str, Any] = {}
    if args.store:
        overrides["store"] = store_target(args.store)
    if getattr(args, "tenant", None):
        overrides["tenancy"] = {"tenant": args.tenant}
    return load_config_from_environment(os.environ, args.config, overrides)


def actor(args: argparse.Namespace, default: str = "admin") -> str:
    return str(args.actor or default)


def cli_runtime(
    args: argparse.Namespace, *, existing: bool = True, repairs: bool = False, models: bool = True
) -> Runtime:
    """Build the runtime for the tenant ``--tenant`` names (else the config's); ``existing``
    refuses a store path or database that holds no store yet, so a mistyped one never
    becomes an empty store. ``repairs`` marks a command that fixes or
    replaces the store's vectors, so it may open a store of another embedding family;
    ``models=False`` marks one that never embeds (it only reads what the store recorded),
    so missing model files or another embedding family do not stop it either."""
    from retold.runtime import build_runtime
    from retold.store.location import missing_store

    config = cli_config(args)
    # Only `retold migrate` and the commands that write on purpose create a store; another
    # tenant is checked by build_runtime, which refuses a tenant never added.
    if existing and (config.store.url or config.tenancy.tenant == DEFAULT_TENANT):
        missing = missing_store(config.store.url or config.store.path)
        if missing is not None:
            raise Refused(missing)
    return build_runtime(config, allow_embedding_mismatch=repairs or not models)


def scope_arg(text: str) -> Scope:
    """An argparse type: ``kind:id`` as a Scope."""
    try:
        return Scope.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def print_json(value: Any) -> None:
    print(json.dumps(to_plain(value), indent=2, ensure_ascii=False, default=str))
