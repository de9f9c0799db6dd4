"""bubblewrap-based isolation for code and commands a model wrote.

What a sandboxed process gets (default mode, host root file system):
  * the host's `/` read-only; home directories (`/root`, `/home`, `$HOME`) hidden behind empty
    tmpfs; a private `/tmp`; one writable directory (`workdir`), bound at its own path;
  * its own user, PID, IPC, UTS, cgroup and network namespaces: no network at all (connecting
    to 127.0.0.1 is refused), no view of host processes, so it cannot signal its parent;
  * an empty environment (`--clearenv`) plus only the variables the caller passes: no API keys;
  * when the harness runs as root, an unprivileged uid of its own (files such as /etc/shadow
    stay unreadable, and RLIMIT_NPROC counts only this sandbox's processes);
  * resource limits (CPU seconds, address space, processes, file size), a wall-clock limit,
    and a cap on captured output;
  * at the end the whole sandbox dies with it: `--die-with-parent` plus a PID namespace mean
    killing bwrap kills every process inside, including ones left in the background.

`privileged_root=True` with a `root_dir` is the mode for OS-style tasks that must run `useradd`
or `chown` inside a disposable root file system: uid 0 without a user namespace, but with the
capabilities Docker drops by default removed as well (no mounts, no module loading, no raw
I/O, no ptrace), in its own mount, PID and network namespaces.
"""

from __future__ import annotations

import itertools
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

BWRAP = "bwrap"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
# uids handed to sandboxes when the harness runs as root: one per concurrent sandbox, so
# process limits are per sandbox. Far above the usual system and login ranges.
_UID_BASE = 2_000_000
_UID_SPAN = 50_000
_uid_counter = itertools.count()
_uid_lock = threading.Lock()
# Capabilities a privileged sandbox keeps (Docker's default set minus NET_RAW/NET_BIND/MKNOD/
# AUDIT_WRITE/SETFCAP/SYS_CHROOT which none of the tasks need).
_KEEP_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
              "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP")


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (not: the code inside failed)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run. None disables a limit."""

    wall_s: float = 60.0            # wall clock, then the whole sandbox is killed
    cpu_s: int | None = 120         # RLIMIT_CPU
    memory_mb: int | None = 4096    # RLIMIT_AS (address space)
    nproc: int | None = 128         # RLIMIT_NPROC (processes/threads of the sandbox uid)
    file_mb: int | None = 256       # RLIMIT_FSIZE (largest file it may write)
    output_bytes: int = 200_000     # kept per stream; the rest is read and dropped
    tmp_mb: int | None = 512        # size of the private /tmp and /dev/shm (host memory)


@dataclass
class SandboxResult:
    returncode: int | None          # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool = False
    output_truncated: bool = False
    wall_s: float = 0.0
    argv: list[str] = field(default_factory=list, repr=False)

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


def python_binds() -> list[str]:
    """Folders the current Python interpreter and its packages live in (to re-expose them
    read-only when they sit under a hidden home directory)."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(p for p in paths if p and os.path.isdir(p))


def _next_uid() -> int:
    with _uid_lock:
        n = next(_uid_counter)
    return _UID_BASE + (os.getpid() * 97 + n) % _UID_SPAN


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def _hidden_dirs() -> list[str]:
    out = ["/root", "/home"]
    home = os.environ.get("HOME")
    if home and home not in ("/", "/tmp") and os.path.isdir(home):
        out.append(home)
    return [d for d in dict.fromkeys(out) if os.path.isdir(d)]


# The first program inside a host-root sandbox (run by the host interpreter): say the sandbox
# is up, forbid regaining privileges through setuid binaries, drop to the sandbox uid when
# the harness is root, enter the work folder, then become the real command.
_LAUNCH = (
    "import ctypes,os,sys\n"
    "fd,u,cwd=int(sys.argv[1]),sys.argv[2],sys.argv[3]\n"
    "if ctypes.CDLL(None,use_errno=True).prctl(38,1,0,0,0)!=0: raise SystemExit('no_new_privs failed')\n"
    "if u!='-': os.setgroups([]);os.setgid(int(u));os.setuid(int(u))\n"
    "os.chdir(cwd);os.write(fd,b'up');os.close(fd)\n"
    "os.execvp(sys.argv[4],sys.argv[4:])\n"
)


