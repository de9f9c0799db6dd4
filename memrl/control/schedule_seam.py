"""What a schedule (memrl.control.batch_schedule, async_schedule) needs of the run it plays: the
runner's settings, gate, tally and bank version, and its steps (retrieve, play, commit the
played episodes, make grouped commits durable, end an epoch). memrl.control.runner.Runner is the one implementation; the
schedules name this protocol, so they do not import the runner that drives them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from tqdm import tqdm

    from memrl.config.sections import RunnerSettings
    from memrl.control.guards import Gate
    from memrl.control.live import RunTally
    from memrl.core.records import EpisodeRecord, RetrievedMemory, Task
    from memrl.core.rundir import RunDir
    from memrl.journal.launches import LaunchLog
    from memrl.memory.base import LearnItem


class ScheduledRun(Protocol):
    s: "RunnerSettings"
    gate: "Gate"
    tally: "RunTally"
    seed: int
    version: int  # episode updates committed to the bank
    tail_start: int  # the byte of episodes.jsonl where the records after the last epoch end begin
    workers: int
    run_dir: "RunDir"
    launch_log: "LaunchLog"

    def retrieve(self, task: "Task", seed: int) -> list["RetrievedMemory"]: ...

    def play(self, epoch: int, batch: int, task: "Task", memories: list["RetrievedMemory"],
             learn: bool = True) -> tuple["EpisodeRecord", "LearnItem"]: ...

    def commit_played(self, epoch: int, batch: int, played: Sequence[tuple["EpisodeRecord", "LearnItem"]], *,
                      bar: "tqdm", errored_before: int, epoch_size: int, bank_versions: Sequence[int] | None,
                      in_flight: int | None = None) -> int: ...

    def end_epoch(self, epoch: int) -> None: ...

    def sync(self) -> None: ...

    def progress(self, total: int, done: int, desc: str) -> "tqdm": ...
