"""The env seam: an adapter lists tasks and plays one episode given memories and an LLM."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

from memrl.records import EpisodeResult, RetrievedMemory, Task

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM


class Env(Protocol):
    name: str

    def tasks(self) -> list[Task]:
        """The tasks of the configured split, in a stable order, identical every epoch."""

    def solve(
        self,
        task: Task,
        memories: Sequence[RetrievedMemory],
        llm: "EpisodeLLM | None",
        seed: int,
    ) -> EpisodeResult:
        """Play one episode. Benchmark-specific prompting lives here, not in memory modules.

        `llm` is None for agents that need no model (oracles such as ALFWorld's expert).
        Errors inside the episode are returned in `EpisodeResult.errors`, not raised.
        """

    def close(self) -> None: ...
