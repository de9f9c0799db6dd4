"""Storage failures a run must stop on, named by path and cause.

A write that fails (a full disk, a read-only file system, a corrupt SQLite file) is not an
episode's problem: recorded as an episode error it would be committed, counted as a failure
and never replayed. Every writer of run state or of a cache raises `StorageError` instead,
whose message says which file and why, in words a user can act on:

    with writing(rd.episodes, "the episode records"):
        append_jsonl(rd.episodes, rows)

`diagnose` reads the cause from the exception (errno, SQLite's message) and, when a library
hides it (Chroma reports a full disk as "Error in compaction: ..."), from the file system
that holds the path (read-only flag, free space).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# below this much free space a failed write is put down to a full disk
FULL_BELOW_BYTES = 1 << 20

_ERRNO_CAUSES = {
    errno.ENOSPC: "the disk is full (no space left on device)",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "an I/O error (the disk may be failing)",
}
# SQLite's own wording of the same causes (sqlite3 carries no errno)
_SQLITE_CAUSES = (
    ("database or disk is full", _ERRNO_CAUSES[errno.ENOSPC]),
    ("readonly database", "the file is read-only (read-only file system or permissions)"),
    ("file is not a database", "the file is corrupt (not an SQLite database)"),
    ("database disk image is malformed", "the file is corrupt (malformed SQLite database)"),
    ("disk i/o error", _ERRNO_CAUSES[errno.EIO]),
)


class StorageError(RuntimeError):
    """A file the run must write (or read back) could not be: `path`, `cause` (words) and the
    original exception as `__cause__`."""

    def __init__(self, path: str | os.PathLike[str], cause: str, what: str = "", hint: str = "",
                 verb: str = "write") -> None:
        self.path = Path(path)
        self.cause = cause
        self.what = what
        label = f"{what} ({self.path})" if what else str(self.path)
        super().__init__(f"cannot {verb} {label}: {cause}" + (f"; {hint}" if hint else ""))


def _existing(path: Path) -> Path:
    """The nearest existing folder at or above `path` (what statvfs can look at)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def filesystem_cause(path: str | os.PathLike[str]) -> str | None:
    """Why the file system holding `path` refuses writes, if it plainly does: read-only, or
    (almost) no free space left."""
    try:
        st = os.statvfs(_existing(Path(path)))
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return _ERRNO_CAUSES[errno.EROFS]
    free = st.f_bavail * st.f_frsize
    if free < FULL_BELOW_BYTES:
        return f"the disk is full ({free // 1024} KiB free)"
    return None


def diagnose(path: str | os.PathLike[str], exc: BaseException) -> str | None:
    """A cause in words for a failed write of `path`, or None when it does not look like a
    storage problem (then the original error should surface as it is)."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _ERRNO_CAUSES:
            return _ERRNO_CAUSES[e.errno]
        if isinstance(e, sqlite3.Error):
            text = str(e).lower()
            for needle, cause in _SQLITE_CAUSES:
                if needle in text:
                    return cause
    return filesystem_cause(path)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


@contextmanager
def writing(path: str | os.PathLike[str], what: str, *, hint: str = "", verb: str = "write",
            any_error: bool = False) -> Iterator[None]:
    """Turn a failed write of `path` into a `StorageError` naming it and the cause.

    OSError and sqlite3 errors always become one; with `any_error` (a library that wraps
    storage failures in its own exceptions, e.g. Chroma), any exception does when the file
    system shows a cause (read-only, full), and passes unchanged otherwise."""
    try:
        yield
    except StorageError:
        raise
    except (OSError, sqlite3.Error) as exc:
        cause = diagnose(path, exc) or f"{type(exc).__name__}: {exc}"
        raise StorageError(path, cause, what, hint, verb) from exc
    except Exception as exc:
        cause = diagnose(path, exc) if any_error else None
        if cause is None:
            raise
        raise StorageError(path, f"{cause} ({type(exc).__name__}: {exc})", what, hint, verb) from exc
