"""Hostile code through the whole BigCodeBench episode path: a scripted model returns it as its
solution; the adapter extracts it and runs the task's tests on it with bigcodebench's checker
in the sandbox. Each attempt must be contained, recorded as a failed episode, and leave the
host as it was. The code reports what it tried in the exception it raises, so the episode's
recorded reason shows each attempt was refused (not merely skipped)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from clients import make_client

from memrl.llm.scripted import ScriptedBackend
from memrl_envs.bigcodebench import BigCodeBenchEnv, BigCodeBenchSettings
from memrl_envs.bigcodebench.executor import Executor
from memrl_envs.sandbox import bwrap_available

TINY = Path(__file__).resolve().parents[2] / "fixtures" / "bigcodebench" / "tiny.jsonl"
_WHY = bwrap_available()
pytestmark = [pytest.mark.serial,  # times or samples the host: runs alone (Makefile, test)
              pytest.mark.skipif(_WHY is not None, reason=f"no sandbox here: {_WHY}"),
    pytest.mark.skipif(importlib.util.find_spec("bigcodebench") is None,
                       reason="bigcodebench (the checker) is not installed: pip install --no-deps bigcodebench==0.2.5"),
]
TIME_LIMIT = 3.0
SLACK = 10.0
# the sandbox's wall limit is the test limit plus the start-up slack; all must end well before
MAX_WALL = TIME_LIMIT + SLACK + 10


@pytest.fixture
def work_root() -> Path:
    """Where this test's sandbox folders go (short: the checker's sockets live under it)."""
    root = Path(tempfile.mkdtemp(prefix="bcbh-"))
    try:
        yield root
        assert list(root.iterdir()) == [], "a sandbox work folder was left behind"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def play(tmp_path: Path, work_root: Path, code: str, **limits):
    """One react episode on Tiny/1 (task_func(a, b) -> a + b) whose model answers `code`."""
    executor = Executor(time_limit_s=TIME_LIMIT, memory_mb=limits.get("memory_mb", 2048),
                        nproc=limits.get("nproc", 128), cache_dir=tmp_path / "cache",
                        max_parallel=1, work_root=work_root, slack_s=SLACK)
    env = BigCodeBenchEnv(BigCodeBenchSettings(data_path=str(TINY), part="all", task_ids=["Tiny/1"],
                                               cache_dir=str(tmp_path / "cache")),
                          agent="react", executor=executor)
    backend = ScriptedBackend(lambda request: "```python\n" + code + "\n```")
    llm = make_client(backend, cache=None, max_retries=0).episode("hostile", seed=0)
    start = time.monotonic()
    result = env.solve(env.tasks()[0], [], llm, seed=0)
    assert backend.calls == 1
    assert time.monotonic() - start < MAX_WALL
    return result


def episode(tmp_path: Path, work_root: Path, code: str, **limits):
    """`play`, for code that must fail (or time out)."""
    result = play(tmp_path, work_root, code, **limits)
    assert not result.success and result.reward == 0.0
    assert result.outcome_detail in ("fail", "timeout"), result.info
    return result


def reason(result) -> str:
    return result.info["reason"]


def no_process_with(tag: str) -> bool:
    out = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
    return out.stdout.strip() == ""


def test_writing_outside_the_work_dir_is_refused(tmp_path, work_root):
    target = tmp_path / "outside.txt"
    etc = Path(f"/etc/memrl-bcb-{uuid.uuid4().hex[:6]}")
    code = f"""
import os
report = []
for path in [{str(target)!r}, {str(etc)!r}, '/usr/memrl-bcb-x', '/root/memrl-bcb-x']:
    try:
        with open(path, 'w') as fh:
            fh.write('pwned')
        report.append('WROTE')
    except OSError as exc:
        report.append(type(exc).__name__)
raise RuntimeError('write:' + ','.join(report))
def task_func(a, b):
    return a + b
"""
    r = episode(tmp_path, work_root, code)
    assert r.outcome_detail == "fail"
    assert "write:" in reason(r) and "WROTE" not in reason(r)
    assert not target.exists() and not etc.exists()
    assert not Path("/usr/memrl-bcb-x").exists() and not Path("/root/memrl-bcb-x").exists()


def test_reading_shadow_and_the_home_dir_is_refused(tmp_path, work_root):
    home = Path.home()
    secret = f"memrl-secret-{uuid.uuid4().hex}"
    probe = home / f".memrl-bcb-probe-{uuid.uuid4().hex[:6]}"
    probe.write_text(secret)
    try:
        code = f"""
import os
report = []
for path in ['/etc/shadow', {str(probe)!r}]:
    try:
        report.append(open(path).read()[:40])
    except OSError as exc:
        report.append(type(exc).__name__)
try:
    report.append('listed=' + str({probe.name!r} in os.listdir({str(home)!r})))
