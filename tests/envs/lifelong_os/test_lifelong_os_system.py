"""Lifelong-OS on the real system: the throwaway root file system, what a command can and
cannot do, hostile episodes (rm -rf /, /etc/passwd, background processes, network, endless
loops, escape attempts, a killed harness) leaving the host and the next episode untouched,
and the ground truth of the tricky tasks passing through the env's own path.

Needs root, bubblewrap and the root file system (`make rootfs`; built here when missing and
debootstrap is installed, a few minutes)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from memrl_envs.lifelong_os import LifelongOsEnv
from memrl_envs.lifelong_os.episode import FAILED, SUCCESS, Action, OsTask
from memrl_envs.lifelong_os.prompts import FINISH
from memrl_envs.lifelong_os.rootfs import RootfsError, build_rootfs, is_built, rootfs_path
from memrl_envs.lifelong_os.settings import LifelongOsSettings
from memrl_envs.lifelong_os.shell import OverlayShell, ShellError, overlay_available
from memrl_envs.sandbox import Limits, cgroup_support, run_isolated
from data_paths import LIFELONG_OS

DATA = LIFELONG_OS
_WHY = overlay_available()
pytestmark = [pytest.mark.serial,  # times or samples the host: runs alone (Makefile, test)
              pytest.mark.skipif(_WHY is not None, reason=f"no Lifelong-OS sandbox here: {_WHY}")]


@pytest.fixture(scope="module")
def rootfs() -> Path:
    path = rootfs_path()
    if not is_built(path):
        if not (Path("/usr/sbin/debootstrap").exists() or subprocess.run(["which", "debootstrap"],
                                                                          capture_output=True).returncode == 0):
            pytest.skip(f"no root file system at {path} and debootstrap is not installed "
                        "(apt-get install debootstrap; make rootfs)")
        try:
            return build_rootfs()
        except RootfsError as exc:
            pytest.fail(f"building the root file system failed: {exc}")
    return path


def tree_fingerprint(root: Path) -> str:
    """Every entry's path, type, mode, size and mtime: any write to the tree changes it."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, root)}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def pristine(rootfs):
    """The lower layer's fingerprint before the hostile tests; checked again at the end."""
    before = tree_fingerprint(rootfs)
    yield before
    assert tree_fingerprint(rootfs) == before, "an episode changed the cached root file system"


def file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Script:
    """A policy that runs the given commands in order, then finishes."""

    def __init__(self, *commands: str) -> None:
        self.commands = list(commands)

    def next_action(self, task, history):
        if len(history) < len(self.commands):
            cmd = self.commands[len(history)]
            return Action("bash", cmd), cmd
        return Action(FINISH), FINISH


def make_env(rootfs, agent="gold", **fields) -> LifelongOsEnv:
    # episodes played with `run_episode` read no task file: a hub address passes the check
    fields.setdefault("data_path", str(DATA) if DATA.is_file() else "hf://unused/unused")
    return LifelongOsEnv(LifelongOsSettings(rootfs_dir=str(rootfs.parent), **fields), agent=agent)


def episode(env, *commands, check="true", init=""):
    task = OsTask(key="t", instruction="hostile", init_script=init, eval_script=check, gold_script="true")
    return env.run_episode(task, Script(*commands))


def assert_fresh_system(rootfs):
    """A new episode sees the pristine file system and no process but its own shell."""
    dirs = ("/", "/tmp", "/root", "/home", "/etc")
    listing = "; ".join(f"ls -A {d} | tr '\\n' ' '; echo" for d in dirs)
    with OverlayShell(rootfs) as sh:
        r = sh.run("sha256sum /etc/passwd /etc/shadow /bin/bash | cut -c1-64; " + listing +
                   "; ps -eo comm= | tr '\\n' ' '", 10)
    expected = [hashlib.sha256((rootfs / p).read_bytes()).hexdigest()
                for p in ("etc/passwd", "etc/shadow", "bin/bash")]
    lines = r.output.splitlines()
    assert lines[:3] == expected, r.output
    for d, line in zip(dirs, lines[3:8]):
        assert sorted(line.split()) == sorted(os.listdir(rootfs / d.lstrip("/"))), d
    assert set(lines[8].split()) <= {"bwrap", "bash", "timeout", "ps", "tr"}, lines[8]


