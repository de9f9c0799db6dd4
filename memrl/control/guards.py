"""What stops a run, decided at commit boundaries so that nothing half-done is committed (the
causes, when each is seen and how the run ends: docs/design.md §8, "What stops a run").

`Gate` holds the checks: a schedule asks it `before_batch` (budget, signals, tripwire),
`after_batch` (tripwire, error rate) and commits inside `committing()`; `StopSignals` turns
SIGTERM / SIGINT into a clean interrupt (a signal during a commit waits for it). The stops
themselves (`RunStopped`, `Interrupted`, `RunRefused`, the tripwire) are memrl.core.stops.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping, Sequence

from memrl.core.stops import BUDGET, EXIT_BUDGET, FAILED, SIGNAL, Interrupted, RunStopped, Tripwire

if TYPE_CHECKING:
    from memrl.control.budget import BudgetMeter

class StopSignals:
    """SIGTERM and SIGINT as a clean interrupt: the handler trips the wire (the batch's model
    calls then fail at once) and raises `Interrupted` in the main thread, except inside
    `critical()` (a commit), where it waits until the section ends. Installed only from the
    main thread (signal handlers cannot be set elsewhere); `restore()` puts the old ones back."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, tripwire: Tripwire) -> None:
        self.tripwire = tripwire
        self.received: int | None = None
        self._depth = 0
        self._old: dict[int, Any] = {}

    def install(self) -> "StopSignals":
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in self.SIGNALS:
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.received is None
        self.received = signum
        if first:
            self.tripwire.trip(SIGNAL, f"interrupted by {signal.Signals(signum).name}")
        if self._depth == 0:
            raise Interrupted(signum)

    def check(self) -> None:
        if self.received is not None and self._depth == 0:
            raise Interrupted(self.received)

    @contextmanager
    def critical(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        self.check()


def writer_failed(record: Mapping[str, Any]) -> bool:
    """The episode's memory was stored without its model-written summary (memrl.memory.writer)."""
    return bool((record.get("info") or {}).get("writer_error"))


def counts_against_error_rate(record: Mapping[str, Any]) -> bool:
    """An episode that ended errored, or whose memory writer failed: both count against
    `runner.max_error_rate`."""
    return bool(record.get("errors")) or writer_failed(record)


def _errored(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if counts_against_error_rate(r)]


def _first_problem(record: Mapping[str, Any]) -> str:
    if record.get("errors"):
        return str(record["errors"][0])
    return f"the memory writer failed: {(record.get('info') or {}).get('writer_error')}"


def _fix(bad: Sequence[Mapping[str, Any]]) -> str:
    """What to do, by what went wrong: a model that cannot write a memory's summary (a weak
    model's empty or unusable plan or reflection) needs another way of writing memories, not a
    higher error rate."""
    writer_only = all(not r.get("errors") and (r.get("info") or {}).get("writer_error") for r in bad)
    if writer_only:
        return ("the model could not write the memories' summaries (a small model often cannot): store the "
                "episodes as they are with memory.write_mode=raw (MemRL; memory=memrl_rag sets it), or use a "
                "stronger model, then run the same command (raising runner.max_error_rate would keep memories "
                "without their summary)")
    return "fix the cause and run the same command to continue (or raise runner.max_error_rate)"


def error_rate_problem(records: Sequence[Mapping[str, Any]], *, epoch: int, batch: int,
                       errored_before: int, epoch_size: int, max_rate: float) -> str | None:
    """Why this batch must not be committed under `runner.max_error_rate`, or None.

    Batch rule: a batch of two or more episodes with more than `max_rate` of them errored (a
    batch of one is left to the epoch rule, else any single failed call would stop a run).
    Epoch rule: the epoch's errored episodes, committed ones (`errored_before`) plus this
    batch's, exceed `max_rate` times the epoch's size."""
    bad = _errored(records)
    if not bad:
        return None
    n = len(records)
    first = _first_problem(bad[0])[:300]
    fix = _fix(bad)
    if n >= 2 and len(bad) > max_rate * n:
        return (f"runner.max_error_rate: {len(bad)} of the {n} episodes of batch {batch} of "
                f"epoch {epoch} ended errored or lost their memory's summary (more than "
                f"{max_rate:.0%}); first error: {first}; {fix}")
    total = errored_before + len(bad)
    if total > max_rate * epoch_size:
        return (f"runner.max_error_rate: {total} of the {epoch_size} episodes of epoch {epoch} "
                f"ended errored or lost their memory's summary (more than {max_rate:.0%}); latest "
                f"error: {first}; {fix}")
    return None


class Gate:
    """The stop decisions of one session, asked at each commit boundary (module doc).

    `on_start` runs once, before the first batch of the session (the model preflight: a
    finished run makes no call)."""

    def __init__(self, *, max_error_rate: float = 0.5, tripwire: Tripwire | None = None,
                 budget: "BudgetMeter | None" = None, signals: StopSignals | None = None,
                 on_start: Callable[[], None] | None = None) -> None:
        self.max_error_rate = float(max_error_rate)
        self.tripwire = tripwire or Tripwire()
        self.budget = budget
        self.signals = signals
        self._on_start = on_start
        self._started = False

    def committing(self) -> ContextManager[None]:
        """Wrap a commit: a signal arriving inside waits until it is complete."""
        return self.signals.critical() if self.signals is not None else nullcontext()

    def _check_trip(self) -> None:
        if self.signals is not None:
            self.signals.check()
        trip = self.tripwire.tripped
        if trip is not None:
            raise RunStopped(FAILED, trip.message)

    def before_batch(self, n_tasks: int) -> None:
        """Before a batch is retrieved and played: stop on a signal, a tripped wire, or a
        budget the batch would pass."""
        self._check_trip()
        if self.budget is not None:
            problem = self.budget.problem(n_tasks)
            if problem is not None:
                raise RunStopped(BUDGET, problem, EXIT_BUDGET)
        if not self._started:
            self._started = True
            if self._on_start is not None:
                self._on_start()

    def after_batch(self, records: Sequence[Mapping[str, Any]], *, epoch: int, batch: int,
                    errored_before: int, epoch_size: int) -> int:
        """After a batch was played, before it is planned and committed: stop on a tripped
        wire or too many errored episodes. Returns how many of its episodes errored."""
        self._check_trip()
        problem = error_rate_problem(records, epoch=epoch, batch=batch, errored_before=errored_before,
                                     epoch_size=epoch_size, max_rate=self.max_error_rate)
        if problem is not None:
            raise RunStopped(FAILED, problem)
        return len(_errored(records))

    def committed(self, n_tasks: int) -> None:
        """A batch of `n_tasks` episodes was committed (the budget learns its cost)."""
        if self.budget is not None:
            self.budget.note_batch(n_tasks)

    def committed_episodes(self, n_tasks: int) -> None:
        """`n_tasks` episodes of an async run were committed (memrl.control.budget: the estimate per
        episode is the session's average, as spend between two async commits is no one
        episode's cost)."""
        if self.budget is not None:
            self.budget.note_episodes(n_tasks)

    def postfix(self) -> dict[str, str]:
        """What the progress bar shows about the spend (and the budget, when set)."""
        return self.budget.postfix() if self.budget is not None else {}
