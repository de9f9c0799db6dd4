"""One conformance suite for every sandbox backend, in the spirit of Inspect AI's sandbox
`self_check`: the same hostile cases run against the host-root mode (the BigCodeBench executor's
sandbox, `Executor.run`) and the root-file-system mode (a Lifelong-OS episode through
`LifelongOsEnv.run_episode` on an `OverlayShell`), each with modest caps so the cases are quick.

Every case is a bash script (bash, coreutils and perl exist in both modes). What is asserted is
the effect seen FROM THE HOST, while and after the case runs:
  * the host's kernel values are unchanged (read before and after; a value that did change is
    restored at once and the case fails), and the kernel logged no drop_caches/sysrq by it;
  * memory: the sandbox's cgroup (read on the host, sampled every 20 ms) never went past its
    cap, and the host's available memory did not drop by more than the cap plus a margin;
  * disk: the host file system's free space did not drop by more than a margin (everything a
    sandbox writes lives on a capped tmpfs);
  * no file named by the case's tag appeared on the host (run dir, bank, caches, /tmp, ...);
  * no connection reached a host listener (TCP on 127.0.0.1, unix sockets in the run dir, the
    cache's database folder, /run, /var/tmp, /tmp, /dev/shm, an abstract socket);
  * no secret reached the records (a fake API key in the harness's environment and in a host
    process's environment; the bank's content);
  * no process of the case outlived it, a host process it tried to kill lives, no cgroup is left;
  * the next sandbox starts pristine (same view as one made before any case).

Set MEMRL_CONFORMANCE_REPORT=<path> to write the host-side measurements of each case as JSON.
Needs root (both modes), bubblewrap, the Lifelong-OS root file system for the root-fs mode.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import errno
import hashlib
import json
import os
import re
import selectors
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

import sandbox_probe
from memrl.core.rundir import RunDir
from memrl_envs.sandbox import SandboxCgroup, bwrap_available, cgroup_support

# modest caps: every case is quick, and an escape would show far beyond them
MEMORY_CAP_MB = 256
DISK_CAP_MB = 64
TMP_MB = 16
PIDS_CAP = 64
PER_PROCESS_AS_MB = 384
MEMORY_MARGIN_MB = 768   # other work on the machine moves its free memory
DISK_MARGIN_MB = 512
SEED_MB = 8              # what a sandbox's folders on the host may hold: the seed of its work folder
CASE_TIMEOUT_S = 12
TCP_MARGIN_MB = 16       # other sockets of the machine move the host's TCP memory (and a charge may overshoot)
FILE_TABLE_SHARE_MAX = 0.2  # of fs.file-max, one sandbox at its process cap (the fit check allows half for all)

_WHY = bwrap_available()
pytestmark = [pytest.mark.serial,  # times or samples the host: runs alone (Makefile, test)
              pytest.mark.skipif(_WHY is not None, reason=f"no sandbox here: {_WHY}"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the conformance suite runs as root (as CI does)")]
REPORT: dict[str, dict] = {}


# -- the host, seen from outside ---------------------------------------------------------------
def _probe_value(path: str, current: str, tag: str) -> str:
    if current.strip().lstrip("-").isdigit():
        return str(int(current) + 1)
    return f"memrl-probe-{tag}"


KNOBS = [p for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/poweroff_cmd",
                     "/proc/sys/kernel/printk_ratelimit", "/proc/sys/kernel/hung_task_warnings",
                     "/proc/sys/vm/dirty_expire_centisecs") if os.path.exists(p)]


def read_knobs() -> dict[str, str]:
    return {p: Path(p).read_text() for p in KNOBS}


def restore_knobs(saved: dict[str, str]) -> list[str]:
    """Put back every value that changed; the names of those that had."""
    changed = []
    for path, value in saved.items():
        if Path(path).read_text() != value:
            changed.append(path)
            Path(path).write_text(value.rstrip("\n"))
    return changed


def _kernel_log() -> list[tuple[float, str]] | None:
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    lines = []
    for line in out.stdout.splitlines():
        m = re.match(r"\[\s*(\d+\.\d+)\]\s?(.*)", line)
        if m:
            lines.append((float(m.group(1)), m.group(2)))
    return lines


def kernel_log_time() -> float | None:
    """The time of the kernel log's last line (None: the log cannot be read here)."""
    lines = _kernel_log()
    return None if lines is None else (lines[-1][0] if lines else 0.0)


def kernel_log_writes_since(when: float | None) -> list[str]:
    """What the kernel logged after `when` for a write to drop_caches by `dd`, or for sysrq (the
    log is a ring: lines are told apart by their time, not counted)."""
    lines = _kernel_log() if when is not None else None
    return [text for t, text in lines or [] if t > when and re.search(r"dd \(\d+\): drop_caches|sysrq: ", text)]


def mem_available_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no MemAvailable")


def disk_free_mb(path: str = "/") -> int:
    return shutil.disk_usage(path).free // 2**20


def du_mb(root: str) -> float:
    total = 0
    for dirpath, dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total / 2**20


