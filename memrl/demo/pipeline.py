"""`make demo`: memory changing outcomes, offline, on real ALFWorld games.

    memrl demo [--out runs/demo] [--bench-prompts N] [--jobs CORES] [OVERRIDES...]   (= python -m memrl.cli demo)

1. Teacher: ALFWorld's handcoded expert plays the demo games twice (`memrl.demo.teach`, no
   model): stopped after `--attempt-steps` (a failed attempt of every game), then with its
   own cap; the two banks are merged as an agent's history holds them, each game's failed
   attempt the older memory (`memrl.demo.teach.history_bank`, `<out>/teacher/bank`). Similarity
   cannot tell a game's two memories apart: they share its intent.
2. Student: the embedded model plays the same games for the demo's epochs, three times
   (`METHODS`, docs/experiments.md "The demo"): MemRL learning utilities and RAG
   (similarity only), each from a copy of the teacher bank and writing a memory of every
   episode, failures included, and no memory (`<out>/memrl`, `<out>/rag`, `<out>/none`).
3. What it shows (memrl.demo.demo_report: printed, and written to `<out>/demo.md`, `<out>/demo.json`,
   `<out>/demo.png`; the cross-run report with its tables and figures in `<out>/report/`,
   which gets a copy of `demo.md`): success rate per epoch per method; the paired
   comparisons over games of the final epoch (McNemar and a paired bootstrap interval,
   `memrl.report.tables.compare`) and across epochs (CSR-style, with the sign test,
   `memrl.demo.utility_experiment.paired`) with their power; the mechanism (re-injections of a
   memory that already failed, the student's own failure memories shown); the teacher
   memories whose Q rose and fell under MemRL; copy accuracy (`memrl.demo.teacher_effect`); the
   embedded model's prompt and decode tokens/s with the prefix reuse, and before/after on the
   same prompts (`--bench-prompts`).

The settings are `configs/experiment/demo.yaml` (games, steps, model, epochs) plus the
per-method overrides in `METHODS`; extra overrides on the command line apply to every run
(e.g. `llm=local_gemma`). Runs resume like any run: a second `make demo` only re-reads the
finished runs (and every model answer comes from the response cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from memrl.core.errors import ConfigError
from memrl.core.rundir import RunDir

DEFAULT_OUT = Path("runs/demo")
BASE = ["experiment=demo"]
# The teacher's own step cap (--teacher-steps): ALFWorld's expert needs up to 50 steps (it still
# fails some games); the students' cap is the preset's env.max_steps.
TEACHER_STEPS = 50
# The teacher's failed attempt (--attempt-steps): the expert stopped after 3 steps; the
# shortest expert solution of the demo games is 4 steps, so every attempt fails.
ATTEMPT_STEPS = 3
# Per method: its overrides on top of the demo preset. `{teacher}` is the teacher bank. Both
# students start from a copy of it and write every episode as a raw trajectory, failures
# included (the paper's loop); neither is gated; both break ties among equally similar memories
# by the same rule (`{ties}`): MemRL's Phase A keeps a pool of k1 (every memory tied at the k1-th
# included) that Phase B re-ranks by Q, RAG shows the most similar. RAG first: MemRL's first
# epoch (all Q equal) injects the same memories and is answered from the response cache.
METHODS: dict[str, list[str]] = {
    # similarity only
    "rag": ["memory=rag", "memory.bank.init_from={teacher}", "memory.bank.ties={ties}"],
    # learns Q, the copies starting at Q_init (the oracle learned nothing)
    "memrl": ["memory=memrl_rag", "memory.bank.init_from={teacher}", "memory.bank.init_q=reset",
              "memory.sim_gate=false", "memory.bank.ties={ties}"],
    "none": ["memory=none"],
}
# The demo's tie rule (--ties): a game's two memories tie at similarity 1, and under `oldest`
# (or `newest`) the memory order alone would decide what RAG shows (docs/experiments.md, "Why
# the tie rule matters"); `random` draws the tie per query, the same way for both methods.
DEMO_TIES = "random"
REFERENCE = "memrl"
TEACHER_LABEL = "expert"  # the history bank's memories of the oracle's own episodes
ALPHA = 0.05


@dataclass
class Phase:
    name: str
    seconds: float


@dataclass
class DemoResult:
    out: Path
    games: list[str]
    teacher: dict[str, Any]
    sr: dict[str, list[float]]
    comparisons: list[dict[str, Any]]
    copy: dict[str, dict[int, dict[str, Any]]]
    q_moves: list[dict[str, Any]]
    speed: dict[str, Any]
    phases: list[Phase] = field(default_factory=list)
    model: str = ""
    power: dict[str, Any] = field(default_factory=dict)
    across: dict[str, Any] = field(default_factory=dict)  # memrl vs rag over epochs (utility_experiment.paired)
    condition: dict[str, Any] = field(default_factory=dict)  # split, tie rule, order, k2, epochs
    mechanism: dict[str, Any] = field(default_factory=dict)  # per method: H1 counts, own failures shown

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "games": self.games, "model": self.model, "teacher": self.teacher,
                "sr": self.sr, "comparisons": self.comparisons, "across_epochs": self.across,
                "mechanism": self.mechanism, "copy_accuracy": self.copy,
                "teacher_memories": self.q_moves, "speed": self.speed, "power": self.power,
                "condition": self.condition,
                "phases": [{"name": p.name, "seconds": round(p.seconds, 1)} for p in self.phases]}


# --------------------------------------------------------------------------- running
def cores() -> int:
    """The cores this process may run on (`--jobs`' default)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def play_run(run_dir: Path, overrides: Sequence[str], log: Path, what: str) -> None:
    """One `memrl run` in a process of its own, its output in `log`: a refusal is a ConfigError,
    another failure a RuntimeError, each with the log's end (one line announces it: threads that
    run several at once must not interleave their lines)."""
    sys.stdout.write(f"{what} (output: {log}): {' '.join(overrides)}\n")
    sys.stdout.flush()
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "memrl.cli", "run", *overrides, f"hydra.run.dir={run_dir}"]
    with open(log, "w", encoding="utf-8") as fh:
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode == 2:
        raise ConfigError(f"{what}: refused: {log.read_text()[-2000:]}")
    if done.returncode != 0:
        raise RuntimeError(f"{what}: exited {done.returncode}: {log.read_text()[-2000:]}")


