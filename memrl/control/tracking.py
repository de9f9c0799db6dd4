"""Optional experiment tracking: per-epoch metrics to Weights & Biases (config group `logger`).

`logger=none` (default) logs nothing. `logger=wandb` logs, at each epoch end, that epoch's
SR, CSR and forgetting rate plus the run's running totals (episodes, errors, model calls,
tokens); a histogram of the Q of every memory in the bank at the epoch's end (`bank/q`,
from the run's bank-update log, memrl.banklog) and of the injected memories' Q
(`injected/q`); and the epoch's episodes as a table (`episodes`: task, outcome, steps,
reward, tokens, cost, injected and written memory ids). When the run ends it builds this
run's report (memrl.report, into `<run_dir>/report/`) and logs its tables and figures, with
the per-run plots, as one artifact (type `report`). Offline by default: the wandb run is
written inside the run directory (``<run_dir>/wandb/``, i.e. WANDB_DIR = the run directory)
and can be uploaded later with ``wandb sync``. ``logger.wandb.mode=online`` goes online only
when the API key is in the environment variable named by ``logger.wandb.api_key_env``
(WANDB_API_KEY); without it the run stays offline and says so. The wandb run id is kept in
``<run_dir>/wandb_run_id.txt`` so a resumed run continues the same wandb run.

wandb is an optional extra (``pip install -e ".[wandb]"``) and is imported only when used.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from memrl.config.sections import LoggerSettings, WandbSettings
from memrl.core.rundir import RunDir

log = logging.getLogger("memrl.control.tracking")


def parse_settings(cfg: LoggerSettings | Mapping[str, Any] | None) -> LoggerSettings:
    """The `logger` section's settings: as validated already (a run validates every section
    first, memrl.config.validate), or validated here; a bad key raises ValueError naming it."""
    if isinstance(cfg, LoggerSettings):
        return cfg
    if cfg is None:
        return LoggerSettings()
    from omegaconf import DictConfig, OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    try:
        return LoggerSettings.model_validate(data)
    except ValidationError as exc:
        msgs = [f"logger.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ValueError("invalid logger configuration:\n  " + "\n  ".join(msgs)) from exc


def epoch_metrics(metrics: Mapping[str, Any], epoch: int) -> dict[str, float]:
    """The scalars to log for `epoch` (1-based) from a `memrl.metrics.compute.compute_metrics` dict.

    Per-epoch curves are indexed at this epoch (`sr`, `csr` from `csr_curve`, `forgetting`
    from epoch 2 on); other numbers are logged as they are; dicts of numbers (tokens) are
    flattened as ``tokens/prompt``; other lists are left out.
    """
    out: dict[str, float] = {"epoch": float(epoch)}
    curves = {"sr": ("sr", epoch - 1), "csr": ("csr_curve", epoch - 1),
              "forgetting": ("forgetting", epoch - 2)}
    for name, (key, i) in curves.items():
        seq = metrics.get(key)
        if isinstance(seq, (list, tuple)) and 0 <= i < len(seq) and seq[i] is not None:
            out[name] = float(seq[i])
    skip = {"sr", "csr", "csr_curve", "forgetting", "last", "epochs"}
    for key, value in metrics.items():
        if key in skip:
            continue
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, (int, float)):
            out[key] = float(value)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[f"{key}/{k}"] = float(v)
    return out


class EpochLogger:
    """The no-op logger (`logger=none`); the interface the run calls."""

    active = False

    def log_epoch(self, metrics: Mapping[str, Any], epoch: int) -> None:
        pass

    def finish(self, status: str = "finished") -> None:
        pass


EPISODE_COLUMNS = ["epoch", "batch", "task_id", "success", "outcome", "outcome_detail", "steps",
                   "reward", "prompt_tokens", "completion_tokens", "cost_usd", "injected",
                   "written", "errors"]


def episode_rows(run_dir: str | Path, epoch: int) -> list[list[Any]]:
    """The epoch's episodes as rows of `EPISODE_COLUMNS`."""
    from memrl.core.records import read_episodes

    rows = []
    for r in read_episodes(RunDir(run_dir).episodes, light=True):
        if int(r.epoch) != int(epoch):
            continue
        rows.append([r.epoch, r.batch, r.task_id, bool(r.success), r.outcome, r.outcome_detail,
                     r.steps, r.reward, int(r.tokens.get("prompt", 0)),
                     int(r.tokens.get("completion", 0)), float(r.cost_usd or 0.0),
                     " ".join(str(m["id"]) for m in r.injected), r.written or "",
                     "; ".join(r.errors)])
    return rows


