"""Idmapped mounts of a root file system: one cached tree shown, inside one sandbox's private
mount namespace, as owned by that sandbox's range of host ids (`userns.lease_ids`), with nothing
copied. The mount is made by `idmap_mount.py`, run by the host's interpreter in that namespace
(`mount_command`); `idmap_available` checks once per tree, for real, that this kernel and the
tree's file system support it (Linux 5.12+ for idmapped mounts, 5.19+ for overlayfs on them;
ext4, xfs, btrfs and tmpfs from 6.3 do)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from memrl_envs.sandbox.userns import HOST_BASE, ID_COUNT

HELPER = Path(__file__).with_name("idmap_mount.py")


def mount_command(source: str | os.PathLike[str], base: int, count: int = ID_COUNT) -> list[str]:
    """The command that, given a target folder as its last argument, mounts `source` there,
    read-only, its owners shifted by `base` (run as root in the mount namespace it is for)."""
    return [sys.executable, "-I", str(HELPER), str(source), str(int(base)), str(int(count))]


@functools.lru_cache(maxsize=8)
def idmap_available(tree: str) -> str | None:
    """None when an idmapped mount of `tree` works here and an overlay takes it as its lower
    layer, else why not (tried in a private mount namespace; nothing stays mounted)."""
    if os.geteuid() != 0:
        return "an idmapped mount needs root"
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not installed"
    probe = tempfile.mkdtemp(prefix="memrl-idmap-probe-")
    try:
        script = ('set -e; "$@"; mount -t tmpfs memrl-probe "$P/t"; mkdir "$P/t/u" "$P/t/w" "$P/t/m"; '
                  'mount -t overlay memrl-probe -o "lowerdir=$P/l,upperdir=$P/t/u,workdir=$P/t/w" "$P/t/m"; '
                  'stat -c %u "$P/l"')
        for d in ("l", "t"):
            os.mkdir(os.path.join(probe, d))
        out = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script,
                              "probe", *mount_command(tree, HOST_BASE), os.path.join(probe, "l")],
                             capture_output=True, text=True, timeout=60, env={**os.environ, "P": probe})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not try an idmapped mount: {exc}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if out.returncode != 0:
        return f"no idmapped overlay of {tree} here: {(out.stderr or out.stdout).strip()[-300:]}"
    if out.stdout.split() != [str(HOST_BASE + os.stat(tree).st_uid)]:
        return f"the idmapped mount of {tree} did not shift its owners (saw {out.stdout.strip()[:50]})"
    return None
