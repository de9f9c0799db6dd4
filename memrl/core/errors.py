"""The error a user can act on without reading a traceback: `memrl: <message>`, exit 2.

Kept apart from memrl.config.validate (which imports the runner's settings) so that every module,
the runner's guards included, can raise it without an import cycle."""

from __future__ import annotations

import sys
from typing import Callable


def cli_exit(action: Callable[[], int | None], errors: type[Exception] | tuple[type[Exception], ...],
             code: int, prefix: str = "error") -> int:
    """A tool's exit status: `action()`'s (None = 0), or `code` after printing `<prefix>:
    <message>` to stderr when it raises one of the `errors` the tool expects (others stay
    tracebacks). The `memrl` commands use prefix "memrl"."""
    try:
        return int(action() or 0)
    except errors as exc:
        print(f"{prefix}: {exc}", file=sys.stderr)
        return code


class ConfigError(ValueError):
    """A configuration problem; the message names every offending key."""