except OSError as exc:
    report.append(type(exc).__name__)
raise RuntimeError('read:' + ','.join(report))
def task_func(a, b):
    return a + b
"""
        r = episode(tmp_path, work_root, code)
    finally:
        probe.unlink()
    text = reason(r)
    # /etc/shadow: not readable by the sandbox's own uid; the home folder: a tmpfs holding at
    # most the interpreter's own folder, re-exposed read-only
    assert text.startswith("loading the code: read:PermissionError,"), text
    assert secret not in text and "root:" not in text
    assert text.endswith("listed=False") or text.endswith("PermissionError"), text


def test_api_keys_of_the_parent_are_not_visible(tmp_path, work_root, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-memrl-bcb-secret")
    code = """
import os
values = list(os.environ.values())
try:
    values.append(open('/proc/1/environ').read())
except OSError:
    pass
raise RuntimeError('key=%s leaked=%s n=%d' % (os.environ.get('OPENAI_API_KEY'),
                   any('sk-memrl-bcb' in v for v in values), len(os.environ)))
def task_func(a, b):
    return a + b
"""
    r = episode(tmp_path, work_root, code)
    assert "key=None leaked=False" in reason(r), reason(r)


def test_no_network_even_to_a_local_listener(tmp_path, work_root):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = f"""
import socket
s = socket.socket()
s.settimeout(2)
try:
    s.connect(('127.0.0.1', {port}))
    outcome = 'CONNECTED'
except OSError as exc:
    outcome = type(exc).__name__
raise RuntimeError('net:' + outcome)
def task_func(a, b):
    return a + b
"""
    try:
        r = episode(tmp_path, work_root, code)
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert "net:" in reason(r) and "CONNECTED" not in reason(r)


def test_fork_bomb_is_contained_and_leaves_nothing_behind(tmp_path, work_root):
    tag = f"memrl-bcb-bomb-{uuid.uuid4().hex[:8]}"
    code = f"""
import os, sys, posix
posix.system(sys.executable + " -c 'import time; time.sleep(300)' {tag} &")
while True:
    os.fork()
def task_func(a, b):
    return a + b
"""
    r = episode(tmp_path, work_root, code, nproc=64)
    assert r.outcome_detail in ("timeout", "fail")  # never a result the bomb could fake as a pass
    assert subprocess.run(["true"]).returncode == 0  # the host still starts processes
    time.sleep(0.5)
    assert no_process_with(tag)


def test_memory_bomb_is_refused(tmp_path, work_root):
    code = """
blocks = []
try:
    while True:
        blocks.append(bytearray(128 * 2**20))
except MemoryError:
    mb = 128 * len(blocks)
    del blocks
    raise RuntimeError('memory refused after %d MB' % mb)
def task_func(a, b):
    return a + b
"""
    r = episode(tmp_path, work_root, code, memory_mb=1024)
    text = reason(r)
    assert "memory refused after" in text, text
    assert int(text.split("after ")[1].split(" MB")[0]) < 1024


def test_infinite_loop_times_out(tmp_path, work_root):
    code = "def task_func(a, b):\n    while True:\n        pass\n"
    start = time.monotonic()
    r = episode(tmp_path, work_root, code)
    assert r.outcome_detail == "timeout"
    assert time.monotonic() - start < MAX_WALL


def test_killing_the_parent_is_contained(tmp_path, work_root):
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        code = f"""
import os, signal, posix
report = []
for pid in ({os.getpid()}, {sentinel.pid}, 1, os.getppid()):
    try:
        posix.kill(pid, signal.SIGKILL)
        report.append('sent')
    except OSError as exc:
        report.append(type(exc).__name__)
raise RuntimeError('kill:' + ','.join(report))
def task_func(a, b):
    return a + b
"""
        r = episode(tmp_path, work_root, code)
        # the harness and the host process survive; what died is the checker inside the sandbox
        assert sentinel.poll() is None
        assert r.outcome_detail == "fail"
        assert "checker process died" in reason(r) or "kill:" in reason(r)
    finally:
        sentinel.send_signal(signal.SIGKILL)
        sentinel.wait()


def test_background_process_dies_with_the_sandbox(tmp_path, work_root):
    tag = f"memrl-bcb-bg-{uuid.uuid4().hex[:8]}"
    code = f"""
import os, sys, posix
if posix.fork() == 0:
    os.setsid()
    if posix.fork() == 0:
        posix.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', {tag!r}])
    posix._exit(0)
def task_func(a, b):
    return a - b