def q_values(run_dir: str | Path, epoch: int) -> dict[str, list[float]]:
    """`bank/q`: the bank's Q at the end of `epoch` (from bank_updates.jsonl; empty for a run
    without a bank or without the log); `injected/q`: the Q of the memories injected in it."""
    from memrl.core.records import iter_jsonl
    from memrl.journal.banklog import BankHistory

    rd = RunDir(run_dir)
    ends = BankHistory.read(rd).q_at_epoch_end()
    injected = [float(m["q"]) for r in iter_jsonl(rd.episodes) if int(r["epoch"]) == int(epoch)
                for m in r.get("injected") or []]
    return {"bank/q": sorted(ends.get(int(epoch), {}).values()), "injected/q": injected}


def _run_id(run_dir: Path) -> str:
    path = RunDir(run_dir).wandb_run_id
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    rid = uuid.uuid4().hex[:12]
    path.write_text(rid + "\n")
    return rid


class WandbLogger(EpochLogger):
    active = True

    def __init__(self, settings: WandbSettings, *, run_dir: str | Path, config: Mapping[str, Any],
                 name: str | None = None, wandb_module: Any = None):
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if wandb_module is None:
            try:
                import wandb as wandb_module
            except ImportError as exc:
                raise RuntimeError("logger=wandb needs the wandb package: pip install -e \".[wandb]\"") from exc
        self.wandb = wandb_module
        self.mode = resolve_mode(settings)
        key = os.environ.get(settings.api_key_env) if self.mode == "online" else None
        group = settings.group
        if group is None:
            env = (config.get("env") or {}).get("name", "?")
            mem = (config.get("memory") or {}).get("name", "?")
            group = f"{env}/{mem}"
        self.run = self.wandb.init(
            project=settings.project, entity=settings.entity, group=group, tags=list(settings.tags),
            name=name or run_dir.name, dir=str(run_dir), id=_run_id(run_dir), resume="allow",
            mode=self.mode, config=dict(config),
            settings=self.wandb.Settings(api_key=key, console="off", silent=True))
        self.dir = RunDir(run_dir).wandb
        self.run_dir = RunDir(run_dir)

    def log_epoch(self, metrics: Mapping[str, Any], epoch: int) -> None:
        row: dict[str, Any] = dict(epoch_metrics(metrics, epoch))
        for key, values in q_values(self.run_dir, epoch).items():
            if values:
                row[key] = self.wandb.Histogram(values)
        row["episodes"] = self.wandb.Table(columns=EPISODE_COLUMNS,
                                           data=episode_rows(self.run_dir, epoch))
        self.run.log(row, step=int(epoch))

    def log_report(self) -> None:
        """This run's report and per-run plots as one artifact; a failure to build it is
        logged, never raised (the run itself is done)."""
        from memrl.report import write_report

        rd = self.run_dir
        try:
            # a run that stopped is reported too, marked [unfinished] (memrl.report.inputs)
            write_report([rd.root], rd.report, n_boot=2000, include_unfinished=True, warn=log.warning)
        except Exception as exc:  # tracking must never fail the run
            log.warning("wandb: no report artifact (%s: %s)", type(exc).__name__, exc)
            return
        art = self.wandb.Artifact(name=f"report-{self.run.id}", type="report",
                                  description=f"memrl report of {rd.root}")
        art.add_dir(str(rd.report), name="report")
        if rd.plots.is_dir():
            art.add_dir(str(rd.plots), name="plots")
        self.run.log_artifact(art)

    def finish(self, status: str = "finished") -> None:
        self.log_report()
        self.run.finish(exit_code=0 if status == "finished" else 1)


def resolve_mode(settings: WandbSettings) -> str:
    """online only with a key in the configured environment variable; else offline."""
    if settings.mode == "online" and not os.environ.get(settings.api_key_env):
        log.warning("logger.wandb.mode=online but $%s is not set: logging offline instead",
                    settings.api_key_env)
        return "offline"
    return settings.mode


def make_epoch_logger(cfg: LoggerSettings | Mapping[str, Any] | None, *, run_dir: str | Path,
                      config: Mapping[str, Any], wandb_module: Any = None) -> EpochLogger:
    """The logger the `logger` section selects (None or name=none: no-op); a run hands it
    the validated `LoggerSettings` (memrl.control.session)."""
    s = parse_settings(cfg)
    if s.name == "none" or s.wandb.mode == "disabled":
        return EpochLogger()
    return WandbLogger(s.wandb, run_dir=run_dir, config=config, wandb_module=wandb_module)
