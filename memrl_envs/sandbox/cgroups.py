"""Caps on a whole sandbox, not on each of its processes: a memory cgroup (swap off) and a pids
cgroup, on cgroup v1 or v2, whichever the machine mounts.

`SandboxCgroup` makes one sandbox's group(s), puts a process in them (`join_files`: the
process writes its own pid there before it starts the sandbox, so everything inside
inherits the group), reads usage and peaks from the host side, and at the end kills whatever
is left and removes the groups. Where the machine lets no cgroup be made (not root, no
controller mounted, a v2 tree whose controllers cannot be enabled), `missing` says which cap
is absent and why; `cgroup_support()` probes that once per process, so a run can say so on
its card at start.

Memory counts what the kernel charges the group: its processes' memory, the page cache they
fault in (reclaimable), the files they write to a tmpfs (a work folder of capped size costs
memory, not disk) and the kernel objects charged with them (page tables, kernel stacks, most
slab objects: dentries, inodes, pipe buffers). TCP socket buffers are charged only where asked
for: on cgroup v1 a group's TCP memory is a counter of its own, limited by
`memory.kmem.tcp.limit_in_bytes` (`tcp_mb`; before that is written, a group's sockets are not
charged at all, and loopback traffic inside a sandbox's network namespace took host memory
beyond every cap, issue 32); cgroup v2 charges socket buffers to the memory cap itself.

Where the groups go: v1, under the harness's own group in each hierarchy (so any limit on the
harness also bounds its sandboxes), else at the hierarchy's root; v2, under the harness's own
group where its controllers can be handed down, else at the root of the mount.
"""

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from memrl_envs.sandbox.cgroupfs import MEMORY, PIDS, _delegated, _inside, _Mount, _mounts, _own_groups, _read_int