class Sampler:
    """Samples the host every 20 ms while a case runs: free memory, free disk, what the
    sandbox's host folders hold, and the live sandboxes' cgroup memory and pids."""

    def __init__(self, disk_paths: list[str], folders: list[str]) -> None:
        self.disk_paths = disk_paths
        self.folders = folders
        self.folders_peak = 0.0
        self.mem0 = mem_available_mb()
        self.disk0 = {p: disk_free_mb(p) for p in disk_paths}
        self.mem_min = self.mem0
        self.disk_min = dict(self.disk0)
        self.cg_mem_peak = 0
        self.cg_pids_peak = 0
        self.cg_mem_limits: set[int] = set()     # the memory limits the sandboxes' groups had
        self.unfiltered: set[str] = set()        # sandbox processes seen without the syscall filter
        self.filtered = 0
        self.host_uids: dict[str, int] = {}      # name -> host uid of the processes inside
        self.files0 = self.files_peak = open_files()     # the host's file table (fs/file-nr)
        self.rss0 = self.rss_peak = harness_rss_mb()     # the harness's own memory
        self.tcp0 = self.tcp_peak = host_socket_pages("TCP")  # the host's TCP memory (all sockets)
        self.udp0 = self.udp_peak = host_socket_pages("UDP")  # ... and its UDP memory
        self.cg_tcp_peak = 0                             # the sandboxes' TCP memory, from their groups
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.mem_min = min(self.mem_min, mem_available_mb())
            for p in self.disk_paths:
                self.disk_min[p] = min(self.disk_min[p], disk_free_mb(p))
            self.folders_peak = max(self.folders_peak, sum(du_mb(f) for f in self.folders))
            live = SandboxCgroup.live()
            self.cg_mem_peak = max(self.cg_mem_peak, sum(cg.memory_bytes() or 0 for cg in live))
            self.cg_pids_peak = max(self.cg_pids_peak, max((cg.pids_current() or 0 for cg in live), default=0))
            for cg in live:
                limit = memory_limit_bytes(cg)
                if limit is not None:
                    self.cg_mem_limits.add(limit)
                for pid in cg.procs():
                    mode, comm = seccomp_mode(pid)
                    uid = host_uid(pid)
                    if uid is not None and not in_host_pid_namespace(pid) and not is_launcher(pid):
                        self.host_uids[comm] = uid
                    # the launchers (the harness's child, unshare, mount, bwrap's monitor) are in the
                    # host's PID namespace, outside the filter by design, and so is bwrap's own init
                    # (pid 1 inside, bwrap's code, which nothing can ptrace); all else must be filtered
                    if mode == "0" and not in_host_pid_namespace(pid) and comm != "bwrap":
                        self.unfiltered.add(f"{pid}:{comm}")
                    elif mode == "2":
                        self.filtered += 1
            self.files_peak = max(self.files_peak, open_files())
            self.rss_peak = max(self.rss_peak, harness_rss_mb())
            self.tcp_peak = max(self.tcp_peak, host_socket_pages("TCP"))
            self.udp_peak = max(self.udp_peak, host_socket_pages("UDP"))
            self.cg_tcp_peak = max(self.cg_tcp_peak, max((cg.tcp_peak_bytes() or 0 for cg in live), default=0))
            self.samples += 1
            self._stop.wait(0.02)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def facts(self) -> dict:
        return {"host_memory_drop_mb": self.mem0 - self.mem_min,
                "host_disk_drop_mb": max(self.disk0[p] - self.disk_min[p] for p in self.disk_paths),
                "host_folders_peak_mb": round(self.folders_peak, 1),
                "cgroup_memory_peak_mb": round(self.cg_mem_peak / 2**20, 1),
                "cgroup_pids_peak": self.cg_pids_peak, "samples": self.samples,
                "cgroup_memory_limits_mb": sorted(v // 2**20 for v in self.cg_mem_limits),
                "processes_unfiltered": sorted(self.unfiltered), "process_samples_filtered": self.filtered,
                "host_uids": dict(sorted(self.host_uids.items())),
                "host_open_files_rise": self.files_peak - self.files0,
                "harness_rss_rise_mb": round(self.rss_peak - self.rss0, 1),
                "host_tcp_memory_rise_mb": round((self.tcp_peak - self.tcp0) * 4096 / 2**20, 1),
                "host_udp_memory_rise_mb": round((self.udp_peak - self.udp0) * 4096 / 2**20, 1),
                "cgroup_tcp_peak_mb": round(self.cg_tcp_peak / 2**20, 1)}


def memory_limit_bytes(cg) -> int | None:
    """The memory limit of a sandbox's group, read on the host."""
    g = cg.groups.get("memory")
    if g is None:
        return None
    try:
        text = (g.path / ("memory.limit_in_bytes" if g.version == 1 else "memory.max")).read_text().strip()
    except OSError:
        return None
    return None if text == "max" else int(text)


def seccomp_mode(pid: int) -> tuple[str | None, str]:
    """A process's seccomp mode (0 none, 2 filter) and name, read on the host."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None, ""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return fields.get("Seccomp", "").strip() or None, fields.get("Name", "").strip()


def open_files() -> int:
    return int(Path("/proc/sys/fs/file-nr").read_text().split()[0])


def file_max() -> int:
    return int(Path("/proc/sys/fs/file-max").read_text())


def host_socket_pages(proto: str) -> int:
    """The TCP or UDP memory of the whole host (every socket, every network namespace), in pages."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith(f"{proto}:"):
            words = line.split()
            return int(words[words.index("mem") + 1])
    raise AssertionError(f"no {proto} line in /proc/net/sockstat")


def harness_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def host_uid(pid: int) -> int | None:
    """A process's effective uid as the host sees it."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[2])
    except (OSError, ValueError, IndexError):
        pass
    return None


def is_launcher(pid: int) -> bool:
    """The host-root mode's launcher, still host root for the moment it hands the work folder
    over and drops to the sandbox uid (isolate._LAUNCH; no task code has run yet)."""
    try:
        return b"no_new_privs failed" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def in_host_pid_namespace(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
    except OSError:
        return True  # gone: nothing to judge


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
SYS_ADD_KEY, SYS_KEYCTL, KEY_SPEC_USER_KEYRING, KEYCTL_REVOKE = 248, 250, -4, 3


def host_add_key(description: str, payload: str) -> int | None:
    """A key in host root's user keyring (None where the kernel has no keyrings)."""
    key = _libc.syscall(SYS_ADD_KEY, b"user", description.encode(), payload.encode(), len(payload),
                        ctypes.c_long(KEY_SPEC_USER_KEYRING))
    return None if key < 0 else key


def host_keys_named(text: str) -> list[str]:
    """The keys the host can see whose description holds `text` (/proc/keys)."""
    try:
        return [line for line in Path("/proc/keys").read_text().splitlines() if text in line]
    except OSError:
        return []


def cgroup_root_files() -> dict[str, str]:
    """Knobs of the host's root cgroups that a nested cgroup mount reached before (issue 22)."""
    out = {}
    for path in ("/sys/fs/cgroup/cpuset/cpuset.sched_load_balance", "/sys/fs/cgroup/cpuset/cpuset.cpus",
                 "/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                 "/sys/fs/cgroup/pids/pids.max" if os.path.exists("/sys/fs/cgroup/pids/pids.max") else ""):
        if path and os.path.exists(path):
            out[path] = Path(path).read_text()
    return out


def cgroup_dirs_named(text: str) -> list[str]:
    found = []
    for top in Path("/sys/fs/cgroup").iterdir():
        try:
            found += [str(p) for p in top.rglob(f"*{text}*")]
        except OSError:
            pass
    return found


class Listeners:
    """Host listeners a sandbox must not reach: any accepted connection is recorded."""

    def __init__(self, unix_paths: list[Path], abstract: str) -> None:
        self.accepted: list[str] = []
        self.socks: dict[socket.socket, str] = {}
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        self.port = tcp.getsockname()[1]
        self.socks[tcp] = f"tcp:{self.port}"
        self.unix_paths = []
        for path in unix_paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(path))
            os.chmod(path, 0o777)  # anyone may connect: only the path's reach keeps a sandbox out
            s.listen(8)
            self.socks[s] = str(path)
            self.unix_paths.append(path)
        a = socket.socket(socket.AF_UNIX)
        a.bind("\0" + abstract)
        a.listen(8)
        self.socks[a] = "@" + abstract
        self.abstract = abstract
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._self_check()

    def _self_check(self) -> None:
        """The host itself reaches every listener once, so a case that records nothing was
        measured by listeners that work."""
        targets = [(socket.AF_INET, ("127.0.0.1", self.port))] + [(socket.AF_UNIX, str(p)) for p in self.unix_paths]
        targets.append((socket.AF_UNIX, "\0" + self.abstract))
        for family, address in targets:
            with socket.socket(family) as c:
                c.connect(address)
        deadline = time.monotonic() + 5
        while len(self.accepted) < len(targets) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.accepted) == len(targets), f"host listeners did not answer the host: {self.accepted}"
        self.accepted.clear()

    def _run(self) -> None:
        # a selector (epoll), not select(): the test process may hold descriptors past 1024
        with selectors.DefaultSelector() as sel:
            for s in self.socks:
                sel.register(s, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in sel.select(0.1):
                    try:
                        conn, _ = key.fileobj.accept()
                        conn.close()
                        self.accepted.append(self.socks[key.fileobj])
                    except OSError:
                        pass

    def assert_listening(self) -> None:
        """A listener that died would let every case pass unmeasured: fail instead."""
        assert self._thread.is_alive(), "the host listeners' thread died: connections went unmeasured"

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for s in self.socks:
            s.close()
        for p in self.unix_paths:
            p.unlink(missing_ok=True)


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, root)}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}".encode())
            if os.path.isfile(p) and not os.path.islink(p):
                h.update(Path(p).read_bytes())
    return h.hexdigest()


