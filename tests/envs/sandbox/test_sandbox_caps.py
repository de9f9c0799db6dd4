"""Caps on a whole sandbox: the parallelism that fits the machine (lowered or refused, with the
reason), the cgroups made for one sandbox (limits written, joined, removed), and a run that
cannot fit stopping with a `memrl:` configuration error."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from memrl.core.errors import ConfigError
from memrl_envs.sandbox import SandboxCgroup, SandboxFitError, cgroup_support, plan_parallel
from memrl_envs.sandbox.fit import HostResources

pytestmark = pytest.mark.serial  # times or samples the host: runs alone (Makefile, test)


def host(memory_mb: int, disk_mb: int = 100_000, limit_mb: int | None = None) -> HostResources:
    return HostResources(memory_total_mb=memory_mb, memory_available_mb=memory_mb, harness_limit_mb=limit_mb,
                         disk_free_mb=disk_mb, disk_path="/x", cpus=2)


def test_parallelism_fits_is_lowered_or_refused_with_the_reason():
    ok = plan_parallel(2, memory_mb_each=4096, disk_mb_each=16, disk_path="/x", memory_capped=True,
                       host=host(16_000))
    assert (ok.granted, ok.reason) == (2, None)
    low = plan_parallel(4, memory_mb_each=4096, disk_mb_each=16, disk_path="/x", memory_capped=True,
                        host=host(10_000))  # 10 GB less 1 GB reserve: two at 4 GB
    assert low.granted == 2 and "4 sandboxes requested, 2 fit (memory bound)" in low.reason
    by_limit = plan_parallel(4, memory_mb_each=1024, disk_mb_each=16, disk_path="/x", memory_capped=True,
                             host=host(64_000, limit_mb=3_072))  # the harness's own cgroup limit counts
    assert by_limit.granted == 2
    by_disk = plan_parallel(8, memory_mb_each=64, disk_mb_each=512, disk_path="/x", memory_capped=False,
                            host=host(64_000, disk_mb=2_600))
    assert by_disk.granted == 3 and "disk bound" in by_disk.reason and "not enforced" in by_disk.reason
    auto = plan_parallel(None, memory_mb_each=2048, disk_mb_each=1, disk_path="/x", memory_capped=True,
                         host=host(9_216))
    assert (auto.granted, auto.reason) == (4, None)
    with pytest.raises(SandboxFitError, match="not even one"):
        plan_parallel(1, memory_mb_each=4096, disk_mb_each=16, disk_path="/x", memory_capped=True, host=host(4_000))
    assert low.facts()["host"]["memory_available_mb"] == 10_000


needs_cgroups = pytest.mark.skipif(not cgroup_support().enforced,
                                   reason=f"no cgroups can be made here: {cgroup_support().missing}")


@needs_cgroups
def test_a_sandbox_cgroup_caps_joins_and_goes_away():
    cg = SandboxCgroup.create(memory_mb=64, pids_max=20, split={"srv": None, "cmd": 8})
    try:
        assert set(cg.groups) == set(cgroup_support().enforced) - {"tcp"} and cg.missing == {}
        paths = {g.path for g in cg.groups.values()}
        if "memory" in cg.groups:
            g = cg.groups["memory"]
            limit = (g.path / ("memory.limit_in_bytes" if g.version == 1 else "memory.max")).read_text()
            assert int(limit) == 64 * 2**20
        if "pids" in cg.groups:
            assert (cg.groups["pids"].path / "pids.max").read_text().strip() == "20"
            assert Path(cg.move_file("cmd")).parent.joinpath("pids.max").read_text().strip() == "8"
        with pytest.raises(ValueError):
            cg.join_files()  # a split group is joined through a sub-group
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=cg.preexec("srv"))
        deadline = time.monotonic() + 5
        while child.pid not in cg.procs() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in cg.procs()
        assert cg in SandboxCgroup.live()
    finally:
        cg.close()
    assert child.wait(timeout=5) == -9  # what was left in it was killed
    assert all(not p.exists() for p in paths) and cg not in SandboxCgroup.live()


def test_a_run_that_cannot_fit_stops_with_a_configuration_error(tmp_path):
    from memrl_envs.bigcodebench import BigCodeBenchEnv
    from memrl_envs.bigcodebench.settings import BigCodeBenchSettings
    from memrl_envs.lifelong_os import LifelongOsEnv
    from memrl_envs.lifelong_os.settings import LifelongOsSettings

    huge = 10**8  # MB: no machine has that
    with pytest.raises(ConfigError, match="not even one of the BigCodeBench sandboxes fits"):
        BigCodeBenchEnv(BigCodeBenchSettings(
            data_path=str(Path(__file__).resolve().parents[2] / "fixtures" / "bigcodebench" / "tiny.jsonl"), part="all",
            cache_dir=str(tmp_path), sandbox_memory_mb=huge), agent="canonical")
    env = LifelongOsEnv(LifelongOsSettings.model_construct(data_path="unused.json", rootfs_dir=str(tmp_path),
                                                           memory_mb=huge),
                        agent="gold")
    with pytest.raises(ConfigError, match="not even one of the Lifelong-OS episode sandboxes fits"):
        env.sandbox_facts()


def test_missing_caps_are_named_in_the_facts(tmp_path):
    from memrl_envs.bigcodebench.executor import Executor

    facts = Executor(cache_dir=tmp_path, sandbox_memory_mb=None, disk_mb=None, max_parallel=1).facts()
    assert facts["missing"]["memory"] == "disabled by the configuration"
    assert "host folder" in facts["missing"]["disk"]
    assert facts["parallel"]["memory_capped"] is False  # the fit used an estimate, and says so


def fake_cgroup2(tmp_path, monkeypatch, *, busy: bool = False) -> Path:
    """A cgroup v2 tree in a plain folder: `cgroup.subtree_control` takes "+ctrl" as the kernel
    does (or refuses it, EBUSY, as a group that holds processes does); other files are written."""
    from memrl_envs.sandbox import cgroups

    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroups, "_mounts", lambda: [cgroups._Mount(root, 2, frozenset({"memory", "pids"}), "/")])
    monkeypatch.setattr(cgroups, "_own_groups", lambda: {"": "/"})
    real_write = cgroups._write

    def write(path: Path, value: str) -> None:
        if path.name == "cgroup.subtree_control":
            if busy:
                raise OSError(16, "Device or resource busy")
            old = path.read_text().split() if path.exists() else []
            path.write_text(" ".join(dict.fromkeys(old + [value.lstrip("+")])))
        else:
            real_write(path, value)

    monkeypatch.setattr(cgroups, "_write", write)
    return root


def test_cgroup_v2_groups_are_made_with_their_caps_and_split(tmp_path, monkeypatch):
    from memrl_envs.sandbox import cgroups

    root = fake_cgroup2(tmp_path, monkeypatch)
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 0)
    cg = SandboxCgroup.create(memory_mb=128, pids_max=40, split={"srv": None, "cmd": 8}, prefix="memrl-os-")
    assert cg.missing == {} and {g.version for g in cg.groups.values()} == {2}
    group = cg.groups["memory"].path
    assert group.parent == root and group.name.startswith("memrl-os-") and cg.groups["pids"].path == group
    assert (root / "cgroup.subtree_control").read_text().split() == ["memory", "pids"]
    assert (group / "memory.max").read_text() == str(128 * 2**20) and (group / "pids.max").read_text() == "40"
    assert (group / "cgroup.subtree_control").read_text().split() == ["memory", "pids"]  # handed to srv/cmd
    assert (group / "cmd" / "pids.max").read_text() == "8"
    assert cg.join_files("srv") == [str(group / "srv" / "cgroup.procs")]  # v2: one file for both caps
    assert cg.move_file("cmd") == str(group / "cmd" / "cgroup.procs")
    assert cg.moves_need_host_namespace  # v2 moves stay under the namespace's root
    cg.groups.clear()  # plain folders: nothing for close() to kill


def test_cgroup_v2_that_cannot_hand_controllers_down_is_reported_missing(tmp_path, monkeypatch):
    from memrl_envs.sandbox import cgroups

    fake_cgroup2(tmp_path, monkeypatch, busy=True)
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 0)
    cg = SandboxCgroup.create(memory_mb=128, pids_max=40)
    assert cg.groups == {}
    assert set(cg.missing) == {"memory", "pids"} and "cannot hand" in cg.missing["memory"]


def test_the_host_file_table_bounds_the_sandboxes_at_once():
    """Each sandbox can hold its process cap x RLIMIT_NOFILE open files; together they must fit
    half the host's free file table (before: 20,000 x 256 per sandbox, twice fs.file-max)."""
    table = (1_000_000, 100_000)  # file-max, open now: 450,000 may be the sandboxes'
    each = 256 * 1024
    plan = plan_parallel(4, memory_mb_each=64, disk_mb_each=1, disk_path="/x", memory_capped=True,
                         host=host(64_000), files_each=each, table=table)
    assert plan.granted == 1 and "file table bound" in plan.reason and "262,144 open files each" in plan.reason
    assert plan.facts()["files_each"] == each and plan.facts()["files_budget"] == 450_000
    with pytest.raises(SandboxFitError, match="open files each"):
        plan_parallel(1, memory_mb_each=64, disk_mb_each=1, disk_path="/x", memory_capped=True,
                      host=host(64_000), files_each=each, table=(300_000, 0))
    free = plan_parallel(4, memory_mb_each=64, disk_mb_each=1, disk_path="/x", memory_capped=True,
                         host=host(64_000), files_each=each, table=(2_466_116, 400))
    assert free.granted == 4 and free.reason is None


