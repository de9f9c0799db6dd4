"""One episode's handle on the run's model (`EpisodeLLM`, from `LLMClient.episode`): it names
each call's sample (`<prefix>/<purpose>/<n>`), applies the episode's seed and the client's
defaults, and meters the episode's use (`meter`: each call's purpose and cache key in
`model_calls`, its tokens and cost, failed calls with what their tries cost)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memrl.llm.base import Content, LLMError, UsageMeter, as_content

if TYPE_CHECKING:
    from memrl.llm.base import Backend, LLMRequest, LLMResponse
    from memrl.llm.profile import ModelProfile


class EpisodeClient(Protocol):
    """What an episode's handle uses of its client (memrl.llm.client.LLMClient, which makes it)."""

    backend: "Backend"
    supports_images: bool
    model_id: str
    profile: "ModelProfile"

    def request(self, messages: Any, **kw: Any) -> "LLMRequest": ...

    def complete(self, request: "LLMRequest") -> "LLMResponse": ...

    def key(self, request: "LLMRequest") -> str: ...


class EpisodeLLM:
    """One episode's handle: names each sample, applies defaults, meters usage.

    `supports_images` tells an env, before it builds a prompt, whether the model takes images.
    """

    def __init__(self, client: EpisodeClient, sample_prefix: str, seed: int | None) -> None:
        self.client = client
        self.sample_prefix = sample_prefix
        self.seed = seed
        self.meter = UsageMeter()
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def supports_images(self) -> bool:
        return self.client.supports_images

    @property
    def model_id(self) -> str:
        return self.client.model_id

    @property
    def honors_stop(self) -> bool:
        """Whether the provider takes stop sequences (else the client cuts the reply at them:
        an env whose reply format spans lines may rather send none and parse the reply)."""
        return self.client.profile.honors_stop

    @property
    def embedded(self) -> bool:
        """True for a model run in-process (the small local models), for envs that choose
        prompts to suit it."""
        return bool(getattr(self.client.backend, "embedded", False))

    def complete(
        self,
        prompt: str | Sequence[tuple[str, Any]],
        *,
        purpose: str,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
        temperature: float | None = None,
        response_format: str | None = None,
        budget_key: str = "",
    ) -> str:
        """Ask the model; a plain string is one user message. Content may be a string or a
        sequence of parts (text and images). `max_tokens` is the answer's budget (a reasoning
        model gets headroom on top: memrl.llm.profile); `budget_key` names the setting it
        comes from, for the error a budget that ran out raises. Raises `LLMError` on failure."""
        if isinstance(prompt, str):
            messages: tuple[tuple[str, Content], ...] = (("user", prompt),)
        else:
            messages = tuple((str(role), as_content(content)) for role, content in prompt)
        with self._lock:
            n = self._counts[purpose]
            self._counts[purpose] += 1
        request = self.client.request(
            messages, purpose=purpose, max_tokens=max_tokens, stop=stop, temperature=temperature,
            response_format=response_format, sample_id=f"{self.sample_prefix}/{purpose}/{n}",
            seed=self.seed, budget_key=budget_key)
        try:
            resp = self.client.complete(request)
        except LLMError as exc:
            with self._lock:
                self.meter.add_failure(purpose, self.client.key(request), str(exc),
                                       billed=getattr(exc, "billed", None))
            raise
        with self._lock:
            self.meter.add(resp, purpose)
        return resp.text
