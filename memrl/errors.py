"""The error a user can act on without reading a traceback: `memrl: <message>`, exit 2.

Kept apart from memrl.config (which imports the runner's settings) so that every module,
the runner's guards included, can raise it without an import cycle."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem; the message names every offending key."""
