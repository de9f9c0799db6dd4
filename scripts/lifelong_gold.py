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
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DB_DATA = ROOT.parent / "shared" / "data" / "lifelong" / "db_train.json"
DEFAULT_OS_DATA = ROOT.parent / "shared" / "data" / "lifelong" / "os_interaction_train.json"


def _db_env(args: argparse.Namespace, server_dir: str):
    from memrl_envs.lifelong_db import LifelongDbEnv
    from memrl_envs.lifelong_db.settings import LifelongDbSettings

    kw = dict(data_path=args.data or str(DEFAULT_DB_DATA), max_tasks=args.limit,
              task_ids=args.task_ids, mysql8_compat=not args.no_mysql8_compat)
    if args.host or args.socket:
        kw.update(server="external", host=args.host or "127.0.0.1", port=args.port, socket=args.socket,
                  user=args.user, password_env=args.password_env)
    else:
        kw.update(server="managed", server_dir=server_dir, port=args.port)
    return LifelongDbEnv(LifelongDbSettings(**kw), agent="gold")


def run(args: argparse.Namespace) -> int:
    from memrl_envs.lifelong.oracle import db_miss, os_miss, run_oracle

    if args.env == "os":
        from memrl_envs.lifelong_os import LifelongOsEnv
        from memrl_envs.lifelong_os.settings import LifelongOsSettings

        settings = LifelongOsSettings(data_path=args.data or str(DEFAULT_OS_DATA), max_tasks=args.limit,
                                      task_ids=args.task_ids, rootfs_dir=args.rootfs_dir,
                                      build_rootfs=args.build_rootfs)
        env = LifelongOsEnv(settings, agent="gold")
        try:
            run_oracle(env, "os", os_miss, prepare=env.rootfs, json_out=args.json)
        finally:
            env.close()
        return 0
    tmp = None
    server_dir = args.server_dir
    if not server_dir:
        tmp = tempfile.mkdtemp(prefix="memrl-gold-db-")
        server_dir = tmp
    env = _db_env(args, server_dir)
    try:
        run_oracle(env, "db", db_miss, prepare=env.address, json_out=args.json)
    finally:
        env.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
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
