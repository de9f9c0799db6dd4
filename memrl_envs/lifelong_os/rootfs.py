"""The Debian root file system the Lifelong-OS episodes run in: built once with `debootstrap`,
cached, never written to afterwards (every episode gets a throwaway overlay on top of it).

The benchmark runs each task in a container of a small Ubuntu image; without Docker this
module builds the closest thing that needs nothing but apt's mirror: Debian bookworm,
``--variant=minbase`` (the Essential set: bash, coreutils, findutils, grep, sed, mawk, passwd,
util-linux, tar, gzip, ...) plus the tools the tasks call (``PACKAGES``).

Layout under the cache root (``rootfs_root()``)::

    <name>/              the root file system (read-only by convention)
    <name>.json          written last: the recipe, the mirror, seconds taken, size
    <name>.build.log     debootstrap's output
    .<name>.lock         held while building, so concurrent builders wait for one another
    <name>.ids-<base>/   the same tree with every owner shifted by <base>: the `/` of episodes
                         whose root is an unprivileged host id (`shifted_rootfs`), and its .json

``<name>`` carries a hash of the recipe, so a changed package list builds a new tree.

Command line (also ``make rootfs``)::

    python -m memrl_envs.lifelong_os.rootfs build [--root DIR] [--mirror URL] [--force]
    python -m memrl_envs.lifelong_os.rootfs path  [--root DIR]     # print it; exit 1 if not built
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

DEBOOTSTRAP = "debootstrap"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
HOSTNAME = "memrl-os"
# Tools the tasks' scripts call beyond the minbase set: addgroup (adduser), pgrep/ps/uptime
# (procps), vi (vim; the benchmark's image has it: tasks drive it with -c/-es and piped
# keystrokes), zsh (tasks set it as a login shell and `apt-get install` it in their set-up,
# which only works offline when it is already there), file, less, killall (psmisc).
PACKAGES = ("adduser", "procps", "vim", "zsh", "file", "less", "psmisc")
RECIPE_VERSION = 1  # bump when the post-build steps change


class RootfsError(RuntimeError):
    """The root file system is missing or could not be built."""


@dataclass(frozen=True)
class RootfsSpec:
    """What gets built: the Debian suite, the debootstrap variant and the extra packages."""

    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = PACKAGES
    arch: str | None = None  # None: the host's

    @property
    def digest(self) -> str:
        blob = json.dumps({"suite": self.suite, "variant": self.variant, "packages": sorted(self.packages),
                           "arch": self.arch, "recipe": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    @property
    def name(self) -> str:
        return f"debian-{self.suite}-{self.variant}-{self.digest}"


@dataclass
class BuildInfo:
    """The stamp written next to a finished tree."""

    name: str
    spec: dict
    mirror: str
    seconds: float
    size_mb: float
    built_at: str
    debootstrap: str = ""
    notes: list[str] = field(default_factory=list)


def rootfs_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where root file systems are cached: `explicit`, else ``$MEMRL_ROOTFS_DIR``, else
    ``$MEMRL_CACHE_DIR/rootfs``, else ``~/.cache/memrl/rootfs``."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    if os.environ.get("MEMRL_ROOTFS_DIR"):
        return Path(os.environ["MEMRL_ROOTFS_DIR"]).expanduser().resolve()
    from memrl.core.cachedir import default_cache_dir

    return (default_cache_dir() / "rootfs").resolve()


def rootfs_path(root: str | os.PathLike[str] | None = None, spec: RootfsSpec = RootfsSpec()) -> Path:
    return rootfs_root(root) / spec.name


def is_built(path: Path) -> bool:
    return path.is_dir() and path.with_name(path.name + ".json").is_file()


def ensure_rootfs(root: str | os.PathLike[str] | None = None, spec: RootfsSpec = RootfsSpec()) -> Path:
    """The path of a finished tree, or `RootfsError` saying how to build it."""
    path = rootfs_path(root, spec)
    if not is_built(path):
        raise RootfsError(
            f"no Lifelong-OS root file system at {path}: build it once with `make rootfs` "
            f"(python -m memrl_envs.lifelong_os.rootfs build --root {path.parent}); it needs root, "
            "debootstrap and apt's Debian mirror, and takes a few minutes")
    return path


# -- the mirror ------------------------------------------------------------------------
def _debian_uris(text: str) -> list[str]:
    uris = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.lower().startswith("uris:"):
            uris += line.split(":", 1)[1].split()
        elif line.startswith("deb "):
            parts = [p for p in re.sub(r"\[[^\]]*\]", " ", line).split()[1:]]
            if parts:
                uris.append(parts[0])
    return uris


def find_mirror() -> str:
    """The Debian mirror apt on this machine uses (the first non-security ``.../debian`` URI in
    /etc/apt/sources.list*), ``$MEMRL_DEBIAN_MIRROR`` when set, else deb.debian.org."""
    if os.environ.get("MEMRL_DEBIAN_MIRROR"):
        return os.environ["MEMRL_DEBIAN_MIRROR"]
    files = [Path("/etc/apt/sources.list")]
    d = Path("/etc/apt/sources.list.d")
    if d.is_dir():
        files += sorted(p for p in d.iterdir() if p.suffix in (".list", ".sources"))
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for uri in _debian_uris(text):
            if re.search(r"/debian/?$", uri) and "security" not in uri:
                return uri.rstrip("/")
    return DEFAULT_MIRROR


# -- building ----------------------------------------------------------------------------
@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _size_mb(path: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return round(total / 2**20, 1)


def _post_build(tree: Path) -> list[str]:
    """Small fixes that make the tree behave like the benchmark's container."""
    notes = []
    (tree / "etc" / "hostname").write_text(HOSTNAME + "\n")
    (tree / "etc" / "hosts").write_text(f"127.0.0.1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n"
                                        "::1\tlocalhost ip6-localhost ip6-loopback\n")
    # downloaded .debs are not needed at run time
    archives = tree / "var" / "cache" / "apt" / "archives"
    for deb in archives.glob("*.deb"):
        deb.unlink()
    notes.append("hostname, hosts written; apt archive emptied")
    return notes


