"""bubblewrap-based isolation for code and commands a model wrote.

Two modes, one set of guarantees (docs/sandboxes.md):

Host-root mode (code: the BigCodeBench checker). The sandbox's `/` is an allow-list of the host
(`hostview`): `/usr` and the `/lib*`, `/bin`, `/sbin` links, a minimal `/etc`, the interpreter's
own folders, read-only; no `/run`, `/var`, `/home`, `/root`, no project folders, so no host unix
socket is reachable by its path. A private `/tmp` and `/dev/shm` (tmpfs of `tmp_mb`), and one
writable work folder at the host folder's path: a tmpfs of `disk_mb`, seeded with the host
folder's files (writes past the cap fail with ENOSPC; nothing written reaches the host disk),
or with `disk_mb=None` the host folder itself. Its own user, PID, IPC, UTS, cgroup and network
namespaces (no network; no view of host processes), an empty environment (`--clearenv`) plus
the variables the caller passes (no API keys), and, when the harness runs as root, an
unprivileged uid of its own, unique among the machine's live sandboxes (`uids`).

Root-file-system mode (`privileged_root` with a `root_dir`: Lifelong-OS episodes that run
`useradd` or `chown`): a disposable root file system as `/`, uid 0 with the capabilities
Docker drops by default removed as well (no mounts, no module loading, no raw I/O, no ptrace,
no mknod), no_new_privs, its own mount, PID, IPC, UTS and network namespaces. Through
`rootfs_argv(userns=...)` (the Lifelong-OS shell) that uid 0 is an unprivileged host id in a
user namespace of its own (`userns`); `run_isolated(privileged_root=True)` keeps host uid 0.

In both modes:
  * the system-call filter (`seccomp`): no keyrings, no new namespaces, no mounts, no ptrace,
    no bpf/perf/userfaultfd/io_uring, as Docker's default profile;
  * kernel interfaces masked or read-only (`masks`: /proc/sys, /proc/sysrq-trigger, /proc/kcore,
    /proc/keys, ... as runc and Docker do); no /sys; a minimal /dev, read-only but for its
    capped /dev/shm; the host-root mode's `/` read-only;
  * caps on the whole sandbox (`cgroups`): a memory cgroup (swap off; its tmpfs files count),
    its TCP socket buffers (cgroup v1: a cap of their own; v2: in the memory cap) and a pids
    cgroup, where the machine can make them; which caps hold is in `caps_report`;
  * per-process limits on top (CPU seconds, address space, file size, processes per uid), a
    wall-clock limit and a cap on captured output;
  * at the end the whole sandbox dies: `--die-with-parent`, a PID namespace (killing bwrap kills
    every process inside) and the cgroup emptied and removed.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from memrl_envs.sandbox.bwrap_args import BWRAP, bwrap_argv
from memrl_envs.sandbox.cgroups import MEMORY, PIDS, PREFIX, SandboxCgroup, cgroup_support
from memrl_envs.sandbox.errors import SandboxError
from memrl_envs.sandbox.hostview import ETC_PLACEHOLDERS
from memrl_envs.sandbox.masks import masked_paths
from memrl_envs.sandbox.seccomp import filter_fd, filter_support
from memrl_envs.sandbox.uids import UidsExhausted, lease_uid

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run. None disables a limit."""

    wall_s: float = 60.0            # wall clock, then the whole sandbox is killed
    cpu_s: int | None = 120         # RLIMIT_CPU
    memory_mb: int | None = 4096    # RLIMIT_AS (address space of each process)
    nproc: int | None = 128         # processes+threads: the sandbox's pids cgroup, and RLIMIT_NPROC
    file_mb: int | None = 256       # RLIMIT_FSIZE (largest file it may write)
    # RLIMIT_NOFILE: open files per process. Times the process cap it bounds the sandbox's share
    # of the host's file table (fs.file-max): the host's 20,000 x 256 processes was twice it;
    # 1,024 (Linux's default soft limit) x 256 is about a tenth (the fit check counts it)
    nofile: int | None = 1024
    output_bytes: int = 200_000     # kept per stream; the rest is read and dropped
    tmp_mb: int | None = 512        # size of the private /tmp and /dev/shm (host memory)
    sandbox_memory_mb: int | None = 4096  # memory cgroup of the whole sandbox (its tmpfs files count)
    # TCP socket buffers of the whole sandbox (loopback traffic in its network namespace):
    # cgroup v1 counts them apart from the memory cap, v2 within it (`cgroups`)
    tcp_mb: int | None = 16
    disk_mb: int | None = 1024      # the work folder: a tmpfs of this size; None: the host folder itself

    def tmpfs_mb(self, *, work_folder: bool = True) -> int:
        """The most the sandbox's tmpfs folders can hold (memory, not disk)."""
        sizes = [self.tmp_mb or 0, self.tmp_mb or 0, (self.disk_mb or 0) if work_folder else 0]
        return sum(sizes)


