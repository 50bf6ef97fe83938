"""How the ``retold`` command reports a failure: one line on stderr and an exit code,
never a traceback unless asked for with ``-v``.

The line is the error's own message, which for a store names the condition (locked,
read-only, full, damaged, not a Retold store) and what to do about it. A held lock is the
one failure that retrying the same command can cure, so it has an exit code of its own;
a damaged store exits 4, as ``retold check`` does when it finds damage, so a script that
reads a store can tell "damaged, restore it" from any other failure.
Warnings the library logs while a command runs follow the same rule: one line each,
their tracebacks only with ``-v``.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from retold.errors import StoreCorruptError, StoreLockedError

__all__ = ["EXIT_DAMAGED", "EXIT_ERROR", "EXIT_LOCKED", "logged_warnings", "one_line", "report_failure"]

EXIT_ERROR = 1
EXIT_DAMAGED = 4  # the store is damaged: what `retold check` exits with when it finds damage
EXIT_LOCKED = 75  # sysexits' EX_TEMPFAIL: try again once the other write has finished


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line; an OS error names its file."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


def report_failure(command: str, exc: BaseException, *, verbose: bool = False) -> int:
    """Print ``retold COMMAND: message`` (and with ``verbose`` the causes and traceback)
    to stderr; return the exit code."""
    print(f"retold {command}: {one_line(exc)}", file=sys.stderr)
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, StoreCorruptError):
        return EXIT_DAMAGED
    return EXIT_LOCKED if isinstance(exc, StoreLockedError) else EXIT_ERROR


class _OneLine(logging.Formatter):
    def __init__(self, prefix: str, verbose: bool) -> None:
        super().__init__()
        self.prefix, self.verbose = prefix, verbose

    def format(self, record: logging.LogRecord) -> str:
        line = self.prefix + " ".join(record.getMessage().split())
        if self.verbose and record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


@contextmanager
def logged_warnings(command: str, *, verbose: bool = False) -> Iterator[None]:
    """While a command runs, print each logged warning as ``retold COMMAND: message`` on
    stderr, with the exception it carries only when ``verbose``. A program that set up
    logging itself (a root handler exists) keeps its own handling."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine(f"retold {command}: ", verbose))
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
