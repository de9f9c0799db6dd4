"""Host uids held by live sandboxes: one uid per host-root sandbox, one range per
root-file-system sandbox, unique on the whole machine.

When the harness runs as root, each BigCodeBench sandbox runs as a uid of its own (`lease_uid`),
and each Lifelong-OS episode maps its user namespace's ids to a range of host uids of its own
(`lease_range`, through `userns.lease_ids`). So what the kernel counts per host uid across
namespaces (RLIMIT_NPROC, inotify instances and watches, fanotify groups, pipe buffer pages,
RLIMIT_MSGQUEUE, RLIMIT_SIGPENDING) counts one sandbox alone, and nothing of one sandbox is
another's by DAC. A uid or range is held by a lease: an abstract unix socket named for it,
bound in the host's network namespace, which only one process can hold at a time and which the
kernel releases when its holder closes it or dies. Two sandboxes alive at once, in one harness
or in several (a Hydra multirun), never share one; it comes back only after its sandbox has
ended with every process in it (the PID namespace dies with it). The kernel state that
outlives processes and is keyed by uid alone, the keyrings, is refused to sandboxes by the
system-call filter (`seccomp`).
"""

from __future__ import annotations

import random
import socket
import threading

UID_BASE = 2_000_000   # far above login and system ranges, below the root-file-system mode's
UID_SPAN = 50_000
_PREFIX = "\0memrl-sandbox-uid-"
_RANGE_PREFIX = "\0memrl-sandbox-ids-"
_lock = threading.Lock()


class UidsExhausted(RuntimeError):
    pass


class UidLease:
    """A uid held for one sandbox: `uid` (for a range: its first uid), then `release()` (or use
    it as a context manager)."""

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


def _hold(name: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
    except OSError:
        sock.close()
        return None
    return sock


def lease_uid(rng: random.Random | None = None) -> UidLease:
    """A uid in [UID_BASE, UID_BASE + UID_SPAN) that no live sandbox on this machine holds."""
    start = (rng or random).randrange(UID_SPAN)
    with _lock:
        for i in range(UID_SPAN):
            uid = UID_BASE + (start + i) % UID_SPAN
            sock = _hold(f"{_PREFIX}{uid}")
            if sock is not None:
                return UidLease(uid, sock)
    raise UidsExhausted(f"all {UID_SPAN} sandbox uids are held by live sandboxes")


def lease_range(first: int, size: int, slots: int) -> UidLease:
    """The lowest of the `slots` ranges of `size` uids from `first` that no live sandbox on this
    machine holds (lowest first: whatever is made per range, e.g. a tree owned by its ids, is
    made for as few ranges as were ever live at once)."""
    with _lock:
        for slot in range(slots):
            base = first + slot * size
            sock = _hold(f"{_RANGE_PREFIX}{base}")
            if sock is not None:
                return UidLease(base, sock)
    raise UidsExhausted(f"all {slots} id ranges of {size} from {first} are held by live sandboxes")