def build_rootfs(root: str | os.PathLike[str] | None = None, spec: RootfsSpec = RootfsSpec(),
                 mirror: str | None = None, force: bool = False, log=print) -> Path:
    """Build the tree (once; concurrent callers wait for the first) and return its path."""
    final = rootfs_path(root, spec)
    stamp = final.with_name(final.name + ".json")
    with _lock(final.with_name(f".{final.name}.lock")):
        if is_built(final) and not force:
            return final
        exe = shutil.which(DEBOOTSTRAP) or next((p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap")
                                                 if os.access(p, os.X_OK)), None)
        if exe is None:
            raise RootfsError("debootstrap is not installed (apt-get install debootstrap)")
        if os.geteuid() != 0:
            raise RootfsError("building the root file system needs root (debootstrap chroots and chowns)")
        mirror = mirror or find_mirror()
        tmp = final.with_name(f".{final.name}.tmp")
        for old in (tmp, final):
            if old.exists():
                shutil.rmtree(old)
        stamp.unlink(missing_ok=True)
        cmd = [exe, f"--variant={spec.variant}"]
        if spec.packages:
            cmd.append("--include=" + ",".join(spec.packages))
        if spec.arch:
            cmd.append(f"--arch={spec.arch}")
        if os.path.isfile(KEYRING):
            cmd.append(f"--keyring={KEYRING}")
        cmd += [spec.suite, str(tmp), mirror]
        log_path = final.with_name(final.name + ".build.log")
        log(f"building {final.name} from {mirror} (log: {log_path}) ...")
        start = time.monotonic()
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               "DEBIAN_FRONTEND": "noninteractive"}
        with open(log_path, "w") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        if proc.returncode != 0:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            shutil.rmtree(tmp, ignore_errors=True)
            raise RootfsError(f"debootstrap failed (exit {proc.returncode}); last lines of {log_path}:\n"
                              + "\n".join(tail))
        notes = _post_build(tmp)
        os.replace(tmp, final)
        seconds = time.monotonic() - start
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "debootstrap"], capture_output=True,
                                 text=True).stdout.strip() if shutil.which("dpkg-query") else ""
        info = BuildInfo(name=final.name, spec=asdict(spec), mirror=mirror, seconds=round(seconds, 1),
                         size_mb=_size_mb(final), built_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                         debootstrap=version, notes=notes)
        tmp_stamp = stamp.with_name(stamp.name + ".tmp")
        tmp_stamp.write_text(json.dumps(asdict(info), indent=1) + "\n")
        os.replace(tmp_stamp, stamp)
        log(f"built {final} in {seconds:.0f} s ({info.size_mb} MB)")
        return final


