"""How the ``retold`` command reports a failure: one line on stderr and an exit code,
never a traceback unless asked for with ``-v``.

The line is the error's own message, which for a store names the condition (locked,
read-only, full, damaged, not a Retold store) and what to do about it. A held lock is the
one failure that retrying the same command can cure, so it has an exit code of its own.
"""

from __future__ import annotations

import sys
import traceback

from retold.errors import StoreLockedError

__all__ = ["EXIT_ERROR", "EXIT_LOCKED", "one_line", "report_failure"]

EXIT_ERROR = 1
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
    return EXIT_LOCKED if isinstance(exc, StoreLockedError) else EXIT_ERROR
