"""A root shell in a throwaway copy of a root file system: where Lifelong-OS episodes run.

One `OverlayShell` is one episode's "container":

* a private mount namespace (``unshare --mount --propagation private``) in which a tmpfs of
  bounded size is mounted and an overlay is built from the cached root file system (lower,
  never written) and a fresh upper layer on that tmpfs. The mounts exist only inside that
  namespace, so they vanish with its last process: nothing to unmount on the host, nothing
  left behind when the harness is killed, and the upper layer (everything the episode wrote)
  is freed with it;
* bubblewrap on top (`memrl_envs.sandbox.rootfs_argv`): the overlay as `/`, uid 0 inside a
  user namespace whose ids are a range of unprivileged host ids held by this episode alone
  while it lives (`memrl_envs.sandbox.userns.lease_ids`; the lower layer is then the cached
  tree idmapped to that range, `memrl_envs.sandbox.idmap`, or where that cannot be, a copy
  owned by the range, `rootfs.shifted_rootfs`), with
  Docker's default capabilities minus raw sockets, low ports, mknod, chroot, audit writes and
  file capabilities (so, as in Docker, no mounts and no modules), of that namespace only, the
  system-call filter (`memrl_envs.sandbox.seccomp`), no_new_privs, its own PID,
  network (none), IPC and UTS namespaces (host name ``memrl-os``), kernel interfaces masked or
  read-only as runc and Docker do (/proc/sys, /proc/sysrq-trigger, /proc/kcore, ...; no /sys),
  a read-only /dev with a capped /dev/shm, an empty environment plus Docker's defaults (PATH,
  HOME=/root), per-process resource limits;
* caps on the whole episode (`memrl_envs.sandbox.cgroups`), where the host lets it make them:
  a memory cgroup (the episode's processes and everything it writes to its tmpfs upper
  layer: writing is bounded by ``upper_size_mb``, memory by ``memory_mb``; its TCP socket
  buffers by ``limits.tcp_mb``, beside it on cgroup v1, within it on v2) and a pids cgroup
  split in two: the commands (``cmd``, at most ``pids_max``) and the shell's own side
  (``srv``), so a fork bomb left running in the background cannot starve the shell;
* inside it a small bash loop (``SERVER``) that runs each command as ``bash -c`` with a time
  limit, its output (stdout and stderr together) in a file that is already unlinked, and
  sends back the first bytes of the output and the exit status. The harness keeps at most
  that many bytes of a reply and drops the rest (`shell_reader`): a process of the episode
  can still reach the server's descriptors and write into its pipe, but not grow the
  harness's memory or make it rescan what it already read.

Like ``docker exec`` into one container: files persist from command to command, every command
starts in the same working directory with the same environment, a process a command leaves in
the background keeps running until the episode ends, and a command that runs past its time
limit is killed together with everything it started in its process group. Closing the shell
(or the harness dying: bwrap runs with ``--die-with-parent``) ends the PID namespace and with
it every process of the episode.

`Shell` is the small interface the episode runner uses; a Docker backend could implement it.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol

from memrl_envs.lifelong_os.rootfs import RootfsError, shifted_rootfs
from memrl_envs.lifelong_os.shell_reader import ReplyReader
from memrl_envs.sandbox import (ID_COUNT, CappedReader, Handshake, Limits, SandboxError, UsernsError, filter_fd,
                                limits_preexec, rootfs_argv, sandbox_cgroup, userns_available)
from memrl_envs.sandbox.idmap import idmap_available, mount_command
from memrl_envs.sandbox.uids import UidsExhausted
from memrl_envs.sandbox.userns import lease_ids

# Docker's environment for `docker exec` into an image that sets nothing else.
DOCKER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOSTNAME = "memrl-os"  # also the tree's /etc/hostname (os_rootfs)
DEFAULT_ENV = {"PATH": DOCKER_PATH, "HOME": "/root", "HOSTNAME": HOSTNAME}
_GRACE_S = 15.0          # beyond a command's own limit before the shell counts as hung
_START_TIMEOUT_S = 60.0
CMD_CGROUP = "/dev/.memrl-cmd-cgroup"  # inside the sandbox: the commands' pids cgroup (if any)
PIDS_SPARE = 32  # processes the shell's side may use beyond the commands' cap
SHM_MB = 128     # the episode's /dev/shm (where the shell keeps each command's output)

# Runs as the sandbox's first process. fd 3: requests from the harness, fd 4: replies.
# Request: "RUN <timeout> <nbytes> <nonce>\n" then <nbytes> bytes of script.
# Reply: up to <limit>+1 bytes of output, then "\n<nonce> <exit status>\n". Only builtins
# besides `timeout` and `bash`, so a system whose tools were deleted still answers.
SERVER = r'''
LC_ALL=C
exec 3<&0 4>&1 0</dev/null 1>/dev/null
cd -- "$1" 2>/dev/null || cd /
limit=$2
printf 'READY\n' >&4
while IFS=' ' read -r verb tmo n nonce <&3; do
  [ "$verb" = RUN ] || break
  script=
  if [ "$n" -gt 0 ]; then IFS= read -r -N "$n" script <&3 || break; fi
  f=
  for d in /dev/shm /tmp /var/tmp /; do
    f="$d/.memrl-out-$BASHPID-$RANDOM$RANDOM"
    if { exec 5>"$f"; } 2>/dev/null; then break; fi
    f=
  done
  if [ -z "$f" ]; then
    printf 'the shell could not create its output file\n%s 126\n' "$nonce" >&4
    continue
  fi
  exec 6<"$f"
  rm -f -- "$f" 2>/dev/null
  timeout -k 2 "$tmo" bash -c '[ -e /dev/.memrl-cmd-cgroup ] && echo 0 2>/dev/null >/dev/.memrl-cmd-cgroup
    exec bash -c "$0"' "$script" \
    </dev/null >&5 2>&5 3<&- 4>&- 5>&- 6<&-
  rc=$?
  exec 5>&-
  out=
  IFS= read -r -d '' -N "$((limit + 1))" out <&6
  exec 6<&-
  printf '%s' "$out" >&4
  printf '\n%s %s\n' "$nonce" "$rc" >&4
done
'''


class ShellError(RuntimeError):
    """The shell could not be started, or stopped answering (not: a command failed)."""


class ShellLost(ShellError):
    """The shell died (`frozen` False) or stopped answering (`frozen` True) while a command
    ran: raised by `run`, whose caller knows whose command it was."""

    def __init__(self, message: str, *, frozen: bool) -> None:
        super().__init__(message)
        self.frozen = frozen


@dataclass(frozen=True)
class CommandResult:
    """What one command did. `exit_code` is None when it ran out of time."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    seconds: float = 0.0
    dropped: int = 0          # output bytes beyond what the harness keeps, dropped unread

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Shell(Protocol):
    """One episode's system: commands run in sequence on one file system."""

    def run(self, script: str, timeout_s: float) -> CommandResult: ...

    def close(self) -> None: ...


