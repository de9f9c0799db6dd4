"""Do `parallel` sandboxes, each at its caps, fit this machine? Checked when an env starts:
the parallelism is lowered to what fits, or the run is refused, and the reason is kept for
the log and the run card.

A sandbox's worst case on the host is its memory cap (processes, page cache and the files on
its tmpfs folders, which live in memory), plus on cgroup v1 its TCP socket buffers (a cap of
their own, `tcp_mb_each`), and the host disk it may fill (only the small seed of its work
folder: everything it writes goes to a capped tmpfs). The machine offers what is available now
(`MemAvailable`, and the harness's own cgroup limit if lower) less a reserve for the harness
itself (bank, records, caches, the model), and the free disk where the sandboxes' folders are
made less a reserve. TCP memory is also a pool of the whole host (`net.ipv4.tcp_mem`): past its
pressure threshold the kernel squeezes every socket's buffers, the harness's API calls
included. The sandboxes' TCP caps together must fit TCP_SHARE of what is left below that
threshold.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from memrl_envs.sandbox.cgroupfs import harness_memory_limit_bytes

RESERVE_MEMORY_MB = 1024
RESERVE_DISK_MB = 1024
CEILING = 64  # sandboxes at once when nothing else bounds them


class SandboxFitError(RuntimeError):
    """Not even one sandbox at its caps fits the machine."""


# the share of the host's TCP memory below its pressure threshold (net.ipv4.tcp_mem, less what
# sockets hold now) the sandboxes' TCP caps may take together: the rest stays the host's
TCP_SHARE = 0.5
PAGE = 4096  # tcp_mem and sockstat count pages


def tcp_memory() -> tuple[int, int] | None:
    """(the host's TCP pressure threshold, TCP memory allocated now), in pages; None where /proc
    does not say."""
    try:
        pressure = int(Path("/proc/sys/net/ipv4/tcp_mem").read_text().split()[1])
        for line in Path("/proc/net/sockstat").read_text().splitlines():
            if line.startswith("TCP:"):
                words = line.split()
                return pressure, int(words[words.index("mem") + 1])
    except (OSError, ValueError, IndexError):
        pass
    return None


# the share of the host's free file table (fs.file-max less what is open) the sandboxes may
# fill at once, each at its process cap times its open-file limit: the rest stays the host's
FILE_TABLE_SHARE = 0.5


def file_table() -> tuple[int, int] | None:
    """(fs.file-max, file handles allocated now), None where /proc does not say."""
    try:
        allocated = int(Path("/proc/sys/fs/file-nr").read_text().split()[0])
        return int(Path("/proc/sys/fs/file-max").read_text().split()[0]), allocated
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class HostResources:
    memory_total_mb: int
    memory_available_mb: int
    harness_limit_mb: int | None
    disk_free_mb: int
    disk_path: str
    cpus: int


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0])  # kB
    except OSError:
        pass
    return out


def host_resources(disk_path: str | os.PathLike[str]) -> HostResources:
    info = _meminfo()
    limit = harness_memory_limit_bytes()
    path = Path(disk_path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return HostResources(memory_total_mb=info.get("MemTotal", 0) // 1024,
                         memory_available_mb=info.get("MemAvailable", info.get("MemFree", 0)) // 1024,
                         harness_limit_mb=None if limit is None else limit // 2**20,
                         disk_free_mb=shutil.disk_usage(path).free // 2**20, disk_path=str(path),
                         cpus=os.cpu_count() or 1)


@dataclass(frozen=True)
class ParallelPlan:
    """How many sandboxes may run at once, and why not more."""

    requested: int | None       # None: as many as fit
    granted: int
    memory_mb_each: int         # worst case per sandbox
    disk_mb_each: int
    memory_budget_mb: int
    disk_budget_mb: int
    memory_capped: bool         # False: `memory_mb_each` is an estimate nothing enforces
    reason: str | None = None   # why granted < requested
    host: HostResources | None = None
    files_each: int | None = None    # open files one sandbox can hold (process cap x RLIMIT_NOFILE)
    files_budget: int | None = None  # FILE_TABLE_SHARE of the host's free file table
    tcp_mb_each: int | None = None   # TCP socket buffers beyond the memory cap (cgroup v1)
    tcp_budget_mb: int | None = None  # TCP_SHARE of the host's TCP memory below its pressure threshold

    def facts(self) -> dict:
        out = asdict(self)
        out["host"] = asdict(self.host) if self.host is not None else None
        return out


def plan_parallel(requested: int | None, *, memory_mb_each: int, disk_mb_each: int,
                  disk_path: str | os.PathLike[str], memory_capped: bool, what: str = "sandboxes",
                  reserve_memory_mb: int = RESERVE_MEMORY_MB, reserve_disk_mb: int = RESERVE_DISK_MB,
                  host: HostResources | None = None, files_each: int | None = None,
                  table: tuple[int, int] | None = None, tcp_mb_each: int | None = None,
                  tcp: tuple[int, int] | None = None) -> ParallelPlan:
    """The parallelism to use; raises `SandboxFitError` when not one sandbox fits. `files_each`:
    the open files one sandbox can hold; the sandboxes at once must fit FILE_TABLE_SHARE of the
    host's free file table (`table`: fs.file-max and the handles open; None: read /proc).
    `tcp_mb_each`: the TCP socket buffers one sandbox may hold beyond its memory cap (cgroup v1);
    they count as memory, and the sandboxes at once must fit TCP_SHARE of the host's TCP memory
    below its pressure threshold (`tcp`: that threshold and what is allocated, in pages; None:
    read /proc)."""
    host = host or host_resources(disk_path)
    memory = host.memory_available_mb
    if host.harness_limit_mb is not None:
        memory = min(memory, host.harness_limit_mb)
    memory_budget = max(memory - reserve_memory_mb, 0)
    disk_budget = max(host.disk_free_mb - reserve_disk_mb, 0)
    by_memory = memory_budget // max(memory_mb_each + (tcp_mb_each or 0), 1)
    tcp_budget = by_tcp = None
    if tcp_mb_each:
        tcp = tcp if tcp is not None else tcp_memory()
        if tcp is not None:
            tcp_budget = int(TCP_SHARE * max(tcp[0] - tcp[1], 0) * PAGE // 2**20)
            by_tcp = tcp_budget // tcp_mb_each
    by_disk = disk_budget // disk_mb_each if disk_mb_each > 0 else CEILING
    table = table if table is not None else file_table()
    files_budget = by_files = None
    if files_each and table is not None:
        files_budget = int(FILE_TABLE_SHARE * max(table[0] - table[1], 0))
        by_files = files_budget // files_each
    fits = min(by_memory, by_disk, CEILING, *(b for b in (by_files, by_tcp) if b is not None))
    sizes = (f"{memory_mb_each} MB of memory{'' if memory_capped else ' (estimated, not enforced)'} "
             + (f"+ {tcp_mb_each} MB of TCP buffers " if tcp_mb_each else "")
             + f"and {disk_mb_each} MB of disk each; {memory_budget} MB of memory and {disk_budget} MB of "
             f"disk at {host.disk_path} are free beyond the harness's reserve")
    if by_files is not None:
        sizes += (f"; {files_each:,} open files each, {files_budget:,} of the host's file table "
                  f"(fs.file-max {table[0]:,}) may be theirs")
    if by_tcp is not None:
        sizes += f"; {tcp_budget} MB of the host's TCP memory below its pressure threshold may be theirs"
    if fits < 1:
        raise SandboxFitError(f"not even one of the {what} fits this machine: {sizes}. "
                              "Lower the sandbox caps or free memory/disk.")
    granted = fits if requested is None else min(requested, fits)
    reason = None
    if requested is not None and granted < requested:
        bound = min((by_memory, "memory"), (by_disk, "disk"),
                    *([(by_files, "file table")] if by_files is not None else []),
                    *([(by_tcp, "TCP memory")] if by_tcp is not None else []))[1]
        reason = f"{requested} {what} requested, {granted} fit ({bound} bound): {sizes}"
    return ParallelPlan(requested=requested, granted=int(granted), memory_mb_each=int(memory_mb_each),
                        disk_mb_each=int(disk_mb_each), memory_budget_mb=int(memory_budget),
                        disk_budget_mb=int(disk_budget), memory_capped=memory_capped, reason=reason, host=host,
                        files_each=files_each, files_budget=files_budget, tcp_mb_each=tcp_mb_each,
                        tcp_budget_mb=tcp_budget)


def log_sandbox_facts(log: logging.Logger, what: str, caps: dict, plan: ParallelPlan) -> None:
    """Say at start which caps hold, which are missing (a warning each) and the parallelism."""
    log.info("%s: caps %s; %d at once", what, "; ".join(f"{k} {v}" for k, v in caps["enforced"].items()),
             plan.granted)
    for cap, why in caps["missing"].items():
        log.warning("%s: no %s cap: %s", what, cap, why)
    if plan.reason:
        log.warning("%s: parallelism lowered: %s", what, plan.reason)