def test_a_sandboxed_process_cannot_open_more_files_than_its_limit(tmp_path):
    """Judged from the host: the program opens files until refused; the host's count of open
    file handles, sampled while it runs, never rises by more than the limit allows."""
    from memrl_envs.sandbox import Limits, bwrap_available, run_isolated

    why = bwrap_available()
    if why is not None:
        pytest.skip(f"no sandbox here: {why}")
    code = ("import os, time\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n"
            "except OSError as exc:\n    print(len(fds), exc.errno)\ntime.sleep(1.0)\n")
    peak, stop = [0], [False]

    def sample():
        while not stop[0]:
            peak[0] = max(peak[0], int(Path("/proc/sys/fs/file-nr").read_text().split()[0]))
            time.sleep(0.02)

    import threading

    before = int(Path("/proc/sys/fs/file-nr").read_text().split()[0])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out = run_isolated([sys.executable, "-c", code], workdir=tmp_path, limits=Limits(wall_s=30, nofile=256))
    finally:
        stop[0] = True
        sampler.join()
    opened, errno = out.stdout.split()
    assert int(errno) == 24 and 200 <= int(opened) < 256  # EMFILE at the limit (less stdio and the like)
    assert peak[0] - before < 256 + 200  # the host's table: the limit plus the sandbox's own plumbing


