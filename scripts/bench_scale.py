"""Paper-scale benchmark: what a run costs the harness on disk, in memory and in time, and
what every tool costs to open it, at two sizes so the growth shows.

    python scripts/bench_scale.py                                  # 500 x 3 and 2,000 x 3, 3,072-d
    python scripts/bench_scale.py --sizes 40x2,80x2 --dim 64       # a quick check
    python scripts/bench_scale.py --json results/bench_scale/figures.json

Each size is one real run (`python -m memrl.cli run`, MemRL with the paper's ALFWorld
retrieval settings δ 0.62 / k1 5 / k2 3, batches of `--batch-size`) on the synthetic
ALFWorld-shaped benchmark of scripts/scale_env.py (28% duplicate intents, 30-step failures,
~5.8 KB records) with the scripted model (no model cost: what is left is the harness's own)
and the hashing embedder at `--dim` dimensions (3,072: the paper's text-embedding-3-large).
Then, on the finished run directory, each in its own process:

- reopen: the same `memrl run` command again (a relaunch of a finished run);
- `memrl bank top`, `bank export`, `bank merge` (the run's bank with itself), `memrl status`,
  `memrl metrics`, `memrl report`, `memrl view` (and the page's size).

Per process it measures wall time, CPU time (user + system) and peak RSS (`wait4`), and per
run directory the bytes of every file, per episode. Wall times on a shared machine are
inflated by others' load (the load average is printed); CPU time, bytes and RSS are not.
Finally every figure is extrapolated linearly from the two sizes to `--target` episodes
(35,530: the paper's ALFWorld run, 3,553 games x 10 epochs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from memrl.core.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
PAPER_EPISODES = 35_530  # ALFWorld: 3,553 training games x 10 epochs

ENV_YAML = """_target_: scale_env.ScaleEnv
name: scale
retrieval:
  delta: 0.62
  k1: 5
  k2: 3
