"""`memrl run [HYDRA OVERRIDES...]` (= `python -m memrl.cli run ...`): one run, or a sweep with -m.
The Hydra entry point; the run itself is memrl.control.session.execute."""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from memrl.config.frame import CONFIG_DIR
from memrl.control.session import execute
from memrl.core.errors import ConfigError
from memrl.core.rundir import RunDir
from memrl.core.stops import EXIT_CONFIG, EXIT_FAILED, Interrupted, RunStopped
from memrl.core.storage import StorageError
from memrl.llm.base import MissingKeyError


@hydra.main(version_base=None, config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    rd = RunDir(HydraConfig.get().runtime.output_dir)
    try:
        metrics = execute(cfg, rd)
    except (ConfigError, MissingKeyError) as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    except RunStopped as exc:
        print(f"memrl: the run stopped ({exc.status}) before committing the batch in hand: "
              f"{exc.message}\n  run directory: {rd}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except StorageError as exc:  # nothing half-written is committed (the journal sees to it)
        print(f"memrl: {exc}\n  run directory: {rd}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except Interrupted as exc:
        print(f"memrl: {exc}: nothing half-done was committed; run the same command to "
              f"continue\n  run directory: {rd}", file=sys.stderr)
        sys.exit(exc.exit_code)
    print(f"run directory: {rd}")
    print(f"  metrics:  {rd.metrics}  (Last {metrics['last']:.3f}, "
          f"CSR {metrics['csr']:.3f}, {metrics['n_tasks']} tasks x {metrics['epochs']} epochs)")
    print(f"  plots:    {rd.plots}")
    print(f"  run card: {rd.card}")
    print(f"  episodes: {rd.episodes}")


def check_groups(argv: list[str]) -> None:
    """Before Hydra composes: a config group option that does not exist is `memrl: ...`, exit
    2, with the group's options (memrl.config.groups)."""
    from memrl.config.groups import check_group_choices

    try:
        check_group_choices([a for a in argv if not a.startswith("-")])
    except ConfigError as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)


if __name__ == "__main__":
    check_groups(sys.argv[1:])
    main()
