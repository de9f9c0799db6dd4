"""The embedded offline model: a GGUF run in-process by llama-cpp-python (no server).

Which file: `model_path` (any GGUF), else the packaged model named by `model`
(`memrl.llm.local_models`: Gemma 3 270M base, SmolLM2-135M-Instruct). `model_id` is derived
from the file's content (name + hash; packaged files keep a stable id), so two files never
share cache entries or a run-card label. It is also the model's identity (`identity()`, the
cache key's model part and what the run card's resume check compares, as for a served model
in memrl.llm.litellm_backend): a run resumed with another file is refused.

Two ways to turn a request into a prompt (`mode`):

- `completion` (any model; the only way for a base model such as Gemma 270M, whose file has
  no chat template): render_prompt(messages) = the contents of all messages, in order,
  joined by one blank line ("\\n\\n"); roles are dropped. The last message (normally the
  user's) is the text the model continues, so end it where the answer should begin.
- `chat` (a model whose file carries a chat template, e.g. SmolLM2-Instruct): the messages
  go through that template (with its generation prompt), and the template's end-of-turn
  token also stops generation. The model id gets a `/chat` suffix: the same request gives
  another answer in the other mode.

Multi-part content contributes its text parts. The model takes text only
(`supports_images = False`): the client refuses image content before any call, and
`generate` refuses it too, before the model is loaded.

Sampling: temperature 0 is greedy. Above 0, the request's temperature / top_p apply on top of
llama.cpp's usual top_k=40 and min_p=0.05 (constructor arguments; sampling the full
vocabulary makes small base models emit junk such as `<start_of_image>`).

Determinism and prefix reuse. An answer must not depend on which call came before (resumes
and cache replays must be identical). llama.cpp's numbers for a token depend on how the
prompt was cut into evaluation batches, so naively keeping the common prefix of the previous
prompt in the KV cache changes the logits slightly. With `reuse_prefix` (default), prompts
are always evaluated in blocks of `prefix_block` tokens aligned to absolute positions 0, B,
2B, ... (B = llama.cpp's batch size), and only *whole blocks* of the previous prompt that
match the new prompt token for token are kept: every kept block was computed exactly as a
fresh evaluation of the new prompt would compute it (same tokens, same batch, same earlier
state), and the rest is evaluated in the same aligned blocks a fresh evaluation uses. The
outputs are therefore the same as with `reuse_prefix: false` (which evaluates every prompt
from scratch); `tests/llm/test_local_llm.py` and `scripts/bench_local_prefix.py` check it on real
prompts. An ALFWorld episode's prompts share everything but the newest step, so most of each
prompt is reused.

Threads: `n_threads` is used for decoding and for prompt evaluation alike; None leaves
llama.cpp's defaults (half the cores for decoding, all of them for prompts). llama.cpp's
threads wait for each other by spinning, so on a machine whose cores are busy with other work
every thread beyond the free cores makes evaluation many times slower (seen on 2 cores busy
with other jobs: about a tenth of the one-thread speed with 2 threads): `configs/llm/local.yaml`
uses 1 thread; `llm.n_threads=2` is faster on an idle 2-core machine.

Speed figures: `stats()` counts prompt tokens sent and actually evaluated, decoded tokens and
the time llama.cpp spent on each (its own perf counters); `LLMClient.totals()` copies them
into the run card.
"""

from __future__ import annotations

import sys

import logging
import threading
import time
from pathlib import Path
from typing import Any, Literal, Sequence

from memrl.llm.base import Content, LLMRequest, LLMResponse, UnsupportedContentError, content_text, has_images
from memrl.llm.local_models import DEFAULT_MODEL, ensure_gemma_file, model_id_for, packaged

log = logging.getLogger(__name__)

MODEL_ID = packaged(DEFAULT_MODEL).model_id  # the default model's id
DEFAULT_BLOCK = 64


def ensure_model_file(cache_dir: str | Path | None = None) -> Path:
    """Path of the default (Gemma) GGUF, assembling it first if needed."""
    return ensure_gemma_file(cache_dir)


def _sampler_seed(seed: int) -> int:
    # llama.cpp takes a uint32 seed and reads 0xFFFFFFFF as "pick one at random".
    return int(seed) % 0xFFFFFFFF


def render_prompt(messages: tuple[tuple[str, Content], ...]) -> str:
    """Plain-text rendering of chat messages for a base model (see module docstring)."""
    return "\n\n".join(content_text(content) for _, content in messages)


