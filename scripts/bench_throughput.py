"""Throughput of the real stack under stragglers: ALFWorld epochs over N games against a
fake model server, batch vs async scheduling side by side at several concurrency levels
(`--epochs`: several epochs over the same games).

    python scripts/bench_throughput.py                          # 200 games, c = 8 32 64
    python scripts/bench_throughput.py --games 64 --levels 8 32 --rate 30
    python scripts/bench_throughput.py --lengths fixed          # every episode runs max steps
    python scripts/bench_throughput.py --games 128 --epochs 4 --levels 32   # epochs overlap (async)

Episode lengths (`--lengths`):
- `expert` (default): the server (memrl.testing.fault_server, expert reply mode) answers with
  the next action of ALFWorld's handcoded expert for the game in the prompt, so an episode
  ends when the expert's did (the expert fails some games: those run to the step limit); a
  share of the games (`--expert-share`, default 1, chosen by
  a hash of the game id) follows the expert, the rest get a fixed tour of the room and run to
  `--max-steps`, as a weak agent's do. The expert's trajectories are recorded once per split
  and step limit (`agent=expert memory=none`) and cached under $MEMRL_CACHE_DIR/bench_throughput/.
- `fixed`: every game gets the tour; every episode runs all `--max-steps` steps.

For each level c and each schedule the epochs run in a fresh process, exactly as
`python -m memrl.cli run` wires it (memory=none unless --memory; response cache off), with
`llm.max_concurrency=c` and either `runner.schedule=batch runner.batch_size=c` (the official
code's batches: all c episodes retrieve at batch start, the next batch starts when the
slowest ends) or `runner.schedule=async runner.max_in_flight=c` (a free pool). Each level
gets its own server whose latency per call is c / `--rate` seconds, so every level asks the
same calls per second of the machine (its CPUs, shared with other work, would otherwise be
what a high level measures).

Printed per level, for both schedules:
    efficiency = ideal / actual,   ideal = (sum of injected latencies) / c
next to the efficiency a zero-overhead scheduler would reach with the same episode lengths
in the same order (`sim`: batches of c; a free pool of c whose next epoch starts in this
one's drain, with the run's end as its only drain), the
episode-length statistics, and the async run's staleness (commits between an episode's
retrieval and its own commit). The 1-minute load average is printed with each level.

Start-up costs paid once per process (litellm's import and first call, TextWorld's first
game) are paid before the clock starts. ALFWorld's game translation cache
(memrl_envs.alfworld.speedups) is filled while the games are listed, as in any run after the
first on a machine; --cold empties it before the timed epoch.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import shutil
import statistics
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
BENCH_CACHE = "bench_throughput"  # under $MEMRL_CACHE_DIR: the recorded expert trajectories


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

    from memrl.config.validate import validate
    from memrl.control.runner import Runner
    from memrl.control.session import freeze_startup_heap
    from memrl.control.wiring import wire
    from memrl.core.rundir import RunDir
    from memrl.llm.faults import FaultTally
    from memrl_envs.alfworld import speedups

    overrides = [
        "env=alfworld", f"env.split={args.split}", f"env.max_tasks={args.games}",
        f"env.max_steps={args.max_steps}", f"memory={args.memory}", "embedder=hashing",
        "llm=openai_compatible", "llm.model=openai/bench", f"llm.api_base={args.api_base}",
        "llm.api_key_env=BENCH_API_KEY", f"llm.max_concurrency={args.concurrency}",
        "llm.cache=false", "llm.timeout=120", f"runner.epochs={args.epochs}", f"runner.schedule={args.schedule}",
        f"runner.batch_size={args.concurrency}", f"runner.max_in_flight={args.concurrency}",
        "runner.progress=false", "runner.metrics_every_epoch=false",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    v = validate(cfg)
    run_dir = Path(args.run_dir)
    objs = wire(v, run_dir)
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
    freeze_startup_heap()  # as memrl.control.session does before the runner starts
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
    steps = {(r["epoch"], r["task_id"]): r["steps"] for r in records}
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
        "lengths": [r["steps"] for r in records],  # in commit order
        # per epoch, the episodes' lengths in task order (the order a scheduler offers them)
        "by_epoch": [[steps[(e, t.task_id)] for t in tasks] for e in range(1, args.epochs + 1)],
        "staleness": [r["staleness"] for r in records],
    }), flush=True)
    return 0


# ---------------------------------------------------------------------------- parent side
def _http(url: str, data: bytes | None = None) -> dict[str, Any]:
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def expert_trajectories(args: argparse.Namespace, env: dict[str, str], work: Path) -> dict[str, Any]:
    """task id -> {start, actions, success} of ALFWorld's handcoded expert on the bench's
    games: recorded once (a real `memrl.control.session agent=expert` epoch), then read from the cache."""
    from memrl.core.cachedir import default_cache_dir

    folder = default_cache_dir() / BENCH_CACHE
    where = folder / f"expert_{args.split}_{args.max_steps}_{args.games}.json"
    # a recording of at least these games serves (the server answers only the games it is asked)
    for cached in sorted(folder.glob(f"expert_{args.split}_{args.max_steps}_*.json")):
        if int(cached.stem.rsplit("_", 1)[1]) >= args.games:
            return json.loads(cached.read_text())
    run_dir = work / "expert"
    print(f"# recording the expert's trajectories once ({args.games} games): {where}", flush=True)
    cmd = [sys.executable, "-m", "memrl.cli", "run", "env=alfworld", f"env.split={args.split}",
           f"env.max_tasks={args.games}", f"env.max_steps={args.max_steps}", "agent=expert",
           "memory=none", "embedder=hashing", "runner.epochs=1", "runner.progress=false",
           f"hydra.run.dir={run_dir}"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"bench_throughput: recording the expert failed:\n{out.stderr[-3000:]}")
    from memrl.core.records import iter_jsonl
    from memrl.core.rundir import RunDir

    table = {}
    for r in iter_jsonl(RunDir(run_dir).episodes):
        table[r["task_id"]] = {"start": r["info"]["initial_observation"], "success": r["success"],
                               "actions": [s["action"] for s in r["transcript"]]}
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
    os.replace(tmp, where)
    return table


def follows_expert(task_id: str, share: float) -> bool:
    """Whether this game gets the expert's actions (a fixed hash of its id, not a draw)."""
    h = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return h < share