_PROBE = ('mount -t tmpfs memrl-probe "$1" && mkdir "$1/l" "$1/u" "$1/w" "$1/m" && '
          'mount -t overlay memrl-probe -o "lowerdir=$1/l,upperdir=$1/u,workdir=$1/w" "$1/m"')


@functools.lru_cache(maxsize=1)
def overlay_available() -> str | None:
    """None if `OverlayShell` can run here, else the reason it cannot (checked once: root,
    the tools, and a real tmpfs + overlay mount in a private mount namespace)."""
    if os.geteuid() != 0:
        return "the Lifelong-OS sandbox needs root (overlay mounts, a root-owned file system)"
    for tool in ("unshare", "mount", "bwrap"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed" + (" (apt-get install bubblewrap)" if tool == "bwrap" else "")
    probe_dir = tempfile.mkdtemp(prefix="memrl-os-probe-")
    try:
        probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _PROBE,
                                "probe", probe_dir], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot make a private mount namespace: {exc}"
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    if probe.returncode != 0:
        return f"cannot mount a tmpfs and an overlay here: {probe.stderr.strip()[:300]}"
    return None


# Set-up inside the new mount namespace (already in the episode's cgroups): a tmpfs for the
# upper layer, the lower layer idmapped to the episode's ids (when `idmap` is set: the command
# that mounts it, its last argument the target), the overlay, then bwrap.
_SETUP = r'''
set -eu
lower=$1 base=$2 size=$3 owner=$4 shown=$5 idmap=$6
shift 6
mount -t tmpfs -o "size=${size}m,mode=0755" memrl-episode "$base"
mkdir "$base/upper" "$base/work" "$base/root"
if [ "$idmap" != - ]; then
  mkdir "$base/lower"
  $idmap "$base/lower"
  lower=$base/lower
fi
chown "$owner:$owner" "$base/upper"  # the overlay's / takes its owner from here: root inside
mount -t overlay memrl-episode -o "lowerdir=$lower,upperdir=$base/upper,workdir=$base/work" "$base/root"
[ "$shown" = "$base/root" ] || mount --bind "$base/root" "$shown"
exec "$@"
'''

