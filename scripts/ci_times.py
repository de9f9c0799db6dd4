"""The times and counts of `.ci/run` logs, for results/test_times/ci_runs.json (the claims
block in docs/testing.md): set-up, each pass of `make test`, the whole run, and the test
counts of both passes. The whole run's time is .ci/run's last line, or, for a run that stopped
at a failed test before printing it, the `rc=N wall=S` line a wrapper appended.

    python scripts/ci_times.py LABEL=LOG [LABEL=LOG ...] --commit SHA [--out results/test_times/ci_runs.json]

Rows are appended to `--out` (a row with the same label and commit is replaced).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def read(log: str) -> dict[str, int]:
    """Numbers from one log (the lines .ci/run and the Makefile print, pytest's summaries)."""
    def one(pattern: str) -> int:
        m = re.search(pattern, log, re.M)
        if not m:
            raise ValueError(f"no line matching {pattern!r}")
        return int(next(g for g in m.groups() if g is not None))

    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for line in re.findall(r"^=*\s*(\d+ (?:passed|failed|skipped|error)[^\n]*) in [\d.]+s", log, re.M):
        for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)", line):
            key = "failed" if what.startswith("error") else what
            counts[key] += int(n)
    return {"setup_s": one(r"setup took (\d+) s"), "parallel_s": one(r"parallel pass exit \d+ in (\d+) s"),
            "serial_s": one(r"serial pass exit \d+ in (\d+) s"),
            "total_s": one(r"CI took (\d+) s in all|^rc=\d+ wall=(\d+)$"),
            **counts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", help="LABEL=LOG")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", type=Path, default=Path("results/test_times/ci_runs.json"))
    a = ap.parse_args(argv)
    rows = json.loads(a.out.read_text()) if a.out.is_file() else []  # earlier runs are kept
    new = []
    for spec in a.logs:
        label, _, path = spec.partition("=")
        new.append({"label": label, "commit": a.commit, **read(Path(path).read_text(errors="replace"))})
    rows = [r for r in rows if (r["label"], r["commit"]) not in {(n["label"], n["commit"]) for n in new}] + new
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(new, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
