"""`memrl teach [HYDRA OVERRIDES...]`: a teacher bank, the env's oracle playing the tasks once.

    memrl teach env=alfworld env.split=valid_seen env.max_tasks=20 [OVERRIDES...]
    memrl teach env=bigcodebench                       # canonical solutions
    memrl teach env=lifelong_db                        # ground-truth SQL
    memrl run ... memory.bank.init_from=<the teacher run> memory.bank.init_q=reset

The run directory is `hydra.run.dir=...` if given, else `runs/teach/<env>/<overrides>`. What a
teacher run forces and why: memrl.demo.teach.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf

from memrl.core.errors import ConfigError
from memrl.demo.teach import compose, teach

RUN_DIR_KEY = "hydra.run.dir="


def default_run_dir(overrides: Sequence[str]) -> Path:
    cfg = compose(overrides)
    env = OmegaConf.select(cfg, "env.name") or "env"
    tail = ",".join(sorted(o for o in overrides if not o.startswith(("env=", "hydra."))))
    return Path("runs") / "teach" / str(env) / (tail.replace("/", "_") or "default")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    dirs = [a[len(RUN_DIR_KEY):] for a in args if a.startswith(RUN_DIR_KEY)]
    overrides = [a for a in args if not a.startswith(RUN_DIR_KEY)]
    try:
        run_dir = Path(dirs[-1]) if dirs else default_run_dir(overrides)
        bank = teach(overrides, run_dir)
    except ConfigError as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        return 2
    print(bank.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
