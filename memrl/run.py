"""Hydra entry point: `memrl run env=alfworld memory=memrl llm=local ...` (or
`python -m memrl.run ...`).

Wiring only: validate the composed config (memrl.config), check it against an existing run
card and keep the card (memrl.runcard), build the objects (memrl.build), hand them to the
Runner (memrl.runner), write the metrics (memrl.metrics). Re-running the same command on an
unfinished run directory continues it; on a finished one it only re-writes the metrics.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from memrl.config import CONFIG_DIR, ConfigError, validate
from memrl.rundir import RunDir

log = logging.getLogger("memrl.run")


def freeze_startup_heap() -> None:
    """Put everything built so far (libraries, env, bank) out of the cyclic GC's sight, so a
    long run's collections scan only what the run allocates (on ALFWorld at 32 concurrent
    episodes this halves the time spent in GC; see scripts/bench_throughput.py). Undone by
    `gc.unfreeze()` when the run ends."""
    gc.collect()
    gc.freeze()


def execute(cfg: DictConfig, run_dir: Path | RunDir) -> dict[str, Any]:
    """Run (or resume) one experiment in run_dir; returns the final metrics."""
    from memrl import faults
    from memrl.build import build
    from memrl.logging_wandb import make_epoch_logger
    from memrl.metrics import compute_metrics, load_run, write_metrics
    from memrl.runcard import FINISHED, INTERRUPTED, RunCard
    from memrl.runner import Runner

    v = validate(cfg)
    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("hydra", None)
    rd = RunDir(run_dir).mkdir()
    card = RunCard.resume(rd, config)  # before any object is built or model called

    objs = build(v, rd.root)
    tally = faults.FaultTally.attach(objs.llm) if objs.llm is not None else None
    tasks = objs.env.tasks()
    eval_tasks = objs.eval_env.tasks() if objs.eval_env is not None else None
    setup_facts = objs.memory.setup(tasks, seed=v.seed)
    if card is None:
        card = RunCard.create(rd, config, model=objs.llm.backend.model_id if objs.llm else None,
                              embedder=getattr(objs.embedder, "model_id", None), tasks=tasks,
                              memory_setup=setup_facts)
    else:
        card.check_data(tasks)
    session = card.start_session(sys.argv[1:])
    session["sandbox"] = objs.env.sandbox_facts()  # caps held / missing (envs/base.py)
    logger = make_epoch_logger(cfg.get("logger"), run_dir=rd.root, config=config)

    def epoch_end(epoch: int) -> None:
        metrics = write_metrics(rd, plots=False) if v.runner.metrics_every_epoch else None
        if logger.active:
            logger.log_epoch(metrics or compute_metrics(load_run(rd)), epoch)

    runner = Runner(rd, env=objs.env, memory=objs.memory, llm=objs.llm, settings=v.runner,
                    seed=v.seed, embed_intents=objs.embedder.embed, on_epoch_end=epoch_end)
    status = INTERRUPTED
    freeze_startup_heap()
    try:
        runner.run(tasks, eval_tasks)
        status = FINISHED
    finally:
        gc.unfreeze()  # a multirun's next job in this process may collect this one's objects
        card.end_session(session, status, llm=objs.llm.totals() if objs.llm else {},
                         faults=tally.counts() if tally is not None else {})
        logger.finish(status)
        objs.env.close()
        if objs.eval_env is not None:
            objs.eval_env.close()
        objs.memory.close()
    return write_metrics(rd, plots=True)


# an absolute path: the same search path whether this module is run (`python -m memrl.run`)
# or imported and called (`memrl run`, memrl/cli)
@hydra.main(version_base=None, config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    rd = RunDir(HydraConfig.get().runtime.output_dir)
    try:
        metrics = execute(cfg, rd)
    except ConfigError as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"run directory: {rd}")
    print(f"  metrics:  {rd.metrics}  (Last {metrics['last']:.3f}, "
          f"CSR {metrics['csr']:.3f}, {metrics['n_tasks']} tasks x {metrics['epochs']} epochs)")
    print(f"  plots:    {rd.plots}")
    print(f"  run card: {rd.card}")
    print(f"  episodes: {rd.episodes}")


if __name__ == "__main__":
    main()