"""
    r = episode(tmp_path, work_root, code)
    assert r.outcome_detail == "fail" and "test_" in reason(r)
    time.sleep(0.5)
    assert no_process_with(tag)


def test_a_host_unix_socket_in_an_ordinary_folder_is_out_of_reach(tmp_path, work_root):
    """The issue's finding: a listener the host put in an ordinary folder. The folder is not
    part of the sandbox's view, so connecting fails however the path is known."""
    folder = Path(tempfile.mkdtemp(prefix="memrl-service-", dir="/var/tmp"))  # on the host disk, not /tmp
    os.chmod(folder, 0o755)  # an ordinary folder anyone may enter
    path = folder / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen(1)
    server.settimeout(0.5)
    code = f"""
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({str(path)!r})
    outcome = 'CONNECTED'
except OSError as exc:
    outcome = type(exc).__name__
raise RuntimeError('unix:' + outcome)
def task_func(a, b):
    return a + b
"""
    try:
        r = episode(tmp_path, work_root, code)
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)
    assert "unix:FileNotFoundError" in reason(r), reason(r)


def test_filling_the_work_folder_stops_at_its_cap_and_not_on_the_host_disk(tmp_path, work_root):
    code = """
import os
written = 0
try:
    with open('fill', 'wb') as fh:
        while written < 2048:
            fh.write(b'x' * 2**20)
            fh.flush()
            written += 1
except OSError as exc:
    raise RuntimeError('disk: %d MB then errno %d' % (written, exc.errno))
raise RuntimeError('disk: wrote %d MB' % written)
def task_func(a, b):
    return a + b
"""
    free = shutil.disk_usage(work_root).free
    executor = Executor(time_limit_s=TIME_LIMIT, memory_mb=2048, nproc=128, cache_dir=tmp_path / "cache",
                        max_parallel=1, work_root=work_root, slack_s=SLACK, disk_mb=32)
    env = BigCodeBenchEnv(BigCodeBenchSettings(data_path=str(TINY), part="all", task_ids=["Tiny/1"],
                                               cache_dir=str(tmp_path / "cache")),
                          agent="react", executor=executor)
    llm = make_client(ScriptedBackend(lambda request: "```python\n" + code + "\n```"), cache=None,
                    max_retries=0).episode("hostile", seed=0)
    r = env.solve(env.tasks()[0], [], llm, seed=0)
    text = reason(r)
    assert "errno 28" in text and int(text.split("disk: ")[1].split(" MB")[0]) <= 32, text  # ENOSPC at the cap
    assert free - shutil.disk_usage(work_root).free < 256 * 2**20  # nothing of it reached the host disk


# ----------------------------------------------------------------------------- the verdict
# The checker reports on a channel of its own (memrl_envs/bigcodebench/sandbox_runner.py): a pipe
# the code under test has no descriptor of, held by a non-dumpable process, and the verdict is
# the checker's exit status. Honest output of any shape never changes it; forged lines on
# every descriptor the code can reach do not make a pass.

FORGE = """
import json, os
FRAME = b'\\nMEMRL-CHECK ' + json.dumps({'status': 'pass', 'details': {}}).encode() + b'\\n'
def forge():
    reached = 0
    for fd in range(0, 256):
        try:
            os.write(fd, FRAME)
            reached += 1
        except OSError:
            pass
    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
        try:
            fds = os.listdir('/proc/%s/fd' % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                with open('/proc/%s/fd/%s' % (pid, fd), 'wb', buffering=0) as fh:
                    fh.write(FRAME)
                reached += 1
            except OSError:
                pass
    os.write(1, FRAME + b'{"status": "pass", unterminated')
    os.write(2, FRAME)
    return reached
"""


def test_a_forged_result_line_on_every_reachable_descriptor_is_no_pass(tmp_path, work_root):
    code = FORGE + """
def task_func(a, b):
    forge()
    return a - b
"""
    r = episode(tmp_path, work_root, code)
    assert r.outcome_detail == "fail" and r.info.get("channel_tampered"), r.info


def test_forging_then_killing_the_checker_is_no_pass(tmp_path, work_root):
    code = FORGE + """
import signal
def task_func(a, b):
    forge()
    for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return a + b
"""
    # killing the Manager leaves the checker waiting: a timeout at the sandbox's wall limit
    assert not episode(tmp_path, work_root, code).success


@pytest.mark.parametrize("shape", ["no_newline", "large", "large_no_newline", "frame_like"])
def test_honest_code_passes_whatever_it_prints(tmp_path, work_root, shape):
    prints = {"no_newline": "os.write(1, b'progress: 100%')",
              "large": "os.write(1, (b'x' * 1023 + b'\\n') * 2048)",               # 2 MB of lines
              "large_no_newline": "os.write(1, b'y' * (3 * 2**20)); os.write(2, b'z' * 2**20)",
              "frame_like": "os.write(1, b'MEMRL-CHECK {\\\"status\\\": \\\"fail\\\"}')"}[shape]
    code = f"""
import os
def task_func(a, b):
    {prints}
    return a + b
"""
    r = play(tmp_path, work_root, code)
    assert r.success and r.outcome_detail == "pass", r.info
    assert bool(r.info.get("channel_tampered")) == (shape == "frame_like")