def _parents(path: str, tmpfs: Sequence[str]) -> list[str]:
    """bwrap creates the folders above a bind target inside one of our tmpfs mounts as 0700;
    create them 0755 first so the sandbox uid can reach the target."""
    out: list[str] = []
    for parent in reversed(Path(path).parents):
        if any(str(parent).startswith(t + "/") for t in tmpfs):
            out += ["--perms", "0755", "--dir", str(parent)]
    return out


def _bwrap_argv(argv: Sequence[str], *, workdir: Path | None, env: Mapping[str, str],
                ro_binds: Sequence[str], root_dir: Path | None, privileged_root: bool,
                drop_to: int | None, network: bool, cwd: str | None, ready_fd: int,
                tmp_mb: int | None = None) -> list[str]:
    exe = shutil.which(BWRAP)
    if exe is None:
        raise SandboxError("bubblewrap (`bwrap`) is not installed: apt-get install bubblewrap")
    args = [exe, "--die-with-parent", "--new-session", "--clearenv"]
    if os.geteuid() == 0:
        # No user namespace (inside it root would still own the host's files): bwrap sets the
        # sandbox up as root, then the command runs with few or no capabilities.
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not network:
            args += ["--unshare-net"]
        args += ["--cap-drop", "ALL"]
        keep = _KEEP_CAPS if privileged_root else ("CAP_SETUID", "CAP_SETGID")
        for cap in keep:
            args += ["--cap-add", cap]
    else:
        args += ["--unshare-all"] + (["--share-net"] if network else [])
    if root_dir is not None:
        args += ["--bind", str(root_dir), "/", "--dev", "/dev", "--proc", "/proc"]
    else:
        size = [] if tmp_mb is None else ["--size", str(tmp_mb * 2**20)]
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                 *size, "--perms", "1777", "--tmpfs", "/tmp",
                 *size, "--perms", "1777", "--tmpfs", "/dev/shm"]
        for hidden in _hidden_dirs():
            args += ["--tmpfs", hidden]
        # the launcher's interpreter must stay reachable even under a hidden home folder
        tmpfs = ["/tmp", *_hidden_dirs()]
        for path in dict.fromkeys([*python_binds(), *ro_binds]):
            args += _parents(path, tmpfs) + ["--ro-bind", path, path]
        if workdir is not None:
            args += _parents(str(workdir), tmpfs)
    if workdir is not None:
        args += ["--bind", str(workdir), str(workdir)]
    for key, value in env.items():
        args += ["--setenv", key, value]
    chdir = cwd or (str(workdir) if workdir is not None else "/")
    if root_dir is not None:
        # a foreign root file system has no host interpreter: no launcher
        return args + ["--chdir", chdir, "--", *argv]
    user = "-" if drop_to is None else str(drop_to)
    return args + ["--chdir", "/", "--", sys.executable, "-I", "-S", "-c", _LAUNCH,
                   str(ready_fd), user, chdir, *argv]


