"""Where the machine's cgroup hierarchies are, and where the harness sits in them: the mounts
(v1, one per controller, and v2), the harness's own groups, and its own memory limit. Read
from /proc; `cgroups` makes the sandboxes' groups from them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MEMORY, PIDS = "memory", "pids"


@dataclass(frozen=True)
class _Mount:
    path: Path
    version: int
    controllers: frozenset[str]
    root: str  # the part of the hierarchy this mount shows ("/" unless in a container)


def _mounts() -> list[_Mount]:
    out: list[_Mount] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, superopts = tail[0], tail[2].split(",")
        mount = Path(fields[4].replace("\\040", " "))
        if fstype == "cgroup":
            out.append(_Mount(mount, 1, frozenset(o for o in superopts if o in (MEMORY, PIDS)), fields[3]))
        elif fstype == "cgroup2":
            try:
                ctrls = frozenset((mount / "cgroup.controllers").read_text().split())
            except OSError:
                ctrls = frozenset()
            out.append(_Mount(mount, 2, ctrls, fields[3]))
    return out


def _own_groups() -> dict[str, str]:
    """The harness's own group per v1 controller, and under "" its v2 group."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            out[""] = parts[2]
        for ctrl in parts[1].split(","):
            if ctrl:
                out[ctrl] = parts[2]
    return out


def _inside(mount: _Mount, group: str | None) -> Path | None:
    if group is None:
        return None
    root = mount.root.rstrip("/")
    if root and not (group == root or group.startswith(root + "/")):
        return None
    rel = group[len(root):].lstrip("/")
    path = mount.path / rel if rel else mount.path
    return path if path.is_dir() else None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _delegated() -> bool:
    """A non-root harness may still own its v2 group (systemd delegation)."""
    own = _own_groups().get("")
    for m in _mounts():
        if m.version == 2:
            path = _inside(m, own)
            if path is not None and os.access(path, os.W_OK):
                return True
    return False


def harness_memory_limit_bytes() -> int | None:
    """The memory limit of the harness's own cgroup, if it has one."""
    own = _own_groups()
    for m in _mounts():
        if m.version == 1 and MEMORY in m.controllers:
            path = _inside(m, own.get(MEMORY))
            value = _read_int(path / "memory.limit_in_bytes") if path else None
            if value is not None and value < 2**60:
                return value
        elif m.version == 2 and MEMORY in m.controllers:
            path = _inside(m, own.get(""))
            value = _read_int(path / "memory.max") if path else None  # "max" reads as None
            if value is not None:
                return value
    return None
