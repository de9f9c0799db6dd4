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
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

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
_PROCESS_START = time.time() - 1.0  # files this process made are younger (a second of slack)


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
    warn_seed(v)
    rd = RunDir(run_dir)
    new = not rd.card.exists()  # no run here yet (Hydra may have made the folder and its log)
    before = set(rd.root.iterdir()) if rd.root.is_dir() else set()
    rd.mkdir()
    try:
        with RunLock(rd.lock, run_dir=rd.root):  # before anything reads the run's state
            card = RunCard.resume(rd, config)  # before any object is built or model called
            say_where(rd, card, v.runner.epochs)
            write_hydra_record(rd, cfg)
            tripwire = Tripwire()
            signals = StopSignals(tripwire).install()
            try:
                return _execute(cfg, v, config, rd, card, tripwire, signals)
            finally:
                signals.restore()
    except ConfigError:
        if new and not rd.episodes.exists() and not models_called(rd):  # refused before any call: leave nothing
            remove_launch(rd, before)
        raise


def models_called(rd: RunDir) -> bool:
    """Whether a session on the run card reached the preflight: its calls were made (and may
    have cost money), so the card that records them is kept."""
    try:
        data = json.loads(rd.card.read_text())
    except (OSError, ValueError):
        return False
    return any(isinstance(s, dict) and "preflight" in s for s in data.get("sessions") or [])


def remove_launch(rd: RunDir, before: set[Path]) -> None:
    """What a refused launch made in a folder that held no run: every entry that was not there
    before it, then Hydra's log and the folder itself if this process made them and nothing
    else is left. Nothing that was there before is touched."""
    for path in set(rd.root.iterdir()) - before:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    started = _PROCESS_START
    left = list(rd.root.iterdir())
    if all(p.name == "run.log" and p.stat().st_mtime >= started and p.stat().st_ctime >= started for p in left):
        for p in left:
            p.unlink(missing_ok=True)
        try:
            rd.root.rmdir()
        except OSError:
            pass


def say_where(rd: RunDir, card: "RunCard | None", epochs: int) -> None:
    """One line at start: a new run, a run resumed (and how much of it is committed), or a
    finished run that has nothing left to do."""
    if card is None:
        log.info("new run: %s", rd.root)
        return
    n, last = _committed(rd)
    status = card.data.get("status")
    if status == FINISHED and last >= epochs:
        log.info("finished run: %s already holds its %d epochs (%d episodes); nothing to run "
                 "(runner.epochs above %d extends it)", rd.root, last, n, epochs)
    elif n == 0:
        log.info("resuming %s (status %s): no episode committed yet", rd.root, status)
    else:
        log.info("resuming %s (status %s): %d episodes committed, the last in epoch %d of %d",
                 rd.root, status, n, last, epochs)


def _committed(rd: RunDir) -> tuple[int, int]:
    """(episodes committed, the epoch of the last one) from the records' lines; only the last
    line is parsed."""
    import json

    n, tail = 0, b""
    try:
        with open(rd.episodes, "rb") as fh:
            for line in fh:
                if line.strip():
                    n, tail = n + 1, line
    except OSError:
        return 0, 0
    try:
        return n, int(json.loads(tail).get("epoch", 0)) if tail else 0
    except (ValueError, AttributeError):
        return n, 0


@dataclass
class Opened:
    """What a session works with once the run is open: the wired objects, the model clients by
    config key, the tasks, the run card, and the meters of this session."""

    objs: Any
    clients: dict[str, Any]
    tasks: list[Any]
    eval_tasks: list[Any] | None
    card: RunCard
    tally: Any
    was_finished: bool  # a relaunch of a finished run (nothing left to play)
    session: dict[str, Any] = field(default_factory=dict)
    budget: Any = None
    meter: Any = None


def _execute(cfg: DictConfig, v: Any, config: dict[str, Any], rd: RunDir, card: "RunCard | None",
             tripwire: Tripwire, signals: StopSignals) -> dict[str, Any]:
    run = open_run(v, config, rd, card, tripwire)
    start_session(v, run)
    return play(v, config, rd, run, tripwire, signals)


