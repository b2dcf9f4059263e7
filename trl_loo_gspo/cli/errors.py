"""User errors of the ``trl-loo-gspo`` command: one ``<prog>: error: <message>`` line on stderr and exit status 2.

A user error is a problem with what the user gave (a recipe file, a flag, a value, a directory), not a bug: it is
reported in one line, without the traceback. ``--debug`` anywhere on the command line, or the environment variable
``TRL_LOO_GSPO_DEBUG=1``, re-raises it instead, traceback included.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

#: Exit status of a user error (argparse's convention for bad arguments).
EXIT_USAGE = 2
#: The environment variable that shows the traceback of a user error.
DEBUG_ENV = "TRL_LOO_GSPO_DEBUG"


class UserError(Exception):
    """A problem with the user's input; the message says what to change."""


def debug_requested(argv: list[str] | None = None) -> bool:
    """``--debug`` in ``argv``, or ``TRL_LOO_GSPO_DEBUG`` set to anything but empty / 0 / false / no."""
    if argv is not None and "--debug" in argv:
        return True
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def strip_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug``, and whether it (or the environment variable) asked for tracebacks."""
    return [a for a in argv if a != "--debug"], debug_requested(argv)


def one_line(error: BaseException) -> str:
    """The message of ``error`` (its type's name when it has none), on one line."""
    text = str(error).strip() or type(error).__name__
    if isinstance(error, KeyError) and len(error.args) == 1:  # KeyError's str() is the repr of its key
        text = f"{type(error).__name__}: {error.args[0]}"
    return " ".join(text.split())


@contextlib.contextmanager
def as_user_errors(*kinds: type[BaseException], context: str = "") -> Iterator[None]:
    """Turn exceptions of ``kinds`` raised inside the block into a :class:`UserError` (``context`` prefixed)."""
    try:
        yield
    except UserError:
        raise
    except kinds as error:
        message = one_line(error)
        raise UserError(f"{context}{message}") from error


def report(error: UserError, prog: str, debug: bool) -> int:
    """Print ``<prog>: error: <message>`` (or re-raise with ``debug``); returns :data:`EXIT_USAGE`."""
    if debug:
        raise error
    print(f"{prog}: error: {error}", file=sys.stderr)
    return EXIT_USAGE
