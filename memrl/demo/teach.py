"""Teacher banks: an environment's oracle plays the tasks once, and its episodes become a
memory bank another agent can start from (the paper's cross-model setting, App. C.1).

    memrl teach env=alfworld env.split=valid_seen env.max_tasks=20 [OVERRIDES...]
    memrl teach env=bigcodebench                       # canonical solutions
    memrl teach env=lifelong_db                        # ground-truth SQL
    (python -m memrl.cli teach ... is the same)
    python -m memrl.cli run ... memory.bank.init_from=<the teacher run> memory.bank.init_q=reset

It is an ordinary run (`memrl.control.session`, one epoch) with these settings forced, so everything a
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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from memrl.config.frame import CONFIG_DIR
from memrl.core.errors import ConfigError
from memrl.core.rundir import RunDir

TRAJECTORY_CHARS = 20_000  # a whole oracle trajectory (ALFWorld: 50 steps are ~8k characters)


def compose(overrides: Sequence[str]) -> DictConfig:
    """The project's config composed with `overrides`, as `python -m memrl.cli run` would."""
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
    from memrl.control.session import execute
    from memrl.core.records import iter_jsonl

    cfg = compose(teacher_overrides(overrides))
    if cfg.agent.name != oracle_agent(cfg):
        raise ConfigError(f"agent={cfg.agent.name}: a teacher run uses the env's oracle (the agent "
                          "whose policy needs no model)")
    run_dir = Path(run_dir)
    metrics = execute(cfg, run_dir)
    rows = list(iter_jsonl(RunDir(run_dir).episodes))
    return TeacherBank(run_dir=run_dir, episodes=len(rows), solved=sum(bool(r["success"]) for r in rows),
                       metrics=metrics)


ATTEMPT, EXPERT = "attempt", "expert"  # the two passes of a history bank (their id labels)
BANK_ORDERS = ("history", "shuffled")


@dataclass
class HistoryBank:
    """A teacher bank with two memories per task: a failed attempt and the oracle's episode."""

    bank_dir: Path
    attempt: TeacherBank
    expert: TeacherBank
    order: str
    attempt_first: list[str]  # task ids whose failed attempt is the older memory

    def describe(self) -> str:
        return (f"history bank: {self.bank_dir} ({self.attempt.episodes} attempts stopped early, "
                f"{self.attempt.solved} of them solved; {self.expert.episodes} oracle episodes, "
                f"{self.expert.solved} solved; the attempt is the older memory of "
                f"{len(self.attempt_first)} tasks, order {self.order})")


def history_bank(overrides: Sequence[str], out: str | Path, *, attempt_steps: int,
                 expert_steps: int, order: str = "history", seed: int = 0) -> HistoryBank:
    """A bank as an agent's own history holds it: every task first failed, then solved.

    The oracle plays every task twice (`memrl.demo.teach`): stopped after `attempt_steps` steps
    (`<out>/attempt`: a real, failed attempt, the oracle's first steps), then with
    `expert_steps` (`<out>/expert`). The two banks are merged into `<out>/bank`, ids labelled
    `attempt:` / `expert:`. Both memories of a task share its intent, so similarity ties them;
    `order` says which is older (ties go to the older: `ChromaBank.neighbours`): `history`,
    the attempt (an agent fails a task before it solves it); `shuffled`, a coin per task drawn
    from `seed`. Idempotent: an existing merged bank is reused when its recorded order and
    seed match, and refused otherwise.
    """
    from memrl.core.seeding import derive_seed
    from memrl.memory.bank import BankSettings
    from memrl.memory.bankio import META_FILE, BankSourceError, create_bank, merge_entries, read_entries, resolve

    if order not in BANK_ORDERS:
        raise ConfigError(f"history bank order: one of {list(BANK_ORDERS)} (got {order!r})")
    if attempt_steps >= expert_steps:
        raise ConfigError(f"history bank: the attempt's step cap ({attempt_steps}) must be below "
                          f"the oracle's ({expert_steps})")
    out = Path(out)
    attempt = teach(list(overrides) + [f"env.max_steps={attempt_steps}"], out / ATTEMPT)
    expert = teach(list(overrides) + [f"env.max_steps={expert_steps}"], out / EXPERT)
    bank_dir = out / "bank"
    recipe = {"order": order, "seed": seed, "attempt_steps": attempt_steps, "expert_steps": expert_steps}
    if (bank_dir / META_FILE).exists():
        meta = json.loads((bank_dir / META_FILE).read_text())
        if meta.get("history_bank") != recipe:
            raise ConfigError(f"{bank_dir}: a history bank made with {meta.get('history_bank')}, not "
                              f"{recipe}; remove it or choose another --out")
        first = list(meta.get("attempt_first") or [])
        return HistoryBank(bank_dir, attempt, expert, order, first)
    sources = {label: resolve(str(run.run_dir)) for label, run in ((ATTEMPT, attempt), (EXPERT, expert))}
    merged = merge_entries([(label, read_entries(src)) for label, src in sources.items()])
    by_task: dict[str, dict[str, Any]] = {}
    for e in merged:
        by_task.setdefault(e.task_id, {})[e.memory_id.split(":", 1)[0]] = e
    first: list[str] = []
    for task_id in sorted(by_task):
        pair = by_task[task_id]
        if set(pair) != {ATTEMPT, EXPERT}:
            raise BankSourceError(f"history bank: task {task_id!r} has memories {sorted(pair)}, "
                                  f"not one {ATTEMPT} and one {EXPERT}")
        a, x = pair[ATTEMPT], pair[EXPERT]
        attempt_older = order == "history" or derive_seed(seed, "history-bank", task_id) % 2 == 0
        if attempt_older != (a.order < x.order):
            a.order, x.order = x.order, a.order
        if attempt_older:
            first.append(task_id)
    create_bank(bank_dir, merged, BankSettings(),
                {"merged_from": {k: v.describe() for k, v in sources.items()},
                 "embedder": sources[EXPERT].embedder, "memory": sources[EXPERT].memory,
                 "history_bank": recipe, "attempt_first": first})
    return HistoryBank(bank_dir, attempt, expert, order, first)
