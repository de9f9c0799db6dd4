"""Teacher banks: an environment's oracle plays the tasks once, and its episodes become a
memory bank another agent can start from (the paper's cross-model setting, App. C.1).

    memrl teach env=alfworld env.split=valid_seen env.max_tasks=20 [OVERRIDES...]
    memrl teach env=bigcodebench                       # canonical solutions
    memrl teach env=lifelong_db                        # ground-truth SQL
    (python -m memrl.teach ... is the same)
    python -m memrl.run ... memory.bank.init_from=<the teacher run> memory.bank.init_q=reset

It is an ordinary run (`memrl.run`, one epoch) with these settings forced, so everything a
run has (run card, episodes, resume, the bank tools) works on it:

- `agent=<the env's oracle>`: the one agent of the env whose policy needs no model (ALFWorld's
  expert, BigCodeBench's canonical solution, the Lifelong and HLE gold answers); its policy
  reads no memories (`Policy.reads_memories`);
- `memory=memrl memory.write_mode=raw`: every episode, failed ones included, is stored as it
  happened (task, outcome, `> action` / observation trajectory; no model call), with
  `memory.writer.max_trajectory_chars` raised so trajectories are stored whole;
- `runner.epochs=1`, whatever else is asked (one pass of the oracle is the bank).

An oracle does not read memories, so nothing is retrieved for it and no Q is learned: every
teacher memory has Q = q_init (0) and no visits. Any other override given on the command line
wins over these (e.g. `memory=rag` for a RAG-style bank), except that the agent must be an
oracle.

The run directory is `hydra.run.dir=...` if given, else `runs/teach/<env>/<overrides>`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from memrl.config import CONFIG_DIR, ConfigError
from memrl.rundir import RunDir

TRAJECTORY_CHARS = 20_000  # a whole oracle trajectory (ALFWorld: 50 steps are ~8k characters)
RUN_DIR_KEY = "hydra.run.dir="


def compose(overrides: Sequence[str]) -> DictConfig:
    """The project's config composed with `overrides`, as `python -m memrl.run` would."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        try:
            return hydra_compose(config_name="config", overrides=list(overrides))
        except Exception as exc:  # a bad override: name it
            raise ConfigError(f"cannot compose the config: {exc}") from exc


def oracle_agent(cfg: DictConfig) -> str:
    """The agent of the configured env whose policy needs no model (the env's `POLICIES`)."""
    from hydra.utils import get_class

    target = OmegaConf.select(cfg, "env._target_")
    policies = getattr(get_class(target), "POLICIES", {}) if target else {}
    oracles = sorted(name for name, policy in policies.items() if not policy.needs_llm)
    if len(oracles) != 1:
        raise ConfigError(f"env {OmegaConf.select(cfg, 'env.name')!r} has "
                          f"{'no' if not oracles else 'more than one'} oracle agent "
                          f"({oracles or sorted(policies)}); choose one with agent=<name>")
    return oracles[0]


def teacher_overrides(user: Sequence[str]) -> list[str]:
    """The overrides of a teacher run: the defaults first, the user's after (they win), and
    `runner.epochs=1` last (one pass of the oracle is the teacher bank)."""
    cfg = compose([o for o in user if not o.startswith("agent=")])
    given = {o.split("=", 1)[0].lstrip("+~") for o in user}
    defaults = [f"agent={oracle_agent(cfg)}", "memory=memrl", "memory.write_mode=raw",
                f"memory.writer.max_trajectory_chars={TRAJECTORY_CHARS}"]
    return [o for o in defaults if o.split("=", 1)[0] not in given] + list(user) + ["runner.epochs=1"]


@dataclass
class TeacherBank:
    run_dir: Path
    episodes: int
    solved: int
    metrics: dict[str, Any]

    def describe(self) -> str:
        return (f"teacher bank: {self.run_dir} ({self.episodes} memories, {self.solved} from solved "
                f"episodes)\n  use it with: memory.bank.init_from={self.run_dir} memory.bank.init_q=reset")


def teach(overrides: Sequence[str], run_dir: str | Path) -> TeacherBank:
    """Run (or resume) a teacher run in `run_dir`; returns what its bank holds."""
    from memrl.records import iter_jsonl
    from memrl.run import execute

    cfg = compose(teacher_overrides(overrides))
    if cfg.agent.name != oracle_agent(cfg):
        raise ConfigError(f"agent={cfg.agent.name}: a teacher run uses the env's oracle (the agent "
                          "whose policy needs no model)")
    run_dir = Path(run_dir)
    metrics = execute(cfg, run_dir)
    rows = list(iter_jsonl(RunDir(run_dir).episodes))
    return TeacherBank(run_dir=run_dir, episodes=len(rows), solved=sum(bool(r["success"]) for r in rows),
                       metrics=metrics)


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