def reusable_prefix(trusted: Sequence[int], tokens: Sequence[int], block: int) -> int:
    """How many leading tokens of `tokens` may keep their cached state: whole blocks of
    `block` tokens inside the common prefix of `trusted` (the cached tokens known to equal a
    fresh evaluation) and `tokens`, always short of the last token (its logits are needed)."""
    if block <= 0 or not trusted:
        return 0
    limit = min(len(trusted), len(tokens) - 1)
    n = 0
    while n < limit and trusted[n] == tokens[n]:
        n += 1
    return (n // block) * block


# The backend's work counters (`LocalLlamaBackend.stats`), summed over calls
SPEED_COUNTERS = {"calls": 0, "prompt_tokens": 0, "prompt_tokens_evaluated": 0, "prompt_eval_s": 0.0,
                  "decode_tokens": 0, "decode_s": 0.0, "wall_s": 0.0}


def speed_rates(counts: dict[str, Any]) -> dict[str, float | None]:
    """Tokens/s from `SPEED_COUNTERS`: prompt tokens evaluated, prompt tokens sent (what the
    prefix reuse buys), decoded; and the share of sent prompt tokens that came from the reused
    prefix. None where nothing was timed."""
    def per(a: str, b: str) -> float | None:
        return counts[a] / counts[b] if counts.get(b) else None
    sent = counts.get("prompt_tokens") or 0
    return {"prompt_tokens_per_s": per("prompt_tokens_evaluated", "prompt_eval_s"),
            "effective_prompt_tokens_per_s": per("prompt_tokens", "prompt_eval_s"),
            "decode_tokens_per_s": per("decode_tokens", "decode_s"),
            "reused_share": 1 - counts["prompt_tokens_evaluated"] / sent if sent else None}


_LLAMA_LOG: list[Any] = []  # the installed log callback (kept alive for the C library)
# lines llama.cpp logs at its error level that are no error: Gemma 3's sliding-window cache
# notice, at every load (this llama.cpp build, 0.3.36)
_NOT_ERRORS = (b"llama_kv_cache_iswa: using full-size SWA cache",)


def quiet_llama_log() -> None:
    """llama.cpp's own log, as a run wants it: its errors on stderr, nothing else (its
    informational lines would break the progress bar and say nothing a user acts on; the SWA
    cache notice it logs at error level at every load is dropped too, `_NOT_ERRORS`). Once per
    process."""
    if _LLAMA_LOG:
        return
    import ctypes

    import llama_cpp

    last = [0]

    @llama_cpp.llama_log_callback
    def callback(level: int, text: bytes, user_data: Any) -> None:
        level = last[0] if level == 5 else level  # 5: the previous line continues
        last[0] = level
        if level == 3 and not text.startswith(_NOT_ERRORS):  # GGML_LOG_LEVEL_ERROR
            sys.stderr.write(text.decode("utf-8", "replace"))

    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    _LLAMA_LOG.append(callback)


class LocalLlamaBackend:
    """Completion (or chat) with an embedded GGUF model; loads lazily; one call at a time."""

    supports_images = False
    embedded = True  # runs in-process (envs may choose prompts that suit small local models)
    greedy_ignores_seed = True  # temperature 0 is greedy: the seed changes nothing (cache keys)
    # the preflight's answers stop here: free, and no cut is reported (memrl.control.preflight)
    probe_answer_tokens = 4

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        top_k: int = 40,
        min_p: float = 0.05,
        model: str | None = None,
        mode: Literal["completion", "chat"] = "completion",
        reuse_prefix: bool = True,
        prefix_block: int = DEFAULT_BLOCK,
        repeat_penalty: float = 1.0,
    ) -> None:
        self.model_path = Path(model_path) if model_path else None
        self.packaged = None if self.model_path else packaged(model or DEFAULT_MODEL)
        if mode not in ("completion", "chat"):
            raise ValueError(f"llm.mode: completion | chat (got {mode!r})")
        if mode == "chat" and self.packaged is not None and not self.packaged.chat_template:
            raise ValueError(f"llm.mode=chat: {self.packaged.name} is a base model without a chat "
                             "template; use mode=completion")
        self.mode = mode
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.seed = int(seed)
        self.top_k = int(top_k)
        self.min_p = float(min_p)
        self.repeat_penalty = float(repeat_penalty)
        self.reuse_prefix = bool(reuse_prefix)
        self.block = max(1, int(prefix_block))
        self._llm: Any = None
        self._chat: Any = None
        self._trusted: list[int] = []
        self._model_id: str | None = None
        self._lock = threading.Lock()
        self._stats = dict(SPEED_COUNTERS)

    # -- identity ---------------------------------------------------------------------
    def _path(self) -> Path:
        if self.model_path is not None:
            if not self.model_path.is_file():
                raise FileNotFoundError(f"llm.model_path: no model file at {self.model_path}")
            return self.model_path
        assert self.packaged is not None
        return self.packaged.locate(None)

    @property
    def model_id(self) -> str:
        """`local/<name>` for a packaged file, `local/<stem>@<sha12>` for any other (module
        docstring); `/chat` appended in chat mode."""
        if self._model_id is None:
            if self.model_path is None and self.packaged is not None:
                base = self.packaged.model_id  # the packaged file: its id without hashing it
            else:
                base = model_id_for(self._path())
            self._model_id = base + ("/chat" if self.mode == "chat" else "")
        return self._model_id

    def identity(self) -> dict[str, Any]:
        """What the model is (memrl.control.preflight, the run card's `model_identity`): `key` is the
        model id (the cache identity), `source` how it was found, `file` where it was read."""
        source = (f"packaged model {self.packaged.name}" if self.model_path is None and self.packaged
                  else "model file (name and sha256)")
        return {"model": self.model_id, "key": self.model_id, "source": source,
                "file": str(self._path())}

    # -- loading ----------------------------------------------------------------------
    def _load(self) -> Any:
        if self._llm is None:
            from llama_cpp import Llama

            quiet_llama_log()
            self._llm = Llama(
                model_path=str(self._path()),
                n_ctx=self.n_ctx,
                n_batch=self.block,
                n_ubatch=self.block,  # one llama.cpp batch = one aligned block
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,  # None: llama.cpp's defaults (see __init__)
                seed=self.seed,
                verbose=False,
            )
            if self.mode == "chat":
                self._chat = self._chat_formatter(self._llm)
        return self._llm

    @staticmethod
    def _chat_formatter(llm: Any) -> Any:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"llm.mode=chat: {llm.model_path} carries no chat template; use mode=completion")
        def special(tok: int) -> str:
            return llm.detokenize([tok], special=True).decode("utf-8", errors="ignore")

        return Jinja2ChatFormatter(template=template, eos_token=special(llm.token_eos()),
                                   bos_token=special(llm.token_bos()))

    def _tokens(self, llm: Any, request: LLMRequest, budget: int) -> tuple[list[int], list[str]]:
        """The prompt's token ids (cut to `budget`) and the extra stop strings of the mode."""
        if self.mode == "chat":
            messages = [{"role": role, "content": content_text(content)} for role, content in request.messages]
            rendered = self._chat(messages=messages)
            tokens = llm.tokenize(rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special,
                                  special=True)
            extra = rendered.stop if isinstance(rendered.stop, list) else [rendered.stop] if rendered.stop else []
            return self._cut(llm, tokens, budget), [s for s in extra if s]
        tokens = llm.tokenize(render_prompt(request.messages).encode("utf-8"), add_bos=True, special=False)
        return self._cut(llm, tokens, budget), []

    # -- one call ---------------------------------------------------------------------
    def generate(self, request: LLMRequest) -> LLMResponse:
        if has_images(request.messages):
            raise UnsupportedContentError(f"{self.model_id} takes text only; the request holds an image")
        from llama_cpp import llama_perf_context

        with self._lock:
            llm = self._load()
            max_tokens = max(1, min(int(request.max_tokens), self.n_ctx - 16))
            tokens, extra_stop = self._tokens(llm, request, self.n_ctx - max_tokens)
            keep = reusable_prefix(self._trusted, tokens, self.block) if self.reuse_prefix else 0
            if keep:
                # llama-cpp-python keeps the cached state of the first n_tokens tokens where
                # they match the new prompt: cut it back to the whole blocks chosen above
                llm.n_tokens = keep
            else:
                llm.reset()  # evaluate from scratch
            self._trusted = []  # until this call has evaluated its prompt
            before = llama_perf_context(llm.ctx)
            t0 = time.perf_counter()
            out = llm.create_completion(
                tokens,
                max_tokens=max_tokens,
                temperature=float(request.temperature),
                top_p=float(request.top_p),
                top_k=self.top_k,
                min_p=self.min_p,
                repeat_penalty=self.repeat_penalty,
                stop=list(request.stop) + extra_stop,
                seed=_sampler_seed(self.seed if request.seed is None else request.seed),
            )
            wall = time.perf_counter() - t0
            after = llama_perf_context(llm.ctx)
            # whole blocks of this prompt were evaluated exactly as a fresh evaluation would
            self._trusted = tokens[: (len(tokens) // self.block) * self.block]
            self._count(len(tokens), len(tokens) - keep, before, after, wall)
        usage = out.get("usage") or {}
        return LLMResponse(
            text=out["choices"][0]["text"] or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cost_usd=0.0,
            model=self.model_id,
        )

    def _count(self, sent: int, evaluated: int, before: Any, after: Any, wall: float) -> None:
        s = self._stats
        s["calls"] += 1
        s["prompt_tokens"] += sent
        s["prompt_tokens_evaluated"] += evaluated
        # llama.cpp counts batches of one token as decoding: a one-token prompt remainder
        # lands there, and every generated token
        s["prompt_eval_s"] += max(0.0, after.t_p_eval_ms - before.t_p_eval_ms) / 1000
        s["decode_tokens"] += max(0, after.n_eval - before.n_eval)
        s["decode_s"] += max(0.0, after.t_eval_ms - before.t_eval_ms) / 1000
        s["wall_s"] += wall

    def stats(self) -> dict[str, Any]:
        """Work done so far (see module docstring), with the derived rates in tokens/s."""
        with self._lock:
            s = dict(self._stats)
        s["reuse_prefix"] = self.reuse_prefix
        s["prefix_block"] = self.block
        s.update(speed_rates(s))
        return s

    @staticmethod
    def _cut(llm: Any, tokens: list[int], budget: int) -> list[int]:
        """`tokens` cut from the left to at most `budget` tokens (a leading BOS stays)."""
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
