"""Exports of a run for other tools: Inspect AI eval logs (`inspect_logs`), written by
`memrl export inspect RUN... [--out DIR]` (memrl/cli/export.py)."""
