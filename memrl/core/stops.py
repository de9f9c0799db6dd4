"""How a run ends: exit codes, the card statuses a stop leaves, the exceptions that stop or
refuse a run, and the tripwire every part of a run (the LLM client, the runner, a signal
handler) trips on a fatal event. Where a run decides to stop: memrl.control.guards."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass

from memrl.core.errors import ConfigError

# how the process ends (the shell's view); 128 + signal number for an interrupt
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_BUDGET = 3

# run card statuses a stop leaves (memrl.journal.runcard.STATUSES lists them all)
FAILED, BUDGET, INTERRUPTED = "failed", "budget", "interrupted"

# what tripped the wire
MODEL, STORAGE, SIGNAL = "model", "storage", "signal"


class RunRefused(ConfigError):
    """This launch cannot go on with the run directory as it is (locked by another process,
    damaged state, read-only, another model): nothing was done. The message says what to do."""


class RunStopped(Exception):
    """The run stopped at a commit boundary; the batch in hand was not committed."""

    def __init__(self, status: str, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.exit_code = exit_code


class Interrupted(BaseException):
    """SIGTERM / SIGINT. A BaseException (like KeyboardInterrupt), so that code catching
    `Exception` to record an episode's failure does not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass(frozen=True)
class Trip:
    kind: str      # MODEL, STORAGE or SIGNAL
    message: str


class Tripwire:
    """The first fatal event of a run, set from any thread; later ones are ignored (the
    first names the cause)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trip: Trip | None = None

    def trip(self, kind: str, message: str) -> Trip:
        with self._lock:
            if self._trip is None:
                self._trip = Trip(kind, message)
            return self._trip

    @property
    def tripped(self) -> Trip | None:
        return self._trip