def simulate(by_epoch: list[list[int]], c: int, schedule: str, overlap: bool = True) -> float:
    """Efficiency of a zero-overhead scheduler for these episode lengths (per epoch, in task
    order), with the runner's rules: `batch`, batches of c per epoch; `async`, a free pool of
    c that offers (epoch, task) in order, lets the next epoch start in this one's drain when
    `overlap` (a task's episode once its previous one has ended) and never a later one."""
    ideal = sum(map(sum, by_epoch)) / c
    if schedule == "batch":
        actual = sum(max(lengths[i:i + c]) for lengths in by_epoch for i in range(0, len(lengths), c))
        return ideal / actual if actual else 1.0
    n, epochs = len(by_epoch[0]), len(by_epoch)
    queue = [(e, i) for e in range(epochs) for i in range(n)]
    ended: dict[tuple[int, int], float] = {}
    left = [n] * epochs  # episodes of each epoch not yet ended
    running: list[tuple[float, int, int]] = []
    now, turn = 0.0, 0

    def may_start(e: int, i: int) -> bool:
        return e == turn or (overlap and e == turn + 1 and (e - 1, i) in ended)

    while queue or running:
        while len(running) < c:
            j = next((k for k, (e, i) in enumerate(queue) if may_start(e, i)), None)
            if j is None:
                break
            e, i = queue.pop(j)
            heapq.heappush(running, (now + by_epoch[e][i], e, i))
        now, e, i = heapq.heappop(running)
        ended[(e, i)] = now
        left[e] -= 1
        while turn < epochs and left[turn] == 0:
            turn += 1
    return ideal / now if now else 1.0


def _stats(values: list[int]) -> dict[str, float]:
    v = sorted(values)
    return {"mean": statistics.fmean(v), "median": statistics.median(v), "min": v[0], "max": v[-1],
            "p90": v[min(len(v) - 1, int(0.9 * len(v)))]}