def shifted_rootfs(path: str | os.PathLike[str], base: int, count: int = 65_536) -> Path:
    """The tree at `path` with every owner shifted by `base` (uid u -> base + u, gid alike):
    the `/` of a sandbox whose root is host uid `base` (memrl_envs.sandbox.userns), as a
    rootless container's image is stored. Made once next to the tree (`<name>.ids-<base>`,
    with its own `.json`, remade when the tree was rebuilt) and reused; root only."""
    src = Path(path).resolve()
    final = src.with_name(f"{src.name}.ids-{base}")
    stamp = final.with_name(final.name + ".json")
    source_stamp = src.with_name(src.name + ".json")
    origin = source_stamp.read_text() if source_stamp.is_file() else f"unstamped {src.stat().st_mtime_ns}"

    def current() -> bool:
        try:
            return final.is_dir() and json.loads(stamp.read_text()).get("source_stamp") == origin
        except (OSError, ValueError):
            return False

    if current():
        return final
    if os.geteuid() != 0:
        raise RootfsError(f"shifting the owners of {src} needs root")
    with _lock(final.with_name(f".{final.name}.lock")):
        if current():
            return final
        start = time.monotonic()
        tmp = final.with_name(f".{final.name}.tmp")
        for old in (tmp, final):
            if old.exists():
                shutil.rmtree(old)
        stamp.unlink(missing_ok=True)
        copy = subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(tmp)], capture_output=True, text=True)
        if copy.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RootfsError(f"could not copy {src}: {copy.stderr.strip()[:300]}")
        try:
            entries = _shift_owners(tmp, base, count)
        except (OSError, RootfsError):
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        os.replace(tmp, final)
        stamp.write_text(json.dumps({"source": str(src), "source_stamp": origin, "base": base, "count": count,
                                     "entries": entries, "seconds": round(time.monotonic() - start, 1)}) + "\n")
        return final


def _shift_owners(tree: Path, base: int, count: int) -> int:
    """lchown every inode once by `base` (hard links share one); set-id bits, which chown
    clears, are put back. The number of inodes shifted."""
    seen: set[tuple[int, int]] = set()
    n = 0
    for dirpath, dirs, files in os.walk(tree):
        paths = [dirpath] if dirpath == str(tree) else []
        for path in paths + [os.path.join(dirpath, name) for name in dirs + files]:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            if st.st_uid >= count or st.st_gid >= count:
                raise RootfsError(f"{path} is owned by {st.st_uid}:{st.st_gid}, outside the {count} ids "
                                  "a sandbox maps")
            os.lchown(path, base + st.st_uid, base + st.st_gid)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(st.st_mode))
            n += 1
    return n


def build_info(path: Path) -> dict | None:
    stamp = path.with_name(path.name + ".json")
    try:
        return json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memrl_envs.lifelong_os.rootfs",
                                     description="Build or locate the Lifelong-OS root file system.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build it (no-op when already built)")
    b.add_argument("--root", default=None, help="cache folder (default: $MEMRL_ROOTFS_DIR, "
                   "$MEMRL_CACHE_DIR/rootfs or ~/.cache/memrl/rootfs)")
    b.add_argument("--mirror", default=None, help="Debian mirror (default: the one apt uses)")
    b.add_argument("--force", action="store_true", help="rebuild even when built")
    p = sub.add_parser("path", help="print its path; exit 1 when it is not built")
    p.add_argument("--root", default=None)
    args = parser.parse_args(argv)
    from memrl.core.errors import cli_exit

    def act() -> None:
        if args.cmd == "build":
            path = build_rootfs(args.root, mirror=args.mirror, force=args.force)
            info = build_info(path) or {}
            print(f"{path} (built in {info.get('seconds', '?')} s, {info.get('size_mb', '?')} MB)")
        else:
            print(ensure_rootfs(args.root))

    return cli_exit(act, RootfsError, 1)


if __name__ == "__main__":
    sys.exit(main())