@dataclass
class SandboxResult:
    returncode: int | None          # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool = False
    output_truncated: bool = False
    wall_s: float = 0.0
    argv: list[str] = field(default_factory=list, repr=False)
    # from the sandbox's cgroups, read on the host (None: that cap was not enforced)
    memory_peak_bytes: int | None = None
    oom_kills: int | None = None
    pids_refused: int | None = None
    # with `result_channel`: what the program wrote on its result pipe (capped), else None
    channel: bytes | None = None
    channel_truncated: bool = False

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


def bwrap_available() -> str | None:
    """None if bubblewrap can create sandboxes here, else the reason it cannot."""
    exe = shutil.which(BWRAP)
    if exe is None:
        return "bubblewrap (`bwrap`) is not installed: apt-get install bubblewrap"
    try:
        probe = subprocess.run([exe, "--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true"],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not start: {exc}"
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.decode(errors='replace').strip()}"
    return None


def caps_report(limits: Limits, *, work_folder: bool = True) -> dict:
    """Which caps a sandbox with `limits` gets on this machine, and which are missing (why):
    for the run card and the log. Never silent: every cap is in one of the two maps."""
    support = cgroup_support()
    enforced: dict[str, str] = {}
    missing: dict[str, str] = {}
    for cap, value, unit in ((MEMORY, limits.sandbox_memory_mb, "MB"), (PIDS, limits.nproc, "tasks")):
        if value is None:
            missing[cap] = "disabled by the configuration"
        elif cap in support.enforced:
            enforced[cap] = f"{value} {unit} ({support.enforced[cap]})"
        else:
            missing[cap] = support.missing.get(cap, "unknown")
    tcp_outside = None  # MB of TCP buffers a sandbox may hold beyond its memory cap (the fit check adds it)
    if limits.tcp_mb is None or limits.sandbox_memory_mb is None:
        missing["tcp"] = "disabled by the configuration"
    elif "tcp" in support.enforced:
        enforced["tcp"] = f"{limits.tcp_mb} MB of TCP socket buffers ({support.enforced['tcp']})"
        tcp_outside = limits.tcp_mb if support.enforced["tcp"].startswith("cgroup v1") else None
    else:
        missing["tcp"] = support.missing.get("tcp", "no memory cgroup here")
    if work_folder and limits.disk_mb is None:
        missing["disk"] = "disabled by the configuration: the work folder is the host folder"
    elif work_folder:
        enforced["disk"] = f"{limits.disk_mb} MB (tmpfs work folder)"
    if limits.tmp_mb is not None:
        enforced["tmp"] = f"{limits.tmp_mb} MB each for /tmp and /dev/shm (tmpfs)"
    else:
        missing["tmp"] = "disabled by the configuration"
    per_process = {"address_space_mb": limits.memory_mb, "cpu_s": limits.cpu_s, "file_mb": limits.file_mb,
                   "nproc": limits.nproc, "open_files": limits.nofile, "wall_s": limits.wall_s}
    syscalls = filter_support()
    filter_facts = syscalls.facts()
    if syscalls.program is not None:
        enforced["syscall_filter"] = (f"seccomp: {len(filter_facts['refused'])} kinds of call refused "
                                      "(Docker's default profile's deny-list; see syscall_filter)")
        if filter_facts["missing"]:
            missing["syscall_filter_rules"] = "not installed: " + "; ".join(
                f"{name} ({why})" for name, why in filter_facts["missing"].items())
    else:
        missing["syscall_filter"] = syscalls.why_not
    return {"enforced": enforced, "missing": missing, "per_process": per_process,
            "kernel_interfaces": masked_paths(), "syscall_filter": filter_facts, "tcp_mb_outside_memory": tcp_outside}


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def limits_preexec(limits: Limits):
    """A `preexec_fn` that applies `limits` (CPU, address space, file size, processes) to a
    process the caller starts itself, e.g. one running `rootfs_argv`."""
    return _limit_setter(limits)


