"""The tie-rule sensitivity experiment (docs/experiments.md, "Tie-rule sensitivity"): its
conditions, and the power analysis that fixed its number of games before any of its runs.

Conditions: MemRL against RAG in the paper's loop (both write every episode) from a history
bank (each game's failed attempt and the expert's solution, tied at similarity 1), under each
tie rule (`memory.bank.ties`) × memory order (the attempt older in every game, or drawn per
game) × k2 (1, and the paper's 3 for ALFWorld); plus MemRL's named variant
`memory.q_init_failed=-1` beside the paper's MemRL where it was pre-registered.

The power analysis simulates both methods with the project's own retrieval equations
(`memrl.memory.retrieval`: Phase A, Phase B, the tie precedence, the Q update) on the real
games' intents and similarities, and a student model whose parameters were measured on the
demo's games before this experiment (`StudentModel`): a game is solved only when the student
is shown a solution of that same game (the expert's, or its own replay of it), and then with
probability `copy` (per game, fixed across epochs: temperature 0 gives one answer per prompt);
with k2 > 1 the extra memories confuse it with probability 1 − `mix`. Power is the share of
simulated experiments whose exact McNemar test (final epoch, two-sided) gives p < α.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from memrl.core.seeding import derive_seed
from memrl.memory.retrieval import PhaseBOptions, phase_a, rank_pool, tie_precedence
from memrl.memory.q_update import update_q

TIES = ("oldest", "newest", "random")
ORDERS = ("history", "shuffled")
K2S = (1, 3)
ALPHA = 0.05


@dataclass(frozen=True)
class Condition:
    ties: str
    order: str
    k2: int

    @property
    def name(self) -> str:
        return f"{self.ties}_{self.order}_k{self.k2}"


CONDITIONS = [Condition(t, o, k) for k in K2S for o in ORDERS for t in TIES]


@dataclass(frozen=True)
class StudentModel:
    """What the student does with what it is shown (measured on the demo's 16 games before this
    experiment: the demo's earlier runs, results/demo_alfworld_gemma270m/ and its choices/):
    - `copy`: P(solve | shown a solution of this game, one memory): 9 of the 10 games whose
      expert trajectory fits the student's cap were solved in the demo's epoch 2 (0.9);
    - `mix`: the share of those kept when three memories are shown: RAG on the expert's bank
      solved 5 games with three memories against 7 with one (5/7 ≈ 0.7);
    - shown no solution of this game (its failed attempt, its own failures, another game's
      memory): never solved (0 of 16 in every such demo run; no memory 0 of 16)."""

    copy: float = 0.9
    mix: float = 0.7


@dataclass
class _Entry:
    mid: str
    key: int  # index of the intent (games sharing a task sentence share one)
    game: int  # the game whose episode it is
    solved: bool
    order: int
    q: float = 0.0


@dataclass
class Games:
    """The experiment's games as the simulation needs them: each game's intent key and the
    cosine similarity between intents (the run's embedder)."""

    keys: list[int]
    sim: np.ndarray  # [key, key]
    ids: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.keys)


def _bank(games: Games, cond: Condition, seed: int) -> list[_Entry]:
    """The history bank: per game its failed attempt and the expert's solution; the attempt is
    the older one in every game (`history`) or by a coin per game (`shuffled`)."""
    out: list[_Entry] = []
    for g in range(games.n):
        first = cond.order == "history" or derive_seed(seed, "history-bank", g) % 2 == 0
        pair = [("attempt", False), ("expert", True)] if first else [("expert", True), ("attempt", False)]
        for label, solved in pair:
            out.append(_Entry(f"{label}:{g}", games.keys[g], g, solved, len(out)))
    return out


def _shown(bank: list[_Entry], games: Games, g: int, cond: Condition, method: str, rseed: int,
           k1: int = 5, lam: float = 0.5) -> list[_Entry]:
    sims = games.sim[games.keys[g], [e.key for e in bank]]
    prec = tie_precedence(np.array([e.order for e in bank]), [e.mid for e in bank], cond.ties, rseed)
    keys = [e.key for e in bank]
    if method == "rag":
        idx = phase_a(sims, delta=-1.0, k1=cond.k2, gate=False, ties="oldest", keys=keys, orders=prec)
        return [bank[i] for i in idx]
    pool = phase_a(sims, delta=-1.0, k1=k1, gate=False, ties="include", keys=keys, orders=prec)
    ranked, _ = rank_pool(sims[pool], np.array([bank[i].q for i in pool]), PhaseBOptions(lam=lam, k2=cond.k2))
    return [bank[pool[i]] for i in ranked[:cond.k2]]


def simulate(games: Games, cond: Condition, method: str, copyable: np.ndarray, mixes: np.ndarray,
             epochs: int = 3, alpha: float = 0.3, q_init_failed: float | None = None,
             seed: int = 0) -> np.ndarray:
    """One simulated run: success[epoch, game], batch size 1, games in order every epoch."""
    bank = _bank(games, cond, seed)
    out = np.zeros((epochs, games.n), dtype=bool)
    for t in range(1, epochs + 1):
        for g in range(games.n):
            shown = _shown(bank, games, g, cond, method, derive_seed(seed, "retrieve", t, g))
            useful = any(e.game == g and e.solved for e in shown)
            win = bool(useful and copyable[g] and (cond.k2 == 1 or mixes[g]))
            out[t - 1, g] = win
            if method == "memrl":
                for e in shown:
                    e.q = update_q(e.q, 1.0 if win else -1.0, alpha)
            q0 = q_init_failed if (q_init_failed is not None and not win) else 0.0
            bank.append(_Entry(f"e{t}:{g}", games.keys[g], g, win, len(bank), q0))
    return out


def exact_mcnemar_p(b: int, c: int) -> float:
    """The exact McNemar test on the discordant counts: a two-sided binomial (sign) test."""
    from memrl.demo.utility_experiment import sign_test

    return sign_test(b, c)


@dataclass
class Prediction:
    condition: str
    variant: str
    n_games: int
    sr: dict[str, list[float]]  # mean simulated SR per epoch, per method
    b: float  # mean discordant counts at the final epoch
    c: float
    power: float  # P(exact McNemar p < α), final epoch, MemRL against RAG
    p_pos: float  # P(p < α and b > c)

    def to_dict(self) -> dict:
        return {"condition": self.condition, "variant": self.variant, "n_games": self.n_games,
                "sr": {k: [round(x, 3) for x in v] for k, v in self.sr.items()},
                "b": round(self.b, 2), "c": round(self.c, 2), "power": round(self.power, 3),
                "power_memrl_better": round(self.p_pos, 3)}


def predict(games: Games, cond: Condition, student: StudentModel, *, n_sims: int = 400,
            epochs: int = 3, variant: str = "paper", seed: int = 0, fits: np.ndarray | None = None) -> Prediction:
    """Simulated SR per epoch for both methods, the discordant counts and the power. `fits`:
    which games' solutions the student can replay within its steps (default: all); the others
    are never solved."""
    rng = np.random.default_rng(derive_seed(seed, "power", cond.name, variant, games.n))
    q_fail = -1.0 if variant == "q_init_failed" else None
    srs = {"memrl": np.zeros(epochs), "rag": np.zeros(epochs)}
    bs, cs, hits, pos = [], [], 0, 0
    for i in range(n_sims):
        copyable = (rng.random(games.n) < student.copy) & (True if fits is None else np.asarray(fits, bool))
        mixes = rng.random(games.n) < student.mix
        run_seed = int(rng.integers(0, 2**31 - 1))
        m = simulate(games, cond, "memrl", copyable, mixes, epochs, q_init_failed=q_fail, seed=run_seed)
        r = simulate(games, cond, "rag", copyable, mixes, epochs, seed=run_seed)
        srs["memrl"] += m.mean(axis=1)
        srs["rag"] += r.mean(axis=1)
        b = int((m[-1] & ~r[-1]).sum())
        c = int((~m[-1] & r[-1]).sum())
        bs.append(b)
        cs.append(c)
        if exact_mcnemar_p(b, c) < ALPHA:
            hits += 1
            pos += b > c
    return Prediction(cond.name, variant, games.n, {k: list(v / n_sims) for k, v in srs.items()},
                      float(np.mean(bs)), float(np.mean(cs)), hits / n_sims, pos / n_sims)


def games_from_intents(intents: Sequence[str], embed, ids: Sequence[str] = ()) -> Games:
    """`Games` from the games' intents (in task order) and an embedder (`embed(texts)` →
    unit rows): games with the same sentence share a key."""
    distinct = list(dict.fromkeys(intents))
    vecs = np.asarray(embed(distinct), dtype=np.float64)
    sim = vecs @ vecs.T
    np.fill_diagonal(sim, 1.0)
    return Games([distinct.index(s) for s in intents], sim, list(ids))
