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
  `open_by_handle_at` (the classic container escape), `iopl`/`ioperm`;
* `personality` except Docker's personas (`PERSONAS`: Linux, 32-bit Linux, their UNAME26
  forms, and the query 0xffffffff): a foreign persona (BSD, SVR4, ...; flags such as
  MMAP_PAGE_ZERO or READ_IMPLIES_EXEC) is refused.

Refused calls fail with EPERM (ENOSYS for `clone3`). A call of another ABI (32-bit `int 0x80`
on x86-64) kills the whole process with SIGSYS (`SCMP_ACT_KILL_PROCESS`; libseccomp's default
would kill only the calling thread).

The facts on the run card (`FilterSupport.facts`) are read from the compiled program itself
(`bpf`), not from the lists above: a call is named as refused only when the program refuses
it; a call of `DENIED` that this architecture does not have (x86-64 has no `stime`, `umount`,
`vm86`, `vm86old`) is not named at all (no rule is added for it); a rule libseccomp rejected
is named under `missing` with libseccomp's error, never skipped in silence.
Where the filter cannot be built (no libseccomp), `filter_support()` says why; the sandbox
runs without it and the run card's sandbox facts say so, as they do for a missing cap.
"""

from __future__ import annotations

import errno
import functools
import os
from dataclasses import dataclass, field

from memrl_envs.sandbox import bpf

# Refused outright (EPERM), where the architecture has the call. Grouped as in the docstring.
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
# clone with any of these flags is refused
NAMESPACE_FLAGS = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
                   "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
                   "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080}
# personality(2) arguments allowed (Docker's default profile): PER_LINUX, PER_LINUX32, both
# with UNAME26, and 0xffffffff (asks for the current persona without changing it)
PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
# foreign personas the card checks are refused: PER_BSD, PER_SVR4, PER_LINUX | MMAP_PAGE_ZERO,
# PER_LINUX | READ_IMPLIES_EXEC, PER_LINUX | ADDR_NO_RANDOMIZE, PER_LINUX32_3GB
FOREIGN_PERSONAS = (0x0006, 0x04100001, 0x0100000, 0x0400000, 0x0040000, 0x8000008)


def persona_rules() -> list[tuple[int, int]]:
    """(mask, value) pairs whose union is every 32-bit persona outside `PERSONAS`.

    A rule may compare an argument once, and a rule "not in the allowed set" needs several
    comparisons, so: a foreign bit is any bit no allowed persona but the query sets. A value
    with some foreign bits set and some clear has, round the cycle of foreign bits, one set
    bit followed by a clear one (a rule per step of the cycle); a value with all of them set
    differs from the query in a bit of the allowed ones (a rule each)."""
    allowed_bits = 0
    for p in PERSONAS[:-1]:
        allowed_bits |= p
    foreign = [b for b in range(32) if not allowed_bits & (1 << b)]
    rules = [((1 << b) | (1 << foreign[(i + 1) % len(foreign)]), 1 << b) for i, b in enumerate(foreign)]
    rules += [((1 << foreign[0]) | (1 << b), 1 << foreign[0]) for b in range(32) if allowed_bits & (1 << b)]
    return rules


@dataclass(frozen=True)
class FilterSupport:
    program: bytes | None       # the compiled BPF program, or None
    why_not: str = ""
    arch: int = 0               # the native architecture (AUDIT_ARCH_*)
    numbers: dict[str, int] = field(default_factory=dict)  # call numbers on this architecture
    rejected: dict[str, str] = field(default_factory=dict)  # rules libseccomp refused to add

    def facts(self) -> dict:
        """What the compiled program does (read from it, `bpf`), for the run card."""
        if self.program is None:
            return {"applied": False, "why_not": self.why_not}
        insns = bpf.parse(self.program)

        def answer(name: str, *args: int, arch: int | None = None) -> tuple[int, int]:
            return bpf.verdict(insns, self.numbers[name], self.arch if arch is None else arch, args)

        refused: list[str] = []
        missing: dict[str, str] = {}
        for name in DENIED:
            if name not in self.numbers:
                continue  # no such call on this architecture: nothing to refuse
            got = answer(name)
            if got == (bpf.ERRNO, errno.EPERM):
                refused.append(name)
            else:
                missing[name] = self.rejected.get(name) or f"the compiled filter answers {describe(*got)}"
        flags = []
        for flag, bit in NAMESPACE_FLAGS.items():
            if answer("clone", bit | 17) == (bpf.ERRNO, errno.EPERM):  # 17: SIGCHLD
                flags.append(flag)
            else:
                missing[f"clone with {flag}"] = self.rejected.get("clone") or "the compiled filter allows it"
        if flags:
            refused.append(f"clone with {' or '.join(flags)}")
        if answer("clone3") == (bpf.ERRNO, errno.ENOSYS):
            refused.append("clone3 (ENOSYS)")
        else:
            missing["clone3"] = self.rejected.get("clone3") or "the compiled filter does not answer ENOSYS"
        wrong = [p for p in PERSONAS if answer("personality", p) != (bpf.ALLOW, 0)]
        wrong += [p for p in FOREIGN_PERSONAS if answer("personality", p) != (bpf.ERRNO, errno.EPERM)]
        if wrong:
            missing["personality"] = (self.rejected.get("personality")
                                      or f"the compiled filter misjudges personas {[hex(p) for p in wrong]}")
        else:
            refused.append("personality but " + ", ".join(hex(p) for p in PERSONAS))
        foreign = bpf.FOREIGN_ABI.get(self.arch)
        out = {"applied": True, "default": "allow", "refused": refused, "missing": missing,
               "bpf_bytes": len(self.program)}
        if foreign is not None:
            action, _ = bpf.verdict(insns, 20, foreign)  # any call of the 32-bit ABI (20: its getpid)
            out["foreign_abi"] = describe(action, 0)
        return out


def describe(action: int, data: int) -> str:
    """A filter's answer in words."""
    if action == bpf.KILL_PROCESS:
        return "kills the process (SIGSYS)"
    if action == bpf.KILL_THREAD:
        return "kills the calling thread (SIGSYS)"
    if action == bpf.ERRNO:
        return f"fails with {errno.errorcode.get(data, data)}"
    if action == bpf.ALLOW:
        return "allows it"
    return f"action {action:#x}"


