"""The command line: one `memrl` command with a subcommand per tool.

    memrl run [HYDRA OVERRIDES...]       one run, or a sweep with -m (memrl/cli/run.py)
    memrl report RUNS... --out DIR       tables and figures across runs (memrl/cli/report.py)
    memrl metrics RUN_DIR                a run's metrics (memrl/cli/metrics.py)
    memrl bank top|hist|export|import|merge|copy ...   memory banks (memrl/cli/bank.py)
    memrl status DIR...                  every run under the folders: status, epochs, Last, spend (memrl/cli/status.py)
    memrl view RUN_OR_SWEEP... [--out F] one self-contained HTML page of the runs (memrl/cli/view.py)
    memrl export inspect RUN... [--out D]   Inspect AI eval logs, for `inspect view` (memrl/cli/export.py)
    memrl cache stats|clear|path|prompt  the cache folder; a model call's prompt (memrl/cli/cache.py)
    memrl config [HYDRA OVERRIDES...]    the full validated config: values, defaults, meanings (memrl/cli/config.py)
    memrl keys [--hydra]                 which config keys do not change results (memrl/cli/keys.py)
    memrl plan [-m] [HYDRA OVERRIDES...] calls, tokens, cost, wall time before a run (memrl/cli/plan.py)
    memrl check [HYDRA OVERRIDES...]     the run's preflight only: one call per purpose, a table (memrl/cli/check.py)
    memrl db up|down|status              the Lifelong-DB MariaDB server (memrl_envs.lifelong_db.server)
    memrl rootfs build|path              the Lifelong-OS root file system (memrl_envs.lifelong_os.rootfs)
    memrl teach [HYDRA OVERRIDES...]     a teacher bank: the env's oracle plays once (memrl/cli/teach.py)
    memrl demo [--out DIR] [OVERRIDES...]  `make demo`: MemRL, RAG and no memory on ALFWorld (memrl/cli/demo.py)

Installed as a console script by `make setup` ([project.scripts] in pyproject.toml); without
it, `python -m memrl.cli <subcommand> ...` is the same.

What there is to choose: the benchmarks are configs/env/, the memory methods configs/memory/
(docs/methods.md), the models configs/llm/ and configs/embedder/, the paper's and the official
code's presets configs/experiment/; `memrl config <overrides>` prints every key with its
default and meaning; `memrl <command> --help` describes a command. README.md starts there.
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

USAGE = "\n\n".join(__doc__.split("\n\n")[1:])


def _run(argv: list[str]) -> int:
    """Hydra reads sys.argv: hand it the overrides as if `python -m memrl.cli run` was called."""
    from memrl.cli import run as cli_run

    saved = sys.argv
    sys.argv = ["memrl run", *argv]
    try:
        cli_run.check_groups(argv)
        cli_run.main()
    except SystemExit as exc:  # Hydra and memrl.cli.run exit with the status themselves
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    finally:
        sys.argv = saved
    return 0


def _tool(module: str, *, named: bool = True) -> Callable[[list[str]], int]:
    """A subcommand that is `module.main(argv)` (`named`: it takes `prog` for its usage line)."""
    def call(argv: list[str]) -> int:
        import importlib

        main = importlib.import_module(module).main
        return int(main(argv, prog=f"memrl {module.rsplit('.', 1)[1]}") if named else main(argv))
    return call


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": _run,
    "report": _tool("memrl.cli.report"),
    "metrics": _tool("memrl.cli.metrics"),
    "bank": _tool("memrl.cli.bank"),
    "status": _tool("memrl.cli.status"),
    "view": _tool("memrl.cli.view"),
    "export": _tool("memrl.cli.export"),
    "cache": _tool("memrl.cli.cache"),
    "config": _tool("memrl.cli.config"),
    "keys": _tool("memrl.cli.keys"),
    "plan": _tool("memrl.cli.plan"),
    "check": _tool("memrl.cli.check"),
    "db": _tool("memrl_envs.lifelong_db.server", named=False),
    "rootfs": _tool("memrl_envs.lifelong_os.rootfs", named=False),
    "teach": _tool("memrl.cli.teach", named=False),
    "demo": _tool("memrl.cli.demo"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print("usage: memrl <command> [args...]\n\n" + USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"memrl: unknown command {command!r} (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    return COMMANDS[command](rest)
