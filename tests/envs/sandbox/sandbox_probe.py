"""The system-call probe (syscall_probe.c): built with gcc at test time, run on the host with
or without the sandboxes' compiled filter, or inside a sandbox (shipped in its script)."""

from __future__ import annotations

import base64
import functools
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("syscall_probe.c")
# each probe makes one call that the filter refuses
REFUSED_EPERM = ("clone_newuser", "clone_newns", "clone_newuser_newns", "io_uring_setup", "keyctl", "fsopen",
                 "open_tree", "move_mount", "pidfd_getfd", "personality")
KILLED = ("int80", "int80_thread")   # a 32-bit call: the whole process dies of SIGSYS
NAMES = ("getpid", *KILLED, "clone3", *REFUSED_EPERM)
# what an unprivileged process in a sandbox can do when no filter refuses it (the others,
# fsopen, move_mount and clone with CLONE_NEWNS alone, need CAP_SYS_ADMIN)
UNPRIVILEGED_OK = ("getpid", *KILLED, "clone3", "clone_newuser", "clone_newuser_newns", "io_uring_setup",
                   "keyctl", "open_tree", "pidfd_getfd", "personality")


def why_not() -> str | None:
    """None when the probe can be built and run here, else why not."""
    if platform.machine() != "x86_64":
        return f"the probe's 32-bit call is x86-64's `int 0x80` (this is {platform.machine()})"
    if shutil.which("gcc") is None:
        return "gcc is not installed (apt-get install gcc)"
    return None


@functools.lru_cache(maxsize=1)
def binary() -> Path:
    """The probe, compiled once per test session."""
    out = Path(tempfile.mkdtemp(prefix="memrl-probe-build-")) / "syscall_probe"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-pthread", "-o", str(out), str(SOURCE)], check=True,
                   capture_output=True, timeout=120)
    return out


def parse(output: str) -> dict[str, str]:
    """{probe: "ok" | "refused <errno>" | "killed <signal>"} from the probe's lines."""
    found = {}
    for line in output.splitlines():
        name, _, result = line.strip().partition(" ")
        if name in NAMES:
            found[name] = result
    return found


def run_on_host(filter_program: bytes | None, tmp: Path) -> dict[str, str]:
    """The probe as this (root) process's child, in a private mount namespace of its own (its
    move_mount call moves a mount there), with the filter loaded first when given."""
    argv = ["unshare", "--mount", "--propagation", "private", "--", str(binary())]
    if filter_program is not None:
        path = tmp / "filter.bpf"
        path.write_bytes(filter_program)
        argv.append(str(path))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return parse(out.stdout)


def shell_script() -> str:
    """A bash script that writes the probe into the sandbox's working folder (or /tmp) and runs it."""
    blob = base64.b64encode(binary().read_bytes()).decode()
    return ("d=$(mktemp -d 2>/dev/null || mktemp -d -p .) && base64 -d > $d/probe <<'MEMRL_PROBE'\n" + blob
            + "\nMEMRL_PROBE\nchmod +x $d/probe && $d/probe; echo probe-exit $?")
