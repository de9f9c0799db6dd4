"""One session of a run (`execute`, what `memrl run` runs: memrl/cli/run.py): validate every
section before the run directory holds a file, lock it, check the full config against an
existing run card, wire the objects, run them under the session's stop rules, write the
metrics and plots, and close the card. docs/design.md §8 ("What stops a run, and what a run
refuses") is the table of what it refuses and how it ends (exit 0 finished, 1 failed, 2 a
configuration or launch problem, 3 budget, 130 / 143 interrupted); every end but 2 leaves the
run resumable with the same command.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from memrl.config.validate import full_config, validate
from memrl.control.guards import Gate, StopSignals
from memrl.core.errors import ConfigError
from memrl.core.rundir import RunDir
from memrl.core.safe_text import safe_str
from memrl.core.stops import FAILED, INTERRUPTED, Interrupted, RunStopped, Tripwire
from memrl.core.storage import StorageError
from memrl.journal.runcard import FINISHED, RunCard

log = logging.getLogger("memrl.control.session")


def freeze_startup_heap() -> None:
    """Put everything built so far (libraries, env, bank) out of the cyclic GC's sight, so a
    long run's collections scan only what the run allocates (on ALFWorld at 32 concurrent
    episodes this halves the time spent in GC; see scripts/bench_throughput.py). Undone by
    `gc.unfreeze()` when the run ends."""
    gc.collect()
    gc.freeze()


def write_hydra_record(rd: RunDir, cfg: DictConfig) -> None:
    """`.hydra/{config,hydra,overrides}.yaml`, as Hydra writes them (module doc)."""
    if not HydraConfig.initialized():
        return
    from memrl.core.storage import writing

    files = {"config.yaml": cfg, "hydra.yaml": HydraConfig.instance().cfg,
             "overrides.yaml": HydraConfig.get().overrides.task}
    with writing(rd.hydra, "Hydra's record of the command"):
        rd.hydra.mkdir(parents=True, exist_ok=True)
        for name, node in files.items():
            (rd.hydra / name).write_text(OmegaConf.to_yaml(node), encoding="utf-8")


@contextmanager
def env_errors() -> Iterator[None]:
    """A ValueError while an env (or memory) is set up or lists its tasks is the user's to
    fix (a missing folder, unknown task ids): `memrl: ...`, not a traceback."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def execute(cfg: DictConfig, run_dir: Path | RunDir) -> dict[str, Any]:
    """Run (or resume) one experiment in run_dir; returns the final metrics."""
    from memrl.core.lock import RunLock

    v = validate(cfg)  # every section, before the run directory or its lock is touched
    config = full_config(cfg, v)  # what the card records and a resume compares
    rd = RunDir(run_dir).mkdir()
    with RunLock(rd.lock, run_dir=rd.root):  # before anything reads the run's state
        card = RunCard.resume(rd, config)  # before any object is built or model called
        write_hydra_record(rd, cfg)
        tripwire = Tripwire()
        signals = StopSignals(tripwire).install()
        try:
            return _execute(cfg, v, config, rd, card, tripwire, signals)
        finally:
            signals.restore()


