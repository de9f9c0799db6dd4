"""Spend limits for a whole run: `llm.budget_usd`, `llm.budget_tokens` (null = none).

Spend is what the run's model clients paid for, over every session of the run: backend
calls' cost and tokens (prompt + completion), cache hits excluded, every client counted
(the solver, which also writes memories, and a judge). Earlier sessions' spend comes from
the run card (`sessions[*].spend`; a session recorded before budgets existed counts its
`llm` totals), this session's from the clients' totals.

Before each batch the run asks whether the batch would take the spend past a budget: the
spend so far plus the batch's size times the most any committed batch of this session cost
per episode. An async run (runner.schedule=async) asks before each episode starts, for it
and the episodes in flight, at the session's average cost per committed episode; when the
answer is no it starts nothing more, commits what is in flight, then stops.
The run then stops at that commit boundary (status `budget`); the same command
with a higher budget continues. The estimate learns from the batches played, so the first
batch that makes paid calls always runs, and a batch dearer than every one before it can
end above the budget by the difference; the run card says what was spent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from memrl.llm.bill import Spend, clients_spend


@dataclass(frozen=True)
class Budget:
    usd: float | None = None
    tokens: int | None = None

    @property
    def is_set(self) -> bool:
        return self.usd is not None or self.tokens is not None

    def passed(self, spend: Spend) -> str | None:
        """The budget `spend` goes past, spelled as its config key, or None."""
        if self.usd is not None and spend.usd > self.usd:
            return f"llm.budget_usd={self.usd:g}"
        if self.tokens is not None and spend.tokens > self.tokens:
            return f"llm.budget_tokens={self.tokens}"
        return None

    def reached(self, spend: Spend) -> str | None:
        """Like `passed`, for a spend already at the budget (nothing more may be spent)."""
        if self.usd is not None and spend.usd >= self.usd:
            return f"llm.budget_usd={self.usd:g}"
        if self.tokens is not None and spend.tokens >= self.tokens:
            return f"llm.budget_tokens={self.tokens}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe(spend: Spend, budget: Budget) -> str:
    usd = f"${spend.usd:.4f}" + (f" of ${budget.usd:g}" if budget.usd is not None else "")
    tok = f"{spend.tokens:,} tokens" + (f" of {budget.tokens:,}" if budget.tokens is not None else "")
    unpriced = f" (+ {spend.unpriced_calls:,} unpriced calls)" if spend.unpriced_calls else ""
    if spend.unseen_tries:  # replies never read: perhaps billed, at most the bound (memrl.llm.bill)
        unbounded = f", {spend.unseen_unbounded:,} of them unbounded" if spend.unseen_unbounded else ""
        unpriced += f" (+ {spend.unseen_tries:,} unseen tries, at most ${spend.unseen_bound_usd:.4f}{unbounded})"
    return f"{usd}{unpriced}, {tok}"


class BudgetMeter:
    """The run's spend against its budget (module doc). `clients` returns the model clients
    whose totals count; `prior` is what earlier sessions spent."""

    def __init__(self, budget: Budget, clients: Callable[[], Iterable[Any]], prior: Spend = Spend()) -> None:
        self.budget = budget
        self._clients = clients
        self.prior = prior
        self._per_episode = Spend()  # the most a committed batch of this session cost per episode
        self._episodes = 0  # async: episodes this session committed
        self._last = self.session()

    def session(self) -> Spend:
        return clients_spend(self._clients())

    def spent(self) -> Spend:
        return self.prior + self.session()

    def estimate(self, n_tasks: int) -> Spend:
        return Spend(self._per_episode.usd * n_tasks, self._per_episode.tokens * n_tasks)

    def problem(self, n_tasks: int) -> str | None:
        """Why the next batch (of `n_tasks` episodes) must not start, or None."""
        if not self.budget.is_set:
            return None
        now = self.spent()
        fix = "raise the budget and run the same command to continue"
        key = self.budget.reached(now)
        if key is not None:
            return f"budget reached: {describe(now, self.budget)} spent ({key}); {fix}"
        guess = self.estimate(n_tasks)
        key = self.budget.passed(now + guess)
        if key is not None:
            return (f"budget: the next batch ({n_tasks} episodes, about ${guess.usd:.4f} / "
                    f"{guess.tokens:,} tokens by the batches so far) would pass {key}; "
                    f"{describe(now, self.budget)} spent; {fix}")
        return None

    def note_batch(self, n_tasks: int) -> None:
        now = self.session()
        cost, self._last = now - self._last, now
        if n_tasks > 0:
            self._per_episode = Spend(max(self._per_episode.usd, cost.usd / n_tasks),
                                      max(self._per_episode.tokens, -(-cost.tokens // n_tasks)))

    def note_episodes(self, n_tasks: int) -> None:
        """Async runs (runner.schedule=async) commit one episode at a time while others are
        in flight, so the spend between two commits is no one episode's cost: the estimate
        per episode is the session's spend over the episodes it committed (spend of episodes
        still in flight counted too, so it errs high)."""
        self._episodes += n_tasks
        now = self.session()
        self._last = now
        if self._episodes > 0:
            self._per_episode = Spend(now.usd / self._episodes, -(-now.tokens // self._episodes))

    def postfix(self) -> dict[str, str]:
        now = self.spent()
        if not self.budget.is_set and now.usd == 0 and now.tokens == 0:
            return {}
        out: dict[str, str] = {}
        if self.budget.usd is not None or now.usd > 0:
            out["spend"] = f"${now.usd:.4f}" + (f"/${self.budget.usd:g}" if self.budget.usd is not None else "")
        if self.budget.tokens is not None:
            out["tokens"] = f"{now.tokens:,}/{self.budget.tokens:,}"
        elif self.budget.usd is None:
            out["tokens"] = f"{now.tokens:,}"
        return out
