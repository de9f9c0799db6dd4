"""Running and reading the tie-rule sensitivity experiment (`memrl.demo.sensitivity` holds its
conditions and power analysis; docs/experiments.md its pre-registration and results).

Layout under the work folder (`runs/sensitivity` by default):

    teacher_<order>_<split>/           the history bank of each memory order and split (the expert twice)
    <condition>/<arm>/<split>/         one `memrl run` per arm and split: rag, memrl, memrl_q_init_failed

A run covers one ALFWorld split, so games drawn from two splits are played in two runs per arm;
the readings pool them (task ids prefixed by their split): games are the paired unit, and two
games of different splits never share a memory bank in either method.

Every run is an ordinary run directory (it resumes; its card records the commit). `collect`
writes, per condition, `results/<...>/<condition>/result.json` and beside it each arm's run
card, `metrics.json` and episode records (gzip), so every number in the docs can be re-derived
from the repository (scripts/check_claims.py).
"""

from __future__ import annotations

import gzip
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.demo.pipeline import play_run
from memrl.demo.sensitivity import CONDITIONS, Condition

BASE = ["experiment=demo", "env.max_tasks=null"]
ATTEMPT_STEPS = 3
TEACHER_STEPS = 50
STUDENT_STEPS = 15
# the arms of every condition: RAG first (MemRL's first epoch, all Q equal, asks what RAG asked)
ARMS: dict[str, list[str]] = {
    "rag": ["memory=rag", "memory.bank.init_from={teacher}"],
    "memrl": ["memory=memrl_rag", "memory.bank.init_from={teacher}", "memory.bank.init_q=reset",
              "memory.sim_gate=false"],
}
# MemRL's named variant beside the paper's MemRL, in the conditions pre-registered for it
VARIANTS: dict[str, list[str]] = {"memrl_q_init_failed": ARMS["memrl"] + ["memory.q_init_failed=-1"]}


@dataclass(frozen=True)
class Design:
    """What the pre-registration fixed: the games (split, task id), epochs and which conditions
    run the variant."""

    games: list[tuple[str, str]]
    epochs: int
    variant_conditions: list[str]

    @classmethod
    def read(cls, path: Path) -> "Design":
        d = json.loads(Path(path).read_text())
        return cls([(g["split"], g["task"]) for g in d["games"]], int(d["epochs"]), list(d["variant_conditions"]))

    @property
    def splits(self) -> list[str]:
        return list(dict.fromkeys(split for split, _ in self.games))

    def tasks(self, split: str) -> list[str]:
        return [t for s, t in self.games if s == split]


def select_games(survey_run: Path, *, low: int = ATTEMPT_STEPS + 1, high: int = STUDENT_STEPS,
                 exclude: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The games of a survey run (the expert once on a split, `agent=expert`) whose expert
    solution takes `low`..`high` steps: long enough that the 3-step attempt fails, short enough
    that the student (15 steps) can replay it; `exclude`: task ids left out. Sorted by task id."""
    card = json.loads(RunDir(survey_run).card.read_text())
    split = card["config"]["env"]["split"]
    rows = [r for r in iter_jsonl(RunDir(survey_run).episodes)]
    keep = [{"split": split, "task": r["task_id"], "steps": int(r["steps"]), "intent": r.get("intent", "")}
            for r in rows if r["success"] and low <= int(r["steps"]) <= high and r["task_id"] not in exclude]
    return sorted(keep, key=lambda g: g["task"])


def _task_ids(games: Sequence[str]) -> str:
    return "env.task_ids=[" + ",".join(json.dumps(g) for g in games) + "]"


def common(design: Design, split: str) -> list[str]:
    return BASE + [f"env.split={split}", _task_ids(design.tasks(split)), f"runner.epochs={design.epochs}"]


def arm_overrides(design: Design, cond: Condition, arm: str, split: str, teacher: Path) -> list[str]:
    spec = {**ARMS, **VARIANTS}[arm]
    return common(design, split) + [o.format(teacher=teacher) for o in spec] + [
        f"memory.bank.ties={cond.ties}", f"env.retrieval.k2={cond.k2}"]


def arms_of(design: Design, cond: Condition) -> list[str]:
    return list(ARMS) + (list(VARIANTS) if cond.name in design.variant_conditions else [])


def build_teacher(design: Design, work: Path, order: str, split: str) -> Path:
    from memrl.demo.teach import history_bank

    overrides = BASE + [f"env.split={split}", _task_ids(design.tasks(split))]
    bank = history_bank(overrides, work / f"teacher_{order}_{split}", attempt_steps=ATTEMPT_STEPS,
                        expert_steps=TEACHER_STEPS, order=order)
    print(f"[sensitivity] {bank.describe()}", flush=True)
    return bank.bank_dir.resolve()


def run_all(design: Design, work: Path, *, jobs: int = 2, only: Sequence[str] = ()) -> None:
    """Every condition's arms, `jobs` conditions at once (each condition's arms in order, so
    MemRL's first epoch finds RAG's answers in the shared response cache)."""
    conds = [c for c in CONDITIONS if not only or c.name in only]
    teachers = {(o, s): build_teacher(design, work, o, s) for o in sorted({c.order for c in conds})
                for s in design.splits}

    def condition(cond: Condition) -> None:
        for arm in arms_of(design, cond):
            for split in design.splits:
                play_run(work / cond.name / arm / split,
                         arm_overrides(design, cond, arm, split, teachers[(cond.order, split)]) + ["llm.n_threads=1"],
                         work / cond.name / f"{arm}.{split}.log", f"[sensitivity] {cond.name} {arm} {split}")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(condition, c) for c in conds]:
            f.result()


def pooled_records(run_dirs: dict[str, Path]) -> list:
    """The records of one arm's runs (split -> run dir), task ids prefixed by their split."""
    from dataclasses import replace

    from memrl.metrics.compute import load_run

    return [replace(r, task_id=f"{split}:{r.task_id}") for split, d in run_dirs.items() for r in load_run(d)]