# Where, in the episode's own mount namespace, its overlay is shown to bubblewrap when bwrap runs
# as an unprivileged host id: a host folder every uid may traverse (the scratch folder's parents
# may not be, e.g. a 0700 home), covered only inside that namespace.
SHOW_AT = ("/mnt", "/media", "/srv", "/opt")


def _shown_at(base: Path, mapped: bool) -> str:
    if mapped:
        for d in SHOW_AT:
            if os.path.isdir(d) and not os.path.islink(d) and os.stat(d).st_mode & 0o001:
                return d
    return str(base / "root")


# open files: 128 per process (shell commands need a handful), so an episode at its 1,024-process
# cap holds at most 131,072 of the host's file table (the fit check counts it)
DEFAULT_LIMITS = Limits(wall_s=0, cpu_s=None, memory_mb=4096, nproc=None, file_mb=256, nofile=128)


class OverlayShell:
    """A root shell over a throwaway overlay of `rootfs` (see the module docstring).

    Args:
        rootfs: the cached root file system (lower layer; never written).
        scratch_dir: where the per-episode mount point is made (an empty folder, removed at close).
        upper_size_mb: room for everything the episode writes (a tmpfs).
        workdir: the directory every command starts in.
        output_bytes: output bytes kept per command (the rest is dropped).
        limits: per-process limits (CPU seconds, address space, file size).
        pids_max: the commands' process cap, a pids cgroup where one can be made (0: off).
        memory_mb: the whole episode's memory cap (its tmpfs upper layer and /dev/shm count),
            a memory cgroup where one can be made (None: off).
        shm_mb: size of the episode's /dev/shm (tmpfs).
        env: the commands' environment (default: what `docker exec` gives).
    """

    def __init__(self, rootfs: str | os.PathLike[str], *, scratch_dir: str | os.PathLike[str] | None = None,
                 upper_size_mb: int = 1024, workdir: str = "/", output_bytes: int = 65536,
                 limits: Limits = DEFAULT_LIMITS,
                 pids_max: int = 1024, memory_mb: int | None = 2048, shm_mb: int = SHM_MB,
                 env: Mapping[str, str] | None = None) -> None:
        why = overlay_available()
        if why:
            raise ShellError(why)
        lower = Path(rootfs).resolve()
        if not (lower / "bin").exists() or not (lower / "etc").is_dir():
            raise ShellError(f"{lower} does not look like a root file system")
        # root inside a user namespace, a range of unprivileged host ids of this episode's own
        # outside, where the host allows it (shell_facts.overlay_facts says which); the tree then appears
        # owned by that range (idmapped, or a copy owned by it)
        self.mapped = userns_available() is None
        self._ids = None
        idmap: list[str] = []
        if self.mapped:
            try:
                self._ids = lease_ids()
            except UidsExhausted as exc:
                raise ShellError(str(exc)) from exc
            if idmap_available(str(lower)) is None:
                idmap = mount_command(lower, self._ids.uid, ID_COUNT)  # _SETUP adds the target
            else:
                try:
                    lower = shifted_rootfs(lower, self._ids.uid, ID_COUNT)
                except (OSError, RootfsError) as exc:
                    self._ids.release()
                    raise ShellError(f"could not make the id-shifted copy of {lower}: {exc}") from exc
        self.host_base = self._ids.uid if self._ids is not None else 0  # host uid of root inside
        if re.search(r"[,:\\\s]", str(lower)) or any(re.search(r"\s", a) for a in idmap):
            self._release_ids()
            raise ShellError(f"root file system path {lower} has a character overlay options cannot carry")
        self.output_bytes = int(output_bytes)
        self._base = Path(tempfile.mkdtemp(prefix="memrl-os-", dir=scratch_dir))
        if re.search(r"[,:\\\s]", str(self._base)):
            os.rmdir(self._base)
            self._release_ids()
            raise ShellError(f"scratch folder {self._base} has a character overlay options cannot carry")
        self._lock = threading.Lock()
        self._closed = False
        server_argv = ["/bin/bash", "--noprofile", "--norc", "-c", SERVER, "memrl-shell", workdir,
                       str(self.output_bytes)]
        try:
            self._cgroup = sandbox_cgroup(memory_mb, pids_max + PIDS_SPARE if pids_max > 0 else None,
                                          split={"srv": None, "cmd": pids_max if pids_max > 0 else None},
                                          prefix="memrl-os-", tcp_mb=limits.tcp_mb)
        except SandboxError as exc:
            self._cleanup()
            raise ShellError(str(exc)) from exc
        seccomp = filter_fd()
        shake = Handshake(self.host_base) if self.mapped else None
        owner = self.host_base
        try:
            cmd_procs = self._cgroup.move_file("cmd")
            if cmd_procs and self.mapped:
                self._cgroup.delegate_moves("cmd", owner, owner)
            shown = _shown_at(self._base, self.mapped)
            inner = rootfs_argv(server_argv, shown, env=dict(env or DEFAULT_ENV), cwd="/",
                                hostname=HOSTNAME, binds=[(cmd_procs, CMD_CGROUP)] if cmd_procs else (),
                                shm_mb=shm_mb, cgroup_ns=not self._cgroup.moves_need_host_namespace,
                                seccomp_fd=seccomp, userns=shake)
        except (SandboxError, OSError) as exc:
            if seccomp is not None:
                os.close(seccomp)
            if shake is not None:
                shake.close()
            self._cgroup.close()
            self._cleanup()
            raise ShellError(str(exc)) from exc
        argv = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _SETUP,
                "memrl-overlay", str(lower), str(self._base), str(int(upper_size_mb)), str(owner), shown,
                " ".join(idmap) or "-", *inner]
        join = self._cgroup.preexec("srv") if self._cgroup.groups else None
        set_limits = limits_preexec(limits)

        def preexec() -> None:
            if join is not None:
                join()
            set_limits()

        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, preexec_fn=preexec,
                                          start_new_session=True, env={"PATH": DOCKER_PATH},
                                          pass_fds=(*((seccomp,) if seccomp is not None else ()),
                                                    *(shake.fds if shake is not None else ())))
        except OSError as exc:
            if shake is not None:
                shake.close()
            self._cgroup.close()
            self._cleanup()
            raise ShellError(f"could not start the episode sandbox: {exc}") from exc
        finally:
            if seccomp is not None:
                os.close(seccomp)
        if shake is not None:
            shake.started()
        # the server sends at most output_bytes + 1 of a command's output; nothing more is kept
        self._out = ReplyReader(self._proc.stdout, cap=self.output_bytes + 1)
        self._err = CappedReader(self._proc.stderr, 65536)
        self._out.expect(re.compile(rb"READY\n"))
        if shake is not None:
            try:
                shake.complete(_START_TIMEOUT_S)
            except UsernsError as exc:
                time.sleep(0.2)  # let the reader take what the sandbox said before it ended
                detail = self._err.text().strip()[-800:]
                self.close()
                raise ShellError(f"the episode sandbox did not start: {exc}"
                                 + (f": {detail}" if detail else "")) from exc
        if self._out.wait(time.monotonic() + _START_TIMEOUT_S) is None:
            detail = self._err.text().strip()[-800:]
            self.close()
            raise ShellError(f"the episode sandbox did not start: {detail or 'no message'}")

    # -- commands ---------------------------------------------------------------------
    def run(self, script: str, timeout_s: float) -> CommandResult:
        """Run `script` with ``bash -c`` and wait for it (at most `timeout_s`, then it is killed).
        Raises `ShellError` when the shell itself is gone or hangs."""
        if "\0" in script:
            return CommandResult(exit_code=2, output="the command contains a NUL character")
        with self._lock:
            if self._closed:
                raise ShellError("the shell is closed")
            data = script.encode("utf-8", errors="surrogateescape")
            nonce = secrets.token_hex(16)
            header = f"RUN {float(timeout_s):g} {len(data)} {nonce}\n".encode()
            start = time.monotonic()
            self._out.expect(re.compile(b"\n" + nonce.encode() + rb" (-?\d+)\n"))
            try:
                self._proc.stdin.write(header + data)
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise ShellLost(f"the shell is gone ({exc}); {self._err.text().strip()[-300:]}",
                                frozen=False) from exc
            reply = self._out.wait(start + timeout_s + _GRACE_S)
            seconds = time.monotonic() - start
            if reply is None:
                gone = self._out.eof
                detail = self._err.text().strip()[-300:]
                raise ShellLost(("the shell is gone" if gone else
                                 f"the shell did not answer within {timeout_s + _GRACE_S:g} s")
                                + (f": {detail}" if detail else ""), frozen=not gone)
            status, raw = int(reply.match.group(1)), reply.body
        truncated = len(raw) > self.output_bytes or reply.dropped > 0
        output = raw[: self.output_bytes].decode("utf-8", errors="replace")
        # coreutils `timeout`: 124 after TERM, 137 when KILL was needed
        timed_out = status in (124, 137) and seconds >= timeout_s - 0.05
        return CommandResult(exit_code=None if timed_out else status, output=output, timed_out=timed_out,
                             truncated=truncated, seconds=seconds, dropped=reply.dropped)

    # -- the end ------------------------------------------------------------------------
    def close(self) -> None:
        """End the episode: every process in it dies, the overlay and its upper layer go."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        proc = self._proc if hasattr(self, "_proc") else None
        if not hasattr(self, "_cgroup"):
            self._cleanup()
            return
        if proc is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            try:  # bwrap's group: killing it ends the PID namespace and so every process inside
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            for reader in (self._out, self._err):
                reader.thread.join(timeout=5)
            for stream in (proc.stdout, proc.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
        self._cgroup.close()
        self._cleanup()

    @property
    def cgroup(self):
        """The episode's cgroups (for reading its usage from the host)."""
        return self._cgroup

    def _release_ids(self) -> None:
        if getattr(self, "_ids", None) is not None:
            self._ids.release()
            self._ids = None

    def _cleanup(self) -> None:
        """Once no process of the episode is left: its host ids go back, its folder goes."""
        self._release_ids()
        # On the host the folder was only ever a mount point inside the episode's namespace.
        for _ in range(20):
            try:
                os.rmdir(self._base)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        shutil.rmtree(self._base, ignore_errors=True)

    def __enter__(self) -> "OverlayShell":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
