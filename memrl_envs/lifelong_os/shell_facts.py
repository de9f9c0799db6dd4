"""What Lifelong-OS episode sandboxes get on this machine, for the run card and the log: the
caps enforced and missing, the masked kernel interfaces, the user namespace and how the root
file system is owned by each episode's ids, and how many episodes fit at once (`OverlayShell`
is the sandbox these facts describe)."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from memrl_envs.lifelong_os.shell import DEFAULT_LIMITS, SHM_MB
from memrl_envs.sandbox import (HOST_BASE, ID_COUNT, Limits, caps_report, log_sandbox_facts, plan_parallel,
                                userns_available)
from memrl_envs.sandbox.idmap import idmap_available
from memrl_envs.sandbox.userns import RANGES

log = logging.getLogger(__name__)


def overlay_facts(*, upper_size_mb: int, pids_max: int, memory_mb: int | None, max_parallel: int | None,
                  scratch_dir: str | None = None, command_timeout_s: float | None = None,
                  limits: Limits = DEFAULT_LIMITS, rootfs: str | os.PathLike[str] | None = None) -> dict:
    """What OverlayShell episodes get on this machine (caps enforced and missing, masked kernel
    interfaces) and how many fit at once; logged, for the run card. Raises `SandboxFitError`
    when not one episode fits."""
    caps = caps_report(Limits(sandbox_memory_mb=memory_mb, nproc=pids_max or None, disk_mb=upper_size_mb,
                              tmp_mb=SHM_MB, memory_mb=limits.memory_mb, cpu_s=limits.cpu_s,
                              file_mb=limits.file_mb, wall_s=limits.wall_s, nofile=limits.nofile,
                              tcp_mb=limits.tcp_mb))
    caps["enforced"]["disk"] = f"{upper_size_mb} MB (tmpfs upper layer of the overlay: all the episode writes)"
    caps["enforced"].pop("tmp", None)
    caps["enforced"]["shm"] = f"{SHM_MB} MB /dev/shm (tmpfs)"
    caps["per_process"]["nproc"] = None  # root ignores RLIMIT_NPROC: the pids cgroup is the cap
    caps["per_process"]["wall_s"] = command_timeout_s  # per command
    capped = "memory" in caps["enforced"]
    each = memory_mb if capped and memory_mb else (limits.memory_mb or 0) + upper_size_mb + SHM_MB
    plan = plan_parallel(max_parallel, memory_mb_each=int(each), disk_mb_each=1,
                         disk_path=scratch_dir or tempfile.gettempdir(), memory_capped=capped,
                         what="Lifelong-OS episode sandboxes",
                         files_each=(pids_max or 1) * (limits.nofile or 0) or None,
                         tcp_mb_each=caps["tcp_mb_outside_memory"])
    log_sandbox_facts(log, "Lifelong-OS sandbox", caps, plan)
    why_not = userns_available()
    if why_not is None:
        caps["enforced"]["user_namespace"] = (
            f"root inside is the first of {ID_COUNT} host uids held by the episode alone while it lives "
            f"(one of {RANGES} ranges from {HOST_BASE}); the root file system "
            + _tree_for_ranges(rootfs))
    else:
        caps["missing"]["user_namespace"] = why_not
    user = (f"uid 0 inside a user namespace, a range of {ID_COUNT} host uids of its own outside"
            if why_not is None else f"uid 0 of the host (no user namespace: {why_not})")
    return {"mode": f"root file system (bubblewrap over a tmpfs-backed overlay; {user}; Docker's default "
                    "capabilities minus a few)", "user_namespace": why_not is None,
            **caps, "parallel": plan.facts()}


def _tree_for_ranges(rootfs: str | os.PathLike[str] | None) -> str:
    """How the root file system appears owned by each episode's range (for the run card)."""
    if rootfs is None or not Path(rootfs).is_dir():
        return "idmapped to them where its file system allows, else copied once per range"
    why_not = idmap_available(str(Path(rootfs).resolve()))
    return "idmapped to them" if why_not is None else f"copied once per range, owned by it ({why_not})"
