"""The isolation layer on its own: each hostile program is contained and the host unchanged."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from memrl_envs.sandbox import Limits, SandboxError, bwrap_available, run_isolated

_WHY = bwrap_available()
pytestmark = [pytest.mark.serial,  # times or samples the host: runs alone (Makefile, test)
              pytest.mark.skipif(_WHY is not None, reason=f"no sandbox here: {_WHY}")]


def py(tmp_path: Path, code: str, **limits) -> "object":
    work = tmp_path / f"work-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    (work / "main.py").write_text(code)
    return run_isolated([sys.executable, "main.py"], workdir=work,
                        limits=Limits(**{"wall_s": 10, **limits}))


def test_environment_is_empty_so_api_keys_do_not_leak(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    r = py(tmp_path, "import os, json; print(json.dumps(dict(os.environ)))")
    assert r.returncode == 0, r.stderr
    assert "sk-test-secret" not in r.stdout and "OPENAI_API_KEY" not in r.stdout


def test_cannot_read_shadow_or_home(tmp_path):
    home = Path(os.path.expanduser("~"))
    probe = home / f".memrl-probe-{uuid.uuid4().hex[:6]}"
    probe.write_text("private")
    try:
        r = py(tmp_path, f"""
import os
for path in ['/etc/shadow', {str(probe)!r}]:
    try:
        print(path, open(path).read()[:10])
    except OSError as exc:
        print(path, 'DENIED', type(exc).__name__)
print('home', os.listdir({str(home)!r}))
""")
    finally:
        probe.unlink()
    assert r.returncode == 0, r.stderr
    assert "/etc/shadow DENIED" in r.stdout
    assert f"{probe} DENIED" in r.stdout and "private" not in r.stdout


def test_writes_outside_the_work_dir_fail_and_the_host_is_unchanged(tmp_path):
    target = tmp_path / "outside.txt"
    r = py(tmp_path, f"""
import os
for path in [{str(target)!r}, '/etc/memrl-pwned', '/root/x', '/usr/x']:
    try:
        open(path, 'w').write('x'); print('WROTE', path)
    except OSError as exc:
        print('refused', path, exc.errno)
open('/tmp/scratch', 'w').write('private tmp is fine')
open('inside.txt', 'w').write('ok')
""")
    assert r.returncode == 0, r.stderr
    assert "WROTE" not in r.stdout
    assert not target.exists() and not Path("/etc/memrl-pwned").exists()
    assert not Path("/tmp/scratch").exists() or Path("/tmp/scratch").read_text() != "private tmp is fine"


def test_no_network_even_to_a_listening_local_port(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        r = py(tmp_path, f"""
import socket
s = socket.socket()
try:
    s.connect(('127.0.0.1', {port})); print('CONNECTED')
except OSError as exc:
    print('refused', type(exc).__name__)
""")
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    assert "refused" in r.stdout and "CONNECTED" not in r.stdout


def test_fork_bomb_is_contained(tmp_path):
    start = time.monotonic()
    r = py(tmp_path, "import os\nwhile True:\n    os.fork()\n", wall_s=8, nproc=64)
    assert time.monotonic() - start < 20
    assert r.returncode != 0 or r.timed_out
    # the host can still start processes
    assert subprocess.run(["true"]).returncode == 0


def test_memory_bomb_is_contained(tmp_path):
    r = py(tmp_path, "x = bytearray(8 * 2**30)\nprint('ALLOCATED')", memory_mb=1024)
    assert r.returncode != 0 and "ALLOCATED" not in r.stdout
    assert "MemoryError" in r.stderr


def test_infinite_loop_is_killed_at_the_wall_limit(tmp_path):
    start = time.monotonic()
    r = py(tmp_path, "while True:\n    pass\n", wall_s=2)
    assert r.timed_out and r.returncode is None
    assert time.monotonic() - start < 6


def test_cannot_kill_the_parent(tmp_path):
    r = py(tmp_path, """
import os, signal
for pid in (os.getppid(), %d, 1):
    try:
        os.kill(pid, signal.SIGKILL); print('sent', pid)
    except OSError as exc:
        print('refused', pid, type(exc).__name__)
""" % os.getpid())
    # we are still here; the host pid is not even visible inside the PID namespace
    assert f"sent {os.getpid()}" not in r.stdout


def test_background_processes_die_with_the_sandbox(tmp_path):
    tag = f"memrl-bg-{uuid.uuid4().hex[:8]}"
    work = tmp_path / "bg"
    work.mkdir()
    (work / "late.py").write_text("import time\ntime.sleep(2)\nopen('late.txt', 'w').write('late')\n")
    (work / "main.py").write_text(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, 'late.py', {tag!r}], start_new_session=True)\n"
        "print('started')\n")
    r = run_isolated([sys.executable, "main.py"], workdir=work, limits=Limits(wall_s=10))
    assert r.returncode == 0 and "started" in r.stdout, r.stderr
    time.sleep(3)
    assert not (work / "late.txt").exists()
    left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_output_is_capped(tmp_path):
    r = py(tmp_path, "import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 1000)\n",
           output_bytes=10_000)
    assert r.output_truncated and len(r.stdout) == 10_000


def test_work_dir_is_readable_afterwards(tmp_path):
    """With `disk_mb=None` the sandbox writes the host folder itself (no disk cap)."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "main.py").write_text("open('result.txt', 'w').write('42')")
    r = run_isolated([sys.executable, "main.py"], workdir=work, limits=Limits(disk_mb=None))
    assert r.returncode == 0, r.stderr
    assert (work / "result.txt").read_text() == "42"
    assert (work / "result.txt").stat().st_uid == os.getuid()


def test_missing_workdir_is_a_sandbox_error(tmp_path):
    with pytest.raises(SandboxError, match="does not exist"):
        run_isolated(["true"], workdir=tmp_path / "nope")


def test_private_tmp_is_size_capped(tmp_path):
    r = py(tmp_path, """
try:
    with open('/tmp/fill', 'wb') as fh:
        for _ in range(64):
            fh.write(b'x' * 2**20)
    print('WROTE 64 MB')
except OSError as exc:
    print('full', exc.errno)
""", tmp_mb=16)
    assert r.returncode == 0, r.stderr
    assert "full 28" in r.stdout  # ENOSPC


def test_capped_work_dir_is_a_seeded_copy_whose_writes_stay_inside(tmp_path):
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "data.txt").write_text("seed")
    (work / "main.py").write_text("""
import os
print(open('sub/data.txt').read(), os.stat('.').st_uid == os.getuid())
open('result.txt', 'w').write('42')
try:
    with open('fill', 'wb') as fh:
        for _ in range(64):
            fh.write(b'x' * 2**20)
    print('WROTE 64 MB')
except OSError as exc:
    print('full', exc.errno)
""")
    r = run_isolated([sys.executable, "main.py"], workdir=work, limits=Limits(wall_s=20, disk_mb=16))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["seed", "True", "full", "28"]  # the seed is there; past 16 MB: ENOSPC
    assert sorted(p.name for p in work.iterdir()) == ["main.py", "sub"]  # nothing came back
    assert (work / "sub" / "data.txt").read_text() == "seed"