def _limit_setter(limits: Limits, join=None):
    def apply() -> None:
        if join is not None:
            join()  # into the sandbox's cgroups, before anything of the sandbox exists

        def cap(which: int, value: int | None) -> None:
            if value is not None:
                resource.setrlimit(which, (value, value))

        cap(resource.RLIMIT_CPU, limits.cpu_s)
        cap(resource.RLIMIT_AS, None if limits.memory_mb is None else limits.memory_mb * 2**20)
        cap(resource.RLIMIT_FSIZE, None if limits.file_mb is None else limits.file_mb * 2**20)
        cap(resource.RLIMIT_CORE, 0)
        cap(resource.RLIMIT_NOFILE, limits.nofile)
        # Counted per uid: with a sandbox uid of its own it bounds only this sandbox (root
        # ignores it, so it bites once the launcher has dropped to that uid).
        cap(resource.RLIMIT_NPROC, limits.nproc)

    return apply


def sandbox_cgroup(memory_mb: int | None, pids_max: int | None, *,
                   split: Mapping[str, int | None] | None = None, prefix: str = PREFIX,
                   tcp_mb: int | None = None) -> SandboxCgroup:
    """The cgroups of one sandbox. A cap this machine supports (`cgroup_support`, which the run
    card reports) that cannot be made now is an error, never a silent run without it."""
    cg = SandboxCgroup.create(memory_mb=memory_mb, pids_max=pids_max, split=split, prefix=prefix, tcp_mb=tcp_mb)
    support = cgroup_support()
    lost = [cap for cap in support.enforced if cap in cg.missing]
    if lost:
        cg.close()
        raise SandboxError("could not make the sandbox's " + ", ".join(
            f"{cap} cgroup ({cg.missing[cap]})" for cap in lost))
    return cg


class CappedReader:
    """Drains a pipe on a thread, keeping the first `limit` bytes; the rest is read and
    dropped (`dropped` counts it)."""

    def __init__(self, stream, limit: int) -> None:
        self.buf = bytearray()
        self.truncated = False
        self.dropped = 0
        self._stream, self._limit = stream, limit
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        try:
            while True:
                chunk = self._stream.read(65536)
                if not chunk:
                    break
                room = self._limit - len(self.buf)
                if room > 0:
                    self.buf += chunk[:room]
                if len(chunk) > max(room, 0):
                    self.truncated = True
                    self.dropped += len(chunk) - max(room, 0)
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")


def run_isolated(argv: Sequence[str], *, workdir: str | os.PathLike[str] | None,
                 limits: Limits = Limits(), env: Mapping[str, str] | None = None,
                 stdin: bytes | None = None, ro_binds: Sequence[str] = (),
                 root_dir: str | os.PathLike[str] | None = None, privileged_root: bool = False,
                 network: bool = False, cwd: str | None = None,
                 result_channel: int | None = None) -> SandboxResult:
    """Run `argv` inside a fresh sandbox and return what happened.

    `workdir` is the host folder the sandbox works in (it must exist; when the harness is root
    it is handed to the sandbox uid for the run). In the host-root mode with `limits.disk_mb`
    set, the sandbox works on a capped tmpfs copy of it and nothing it writes comes back; with
    `disk_mb=None` it writes the host folder itself. `env` is the whole environment of the
    process (PATH, HOME and LANG are filled in when absent). `ro_binds` adds host folders the
    sandbox may read (e.g. data a task needs). With `root_dir`, that folder is the sandbox's
    `/` (read-write), e.g. an overlay of a disposable root file system.
    With `result_channel` (a byte cap), the program gets a pipe of its own for its result: the
    write end's descriptor number is appended to `argv`, and what it writes there (at most that
    many bytes) comes back as `channel`, apart from its stdout and stderr.
    Raises `SandboxError` only when the sandbox cannot be created; everything the code inside
    does, including crashing or timing out, is reported in the result.
    """
    if privileged_root and root_dir is None:
        raise SandboxError("privileged_root needs a disposable root_dir, never the host's /")
    work = Path(workdir).resolve() if workdir is not None else None
    if work is not None and not work.is_dir():
        raise SandboxError(f"workdir {work} does not exist")
    if os.geteuid() != 0 or privileged_root:
        return _run_isolated(argv, work, None, limits=limits, env=env, stdin=stdin, ro_binds=ro_binds,
                             root_dir=root_dir, privileged_root=privileged_root, network=network, cwd=cwd,
                             result_channel=result_channel)
    try:
        lease = lease_uid()  # a uid no other live sandbox on the machine holds
    except UidsExhausted as exc:
        raise SandboxError(str(exc)) from exc
    with lease:
        if work is not None:
            _chown_tree(work, lease.uid, lease.uid)
        return _run_isolated(argv, work, lease.uid, limits=limits, env=env, stdin=stdin, ro_binds=ro_binds,
                             root_dir=root_dir, privileged_root=privileged_root, network=network, cwd=cwd,
                             result_channel=result_channel)


