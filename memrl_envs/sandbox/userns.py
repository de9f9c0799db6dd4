"""Root inside, unprivileged outside: the user namespace of a root-file-system sandbox.

As rootless containers do, uid and gid 0 inside (and the ids after it, 65,536 in all, which
`useradd` and `chown` in the tasks use) map to a range of unprivileged host ids: a range of its
own per live sandbox, leased (`lease_ids`: the lowest free of `RANGES` ranges from `HOST_BASE`),
so no two live episodes share a host uid.
Host files owned by host root then stay host root's, whatever the sandbox does: a namespace
it makes, a cgroup file system it mounts, `/proc/<pid>` of a host process; DAC sees an
unmapped owner, and the capabilities a sandbox holds are those of its own namespace only.

How the namespace is made: the harness (root) starts bubblewrap as the range's first host uid
(`setpriv`), so bubblewrap runs unprivileged and makes the user namespace itself
(`--unshare-user`), then waits (`--userns-block-fd`) until the harness has written the id
maps from outside, a range only root may grant (`Handshake`). A tree the sandbox uses as its
`/` must appear owned by the shifted ids: an idmapped mount of the one cached tree
(`idmap`), or, where the kernel or file system cannot idmap it, a copy owned by the range
(`rootfs.shifted_rootfs`, made once per range, as a rootless image is stored).

Per-uid kernel accounting (inotify instances, pipe buffers, RLIMIT_NPROC, RLIMIT_SIGPENDING,
RLIMIT_MSGQUEUE) is charged to the host uids and, up the chain of user namespaces, to the
uid that made the namespace: both are the episode's own range. The kernel state keyed by uid
alone (the keyrings) is refused by the system-call filter.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
import subprocess
import time

from memrl_envs.sandbox.uids import UidsExhausted, lease_range

HOST_BASE = 3_000_000      # the first range's host uid/gid of root inside; far above login and system ranges
ID_COUNT = 65_536          # ids mapped: 0 .. 65535 inside
RANGES = 512               # ranges of ID_COUNT host ids from HOST_BASE (up to 36,554,752)
HANDSHAKE_TIMEOUT_S = 30.0
SETPRIV = "setpriv"


class UsernsError(RuntimeError):
    """The user namespace could not be made or mapped."""


def lease_ids():
    """A range of ID_COUNT host ids no other live sandbox on this machine holds (`.uid`: its
    first id, host root of the sandbox; `.release()` once every process of the sandbox is gone).
    Raises `uids.UidsExhausted` when all RANGES are held."""
    return lease_range(HOST_BASE, ID_COUNT, RANGES)


def id_map(base: int = HOST_BASE, count: int = ID_COUNT) -> str:
    return f"0 {base} {count}\n"


def as_host_base(argv: list[str], base: int = HOST_BASE) -> list[str]:
    """`argv` run as the unprivileged host uid and gid `base`, with no supplementary groups."""
    exe = shutil.which(SETPRIV)
    if exe is None:
        raise UsernsError("`setpriv` (util-linux) is not installed")
    return [exe, f"--reuid={base}", f"--regid={base}", "--clear-groups", "--", *argv]


class Handshake:
    """The pipes through which bubblewrap says which process holds its new user namespace and
    waits for the maps. `args` go on bwrap's command line, `fds` to the process; after it
    started, `complete()` writes the maps and lets it go on."""

    def __init__(self, base: int = HOST_BASE, count: int = ID_COUNT) -> None:
        self.base, self.count = base, count
        self._block_r, self._block_w = os.pipe()
        self._info_r, self._info_w = os.pipe()
        self.args = ["--unshare-user", "--userns-block-fd", str(self._block_r),
                     "--info-fd", str(self._info_w), "--uid", "0", "--gid", "0"]
        self.fds = (self._block_r, self._info_w)

    def started(self) -> None:
        """The child has the descriptors: close this side's copies of its ends."""
        for fd in self.fds:
            os.close(fd)
        self.fds = ()

    def complete(self, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> int:
        """Read the child's pid, write its maps, release it; its pid. Raises UsernsError."""
        try:
            info = self._read_info(timeout_s)
            try:
                pid = int(json.loads(info)["child-pid"])
            except (ValueError, KeyError, TypeError) as exc:
                raise UsernsError(f"bubblewrap said no child pid ({info[:200]!r})") from exc
            try:
                with open(f"/proc/{pid}/uid_map", "w") as fh:
                    fh.write(id_map(self.base, self.count))
                with open(f"/proc/{pid}/gid_map", "w") as fh:
                    fh.write(id_map(self.base, self.count))
            except OSError as exc:
                raise UsernsError(f"could not map the sandbox's ids ({exc})") from exc
            os.write(self._block_w, b"1")
            return pid
        finally:
            self.close()

    def _read_info(self, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        data = b""
        while True:
            try:  # bwrap writes one JSON object and keeps the pipe open
                json.loads(data)
                return data
            except ValueError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise UsernsError(f"bubblewrap did not make its user namespace within {timeout_s:g} s")
            # poll, not select(): the harness may hold descriptors past 1024 (a long test run)
            poller = select.poll()
            poller.register(self._info_r, select.POLLIN | select.POLLHUP)
            if not poller.poll(int(left * 1000) + 1):
                continue
            chunk = os.read(self._info_r, 4096)
            if not chunk:
                raise UsernsError("bubblewrap ended before making its user namespace")
            data += chunk

    def close(self) -> None:
        for fd in (*self.fds, self._info_r, self._block_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = ()
        self._info_r = self._block_w = -1


@functools.lru_cache(maxsize=1)
def userns_available() -> str | None:
    """None if a sandbox can be root inside a mapped user namespace here, else why not
    (checked once, for real: root, setpriv, and bubblewrap making and entering one, on a range
    leased for the check, as an episode's is)."""
    if os.geteuid() != 0:
        return "mapping a range of host ids needs the harness to run as root"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (`bwrap`) is not installed"
    try:
        lease = lease_ids()
    except UidsExhausted as exc:
        return str(exc)
    with lease:
        return _try_userns(bwrap, lease.uid)


def _try_userns(bwrap: str, base: int) -> str | None:
    try:
        shake = Handshake(base)
        argv = as_host_base([bwrap, *shake.args, "--ro-bind", "/", "/", "--", "/bin/sh", "-c",
                             "cat /proc/self/uid_map; id -u"], base)
    except UsernsError as exc:
        return str(exc)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=shake.fds,
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    except OSError as exc:
        shake.close()
        return f"could not start bwrap: {exc}"
    shake.started()
    try:
        shake.complete(timeout_s=15)
        out, err = proc.communicate(timeout=15)
    except (UsernsError, subprocess.TimeoutExpired) as exc:
        proc.kill()
        _, err = proc.communicate()
        return f"{exc}: {err.decode(errors='replace').strip()[:300]}"
    words = out.decode().split()
    if proc.returncode != 0 or words[:3] != ["0", str(base), str(ID_COUNT)] or words[-1:] != ["0"]:
        return (f"bubblewrap could not run in a mapped user namespace (exit {proc.returncode}): "
                f"{err.decode(errors='replace').strip()[:300] or out.decode()[:200]}")
    return None