def open_run(v: Any, config: dict[str, Any], rd: RunDir, card: "RunCard | None", tripwire: Tripwire) -> Opened:
    """Wire the objects, check the keys, list the tasks, set the memory up, and create (or
    check) the run card with the start's warnings."""
    from memrl.control.forewarn import seed_effects
    from memrl.control.preflight import check_keys, run_clients
    from memrl.control.wiring import wire
    from memrl.llm import faults

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
    card.data["seed_effects"] = seed_effects(v)
    card.data["warnings"] = start_warnings(v, config, setup_facts, tasks, objs.embedder)
    for w in card.data["warnings"]:
        log.warning("%s", w)
    card.record_skipped([*objs.env.data_skipped(),
                         *(objs.eval_env.data_skipped() if objs.eval_env is not None else [])])
    return Opened(objs, clients, tasks, eval_tasks, card, tally, was_finished=card.status == FINISHED)


def start_session(v: Any, run: Opened) -> None:
    """The card's new session (its sandbox facts and model profiles) and the budget meter,
    which counts what earlier sessions spent."""
    from memrl.control.budget import Budget, BudgetMeter
    from memrl.llm.bill import sessions_spend

    run.session = run.card.start_session(sys.argv[1:])
    run.session["sandbox"] = run.objs.env.sandbox_facts()  # caps held / missing (memrl/env/base.py)
    run.budget = Budget(usd=v.llm.budget_usd, tokens=v.llm.budget_tokens)
    billed = [run.objs.embedder] if callable(getattr(run.objs.embedder, "totals", None)) else []

    def paying() -> list[Any]:  # every model that bills
        return [*run.clients.values(), *billed]

    run.meter = BudgetMeter(run.budget, clients=paying, prior=sessions_spend(run.card.sessions))
    warn_unpriced(run.clients, run.budget)
    run.card.record_profiles(run.session, {role: c.profile.describe() for role, c in run.clients.items()})


def preflight_once(run: Opened) -> None:
    """Before the first batch: the preflight (one call per purpose) and the model check. The
    calls it made stay on the card, with what they cost, whether it passes or refuses."""
    from memrl.control.preflight import PreflightError, preflight

    objs, first = run.objs, run.tasks[0]
    episode = objs.llm.episode("preflight", None) if objs.llm is not None else None
    probes = [*objs.env.model_probes(first, episode), *objs.memory.model_probes(first)]
    try:
        checked = preflight(run.clients, probes, objs.embedder)
    except PreflightError as exc:
        run.session["preflight"] = exc.rows
        raise
    run.session["preflight"] = checked.rows()
    run.card.check_models(checked.identities)


def epoch_reporter(v: Any, config: dict[str, Any], rd: RunDir, logger: Any) -> Callable[[int], None]:
    """What runs at each epoch's end: metrics.json (if asked), each new warning the records
    show once, and the epoch logger."""
    from memrl.core.storage import writing
    from memrl.metrics.compute import compute_metrics, load_run, write_metrics
    from memrl.metrics.degenerate import record_warnings

    zero_fail = v.metrics.forgetting_zero_fail  # how metrics.json reads an epoch with no failure
    said: set[str] = set()

    def epoch_end(epoch: int) -> None:
        with writing(rd.metrics, "the metrics"):
            metrics = write_metrics(rd, zero_fail=zero_fail) if v.runner.metrics_every_epoch else None
        for w in record_warnings(config, load_run(rd)):  # memrl.metrics.degenerate
            if w not in said:
                said.add(w)
                log.warning("%s", w)
        if logger.active:
            logger.log_epoch(metrics or compute_metrics(load_run(rd), zero_fail=zero_fail), epoch)

    return epoch_end


