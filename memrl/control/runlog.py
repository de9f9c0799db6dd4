"""The log file Hydra keeps in a run directory (`run.log`), written by a handler that never
takes the run down with it.

Hydra opens its job log before memrl's code runs. On a read-only run directory a plain
`logging.FileHandler` fails right there with a traceback about logging configuration; on a
full disk every later log line prints a "--- Logging error ---" traceback over the message
that matters. `RunLogHandler` opens the file on first use and, if it cannot write, says so
once on stderr and drops the file output; memrl.control.session then reports the run directory itself
("read-only", "disk full") with its own message. configs/config.yaml puts it in Hydra's
`job_logging` in place of the FileHandler. Each line is made safe first (memrl.core.safe_text), so
a message carrying a lone surrogate or a terminal escape is written, escaped.
"""

from __future__ import annotations

import logging
import sys

from memrl.core.safe_text import safe_str


class RunLogHandler(logging.FileHandler):
    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None,
                 delay: bool = True, errors: str | None = None) -> None:
        super().__init__(filename, mode=mode, encoding=encoding, delay=True, errors=errors)
        self.failure: OSError | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is not None:
            return
        if self.stream is None:
            try:
                self.stream = self._open()
            except OSError as exc:
                self._give_up(exc)
                return
        logging.StreamHandler.emit(self, record)

    def format(self, record: logging.LogRecord) -> str:
        """The line as written: no lone surrogate (it would not encode) and no terminal escape
        (memrl.core.safe_text), traceback included, whatever the message carried."""
        return safe_str(super().format(record))

    def handleError(self, record: logging.LogRecord) -> None:  # logging's name
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self._give_up(exc)
        else:
            super().handleError(record)

    def _give_up(self, exc: OSError) -> None:
        self.failure = exc
        print(f"memrl: cannot write the run's log {self.baseFilename} ({exc.strerror or exc}); "
              "logging to the console only", file=sys.stderr)
