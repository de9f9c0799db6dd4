"""The bubblewrap command line of a sandbox, in both modes (`isolate` says what each gives).

`bwrap_argv` builds it for `run_isolated`; `rootfs_argv` for callers that run a root file
system sandbox themselves (the Lifelong-OS shell). The host-root mode starts with `_LAUNCH`, a
small program of the host's interpreter that drops to the sandbox's uid and seeds its folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Mapping, Sequence

from memrl_envs.sandbox.errors import SandboxError
from memrl_envs.sandbox.hostview import dirs_above, host_view_args, program_binds_args
from memrl_envs.sandbox.masks import proc_mask_args
from memrl_envs.sandbox.userns import Handshake, UsernsError, as_host_base

BWRAP = "bwrap"
SEED_DIR = "/.memrl-seed"  # host-root mode: where the host work folder is shown read-only to be copied in
# Capabilities a privileged sandbox keeps (Docker's default set minus NET_RAW/NET_BIND/MKNOD/
# AUDIT_WRITE/SETFCAP/SYS_CHROOT which none of the tasks need).
_KEEP_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
              "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP")
# The host-root launcher's, until it drops to the sandbox uid (which clears them all): hand the
# work folder to that uid, then become it.
_LAUNCHER_CAPS = ("CAP_CHOWN", "CAP_SETUID", "CAP_SETGID")


# The first program inside a host-root sandbox (run by the host interpreter): forbid regaining
# privileges through setuid binaries, hand the work folder to the sandbox uid and drop to it
# when the harness is root, copy the seed into the (tmpfs) work folder, say the sandbox is up,
# enter the working directory, then become the real command.
_LAUNCH = (
    "import ctypes,os,sys\n"
    "fd,u,cwd,work,seed=int(sys.argv[1]),sys.argv[2],sys.argv[3],sys.argv[4],sys.argv[5]\n"
    "if ctypes.CDLL(None,use_errno=True).prctl(38,1,0,0,0)!=0: raise SystemExit('no_new_privs failed')\n"
    "if u!='-':\n"
    " u=int(u)\n"
    " if seed!='-': os.chown(work,u,u)\n"
    " os.setgroups([]);os.setgid(u);os.setuid(u)\n"
    "if seed!='-':\n"
    " import shutil\n"
    " for n in os.listdir(seed):\n"
    "  s,d=os.path.join(seed,n),os.path.join(work,n)\n"
    "  if os.path.isdir(s) and not os.path.islink(s): shutil.copytree(s,d,symlinks=True)\n"
    "  else: shutil.copy2(s,d,follow_symlinks=False)\n"
    "os.chdir(cwd);os.write(fd,b'up');os.close(fd)\n"
    "os.execvp(sys.argv[6],sys.argv[6:])\n"
)


def _size(mb: int | None) -> list[str]:
    return [] if mb is None else ["--size", str(int(mb) * 2**20)]


def bwrap_argv(argv: Sequence[str], *, workdir: Path | None, env: Mapping[str, str],
                ro_binds: Sequence[str], root_dir: Path | None, privileged_root: bool,
                drop_to: int | None, network: bool, cwd: str | None, ready_fd: int,
                tmp_mb: int | None = None, disk_mb: int | None = None,
                placeholder_fds: Sequence[int] = (), binds: Sequence[tuple[str, str]] = (),
                hostname: str | None = None, cgroup_ns: bool = True,
                seccomp_fd: int | None = None, userns: Sequence[str] | None = None) -> list[str]:
    exe = shutil.which(BWRAP)
    if exe is None:
        raise SandboxError("bubblewrap (`bwrap`) is not installed: apt-get install bubblewrap")
    args = [exe, "--die-with-parent", "--new-session", "--clearenv"]
    if userns is not None:
        # root inside a user namespace whose ids the harness maps (userns.Handshake): bwrap
        # runs unprivileged and keeps only these capabilities, of that namespace alone
        args += [*userns, "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--unshare-cgroup"] if cgroup_ns else []
        args += [] if network else ["--unshare-net"]
        for cap in _KEEP_CAPS:
            args += ["--cap-add", cap]
    elif os.geteuid() == 0:
        # No user namespace (inside it root would still own the host's files): bwrap sets the
        # sandbox up as root, then the command runs with few or no capabilities.
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--unshare-cgroup-try"] if cgroup_ns else []
        if not network:
            args += ["--unshare-net"]
        args += ["--cap-drop", "ALL"]
        keep = _KEEP_CAPS if privileged_root else _LAUNCHER_CAPS
        for cap in keep:
            args += ["--cap-add", cap]
    else:
        # a user namespace of its own, in which no further one can be made
        args += ["--unshare-all", "--unshare-user", "--disable-userns"] + (["--share-net"] if network else [])
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    if hostname:
        args += ["--hostname", hostname]
    seeded = False
    if root_dir is not None:
        args += ["--bind", str(root_dir), "/", "--dev", "/dev",
                 *_size(tmp_mb), "--perms", "1777", "--tmpfs", "/dev/shm",
                 "--proc", "/proc", *proc_mask_args()]
        if workdir is not None:
            args += ["--bind", str(workdir), str(workdir)]
    else:
        made: set[str] = set()
        args += host_view_args(placeholder_fds, made)
        args += ["--dev", "/dev", *_size(tmp_mb), "--perms", "1777", "--tmpfs", "/dev/shm",
                 "--proc", "/proc", *proc_mask_args(),
                 *_size(tmp_mb), "--perms", "1777", "--tmpfs", "/tmp"]
        made.update(("/dev", "/proc", "/tmp"))
        try:
            args += program_binds_args(ro_binds, made)
        except ValueError as exc:
            raise SandboxError(str(exc)) from exc
        if workdir is not None:
            if disk_mb is None:
                args += dirs_above(str(workdir), made) + ["--bind", str(workdir), str(workdir)]
            else:
                seeded = True
                args += ["--ro-bind", str(workdir), SEED_DIR, *dirs_above(str(workdir), made),
                         *_size(disk_mb), "--perms", "0755", "--tmpfs", str(workdir)]
    for src, dest in binds:
        args += ["--bind", str(src), str(dest)]
    # last: nothing more is mounted, so make the skeleton read-only (binds inside stay as made)
    args += ["--remount-ro", "/dev"] + (["--remount-ro", "/"] if root_dir is None else [])
    for key, value in env.items():
        args += ["--setenv", key, value]
    chdir = cwd or (str(workdir) if workdir is not None else "/")
    if root_dir is not None:
        # a foreign root file system has no host interpreter: no launcher
        return args + ["--chdir", chdir, "--", *argv]
    user = "-" if drop_to is None else str(drop_to)
    return args + ["--chdir", "/", "--", sys.executable, "-I", "-S", "-c", _LAUNCH,
                   str(ready_fd), user, chdir, str(workdir) if workdir is not None else "-",
                   SEED_DIR if seeded else "-", *argv]


def rootfs_argv(argv: Sequence[str], root_dir: str | os.PathLike[str], *, env: Mapping[str, str],
                cwd: str = "/", network: bool = False, hostname: str | None = None,
                binds: Sequence[tuple[str, str]] = (), shm_mb: int | None = 128,
                cgroup_ns: bool = True, seccomp_fd: int | None = None,
                userns: Handshake | None = None) -> list[str]:
    """The bwrap command line that runs `argv` as uid 0 inside `root_dir`, in the
    root-file-system mode described above, for callers that manage the process themselves
    (e.g. a shell that serves several commands; its cgroups and the disk cap of `root_dir` are
    the caller's). `env` is the whole environment (nothing is added); `hostname` names its UTS
    namespace; `binds` are extra (host path, sandbox path) read-write binds, made after /dev
    and /proc; `shm_mb` sizes /dev/shm; `cgroup_ns=False` keeps the host's cgroup namespace
    (cgroup v2 lets a process move only between groups under its namespace's root);
    `seccomp_fd` is a descriptor of the system-call filter (`seccomp.filter_fd`), which the
    caller passes to the process and closes. With `userns` (a `userns.Handshake`) uid 0 inside
    is an unprivileged host id: bwrap runs as that id, and the caller passes `userns.fds`,
    then calls `userns.started()` and `userns.complete()` once the process runs; `root_dir`
    must then be owned by the shifted ids (`os_rootfs.shifted_rootfs`).
    `root_dir` must be disposable (an overlay), never the host's `/`; the harness must be root
    (without root the sandbox would be a user namespace whose "root" cannot chown)."""
    if os.geteuid() != 0:
        raise SandboxError("a privileged root file system sandbox needs the harness to run as root")
    if Path(root_dir).resolve() == Path("/"):
        raise SandboxError("privileged_root needs a disposable root_dir, never the host's /")
    args = bwrap_argv(argv, workdir=None, env=env, ro_binds=(), root_dir=Path(root_dir),
                       privileged_root=True, drop_to=None, network=network, cwd=cwd, ready_fd=-1,
                       tmp_mb=shm_mb, binds=binds, hostname=hostname, cgroup_ns=cgroup_ns,
                       seccomp_fd=seccomp_fd, userns=userns.args if userns is not None else None)
    if userns is None:
        return args
    try:
        return as_host_base(args, userns.base)
    except UsernsError as exc:
        raise SandboxError(str(exc)) from exc
