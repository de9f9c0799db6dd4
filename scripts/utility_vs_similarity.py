"""The pre-registered experiment of the README ("Utility against similarity"): on the demo's
games, MemRL and RAG both writing every episode (failures included) on top of the teacher
bank, 6 epochs; the only difference is Phase B. Prints and writes the result.

    python scripts/utility_vs_similarity.py [--out runs/utility_vs_similarity] [--epochs 6]

H1 (mechanism): injections, in epochs 2 on, of a memory that was already injected into a
failed episode in an earlier batch. H2 (outcome): exact McNemar over games at the final
epoch, with the paired bootstrap interval of Δ; across epochs, the exact sign test on the
number of epochs each game was solved. With the Figure-7 readings (memrl.utility_readings).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARMS = {  # the README's design: the same bank, writes and gate; only Phase B differs
    "rag": ["memory=rag", "memory.bank.init_from={teacher}"],
    "memrl": ["memory=memrl_rag", "memory.bank.init_from={teacher}", "memory.bank.init_q=reset",
              "memory.sim_gate=false"],
    "none": ["memory=none"],
}


def reinjected_after_failure(records) -> dict[str, int]:
    """Injections (epochs >= 2) of memories already injected into a failure in an earlier
    batch, and all injections of epochs >= 2."""
    failed: set[str] = set()
    again = total = 0
    by_batch: dict[tuple[int, int], list] = {}
    for r in records:
        by_batch.setdefault((int(r.epoch), int(r.batch)), []).append(r)
    for key in sorted(by_batch):
        batch = by_batch[key]
        for r in batch:
            if r.epoch >= 2:
                ids = [str(m["id"]) for m in r.injected]
                total += len(ids)
                again += sum(1 for i in ids if i in failed)
        for r in batch:  # known to later batches only (a batch retrieves before its updates)
            if not r.success:
                failed.update(str(m["id"]) for m in r.injected)
    return {"reinjected_after_failure": again, "injections_epoch2_on": total}


def sign_test(plus: int, minus: int) -> float:
    n = plus + minus
    if n == 0:
        return 1.0
    k = min(plus, minus)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def main(argv: list[str] | None = None) -> int:
    from memrl.demo import BASE, comparisons, power, _groups
    from memrl.metrics import load_run, success_matrix
    from memrl.run import execute
    from memrl.teach import compose, teach
    from memrl.utility_readings import utility_readings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "utility_vs_similarity")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    bank = teach(BASE + a.overrides + ["env.max_steps=50"], a.out / "teacher")
    dirs = {}
    for name, arm in ARMS.items():
        overrides = BASE + [o.format(teacher=bank.run_dir.resolve()) for o in arm] + \
            [f"runner.epochs={a.epochs if name != 'none' else 1}"] + a.overrides
        dirs[name] = a.out / name
        print(f"[utility] {name}: {' '.join(overrides)}", flush=True)
        execute(compose(overrides), dirs[name])
    groups = _groups({k: v for k, v in dirs.items() if k != "none"})
    reference = next(g for g in groups if g.startswith("memrl"))  # memrl_rag: MemRL on raw trajectories
    final = comparisons(groups, reference=reference)
    recs = {k: load_run(v) for k, v in dirs.items()}
    mats = {k: success_matrix(recs[k])[2] for k in ("memrl", "rag")}
    per_game = {k: m.sum(axis=0) for k, m in mats.items()}
    plus = int((per_game["memrl"] > per_game["rag"]).sum())
    minus = int((per_game["memrl"] < per_game["rag"]).sum())
    out = {
        "epochs": a.epochs, "games": int(mats["memrl"].shape[1]),
        "sr": {k: [float(x) for x in m.mean(axis=1)] for k, m in mats.items()},
        "sr_none": float(success_matrix(recs["none"])[2].mean()),
        "final": final,
        "across_epochs": {"memrl_more": plus, "rag_more": minus, "sign_test_p": sign_test(plus, minus)},
        "h1": {k: reinjected_after_failure(recs[k]) for k in ("memrl", "rag")},
        "utility": {k: utility_readings(recs[k]) for k in ("memrl", "rag")},
        "wall_s": round(time.monotonic() - t0, 1),
    }
    for row in final:
        d = row["ref_only"] + row["method_only"]
        row["power_at_observed_discordance"] = power(d, row["ref_only"] / d) if d else None
    (a.out / "result.json").write_text(json.dumps(out, indent=2, default=float))
    print(json.dumps(out, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
