"""The pre-registered experiments of the README ("Utility against similarity"): on the demo's
games, MemRL and RAG both writing every episode (failures included) on top of a teacher
bank; the only difference is Phase B. Prints and writes the result (`<out>/result.json`).

    python scripts/utility_vs_similarity.py --design teacher  [--out DIR] [--epochs 6]
    python scripts/utility_vs_similarity.py --design history [--order history|shuffled]
    python scripts/utility_vs_similarity.py --design teacher --remedies   # item 2's switches

Designs (the teacher bank):
- `teacher`: the first design, the expert's episodes (`memrl.demo.teach`), one memory per game.
- `history`: the second design, each game failed (the expert stopped after 3 steps) and then
  solved by the expert, merged with the attempt first (`--order history`) or a seeded coin
  per game (`--order shuffled`) (`memrl.demo.teach.history_bank`).

`--remedies` adds one MemRL run per remedy of "learning in the wrong direction" (the
project's and the official code's own switches, `REMEDIES`); RAG has no Q, so none of them
changes it, and its run is shared.

Readings (memrl.demo.utility_experiment): H1, injections of a memory already injected into a
failure; H2, the final epoch paired over games (exact McNemar, paired bootstrap Δ) and the
CSR-style reading across epochs with the sign test; the injections of the student's own
failure memories per epoch; why a teacher memory lost to a failure memory (`teacher_losses`);
the Figure-7 readings (memrl.metrics.utility).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REMEDIES = {  # item 2: each a named switch that exists in MemRL's settings
    # the project's: a failed attempt starts at the failure reward, below any teacher memory
    "q_init_failed": ["memory.q_init_failed=-1"],
    # the official Lifelong code: Q_init 0.5, r_fail 0, floor 0
    "official_llb": ["memory.q_init=0.5", "memory.reward_failure=0", "memory.q_floor=0"],
    # the official HLE code: Q_init 1 after a success, 0 after a failure
    "by_outcome": ["memory.q_init_by_outcome=true"],
}


def make_teacher(design: str, order: str, out: Path, overrides: list[str]) -> Path:
    from memrl.demo.pipeline import ATTEMPT_STEPS, BASE, TEACHER_STEPS
    from memrl.demo.teach import history_bank, teach

    if design == "teacher":
        return teach(BASE + overrides + [f"env.max_steps={TEACHER_STEPS}"], out / "teacher").run_dir.resolve()
    bank = history_bank(BASE + overrides, out / "teacher", attempt_steps=ATTEMPT_STEPS,
                        expert_steps=TEACHER_STEPS, order=order)
    print(f"[utility] {bank.describe()}", flush=True)
    return bank.bank_dir.resolve()


def main(argv: list[str] | None = None) -> int:
    from memrl.control.session import execute
    from memrl.demo.pipeline import BASE
    from memrl.demo.pipeline import METHODS as ARMS
    from memrl.demo.teach import compose
    from memrl.demo.utility_experiment import (own_failure_injections, paired_runs, reinjected_after_failure,
                                               teacher_losses)
    from memrl.metrics.compute import load_run, success_matrix
    from memrl.metrics.utility import utility_readings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--design", choices=("teacher", "history"), default="teacher")
    ap.add_argument("--order", choices=("history", "shuffled"), default="history")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--remedies", action="store_true", help="one more MemRL run per remedy")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    out = a.out or ROOT / "runs" / f"utility_vs_similarity_{a.design}" \
        f"{'_' + a.order if a.design == 'history' else ''}"
    t0 = time.monotonic()
    teacher = make_teacher(a.design, a.order, out, a.overrides)
    arms = {k: list(v) for k, v in ARMS.items()}
    if a.remedies:
        arms.update({f"memrl_{name}": ARMS["memrl"] + extra for name, extra in REMEDIES.items()})
    dirs = {}
    for name, arm in arms.items():
        overrides = BASE + [o.format(teacher=teacher) for o in arm] + \
            [f"runner.epochs={a.epochs}"] + a.overrides
        dirs[name] = out / name
        print(f"[utility] {name}: {' '.join(overrides)}", flush=True)
        execute(compose(overrides), dirs[name])
    recs = {k: load_run(v) for k, v in dirs.items()}
    res = {
        "design": a.design, "order": a.order if a.design == "history" else None, "epochs": a.epochs,
        "arms": {k: arms[k] for k in dirs},
        "sr": {k: [float(x) for x in success_matrix(recs[k])[2].mean(axis=1)] for k in dirs},
        "paired": {f"{m} vs {o}": paired_runs(dirs[m], dirs[o]) for m in dirs if m.startswith("memrl")
                   for o in ("rag", "none")},
        "paired_rag_none": paired_runs(dirs["rag"], dirs["none"]),
        "h1": {k: reinjected_after_failure(recs[k]) for k in dirs if k != "none"},
        "own_failure_injections": {k: own_failure_injections(recs[k]) for k in dirs if k != "none"},
        "teacher_losses": {k: {x: y for x, y in teacher_losses(dirs[k]).items() if x != "rows"}
                           for k in dirs if k.startswith("memrl")},
        "utility": {k: utility_readings(recs[k]) for k in dirs if k != "none"},
        "wall_s": round(time.monotonic() - t0, 1),
    }
    (out / "result.json").write_text(json.dumps(res, indent=2, default=float))
    print(json.dumps({k: v for k, v in res.items() if k not in ("utility", "own_failure_injections")},
                     indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