def readings(arms: dict[str, dict[str, Path]]) -> dict[str, Any]:
    """One condition's readings from its run directories alone (arm -> split -> run dir)."""
    from memrl.demo.utility_experiment import own_failure_injections, paired, reinjected_after_failure
    from memrl.metrics.compute import success_matrix
    from memrl.metrics.utility import utility_readings

    recs = {k: pooled_records(v) for k, v in arms.items()}
    mats = {k: success_matrix(r) for k, r in recs.items()}
    games = mats["rag"][0]
    if any(m[0] != games for m in mats.values()):
        raise ValueError("the arms did not play the same games")
    return {
        "solved": {k: [int(x) for x in m[2].sum(axis=1)] for k, m in mats.items()},
        "games": len(games),
        "paired": {f"{k} vs rag": paired(mats[k][2], mats["rag"][2]) for k in arms if k != "rag"},
        "h1": {k: reinjected_after_failure(r) for k, r in recs.items()},
        "own_failure_injections": {k: own_failure_injections(r) for k, r in recs.items()},
        "utility": {k: utility_readings(r) for k, r in recs.items()},
        **why(arms),
    }


def why(arms: dict[str, dict[str, Path]]) -> dict[str, Any]:
    """What each arm showed first, by kind, per epoch; for the final epoch's discordant games what
    the losing arm showed; and why MemRL's arms did not show a game its solution
    (memrl.demo.shown). Read per split (memory ids name tasks without their split) and summed."""
    from collections import Counter

    from memrl.demo.shown import discordant_reasons, shown_by_epoch, why_not_solution
    from memrl.metrics.compute import load_run

    def add(total: dict[str, Counter], part: dict[str, dict[str, int]]) -> None:
        for key, counts in part.items():
            total.setdefault(key, Counter()).update(counts)

    shown: dict[str, dict[str, Counter]] = {}
    lost: dict[str, dict[str, Counter]] = {}
    reasons: dict[str, dict[str, Any]] = {}
    for arm, splits in arms.items():
        shown[arm] = {}
        for split, d in splits.items():
            recs = load_run(d)
            add(shown[arm], shown_by_epoch(recs))
            if arm != "rag":
                epochs = max(int(r.epoch) for r in recs)
                add(lost.setdefault(arm, {}), discordant_reasons(recs, load_run(arms["rag"][split]), epochs))
                w = why_not_solution(d)
                acc = reasons.setdefault(arm, {"episodes": 0, "causes": Counter(), "shown": Counter()})
                acc["episodes"] += w["episodes"]
                acc["causes"].update(w["causes"])
                acc["shown"].update(w["shown"])
    plain = {a: {k: dict(v) for k, v in per.items()} for a, per in shown.items()}
    return {"shown_first": {a: dict(sorted(v.items(), key=lambda kv: int(kv[0]))) for a, v in plain.items()},
            "final_discordant_shown": {a: {k: dict(v) for k, v in per.items()} for a, per in lost.items()},
            "why_not_solution": {a: {"episodes": v["episodes"], "causes": dict(v["causes"]),
                                     "shown": dict(v["shown"])} for a, v in reasons.items()}}


def card_of(run_dir: Path) -> dict[str, Any]:
    return json.loads(RunDir(run_dir).card.read_text())


def collect(design: Design, work: Path, out: Path) -> dict[str, Any]:
    """Per condition: `result.json` and each arm's card, metrics and records (gzip). A
    condition's folder holds that condition only: nothing of another is written there."""
    summary: dict[str, Any] = {}
    for cond in CONDITIONS:
        arms = {arm: {s: work / cond.name / arm / s for s in design.splits} for arm in arms_of(design, cond)}
        missing = [str(d) for a in arms.values() for d in a.values() if not RunDir(d).episodes.is_file()]
        if missing:
            summary[cond.name] = {"missing": missing}
            continue
        res = {"condition": cond.name, "ties": cond.ties, "order": cond.order, "k2": cond.k2, **readings(arms)}
        res["runs"] = {f"{arm}.{s}": {"commit": card_of(d)["git"]["commit"], "dirty": card_of(d)["git"]["dirty"],
                                      "status": card_of(d).get("status")}
                       for arm, a in arms.items() for s, d in a.items()}
        dest = out / cond.name
        dest.mkdir(parents=True, exist_ok=True)
        for arm, a in arms.items():
            for s, d in a.items():
                rd = RunDir(d)
                shutil.copyfile(rd.card, dest / f"{arm}.{s}.run_card.json")
                shutil.copyfile(rd.metrics, dest / f"{arm}.{s}.metrics.json")
                with open(rd.episodes, "rb") as src, \
                        gzip.GzipFile(dest / f"{arm}.{s}.episodes.jsonl.gz", "wb", mtime=0) as dst:
                    shutil.copyfileobj(src, dst)
        (dest / "result.json").write_text(json.dumps(res, indent=1, default=float) + "\n")
        summary[cond.name] = {"solved": res["solved"],
                              "final": {k: {x: v["final"][x] for x in ("a_only", "b_only", "mcnemar_p")}
                                        for k, v in res["paired"].items()}}
    return summary
