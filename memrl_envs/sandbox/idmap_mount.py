"""Run by the host's interpreter (`python -I idmap_mount.py SOURCE BASE COUNT TARGET`), as root,
inside the private mount namespace of one sandbox: mount SOURCE at TARGET, read-only, with its
owners shifted by BASE (uid and gid u < COUNT appear as BASE + u), an idmapped mount
(`mount_setattr(MOUNT_ATTR_IDMAP)`, Linux 5.12+; overlayfs takes one as its lower layer from
5.19). Nothing is copied, so every live sandbox can have a range of host ids of its own over one
tree. Exit status 0 when mounted; otherwise 1 with the reason on stderr.

Only the standard library is used: this file is run by path, never imported.
"""

import ctypes
import os
import signal
import sys

# system call numbers shared by every architecture (the unified table from 424 up)
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 0x1, 0o2000000
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP = 0x1, 0x100000
CLONE_NEWUSER = 0x10000000


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def fail(what):
    err = ctypes.get_errno()
    sys.stderr.write(f"{what}: {os.strerror(err)}\n")
    raise SystemExit(1)


def userns_fd(base, count):
    """A user namespace mapping 0..count-1 to base..base+count-1 (held by a child for as long as
    it takes to open it)."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(go_w)
        code = 0 if libc.unshare(CLONE_NEWUSER) == 0 else 1
        os.write(ready_w, b"1" if code == 0 else b"0")
        os.read(go_r, 1)
        os._exit(code)
    os.close(ready_w)
    os.close(go_r)
    try:
        if os.read(ready_r, 1) != b"1":
            sys.stderr.write("could not make a user namespace\n")
            raise SystemExit(1)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as fh:
                fh.write(f"0 {base} {count}\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.write(go_w, b"1")
        os.waitpid(pid, 0)


def main():
    source, base, count, target = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    ns = userns_fd(base, count)
    tree = libc.syscall(SYS_OPEN_TREE, AT_FDCWD, source.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    if tree < 0:
        fail(f"open_tree {source}")
    attr = MountAttr(attr_set=MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY, userns_fd=ns)
    if libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)) < 0:
        fail(f"idmapping {source}")
    if libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH) < 0:
        fail(f"mounting the idmapped {source} at {target}")
    os.close(tree)
    os.close(ns)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