def _execute(cfg: DictConfig, v: Any, config: dict[str, Any], rd: RunDir, card: "RunCard | None",
             tripwire: Tripwire, signals: StopSignals) -> dict[str, Any]:
    from memrl.control.budget import Budget, BudgetMeter
    from memrl.control.preflight import check_keys, preflight, run_clients
    from memrl.control.runner import Runner
    from memrl.control.tracking import make_epoch_logger
    from memrl.control.wiring import wire
    from memrl.core.storage import writing
    from memrl.llm import faults
    from memrl.llm.bill import sessions_spend
    from memrl.metrics.compute import compute_metrics, load_run, write_metrics
    from memrl.report.plots import write_run_plots

    with env_errors():
        objs = wire(v, rd.root)
    clients = run_clients(objs.llm, [objs.env, objs.eval_env])
    for client in clients.values():
        client.tripwire = tripwire
    check_keys(clients, objs.embedder)  # before the embedder or any model is used: memrl: ..., exit 2
    tally = faults.FaultTally.attach(objs.llm) if objs.llm is not None else None
    with env_errors():
        tasks = objs.env.tasks()
        eval_tasks = objs.eval_env.tasks() if objs.eval_env is not None else None
    if not tasks:
        raise ConfigError("env: the selection holds no task (check env.task_ids / env.max_tasks)")
    setup_facts = objs.memory.setup(tasks, seed=v.seed)
    if card is None:
        card = RunCard.create(rd, config, model=objs.llm.backend.model_id if objs.llm else None,
                              embedder=getattr(objs.embedder, "model_id", None), tasks=tasks,
                              memory_setup=setup_facts)
    else:
        card.check_data(tasks)
    card.record_skipped([*objs.env.data_skipped(),
                         *(objs.eval_env.data_skipped() if objs.eval_env is not None else [])])
    was_finished = card.status == FINISHED  # a relaunch of a finished run (nothing left to play)
    session = card.start_session(sys.argv[1:])
    session["sandbox"] = objs.env.sandbox_facts()  # caps held / missing (memrl/env/base.py)
    logger = make_epoch_logger(v.logger, run_dir=rd.root, config=config)
    zero_fail = v.metrics.forgetting_zero_fail  # how metrics.json reads an epoch with no failure
    budget = Budget(usd=v.llm.budget_usd, tokens=v.llm.budget_tokens)
    billed = [objs.embedder] if callable(getattr(objs.embedder, "totals", None)) else []
    def paying() -> list[Any]:  # every model that bills
        return [*clients.values(), *billed]

    meter = BudgetMeter(budget, clients=paying, prior=sessions_spend(card.sessions))
    warn_unpriced(clients, budget)

    def start() -> None:
        """Before the first batch: the preflight (one call per purpose) and the model check."""
        first = tasks[0]
        episode = objs.llm.episode("preflight", None) if objs.llm is not None else None
        probes = [*objs.env.model_probes(first, episode), *objs.memory.model_probes(first)]
        checked = preflight(clients, probes, objs.embedder)
        session["preflight"] = checked.rows()
        card.check_models(checked.identities)

    def epoch_end(epoch: int) -> None:
        with writing(rd.metrics, "the metrics"):
            metrics = write_metrics(rd, zero_fail=zero_fail) if v.runner.metrics_every_epoch else None
        if logger.active:
            logger.log_epoch(metrics or compute_metrics(load_run(rd), zero_fail=zero_fail), epoch)

    gate = Gate(max_error_rate=v.runner.max_error_rate, tripwire=tripwire, budget=meter,
                signals=signals, on_start=start)
    runner = Runner(rd, env=objs.env, memory=objs.memory, llm=objs.llm, settings=v.runner,
                    seed=v.seed, embed_intents=objs.embedder.embed, on_epoch_end=epoch_end, gate=gate)
    status, error = FAILED, None
    freeze_startup_heap()
    try:
        runner.run(tasks, eval_tasks)
        unchanged = was_finished and runner.commits == 0
        # before the logger ends (it logs the plots), and before the run is called finished
        with writing(rd.metrics, "the metrics"):
            metrics = kept_metrics(rd, zero_fail) if unchanged else None
            if metrics is None:
                metrics = write_metrics(rd, zero_fail=zero_fail)
                write_run_plots(rd, zero_fail)
        status = FINISHED
    except RunStopped as exc:
        status, error = exc.status, exc.message
        raise
    except (Interrupted, KeyboardInterrupt) as exc:
        status, error = INTERRUPTED, str(exc) or "interrupted"
        raise
    except BaseException as exc:
        error = str(exc) if isinstance(exc, (ConfigError, StorageError)) else f"{type(exc).__name__}: {exc}"
        raise
    finally:
        gc.unfreeze()  # a multirun's next job in this process may collect this one's objects
        try:
            _close_session(card, session, status, error, objs, tally, meter, budget, clients,
                           recount=not (was_finished and runner.commits == 0))
        finally:
            logger.finish(status)
            objs.env.close()
            if objs.eval_env is not None:
                objs.eval_env.close()
            objs.memory.close()
    return metrics


def warn_unpriced(clients: dict[str, Any], budget: Any) -> None:
    """Say at the start which models have no price (their spend is recorded as unpriced)."""
    for role, client in clients.items():
        profile = client.profile
        if not profile.priced:
            log.warning("%s (%s): litellm has no price for this model and the config gives none "
                        "(%s.price_per_mtok_in / _out): its calls are recorded as unpriced%s", role,
                        client.model_id, role, "; llm.budget_usd cannot count them" if budget.usd else "")


def model_totals(clients: dict[str, Any], embedder: Any) -> dict[str, Any]:
    """Each model's use in this session by its config key (the judge's and the embedder's
    too: the `llm` totals are the solver's alone)."""
    out = {role: c.totals() for role, c in clients.items()}
    totals = getattr(embedder, "totals", None)
    if callable(totals) and "requests" in (t := totals()):
        out["embedder"] = t
    return out


def kept_metrics(rd: RunDir, zero_fail: str) -> dict[str, Any] | None:
    """A finished run relaunched plays and commits nothing: its metrics.json and plots, written
    when it finished, stand (read, not recomputed from every record) if they are there and
    read the forgetting rate as asked; None otherwise."""
    try:
        metrics = json.loads(rd.metrics.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    from memrl.report.plots import RUN_PLOTS

    plots = [rd.plots / name for name in RUN_PLOTS]
    if not isinstance(metrics, dict) or metrics.get("forgetting_zero_fail") != zero_fail \
            or not all(p.is_file() for p in plots):
        return None
    return metrics


def _close_session(card: RunCard, session: dict[str, Any], status: str, error: str | None,
                   objs: Any, tally: Any, meter: Any, budget: Any, clients: dict[str, Any], *,
                   recount: bool = True) -> None:
    """Write the session's end into the run card. If the card cannot be written (the disk
    that stopped the run is full), a run stopping for another reason reports that reason,
    not the card's failure; a finished run reports the card."""
    session["models"] = model_totals(clients, objs.embedder)
    error = None if error is None else safe_str(error)  # the card is written whatever the message holds
    try:
        card.end_session(session, status, llm=objs.llm.totals() if objs.llm else {},
                         faults=tally.counts() if tally is not None else {},
                         spend=meter.session().to_dict(), budget=budget.to_dict(), error=error,
                         recount=recount)
    except (OSError, StorageError) as exc:
        if status == FINISHED:
            raise StorageError(card.path, str(exc), "the run card") from exc
        log.error("could not write the run card %s as well: %s", card.path, exc)


# an absolute path: the same search path whether this module is run (`python -m memrl.cli run`)
# or imported and called (`memrl run`, memrl/cli)
