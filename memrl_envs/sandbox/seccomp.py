"""The system-call filter every sandbox runs under (bubblewrap's `--seccomp FD`).

It follows what Docker's default profile refuses a container, as a deny-list on top of the
caps and namespaces (libseccomp compiles it, through `pyseccomp`):

* kernel state that namespaces do not separate: the keyrings (`keyctl`, `add_key`,
  `request_key`), the clock, the kernel log, swap, accounting, modules, kexec, reboot;
* new namespaces and mounts from inside: `unshare`, `setns`, `clone` with any namespace flag
  (`clone3`, whose flags a filter cannot read, answers ENOSYS so the C library falls back to
  `clone`, as Docker does), `mount`/`umount2`, the new mount API, `pivot_root`, `chroot`;
  a user namespace made inside is where caps come back (issue 22: a new user and cgroup
  namespace let an episode rewrite its own memory limit);
* reaching other processes: `ptrace`, `process_vm_readv`/`writev`, `kcmp`, `pidfd_getfd`;
* attack surface a task never needs: `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*`,
  `open_by_handle_at` (the classic container escape), `iopl`/`ioperm`. (Docker also limits
  `personality` to a few values; a deny-list cannot say "none but these", so it is allowed.)

Refused calls fail with EPERM (ENOSYS for `clone3`); system calls of another ABI (32-bit
`int 0x80` on x86-64) kill the process, libseccomp's default for a foreign architecture.
Where the filter cannot be built (no libseccomp), `filter_support()` says why; the sandbox
runs without it and the run card's sandbox facts say so, as they do for a missing cap.
"""

from __future__ import annotations

import errno
import functools
import os
from dataclasses import dataclass

# Refused outright (EPERM). Grouped as in the module docstring.
DENIED = (
    "keyctl", "add_key", "request_key",
    "clock_settime", "clock_adjtime", "adjtimex", "settimeofday", "stime", "syslog",
    "swapon", "swapoff", "acct", "init_module", "finit_module", "delete_module", "create_module",
    "kexec_load", "kexec_file_load", "reboot", "quotactl", "nfsservctl", "lookup_dcookie",
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "vm86", "vm86old",
    "get_kernel_syms", "query_module", "uselib", "_sysctl", "ustat", "sysfs", "vhangup",
)
# clone with any of these flags is refused (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
# NEWPID, NEWNET, NEWTIME)
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000 | 0x00000080


@dataclass(frozen=True)
class FilterSupport:
    program: bytes | None     # the compiled BPF program, or None
    why_not: str = ""

    def facts(self) -> dict:
        if self.program is None:
            return {"applied": False, "why_not": self.why_not}
        return {"applied": True, "default": "allow",
                "refused": sorted(DENIED) + ["clone with namespace flags", "clone3 (ENOSYS)"],
                "foreign_abi": "killed", "bpf_bytes": len(self.program)}


def _build() -> bytes:
    import pyseccomp as sc

    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            flt.add_rule(deny, name)
        except (OSError, ValueError, RuntimeError):
            continue  # a call this architecture does not have
    for bit in range(64):
        flag = 1 << bit
        if NAMESPACE_FLAGS & flag:
            flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    fd = os.memfd_create("memrl-seccomp-build", 0)
    with os.fdopen(fd, "w+b") as fh:   # libseccomp writes to a descriptor, not a Python buffer
        flt.export_bpf(fh)
        fh.flush()
        fh.seek(0)
        return fh.read()


@functools.lru_cache(maxsize=1)
def filter_support() -> FilterSupport:
    """The filter for this machine, built once (None with the reason where it cannot be)."""
    try:
        return FilterSupport(program=_build())
    except ImportError as exc:
        return FilterSupport(None, f"pyseccomp is not installed ({exc}): pip install pyseccomp")
    except (OSError, AttributeError, RuntimeError, ValueError) as exc:
        return FilterSupport(None, f"libseccomp could not build the filter ({type(exc).__name__}: {exc}); "
                                   "apt-get install libseccomp2")


def filter_fd() -> int | None:
    """A descriptor holding the compiled filter, positioned at its start, for bwrap's
    `--seccomp FD` (it reads it to the end); None where there is no filter. The caller passes
    it to the child and closes it afterwards."""
    program = filter_support().program
    if program is None:
        return None
    fd = os.memfd_create("memrl-seccomp", 0)
    view = memoryview(program)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