# -- what one command sees -------------------------------------------------------------------
def test_commands_share_files_and_processes_but_not_cwd_or_variables(rootfs, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    with OverlayShell(rootfs) as sh:
        r = sh.run("id -u; pwd; hostname; cat /etc/hostname; env | sort", 10)
        assert r.ok and r.output.splitlines()[:4] == ["0", "/", "memrl-os", "memrl-os"]
        assert "sk-must-not-leak" not in r.output and "HOME=/root" in r.output
        assert sh.run("cd /tmp && X=1 && echo made > here.txt", 10).ok
        r = sh.run("pwd; echo x${X}x; cat /tmp/here.txt", 10)
        assert r.output.split() == ["/", "xx", "made"]
        assert sh.run("useradd -m bob && chown bob /tmp/here.txt && stat -c %U /tmp/here.txt", 10).output == "bob\n"
        assert sh.run("sleep 300 >/dev/null 2>&1 &", 10).ok  # a background process lives on ...
        assert sh.run("pgrep -x sleep", 10).ok               # ... into the next command
        r = sh.run("echo out; echo err >&2; exit 7", 10)
        assert (r.exit_code, r.output, r.timed_out) == (7, "out\nerr\n", False)


def test_time_limit_kills_the_command_and_what_it_started(rootfs):
    with OverlayShell(rootfs) as sh:
        start = time.monotonic()
        r = sh.run("sleep 200 & echo started; while :; do :; done", 2)
        assert r.timed_out and r.exit_code is None and r.output == "started\n"
        assert time.monotonic() - start < 6
        r = sh.run("pgrep -x sleep || echo none; pgrep -fc '[d]o :; done'", 10)
        assert r.output.split() == ["none", "0"]  # neither the loop nor its background child is left


def test_output_is_capped_and_says_so(rootfs):
    with OverlayShell(rootfs, output_bytes=1000) as sh:
        r = sh.run("yes | head -c 5000000", 10)
        assert r.ok and r.truncated and len(r.output) == 1000
        r = sh.run("printf abc", 10)
        assert (r.output, r.truncated) == ("abc", False)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_flood_into_the_shells_own_pipe_stays_out_of_the_harness(rootfs):
    """A command writes 600 MB into the server's reply pipe (the harness's reader) through
    /proc/<pid>/fd of every process that holds it, then the shell's next reply must be whole
    and the harness's RSS, sampled from the host while it runs, must stay flat."""
    flood = ("for p in /proc/[0-9]*; do for f in $p/fd/*; do "
             "if [ \"$(readlink $f)\" = \"$(readlink /proc/1/fd/1)\" ]; then "
             "(head -c 200000000 /dev/zero | tr '\\0' x > $f &) 2>/dev/null; fi; done; done; sleep 8; echo done")
    with OverlayShell(rootfs, output_bytes=1000) as sh:
        base, peak, stop = _rss_mb(), 0.0, threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _rss_mb())
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            r = sh.run(flood, 30)
            after = sh.run("echo still here", 10)
        finally:
            stop.set()
            sampler.join()
        if sh.mapped:
            # root inside is an unprivileged host id: the harness's pipes (host root's) cannot be
            # opened through /proc at all
            assert (r.exit_code, r.output, r.dropped, sh._out.junk) == (0, "done\n", 0, 0), r
        else:
            # uid 0 on the host: the flood lands in this command's reply, capped, the rest dropped
            assert r.exit_code == 0 and r.truncated and len(r.output) == 1000
            assert r.dropped + sh._out.junk > 100_000_000
        assert after.output == "still here\n" and not after.truncated
        print(f"harness RSS {base:.0f} MB -> peak {peak:.0f} MB; dropped {r.dropped + sh._out.junk} bytes")
        assert peak - base < 100, (base, peak)


def test_privileges_are_those_of_a_container_root(rootfs):
    with OverlayShell(rootfs) as sh:
        for cmd in ("mount -t tmpfs none /mnt", "chroot / true", "mknod /tmp/disk b 8 0", "hostname evil",
                    "echo b > /proc/sysrq-trigger", "unshare -r true", "ip link add x type dummy",
                    "head -c 1 /proc/kcore"):
            r = sh.run(cmd, 10)
            assert r.exit_code != 0, f"{cmd!r} succeeded: {r.output}"
        r = sh.run("grep -E 'CapEff|NoNewPrivs' /proc/self/status", 10)
        assert "NoNewPrivs:\t1" in r.output
        cap_eff = int(r.output.split("CapEff:")[1].split()[0], 16)
        assert cap_eff & (1 << 21) == 0 and cap_eff & (1 << 0)  # no CAP_SYS_ADMIN; CAP_CHOWN kept


