"""The Lifelong-OS oracle check: every task's ground-truth script through the env's own
episode path (agent=gold), with the success rate, seconds per episode and every miss with its
reason. Called by ``scripts/lifelong_gold.py --env os``."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any, Sequence

from .os_env import LifelongOsEnv


def miss_reason(result) -> str:
    """Why a gold episode failed, from its record."""
    info = result.info
    if result.errors:
        return "; ".join(result.errors)[:400]
    gold_out = result.transcript[0].observation if result.transcript else ""
    return (f"evaluation exit {info.get('eval_exit')} (output: {info.get('eval_output', '').strip()[-200:]!r}); "
            f"ground-truth output: {gold_out.strip()[-300:]!r}")


def run_gold(data_path: str, *, limit: int | None = None, task_ids: Sequence[str] | None = None,
             rootfs_dir: str | None = None, json_out: str | None = None, build: bool = False,
             timeout_s: float = 20.0, echo=print) -> dict[str, Any]:
    env = LifelongOsEnv(data_path=data_path, agent="gold", max_tasks=limit, task_ids=task_ids,
                        rootfs_dir=rootfs_dir, build_rootfs=build, command_timeout_s=timeout_s)
    tasks = env.tasks()
    if env.skipped:
        echo(f"skipped {len(env.skipped)} malformed rows: " + ", ".join(f"{s.key} ({s.reason})" for s in env.skipped))
    env.rootfs()  # fail early (or build) before timing episodes
    counts: collections.Counter[str] = collections.Counter()
    rows, misses = [], []
    started = time.monotonic()
    for task in tasks:
        t0 = time.monotonic()
        result = env.solve(task, [], None, seed=0)
        dt = time.monotonic() - t0
        outcome = result.info.get("outcome", "?")
        counts[outcome] += 1
        rows.append({"task_id": task.task_id, "success": result.success, "outcome": outcome,
                     "seconds": round(dt, 3), "errors": result.errors})
        if not result.success:
            misses.append((task.task_id, outcome, env.task(task.task_id).instruction, miss_reason(result)))
    total = time.monotonic() - started
    env.close()
    n, ok = len(rows), sum(r["success"] for r in rows)
    echo(f"gold oracle, os: {ok}/{n} = {100.0 * ok / max(n, 1):.2f}%")
    echo("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    echo(f"seconds per episode: {total / max(n, 1):.3f} (total {total:.1f} s)")
    for task_id, outcome, instruction, reason in misses:
        echo(f"- {task_id} [{outcome}] {instruction[:160]}\n    {reason}")
    report = {"env": "os", "n": n, "success": ok, "outcomes": dict(counts), "seconds_total": total,
              "episodes": rows}
    if json_out:
        Path(json_out).write_text(json.dumps(report, indent=1))
    return report
