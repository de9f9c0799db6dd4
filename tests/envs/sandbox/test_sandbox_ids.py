"""Sandbox identities: host-root sandboxes' uids are unique among the machine's live sandboxes
(in this process and in others), and come back once released; root-file-system sandboxes are
root inside a user namespace whose ids the harness maps to unprivileged host ids."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from memrl_envs.sandbox.uids import UID_BASE, UID_SPAN, UidLease, UidsExhausted, lease_range, lease_uid
from memrl_envs.sandbox.userns import HOST_BASE, ID_COUNT, userns_available

pytestmark = pytest.mark.serial  # times or samples the host: runs alone (Makefile, test)


def test_leases_are_unique_and_come_back_when_released():
    leases = [lease_uid(random.Random(7)) for _ in range(200)]  # the same start every time
    uids = [lease.uid for lease in leases]
    assert len(set(uids)) == 200 and all(UID_BASE <= u < UID_BASE + UID_SPAN for u in uids)
    first = uids[0]
    for lease in leases:
        lease.release()
    again = lease_uid(random.Random(7))
    assert again.uid == first  # free again once its sandbox is gone
    again.release()


def test_a_uid_another_process_holds_is_never_handed_out():
    code = ("import random, sys, time\nfrom memrl_envs.sandbox.uids import lease_uid\n"
            "lease = lease_uid(random.Random(11)); print(lease.uid, flush=True); sys.stdin.read()")
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = int(other.stdout.readline())
        mine = lease_uid(random.Random(11))  # would start at the same uid
        assert mine.uid != held
        mine.release()
    finally:
        other.stdin.close()
        other.wait(10)
    # the other process ended: its uid is free
    with lease_uid(random.Random(11)) as lease:
        assert isinstance(lease, UidLease) and lease.uid == held


def test_id_ranges_are_leased_lowest_first_never_shared_and_come_back():
    first, size, slots = 90_000_000, 1000, 3  # a region of this test's own
    a, b = lease_range(first, size, slots), lease_range(first, size, slots)
    assert (a.uid, b.uid) == (first, first + size)
    code = (f"import sys\nfrom memrl_envs.sandbox.uids import lease_range\n"
            f"lease = lease_range({first}, {size}, {slots}); print(lease.uid, flush=True); sys.stdin.read()")
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert int(other.stdout.readline()) == first + 2 * size  # another process: the next free range
        with pytest.raises(UidsExhausted):
            lease_range(first, size, slots)
        a.release()
        again = lease_range(first, size, slots)
        assert again.uid == first  # free again once its sandbox is gone
    finally:
        other.stdin.close()
        other.wait(10)
    for lease in (again, b):
        lease.release()


def _rootfs_or_skip():
    from memrl_envs.lifelong_os.rootfs import is_built, rootfs_path
    from memrl_envs.lifelong_os.shell import overlay_available

    if overlay_available() is not None or not is_built(rootfs_path()):
        pytest.skip("no Lifelong-OS root file system here (make rootfs)")
    return rootfs_path()


@pytest.mark.skipif(userns_available() is not None, reason=f"no mapped user namespace here: {userns_available()}")
def test_without_idmapped_mounts_the_tree_is_a_copy_owned_by_the_episodes_range(monkeypatch):
    from memrl_envs.lifelong_os import shell as os_shell

    monkeypatch.setattr(os_shell, "idmap_available", lambda tree: "idmapped mounts switched off by the test")
    with os_shell.OverlayShell(_rootfs_or_skip()) as sh:
        r = sh.run("stat -c %u /etc/shadow; grep -o 'lowerdir=[^,]*' /proc/self/mountinfo | head -1", 10)
    assert r.output.split("\n")[:2] == ["0", f"lowerdir={_rootfs_or_skip()}.ids-{sh.host_base}"], r.output


@pytest.mark.skipif(userns_available() is not None, reason=f"no mapped user namespace here: {userns_available()}")
def test_root_inside_is_an_unprivileged_host_uid():
    from memrl_envs.lifelong_os.shell import OverlayShell

    with OverlayShell(_rootfs_or_skip()) as sh:
        assert sh.mapped
        base = sh.host_base
        assert base >= HOST_BASE and (base - HOST_BASE) % ID_COUNT == 0
        r = sh.run("id -u; cat /proc/self/uid_map; sleep 30 & echo $!; useradd -m carol && "
                   "chown carol /tmp && stat -c %U /tmp; stat -c %U /etc/shadow", 10)
        lines = r.output.split("\n")
        assert lines[0] == "0" and lines[1].split() == ["0", str(base), str(ID_COUNT)], r.output
        assert lines[-3:-1] == ["carol", "root"], r.output  # the tree is owned by the range: root inside
        # from the host: the episode's processes run as the shifted ids, never as host root
        procs = [p for p in sh.cgroup.procs() if os.readlink(f"/proc/{p}/ns/pid") != os.readlink("/proc/self/ns/pid")]
        uids = {int(open(f"/proc/{p}/status").read().split("Uid:")[1].split()[1]) for p in procs}
        assert uids and all(base <= u < base + ID_COUNT for u in uids), uids


@pytest.mark.skipif(userns_available() is not None, reason=f"no mapped user namespace here: {userns_available()}")
def test_the_namespace_handshake_works_when_the_harness_holds_many_descriptors():
    """A long run (the test suite itself) holds descriptors past 1024, where select() fails."""
    from memrl_envs.sandbox.userns import Handshake, as_host_base

    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        shake = Handshake()
        assert max(shake.fds) > 1024
        argv = as_host_base(["bwrap", *shake.args, "--ro-bind", "/", "/", "--", "/bin/sh", "-c", "id -u"])
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, pass_fds=shake.fds)
        shake.started()
        shake.complete(timeout_s=15)
        assert proc.communicate(timeout=15)[0].split() == [b"0"]
    finally:
        for fd in held:
            os.close(fd)