n_tasks: 500
max_tasks: null
task_ids: null
max_steps: 30
"""
LLM_YAML = """name: scripted
backend: scripted
model: scripted-scale
script: scale_env:reply
max_concurrency: 8
max_retries: 0
cache: false
budget_usd: null
budget_tokens: null
cache_path: null
"""


def write_configs(where: Path) -> Path:
    (where / "env").mkdir(parents=True, exist_ok=True)
    (where / "llm").mkdir(parents=True, exist_ok=True)
    (where / "env" / "scale.yaml").write_text(ENV_YAML)
    (where / "llm" / "scripted.yaml").write_text(LLM_YAML)
    return where


def environ(cache: Path) -> dict[str, str]:
    path = os.pathsep.join([str(SCRIPTS), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "MEMRL_CACHE_DIR": str(cache),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "OPENBLAS_NUM_THREADS": "1"}


def measured(cmd: Sequence[str], *, env: dict[str, str], cwd: Path, what: str) -> dict[str, Any]:
    """Run `cmd` to its end: wall s, CPU s (user + system), peak RSS MB (this process alone)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{what}: exit {proc.returncode}\n{out.decode(errors='replace')[-4000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def disk(run: Path) -> dict[str, int]:
    """Bytes per file of the run directory, the bank's files grouped as bank/<name> (Chroma's
    index folder as bank/<index>/<file>)."""
    out: dict[str, int] = {}
    for p in sorted(run.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(run).parts
        if rel[0] == "bank" and len(rel) > 2:  # bank/<uuid>/data_level0.bin -> bank/<index>/data_level0.bin
            name = f"bank/<index>/{rel[-1]}"
        elif rel[0] in ("plots", ".hydra"):
            name = rel[0] + "/"
        else:
            name = "/".join(rel)
        out[name] = out.get(name, 0) + p.stat().st_size
    return out


def run_args(n_tasks: int, epochs: int, a: argparse.Namespace, configs: Path, run: Path) -> list[str]:
    return ["env=scale", f"env.n_tasks={n_tasks}", "memory=memrl", "embedder=hashing",
            f"embedder.dim={a.dim}", "llm=scripted", f"runner.epochs={epochs}",
            f"runner.batch_size={a.batch_size}", f"runner.schedule={a.schedule}",
            f"runner.max_in_flight={a.batch_size}", "runner.progress=false", "seed=0",
            f"hydra.searchpath=[file://{configs}]", f"hydra.run.dir={run}"]


def bench_size(n_tasks: int, epochs: int, a: argparse.Namespace, work: Path, configs: Path) -> dict[str, Any]:
    env = environ(work / "cache")
    run = work / f"run_{n_tasks}x{epochs}"
    shutil.rmtree(run, ignore_errors=True)
    py = [sys.executable, "-m", "memrl.cli"]
    args = run_args(n_tasks, epochs, a, configs, run)
    load_before = os.getloadavg()
    print(f"[{n_tasks}x{epochs}] run ...", file=sys.stderr, flush=True)
    train = measured([*py, "run", *args], env=env, cwd=work, what="run")
    episodes = sum(1 for line in RunDir(run).episodes.open() if line.strip())
    files = disk(run)
    total = sum(files.values())
    records = files.get(RunDir.EPISODES, 0)
    res: dict[str, Any] = {
        "n_tasks": n_tasks, "epochs": epochs, "episodes": episodes, "run": train,
        "harness_ms_per_episode": {"cpu": round(1000 * train["cpu_s"] / episodes, 2),
                                   "wall": round(1000 * train["wall_s"] / episodes, 2)},
        "disk_bytes": files, "disk_total": total,
        "disk_per_episode": {k: round(v / episodes, 1) for k, v in files.items()},
        "record_bytes_per_episode": round(records / episodes, 1),
        "beyond_record_per_episode": round((total - records) / episodes, 1),
    }
    print(f"[{n_tasks}x{epochs}] {episodes} episodes, {train}, {res['beyond_record_per_episode']:.0f} B/episode "
          "beyond the record; reopen ...", file=sys.stderr, flush=True)
    res["reopen"] = measured([*py, "run", *args], env=env, cwd=work, what="reopen")
    tools: dict[str, Any] = {}
    out = work / f"out_{n_tasks}x{epochs}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    commands = {
        "bank top": ["bank", "top", str(run), "-n", "10"],
        "bank export": ["bank", "export", str(run), str(out / "bank.jsonl")],
        "bank merge": ["bank", "merge", str(run), str(run), str(out / "merged"), "--labels", "a,b"],
        "status": ["status", str(run)],
        "metrics": ["metrics", str(run)],
        "report": ["report", str(run), "--out", str(out / "report")],
        "view": ["view", str(run), "--out", str(out / "view.html")],
    }
    for name, cmd in commands.items():
        print(f"[{n_tasks}x{epochs}] {name} ...", file=sys.stderr, flush=True)
        tools[name] = measured([*py, *cmd], env=env, cwd=work, what=name)
    tools["bank export"]["out_bytes"] = (out / "bank.jsonl").stat().st_size
    tools["view"]["out_bytes"] = sum(p.stat().st_size for p in out.iterdir()
                                     if p.is_file() and p.name.startswith("view"))
    side = [p for p in out.iterdir() if p.is_dir() and p.name.startswith("view")]
    tools["view"]["page_bytes"] = (out / "view.html").stat().st_size
    tools["view"]["side_bytes"] = sum(f.stat().st_size for d in side for f in d.rglob("*") if f.is_file())
    res["tools"] = tools
    res["load"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)
    return res


def extrapolate(small: dict[str, Any], large: dict[str, Any], target: int) -> dict[str, Any]:
    """Each figure on the line through the two sizes (in episodes), at `target` episodes."""
    n1, n2 = small["episodes"], large["episodes"]

    def at(v1: float, v2: float) -> float:
        slope = (v2 - v1) / (n2 - n1)
        return round(v1 + slope * (target - n1), 2)

    out: dict[str, Any] = {"episodes": target}
    out["run"] = {k: at(small["run"][k], large["run"][k]) for k in ("wall_s", "cpu_s", "peak_rss_mb")}
    out["harness_ms_per_episode_marginal"] = {
        "cpu": round(1000 * (large["run"]["cpu_s"] - small["run"]["cpu_s"]) / (n2 - n1), 2),
        "wall": round(1000 * (large["run"]["wall_s"] - small["run"]["wall_s"]) / (n2 - n1), 2)}
    out["disk_total_bytes"] = at(small["disk_total"], large["disk_total"])
    rec = (small["record_bytes_per_episode"] * n1, large["record_bytes_per_episode"] * n2)
    out["beyond_record_bytes"] = at(small["disk_total"] - rec[0], large["disk_total"] - rec[1])
    out["beyond_record_per_episode"] = round(out["beyond_record_bytes"] / target, 1)
    out["reopen"] = {k: at(small["reopen"][k], large["reopen"][k]) for k in ("wall_s", "cpu_s", "peak_rss_mb")}
    out["tools"] = {}
    for name in large["tools"]:
        s, g = small["tools"][name], large["tools"][name]
        out["tools"][name] = {k: at(s[k], g[k]) for k in g if isinstance(g[k], (int, float)) and k in s}
    return out


def table(results: list[dict[str, Any]], extra: dict[str, Any] | None) -> str:
    cols = [f"{r['n_tasks']}x{r['epochs']} ({r['episodes']} ep)" for r in results]
    if extra:
        cols.append(f"-> {extra['episodes']} ep")
    rows: list[tuple[str, list[str]]] = []

    def fig(name: str, values: list[str]) -> None:
        rows.append((name, values))

    def t(d: dict[str, Any]) -> str:
        return f"{d['wall_s']:.1f}s / {d['cpu_s']:.1f}s / {d['peak_rss_mb']:.0f}MB"

    fig("run: wall / CPU / peak RSS", [t(r["run"]) for r in results] + ([t(extra["run"])] if extra else []))
    fig("harness ms/episode (CPU, wall)",
        [f"{r['harness_ms_per_episode']['cpu']:.1f}, {r['harness_ms_per_episode']['wall']:.1f}" for r in results]
        + ([f"marginal {extra['harness_ms_per_episode_marginal']['cpu']:.1f}, "
            f"{extra['harness_ms_per_episode_marginal']['wall']:.1f}"] if extra else []))
    fig("disk total (MB)", [f"{r['disk_total'] / 1e6:.1f}" for r in results]
        + ([f"{extra['disk_total_bytes'] / 1e6:.1f}"] if extra else []))
    fig("record B/episode", [f"{r['record_bytes_per_episode']:.0f}" for r in results] + ([""] if extra else []))
    fig("beyond the record B/episode", [f"{r['beyond_record_per_episode']:.0f}" for r in results]
        + ([f"{extra['beyond_record_per_episode']:.0f}"] if extra else []))
    names = sorted({k for r in results for k in r["disk_per_episode"]},
                   key=lambda k: -results[-1]["disk_per_episode"].get(k, 0))
    for k in names:
        fig(f"  {k} B/episode", [f"{r['disk_per_episode'].get(k, 0):.0f}" for r in results] + ([""] if extra else []))
    fig("reopen: wall / CPU / peak RSS", [t(r["reopen"]) for r in results] + ([t(extra["reopen"])] if extra else []))
    for name in results[-1]["tools"]:
        fig(f"{name}: wall / CPU / peak RSS", [t(r["tools"][name]) for r in results]
            + ([t(extra["tools"][name])] if extra else []))
    fig("view page (MB) + side files (MB)",
        [f"{r['tools']['view']['page_bytes'] / 1e6:.1f} + {r['tools']['view']['side_bytes'] / 1e6:.1f}"
         for r in results]
        + ([f"{extra['tools']['view']['page_bytes'] / 1e6:.1f} + {extra['tools']['view']['side_bytes'] / 1e6:.1f}"]
           if extra else []))
    fig("load avg before -> after", [f"{r['load'][0]} -> {r['load'][1]}" for r in results] + ([""] if extra else []))
    width = max(len(n) for n, _ in rows)
    cw = [max(len(c), *(len(v[i]) for _, v in rows)) for i, c in enumerate(cols)]
    lines = ["".ljust(width) + "  " + "  ".join(c.rjust(w) for c, w in zip(cols, cw))]
    lines.append("-" * len(lines[0]))
    lines += [n.ljust(width) + "  " + "  ".join(v.rjust(w) for v, w in zip(vals, cw)) for n, vals in rows]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="500x3,2000x3", help="TASKSxEPOCHS, comma-separated (two for the fit)")
    p.add_argument("--dim", type=int, default=3072, help="embedding dimension (hashing embedder)")
    p.add_argument("--batch-size", type=int, default=32, help="runner.batch_size (async: max_in_flight)")
    p.add_argument("--schedule", choices=["batch", "async"], default="batch")
    p.add_argument("--target", type=int, default=PAPER_EPISODES, help="episodes to extrapolate to")
    p.add_argument("--work-dir", type=Path, default=None, help="where runs are made (a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    p.add_argument("--json", type=Path, default=None, help="also write every figure here")
    a = p.parse_args(argv)
    try:
        a.sizes = [tuple(int(x) for x in s.lower().split("x")) for s in a.sizes.split(",") if s.strip()]
        if any(len(s) != 2 or min(s) < 1 for s in a.sizes):
            raise ValueError
    except ValueError:
        p.error(f"--sizes: TASKSxEPOCHS, comma-separated (got {a.sizes!r})")
    return a


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except OSError:
        return "?"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    a = parse_args(argv)
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    configs = write_configs(work / "configs")
    results = []
    try:
        for n_tasks, epochs in a.sizes:
            results.append(bench_size(n_tasks, epochs, a, work, configs))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    extra = extrapolate(results[0], results[-1], a.target) if len(results) >= 2 else None
    print(f"scale bench: synthetic ALFWorld-shaped env, scripted model, hashing embedder {a.dim}-d, "
          f"MemRL, schedule {a.schedule}, batch {a.batch_size}; commit {git_commit()}; {os.cpu_count()} CPUs")
    print(table(results, extra))
    out = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
           "commit": git_commit(), "cpus": os.cpu_count(), "results": results, "extrapolated": extra}
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