def _build() -> FilterSupport:
    import pyseccomp as sc

    arch = sc.system_arch() & 0xFFFFFFFF
    numbers = {}
    for name in (*DENIED, "clone", "clone3", "personality"):
        nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if nr >= 0:  # libseccomp gives a call this architecture lacks a negative pseudo-number
            numbers[name] = nr
    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    deny = sc.ERRNO(errno.EPERM)
    rejected: dict[str, str] = {}

    def add(name: str, action: int, *args) -> None:
        try:
            flt.add_rule(action, numbers[name], *args)
        except (OSError, ValueError, RuntimeError) as exc:
            rejected.setdefault(name, f"libseccomp rejected the rule ({type(exc).__name__}: {exc})")

    for name in DENIED:
        if name in numbers:
            add(name, deny)
    for bit in NAMESPACE_FLAGS.values():
        add("clone", deny, sc.Arg(0, sc.MASKED_EQ, bit, bit))
    add("clone3", sc.ERRNO(errno.ENOSYS))
    for mask, value in persona_rules():
        add("personality", deny, sc.Arg(0, sc.MASKED_EQ, mask, value))
    fd = os.memfd_create("memrl-seccomp-build", 0)
    with os.fdopen(fd, "w+b") as fh:   # libseccomp writes to a descriptor, not a Python buffer
        flt.export_bpf(fh)
        fh.flush()
        fh.seek(0)
        program = fh.read()
    return FilterSupport(program=program, arch=arch, numbers=numbers, rejected=rejected)


@functools.lru_cache(maxsize=1)
def filter_support() -> FilterSupport:
    """The filter for this machine, built once (None with the reason where it cannot be)."""
    try:
        return _build()
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
