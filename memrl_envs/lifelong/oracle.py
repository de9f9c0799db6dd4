"""The Lifelong oracle check: every task's ground truth through the env's own episode path
(agent=gold), with the success rate, outcome counts, seconds per episode and every miss with
its reason. Called by ``scripts/lifelong_gold.py --env os|db``."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any, Callable

from memrl.core.records import EpisodeResult, Task


def os_miss(env: Any, task: Task, result: EpisodeResult) -> tuple[str, str]:
    """(what was asked, why the OS gold episode failed)."""
    info = result.info
    if result.errors:
        return env.task(task.task_id).instruction[:160], "; ".join(result.errors)[:400]
    gold_out = result.transcript[0].observation if result.transcript else ""
    return (env.task(task.task_id).instruction[:160],
            f"evaluation exit {info.get('eval_exit')} (output: {info.get('eval_output', '').strip()[-200:]!r}); "
            f"ground-truth output: {gold_out.strip()[-300:]!r}")


def db_miss(env: Any, task: Task, result: EpisodeResult) -> tuple[str, str]:
    """(the ground-truth SQL, why the DB gold episode failed)."""
    db_task = env.task(task.task_id)
    sql_out = result.transcript[0].observation if result.transcript else ""
    if result.errors:
        reason = "; ".join(result.errors)[:300]
    elif sql_out.startswith("Error"):
        reason = f"ground-truth SQL failed: {sql_out[:250]}"
    elif db_task.answer_type == "md5":
        reason = f"table hash {result.info.get('table_hash')} != {db_task.md5}"
    else:
        expected = [tuple(r) for r in db_task.direct_rows or ()]
        reason = f"rows differ: got {sql_out[:400]} ; expected {str(expected)[:400]}"
    return db_task.gold_sql, reason


def run_oracle(env: Any, label: str, miss: Callable[[Any, Task, EpisodeResult], tuple[str, str]], *,
               prepare: Callable[[], Any] | None = None, json_out: str | None = None,
               echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Play every task of `env` (built with agent="gold") once and report. `prepare` brings
    the system up before the clock starts (the OS root file system, the DB server)."""
    tasks = env.tasks()
    if env.skipped:
        echo(f"skipped {len(env.skipped)} malformed rows: " + ", ".join(f"{s.key} ({s.reason})" for s in env.skipped))
    if prepare is not None:
        prepare()
    counts: collections.Counter[str] = collections.Counter()
    rows, misses = [], []
    started = time.monotonic()
    for task in tasks:
        t0 = time.monotonic()
        result = env.solve(task, [], None, seed=0)
        outcome = result.outcome_detail or result.outcome
        counts[outcome] += 1
        rows.append({"task_id": task.task_id, "success": result.success, "outcome": outcome,
                     "seconds": round(time.monotonic() - t0, 3), "errors": result.errors})
        if not result.success:
            misses.append((task.task_id, outcome, *miss(env, task, result)))
    total = time.monotonic() - started
    n, ok = len(rows), sum(r["success"] for r in rows)
    echo(f"gold oracle, {label}: {ok}/{n} = {100.0 * ok / max(n, 1):.2f}%")
    echo("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    echo(f"seconds per episode: {total / max(n, 1):.3f} (total {total:.1f} s)")
    for task_id, outcome, what, reason in misses:
        echo(f"- {task_id} [{outcome}] {what}\n    {reason}")
    report = {"env": label, "n": n, "success": ok, "outcomes": dict(counts), "seconds_total": total,
              "episodes": rows}
    if json_out:
        Path(json_out).write_text(json.dumps(report, indent=1))
    return report
