"""Readings of MemRL against RAG (docs/experiments.md), computed from run directories alone,
for the tie-rule sensitivity experiment (`memrl.demo.sensitivity_runs`), the demo
(`memrl.demo.pipeline`) and the test that asserts the mechanism (tests/demo/test_e2e_demo.py).

- `reinjected_after_failure` (H1, the mechanism): injections, from epoch 2 on, of a memory
  that an earlier batch had already injected into a failed episode.
- `paired` / `paired_runs`: two methods over the same games, paired per game: the final
  epoch's success (Δ, McNemar) and the CSR-style reading across epochs (solved at least once
  in epochs 1..E), with the sign test on the number of epochs each game was solved.
- `own_failure_injections`: per epoch, injections of memories the student wrote after a
  failed episode of its own (the "learning in the wrong direction" reading).
- `teacher_losses` (why a teacher memory loses to the student's own failure): every
  injection of a failure memory the student wrote (for this game, or for another game whose
  task shares its key) while the game's teacher memory was in the bank,
  with both Q values as retrieval saw them (the teacher's from `bank_updates.jsonl`) and
  the cause: the teacher's Q below the failure's, a tie in Q (then the older memory, the
  teacher's, ranks first, so a loss on a tie means something else decided), or neither; and
  how many of the updates that moved the teacher memory came from other games' episodes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memrl.core.records import EpisodeRecord

TOL = 1e-9


# --------------------------------------------------------------------------- mechanism
def reinjected_after_failure(records: Sequence[EpisodeRecord]) -> dict[str, int]:
    """Injections (epochs >= 2) of memories already injected into a failure in an earlier
    batch, and all injections of epochs >= 2."""
    failed: set[str] = set()
    again = total = 0
    by_batch: dict[tuple[int, int], list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        by_batch[(int(r.epoch), int(r.batch))].append(r)
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


def own_failure_injections(records: Sequence[EpisodeRecord]) -> dict[str, dict[str, int]]:
    """Per epoch (as a string): injections of memories the run itself wrote after a failed
    episode (`own_failure`), after a solved one (`own_success`), and of memories it did not
    write (`imported`: a teacher bank's)."""
    origin = {str(r.written): bool(r.success) for r in records if r.written}
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"own_failure": 0, "own_success": 0, "imported": 0})
    for r in records:
        row = out[str(int(r.epoch))]
        for m in r.injected:
            o = origin.get(str(m["id"]))
            row["imported" if o is None else "own_success" if o else "own_failure"] += 1
    return {e: dict(out[e]) for e in sorted(out, key=int)}


# --------------------------------------------------------------------------- outcome
def sign_test(plus: int, minus: int) -> float:
    """Exact two-sided sign test (ties dropped)."""
    n = plus + minus
    if n == 0:
        return 1.0
    k = min(plus, minus)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def _binary_pair(x: np.ndarray, y: np.ndarray, n_boot: int, seed: int) -> dict[str, Any]:
    from memrl.report.stats import mcnemar, paired_bootstrap

    x, y = x.astype(bool), y.astype(bool)
    est, lo, hi = paired_bootstrap(x.astype(float), y.astype(float), n_boot=n_boot, seed=seed)
    b, c = int((x & ~y).sum()), int((~x & y).sum())
    test = mcnemar(b, c, exact_below=b + c + 1)  # the exact binomial test at any count
    return {"a": float(x.mean()), "b_rate": float(y.mean()), "delta": est, "delta_lo": lo, "delta_hi": hi,
            "a_only": b, "b_only": c, "both": int((x & y).sum()), "neither": int((~x & ~y).sum()),
            "mcnemar_p": test["p"], "mcnemar_test": test["test"]}