def rootfs_argv(argv: Sequence[str], root_dir: str | os.PathLike[str], *, env: Mapping[str, str],
                cwd: str = "/", network: bool = False, hostname: str | None = None,
                binds: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The bwrap command line that runs `argv` as uid 0 inside `root_dir`, in the
    `privileged_root` mode described above, for callers that manage the process themselves
    (e.g. a shell that serves several commands). `env` is the whole environment (nothing is
    added); `hostname` names its UTS namespace; `binds` are extra (host path, sandbox path)
    read-write binds, made after /dev and /proc. `root_dir` must be disposable (an overlay),
    never the host's `/`; the harness must be root (without root the sandbox would be a user
    namespace whose "root" cannot chown)."""
    if os.geteuid() != 0:
        raise SandboxError("a privileged root file system sandbox needs the harness to run as root")
    if Path(root_dir).resolve() == Path("/"):
        raise SandboxError("privileged_root needs a disposable root_dir, never the host's /")
    args = _bwrap_argv(argv, workdir=None, env=env, ro_binds=(), root_dir=Path(root_dir),
                       privileged_root=True, drop_to=None, network=network, cwd=cwd, ready_fd=-1)
    if binds:  # before the closing ["--chdir", cwd, "--", *argv]
        at = len(args) - len(argv) - 3
        args[at:at] = [a for src, dest in binds for a in ("--bind", str(src), str(dest))]
    if hostname:  # the sandbox has its own UTS namespace as root
        args[1:1] = ["--hostname", hostname]
    return args


def limits_preexec(limits: Limits):
    """A `preexec_fn` that applies `limits` (CPU, address space, file size, processes) to a
    process the caller starts itself, e.g. one running `rootfs_argv`."""
    return _limit_setter(limits)


def _limit_setter(limits: Limits):
    def apply() -> None:
        def cap(which: int, value: int | None) -> None:
            if value is not None:
                resource.setrlimit(which, (value, value))

        cap(resource.RLIMIT_CPU, limits.cpu_s)
        cap(resource.RLIMIT_AS, None if limits.memory_mb is None else limits.memory_mb * 2**20)
        cap(resource.RLIMIT_FSIZE, None if limits.file_mb is None else limits.file_mb * 2**20)
        cap(resource.RLIMIT_CORE, 0)
        # Counted per uid: with a sandbox uid of its own it bounds only this sandbox (root
        # ignores it, so it bites once the launcher has dropped to that uid).
        cap(resource.RLIMIT_NPROC, limits.nproc)

    return apply


class _Capped:
    """Drains a pipe on a thread, keeping the first `limit` bytes."""

    def __init__(self, stream, limit: int) -> None:
        self.buf = bytearray()
        self.truncated = False
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
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")


def run_isolated(argv: Sequence[str], *, workdir: str | os.PathLike[str] | None,
                 limits: Limits = Limits(), env: Mapping[str, str] | None = None,
                 stdin: bytes | None = None, ro_binds: Sequence[str] = (),
                 root_dir: str | os.PathLike[str] | None = None, privileged_root: bool = False,
                 network: bool = False, cwd: str | None = None) -> SandboxResult:
    """Run `argv` inside a fresh sandbox and return what happened.

    `workdir` is the only writable host folder (it must exist; when the harness is root it is
    handed to the sandbox uid). `env` is the whole environment of the process (PATH, HOME and
    LANG are filled in when absent). `ro_binds` re-exposes folders that a hidden home directory
    would otherwise cover (e.g. `python_binds()`). With `root_dir`, that folder is the
    sandbox's `/` (read-write), e.g. an overlay of a disposable root file system.
    Raises `SandboxError` only when the sandbox cannot be created; everything the code inside
    does, including crashing or timing out, is reported in the result.
    """
    if privileged_root and root_dir is None:
        raise SandboxError("privileged_root needs a disposable root_dir, never the host's /")
    work = Path(workdir).resolve() if workdir is not None else None
    if work is not None and not work.is_dir():
        raise SandboxError(f"workdir {work} does not exist")
    uid = None
    if os.geteuid() == 0 and not privileged_root:
        uid = _next_uid()
        if work is not None:
            _chown_tree(work, uid, uid)
    status_r, status_w = os.pipe()
    full_env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8",
                "HOME": str(work) if work is not None else "/tmp"}
    full_env.update(env or {})
    args = _bwrap_argv(argv, workdir=work, env=full_env, ro_binds=ro_binds, tmp_mb=limits.tmp_mb,
                       root_dir=Path(root_dir) if root_dir is not None else None,
                       privileged_root=privileged_root, drop_to=uid, network=network, cwd=cwd,
                       ready_fd=status_w)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=_limit_setter(limits), start_new_session=True,
                                env={"PATH": DEFAULT_PATH}, pass_fds=(status_w,))
    except OSError as exc:
        os.close(status_r)
        raise SandboxError(f"could not start bwrap: {exc}") from exc
    finally:
        os.close(status_w)
    status = _Capped(os.fdopen(status_r, "rb"), 65536)
    out = _Capped(proc.stdout, limits.output_bytes)
    err = _Capped(proc.stderr, limits.output_bytes)
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
    for pump in (out, err, status):
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
                         wall_s=time.monotonic() - start, argv=list(argv))
