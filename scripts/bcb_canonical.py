#!/usr/bin/env python
"""Every task's canonical solution through the BigCodeBench episode path (extraction,
calibration, bigcodebench's checker in the sandbox), once per worker count.

Prints the pass rate, counts per outcome class, each task that did not pass (outcome and a
short reason), and wall time / throughput per worker count; `--out` also writes them as JSON.
A check of the executor and of the installed libraries (`make bcb-eval-deps`).

    python scripts/bcb_canonical.py --workers 1 2
    python scripts/bcb_canonical.py --data-path ../shared/data/bigcodebench/bigcodebench_hard_train.jsonl \
        --task-ids BigCodeBench/15 BigCodeBench/19 --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "bigcodebench" / "bigcodebench_hard_train.jsonl"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-path", default=str(DEFAULT_DATA),
                   help="local JSONL in BigCodeBench's schema (default: the shared data)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                   help="worker counts to time, one full pass each (default: 1 2)")
    p.add_argument("--task-ids", nargs="*", default=None, help="only these tasks")
    p.add_argument("--max-tasks", type=int, default=None)
    p.add_argument("--time-limit", type=float, default=240.0, help="per-task test limit, s")
    p.add_argument("--memory-mb", type=int, default=4096)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--out", default=None, help="write the results here as JSON")
    return p.parse_args(argv)


def run_pass(env, tasks, workers: int) -> tuple[float, list[dict]]:
    """One pass over `tasks` with `workers` threads (each episode runs in its own sandbox)."""
    def one(task):
        result = env.solve(task, [], None, seed=0)
        return {"task_id": task.task_id, "outcome": result.outcome_detail,
                "reason": result.info.get("reason", ""), "exec_s": result.info.get("exec_s"),
                "missing": result.info.get("missing_libs", [])}

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(one, tasks))
    return time.monotonic() - start, rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from memrl_envs.bigcodebench import BigCodeBenchEnv, BigCodeBenchSettings
    from memrl_envs.bigcodebench.outcome import outcome_counts

    if not Path(args.data_path).is_file():
        print(f"no data at {args.data_path}", file=sys.stderr)
        return 2
    runs = []
    for workers in args.workers:
        settings = BigCodeBenchSettings(data_path=str(args.data_path), part="all",
                                        task_ids=args.task_ids or None, max_tasks=args.max_tasks,
                                        time_limit_s=args.time_limit, memory_mb=args.memory_mb,
                                        max_parallel=workers, cache_dir=args.cache_dir)
        env = BigCodeBenchEnv(settings, agent="canonical")
        tasks = env.tasks()
        if env.skipped_rows:
            print(f"skipped {len(env.skipped_rows)} malformed rows: {env.skipped_rows[:3]}")
        wall, rows = run_pass(env, tasks, workers)
        counts = outcome_counts([r["outcome"] for r in rows])
        n = len(rows)
        runs.append({"workers": workers, "n_tasks": n, "wall_s": round(wall, 1),
                     "tasks_per_s": round(n / wall, 3), "pass_rate": counts["pass"] / n,
                     "counts": counts, "rows": rows})
        print(f"\n== {n} canonical solutions, {workers} worker(s): {wall:.1f} s "
              f"({n / wall:.3f} tasks/s)")
        print(f"pass rate {counts['pass']}/{n} = {100 * counts['pass'] / n:.1f}%")
        print("outcomes: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
        bad = [r for r in rows if r["outcome"] != "pass"]
        if bad:
            print("not passing:")
            for r in bad:
                print(f"  {r['task_id']:<18} {r['outcome']:<12} {r['reason']}")
    if len(runs) > 1:
        base = runs[0]
        print("\nwall time: " + ", ".join(f"{r['workers']} worker(s) {r['wall_s']} s" for r in runs)
              + "; speed-up " + ", ".join(f"x{base['wall_s'] / r['wall_s']:.2f} at {r['workers']}"
                                          for r in runs[1:]))
        flips = sorted({r["task_id"] for run in runs for r in run["rows"]
                        if r["outcome"] != next(x["outcome"] for x in base["rows"] if x["task_id"] == r["task_id"])})
        if flips:
            print(f"outcome differed between passes (flaky or load-dependent): {flips}")
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
