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
from retold.plain import to_plain
from retold.tenant import DEFAULT_TENANT

if TYPE_CHECKING:
    from retold.runtime import Runtime
    from retold.store import Store

__all__ = [
    "COMMON_FLAGS", "EXIT_PENDING", "EXIT_REFUSED", "EXIT_UNRESOLVED", "EXIT_USAGE", "RECORD_ID_HELP",
    "SESSION_ID_HELP", "Parser", "Refused", "actor", "add_command", "cli_config", "cli_runtime",
    "missing_store_of", "positive", "print_json", "resolve_record_id", "resolve_session_id", "scope_arg",
]

EXIT_UNRESOLVED = 2  # migrate exits 2 while unmapped legacy rows remain
EXIT_REFUSED = 2  # an irreversible command without --yes
EXIT_PENDING = 3  # extract: no hosted model is configured, so the session stays pending
EXIT_USAGE = 2  # mcp: a transport asked for without what it needs (identity, tokens, the extra)


# The flags every command takes (the dests ``_common`` adds, and ``-h``).
COMMON_FLAGS = frozenset({"help", "store", "tenant", "config", "actor", "verbose"})


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the CLI contract: one line on stderr, exit 2). A
    command's missing or unknown arguments are answered with its usage on the same line,
    and a flag typed for what is a positional argument says so."""

    def error(self, message: str) -> NoReturn:
        if " " in self.prog and message.startswith(("the following arguments are required",
                                                    "unrecognized arguments")):
            message += f"; usage: {self.brief_usage()}"
        self.exit(2, f"{self.prog}: {message}\n")

    def unrecognized(self, extra: list[str]) -> NoReturn:
        """Refuse arguments this command does not take, naming positionals typed as flags."""
        positionals = {a.dest.replace("_", "-").lower(): a for a in self._actions if not a.option_strings}
        named = [positionals[e[2:].lower()] for e in extra
                 if e.startswith("--") and e[2:].lower() in positionals]
        message = f"unrecognized arguments: {' '.join(extra)}"
        if named:
            names = " and ".join(_shown(a) for a in named)
            what = ("are positional arguments, not flags" if len(named) > 1
                    else "is a positional argument, not a flag")
            self.exit(2, f"{self.prog}: {message}; {names} {what}: {self.brief_usage()}\n")
        self.error(message)

    def brief_usage(self) -> str:
        """``retold grant AGENT SCOPE [--read] [--write]``: positionals first, then this
        command's own options, without the flags every command shares."""
        parts: list[str] = []
        for action in self._actions:
            if action.option_strings or action.dest in COMMON_FLAGS:
                continue
            name = _shown(action)
            parts.append({"?": f"[{name}]", "+": f"{name}...", "*": f"[{name}...]"}.get(
                str(action.nargs), name))
        for action in self._actions:
            if not action.option_strings or action.dest in COMMON_FLAGS or action.help == argparse.SUPPRESS:
                continue
            flag = max(action.option_strings, key=len)
            text = flag if action.nargs == 0 else f"{flag} {_shown(action)}"
            parts.append(text if action.required else f"[{text}]")
        return " ".join([self.prog, *parts])


def _shown(action: argparse.Action) -> str:
    """How usage shows an argument's value: its metavar, its choices, or its name."""
    if action.metavar:
        return str(action.metavar)
    if action.choices:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper()


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

    config = cli_config(args)
    if existing and (missing := missing_store_of(config)) is not None:
        raise Refused(missing)
    return build_runtime(config, allow_embedding_mismatch=repairs or not models)


def missing_store_of(config: Config) -> str | None:
    """Why the store ``config`` names does not exist yet, with the command that creates it,
    or None. Only `retold migrate` and the commands that write on purpose create a store;
    another tenant is checked by build_runtime, which refuses a tenant never added."""
    from retold.store.location import missing_store

    if config.store.url or config.tenancy.tenant == DEFAULT_TENANT:
        return missing_store(config.store.url or config.store.path)
    return None


_SHOWN = 5  # candidates an ambiguous id lists
RECORD_ID_HELP = "record id, or a unique part of it: its start, or its end (the short id results show)"
SESSION_ID_HELP = "session id, or a unique part of it (its start or its end)"


def resolve_record_id(store: Store, text: str) -> str:
    """The record id ``text`` names: itself when a record has it, else the one record whose
    id starts or ends with it (the short id in search results is an id's end). ``text``
    unchanged when nothing matches, so each command says "no record" in its own words;
    refused, listing the candidates, when several match."""
    return _one(text, store.record_ids_named(text, _SHOWN + 1), "record")


def resolve_session_id(store: Store, text: str) -> str:
    """As :func:`resolve_record_id`, for a session id."""
    return _one(text, store.session_ids_named(text, _SHOWN + 1), "session")


def _one(text: str, ids: list[str], noun: str) -> str:
    if len(ids) <= 1:
        return ids[0] if ids else text
    listed = ", ".join(ids[:_SHOWN]) + (", ..." if len(ids) > _SHOWN else "")
    many = f"more than {_SHOWN}" if len(ids) > _SHOWN else str(len(ids))
    raise Refused(f"{text} is ambiguous: {many} {noun} ids start or end with it ({listed}); give more of"
                  " the id", EXIT_USAGE)


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