def start_server(latency: float, env: dict[str, str], expert_file: Path | None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "memrl.testing.fault_server", "--port", "0", "--latency", f"{latency:.6f}"]
    if expert_file is not None:
        cmd += ["--expert", str(expert_file)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    line = server.stdout.readline() if server.stdout else ""
    if not line:
        server.kill()
        raise SystemExit("bench_throughput: the model server did not start")
    return server, json.loads(line)["api_base"]


def run_parent(args: argparse.Namespace) -> int:
    if not args.data_root.is_dir():
        print(f"bench_throughput: no ALFWorld data at {args.data_root} (--data-root)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="memrl-bench-"))
    env = dict(os.environ, ALFWORLD_DATA=str(args.data_root), MEMRL_CACHE_DIR=str(work / "cache"),
               BENCH_API_KEY="bench", LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    rows: list[dict[str, Any]] = []
    try:
        expert_file = None
        followed = 0
        if args.lengths == "expert":
            table = expert_trajectories(args, env, work)
            chosen = {t["start"]: t["actions"] for tid, t in sorted(table.items())
                      if follows_expert(tid, args.expert_share)}
            followed = len(chosen)
            expert_file = work / "expert.json"
            expert_file.write_text(json.dumps(chosen))
            solved = sum(t["success"] for t in table.values())
            print(f"# expert (recorded on {len(table)} games): solves {solved}/{len(table)} "
                  f"within {args.max_steps} steps; "
                  f"{followed} games follow it (--expert-share {args.expert_share}), the rest tour "
                  "the room to the step limit", flush=True)
        print(f"# {args.games} ALFWorld games ({args.split}) x {args.epochs} epoch(s), "
              f"max {args.max_steps} steps, lengths="
              f"{args.lengths}, latency c/{args.rate:g} s per call, memory={args.memory}, "
              f"{'cold' if args.cold else 'warm'} translation cache; {os.cpu_count()} CPUs", flush=True)
        for c in args.levels:
            latency = c / args.rate
            server, api_base = start_server(latency, env, expert_file)
            base = api_base.rsplit("/v1", 1)[0]
            row: dict[str, Any] = {"concurrency": c, "latency_s": latency, "load_before": os.getloadavg()[0]}
            try:
                for schedule in args.schedules:
                    cmd = [sys.executable, __file__, "--child", "--api-base", api_base, "--concurrency", str(c),
                           "--run-dir", str(work / f"c{c}-{schedule}"), "--games", str(args.games),
                           "--split", args.split, "--max-steps", str(args.max_steps), "--memory", args.memory,
                           "--schedule", schedule, "--epochs", str(args.epochs)] + (["--cold"] if args.cold else [])
                    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if out.returncode != 0:
                        print(out.stderr[-4000:], file=sys.stderr)
                        return 1
                    child = json.loads(out.stdout.strip().splitlines()[-1])
                    stats = _http(base + "/stats")
                    ideal = stats["latency_total_s"] / c
                    row[schedule] = {"calls": stats["requests"], "ideal_s": ideal, "wall_s": child["wall_s"],
                                     "efficiency": ideal / child["wall_s"], "max_in_flight": stats["max_in_flight"],
                                     "sim": simulate(child["by_epoch"], c, schedule),
                                     "staleness": _stats(child["staleness"]), "cpu_s": child["cpu_s"],
                                     "errored": child["errored"], "wins": child["wins"]}
                    row["lengths"] = _stats(child["lengths"])
                    if args.verbose:
                        print("   ", schedule, json.dumps({k: child[k] for k in ("llm", "faults", "textworld")}),
                              flush=True)
            finally:
                server.terminate()
                server.wait(timeout=10)
            row["load_after"] = os.getloadavg()[0]
            rows.append(row)
            print_row(row, args.schedules, header=len(rows) == 1)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def print_row(r: dict[str, Any], schedules: list[str], header: bool) -> None:
    if header:
        cols = "".join(f" | {s + ' eff':>9} {'sim':>5} {'wall_s':>7} {'stale mean/p90/max':>18}" for s in schedules)
        print(f"{'conc':>4} {'lat_s':>5} {'len mean/med/min/max':>20}{cols} | {'load':>9}")
    ln = r["lengths"]
    line = f"{r['concurrency']:>4} {r['latency_s']:>5.2f} " \
           f"{ln['mean']:>7.1f}/{ln['median']:>4.0f}/{ln['min']:>3}/{ln['max']:>3}"
    for s in schedules:
        x = r[s]
        st = x["staleness"]
        line += f" | {x['efficiency']:>9.3f} {x['sim']:>5.2f} {x['wall_s']:>7.1f} " \
                f"{st['mean']:>8.1f}/{st['p90']:>4}/{st['max']:>4}"
    print(line + f" | {r['load_before']:>4.2f}/{r['load_after']:<4.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=200, help="ALFWorld games in the epoch (N)")
    ap.add_argument("--epochs", type=int, default=1,
                    help="epochs over the games (async: the next starts in an epoch's drain)")
    ap.add_argument("--rate", type=float, default=40.0,
                    help="model calls per second every level asks for: latency per call = c / rate")
    ap.add_argument("--levels", type=int, nargs="+", default=[8, 32, 64], help="concurrency levels")
    ap.add_argument("--schedules", nargs="+", default=["batch", "async"], choices=["batch", "async"])
    ap.add_argument("--lengths", choices=["expert", "fixed"], default="expert",
                    help="episode lengths: the recorded expert's (mixed with weak tours), or all max steps")
    ap.add_argument("--expert-share", type=float, default=1.0, help="share of games that follow the expert")
    ap.add_argument("--max-steps", type=int, default=30, help="actions per episode (the paper: 30)")
    ap.add_argument("--split", default="valid_train")
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
    ap.add_argument("--schedule", default="batch", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if (args.games < 1 or args.epochs < 1 or any(c < 1 for c in args.levels) or args.rate <= 0
            or not 0 <= args.expert_share <= 1):
        ap.error("--games and --levels must be >= 1, --rate > 0, --expert-share in [0, 1]")
    return run_child(args) if args.child else run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