# -- hostile episodes ----------------------------------------------------------------------------
def test_rm_rf_root_touches_neither_host_nor_next_episode(rootfs, pristine, tmp_path):
    host_passwd = file_digest("/etc/passwd")
    sentinel = tmp_path / "sentinel.txt"
    sentinel.write_text("still here")
    env = make_env(rootfs)
    res = episode(env, "rm -rf --no-preserve-root / 2>/dev/null; echo /bin/*", "ls /", check="test -x /bin/bash")
    assert res.transcript[0].observation == "/bin/*"  # it really went (echo is a builtin) ...
    assert "No such file" in res.transcript[1].observation  # ... and nothing runs any more
    assert not res.success and res.outcome_detail == FAILED
    assert sentinel.read_text() == "still here" and file_digest("/etc/passwd") == host_passwd
    assert_fresh_system(rootfs)


def test_writing_etc_passwd_stays_in_the_episode(rootfs, pristine):
    host_passwd, host_shadow = file_digest("/etc/passwd"), file_digest("/etc/shadow")
    env = make_env(rootfs)
    res = episode(env, "echo 'evil:x:0:0::/root:/bin/bash' >> /etc/passwd && useradd mallory && chpasswd <<< root:x",
                  check="grep -q ^evil: /etc/passwd && id mallory")
    assert res.success, res.transcript
    assert file_digest("/etc/passwd") == host_passwd and file_digest("/etc/shadow") == host_shadow
    assert_fresh_system(rootfs)


def test_background_processes_end_with_the_episode(rootfs, pristine):
    tag = f"memrl-bg-{uuid.uuid4().hex[:8]}"
    env = make_env(rootfs)
    res = episode(env, f"nohup bash -c 'exec -a {tag} sleep 1000' >/dev/null 2>&1 &",
                  f"setsid bash -c 'exec -a {tag}-s sleep 1000' >/dev/null 2>&1 < /dev/null &",
                  check=f"sleep 0.5; test $(pgrep -fc '[{tag[0]}]{tag[1:]}') -eq 2")  # not the check itself
    assert res.success, res.info  # both were alive at the check
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a process of the episode outlived it"
    assert_fresh_system(rootfs)


def test_no_network_even_to_the_host(rootfs, pristine):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        env = make_env(rootfs)
        res = episode(env, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED",
                      "exec 3<>/dev/tcp/deb.debian.org/80 && echo CONNECTED", "tail -n +3 /proc/net/dev",
                      check="! apt-get -o Acquire::Retries=0 update 2>/dev/null | grep -q '^Get:'")
        outs = [s.observation for s in res.transcript]
        assert all("CONNECTED" not in o for o in outs)
        assert outs[2].split()[0] == "lo:"  and len(outs[2].splitlines()) == 1  # loopback only
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert_fresh_system(rootfs)


def test_endless_loop_is_stopped_and_the_episode_goes_on(rootfs, pristine):
    tag = f"memrl-loop-{uuid.uuid4().hex[:8]}"
    env = make_env(rootfs, command_timeout_s=2)
    start = time.monotonic()
    res = episode(env, f"exec -a {tag} bash -c 'while :; do :; done'", "echo alive")
    assert time.monotonic() - start < 15
    assert res.info["timeouts"] == 1 and "longer than 2 seconds" in res.transcript[0].observation
    assert res.transcript[1].observation == "alive" and res.success
    assert subprocess.run(["pgrep", "-f", tag], capture_output=True).returncode == 1
    assert_fresh_system(rootfs)