def test_tcp_buffers_count_as_memory_and_the_hosts_tcp_pool_bounds_the_sandboxes():
    """cgroup v1 caps a sandbox's TCP buffers beside its memory cap: the fit adds them to its
    memory, and the sandboxes' caps together must fit half of the host's TCP memory below its
    pressure threshold (net.ipv4.tcp_mem)."""
    pages = 2**20 // 4096
    plan = plan_parallel(8, memory_mb_each=512, disk_mb_each=1, disk_path="/x", memory_capped=True,
                         host=host(64_000), tcp_mb_each=16, tcp=(100 * pages + 4 * pages, 4 * pages))
    assert plan.granted == 3 and "TCP memory bound" in plan.reason and "+ 16 MB of TCP buffers" in plan.reason
    assert (plan.facts()["tcp_mb_each"], plan.facts()["tcp_budget_mb"]) == (16, 50)
    by_memory = plan_parallel(8, memory_mb_each=1008, disk_mb_each=1, disk_path="/x", memory_capped=True,
                              host=host(5_120), tcp_mb_each=16, tcp=(10_000 * pages, 0))
    assert by_memory.granted == 4 and "memory bound" in by_memory.reason  # 4,096 MB / (1,008 + 16)
    unbounded = plan_parallel(8, memory_mb_each=512, disk_mb_each=1, disk_path="/x", memory_capped=True,
                              host=host(64_000), tcp=(100 * pages, 99 * pages))
    assert unbounded.granted == 8  # no cap of its own (cgroup v2: in the memory cap)


@needs_cgroups
def test_a_sandbox_cgroup_caps_its_tcp_buffers():
    cg = SandboxCgroup.create(memory_mb=64, pids_max=20, tcp_mb=8)
    try:
        memory = cg.groups.get("memory")
        if memory is None:
            pytest.skip("no memory cgroup here")
        if memory.version == 1:
            assert int((memory.path / "memory.kmem.tcp.limit_in_bytes").read_text()) == 8 * 2**20
        assert "tcp" in cg.facts() and cg.missing == {}
        assert "tcp" in cgroup_support().enforced
    finally:
        cg.close()


def test_on_cgroup_v2_tcp_buffers_are_in_the_memory_cap(tmp_path, monkeypatch):
    from memrl_envs.sandbox import cgroups

    fake_cgroup2(tmp_path, monkeypatch)
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 0)
    cg = SandboxCgroup.create(memory_mb=128, pids_max=40, tcp_mb=8)
    assert cg.facts()["tcp"] == "cgroup v2: charged to the memory cap" and cg.missing == {}
    cg.groups.clear()