def processes_with(text: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", text], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def host_disk_sample() -> tuple[str | None, int, int]:
    """(hex of 1 KiB of the host root device at offset 1 KiB, major, minor)."""
    st = os.stat("/")
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    try:
        with open(f"/dev/block/{major}:{minor}", "rb") as fh:
            fh.seek(1024)
            data = fh.read(1024)
        return (data.hex() if data.strip(b"\0") else None), major, minor
    except OSError:
        return None, major, minor


# -- the backends -----------------------------------------------------------------------------
@dataclass
class Outcome:
    exit_code: int | None
    output: str
    record: str            # everything the harness would keep of the run
    seconds: float


class HostRootBackend:
    """The BigCodeBench executor's sandbox (host-root mode), with small caps."""

    name = "host-root"
    pids_cap = PIDS_CAP

    def __init__(self, tmp: Path) -> None:
        from memrl_envs.bigcodebench.executor import Executor, _mpl_tag

        cache = tmp / "bcb-cache"
        fonts = cache / "bigcodebench" / _mpl_tag()
        fonts.mkdir(parents=True)
        (fonts / "fontlist-conformance.json").write_text("{}")  # no font cache build: no matplotlib here
        self.work_root = tmp / "work"
        self.work_root.mkdir()
        self.executor = Executor(time_limit_s=CASE_TIMEOUT_S, slack_s=3, memory_mb=PER_PROCESS_AS_MB, nproc=PIDS_CAP,
                                 sandbox_memory_mb=MEMORY_CAP_MB, disk_mb=DISK_CAP_MB, tmp_mb=TMP_MB,
                                 max_parallel=1, cache_dir=cache, work_root=self.work_root)
        self.facts = self.executor.facts()
        self.scratch = [str(self.work_root)]
        from memrl_envs.sandbox.uids import UID_BASE, UID_SPAN

        self.host_uid_range = (UID_BASE, UID_BASE + UID_SPAN)

    def run(self, script: str) -> Outcome:
        start = time.monotonic()
        r = self.executor.run(["/bin/bash", "-c", script])
        record = json.dumps(dataclasses.asdict(r))
        return Outcome(r.returncode, r.stdout + r.stderr, record, time.monotonic() - start)


class RootfsBackend:
    """A Lifelong-OS episode (root-file-system mode), with small caps."""

    name = "rootfs"
    pids_cap = PIDS_CAP + 32  # the shell's own side has room beyond the commands' cap

    def __init__(self, tmp: Path, rootfs: Path) -> None:
        from memrl_envs.lifelong_os import LifelongOsEnv
        from memrl_envs.lifelong_os.settings import LifelongOsSettings
        from memrl_envs.lifelong_os.shell import OverlayShell

        scratch = tmp / "scratch"
        scratch.mkdir()
        self.scratch = [str(scratch)]

        def shell(root: Path):
            return OverlayShell(root, scratch_dir=scratch, upper_size_mb=DISK_CAP_MB, memory_mb=MEMORY_CAP_MB,
                                pids_max=PIDS_CAP, shm_mb=TMP_MB, output_bytes=200_000)

        self.env = LifelongOsEnv(LifelongOsSettings.model_construct(data_path="unused.json",
                                                    rootfs_dir=str(rootfs.parent),
                                                    command_timeout_s=CASE_TIMEOUT_S,
                                                    observation_max_chars=100_000),
                                 agent="gold", shell_factory=shell)
        from memrl_envs.lifelong_os.shell_facts import overlay_facts

        self.facts = overlay_facts(upper_size_mb=DISK_CAP_MB, pids_max=PIDS_CAP, memory_mb=MEMORY_CAP_MB,
                                   max_parallel=1, rootfs=rootfs)
        from memrl_envs.sandbox import HOST_BASE, ID_COUNT, userns_available
        from memrl_envs.sandbox.userns import RANGES

        # where the host cannot map ids, the facts say so and root inside is host root
        self.host_uid_range = (HOST_BASE, HOST_BASE + RANGES * ID_COUNT) if userns_available() is None else (0, 1)

    def run(self, script: str) -> Outcome:
        from memrl_envs.lifelong_os.episode import Action, OsTask
        from memrl_envs.lifelong_os.prompts import FINISH

        class OneCommand:
            def next_action(self, task, history):
                return (Action("bash", script), script) if not history else (Action(FINISH), FINISH)

        task = OsTask(key="conformance", instruction="hostile", init_script="", eval_script="true", gold_script="true")
        start = time.monotonic()
        res = self.env.run_episode(task, OneCommand())
        output = res.transcript[0].observation if res.transcript else ""
        output += "\n" + "\n".join(res.errors)
        return Outcome(None if not res.transcript else 0, output, json.dumps(dataclasses.asdict(res)),
                       time.monotonic() - start)


# what a fresh sandbox sees: its user, its folders, its processes, the sizes of its tmpfs folders
PRISTINE = ("u=$(id -u); [ $u -ge 1000000 ] && u=own-uid; echo $u; ls -A / | tr '\\n' ' '; echo; "
            "ls -A /tmp /dev/shm . | tr '\\n' ' '; echo; "
            "p=$(ps -eo comm=); echo $p | tr ' ' '\\n' | sort -u | tr '\\n' ' '; echo; "
            "df -k . /tmp /dev/shm 2>/dev/null | awk 'NR>1{print $2}' | tr '\\n' ' '")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The host side shared by the cases: project-like folders, listeners, a sentinel process."""
    tmp = tmp_path_factory.mktemp("conformance")
    tag = uuid.uuid4().hex[:10]
    secret = f"sk-memrl-conformance-{uuid.uuid4().hex}"
    rd = RunDir(tmp / "runs" / "bigcodebench" / "memrl")
    run_dir = rd.root
    rd.bank.mkdir(parents=True)
    (rd.bank / "chroma.sqlite3").write_text(f"bank-secret-{tag}")
    rd.episodes.write_text('{"epoch": 1}\n')
    rd.card.write_text("{}")
    cache = tmp / "cache"
    (cache / "mariadb").mkdir(parents=True)
    (cache / "llm.sqlite").write_text(f"cache-secret-{tag}")
    sockets = [run_dir / "s.sock", cache / "mariadb" / "mysqld.sock", Path(f"/run/memrl-cf-{tag}.sock"),
               Path(f"/var/tmp/memrl-cf-{tag}.sock"), Path(f"/tmp/memrl-cf-{tag}.sock"),
               Path(f"/dev/shm/memrl-cf-{tag}.sock")]
    listeners = Listeners([p for p in sockets if p.parent.is_dir()], f"memrl-cf-{tag}")
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)", f"memrl-sentinel-{tag}"],
                                env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": secret})
    key_description, key_secret = f"memrl-host-key-{tag}", f"memrl-key-secret-{uuid.uuid4().hex}"
    host_key = host_add_key(key_description, key_secret)
    info = {"tmp": tmp, "tag": tag, "secret": secret, "run_dir": run_dir, "cache": cache,
            "key_description": key_description, "key_secret": key_secret, "cgroup_roots": cgroup_root_files(),
            "listeners": listeners, "sentinel": sentinel,
            "project_dirs": [run_dir, run_dir / "bank", cache, cache / "mariadb"],
            # real folders of the project: only a harmless touch is ever tried there
            "real_dirs": [Path.cwd() / "runs", Path(os.path.expanduser("~/.cache/memrl")), Path(tempfile.gettempdir())],
            "digests": {}}
    for d in (run_dir, cache):
        info["digests"][str(d)] = tree_digest(d)
    yield info
    unchanged = {str(d): tree_digest(d) == info["digests"][str(d)] for d in (run_dir, cache)}
    listeners.close()
    if host_key is not None:
        _libc.syscall(SYS_KEYCTL, KEYCTL_REVOKE, ctypes.c_long(host_key))
    sentinel.kill()
    sentinel.wait()
    assert all(unchanged.values()), f"project folders changed during the suite: {unchanged}"
    report = os.environ.get("MEMRL_CONFORMANCE_REPORT")
    if report:
        Path(report).write_text(json.dumps(REPORT, indent=1, sort_keys=True))


def _rootfs() -> Path | None:
    from memrl_envs.lifelong_os.rootfs import is_built, rootfs_path
    from memrl_envs.lifelong_os.shell import overlay_available

    if overlay_available() is not None:
        return None
    path = rootfs_path()
    return path if is_built(path) else None


@pytest.fixture(scope="module", params=["host-root", "rootfs"])
def backend(request, host, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "host-root":
        b = HostRootBackend(tmp)
    else:
        rootfs = _rootfs()
        if rootfs is None:
            pytest.skip("no Lifelong-OS root file system or overlay here (make rootfs; needs root)")
        b = RootfsBackend(tmp, rootfs)
    b.baseline = b.run(PRISTINE).output
    return b


# -- the cases ------------------------------------------------------------------------------------
@dataclass
class Ctx:
    tag: str
    host: dict
    disk_hex: str | None = None
    knob_values: dict[str, str] = field(default_factory=dict)


def background(tag: str) -> str:
    """What each case starts first: processes that must not outlive it."""
    return (f"(exec -a {tag}-bg sleep 300) >/dev/null 2>&1 & "
            f"setsid nohup bash -c 'exec -a {tag}-bg2 sleep 300' >/dev/null 2>&1 </dev/null & ")


def case_kernel_knobs(c: Ctx) -> str:
    writes = "".join(f"printf %s {shlex.quote(v)} > {p} 2>&1 && echo WROTE {p}; "
                     f"sysctl -w {p[len('/proc/sys/'):].replace('/', '.')}={shlex.quote(v)} 2>&1 | tail -1; "
                     for p, v in c.knob_values.items())
    return (writes + "echo 1 | dd of=/proc/sys/vm/drop_caches 2>&1 | tail -1; "
            "echo h > /proc/sysrq-trigger 2>&1 && echo WROTE sysrq; "
            "for f in /proc/kcore /proc/keys /proc/kallsyms /proc/timer_list /proc/sched_debug /proc/kmsg; do "
            "  [ -e $f ] && echo \"$f: $(head -c 4096 $f 2>&1 | wc -c)\"; done; "
            "ls /sys 2>&1 | head -3; echo x > /sys/kernel/mm/transparent_hugepage/enabled 2>&1; "
            "grep -E ' /proc/sys | /proc/sysrq-trigger ' /proc/self/mounts")


def check_kernel_knobs(c: Ctx, out: Outcome) -> None:
    assert "WROTE" not in out.output, out.output
    for f in ("/proc/keys", "/proc/kallsyms", "/proc/timer_list"):
        if os.path.exists(f):
            assert f"{f}: 0" in out.output, out.output  # masked: reads as empty
    assert re.search(r"/proc/sys \S+ ro,", out.output), out.output


def case_raw_devices(c: Ctx) -> str:
    major, minor = c.host["disk"][1], c.host["disk"][2]
    reads = "".join(f"head -c 2048 {d} 2>&1 | tail -c 1024 | od -An -tx1 -v | tr -d ' \\n'; echo ' <{d}'; "
                    for d in ("/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/mem", "/dev/kmem", "/dev/port",
                              "/dev/kmsg", f"/dev/block/{major}:{minor}"))
    return (reads + f"mknod /tmp/{c.tag}-blk b {major} {minor} 2>&1 && echo MADE; "
            f"head -c 2048 /tmp/{c.tag}-blk 2>&1 | tail -c 1024 | od -An -tx1 -v | tr -d ' \\n'; echo; "
            f"mknod ./{c.tag}-mem c 1 1 2>&1 && echo MADE; echo \"DEVICES: $(ls /dev | tr '\\n' ' ')\"")


def check_raw_devices(c: Ctx, out: Outcome) -> None:
    assert "MADE" not in out.output, out.output
    if c.host["disk"][0] is not None:
        assert c.host["disk"][0] not in out.output.replace("\n", ""), "the host disk was read"
    listed = out.output.split("DEVICES:")[1].splitlines()[0].split()
    assert not {"sda", "vda", "mem", "kmem", "port", "kmsg"} & set(listed), listed


def case_mount(c: Ctx) -> str:
    return ("mount -t tmpfs none /mnt 2>&1 && echo MOUNTED tmpfs; mount -t proc proc /mnt 2>&1 && echo MOUNTED proc; "
            "mount -o remount,rw /proc/sys 2>&1 && echo REMOUNTED; umount -l /proc/sys 2>&1 && echo UNMOUNTED; "
            "mount --bind / /mnt 2>&1 && echo BOUND; "
            f"unshare -U -r -m bash -c 'mount -o remount,rw /proc/sys 2>&1 && echo NESTED-REMOUNT; "
            f"umount -l /proc/sys 2>&1 && echo NESTED-UNMOUNT; mount -t tmpfs {c.tag} /tmp 2>&1; "
            f"printf x > /proc/sys/kernel/core_pattern 2>&1 && echo NESTED-WROTE' 2>&1; "
            "grep -c . /proc/self/mounts")


def check_mount(c: Ctx, out: Outcome) -> None:
    for word in ("MOUNTED", "REMOUNTED", "UNMOUNTED", "BOUND", "NESTED-REMOUNT", "NESTED-UNMOUNT", "NESTED-WROTE"):
        assert f"\n{word}" not in "\n" + out.output, out.output
    assert c.tag not in Path("/proc/self/mountinfo").read_text()  # nothing reached the host's mount table


def case_disk_fill(c: Ctx) -> str:
    # every writable place at once, 1 GiB each; dd's words are kept in the shell until the end
    # (a full /dev/shm would swallow a Lifelong-OS command's own output)
    dirs = ["$PWD", "$HOME", "/tmp", "/dev/shm", "/var/tmp", "/", "/root"]
    fill = "".join(f"m=\"$m $(dd if=/dev/zero of={d}/{c.tag}-fill bs=1M count=1024 2>&1 "
                   f"| grep -E 'dd:|copied' | tr '\\n' ' ')\"; " for d in dirs)
    return fill + f"rm -f /dev/shm/{c.tag}-fill; echo \"$m\"; df -k . /tmp /dev/shm 2>/dev/null"


def check_disk_fill(c: Ctx, out: Outcome) -> None:
    assert "No space left" in out.output or "Read-only" in out.output, out.output
    assert "1073741824 bytes" not in out.output, out.output  # no full GiB written anywhere


def case_many_processes(c: Ctx) -> str:
    # 12 processes of 96 MB each: each far under its own address-space limit, together 1.1 GB
    return ("pids=; for i in $(seq 12); do perl -e '$x = \"x\" x (96*1024*1024); sleep 3; print \"held\\n\"' & "
            "pids=\"$pids $!\"; done; wait $pids; echo done")


def check_many_processes(c: Ctx, out: Outcome) -> None:
    held = sum(line.strip() == "held" for line in out.output.splitlines())
    assert held < 12, "every process got its memory: no aggregate cap"


def case_fork_bomb(c: Ctx) -> str:
    # every process forks as fast as it can for 3 s (a failed fork is not retried), then exits
    return ("perl -e 'my $end = time + 3; while (time < $end) { fork; }' 2>/dev/null; sleep 1; "
            "echo still; ps -e --no-headers | wc -l")


def check_fork_bomb(c: Ctx, out: Outcome) -> None:
    start = time.monotonic()
    assert subprocess.run(["true"]).returncode == 0 and time.monotonic() - start < 2  # the host still forks


def case_unix_sockets(c: Ctx) -> str:
    listeners: Listeners = c.host["listeners"]
    paths = " ".join(shlex.quote(str(p)) for p in listeners.unix_paths)
    perl = ("use IO::Socket::UNIX; for my $p (@ARGV) { my $s = IO::Socket::UNIX->new(Peer => $p); "
            "print(($s ? 'CONNECTED ' : 'refused ') . $p . \"\\n\"); } "
            f"my $a = IO::Socket::UNIX->new(Peer => \"\\0{listeners.abstract}\"); "
            "print(($a ? 'CONNECTED' : 'refused') . \" abstract\\n\");")
    return (f"perl -e {shlex.quote(perl)} {paths}; "
            f"(exec 3<>/dev/tcp/127.0.0.1/{listeners.port}) 2>/dev/null && echo CONNECTED tcp || echo refused tcp; "
            "find / -path /proc -prune -o -type s -print 2>/dev/null | head -20 | while read s; do "
            "perl -MIO::Socket::UNIX -e 'print IO::Socket::UNIX->new(Peer => $ARGV[0]) "
            "? \"CONNECTED $ARGV[0]\\n\" : \"\"' \"$s\"; done")


def check_unix_sockets(c: Ctx, out: Outcome) -> None:
    assert "CONNECTED" not in out.output, out.output
    assert out.output.count("refused") >= len(c.host["listeners"].unix_paths) + 2, out.output


def case_proc_environ(c: Ctx) -> str:
    return ("for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done; env; "
            "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done; "
            "cat /proc/1/environ /proc/1/cmdline 2>&1 | tr '\\0' ' '; ls /proc/1/root/ 2>&1 | head; "
            "cat /proc/1/root/etc/hostname 2>&1; echo \"PIDS: $(ls /proc | grep -c '^[0-9]')\"")


def check_proc_environ(c: Ctx, out: Outcome) -> None:
    assert f"memrl-sentinel-{c.host['tag']}" not in out.output  # host processes are not visible at all
    assert "OPENAI_API_KEY" not in out.output, out.output
    assert int(out.output.rsplit("PIDS: ", 1)[1].split()[0]) < 20  # only the sandbox's own processes


def case_kill_all(c: Ctx) -> str:
    # Only where the host's sentinel process is invisible (a PID namespace) does the case go on
    # to kill everything it can: were the namespace ever lost, `kill -1` as root would end every
    # process of the machine. The host pids it names are then unknown numbers inside.
    sentinel = c.host["sentinel"].pid
    marker = f"memrl-sentinel-{c.host['tag']}"
    return (f"if grep -qs {marker} /proc/{sentinel}/cmdline; then echo PIDNS-BROKEN; else "
            f"kill -9 {sentinel} {os.getpid()} 2>&1; kill -9 -1 2>&1; kill -9 1 2>&1; sleep 1; echo survived; fi")


def check_kill_all(c: Ctx, out: Outcome) -> None:
    assert "PIDNS-BROKEN" not in out.output, "the sandbox sees host processes"
    assert c.host["sentinel"].poll() is None, "a host process was killed"


def case_project_state(c: Ctx) -> str:
    h = c.host
    fake = " ".join(shlex.quote(str(d)) for d in h["project_dirs"])
    real = " ".join(shlex.quote(str(d)) for d in h["real_dirs"])
    return (f"for d in {fake}; do ls -la $d 2>&1 | head -5; cat $d/* 2>&1 | head -c 300; "
            f"echo pwned >> $d/episodes.jsonl 2>&1; touch $d/{c.tag} 2>&1; rm -rf $d/* 2>&1; "
            f"mkdir -p $d 2>&1 && echo pwned > $d/{c.tag} 2>&1; done; "
            f"for d in {real}; do touch $d/{c.tag} 2>&1; done; echo end")


def check_project_state(c: Ctx, out: Outcome) -> None:
    assert f"bank-secret-{c.host['tag']}" not in out.output and f"cache-secret-{c.host['tag']}" not in out.output
    for d in (c.host["run_dir"], c.host["cache"]):
        assert tree_digest(d) == c.host["digests"][str(d)], f"{d} changed"


def case_cgroup_escape(c: Ctx) -> str:
    # as the third battery did: a new user, mount and cgroup namespace (with and without a uid
    # map), cgroup v1 mounted inside, the episode's own memory limit raised, the host's root
    # groups written, a group made; then more memory asked for than the cap allows
    inner = (f"echo UN\"\"SHARED; for ctl in memory pids cpuset blkio; do "
             f"mkdir -p /tmp/{c.tag}-$ctl; mount -t cgroup -o $ctl none /tmp/{c.tag}-$ctl 2>&1 "
             f"&& echo MOUNT\"\"ED-$ctl; "
             f"done; for f in $(find /tmp/{c.tag}-memory -name memory.limit_in_bytes 2>/dev/null); do "
             f"echo 3355443200 > $f 2>/dev/null && echo RAIS\"\"ED $f; done; "
             f"[ -e /tmp/{c.tag}-cpuset/cgroup.procs ] && echo 0 > /tmp/{c.tag}-cpuset/cpuset.sched_load_balance "
             f"2>/dev/null && echo WROTE\"\"-CPUSET; [ -e /tmp/{c.tag}-pids/cgroup.procs ] && "
             f"mkdir /tmp/{c.tag}-pids/{c.tag} 2>/dev/null && echo MADE\"\"-GROUP")
    return (f"unshare -U -r -m -C bash -c {shlex.quote(inner)} 2>&1; "
            f"unshare -U -m -C bash -c {shlex.quote(inner)} 2>&1; "
            "perl -e '$x = \"x\" x (400*1024*1024); print \"ALLOC\", \"ATED\n\"' 2>&1; echo end")


def check_cgroup_escape(c: Ctx, out: Outcome) -> None:
    for word in ("UNSHARED", "MOUNTED-", "RAISED", "WROTE-CPUSET", "MADE-GROUP", "ALLOCATED"):
        assert word not in out.output, out.output
    assert cgroup_dirs_named(c.tag) == [], "a cgroup of the case was left on the host"
    assert c.host["cgroup_roots"] == cgroup_root_files(), "the host's root cgroups changed"


def case_keyring(c: Ctx) -> str:
    # read the key host root added (search its user keyring for it), plant one of our own in
    # every keyring that can be named (thread, process, session, user, user-session)
    desc = c.host["key_description"]
    # (perl's syscall passes strings by address: each must be a variable, never a literal)
    perl = ("my ($type, $want, $mine, $data) = ('user', '%s', '%s', 'planted'); "
            "my $found = syscall(250, 10, -4, $type, $want, 0); "      # KEYCTL_SEARCH
            "print 'search ', $found, ' ', ($found < 0 ? $! + 0 : 'FOU' . 'ND'), \"\\n\"; "
            "if ($found > 0) { my $buf = ' ' x 256; my $n = syscall(250, 11, $found, $buf, 256); "  # KEYCTL_READ
            "print 'READ ', substr($buf, 0, $n), \"\\n\" if $n > 0; } "
            "for my $ring (-1, -2, -3, -4, -5) { my $k = syscall(248, $type, $mine, $data, 7, $ring); "
            "print 'add ', $ring, ' ', ($k < 0 ? $! + 0 : 'PLAN' . 'TED'), \"\\n\"; }") % (desc, c.tag)
    return f"perl -e {shlex.quote(perl)} 2>&1; cat /proc/keys 2>&1 | head -5; echo end"


def check_keyring(c: Ctx, out: Outcome) -> None:
    assert c.host["key_secret"] not in out.output and "READ " not in out.output, out.output
    assert "FOUND" not in out.output and "PLANTED" not in out.output, out.output
    planted = host_keys_named(c.tag)
    for line in planted:  # put the host back first
        _libc.syscall(SYS_KEYCTL, KEYCTL_REVOKE, ctypes.c_long(int(line.split()[0], 16)))
    assert planted == [], f"keys the case planted are in the host's keyrings: {planted}"


def case_syscalls(c: Ctx) -> str:
    # calls the filter refuses, tried with perl's syscall: bpf map create, perf_event_open on
    # itself, userfaultfd, io_uring_setup, ptrace of its parent, unshare of a user namespace.
    # Some of them an unprivileged sandbox could not make even unfiltered: the probe with a
    # control run is test_the_filter_refuses_what_the_same_sandbox_does_without_it
    perl = ("my %r; my $attr = pack('LLLLL', 2, 4, 4, 1, 0) . (\"\\0\" x 100); "
            "$r{bpf} = syscall(321, 0, $attr, 120); "
            "my $pe = pack('LLQ', 1, 112, 0) . (\"\\0\" x 96); $r{perf} = syscall(298, $pe, 0, -1, -1, 0); "
            "$r{userfaultfd} = syscall(323, 0); my $p = \"\\0\" x 120; $r{io_uring} = syscall(425, 4, $p); "
            "$r{ptrace} = syscall(101, 16, getppid(), 0, 0); $r{unshare} = syscall(272, 0x10000000); "
            "for (sort keys %r) { print $_, ' ', ($r{$_} < 0 ? 'refused' : 'ALLOWED'), \"\\n\"; }")
    return f"perl -e {shlex.quote(perl)} 2>&1; echo end"


def check_syscalls(c: Ctx, out: Outcome) -> None:
    assert "ALLOWED" not in out.output, out.output
    assert out.output.count("refused") == 6, out.output


def case_file_table(c: Ctx) -> str:
    # every process it may start opens files until it may not, and holds them
    return ("perl -e 'my @kids; for (1..60) { my $p = fork; last unless defined $p; "
            "if (!$p) { my @h; while (open(my $f, \"<\", \"/dev/null\")) { push @h, $f; } sleep 2; exit 0; } "
            "push @kids, $p; } waitpid($_, 0) for @kids; print \"held\\n\"' 2>&1; echo end")


def check_file_table(c: Ctx, out: Outcome) -> None:
    rise = REPORT[c.host["current"]]["host_open_files_rise"]
    # far below the host's table: the per-process limit times the processes it may have
    assert rise <= FILE_TABLE_SHARE_MAX * file_max(), (rise, file_max())


def case_harness_flood(c: Ctx) -> str:
    # 64 MB on its output, and into every pipe of every other process it can open (the shell
    # server's, bwrap's): the harness must keep its caps and its memory
    return ("head -c 67108864 /dev/zero | tr '\\0' x; "
            "for p in /proc/[0-9]*; do [ $p = /proc/$$ ] && continue; for f in $p/fd/*; do "
            "case \"$(readlink $f)\" in pipe:*) (head -c 33554432 /dev/zero > $f) 2>/dev/null ;; esac; done; done; "
            "echo; echo end")


def check_harness_flood(c: Ctx, out: Outcome) -> None:
    facts = REPORT[c.host["current"]]
    assert facts["harness_rss_rise_mb"] < 150, facts
    assert len(out.output) < 2_000_000, len(out.output)  # what the harness kept: its caps


def case_socket_flood(c: Ctx) -> str:
    # inside the sandbox's own network namespace, over loopback (60 descriptors each, within a
    # root-file-system episode's 128): 30 UDP sockets with 4 MB receive buffers, each sent 6 MB
    # of datagrams it never reads; then 30 TCP connections, each written to without being read
    # (up to 16 MB each). All held open. Without the cap the host's socket memory rose by the
    # sum (issue 32: +1.5 GB TCP with the sandbox's memory cgroup charged ~0).
    perl = ("use IO::Socket::INET; use Socket; my ($u, $total, @held) = (0, 0); my $d = 'y' x 60000; "
            "for (1..30) { my $r = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, "
            "Proto => 'udp') or last; $r->setsockopt(SOL_SOCKET, SO_RCVBUF, 4194304); "
            "my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $r->sockport, Proto => 'udp') "
            "or last; $s->blocking(0); for (1..100) { syswrite($s, $d) or last; } push @held, $r, $s; $u++; } "
            "print \"flooded $u udp sockets\\n\"; my $l = IO::Socket::INET->new(Listen => 64, "
            "LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp') or die \"listen: $!\"; "
            "my $buf = 'x' x 262144; for (1..30) { my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1', "
            "PeerPort => $l->sockport, Proto => 'tcp') or last; my $s = $l->accept or last; $c->blocking(0); "
            "for (1..64) { my $n = syswrite($c, $buf); last unless $n; $total += $n; } push @held, $c, $s; } "
            "printf(\"queued %d MB on %d tcp connections\\n\", $total / 1048576, (@held - 2 * $u) / 2); sleep 1;")
    return f"perl -e {shlex.quote(perl)} 2>&1; echo end"


def check_socket_flood(c: Ctx, out: Outcome) -> None:
    facts = REPORT[c.host["current"]]
    assert "on 30 tcp connections" in out.output and "flooded 30 udp" in out.output, out.output  # it did flood
    caps = c.host["backend_facts"]
    if "tcp" not in caps["enforced"]:
        pytest.skip(f"no socket buffer cap here: {caps['missing']['tcp']}")  # named on the card, never silent
    # cgroup v1: a cap of its own, which counts UDP buffers too; v2: the memory cap holds them
    cap_mb = caps["tcp_mb_outside_memory"] or MEMORY_CAP_MB
    queued = int(out.output.split("queued ")[1].split()[0])
    assert queued <= cap_mb + TCP_MARGIN_MB, out.output   # what the sandbox could queue
    rise = facts["host_tcp_memory_rise_mb"] + facts["host_udp_memory_rise_mb"]
    assert rise <= cap_mb + TCP_MARGIN_MB, facts           # the host's pools, all sockets
    assert facts["cgroup_tcp_peak_mb"] <= cap_mb + TCP_MARGIN_MB, facts


def case_kernel_buffers(c: Ctx) -> str:
    # unix stream socket pairs and pipes filled and held: their buffers are kernel memory
    perl = ("use Socket; my ($t, @held) = (0); my $buf = 'x' x 65536; for (1..40) { "
            "socketpair(my $a, my $b, AF_UNIX, SOCK_STREAM, 0) or last; $a->blocking(0); "
            "while (my $n = syswrite($a, $buf)) { $t += $n; } push @held, $a, $b; "
            "pipe(my $r, my $w) or last; $w->blocking(0); while (my $n = syswrite($w, $buf)) { $t += $n; } "
            "push @held, $r, $w; } printf(\"queued %d MB\\n\", $t / 1048576); sleep 1;")
    return f"perl -MIO::Handle -e {shlex.quote(perl)} 2>&1; echo end"


def check_kernel_buffers(c: Ctx, out: Outcome) -> None:
    facts = REPORT[c.host["current"]]
    queued = int(out.output.split("queued ")[1].split()[0])
    assert queued >= 5, out.output
    if "memory" in cgroup_support().enforced:  # charged to the sandbox's memory cgroup, read on the host
        assert facts["cgroup_memory_peak_mb"] >= 0.8 * queued, (queued, facts)


CASES: dict[str, tuple[Callable[[Ctx], str], Callable[[Ctx, Outcome], None]]] = {
    "socket_flood": (case_socket_flood, check_socket_flood),
    "kernel_buffers": (case_kernel_buffers, check_kernel_buffers),
    "file_table": (case_file_table, check_file_table),
    "harness_flood": (case_harness_flood, check_harness_flood),
    "cgroup_escape": (case_cgroup_escape, check_cgroup_escape),
    "keyring": (case_keyring, check_keyring),
    "syscalls": (case_syscalls, check_syscalls),
    "kernel_knobs": (case_kernel_knobs, check_kernel_knobs),
    "raw_devices": (case_raw_devices, check_raw_devices),
    "mount": (case_mount, check_mount),
    "disk_fill": (case_disk_fill, check_disk_fill),
    "many_processes": (case_many_processes, check_many_processes),
    "fork_bomb": (case_fork_bomb, check_fork_bomb),
    "host_unix_sockets": (case_unix_sockets, check_unix_sockets),
    "proc_environ": (case_proc_environ, check_proc_environ),
    "kill_all": (case_kill_all, check_kill_all),
    "project_state": (case_project_state, check_project_state),
}
NEEDS = {"many_processes": "memory", "fork_bomb": "pids"}


def watched_dirs(host: dict, backend) -> list[Path]:
    return [*host["project_dirs"], *host["real_dirs"], Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path("/run"),
            Path("/root"), Path("/"), Path("/mnt"), *(Path(p) for p in backend.scratch)]


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_case_is_contained(case, backend, host, monkeypatch):
    make, check = CASES[case]
    need = NEEDS.get(case)
    if need and need not in cgroup_support().enforced:
        assert need in backend.facts["missing"]  # said, never silent
        pytest.skip(f"no {need} cgroup here ({cgroup_support().missing.get(need)}); the run card says so")
    monkeypatch.setenv("OPENAI_API_KEY", host["secret"])
    tag = f"memrl-{case.replace('_', '')}-{uuid.uuid4().hex[:8]}"
    if "disk" not in host:
        host["disk"] = host_disk_sample()
    saved = read_knobs()
    ctx = Ctx(tag=tag, host=host, knob_values={p: _probe_value(p, v, tag) for p, v in saved.items()})
    log_mark = kernel_log_time()
    host["listeners"].accepted.clear()
    script = background(tag) + make(ctx) + "; sleep 0.3"  # long enough for the sampler to see it
    try:
        with Sampler(sorted({"/", *backend.scratch}), backend.scratch) as sampler:
            out = backend.run(script)
    finally:
        changed = restore_knobs(saved)  # before anything else: the host must be as it was
    assert not changed, f"the sandbox changed host kernel values {changed} (restored)"
    assert kernel_log_writes_since(log_mark) == [], "the kernel logged a drop_caches/sysrq write"
    facts = {**sampler.facts(), "seconds": round(out.seconds, 2)}
    REPORT[f"{backend.name}/{case}"] = facts
    host["current"] = f"{backend.name}/{case}"
    host["backend_facts"] = backend.facts
    # memory and processes, as the host saw them
    assert facts["cgroup_memory_peak_mb"] <= MEMORY_CAP_MB, facts
    assert facts["host_memory_drop_mb"] <= MEMORY_CAP_MB + MEMORY_MARGIN_MB, facts
    if "pids" in cgroup_support().enforced:
        assert facts["cgroup_pids_peak"] <= backend.pids_cap, facts
    assert facts["host_disk_drop_mb"] <= DISK_MARGIN_MB, facts
    if "memory" in cgroup_support().enforced:  # the cap itself never moved
        assert facts["cgroup_memory_limits_mb"] == [MEMORY_CAP_MB], facts
    if ctypes.util.find_library("seccomp") is not None:  # the filter is built wherever libseccomp is
        assert "syscall_filter" in backend.facts["enforced"], backend.facts["missing"]
    if "syscall_filter" in backend.facts["enforced"]:  # every process of the sandbox ran filtered
        assert facts["processes_unfiltered"] == [] and facts["process_samples_filtered"] > 0, facts
    # root inside is nobody outside: every process of the case runs as an unprivileged host uid
    # (bwrap's own init of the host-root mode, which drops every capability, aside)
    low, high = backend.host_uid_range
    seen = {name: uid for name, uid in facts["host_uids"].items() if not (name == "bwrap" and uid == 0)}
    assert seen and all(low <= uid < high for uid in seen.values()), facts
    assert facts["host_folders_peak_mb"] <= SEED_MB, facts  # the sandbox's folders on the host hold its seed only
    # nothing on the host, no connection, no secret
    found = [str(p) for d in watched_dirs(host, backend) if d.is_dir() for p in d.glob(f"{tag}*")]
    for p in found:
        Path(p).unlink(missing_ok=True)
    assert not found, f"files appeared on the host: {found}"
    host["listeners"].assert_listening()
    assert host["listeners"].accepted == [], f"a host listener was reached: {host['listeners'].accepted}"
    assert host["secret"] not in out.record and host["secret"] not in out.output
    # nothing outlives the case; the host and the harness live
    deadline = time.monotonic() + 5
    while processes_with(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(tag) == [], "a process of the case outlived it"
    assert host["sentinel"].poll() is None
    assert SandboxCgroup.live() == [], "a sandbox cgroup was left"
    check(ctx, out)
    # the next sandbox starts as the first one did
    assert backend.run(PRISTINE).output == backend.baseline


def test_caps_are_reported_enforced_or_missing(backend):
    """Every cap is named in the facts the run card gets, as enforced or as missing with why."""
    caps = backend.facts
    for cap in ("memory", "pids", "disk"):
        assert (cap in caps["enforced"]) != (cap in caps["missing"]), caps
    support = cgroup_support()
    for cap in ("memory", "pids"):
        assert (cap in caps["enforced"]) == (cap in support.enforced), (caps, support)
    assert "/proc/sys" in caps["kernel_interfaces"]["read_only"]
    assert caps["parallel"]["granted"] >= 1


@pytest.mark.skipif(sandbox_probe.why_not() is not None, reason=f"no probe here: {sandbox_probe.why_not()}")
def test_the_filter_refuses_what_the_same_sandbox_does_without_it(backend, monkeypatch):
    """A program making the calls the filter refuses: in the sandbox as it runs, each is refused
    (a 32-bit call kills the process); in the same sandbox with the filter off (the control
    run), every call an unprivileged process may make succeeds. fsopen, move_mount and clone
    with CLONE_NEWNS alone need CAP_SYS_ADMIN, which no sandbox holds: the filter's answer to
    them is shown on the host (tests/envs/sandbox/test_seccomp.py)."""
    from memrl_envs.lifelong_os import shell as os_shell
    from memrl_envs.sandbox import isolate

    assert "syscall_filter" in backend.facts["enforced"], backend.facts["missing"]
    script = sandbox_probe.shell_script()
    filtered = sandbox_probe.parse(backend.run(script).output)
    expected = {"getpid": "ok", "clone3": f"refused {errno.ENOSYS}",
                **{name: "killed 31" for name in sandbox_probe.KILLED},  # SIGSYS: the whole process
                **{name: f"refused {errno.EPERM}" for name in sandbox_probe.REFUSED_EPERM}}
    monkeypatch.setattr(isolate, "filter_fd", lambda: None)
    monkeypatch.setattr(os_shell, "filter_fd", lambda: None)
    control = sandbox_probe.parse(backend.run(script).output)
    REPORT[f"{backend.name}/syscall_probe"] = {"filtered": filtered, "control_no_filter": control}
    assert filtered == expected, filtered
    assert {name: control.get(name) for name in sandbox_probe.UNPRIVILEGED_OK} == \
        {name: "ok" for name in sandbox_probe.UNPRIVILEGED_OK}, control


def inotify_instances(pids) -> int:
    """Inotify instances the processes hold, counted on the host from their descriptors."""
    n = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
            except OSError:
                pass
    return n


def host_uids_of(pids) -> set[int]:
    return {u for u in (host_uid(p) for p in pids if not in_host_pid_namespace(p)) if u is not None}


def test_an_episode_exhausting_a_per_uid_limit_leaves_another_live_episode_its_own(tmp_path):
    """The kernel counts inotify instances per host uid across user namespaces (here
    fs.inotify.max_user_instances). Two live episodes: the first takes every instance its
    host uid may have; the second must still get one (before: both were host uid 3,000,000,
    and the second got EMFILE). Judged from the host: the first's processes hold the limit's
    instances, the two episodes' host uids are disjoint."""
    from memrl_envs.lifelong_os.shell import OverlayShell
    from memrl_envs.sandbox import userns_available

    rootfs = _rootfs()
    if rootfs is None or userns_available() is not None:
        pytest.skip("no Lifelong-OS root file system or mapped user namespace here (make rootfs; needs root)")
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    per_process = 100  # under the episode's 128 open files per process
    procs = -(-limit // per_process) + 1
    hog = (f"for i in $(seq {procs}); do perl -e 'my $n = 0; $n++ while syscall(294, 0) >= 0; "
           "print \"held $n\\n\"; sleep 60' & done; sleep 2")
    probe = "perl -e 'my $fd = syscall(294, 0); print $fd >= 0 ? \"got one\\n\" : \"refused \" . ($! + 0) . \"\\n\"'"
    shell = dict(scratch_dir=tmp_path, upper_size_mb=DISK_CAP_MB, memory_mb=MEMORY_CAP_MB, pids_max=PIDS_CAP,
                 shm_mb=TMP_MB)
    with OverlayShell(rootfs, **shell) as first, OverlayShell(rootfs, **shell) as second:
        held = first.run(hog, CASE_TIMEOUT_S).output
        holding = inotify_instances(first.cgroup.procs())
        answer = second.run(probe, CASE_TIMEOUT_S).output
        uids_first, uids_second = host_uids_of(first.cgroup.procs()), host_uids_of(second.cgroup.procs())
    REPORT["rootfs/inotify_across_episodes"] = {"limit": limit, "first_holds": holding, "second": answer.strip(),
                                                "first_uids": sorted(uids_first), "second_uids": sorted(uids_second)}
    assert holding == limit, (held, holding)   # the first episode took all its uid may have
    assert answer.strip() == "got one", REPORT["rootfs/inotify_across_episodes"]
    assert uids_first and uids_second and not uids_first & uids_second