def uses_teacher(name: str) -> bool:
    """Whether a method's student starts from the teacher bank (`{teacher}` in its overrides)."""
    return any("{teacher}" in o for o in METHODS[name])


def alongside_teacher(methods: Sequence[str], jobs: int) -> list[str]:
    """The students that start while the teacher plays (`run_students` with `jobs` > 1): those
    that need no teacher bank, the reference aside."""
    return [m for m in methods if m != REFERENCE and not uses_teacher(m)] if jobs > 1 else []


def run_students(out: Path, teacher: Callable[[], Path], extra: Sequence[str],
                 methods: Sequence[str] = tuple(METHODS), jobs: int = 1, ties: str = DEMO_TIES) -> dict[str, Path]:
    """Each method's student run, in `out/<method>`; `teacher()` builds the teacher bank and
    returns its folder.

    `jobs` <= 1: the teacher, then the students one after another, in this process, with the
    preset's threads. `jobs` > 1 (the cores to use): each student a `memrl run` process (its
    output in `out/<method>.log`) with one llama.cpp thread, up to `jobs` at once: the students
    that need no teacher bank (no memory) start while the teacher plays, the others but the
    reference (RAG) once the bank is there; then the reference (MemRL) alone with
    `llm.n_threads=<jobs>`. The runs share the response cache: MemRL's first epoch, whose Q
    are all equal, asks what RAG asked, so it is answered from the cache, and its later epochs
    get every core. Threads change no answer (`llm.n_threads` is a no-effect setting: the
    demo's prompts give the same answers at 1 and 2 threads), so the schedule changes the wall
    time only."""
    from memrl.control.session import execute
    from memrl.demo.teach import compose

    def own(name: str, bank: Path | None) -> list[str]:
        return BASE + [o.format(teacher=bank, ties=ties) for o in METHODS[name]]

    dirs = {name: out / name for name in methods}
    for name in methods:
        compose(own(name, out / "teacher") + list(extra))  # a bad override is a ConfigError before anything runs
    if jobs <= 1:
        bank = teacher()
        for name in methods:
            overrides = own(name, bank) + list(extra)
            print(f"[demo] student with {name}: {' '.join(overrides)}", flush=True)
            execute(compose(overrides), dirs[name])
        return dirs

    def play(name: str, args: list[str]) -> None:
        play_run(dirs[name], args, out / f"{name}.log", f"[demo] student with {name}")

    out.mkdir(parents=True, exist_ok=True)
    one_thread = ["llm.n_threads=1"]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        early = alongside_teacher(methods, jobs)
        running = [pool.submit(play, name, own(name, None) + one_thread + list(extra)) for name in early]
        bank = teacher()  # meanwhile, in this process
        running += [pool.submit(play, name, own(name, bank) + one_thread + list(extra))
                    for name in methods if name != REFERENCE and name not in early]
        for f in running:
            f.result()
    if REFERENCE in methods:  # the user's overrides last
        play(REFERENCE, own(REFERENCE, bank) + [f"llm.n_threads={jobs}"] + list(extra))
    return dirs


# --------------------------------------------------------------------------- analysis
def _groups(dirs: dict[str, Path]) -> dict[str, Any]:
    from memrl.report import group_runs, load_run

    runs = [r for r in (load_run(d) for d in dirs.values()) if r is not None]
    return {g.memory: g for g in group_runs(runs, warn=lambda m: None)}


def _group_of(run_dir: Path | None, groups: dict[str, Any]) -> str:
    """The report's group of a run (its memory's name: MemRL's student is `memrl_rag`)."""
    if run_dir is None:
        return REFERENCE
    name = (json.loads(RunDir(run_dir).card.read_text()).get("config") or {}).get("memory", {}).get("name")
    return name if name in groups else REFERENCE


