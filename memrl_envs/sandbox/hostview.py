"""What of the host's file system a host-root sandbox sees: an allow-list, not the whole `/`.

Only what running a program from the host's interpreter needs is bound, read-only: the system
folders (`/usr` and the `/bin`, `/sbin`, `/lib*` links or folders), a minimal `/etc` (names
below), the interpreter's own folders (its prefix, base prefix, and the folder of its real
executable, wherever they live, e.g. under a hidden home) and what the caller adds. Everything
else is absent: `/run`, `/var`, `/tmp`, `/home`, `/root`, `/srv`, `/opt`, `/mnt`, the project's
folders (runs, caches, banks, a database's socket folder). A unix socket the host listens on is
out of reach because its path does not exist inside (a network namespace does not cover path
sockets). Defence in depth: a folder known to hold runtime sockets or the project's state
(`runtime_dirs`) that lies inside a bound folder is covered by an empty read-only tmpfs.

`/etc/shadow` and `/etc/gshadow` exist inside, empty and unreadable (mode 0000), as on a
system where the sandbox's user is not root.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Sequence

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# /etc entries a program may read to run (linking, users, names, time zone, certificates, fonts,
# MIME types, locale aliases, terminal data, the alternatives links of /usr/bin). Nothing with
# credentials (pip.conf, npmrc, gitconfig, ssh, ssl/private), no machine identity (machine-id).
ETC_ALLOW = (
    "alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version",
    "fonts", "gai.conf", "group", "host.conf", "hostname", "hosts", "inputrc", "issue", "ld.so.cache",
    "ld.so.conf", "ld.so.conf.d", "locale.alias", "locale.conf", "locale.gen", "localtime", "lsb-release",
    "magic", "magic.mime", "mailcap", "matplotlibrc", "mime.types", "mtab", "networks", "nsswitch.conf",
    "os-release", "passwd", "profile", "protocols", "python3", "services", "shells", "ssl/certs",
    "ssl/openssl.cnf", "terminfo", "timezone", "xdg", "xml", "sgml",
)
ETC_PLACEHOLDERS = ("shadow", "gshadow")
_PY_ETC = f"python{sys.version_info.major}.{sys.version_info.minor}"


@functools.lru_cache(maxsize=1)
def _isolated_sys_path() -> tuple[str, ...]:
    """The import path of `sys.executable -I` (what a sandboxed run of it sees), including
    folders that `.pth` files add; asked once."""
    try:
        out = subprocess.run([sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                             capture_output=True, text=True, timeout=60, check=True)
        return tuple(json.loads(out.stdout))
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()


def python_binds() -> list[str]:
    """Folders the current Python interpreter and its packages live in: its prefixes, the
    folder of its real executable, and every folder on its isolated import path."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    for entry in _isolated_sys_path():
        if entry and os.path.isdir(entry):
            paths.add(entry)
    # a folder inside another one listed is covered by it
    kept = sorted(p for p in paths if p and os.path.isdir(p))
    return [p for p in kept if not any(p != q and _under(p, q) for q in kept)]


def runtime_dirs(extra: Iterable[str] = ()) -> list[str]:
    """Folders that hold runtime sockets or the project's state: never visible in a sandbox."""
    home = os.path.expanduser("~")
    out = ["/run", "/var/run", "/var/tmp", "/tmp", "/dev/shm", "/var/lib/mysql", "/var/lib/postgresql",
           os.path.join(home, ".cache")]
    try:
        out.append(os.path.join(os.getcwd(), "runs"))
    except OSError:  # the working directory is gone
        pass
    for var in ("XDG_RUNTIME_DIR", "MEMRL_CACHE_DIR", "MEMRL_ROOTFS_DIR", "TMPDIR"):
        if os.environ.get(var):
            out.append(os.environ[var])
    out += list(extra)
    return [os.path.realpath(p) for p in dict.fromkeys(out) if p]


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def dirs_above(path: str, made: set[str]) -> list[str]:
    """Create the folders above a bind target 0755 (bubblewrap would make them 0700 and the
    sandbox's own uid could not reach the target)."""
    out: list[str] = []
    for parent in reversed(Path(path).parents):
        p = str(parent)
        if p == "/" or p in made:
            continue
        made.add(p)
        out += ["--perms", "0755", "--dir", p]
    return out


def host_view_args(placeholder_fds: Sequence[int], made: set[str]) -> list[str]:
    """bubblewrap arguments that build the sandbox's system part from the allow-list: the
    system folders and the minimal /etc. The new root is bubblewrap's own tmpfs (the caller
    remounts it read-only at the end). `placeholder_fds`: one readable, empty fd per
    `ETC_PLACEHOLDERS` entry (consumed by bubblewrap)."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    made.update(SYSTEM_DIRS)
    args += ["--perms", "0755", "--dir", "/etc"]
    made.add("/etc")
    for name in (*ETC_ALLOW, _PY_ETC):
        path = f"/etc/{name}"
        if os.path.islink(path):
            args += dirs_above(path, made) + ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += dirs_above(path, made) + ["--ro-bind", path, path]
    for name, fd in zip(ETC_PLACEHOLDERS, placeholder_fds):
        args += ["--perms", "0000", "--file", str(fd), f"/etc/{name}"]
    return args


def program_binds_args(ro_binds: Sequence[str], made: set[str], hide: Iterable[str] = ()) -> list[str]:
    """bubblewrap arguments that show the interpreter's folders and the caller's `ro_binds`
    read-only (after /tmp is mounted, so one under /tmp stays visible), with any runtime
    folder inside them covered. Raises ValueError for a bind of the whole file system."""
    args: list[str] = []
    hidden = runtime_dirs(hide)
    for path in dict.fromkeys([*python_binds(), *ro_binds]):
        real = os.path.realpath(path)
        if real == "/" or path == "/":
            raise ValueError("a sandbox may not see the host's whole file system (a read-only bind of /)")
        if not os.path.exists(path) or any(_under(path, s) or _under(real, s) for s in SYSTEM_DIRS):
            continue
        args += dirs_above(path, made) + ["--ro-bind", path, path]
        made.add(path)
        for inner in hidden:
            if _under(inner, real) and inner != real and os.path.isdir(inner):
                dest = os.path.join(path, os.path.relpath(inner, real))
                args += ["--tmpfs", dest, "--remount-ro", dest]
    return args
