"""The error a user can act on without reading a traceback: `memrl: <message>`, exit 2.

Kept apart from memrl.config (which imports the runner's settings) so that every module,
the runner's guards included, can raise it without an import cycle."""

from __future__ import annotations

import sys
from typing import Callable


def cli_exit(action: Callable[[], int | None], errors: type[Exception] | tuple[type[Exception], ...],
             code: int) -> int:
    """A tool's exit status: `action()`'s (None = 0), or `code` after printing `error: <message>`
    to stderr when it raises one of the `errors` the tool expects (others stay tracebacks)."""
    try:
        return int(action() or 0)
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return code


class ConfigError(ValueError):
    """A configuration problem; the message names every offending key."""