def _run_isolated(argv: Sequence[str], work: Path | None, uid: int | None, *, limits: Limits,
                  env: Mapping[str, str] | None, stdin: bytes | None, ro_binds: Sequence[str],
                  root_dir: str | os.PathLike[str] | None, privileged_root: bool, network: bool,
                  cwd: str | None, result_channel: int | None) -> SandboxResult:
    full_env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8",
                "HOME": str(work) if work is not None else "/tmp"}
    full_env.update(env or {})
    cg = sandbox_cgroup(limits.sandbox_memory_mb, limits.nproc, tcp_mb=limits.tcp_mb)
    status_r, status_w = os.pipe()
    placeholders = [] if root_dir is not None else [os.pipe() for _ in ETC_PLACEHOLDERS]
    for _, w in placeholders:
        os.close(w)  # empty files: bwrap reads each to its end at once
    fds = [r for r, _ in placeholders]
    chan_r = chan_w = None
    seccomp = filter_fd()
    if result_channel is not None:
        chan_r, chan_w = os.pipe()
        argv = [*argv, str(chan_w)]
    try:
        args = bwrap_argv(argv, workdir=work, env=full_env, ro_binds=ro_binds, tmp_mb=limits.tmp_mb,
                           disk_mb=limits.disk_mb, placeholder_fds=fds,
                           root_dir=Path(root_dir) if root_dir is not None else None,
                           privileged_root=privileged_root, drop_to=uid, network=network, cwd=cwd,
                           ready_fd=status_w, seccomp_fd=seccomp)
        start = time.monotonic()
        proc = subprocess.Popen(args, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=_limit_setter(limits, cg.preexec() if cg.groups else None),
                                start_new_session=True, env={"PATH": DEFAULT_PATH},
                                pass_fds=(status_w, *fds, *(fd for fd in (chan_w, seccomp) if fd is not None)))
    except (OSError, SandboxError) as exc:
        os.close(status_r)
        if chan_r is not None:
            os.close(chan_r)
        cg.close()
        if uid is not None and work is not None and work.exists():
            _chown_tree(work, os.getuid(), os.getgid())
        if isinstance(exc, SandboxError):
            raise
        raise SandboxError(f"could not start bwrap: {exc}") from exc
    finally:
        os.close(status_w)
        for fd in fds:
            os.close(fd)
        for fd in (chan_w, seccomp):
            if fd is not None:
                os.close(fd)
    status = CappedReader(os.fdopen(status_r, "rb"), 65536)
    chan = CappedReader(os.fdopen(chan_r, "rb"), result_channel) if chan_r is not None else None
    out = CappedReader(proc.stdout, limits.output_bytes)
    err = CappedReader(proc.stderr, limits.output_bytes)
    if stdin is not None:
        try:
            proc.stdin.write(stdin)
        except (BrokenPipeError, OSError):
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Killing bwrap's group ends the PID namespace: nothing inside survives.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        usage = cg.usage()
        cg.close()
    for pump in (out, err, status, *([chan] if chan is not None else [])):
        pump.thread.join(timeout=5)
    if uid is not None and work is not None and work.exists():
        # hand the folder back so the harness can read and delete it
        _chown_tree(work, os.getuid(), os.getgid())
    stderr = err.text()
    if root_dir is None:
        started = status.text() == "up"   # the launcher's word, sent before any task code runs
    else:
        started = not (proc.returncode == 1 and stderr.startswith("bwrap:") and not out.buf)
    if not timed_out and not started:
        raise SandboxError(f"bwrap could not create the sandbox: {stderr.strip()[:500]}")
    return SandboxResult(returncode=None if timed_out else proc.returncode, stdout=out.text(),
                         stderr=stderr, timed_out=timed_out,
                         output_truncated=out.truncated or err.truncated,
                         wall_s=time.monotonic() - start, argv=list(argv),
                         channel=bytes(chan.buf) if chan is not None else None,
                         channel_truncated=chan.truncated if chan is not None else False, **usage)
