"""Keep what a results folder must hold for every number drawn from it: per run, its card (the
commit it ran at, clean or not), `metrics.json` and its episode records (gzip); plus any
files named with --file (e.g. the demo's demo.json). The claims check (scripts/check_claims.py)
re-derives the docs' numbers from these.

    python scripts/archive_runs.py DEST NAME=RUN_DIR [NAME=RUN_DIR ...] [--file PATH ...]

Refuses a run whose card is not finished or was made at a dirty working tree (pass --any to
keep it anyway; the claims check will still refuse to cite it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def archive(dest: Path, runs: dict[str, Path], files: list[Path], allow_any: bool = False) -> list[str]:
    from memrl.core.rundir import RunDir

    problems = []
    for name, run_dir in runs.items():
        rd = RunDir(run_dir)
        card = json.loads(rd.card.read_text())
        git = card.get("git") or {}
        if not allow_any and (card.get("status") != "finished" or git.get("dirty") is not False):
            problems.append(f"{name}: {run_dir}: status {card.get('status')}, git {git}")
    if problems:
        return problems
    dest.mkdir(parents=True, exist_ok=True)
    for name, run_dir in runs.items():
        rd = RunDir(run_dir)
        shutil.copyfile(rd.card, dest / f"{name}.run_card.json")
        shutil.copyfile(rd.metrics, dest / f"{name}.metrics.json")
        with open(rd.episodes, "rb") as src, gzip.GzipFile(dest / f"{name}.episodes.jsonl.gz", "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    for f in files:
        shutil.copyfile(f, dest / f.name)
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("runs", nargs="+", help="NAME=RUN_DIR")
    ap.add_argument("--file", type=Path, action="append", default=[])
    ap.add_argument("--any", action="store_true", help="keep unfinished or dirty runs too")
    a = ap.parse_args(argv)
    runs = {}
    for spec in a.runs:
        name, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"{spec}: NAME=RUN_DIR")
        runs[name] = Path(path)
    problems = archive(a.dest, runs, a.file, a.any)
    for p in problems:
        print(f"refused: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
