"""Whether a progress bar is drawn (`runner.progress`: true, false, or auto = only on a
terminal), for every bar the harness draws."""

from __future__ import annotations

import sys
from typing import TextIO


def progress_enabled(setting: bool | str, stream: TextIO | None = None) -> bool:
    """Whether to draw the bar: `auto` means only on a terminal."""
    if setting == "auto":
        stream = stream if stream is not None else sys.stderr
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError):
            return False
    return bool(setting)