def play(v: Any, config: dict[str, Any], rd: RunDir, run: Opened, tripwire: Tripwire,
         signals: StopSignals) -> dict[str, Any]:
    """Run the epochs under the session's stop rules, write the metrics and plots, and close
    the card's session with how it ended (whatever ended it)."""
    from memrl.control.runner import Runner
    from memrl.control.tracking import make_epoch_logger
    from memrl.core.storage import writing
    from memrl.metrics.compute import write_metrics
    from memrl.report.plots import write_run_plots

    objs = run.objs
    logger = make_epoch_logger(v.logger, run_dir=rd.root, config=config)
    zero_fail = v.metrics.forgetting_zero_fail
    gate = Gate(max_error_rate=v.runner.max_error_rate, tripwire=tripwire, budget=run.meter,
                signals=signals, on_start=lambda: preflight_once(run))
    runner = Runner(rd, env=objs.env, memory=objs.memory, llm=objs.llm, settings=v.runner,
                    seed=v.seed, embed_intents=objs.embedder.embed,
                    on_epoch_end=epoch_reporter(v, config, rd, logger), gate=gate)
    status, error = FAILED, None
    freeze_startup_heap()
    try:
        runner.run(run.tasks, run.eval_tasks)
        unchanged = run.was_finished and runner.commits == 0
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
            _close_session(run, status, error, recount=not (run.was_finished and runner.commits == 0))
        finally:
            logger.finish(status)
            objs.env.close()
            if objs.eval_env is not None:
                objs.eval_env.close()
            objs.memory.close()
    return metrics


def warn_seed(v: Any) -> None:
    """Before anything runs: a seed the command chose that changes nothing in this config
    (memrl.control.forewarn) is a warning."""
    from memrl.control.forewarn import seed_effects, seed_warning

    chosen = v.seed != 0
    if HydraConfig.initialized():
        chosen = any(o.lstrip("+~").startswith("seed=") for o in HydraConfig.get().overrides.task)
    msg = seed_warning(v.seed, seed_effects(v)) if chosen else None
    if msg:
        log.warning("%s", msg)


def start_warnings(v: Any, config: dict[str, Any], setup: dict[str, Any], tasks: list[Any],
                   embedder: Any) -> list[str]:
    """Settings that make the method behave as another (memrl.metrics.degenerate), and a
    similarity gate that admits nothing on these tasks (memrl.control.forewarn)."""
    from memrl.control.forewarn import gate_warnings
    from memrl.metrics.degenerate import GATE_PREFIX, config_warnings

    out = config_warnings(config, len(tasks))
    delta = setup.get("delta")
    if isinstance(delta, (int, float)) and getattr(v.memory, "sim_gate", True) and \
            not any(w.startswith(GATE_PREFIX) for w in out):
        how = (f" (auto: the {v.memory.delta_quantile:g} quantile of pairwise intent similarity)"
               if getattr(v.memory, "delta", None) == "auto" else "")
        out += gate_warnings(float(delta), embedder.embed([t.intent for t in tasks]),
                             inclusive=bool(getattr(v.memory, "pool_by_intent", False)), how=how)
    return out


def warn_unpriced(clients: dict[str, Any], budget: Any) -> None:
    """Say at the start which models have no price (their spend is recorded as unpriced) and
    which have no settings guard (memrl.llm.profile `guard_off`; the card records why)."""
    for role, client in clients.items():
        profile = client.profile
        if profile.guard_off is not None:
            log.warning("%s (%s): %s", role, client.model_id, profile.guard_off)
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


def _close_session(run: Opened, status: str, error: str | None, *, recount: bool = True) -> None:
    """Write the session's end into the run card. If the card cannot be written (the disk
    that stopped the run is full), a run stopping for another reason reports that reason,
    not the card's failure; a finished run reports the card."""
    card, session, objs = run.card, run.session, run.objs
    session["models"] = model_totals(run.clients, objs.embedder)
    try:  # what the episodes showed of the method (memrl.metrics.degenerate); never raises here
        from memrl.metrics.compute import load_run
        from memrl.metrics.degenerate import record_warnings

        card.data["episode_warnings"] = record_warnings(card.data.get("config") or {}, load_run(card.run_dir))
    except (OSError, ValueError) as exc:
        log.error("could not read the episodes for the run card's warnings: %s", exc)
    error = None if error is None else safe_str(error)  # the card is written whatever the message holds
    try:
        card.end_session(session, status, llm=objs.llm.totals() if objs.llm else {},
                         faults=run.tally.counts() if run.tally is not None else {},
                         spend=run.meter.session().to_dict(), budget=run.budget.to_dict(), error=error,
                         recount=recount)
    except (OSError, StorageError) as exc:
        if status == FINISHED:
            raise StorageError(card.path, str(exc), "the run card") from exc
        log.error("could not write the run card %s as well: %s", card.path, exc)


# an absolute path: the same search path whether this module is run (`python -m memrl.cli run`)
# or imported and called (`memrl run`, memrl/cli)
