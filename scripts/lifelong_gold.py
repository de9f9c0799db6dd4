"""Oracle check for LifelongAgentBench: run every task's ground truth through the env's own
episode path (agent=gold) and print the success rate, the outcome counts, seconds per
episode and every miss with its reason.

    python scripts/lifelong_gold.py --env db [--data PATH] [--server-dir DIR] [--limit N]
                                    [--task-ids db-3 db-17] [--no-mysql8-compat] [--json OUT]

--env db uses a managed MariaDB in --server-dir (default: a temporary folder, removed after),
or an external server with --host/--port/--user/--password-env.

    python scripts/lifelong_gold.py --env os [--data PATH] [--rootfs-dir DIR] [--build-rootfs] ...

--env os runs each task in a throwaway overlay of the cached root file system (`make rootfs`).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DB_DATA = ROOT.parent / "shared" / "data" / "lifelong" / "db_train.json"
DEFAULT_OS_DATA = ROOT.parent / "shared" / "data" / "lifelong" / "os_interaction_train.json"


def _db_env(args: argparse.Namespace, server_dir: str):
    from memrl_envs.lifelong import LifelongDbEnv

    kw = dict(data_path=args.data or str(DEFAULT_DB_DATA), agent="gold", max_tasks=args.limit,
              task_ids=args.task_ids, mysql8_compat=not args.no_mysql8_compat)
    if args.host or args.socket:
        kw.update(server="external", host=args.host or "127.0.0.1", port=args.port, socket=args.socket,
                  user=args.user, password_env=args.password_env)
    else:
        kw.update(server="managed", server_dir=server_dir, port=args.port)
    return LifelongDbEnv(**kw)


def run_os(args: argparse.Namespace) -> int:
    from memrl_envs.lifelong.os_gold import run_gold

    run_gold(args.data or str(DEFAULT_OS_DATA), limit=args.limit, task_ids=args.task_ids,
             rootfs_dir=args.rootfs_dir, json_out=args.json, build=args.build_rootfs)
    return 0


def _miss_reason(db_task, result) -> str:
    sql_out = result.transcript[0].observation if result.transcript else ""
    if result.errors:
        return "; ".join(result.errors)[:300]
    if sql_out.startswith("Error"):
        return f"ground-truth SQL failed: {sql_out[:250]}"
    if db_task.answer_type == "md5":
        return f"table hash {result.info.get('table_hash')} != {db_task.md5}"
    expected = [tuple(r) for r in db_task.direct_rows or ()]
    return f"rows differ: got {sql_out[:400]} ; expected {str(expected)[:400]}"


def run(args: argparse.Namespace) -> int:
    if args.env == "os":
        return run_os(args)
    tmp = None
    server_dir = args.server_dir
    if args.env == "db" and not server_dir:
        tmp = tempfile.mkdtemp(prefix="memrl-gold-db-")
        server_dir = tmp
    env = _db_env(args, server_dir)
    try:
        tasks = env.tasks()
        if env.skipped:
            print(f"skipped {len(env.skipped)} malformed rows: " +
                  ", ".join(f"{s.key} ({s.reason})" for s in env.skipped))
        env.address()  # start the server before timing episodes
        counts: collections.Counter[str] = collections.Counter()
        misses, rows = [], []
        started = time.monotonic()
        for task in tasks:
            t0 = time.monotonic()
            result = env.solve(task, [], None, seed=0)
            dt = time.monotonic() - t0
            outcome = result.info.get("outcome", "?")
            counts[outcome] += 1
            rows.append({"task_id": task.task_id, "success": result.success, "outcome": outcome,
                         "seconds": round(dt, 4), "errors": result.errors})
            if not result.success:
                misses.append((task.task_id, outcome, env.task(task.task_id).gold_sql,
                               _miss_reason(env.task(task.task_id), result)))
        total = time.monotonic() - started
    finally:
        env.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    n = len(rows)
    ok = sum(r["success"] for r in rows)
    print(f"gold oracle, {args.env}: {ok}/{n} = {100.0 * ok / max(n, 1):.2f}%")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"seconds per episode: {total / max(n, 1):.3f} (total {total:.1f} s)")
    for task_id, outcome, sql, reason in misses:
        print(f"- {task_id} [{outcome}] {sql}\n    {reason}")
    if args.json:
        Path(args.json).write_text(json.dumps({"env": args.env, "n": n, "success": ok, "outcomes": counts,
                                               "seconds_total": total, "episodes": rows}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=["db", "os"], required=True)
    parser.add_argument("--data", default=None, help="task file (default: ../shared/data/lifelong/…)")
    parser.add_argument("--limit", type=int, default=None, help="first N tasks only")
    parser.add_argument("--task-ids", nargs="*", default=None)
    parser.add_argument("--server-dir", default=None, help="managed MariaDB folder (default: a temporary one)")
    parser.add_argument("--host", default=None, help="external server host (instead of a managed one)")
    parser.add_argument("--socket", default=None, help="external server socket")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password-env", default=None, help="NAME of the env var holding the password")
    parser.add_argument("--no-mysql8-compat", action="store_true",
                        help="run statements as written (MariaDB's own GROUP BY order; no DELETE ... AS alias)")
    parser.add_argument("--json", default=None, help="also write every episode's outcome here")
    parser.add_argument("--rootfs-dir", default=None, help="os: root file system cache (default: as `make rootfs`)")
    parser.add_argument("--build-rootfs", action="store_true", help="os: build the root file system if missing")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
