"""The tie-rule sensitivity experiment (docs/experiments.md): MemRL against RAG under every tie
rule × memory order × k2, from a history bank, on ALFWorld games nobody tuned for.

    python scripts/tie_rule_sensitivity.py design --survey RUN [--n N] [--out results/tie_rule_sensitivity]
        the games (seeded sample of the eligible ones) and the power analysis, before any run
    python scripts/tie_rule_sensitivity.py run [--work runs/sensitivity] [--jobs 2] [--only COND ...]
        every condition's runs (they resume; the response cache is shared)
    python scripts/tie_rule_sensitivity.py collect [--work runs/sensitivity] [--out results/tie_rule_sensitivity]
        per condition: result.json, run cards, metrics and records (gzip)

`design` copies the survey run's card, metrics and records to `<out>/survey/` and writes
`<out>/design/games.json` and `<out>/design/power.json`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "results" / "tie_rule_sensitivity"
DEFAULT_WORK = ROOT / "runs" / "sensitivity"


def _copy_run(run_dir: Path, dest: Path) -> None:
    from memrl.core.rundir import RunDir

    rd = RunDir(run_dir)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rd.card, dest / rd.card.name)
    shutil.copyfile(rd.metrics, dest / rd.metrics.name)
    with open(rd.episodes, "rb") as src, gzip.GzipFile(dest / "episodes.jsonl.gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)


def design(a: argparse.Namespace) -> int:
    import numpy as np

    from memrl.core.seeding import derive_seed
    from memrl.demo.sensitivity import CONDITIONS, StudentModel, games_from_intents, predict
    from memrl.demo.sensitivity_runs import select_games
    from memrl.llm.embed import MiniLMEmbedder

    from memrl.core.records import iter_jsonl
    from memrl.core.rundir import RunDir

    eligible = []
    for survey in a.survey:
        split = json.loads(RunDir(survey).card.read_text())["config"]["env"]["split"]
        # the demo's games (the first `--exclude-first` of a split, sorted): tuned on, left out
        firsts = sorted(r["task_id"] for r in iter_jsonl(RunDir(survey).episodes))[:a.exclude_first.get(split, 0)]
        eligible += select_games(survey, exclude=firsts)
    rng = np.random.default_rng(derive_seed(0, "sensitivity-games"))
    n = min(a.n, len(eligible))
    pick = sorted(rng.choice(len(eligible), size=n, replace=False).tolist())
    games = [eligible[i] for i in pick]
    sim_games = games_from_intents([g["intent"] for g in games], MiniLMEmbedder().embed,
                                   [f"{g['split']}:{g['task']}" for g in games])
    student = StudentModel()
    preds = []
    t0 = time.monotonic()
    for cond in CONDITIONS:
        for variant in ("paper", "q_init_failed") if cond.k2 == 1 else ("paper",):
            p = predict(sim_games, cond, student, n_sims=a.sims, variant=variant)
            preds.append(p.to_dict())
            print(f"{cond.name:22s} {variant:14s} MemRL {['%.1f' % (x * n) for x in p.sr['memrl']]} "
                  f"RAG {['%.1f' % (x * n) for x in p.sr['rag']]} b {p.b:.1f} c {p.c:.1f} power {p.power:.2f}",
                  flush=True)
    variant_conditions = [c.name for c in CONDITIONS if c.k2 == 1]
    out = a.out / "design"
    out.mkdir(parents=True, exist_ok=True)
    (out / "games.json").write_text(json.dumps({
        "epochs": 3, "eligible": len(eligible), "n": n,
        "rule": "the expert solves in 4..15 steps; the demo's games left out "
                f"({a.exclude_first}); a seeded sample: derive_seed(0, 'sensitivity-games')",
        "variant_conditions": variant_conditions, "games": games}, indent=1) + "\n")
    (out / "power.json").write_text(json.dumps({
        "student": vars(student), "n_sims": a.sims, "alpha": 0.05, "wall_s": round(time.monotonic() - t0, 1),
        "predictions": preds}, indent=1) + "\n")
    for survey in a.survey:
        split = json.loads(RunDir(survey).card.read_text())["config"]["env"]["split"]
        _copy_run(survey, a.out / "survey" / split)
    print(f"{n} of {len(eligible)} eligible games; wrote {out}")
    return 0


def _design(a: argparse.Namespace):
    from memrl.demo.sensitivity_runs import Design

    return Design.read(a.out / "design" / "games.json")


def run(a: argparse.Namespace) -> int:
    from memrl.demo.sensitivity_runs import run_all

    t0 = time.monotonic()
    run_all(_design(a), a.work, jobs=a.jobs, only=a.only)
    print(f"[sensitivity] all runs done in {time.monotonic() - t0:.0f} s")
    return 0


def collect(a: argparse.Namespace) -> int:
    from memrl.demo.sensitivity_runs import collect as collect_all

    summary = collect_all(_design(a), a.work, a.out)
    print(json.dumps(summary, indent=1, default=float))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("design")
    d.add_argument("--survey", type=Path, nargs="+", required=True,
                   help="the expert's runs on whole splits (agent=expert, 50 steps)")
    d.add_argument("--exclude-first", type=lambda v: {k: int(n) for k, n in (x.split(":") for x in v.split(","))},
                   default={"valid_seen": 16}, help="split:N,...: the first N games of a split are left out "
                   "(default valid_seen:16, the demo's games)")
    d.add_argument("--n", type=int, default=48)
    d.add_argument("--sims", type=int, default=400)
    d.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r = sub.add_parser("run")
    r.add_argument("--work", type=Path, default=DEFAULT_WORK)
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--only", nargs="*", default=())
    c = sub.add_parser("collect")
    c.add_argument("--work", type=Path, default=DEFAULT_WORK)
    c.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    return {"design": design, "run": run, "collect": collect}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(main())
