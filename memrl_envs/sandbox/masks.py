"""Kernel interfaces no sandbox may reach: what is hidden or made read-only under `/proc` (and
`/sys`, were it ever mounted) in every sandbox mode.

The lists follow the defaults of the container runtimes, read in their sources:
  * moby (Docker), `oci/defaults.go` (`DefaultLinuxSpec`): masks /proc/asound, /proc/acpi,
    /proc/kcore, /proc/keys, /proc/latency_stats, /proc/timer_list, /proc/timer_stats,
    /proc/sched_debug, /proc/scsi and /sys/firmware; makes /proc/bus, /proc/fs, /proc/irq,
    /proc/sys and /proc/sysrq-trigger read-only;
  * runc, `libcontainer/specconv/example.go` (what `runc spec` writes): the same, plus
    /sys/devices/virtual/tpm masked.
Added here (not in those defaults): /proc/interrupts and /sys/devices/virtual/powercap (timing
and energy side channels), and files that only root could read anyway but a Lifelong-OS
episode runs as root with CAP_DAC_OVERRIDE: /proc/kallsyms, /proc/kmsg, /proc/slabinfo,
/proc/vmallocinfo, /proc/mtrr and /proc/kpage*.

How: a masked file gets /dev/null bound over it (it reads as empty), a masked folder an empty read-only tmpfs, a
read-only path a read-only bind of itself (its host path: /proc/sys shows the values of the
reader's own namespaces whichever proc mount it is opened through). Only paths the running
kernel has are listed (bubblewrap cannot mount over a missing /proc entry). With no
CAP_SYS_ADMIN inside, nothing can be unmounted or remounted writable again.

The sandboxes mount no /sys at all (neither the host-root nor the root-file-system mode needs
it), which is stricter than a read-only /sys.
"""

from __future__ import annotations

import os
from typing import Iterable

PROC_MASKED = (
    # moby / runc defaults
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
    # added here
    "/proc/interrupts", "/proc/kallsyms", "/proc/kmsg", "/proc/slabinfo", "/proc/vmallocinfo",
    "/proc/mtrr", "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup",
)
PROC_READONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

_MASK_TMPFS_BYTES = 4096


def _present(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if os.path.lexists(p)]


def proc_mask_args() -> list[str]:
    """bubblewrap arguments, to follow `--proc /proc`: the masks and read-only paths above."""
    args: list[str] = []
    for path in _present(PROC_MASKED):
        if os.path.isdir(path):
            args += ["--size", str(_MASK_TMPFS_BYTES), "--perms", "0555", "--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--dev-bind", "/dev/null", path]  # reads as empty, writes vanish (as runc does)
    for path in _present(PROC_READONLY):
        args += ["--ro-bind", path, path]
    return args


def masked_paths() -> dict[str, list[str]]:
    """What `proc_mask_args` covers on this kernel (for run cards and the README)."""
    return {"masked": _present(PROC_MASKED), "read_only": _present(PROC_READONLY), "sys": "not mounted"}