def comparisons(groups: dict[str, Any], reference: str = REFERENCE) -> list[dict[str, Any]]:
    """Final-epoch paired comparisons: the reference against each method, and every memory
    method against no memory."""
    from memrl.report.tables import compare

    pairs = [(reference, m) for m in groups if m != reference]
    pairs += [(m, "none") for m in groups if m not in (reference, "none") and "none" in groups]
    return [row for a, b in pairs if a in groups and b in groups
            and (row := compare(groups[a], groups[b])) is not None]


def min_discordant(alpha: float = ALPHA) -> int:
    """The fewest discordant games, all one way, for which exact McNemar gives p < alpha."""
    b = 1
    while 2 * 0.5 ** b >= alpha:
        b += 1
    return b


def predicted_power(teacher: dict[str, Any], cap: int, ties: str, order: str, k2: int, epochs: int,
                    seed: int = 0) -> dict[str, Any]:
    """The power of MemRL against RAG on these games, from the games and the student model alone
    (no outcome of this run): the simulation of docs/experiments.md (memrl.demo.sensitivity)."""
    import numpy as np

    from memrl.demo.sensitivity import Condition, StudentModel, games_from_intents, predict
    from memrl.llm.embed import MiniLMEmbedder

    ids = sorted(teacher)
    games = games_from_intents([teacher[t].intent for t in ids], MiniLMEmbedder().embed, ids)
    fits = np.array([teacher[t].success and len(teacher[t].actions) <= cap for t in ids])
    p = predict(games, Condition(ties, order, k2), StudentModel(), n_sims=200, epochs=epochs, seed=seed, fits=fits)
    return {"power": p.power, "b": p.b, "c": p.c, "sr": p.sr, "n_sims": 200, "fits": int(fits.sum())}


def speed_of(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """The embedded model's counters summed over the runs' sessions (run cards)."""
    from memrl.llm.local import SPEED_COUNTERS, speed_rates

    tot = {k: 0.0 for k in SPEED_COUNTERS}
    for d in run_dirs:
        card = json.loads(RunDir(d).card.read_text())
        for s in card.get("sessions", []):
            for k in tot:
                tot[k] += float(((s.get("llm") or {}).get("backend") or {}).get(k, 0) or 0)
    return {**tot, **speed_rates(tot)}


def analyse(out: Path, teacher_dir: Path, dirs: dict[str, Path], order: str = "history") -> DemoResult:
    """`teacher_dir`: the run of the oracle's own episodes (the history bank's `expert`); `order`:
    the history bank's memory order (for the predicted power)."""
    from memrl.demo.teacher_effect import copy_accuracy, teacher_episodes, teacher_q
    from memrl.demo.utility_experiment import own_failure_injections, paired_runs, reinjected_after_failure
    from memrl.metrics.compute import compute_metrics, load_run

    teacher = teacher_episodes(teacher_dir)
    records = {m: load_run(d) for m, d in dirs.items()}
    sr = {m: compute_metrics(records[m])["sr"] for m in dirs}
    groups = _groups(dirs)
    copy = {m: {e: rep.to_dict() for e, rep in copy_accuracy(d, teacher, label=TEACHER_LABEL).items()}
            for m, d in dirs.items()}
    moves = [dict(vars(q), movement=q.movement) for q in teacher_q(dirs[REFERENCE])] \
        if REFERENCE in dirs else []
    across = paired_runs(dirs[REFERENCE], dirs["rag"]) if REFERENCE in dirs and "rag" in dirs else {}
    mechanism = {m: {**reinjected_after_failure(records[m]), "shown": own_failure_injections(records[m])}
                 for m in dirs if m != "none"}
    cards = {m: json.loads(RunDir(d).card.read_text()) for m, d in dirs.items()}
    card = cards[next(iter(dirs))]
    env_cfg = (card.get("config") or {}).get("env") or {}
    cap = int(env_cfg.get("max_steps") or 0)
    fits = sum(t.success and len(t.actions) <= cap for t in teacher.values())
    ref_card = cards.get(REFERENCE, cards.get("rag", card))
    bank_cfg = ((ref_card.get("config") or {}).get("memory") or {}).get("bank") or {}
    condition = {"split": env_cfg.get("split"), "ties": bank_cfg.get("ties", "oldest"), "order": order,
                 "k2": int((env_cfg.get("retrieval") or {}).get("k2") or 1),
                 "epochs": max(len(v) for v in sr.values()) if sr else 0}
    predicted = (predicted_power(teacher, cap, condition["ties"], order, condition["k2"], condition["epochs"])
                 if REFERENCE in dirs and "rag" in dirs else None)
    return DemoResult(
        power={"fits": fits, "max_steps": cap, "needed": min_discordant(),
               "predicted": predicted},
        condition=condition,
        out=out, games=sorted(teacher), model=str(card.get("model")),
        teacher={"games": len(teacher), "solved": sum(t.success for t in teacher.values()),
                 "steps": {t.task_id: len(t.actions) for t in teacher.values()}},
        sr=sr, comparisons=comparisons(groups, reference=_group_of(dirs.get(REFERENCE), groups)), copy=copy,
        q_moves=moves,
        speed={"run": speed_of(list(dirs.values()))}, across=across, mechanism=mechanism)