def paired(a: np.ndarray, b: np.ndarray, *, n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Two methods' success matrices (epochs x games, the same games in the same order),
    paired per game: `final` (the last epoch), `csr` (solved at least once in epochs 1..E)
    and `epochs_solved` (per game, the number of epochs solved; exact sign test)."""
    if a.shape != b.shape:
        raise ValueError(f"paired: matrices of different shapes {a.shape} and {b.shape}")
    per_a, per_b = a.sum(axis=0), b.sum(axis=0)
    plus, minus = int((per_a > per_b).sum()), int((per_a < per_b).sum())
    return {"games": int(a.shape[1]), "epochs": int(a.shape[0]),
            "final": _binary_pair(a[-1], b[-1], n_boot, seed),
            "csr": _binary_pair(a.max(axis=0), b.max(axis=0), n_boot, seed),
            "epochs_solved": {"a_more": plus, "b_more": minus, "sign_test_p": sign_test(plus, minus)}}


def paired_runs(run_a: str | Path, run_b: str | Path, **kw: Any) -> dict[str, Any]:
    """`paired` over two run directories' records, on the games both played."""
    from memrl.metrics.compute import load_run, success_matrix

    (ta, _, sa), (tb, _, sb) = success_matrix(load_run(run_a)), success_matrix(load_run(run_b))
    games = sorted(set(ta) & set(tb))
    ia, ib = [ta.index(g) for g in games], [tb.index(g) for g in games]
    epochs = min(sa.shape[0], sb.shape[0])
    return paired(sa[:epochs, ia], sb[:epochs, ib], **kw)


# --------------------------------------------------------------------------- diagnosis
def teacher_losses(run_dir: str | Path) -> dict[str, Any]:
    """Why a game's teacher memory lost to the game's own failure memory (module doc)."""
    from memrl.demo.teacher_effect import teacher_memory
    from memrl.journal.banklog import BankHistory
    from memrl.metrics.compute import load_run

    records = sorted(load_run(run_dir), key=lambda r: (r.epoch, r.batch))
    history = BankHistory.read(run_dir)
    if not history.covers([{"epoch": r.epoch, "batch": r.batch} for r in records]):
        raise ValueError(f"{run_dir}: bank_updates.jsonl does not cover every batch")
    before: dict[tuple[int, int], dict[str, float]] = {}
    state: dict[str, float] = {}
    for line, after in history.replay():
        if not before:  # the first line's Q before is the initial bank
            state = {str(row["id"]): float(row.get("q") or 0.0) for row in line.get("initial") or []}
        before[(int(line["epoch"]), int(line["batch"]))] = dict(state)
        state = dict(after)
    written = {str(r.written): r for r in records if r.written}
    teacher_of: dict[str, list[str]] = defaultdict(list)
    for mid in next(iter(before.values()), {}):
        found = teacher_memory(mid)
        if found:
            teacher_of[found[1]].append(mid)
    moved_by: dict[str, dict[str, int]] = defaultdict(lambda: {"own_game": 0, "other_games": 0})
    rows = []
    for r in records:
        q_now = before.get((int(r.epoch), int(r.batch)), {})
        for m in r.injected:
            mid = str(m["id"])
            src = written.get(mid)
            if r.epoch >= 2 and src is not None and not src.success:
                teachers = [t for t in teacher_of.get(r.task_id, []) if t in q_now]
                if teachers:
                    qt = max(q_now[t] for t in teachers)
                    qc = float(m.get("q", 0.0))
                    cause = ("teacher_q_below" if qt < qc - TOL else
                             "tie_in_q" if abs(qt - qc) <= TOL else "teacher_q_above")
                    rows.append({"epoch": int(r.epoch), "task": r.task_id, "chosen": mid, "q_chosen": qc,
                                 "q_teacher": qt, "cause": cause, "own_game": src.task_id == r.task_id,
                                 "pool": int(((r.info or {}).get("retrieval") or {}).get("pool", 0))})
            found = teacher_memory(mid)
            if found:
                moved_by[mid]["own_game" if found[1] == r.task_id else "other_games"] += 1
    causes: dict[str, int] = defaultdict(int)
    for row in rows:
        causes[row["cause"]] += 1
    lost = {row["task"] for row in rows}
    pushes = {mid: dict(moved_by[mid]) for t in sorted(lost) for mid in teacher_of[t]}
    return {
        "own_failure_over_teacher": len(rows), "causes": dict(causes), "games": len(lost),
        "written_by_another_game": sum(not x["own_game"] for x in rows),
        "q_teacher_mean": float(np.mean([x["q_teacher"] for x in rows])) if rows else None,
        "q_chosen_mean": float(np.mean([x["q_chosen"] for x in rows])) if rows else None,
        "teacher_updates_from": {"own_game": sum(v["own_game"] for v in pushes.values()),
                                 "other_games": sum(v["other_games"] for v in pushes.values())},
        "rows": rows,
    }
