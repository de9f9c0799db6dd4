"""The host uids of host-root sandboxes: one per live sandbox, on the whole machine.

When the harness runs as root, each BigCodeBench sandbox runs as a uid of its own (so its
RLIMIT_NPROC counts it alone, and nothing of one sandbox is another's by DAC). A uid is held
by a lease: an abstract unix socket named for it, bound in the host's network namespace, which
only one process can hold at a time and which the kernel releases when its holder closes it
or dies. Two sandboxes alive at once, in one harness or in several (a Hydra multirun), never
share a uid; a uid comes back only after its sandbox has ended with every process in it (the
PID namespace dies with it). The kernel state that outlives processes and is keyed by uid
alone, the keyrings, is refused to sandboxes by the system-call filter (`seccomp`).
"""

from __future__ import annotations

import random
import socket
import threading

UID_BASE = 2_000_000   # far above login and system ranges, below the root-file-system mode's
UID_SPAN = 50_000
_PREFIX = "\0memrl-sandbox-uid-"
_lock = threading.Lock()


class UidsExhausted(RuntimeError):
    pass


class UidLease:
    """A uid held for one sandbox: `uid`, then `release()` (or use it as a context manager)."""

    def __init__(self, uid: int, sock: socket.socket) -> None:
        self.uid = uid
        self._sock: socket.socket | None = sock

    def release(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "UidLease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lease_uid(rng: random.Random | None = None) -> UidLease:
    """A uid in [UID_BASE, UID_BASE + UID_SPAN) that no live sandbox on this machine holds."""
    start = (rng or random).randrange(UID_SPAN)
    with _lock:
        for i in range(UID_SPAN):
            uid = UID_BASE + (start + i) % UID_SPAN
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(f"{_PREFIX}{uid}")
            except OSError:
                sock.close()
                continue
            return UidLease(uid, sock)
    raise UidsExhausted(f"all {UID_SPAN} sandbox uids are held by live sandboxes")
