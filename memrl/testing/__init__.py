"""Test fixtures that ship with the package (importable by tests and scripts)."""