def test_killed_harness_leaves_no_process_behind(rootfs, pristine, tmp_path):
    tag = f"memrl-orphan-{uuid.uuid4().hex[:8]}"
    code = textwrap.dedent(f"""
        import sys, time
        from memrl_envs.lifelong_os.shell import OverlayShell
        sh = OverlayShell({str(rootfs)!r}, scratch_dir={str(tmp_path)!r})
        sh.run("bash -c 'exec -a {tag} sleep 1000' >/dev/null 2>&1 &", 10)
        print("ready", flush=True)
        time.sleep(1000)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert subprocess.run(["pgrep", "-f", tag], capture_output=True).returncode == 0
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", tag], capture_output=True).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", tag], capture_output=True).returncode == 1
    # the overlay lived only in the episode's mount namespace: on the host the mount point is empty
    left = [p for p in tmp_path.iterdir() if p.name.startswith("memrl-os-")]
    assert left and all(list(p.iterdir()) == [] for p in left)
    assert "memrl-episode" not in Path("/proc/self/mountinfo").read_text()


def _pids_events_max(cgroup: Path) -> int:
    """How many forks the pids cgroup has refused at its cap (the host's own count)."""
    for line in (cgroup / "pids.events").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "max":
            return int(value)
    raise AssertionError(f"no 'max' line in {cgroup / 'pids.events'}")


def _assert_never_past(cgroup: Path, cap: int) -> None:
    assert int((cgroup / "pids.current").read_text()) <= cap
    if (cgroup / "pids.peak").exists():  # the most it ever held (newer kernels): no time window
        assert int((cgroup / "pids.peak").read_text()) <= cap


def test_process_cap_refuses_the_fork_past_it(rootfs, pristine):
    """The cap read from the host, with no time window: 60 background processes asked of a
    cap of 48, by dash (which does not retry a refused fork), so the outcome does not depend
    on how fast the machine is."""
    if "pids" not in cgroup_support().enforced:
        pytest.skip(f"no writable pids cgroup here: {cgroup_support().missing.get('pids')}")
    with OverlayShell(rootfs, pids_max=48) as sh:
        cgroup = Path(sh._cgroup.move_file("cmd")).parent  # this shell's own commands' group
        assert (cgroup / "pids.max").read_text().strip() == "48"
        assert _pids_events_max(cgroup) == 0
        r = sh.run("sh -c 'i=0; while [ $i -lt 60 ]; do sleep 60 & i=$((i+1)); done; echo spawned $i'", 30)
        assert "Cannot fork" in r.output and "spawned 60" not in r.output, r.output
        assert _pids_events_max(cgroup) >= 1  # a fork was refused at the cap
        _assert_never_past(cgroup, 48)
        if (cgroup / "pids.peak").exists():
            assert int((cgroup / "pids.peak").read_text()) == 48  # refused only once full
        r = sh.run("echo still answering", 5)  # the shell's side has its own room
        assert r.output == "still answering\n"


def test_fork_bomb_is_capped_and_the_shell_survives_it(rootfs, pristine):
    if "pids" not in cgroup_support().enforced:
        pytest.skip(f"no writable pids cgroup here: {cgroup_support().missing.get('pids')}")
    with OverlayShell(rootfs, pids_max=48) as sh:
        cgroup = Path(sh._cgroup.move_file("cmd")).parent
        # the classic: it returns at once and the bomb goes on, or (bash retries a fork that
        # fails, with a back-off: on a loaded machine the foreground call can still be
        # retrying at the time limit) it is stopped at its limit; either way it ends
        r = sh.run(":(){ :|:& };:", 5)
        assert r.seconds < 5 + 10
        # the bomb meets the cap however slowly it grows: wait for the host's count of refused
        # forks (the bound only keeps a broken cap from hanging the suite)
        deadline = time.monotonic() + 180
        while _pids_events_max(cgroup) == 0 and "Resource temporarily unavailable" not in r.output:
            _assert_never_past(cgroup, 48)
            assert time.monotonic() < deadline, "the fork bomb never met the cap in 180 s"
            time.sleep(0.2)
        _assert_never_past(cgroup, 48)
        r = sh.run("echo still answering", 5)  # the shell's side has its own room
        assert r.output == "still answering\n"
    start = time.monotonic()
    assert subprocess.run(["true"]).returncode == 0 and time.monotonic() - start < 2


def test_run_isolated_privileged_root_on_an_overlay(rootfs, pristine, tmp_path):
    """The sandbox's own one-shot entry in its root-file-system mode, on a host-side overlay."""
    base = tmp_path / "ov"
    for d in ("upper", "work", "root"):
        (base / d).mkdir(parents=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={rootfs},upperdir={base / 'upper'},workdir={base / 'work'}", str(base / "root")],
                   check=True)
    try:
        r = run_isolated(["/bin/bash", "-c", "useradd -m carol && id -u carol && touch /etc/x && ls /home"],
                         workdir=None, root_dir=base / "root", privileged_root=True, limits=Limits(wall_s=20))
    finally:
        subprocess.run(["umount", str(base / "root")], check=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1000", "carol"]
    assert (base / "upper" / "etc" / "x").exists() and (base / "upper" / "home" / "carol").is_dir()
    assert not (rootfs / "etc" / "x").exists() and "carol" not in (rootfs / "etc" / "passwd").read_text()


# -- the benchmark's tasks ----------------------------------------------------------------------
TRICKY = {
    "os-2": "a monitor script left running in the background is checked with pgrep",
    "os-141": "nohup in a subshell",
    "os-74": "vi driven with -c normal commands",
    "os-90": "apt-get install zsh in the set-up, offline",
    "os-479": "chpasswd, passwd -n, chage -E with date arithmetic",
    "os-267": "relative paths: set-up, commands and check share a working directory",
}


@pytest.mark.skipif(not DATA.is_file(), reason=f"Lifelong data not at {DATA}")
def test_ground_truth_of_tricky_tasks_passes_and_doing_nothing_fails(rootfs, pristine):
    env = make_env(rootfs, task_ids=list(TRICKY))
    tasks = env.tasks()
    assert len(tasks) == len(TRICKY)
    for task in tasks:
        res = env.solve(task, [], None, seed=0)
        assert res.success and res.outcome_detail == SUCCESS, (task.task_id, TRICKY[task.task_id], res.info)
        idle = env.run_episode(env.task(task.task_id), Script())
        assert not idle.success, (task.task_id, "the check passes without any work")


@pytest.mark.skipif(not DATA.is_file(), reason=f"Lifelong data not at {DATA}")
def test_react_agent_through_the_real_system(rootfs, pristine):
    env = make_env(rootfs, agent="react", task_ids=["os-164"])
    gold = env.task("os-164").gold_script

    class Replies:
        def __init__(self):
            self.replies = [" nonsense reply with no command?", f" bash\n```bash\n{gold}\n```", " finish"]

        def complete(self, prompt, **kw):
            return self.replies.pop(0)

    res = env.solve(env.tasks()[0], [], Replies(), seed=0)
    assert res.success and res.steps == 3
    assert "command not found" in res.transcript[0].observation  # a bare line is run as a command


def test_a_tree_without_a_shell_is_a_clear_error_and_leaves_nothing(tmp_path):
    fake = tmp_path / "fake"
    for d in ("bin", "etc"):
        (fake / d).mkdir(parents=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(ShellError, match="did not start"):
        OverlayShell(fake, scratch_dir=scratch)
    assert list(scratch.iterdir()) == []
    with pytest.raises(ShellError, match="does not look like a root file system"):
        OverlayShell(tmp_path / "nowhere", scratch_dir=scratch)


@pytest.mark.parametrize("command, detail", [("kill -9 -1", "sandbox_killed"),
                                             ("kill -STOP -1; sleep 1", "sandbox_frozen")])
def test_an_agent_that_breaks_its_own_sandbox_fails_its_task_not_the_environment(rootfs, command, detail,
                                                                               monkeypatch):
    """Before: `kill -9 -1` ("the shell is gone") and `kill -STOP -1` (the shell does not
    answer) were recorded as env_error, and a batch of them stopped the run under
    runner.max_error_rate. It is the agent's doing: the task's failure, with no error."""
    from memrl.control.guards import counts_against_error_rate
    from memrl_envs.lifelong_os import shell

    # a frozen shell never answers, however long it is given: a shorter grace than the 15 s
    # default shows the same giving up, sooner
    monkeypatch.setattr(shell, "_GRACE_S", 5.0)
    _GRACE_S = shell._GRACE_S
    env = make_env(rootfs, command_timeout_s=1)
    start = time.monotonic()
    result = episode(env, command)
    assert result.outcome == "failure" and result.outcome_detail == detail and not result.success
    assert result.errors == [] and not counts_against_error_rate({"errors": result.errors, "info": result.info})
    assert result.transcript[-1].observation.startswith("The system stopped responding")
    assert time.monotonic() - start < 1 + _GRACE_S + 20  # the frozen shell is given up on, then killed
    assert_fresh_system(rootfs)  # and nothing of it is left for the next episode


def test_a_kill_the_agent_armed_for_the_check_fails_its_task_not_the_environment(rootfs):
    """Before: a delayed `kill -9 -1` the agent left running, firing while the task's check ran,
    was recorded as env_error ("the shell is gone") and counted against runner.max_error_rate."""
    from memrl.control.guards import counts_against_error_rate

    env = make_env(rootfs, command_timeout_s=5)
    start = time.monotonic()
    result = episode(env, "(sleep 1; kill -9 -1) >/dev/null 2>&1 &", check="sleep 4; true")
    assert (result.outcome, result.outcome_detail) == ("failure", "sandbox_killed"), result.info
    assert result.errors == [] and not counts_against_error_rate({"errors": result.errors, "info": result.info})
    assert "the task's check could not run" in result.info["eval_output"]
    assert time.monotonic() - start < 15
    assert_fresh_system(rootfs)
