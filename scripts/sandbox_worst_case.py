#!/usr/bin/env python
"""The worst cases of the sandbox issue, at the caps a run uses, measured from the host.

Runs, each in its own sandbox and sampling the host every 20 ms (its available memory, the
free space of the disk under the sandboxes' folders, and the sandbox's cgroup):
  * bcb-memory: a BigCodeBench solution that forks 6 processes, each allocating 1.5 GB (each
    under the 4 GB address-space limit; 9 GB together), through the env's episode path;
  * bcb-disk: a solution that writes 12 GB into its work folder (files of 256 MB, each under
    the per-file limit);
  * os-memory / os-disk: the same through a Lifelong-OS episode (perl, dd).
Prints, per case, the sandbox's cgroup peak, the host's largest drop of available memory and
of free disk, and what the sandbox reported; `--json OUT` writes them. Needs root (cgroups,
the OS overlay) and bubblewrap; the OS cases need the root file system (`make rootfs`).

    python scripts/sandbox_worst_case.py [--cases bcb-memory bcb-disk os-memory os-disk] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "fixtures" / "bigcodebench" / "tiny.jsonl"

BCB_MEMORY = """
import os, time
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(1536 * 2**20)  # written: really resident
        time.sleep(8)
        os._exit(0)
    children.append(pid)
codes = [os.waitpid(pid, 0)[1] for pid in children]
raise RuntimeError('memory: %d of 6 children held 1.5 GB to the end' % sum(c == 0 for c in codes))
def task_func(a, b):
    return a + b
"""
BCB_DISK = """
written, n = 0, 0
try:
    while written < 12 * 1024:  # files of 256 MB (each under the per-file limit)
        with open('fill%d' % n, 'wb') as fh:
            for _ in range(256):
                fh.write(b'x' * 2**20)
                written += 1
        n += 1
except OSError as exc:
    raise RuntimeError('disk: %d MB, then errno %d' % (written, exc.errno))
raise RuntimeError('disk: wrote %d MB' % written)
def task_func(a, b):
    return a + b
"""
OS_MEMORY = ("for i in 1 2 3 4 5 6; do perl -e '$x = \"x\" x (1536*1024*1024); sleep 8; print \"held\\n\"' & done; "
             "wait; echo done")
OS_DISK = ("for i in $(seq 48); do dd if=/dev/zero of=/root/fill$i bs=1M count=256 2>/dev/null || break; done; "
           "echo \"stopped at file $i\"; df -m / | tail -1")


def _mem_available_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


class Sampler(threading.Thread):
    def __init__(self, disk_path: str) -> None:
        super().__init__(daemon=True)
        from memrl_envs.sandbox import SandboxCgroup

        self.live = SandboxCgroup.live
        self.disk_path = disk_path
        self.mem0, self.disk0 = _mem_available_mb(), shutil.disk_usage(disk_path).free // 2**20
        self.mem_min, self.disk_min, self.cg_peak = self.mem0, self.disk0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.mem_min = min(self.mem_min, _mem_available_mb())
            self.disk_min = min(self.disk_min, shutil.disk_usage(self.disk_path).free // 2**20)
            self.cg_peak = max(self.cg_peak, sum(cg.memory_bytes() or 0 for cg in self.live()))
            self.stop.wait(0.02)

    def facts(self) -> dict:
        return {"cgroup_peak_mb": self.cg_peak // 2**20, "host_memory_drop_mb": self.mem0 - self.mem_min,
                "host_disk_drop_mb": self.disk0 - self.disk_min}


def bcb_case(code: str, work: Path) -> tuple[dict, str]:
    from memrl.llm.client import LLMClient
    from memrl.llm.scripted import ScriptedBackend
    from memrl_envs.bigcodebench import BigCodeBenchEnv
    from memrl_envs.bigcodebench.executor import Executor

    executor = Executor(time_limit_s=30, max_parallel=1, work_root=work, cache_dir=work / "cache")
    env = BigCodeBenchEnv(data_path=TINY, part="all", task_ids=["Tiny/1"], cache_dir=work / "cache", executor=executor)
    llm = LLMClient(ScriptedBackend(lambda request: "```python\n" + code + "\n```"), cache=None,
                    max_concurrency=1, max_retries=0, backoff_base=0.0, backoff_max=0.0, adaptive=False,
                    rpm=None, tpm=None, defaults={"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024},
                    ).episode("worst-case", seed=0)
    result = env.solve(env.tasks()[0], [], llm, seed=0)
    caps = executor.facts()["enforced"]
    return caps, f"{result.info['outcome']}: {result.info['reason'][:200]}"


def os_case(command: str, work: Path) -> tuple[dict, str]:
    from memrl_envs.lifelong_os import LifelongOsEnv
    from memrl_envs.lifelong_os.episode import Action, OsTask
    from memrl_envs.lifelong_os.prompts import FINISH

    class One:
        def next_action(self, task, history):
            return (Action("bash", command), command) if not history else (Action(FINISH), FINISH)

    env = LifelongOsEnv(data_path="unused.json", agent="gold", scratch_dir=str(work), command_timeout_s=60)
    caps = env.sandbox_facts()["enforced"]
    task = OsTask(key="worst", instruction="hostile", init_script="", eval_script="true", gold_script="true")
    result = env.run_episode(task, One())
    said = result.transcript[0].observation if result.transcript else "; ".join(result.errors)
    return caps, said.replace("\n", " | ")[-300:]


CASES = {"bcb-memory": (bcb_case, BCB_MEMORY), "bcb-disk": (bcb_case, BCB_DISK),
         "os-memory": (os_case, OS_MEMORY), "os-disk": (os_case, OS_DISK)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    out = {}
    for name in args.cases:
        run, payload = CASES[name]
        work = Path(tempfile.mkdtemp(prefix="memrl-worst-"))
        try:
            sampler = Sampler(str(work))
            sampler.start()
            start = time.monotonic()
            caps, said = run(payload, work)
            sampler.stop.set()
            sampler.join()
            out[name] = {**sampler.facts(), "seconds": round(time.monotonic() - start, 1),
                         "caps": caps, "sandbox_said": said}
        finally:
            shutil.rmtree(work, ignore_errors=True)
        r = out[name]
        print(f"{name:11s} cgroup peak {r['cgroup_peak_mb']:5d} MB | "
              f"host memory drop {r['host_memory_drop_mb']:5d} MB | "
              f"host disk drop {r['host_disk_drop_mb']:5d} MB | {r['seconds']:5.1f} s | {r['sandbox_said'][:120]}")
        print(f"{'':11s} caps: {'; '.join(f'{k} {v}' for k, v in r['caps'].items())}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