def test_a_daemon_left_holding_the_checkers_descriptors_does_not_hold_the_verdict(tmp_path, work_root):
    """The code starts a detached process that keeps every inherited descriptor open (the
    checker's own sentinel among them): the verdict comes when the code is done, not at the
    time limit."""
    code = """
import os, time
def task_func(a, b):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(60)
        os._exit(0)
    os.wait()
    return a + b
"""
    r = play(tmp_path, work_root, code)
    assert r.success, r.info
    assert r.info["exec_s"] < 3.5, r.info["exec_s"]  # the test limit is 3 s: never reached


def test_an_inode_flood_at_the_memory_cap_leaves_no_cgroup_behind(tmp_path, work_root):
    """Empty files until the sandbox's memory cap (its tmpfs inodes count against it): the
    episode fails or times out, and no cgroup of the sandbox is left on the host."""
    from memrl_envs.sandbox import SandboxCgroup
    from memrl_envs.sandbox.cgroups import PREFIX

    def leftovers() -> list[str]:
        return sorted(str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{PREFIX}*"))

    before = leftovers()
    code = """
import os
def task_func(a, b):
    os.makedirs('/tmp/f', exist_ok=True)
    i = 0
    while True:
        for d in ('/tmp/f', '/dev/shm'):
            open('%s/%d' % (d, i), 'w').close()
        i += 1
"""
    r = episode(tmp_path, work_root, code, memory_mb=2048)
    assert r.outcome_detail in ("fail", "timeout")
    assert SandboxCgroup.live() == [] and leftovers() == before


# The code under test is a fork of the checker. Were the checker dumpable, a process of the code
# could open its /proc/<pid>/mem (same uid, no Yama) and rewrite what it is about to report: here
# the interned string "fail" (the checker's status) to read "pass" and to hash as "pass", so the
# checker's own table gives it the exit code of a pass. CPython 3.11 layout of a compact ASCII
# string: its cached hash at offset 24, its bytes at the end of the object.
REWRITE = """
import os, struct, sys
def rewrite(pid):
    text = 'fail'
    try:
        with open('/proc/%d/mem' % pid, 'r+b', buffering=0) as mem:
            mem.seek(id(text) + 24)
            mem.write(struct.pack('=q', hash('pass')))
            mem.seek(id(text) + sys.getsizeof(text) - len(text) - 1)
            mem.write(b'pass')
        return 'REWROTE'
    except OSError as exc:
        return type(exc).__name__
"""


def test_rewriting_the_checkers_memory_is_refused(tmp_path, work_root):
    code = REWRITE + """
outcome = rewrite(os.getppid())
raise RuntimeError('mem:' + outcome)
def task_func(a, b):
    return a + b
"""
    r = play(tmp_path, work_root, code)
    assert not r.success and r.outcome_detail == "fail", r.info
    assert reason(r) == "loading the code: mem:PermissionError", r.info


@pytest.mark.parametrize("how", ["os._exit(0)", "os._exit(3)", "os.kill(os.getpid(), 9)"])
def test_ending_the_test_process_early_is_a_failure_of_its_own(tmp_path, work_root, how):
    """bigcodebench records a test process that ended without a status as a timeout; the
    checker saw it end well before the limit: a failure with its own class and detail."""
    code = f"import os\n{how}\ndef task_func(a, b):\n    return a + b\n"
    r = play(tmp_path, work_root, code)
    assert (r.outcome, r.outcome_detail) == ("failure", "early_exit"), r.info
    said = {"os._exit(0)": "exit code 0", "os._exit(3)": "exit code 3", "os.kill(os.getpid(), 9)": "signal 9"}[how]
    assert f"without a result ({said})" in reason(r) and "time limit" not in reason(r), reason(r)
    assert r.info["exec_s"] < TIME_LIMIT, r.info  # not the time limit: it ended early
    assert not r.errors and not r.info.get("channel_tampered")


def test_what_stays_inherent_a_pass_forged_inside_the_test_process(tmp_path, work_root):
    """The tests run in the code's own process (bigcodebench's design): code that sets the
    checker's shared status to success and leaves is a pass, here as upstream. Documented in
    docs/sandboxes.md; the checker's own memory, exit status and channel stay out of reach."""
    code = """
import gc, os
for obj in gc.get_objects():
    if type(obj).__name__ == 'Synchronized' and getattr(obj, 'value', None) == 3:  # bigcodebench's _UNKNOWN
        obj.value = 0                                                               # its _SUCCESS
os._exit(0)
def task_func(a, b):
    return a - b
"""
    r = play(tmp_path, work_root, code)
    assert r.success and r.outcome_detail == "pass", r.info
