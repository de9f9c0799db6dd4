"""What each method showed each game, by kind, from run records alone: the reading that says
why one method solved a game the other did not (docs/experiments.md, "Why RAG ties or wins").

A memory shown to a game is one of:
- `solution`: a memory of this game that solved it (the expert's, or the student's own replay);
- `attempt`: the teacher's failed attempt of this game (the history bank's `attempt:` memory);
- `own_failure`: a failed episode of this game, written by the run;
- `other_game`: a memory of another game (its task sentence may be the same: `same_sentence`).
A teacher memory is named `init:<label>:e<epoch>:<task>` (memrl.demo.teach); a memory the run
wrote `e<epoch>:<task>`, and whether it solved its game is in the record that wrote it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Sequence

from memrl.core.records import EpisodeRecord
from memrl.demo.teacher_effect import teacher_memory

KINDS = ("solution", "attempt", "own_failure", "other_game")


def kind_of(memory_id: str, task_id: str, written: dict[str, bool]) -> str:
    """The kind of a memory shown to `task_id` (module doc); `written`: the run's own memory
    ids and whether the episode that wrote each succeeded."""
    found = teacher_memory(memory_id)
    if found is not None:
        label, task = found
        if task != task_id:
            return "other_game"
        return "attempt" if label == "attempt" else "solution"
    own_task = memory_id.split(":", 1)[1] if ":" in memory_id else ""
    if own_task != task_id:
        return "other_game"
    return "solution" if written.get(memory_id, False) else "own_failure"


def _first(r: EpisodeRecord) -> str | None:
    return str(r.injected[0]["id"]) if r.injected else None


def shown_by_epoch(records: Sequence[EpisodeRecord]) -> dict[str, dict[str, int]]:
    """Per epoch: how many episodes were shown each kind first (the top memory), and none."""
    written = {str(r.written): bool(r.success) for r in records if r.written}
    out: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        top = _first(r)
        out[str(int(r.epoch))]["none" if top is None else kind_of(top, r.task_id, written)] += 1
    return {e: dict(out[e]) for e in sorted(out, key=int)}


def discordant_reasons(a: Sequence[EpisodeRecord], b: Sequence[EpisodeRecord],
                       epoch: int) -> dict[str, Any]:
    """For the games one run solved at `epoch` and the other did not: what the losing run showed
    them first (by kind), both ways (`a_only`: games only run a solved, and what b showed them)."""
    def index(records: Sequence[EpisodeRecord]) -> tuple[dict[str, EpisodeRecord], dict[str, bool]]:
        return ({r.task_id: r for r in records if int(r.epoch) == epoch},
                {str(r.written): bool(r.success) for r in records if r.written})

    (ia, wa), (ib, wb) = index(a), index(b)
    out: dict[str, Any] = {"a_only": Counter(), "b_only": Counter()}
    for task in sorted(set(ia) & set(ib)):
        ra, rb = ia[task], ib[task]
        if ra.success and not rb.success:
            top = _first(rb)
            out["a_only"]["none" if top is None else kind_of(top, task, wb)] += 1
        elif rb.success and not ra.success:
            top = _first(ra)
            out["b_only"]["none" if top is None else kind_of(top, task, wa)] += 1
    return {k: dict(v) for k, v in out.items()}


def why_not_solution(run_dir: Any) -> dict[str, Any]:
    """For every episode (epoch >= 2) whose top memory was not a solution of its game while the
    bank held one: the game's best solution memory's Q against the shown memory's Q (both as
    retrieval saw them, from bank_updates.jsonl) and the cause:
    - `solution_failed_here`: every solution's Q was below the shown memory's, and the best
      solution had been lowered by this game's own episodes (the student failed with it: it
      could not replay it);
    - `solution_lowered_elsewhere`: the same, but the best solution had been lowered by other
      games' episodes (it was shown to another game, often one with the same task sentence,
      and failed there: "learning in the wrong direction");
    - `tie_in_q`: the best solution's Q equals the shown memory's (the tie rule decided: a
      fresh failure starts at Q_init, level with a solution that was never shown);
    - `solution_q_above`: the best solution had the higher Q yet lost Phase B's score.
    With batch size 1 each bank-update line is one episode, so each Q change is attributed to
    the game whose episode made it."""
    from memrl.journal.banklog import BankHistory
    from memrl.metrics.compute import load_run

    records = sorted(load_run(run_dir), key=lambda r: (r.epoch, r.batch))
    task_of = {(int(r.epoch), int(r.batch)): r.task_id for r in records}
    history = BankHistory.read(run_dir)
    before: dict[tuple[int, int], dict[str, float]] = {}
    lowered_by: dict[tuple[int, int], dict[str, Counter]] = {}
    state: dict[str, float] = {}
    moves: dict[str, Counter] = defaultdict(Counter)  # memory -> game whose episodes lowered it
    for line, after in history.replay():
        key = (int(line["epoch"]), int(line["batch"]))
        if not before:
            state = {str(row["id"]): float(row.get("q") or 0.0) for row in line.get("initial") or []}
        before[key] = dict(state)
        lowered_by[key] = {m: Counter(c) for m, c in moves.items()}
        for row in line.get("updates") or []:
            q0, q1 = row.get("q_before"), row.get("q_after")
            if q0 is not None and q1 is not None and float(q1) < float(q0):
                moves[str(row["id"])][task_of.get(key, "?")] += 1
        state = dict(after)
    written = {str(r.written): bool(r.success) for r in records if r.written}
    causes: Counter = Counter()
    shown: Counter = Counter()
    for r in records:
        top = _first(r)
        if r.epoch < 2 or top is None or kind_of(top, r.task_id, written) == "solution":
            continue
        key = (int(r.epoch), int(r.batch))
        q_now = before.get(key, {})
        solutions = {mid: q for mid, q in q_now.items() if kind_of(mid, r.task_id, written) == "solution"}
        if not solutions:
            continue
        best = max(solutions, key=lambda m: solutions[m])
        q_best, q_shown = solutions[best], float(r.injected[0].get("q") or 0.0)
        if q_best < q_shown - 1e-9:
            by = lowered_by.get(key, {}).get(best, Counter())
            here = by.get(r.task_id, 0)
            cause = "solution_failed_here" if here >= sum(by.values()) - here else "solution_lowered_elsewhere"
        else:
            cause = "tie_in_q" if abs(q_best - q_shown) <= 1e-9 else "solution_q_above"
        causes[cause] += 1
        shown[kind_of(top, r.task_id, written)] += 1
    return {"episodes": sum(causes.values()), "causes": dict(causes), "shown": dict(shown)}
