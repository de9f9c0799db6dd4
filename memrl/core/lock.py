"""The run directory's lock (`state/lock`): one process at a time may run a run directory.

An exclusive `fcntl.flock` on the lock file, taken before anything reads the run's state
(run card, checkpoint, journal, bank). The holder writes its pid, host, start time and
command line into the file; a second launch is refused with them. The kernel drops the lock
when the holder exits, however it exits (SIGKILL included), so a stale file never blocks:
the next launch simply takes the lock. On a file system without flock support (some network
mounts) the lock is refused with that reason.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from memrl.core.stops import RunRefused
from memrl.core.storage import diagnose


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

class RunLocked(RunRefused):
    """Another process holds the run directory."""

    def __init__(self, run_dir: Path, holder: dict[str, Any]) -> None:
        self.holder = holder
        who = (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"
               + (f", started {holder['started']}" if holder.get("started") else ""))
        super().__init__(f"{run_dir} is in use by another run ({who}); wait for it to end or "
                         f"stop it (kill {holder.get('pid', '<pid>')} on {holder.get('host', 'its host')}), "
                         "then run the same command again")


class RunLock:
    """`with RunLock(rd.lock, run_dir=rd.root): ...` or acquire()/release()."""

    def __init__(self, path: str | os.PathLike[str], *, run_dir: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path)
        self.run_dir = Path(run_dir) if run_dir is not None else self.path.parent.parent
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "RunLock":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunRefused(f"the run directory {self.run_dir} cannot be written: "
                             f"{diagnose(self.path, exc) or exc} ({self.path}); a run needs to write "
                             "its directory, even to find that it is finished") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = self._read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise RunLocked(self.run_dir, holder) from exc
            raise RunRefused(f"cannot lock the run directory {self.run_dir} ({self.path}): "
                             f"{exc.strerror or exc}") from exc
        self._fd = fd
        try:
            info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                               "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                               "argv": sys.argv[1:]}).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, info, 0)
        except OSError as exc:  # a read-only or full file system: the lock itself holds
            self.release()
            raise RunRefused(f"the run directory {self.run_dir} cannot be written: "
                             f"{diagnose(self.path, exc) or exc} ({self.path})") from exc
        return self

    @staticmethod
    def _read_holder(fd: int) -> dict[str, Any]:
        # the holder writes its details right after taking the lock: give it a moment
        for _ in range(20):
            try:
                raw = os.pread(fd, 65536, 0)
            except OSError:
                return {}
            if raw:
                try:
                    data = json.loads(raw)
                    return data if isinstance(data, dict) else {}
                except ValueError:
                    pass
            time.sleep(0.05)
        return {}

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # a later reader finds no stale holder
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
