"""MemRL's utility update (docs/design.md §4), as a pure function: after an episode, every
memory injected into it moves toward the episode's reward,

    Q ← Q + α (r − Q),

a Monte-Carlo estimate of the memory's value (r = `reward_success` on success, `reward_failure`
otherwise), optionally bounded below (`q_floor`, the official Lifelong code's 0). The memory
module applies it in task order to the Q values as of batch start (`MemRLMemory.plan_update`).
"""

from __future__ import annotations


def update_q(q: float, reward: float, alpha: float, floor: float | None = None) -> float:
    """Q ← Q + α(r − Q), then at least `floor` when one is given."""
    new = q + alpha * (reward - q)
    return max(new, floor) if floor is not None else new
