"""Throughput of the real stack: one ALFWorld epoch over N games against a fake model server
with a fixed latency per call, at several concurrency levels.

    python scripts/bench_throughput.py                       # 32 games, 0.5 s/call, c = 1 8 32
    python scripts/bench_throughput.py --games 16 --levels 8 32 --max-steps 10

For each level c the epoch runs in a fresh process (`llm.max_concurrency=c`, one batch of N
episodes, `runner.batch_size=N`, so c episodes are in flight) through litellm, the LLM client
and the runner, exactly as `python -m memrl.run` wires them (memory=none unless --memory;
response cache off). The server (memrl.testing.fault_server, its own process) answers every
call after `--latency` seconds with a plausible ALFWorld action.

Printed per level: wall time of the epoch, model calls/s, and
    efficiency = ideal / actual,   ideal = (sum of injected latencies) / c
plus where the client's time went: TextWorld resets and steps (time inside the TextWorld
lock, and waiting for it) and the process's CPU time. The 1-minute load average is printed
with each level: other work on the machine shows up as lost efficiency.

Start-up costs paid once per process (litellm's import and first call, TextWorld's first
game) are paid before the clock starts. ALFWorld's game translation cache
(memrl_envs.alfworld.speedups) is filled while the games are listed, as in any run after the
first on a machine; --cold empties it before the timed epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "alfworld"


# ---------------------------------------------------------------------------- child side
class LockProbe:
    """Time spent holding and waiting for the TextWorld lock, and in resets / steps."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = self.wait = self.reset = self.step = self.gc = 0.0
        self.resets = self.steps = self.gcs = 0
        self._gc_start = 0.0

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc += time.perf_counter() - self._gc_start
            self.gcs += 1

    def install(self) -> None:
        import gc

        from memrl_envs.alfworld import game

        gc.callbacks.append(self._on_gc)

        original_call = game._textworld_call
        probe = self

        @contextmanager
        def timed_call() -> Iterator[None]:
            t0 = time.perf_counter()
            with original_call():
                t1 = time.perf_counter()
                try:
                    yield
                finally:
                    t2 = time.perf_counter()
                    with probe.lock:
                        probe.wait += t1 - t0
                        probe.held += t2 - t1

        game._textworld_call = timed_call
        reset, step = game.AlfworldGame.reset, game.AlfworldGame.step

        def timed_reset(self_: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return reset(self_)
            finally:
                with probe.lock:
                    probe.reset += time.perf_counter() - t0
                    probe.resets += 1

        def timed_step(self_: Any, command: str) -> Any:
            t0 = time.perf_counter()
            try:
                return step(self_, command)
            finally:
                with probe.lock:
                    probe.step += time.perf_counter() - t0
                    probe.steps += 1

        game.AlfworldGame.reset = timed_reset
        game.AlfworldGame.step = timed_step


def run_child(args: argparse.Namespace) -> int:
    """One epoch at one concurrency level; prints one JSON line."""
    from hydra import compose, initialize_config_dir

    from memrl.build import build
    from memrl.config import validate
    from memrl.faults import FaultTally
    from memrl.run import freeze_startup_heap
    from memrl.rundir import RunDir
    from memrl.runner import Runner
    from memrl_envs.alfworld import speedups

    overrides = [
        "env=alfworld", f"env.split={args.split}", f"env.max_tasks={args.games}",
        f"env.max_steps={args.max_steps}", f"memory={args.memory}", "embedder=hashing",
        "llm=openai_compatible", "llm.model=openai/bench", f"llm.api_base={args.api_base}",
        "llm.api_key_env=BENCH_API_KEY", f"llm.max_concurrency={args.concurrency}",
        "llm.cache=false", "llm.timeout=120", "runner.epochs=1",
        f"runner.batch_size={args.games}", "runner.progress=false", "runner.metrics_every_epoch=false",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    v = validate(cfg)
    run_dir = Path(args.run_dir)
    objs = build(v, run_dir)
    assert objs.llm is not None
    tally = FaultTally.attach(objs.llm)
    tasks = objs.env.tasks()  # lists the games (fills the game caches on a first run)
    if len(tasks) < args.games:
        raise SystemExit(f"only {len(tasks)} games in {args.split}; asked for {args.games}")
    # Once-per-process start-up costs (seconds), not throughput: litellm's import and first
    # call, TextWorld's first game (its grammar and templates are parsed once per process).
    from memrl_envs.alfworld.game import AlfworldGame

    with AlfworldGame(str(tasks[0].payload["game_file"]), max_env_steps=1) as game:
        game.reset()
    objs.llm.episode("warm-up", 0).complete("Say OK.", purpose="warm-up", max_tokens=4)
    _http(args.api_base.rsplit("/v1", 1)[0] + "/reset", b"{}")  # count the epoch only
    if args.cold:
        shutil.rmtree(Path(os.environ["MEMRL_CACHE_DIR"]) / speedups.SAS_DIR_NAME, ignore_errors=True)
        cache = speedups.sas_cache()
        if cache is not None:
            cache.clear_memory()
    freeze_startup_heap()  # as memrl.run does before the runner starts
    probe = LockProbe()
    probe.install()
    runner = Runner(run_dir, env=objs.env, memory=objs.memory, llm=objs.llm, settings=v.runner,
                    seed=v.seed, embed_intents=objs.embedder.embed)
    cpu0, t0 = time.process_time(), time.perf_counter()
    runner.run(tasks)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    objs.env.close()
    objs.memory.close()
    records = [json.loads(line) for line in RunDir(run_dir).episodes.read_text().splitlines()]
    sas = speedups.sas_cache()
    print(json.dumps({
        "wall_s": wall, "cpu_s": cpu, "episodes": len(records),
        "errored": sum(1 for r in records if r["errors"]), "wins": sum(r["success"] for r in records),
        "llm": objs.llm.totals(), "faults": tally.counts(),
        "textworld": {"reset_s": probe.reset, "resets": probe.resets, "step_s": probe.step,
                      "steps": probe.steps, "lock_held_s": probe.held, "lock_wait_s": probe.wait,
                      "gc_s": probe.gc, "gc_runs": probe.gcs},
        "sas_cache": {"memory_hits": sas.memory_hits, "disk_hits": sas.disk_hits,
                      "misses": sas.misses} if sas is not None else None,
    }), flush=True)
    return 0


# ---------------------------------------------------------------------------- parent side
def _http(url: str, data: bytes | None = None) -> dict[str, Any]:
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def run_parent(args: argparse.Namespace) -> int:
    if not args.data_root.is_dir():
        print(f"bench_throughput: no ALFWorld data at {args.data_root} (--data-root)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="memrl-bench-"))
    env = dict(os.environ, ALFWORLD_DATA=str(args.data_root), MEMRL_CACHE_DIR=str(work / "cache"),
               BENCH_API_KEY="bench", LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    server = subprocess.Popen([sys.executable, "-m", "memrl.testing.fault_server", "--port", "0",
                               "--latency", str(args.latency)], stdout=subprocess.PIPE, text=True, env=env)
    rows: list[dict[str, Any]] = []
    try:
        line = server.stdout.readline() if server.stdout else ""
        if not line:
            print("bench_throughput: the model server did not start", file=sys.stderr)
            return 1
        api_base = json.loads(line)["api_base"]
        base = api_base.rsplit("/v1", 1)[0]
        print(f"# {args.games} ALFWorld games ({args.split}), max {args.max_steps} steps, "
              f"{args.latency} s per call, memory={args.memory}, "
              f"{'cold' if args.cold else 'warm'} translation cache; {os.cpu_count()} CPUs", flush=True)
        for c in args.levels:
            load_before = os.getloadavg()[0]
            cmd = [sys.executable, __file__, "--child", "--api-base", api_base, "--concurrency", str(c),
                   "--run-dir", str(work / f"c{c}"), "--games", str(args.games), "--split", args.split,
                   "--max-steps", str(args.max_steps), "--memory", args.memory] + (["--cold"] if args.cold else [])
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-4000:], file=sys.stderr)
                return 1
            child = json.loads(out.stdout.strip().splitlines()[-1])
            stats = _http(base + "/stats")
            ideal = stats["latency_total_s"] / c
            row = {"concurrency": c, "load_before": load_before, "load_after": os.getloadavg()[0],
                   "calls": stats["requests"], "ideal_s": ideal, "max_in_flight": stats["max_in_flight"],
                   "efficiency": ideal / child["wall_s"], "calls_per_s": stats["requests"] / child["wall_s"],
                   **child}
            rows.append(row)
            print_row(row, header=len(rows) == 1)
            if args.verbose:
                print("   ", json.dumps({k: child[k] for k in ("llm", "faults", "sas_cache", "textworld")}),
                      flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def print_row(r: dict[str, Any], header: bool) -> None:
    if header:
        print(f"{'conc':>4} {'episodes':>8} {'calls':>6} {'wall_s':>7} {'ideal_s':>7} {'calls/s':>7} "
              f"{'effic.':>6} {'inflight':>8} {'cpu_s':>6} {'reset_s':>7} {'step_s':>6} "
              f"{'tw_held':>7} {'tw_wait':>7} {'load':>9}")
    tw = r["textworld"]
    print(f"{r['concurrency']:>4} {r['episodes']:>8} {r['calls']:>6} {r['wall_s']:>7.2f} {r['ideal_s']:>7.2f} "
          f"{r['calls_per_s']:>7.2f} {r['efficiency']:>6.3f} {r['max_in_flight']:>8} {r['cpu_s']:>6.1f} "
          f"{tw['reset_s']:>7.2f} {tw['step_s']:>6.2f} {tw['lock_held_s']:>7.2f} {tw['lock_wait_s']:>7.2f} "
          f"{r['load_before']:>4.2f}/{r['load_after']:<4.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=32, help="ALFWorld games in the epoch (N)")
    ap.add_argument("--latency", type=float, default=0.5, help="seconds the server takes per call")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32], help="concurrency levels")
    ap.add_argument("--max-steps", type=int, default=30, help="actions per episode (the paper: 30)")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--memory", default="none", help="memory config (none, memrl, rag, ...)")
    ap.add_argument("--data-root", type=Path, default=Path(os.environ.get("ALFWORLD_DATA", DEFAULT_DATA)))
    ap.add_argument("--cold", action="store_true", help="empty the game translation cache first")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--verbose", action="store_true", help="print each level's details")
    # internal: one level in a fresh process
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--api-base", help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.games < 1 or any(c < 1 for c in args.levels) or args.latency < 0:
        ap.error("--games and --levels must be >= 1, --latency >= 0")
    return run_child(args) if args.child else run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
