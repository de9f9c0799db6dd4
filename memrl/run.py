"""Hydra entry point: `python -m memrl.run env=alfworld memory=memrl llm=local ...`.

Validates the composed config, builds the objects, and hands them to the Runner. Re-running
the same command on an unfinished run directory continues it; on a finished one it only
re-writes the metrics.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from memrl.config import ConfigError, validate
from memrl.records import write_json_atomic

log = logging.getLogger("memrl.run")

# Keys that may change between sessions of one run without changing its results.
RESUME_EXEMPT = {("runner", "progress"), ("runner", "epochs"), ("runner", "metrics_every_epoch"),
                 ("llm", "max_concurrency"), ("llm", "max_retries"), ("llm", "timeout"),
                 ("llm", "cache_path"), ("embedder", "cache_path"), ("env", "cache_dir"),
                 ("paths", "cache_dir"), ("env", "data_root"), ("env", "prompts_file"),
                 ("env", "data_path"), ("env", "server_dir"), ("env", "host"), ("env", "port"),
                 ("env", "socket"), ("env", "user"), ("env", "password_env"),
                 ("llm", "backoff_base"), ("llm", "backoff_max"),
                 # the embedded model's prefix reuse gives the same outputs as without it
                 ("llm", "reuse_prefix"), ("llm", "prefix_block")}


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items() if k != "logger"}
    for section, key in RESUME_EXEMPT:
        if isinstance(out.get(section), dict):
            out[section].pop(key, None)
    return out


def check_resume(card_path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The existing run card, or None for a new run; refuses a config that differs."""
    if not card_path.exists():
        return None
    card = json.loads(card_path.read_text())
    old, new = comparable(card.get("config", {})), comparable(config)
    if old != new:
        diffs = sorted(_diff(old, new))
        raise ConfigError(
            f"{card_path.parent} holds a run with a different config ({'; '.join(diffs[:8])}). "
            "Choose another directory (hydra.run.dir=...) or delete this one.")
    return card


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [f"{prefix[:-1]}: {a!r} -> {b!r}"]


def freeze_startup_heap() -> None:
    """Put everything built so far (libraries, env, bank) out of the cyclic GC's sight, so a
    long run's collections scan only what the run allocates (on ALFWorld at 32 concurrent
    episodes this halves the time spent in GC; see scripts/bench_throughput.py). Undone by
    `gc.unfreeze()` when the run ends."""
    gc.collect()
    gc.freeze()


def execute(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Run (or resume) one experiment in run_dir; returns the final metrics."""
    from memrl import faults, runcard
    from memrl.build import build
    from memrl.metrics import write_metrics
    from memrl.runner import Runner

    v = validate(cfg)
    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("hydra", None)
    run_dir.mkdir(parents=True, exist_ok=True)
    card_path = run_dir / "run_card.json"
    card = check_resume(card_path, config)  # before any object is built or model called

    objs = build(v, run_dir)
    tally = faults.FaultTally.attach(objs.llm) if objs.llm is not None else None
    tasks = objs.env.tasks()
    eval_tasks = objs.eval_env.tasks() if objs.eval_env is not None else None
    setup_facts = objs.memory.setup(tasks, seed=v.seed)
    if card is None:
        card = runcard.base_card(config, model=objs.llm.backend.model_id if objs.llm else None,
                                 embedder=getattr(objs.embedder, "model_id", None))
        card.update({"n_tasks": len(tasks), "data_fingerprint": runcard.data_fingerprint(tasks),
                     "memory_setup": setup_facts, "status": "running"})
    elif card.get("data_fingerprint") != runcard.data_fingerprint(tasks):
        raise ConfigError(f"the task data changed since {run_dir} was started "
                          "(data fingerprint differs); use a new run directory")
    session: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:]}
    card["sessions"].append(session)
    write_json_atomic(card_path, card)

    from memrl.logging_wandb import make_epoch_logger
    from memrl.metrics import compute_metrics, load_run

    logger = make_epoch_logger(cfg.get("logger"), run_dir=run_dir, config=config)

    def epoch_end(epoch: int) -> None:
        metrics = write_metrics(run_dir, plots=False) if v.runner.metrics_every_epoch else None
        if logger.active:
            logger.log_epoch(metrics or compute_metrics(load_run(run_dir)), epoch)

    runner = Runner(run_dir, env=objs.env, memory=objs.memory, llm=objs.llm, settings=v.runner,
                    seed=v.seed, embed_intents=objs.embedder.embed, on_epoch_end=epoch_end,
                    reads_memories=v.agent.reads_memories)
    status = "interrupted"
    freeze_startup_heap()
    try:
        runner.run(tasks, eval_tasks)
        status = "finished"
    finally:
        gc.unfreeze()  # a multirun's next job in this process may collect this one's objects
        session["ended"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        session["status"] = status
        session["llm"] = objs.llm.totals() if objs.llm else {}
        session["faults"] = tally.counts() if tally is not None else {}
        card["status"] = status
        card["llm_totals"] = runcard.totals(card["sessions"])
        card["fault_totals"] = faults.sum_counts(s.get("faults", {}) for s in card["sessions"])
        card["episodes"] = runcard.episodes_summary(run_dir)
        write_json_atomic(card_path, card)
        logger.finish(status)
        objs.env.close()
        if objs.eval_env is not None:
            objs.eval_env.close()
        objs.memory.close()
    metrics = write_metrics(run_dir, plots=True)
    return metrics


@hydra.main(version_base=None, config_path="../configs", config_name="config")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        metrics = execute(cfg, run_dir)
    except ConfigError as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"run directory: {run_dir}")
    print(f"  metrics:  {run_dir / 'metrics.json'}  (Last {metrics['last']:.3f}, "
          f"CSR {metrics['csr']:.3f}, {metrics['n_tasks']} tasks x {metrics['epochs']} epochs)")
    print(f"  plots:    {run_dir / 'plots'}")
    print(f"  run card: {run_dir / 'run_card.json'}")
    print(f"  episodes: {run_dir / 'episodes.jsonl'}")


if __name__ == "__main__":
    main()
