"""On-disk response cache for model calls (SQLite, WAL, shareable between processes).

The key is a hash of everything that can change an answer: the backend's model id, the
messages and the sampling parameters. `sample_id` joins the key only when temperature > 0:
a temperature-0 answer is deterministic, so identical prompts share one entry, while
sampled answers stay distinct per sample and replay exactly on a rerun. Nothing in a key names
the memory method: the sample id is seed / epoch / task / purpose / call index (memrl.control.runner,
EpisodeLLM), so the methods of a sweep share every answer whose prompt is the same (all of an
empty bank's first batch: tests/llm/test_shared_work.py).

Multi-part content (text and images) enters the key as a list of parts, an image by the
sha256 of its URL; plain-string content enters as the string, and `response_format` only
when it is set, so the key of a text-only request is the same as before either existed.

Claims (in-flight deduplication across processes): runs launched in parallel on one cache
must not pay twice for the same request. Before calling the model on a miss, a client
`claim`s the key (a row in the `claims` table: owner, pid, host, time); a second process that
finds the key claimed waits for the owner's answer to land in the cache instead of calling
(`LLMClient`, memrl.llm.client, polls `get`). The owner `release`s the claim when its call
ends, answered or failed; a claim whose process is gone (same host, pid not alive) or older
than `CLAIM_LEASE_S` is taken over, so a killed run never blocks another. Within one process
the client deduplicates with an event per key, before any claim is made.

The prompt store: beside each response the cache keeps the request it answered (the key's
own payload, `request_payload`, zlib-compressed, in a second table), so the key an episode
record lists for each model call (`model_calls[].key`) finds the prompt as well as the
answer (`ResponseCache.lookup`, `memrl cache prompt KEY`). A request is stored when it is
first asked, before the model answers, so a call that failed keeps its prompt too; an older
cache learns the prompts of its hits as they are asked again.

A cache file that cannot be opened, read or written (a full disk, a read-only file system,
a corrupt file) raises `memrl.core.storage.StorageError` naming the file and the cause.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

from memrl.core.lock import pid_alive
from memrl.core.storage import writing
from memrl.llm.base import Content, ImagePart, LLMRequest, LLMResponse

_SCHEMA = "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_CLAIMS = ("CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, "
           "pid INTEGER NOT NULL, host TEXT NOT NULL, since REAL NOT NULL)")
# a claim older than this is taken over even if its process seems alive (another host, a
# reused pid): longer than any one call with its retries is expected to take
CLAIM_LEASE_S = 900.0
_REQUESTS = "CREATE TABLE IF NOT EXISTS requests (key TEXT PRIMARY KEY, request BLOB NOT NULL)"


def _key_content(content: Content) -> object:
    if isinstance(content, str):
        return content  # exactly what text-only keys always held
    return [
        {"image_sha256": hashlib.sha256(p.url.encode("utf-8")).hexdigest()}
        if isinstance(p, ImagePart)
        else {"text": p.text}
        for p in content
    ]


def request_payload(model_id: str, request: LLMRequest) -> dict[str, Any]:
    """Everything of a request that can change its answer, as plain JSON (what the key
    hashes, and what the prompt store keeps)."""
    payload: dict[str, Any] = {
        "model": model_id,
        "messages": [[role, _key_content(content)] for role, content in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": float(request.temperature),
        "top_p": float(request.top_p),
        "stop": list(request.stop),
        "seed": request.seed,
    }
    if request.temperature > 0:
        payload["sample_id"] = request.sample_id
    if request.response_format is not None:
        payload["response_format"] = request.response_format
    return payload


def payload_key(payload: dict[str, Any]) -> str:
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def request_key(model_id: str, request: LLMRequest) -> str:
    """Stable sha256 hex digest identifying one (model, request) answer."""
    return payload_key(request_payload(model_id, request))


# fields of a response kept when they differ from the default (LLMResponse's docstring)
_OPTIONAL: dict[str, type] = {"reasoning_tokens": int, "cached_prompt_tokens": int, "finish_reason": str,
                              "priced": bool, "attempts": int, "stop_applied": bool}

WHAT = "the LLM response cache"
HINT = ("it holds paid responses: free space / fix the file system, or move a corrupt file "
        "aside (or point llm.cache_path elsewhere), then run the same command again")


class ResponseCache:
    """Thread-safe key → `LLMResponse` store; one connection guarded by a lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        # who this process is in the claims table (a fresh id per open cache)
        self.owner = uuid.uuid4().hex
        self._host = socket.gethostname()
        with writing(self.path, WHAT, hint=HINT, verb="open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # timeout: wait for other processes' write locks instead of failing at once.
            self._conn = sqlite3.connect(str(self.path), timeout=60.0, check_same_thread=False)
            with self._lock:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute(_SCHEMA)
                self._conn.execute(_CLAIMS)
                self._conn.execute(_REQUESTS)
                self._conn.commit()
        self._stored: set[str] = set()  # keys whose request this process knows is stored

    def get(self, key: str) -> LLMResponse | None:
        with writing(self.path, WHAT, hint=HINT, verb="read"), self._lock:
            row = self._conn.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        data = json.loads(row[0])
        return LLMResponse(
            text=data["text"],
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            cost_usd=float(data.get("cost_usd", 0.0)),
            cached=True,
            model=data.get("model", ""),
            **{name: kind(data[name]) for name, kind in _OPTIONAL.items() if name in data},
        )

    def put(self, key: str, resp: LLMResponse) -> None:
        record: dict[str, Any] = {
            "text": resp.text,
            "prompt_tokens": resp.prompt_tokens,
            "completion_tokens": resp.completion_tokens,
            "cost_usd": resp.cost_usd,
            "model": resp.model,
        }
        # what a reply says beyond its text, only where it is not the default (older entries
        # and plain models keep the entries they had)
        defaults = LLMResponse(text="")
        record.update({name: getattr(resp, name) for name in _OPTIONAL
                       if getattr(resp, name) != getattr(defaults, name)})
        value = json.dumps(record, ensure_ascii=False)
        with writing(self.path, WHAT, hint=HINT), self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, value)
            )
            self._conn.commit()

    # -- claims (module doc) ------------------------------------------------------------
    def claim(self, key: str) -> bool:
        """True when this process may call the model for `key` (the claim is now its own);
        False while another live process holds it."""
        now = time.time()
        with writing(self.path, WHAT, hint=HINT), self._lock:
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO claims (key, owner, pid, host, since) VALUES (?, ?, ?, ?, ?)",
                (key, self.owner, os.getpid(), self._host, now))
            if cur.rowcount == 1:
                self._conn.commit()
                return True
            row = self._conn.execute("SELECT owner, pid, host, since FROM claims WHERE key = ?",
                                     (key,)).fetchone()
            if row is None:  # released in between: claim it now
                self._conn.execute("INSERT OR IGNORE INTO claims (key, owner, pid, host, since) "
                                   "VALUES (?, ?, ?, ?, ?)", (key, self.owner, os.getpid(), self._host, now))
                self._conn.commit()
                return True
            owner, pid, host, since = row
            if owner == self.owner:
                self._conn.commit()
                return True
            stale = (host == self._host and not pid_alive(int(pid))) or now - float(since) > CLAIM_LEASE_S
            if stale:  # its process is gone: take it over (only if nobody else did first)
                cur = self._conn.execute(
                    "UPDATE claims SET owner = ?, pid = ?, host = ?, since = ? WHERE key = ? AND owner = ?",
                    (self.owner, os.getpid(), self._host, now, key, owner))
                self._conn.commit()
                return cur.rowcount == 1
            self._conn.commit()
            return False

    def claimed(self, key: str) -> bool:
        """Whether any process holds a claim on `key`."""
        with writing(self.path, WHAT, hint=HINT, verb="read"), self._lock:
            return self._conn.execute("SELECT 1 FROM claims WHERE key = ?", (key,)).fetchone() is not None

    def release(self, key: str) -> None:
        """Drop this process's claim on `key` (no-op if it holds none)."""
        with writing(self.path, WHAT, hint=HINT), self._lock:
            self._conn.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))
            self._conn.commit()

    # ------------------------------------------------------------------ the prompt store
    def put_request(self, key: str, payload: dict[str, Any]) -> None:
        """Keep the request behind `key` (once; a request already stored is left alone)."""
        if key in self._stored:
            return
        blob = zlib.compress(json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        with writing(self.path, WHAT, hint=HINT), self._lock:
            if self._conn.execute("SELECT 1 FROM requests WHERE key = ?", (key,)).fetchone() is None:
                self._conn.execute("INSERT OR IGNORE INTO requests (key, request) VALUES (?, ?)",
                                   (key, blob))
                self._conn.commit()
            self._stored.add(key)

    def get_request(self, key: str) -> dict[str, Any] | None:
        """The request payload stored for `key` (model, messages, sampling), or None."""
        with writing(self.path, WHAT, hint=HINT, verb="read"), self._lock:
            row = self._conn.execute("SELECT request FROM requests WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(zlib.decompress(row[0]).decode("utf-8"))

    def lookup(self, key: str) -> dict[str, Any]:
        """What the cache knows of one model call: {"key", "request" (or None), "response"
        (text, tokens, cost, model; or None)}."""
        resp = self.get(key)
        return {"key": key, "request": self.get_request(key),
                "response": None if resp is None else {
                    "text": resp.text, "prompt_tokens": resp.prompt_tokens,
                    "completion_tokens": resp.completion_tokens, "cost_usd": resp.cost_usd,
                    "model": resp.model, "reasoning_tokens": resp.reasoning_tokens,
                    "cached_prompt_tokens": resp.cached_prompt_tokens,
                    "finish_reason": resp.finish_reason}}

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
