"""Optional experiment tracking: per-epoch metrics to Weights & Biases (config group `logger`).

`logger=none` (default) logs nothing. `logger=wandb` logs, at each epoch end, that epoch's
SR, CSR and forgetting rate plus the run's running totals (episodes, errors, model calls,
tokens). Offline by default: the wandb run is written inside the run directory
(``<run_dir>/wandb/``, i.e. WANDB_DIR = the run directory) and can be uploaded later with
``wandb sync``. ``logger.wandb.mode=online`` goes online only when the API key is in the
environment variable named by ``logger.wandb.api_key_env`` (WANDB_API_KEY); without it the
run stays offline and says so. The wandb run id is kept in ``<run_dir>/wandb_run_id.txt`` so
a resumed run continues the same wandb run.

wandb is an optional extra (``pip install -e ".[wandb]"``) and is imported only when used.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memrl.result_keys import no_effect
from memrl.rundir import RunDir

log = logging.getLogger("memrl.logging_wandb")


class WandbSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "memrl"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = Field(default_factory=list)
    api_key_env: str = "WANDB_API_KEY"


class LoggerSettings(BaseModel):
    """An experiment tracker sees the metrics; it never changes them."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["none", "wandb"] = no_effect("none")
    wandb: WandbSettings = no_effect(WandbSettings())


def parse_settings(cfg: Mapping[str, Any] | None) -> LoggerSettings:
    """Validate the `logger` config section; a bad key raises ValueError naming it."""
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
    """The scalars to log for `epoch` (1-based) from a `memrl.metrics.compute_metrics` dict.

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

    def log_epoch(self, metrics: Mapping[str, Any], epoch: int) -> None:
        self.run.log(epoch_metrics(metrics, epoch), step=int(epoch))

    def finish(self, status: str = "finished") -> None:
        self.run.finish(exit_code=0 if status == "finished" else 1)


def resolve_mode(settings: WandbSettings) -> str:
    """online only with a key in the configured environment variable; else offline."""
    if settings.mode == "online" and not os.environ.get(settings.api_key_env):
        log.warning("logger.wandb.mode=online but $%s is not set: logging offline instead",
                    settings.api_key_env)
        return "offline"
    return settings.mode


def make_epoch_logger(cfg: Mapping[str, Any] | None, *, run_dir: str | Path,
                      config: Mapping[str, Any], wandb_module: Any = None) -> EpochLogger:
    """The logger selected by the `logger` config section (None or name=none: no-op)."""
    s = parse_settings(cfg)
    if s.name == "none" or s.wandb.mode == "disabled":
        return EpochLogger()
    return WandbLogger(s.wandb, run_dir=run_dir, config=config, wandb_module=wandb_module)