PREFIX = "memrl-sbx-"
TCP_LIMIT_V1 = "memory.kmem.tcp.limit_in_bytes"
_STALE_S = 300.0  # empty groups older than this, left by a harness that was killed, are removed
_LIVE: "weakref.WeakSet[SandboxCgroup]" = weakref.WeakSet()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _read_key(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _sweep(parent: Path, prefix: str) -> None:
    """Remove groups of sandboxes whose harness was killed: an empty group older than a few
    minutes (a group that still holds a process cannot be removed)."""
    try:
        old = list(parent.glob(prefix + "*"))
    except OSError:
        return
    for group in old:
        try:
            if time.time() - group.stat().st_mtime < _STALE_S:
                continue
            for child in group.iterdir():
                if child.is_dir():
                    child.rmdir()
            group.rmdir()
        except OSError:
            pass


@dataclass
class _Group:
    cap: str
    version: int
    path: Path


@dataclass(eq=False)  # identity: kept in the set of live groups
class SandboxCgroup:
    """The cgroups of one sandbox. Make it with `SandboxCgroup.create`; `close()` at the end.

    `split` names sub-groups (e.g. the Lifelong-OS shell's ``srv`` and its commands' ``cmd``),
    each with its own pids cap; processes then join a sub-group, the memory cap covering all.
    """

    memory_mb: int | None
    pids_max: int | None
    split: dict[str, int | None] = field(default_factory=dict)
    prefix: str = PREFIX
    tcp_mb: int | None = None   # TCP socket buffers (cgroup v1's own counter; v2: in memory_mb)
    groups: dict[str, _Group] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, *, memory_mb: int | None, pids_max: int | None,
               split: Mapping[str, int | None] | None = None, prefix: str = PREFIX,
               tcp_mb: int | None = None) -> "SandboxCgroup":
        cg = cls(memory_mb=memory_mb, pids_max=pids_max, split=dict(split or {}), prefix=prefix,
                 tcp_mb=tcp_mb if memory_mb is not None else None)
        _LIVE.add(cg)
        wanted = {cap: value for cap, value in ((MEMORY, memory_mb), (PIDS, pids_max)) if value is not None}
        if not wanted:
            return cg
        if os.geteuid() != 0 and not _delegated():
            for cap in wanted:
                cg.missing[cap] = "the harness is not root and holds no delegated cgroup"
            return cg
        mounts = _mounts()
        own = _own_groups()
        name = prefix + uuid.uuid4().hex[:12]
        for cap in list(wanted):  # v1 first: one hierarchy per controller
            mount = next((m for m in mounts if m.version == 1 and cap in m.controllers), None)
            if mount is None:
                continue
            why = cg._make_v1(cap, mount, own.get(cap), name)
            if why is None:
                del wanted[cap]
            else:
                cg.missing[cap] = why
        if wanted:
            v2 = next((m for m in mounts if m.version == 2 and set(wanted) & m.controllers), None)
            if v2 is not None:
                cg._make_v2(list(wanted), v2, own.get(""), name)
            for cap in wanted:
                if cap not in cg.groups:
                    cg.missing.setdefault(cap, f"no cgroup hierarchy here offers the {cap} controller")
                else:
                    cg.missing.pop(cap, None)
        return cg

    @staticmethod
    def live() -> list["SandboxCgroup"]:
        """The sandboxes of this process whose groups exist now (for watching them from the host)."""
        return [cg for cg in list(_LIVE) if cg.groups]

    # -- making the groups ------------------------------------------------------------------
    def _limit(self, cap: str, version: int, path: Path) -> None:
        if cap == MEMORY:
            limit = str(int(self.memory_mb) * 2**20)
            if version == 1:
                _write(path / "memory.limit_in_bytes", limit)
                if (path / "memory.memsw.limit_in_bytes").exists():  # memory + swap = memory: no swap
                    _write(path / "memory.memsw.limit_in_bytes", limit)
                try:
                    _write(path / "memory.swappiness", "0")
                except OSError:
                    pass
                if self.tcp_mb is not None:
                    self._limit_tcp(path / TCP_LIMIT_V1)
            else:
                _write(path / "memory.max", limit)
                if (path / "memory.swap.max").exists():
                    _write(path / "memory.swap.max", "0")
        else:
            _write(path / "pids.max", str(int(self.pids_max)))

    def _limit_tcp(self, path: Path) -> None:
        """cgroup v1: charge and cap the group's TCP socket buffers (before any socket exists;
        a cap that cannot be set is named missing, the memory cap stays)."""
        if not path.exists():
            self.missing["tcp"] = "this kernel's cgroup v1 memory controller has no kmem.tcp limit"
            return
        try:
            _write(path, str(int(self.tcp_mb) * 2**20))
        except OSError as exc:
            self.missing["tcp"] = f"cannot set {path}: {exc.strerror or exc}"

    def _make_v1(self, cap: str, mount: _Mount, own: str | None, name: str) -> str | None:
        last = "no writable parent"
        for parent in dict.fromkeys(p for p in (_inside(mount, own), mount.path) if p is not None):
            path = parent / name
            try:
                _sweep(parent, self.prefix)
                path.mkdir()
            except OSError as exc:
                last = f"cannot make a {cap} cgroup under {parent}: {exc.strerror or exc}"
                continue
            try:
                self._limit(cap, 1, path)
                if cap == PIDS:
                    for child, cap_value in self.split.items():
                        (path / child).mkdir()
                        if cap_value is not None:
                            _write(path / child / "pids.max", str(int(cap_value)))
                self.groups[cap] = _Group(cap, 1, path)
                return None
            except OSError as exc:
                last = f"cannot set the {cap} cap in {path}: {exc.strerror or exc}"
                _remove_tree(path)
        return last

    def _make_v2(self, caps: list[str], mount: _Mount, own: str | None, name: str) -> None:
        why = "no writable parent"
        for parent in dict.fromkeys(p for p in (_inside(mount, own), mount.path) if p is not None):
            usable = [c for c in caps if _enable(parent, c)]
            if not usable:
                why = f"cannot hand the {'/'.join(caps)} controller(s) down from {parent}"
                continue
            path = parent / name
            try:
                _sweep(parent, self.prefix)
                path.mkdir()
            except OSError as exc:
                why = f"cannot make a cgroup under {parent}: {exc.strerror or exc}"
                continue
            try:
                for cap in usable:
                    self._limit(cap, 2, path)
                if self.split:
                    for cap in usable:
                        _write(path / "cgroup.subtree_control", f"+{cap}")
                    for child, cap_value in self.split.items():
                        (path / child).mkdir()
                        if cap_value is not None and PIDS in usable:
                            _write(path / child / "pids.max", str(int(cap_value)))
                for cap in usable:
                    self.groups[cap] = _Group(cap, 2, path)
                return
            except OSError as exc:
                why = f"cannot set the caps in {path}: {exc.strerror or exc}"
                _remove_tree(path)
        for cap in caps:
            self.missing[cap] = why

    # -- joining --------------------------------------------------------------------------
    def _member_dir(self, group: _Group, child: str | None) -> Path:
        if child is None or not self.split:
            return group.path
        if group.version == 1 and group.cap == MEMORY:
            return group.path  # v1 memory has no sub-groups: the cap covers the whole sandbox
        return group.path / child

    def join_files(self, child: str | None = None) -> list[str]:
        """The `cgroup.procs` files a process writes its pid to, to enter this sandbox's groups
        (with `split`: the sub-group `child`)."""
        if self.split and child is None:
            raise ValueError("a split cgroup is joined through one of its sub-groups")
        dirs = dict.fromkeys(self._member_dir(g, child) for g in self.groups.values())
        return [str(d / "cgroup.procs") for d in dirs]

    def _mover(self) -> _Group | None:
        return self.groups.get(PIDS) or next((g for g in self.groups.values() if g.version == 2), None)

    def move_file(self, child: str) -> str | None:
        """The one file that moves a process already in the sandbox into sub-group `child`
        (None: nothing to move, e.g. no pids cgroup)."""
        group = self._mover()
        return str(self._member_dir(group, child) / "cgroup.procs") if group is not None else None

    def delegate_moves(self, child: str, uid: int, gid: int) -> None:
        """Let processes of host uid `uid` move themselves into sub-group `child`: its
        `cgroup.procs` becomes theirs (on v2 also the sandbox group's, which a move between
        sub-groups needs). Every limit file stays root's."""
        group = self._mover()
        if group is None:
            return
        os.chown(self._member_dir(group, child) / "cgroup.procs", uid, gid)
        if group.version == 2:
            os.chown(group.path / "cgroup.procs", uid, gid)

    @property
    def moves_need_host_namespace(self) -> bool:
        """cgroup v2 lets a process move only between groups under the root of its cgroup
        namespace: a sandbox whose processes move between sub-groups keeps the host's."""
        group = self._mover()
        return bool(self.split) and group is not None and group.version == 2

    def preexec(self, child: str | None = None):
        """A function to run in a child process before it execs: it joins the groups."""
        files = self.join_files(child)

        def join() -> None:
            pid = str(os.getpid())
            for path in files:
                with open(path, "w") as fh:
                    fh.write(pid)

        return join

    # -- reading ---------------------------------------------------------------------------
    def memory_bytes(self) -> int | None:
        g = self.groups.get(MEMORY)
        if g is None:
            return None
        return _read_int(g.path / ("memory.usage_in_bytes" if g.version == 1 else "memory.current"))

    def tcp_peak_bytes(self) -> int | None:
        """The most TCP socket memory the group held (cgroup v1's own counter; None elsewhere)."""
        g = self.groups.get(MEMORY)
        if g is None or g.version != 1 or self.tcp_mb is None:
            return None
        return _read_int(g.path / "memory.kmem.tcp.max_usage_in_bytes")

    def memory_peak_bytes(self) -> int | None:
        g = self.groups.get(MEMORY)
        if g is None:
            return None
        return _read_int(g.path / ("memory.max_usage_in_bytes" if g.version == 1 else "memory.peak"))

    def oom_kills(self) -> int | None:
        g = self.groups.get(MEMORY)
        if g is None:
            return None
        return _read_key(g.path / ("memory.oom_control" if g.version == 1 else "memory.events"), "oom_kill")

    def pids_current(self) -> int | None:
        g = self.groups.get(PIDS)
        return _read_int(g.path / "pids.current") if g is not None else None

    def pids_refused(self) -> int | None:
        """How many forks the pids cap refused."""
        g = self.groups.get(PIDS)
        if g is None:
            return None
        total = 0
        for d in [g.path, *(g.path / c for c in self.split)]:
            total += _read_key(d / "pids.events", "max") or 0
        return total

    def procs(self) -> set[int]:
        out: set[int] = set()
        for g in self.groups.values():
            for d in [g.path, *(g.path / c for c in self.split)]:
                try:
                    out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
                except (OSError, ValueError):
                    pass
        return out

    def usage(self) -> dict[str, int | None]:
        return {"memory_peak_bytes": self.memory_peak_bytes(), "oom_kills": self.oom_kills(),
                "pids_refused": self.pids_refused()}

    # -- the end ----------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL every process still in the groups."""
        for g in self.groups.values():
            if g.version == 2 and (g.path / "cgroup.kill").exists():
                try:
                    _write(g.path / "cgroup.kill", "1")
                except OSError:
                    pass
        for _ in range(100):
            left = self.procs()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def close(self) -> None:
        """Kill what is left, then remove the groups (retrying while the kernel lets go)."""
        if not self.groups:
            return
        self.kill()
        for path in dict.fromkeys(g.path for g in self.groups.values()):
            _remove_tree(path, retries=100)
        self.groups.clear()

    def facts(self) -> dict[str, str]:
        out = {cap: f"cgroup v{g.version}" for cap, g in self.groups.items()}
        memory = self.groups.get(MEMORY)
        if self.tcp_mb is not None and memory is not None and "tcp" not in self.missing:
            out["tcp"] = ("cgroup v1 memory.kmem.tcp, beside the memory cap" if memory.version == 1
                          else "cgroup v2: charged to the memory cap")
        return out


def _remove_tree(path: Path, retries: int = 1) -> None:
    for attempt in range(retries):
        try:
            for child in path.iterdir():
                if child.is_dir():
                    child.rmdir()
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if attempt + 1 < retries:
                time.sleep(0.05)


def _enable(parent: Path, cap: str) -> bool:
    """True when `cap` is (or could be made) available to groups made under `parent` (v2)."""
    try:
        if cap in (parent / "cgroup.subtree_control").read_text().split():
            return True
        _write(parent / "cgroup.subtree_control", f"+{cap}")
        return cap in (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


@dataclass(frozen=True)
class CgroupSupport:
    """What caps sandboxes can get on this machine (probed once)."""

    enforced: dict[str, str]
    missing: dict[str, str]


@functools.lru_cache(maxsize=1)
def cgroup_support() -> CgroupSupport:
    """Make and remove a probe group with both caps: what works here, and why not."""
    probe = SandboxCgroup.create(memory_mb=64, pids_max=16, tcp_mb=16)
    try:
        return CgroupSupport(enforced=probe.facts(), missing=dict(probe.missing))
    finally:
        probe.close()
