"""Mem0 baseline (docs/design.md §6): the `mem0ai` package's `Memory`, driven by the project's LLM
layer and embedder, with its vector store in embedded Chroma under `<run_dir>/mem0`.

How mem0 is wired in (its model, embedder, telemetry and spaCy): memrl_baselines.mem0_bridge.

What mem0 does per episode (2.2.1's "additive" pipeline): one model call whose prompt holds
the new messages, the 10 most similar memories already stored, and the last 10 messages of
the session; the model returns {"memory": [{"text": ...}, ...]} and each new text becomes a
memory (ADD only; exact duplicates are dropped by hash). Extraction cannot be separated from
the bank in this version, so it runs when the batch is applied:

- `digest` (worker thread): builds the messages for the episode (task, trajectory, outcome).
  No model call, no mem0 access.
- `plan_update`: one pending add per learnable episode, in task order (journaled by the runner).
- `apply`: `Memory.add(...)` per pending episode, with the model calls named
  `s<seed>/mem0/<episode key>` so a replay asks the same questions (and hits the cache).
  Idempotent by episode key: a key in the ledger (`<run_dir>/mem0/applied.jsonl`), or with
  a memory in the store carrying it as metadata, is skipped. Residual risk: a crash inside
  one `add` after its vector insert and before mem0 saved the session messages leaves
  that episode stored but its messages out of the "last messages" of later prompts; a crash
  after an add that stored nothing (the model extracted nothing) and before the ledger line
  repeats that add once with a slightly different prompt.
- Robustness: an answer that is not mem0's JSON as a whole but starts with a complete JSON
  object (a base model that keeps writing after it) is cut to that object
  (`repair_json`, recorded as `repaired` in the ledger). An answer with no usable object, or
  a model call that fails, does not stop the run: the episode is stored as raw text with
  `infer=False`, and the ledger records it (`mode: raw-fallback`, counted by `fallbacks`).
- Determinism: the prompt's "Observation/Current Date" is pinned to `fixed_date` so the
  request (and its cache key) does not change with the calendar; memories get a synthetic
  `created_at` from the episode order; mem0's random uuids never leave this module (memory
  ids shown to the runner are `<episode key>#<text hash>`).

- Accounting: mem0's model calls use the run's LLM settings (temperature, top_p; mem0's own
  defaults are not applied) except `llm_max_tokens`. Being made at commit time, they are not
  in any episode's record: they are in the run card's model totals and in the ledger
  (calls and tokens per episode).
- This is the one module whose `apply` calls the model, so it keeps the run's client
  (`attach_llm`, called by `memrl.control.wiring`).

Retrieval: `Memory.search(query=intent, top_k=k)` within the agent's scope; everything
returned is injected. `similarity` is the cosine (mem0's Chroma score is 1/(1 + squared L2)
of unit vectors), `score` is mem0's score. Q is never learned.
"""

from __future__ import annotations

import json
import logging
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memrl.core.fields import no_effect
from memrl.core.records import EpisodeResult, RetrievedMemory, Task, append_jsonl, iter_jsonl
from memrl.core.rundir import RunDir
from memrl.core.seeding import derive_seed
from memrl.llm.base import ModelProbe
from memrl.memory.base import EntryMemory, LearnItem, NewMemory
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.writer import format_trajectory
from memrl_baselines.mem0_bridge import (BUDGET_KEY, PROVIDER, EmbedderConfig, LlmConfig, Memory, Mem0LLMError,
                                         MemoryConfig, UnparsableOutput, _Binding, configure_spacy,
                                         disable_telemetry, mem0)

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM, LLMClient
    from memrl.llm.embed import Embedder

log = logging.getLogger(__name__)

_UNBOUNDED = 10**12
_BASE_TIME = datetime(2025, 1, 1, tzinfo=timezone.utc)
_LIST_LIMIT = 1_000_000


# ---------------------------------------------------------------------------- module
class Mem0Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "mem0"
    k: int = Field(ge=1, description="memories injected (the benchmark's k2: configs/memory/mem0.yaml "
                   "reads env.retrieval.k2)")
    threshold: float = Field(0.1, ge=0.0, le=1.0,
                             description="mem0's minimum search score (its default 0.1)")
    infer: bool = Field(True, description="false: store each episode as raw text, no model call")
    agent_id: str = Field("memrl-agent", min_length=1, description="mem0's memory scope")
    collection: str = no_effect("mem0")  # a storage name, inside the run's own mem0 store
    max_trajectory_chars: int | None = Field(3000, ge=0, description="the same bound as MemRL's "
                                             "writer; null = whole trajectory")
    llm_max_tokens: int = Field(2000, ge=1, description="max tokens of mem0's extraction answer "
                                "(mem0's default 2000; ~64 keeps the embedded model quick)")
    repair_json: bool = Field(True, description="use the first complete JSON object of an answer "
                              "that mem0 cannot read as a whole")
    fixed_date: str | None = Field("2025-01-01", description="pins the prompt's dates; null = today")
    custom_instructions: str | None = Field(None, description="mem0's custom extraction instructions")
    learn_from_errors: bool = False  # an episode whose model call failed is not stored
    spacy: bool = Field(False, description="mem0's spaCy entity boosts / lemmas (needs en_core_web_sm)")

    @field_validator("fixed_date")
    @classmethod
    def _iso_date(cls, v: str | None) -> str | None:
        if v is not None:
            date.fromisoformat(v)
        return v


def episode_messages(intent: str, result: EpisodeResult, max_chars: int | None) -> list[dict[str, str]]:
    """The conversation handed to mem0 for one episode: the task, what the agent did and saw,
    and the outcome."""
    traj = format_trajectory(result, _UNBOUNDED if max_chars is None else max_chars)
    outcome = (f"The task was solved in {result.steps} steps." if result.success
               else f"The task was not solved ({result.steps} steps).")
    return [
        {"role": "user", "content": f"Task: {intent}"},
        {"role": "assistant", "content": f"Actions and observations:\n{traj or '(no actions)'}"},
        {"role": "user", "content": f"Outcome: {outcome}"},
    ]


def raw_text(messages: list[dict[str, str]]) -> str:
    """The fallback memory: the episode's messages as plain text."""
    return "\n".join(m["content"] for m in messages)


class Mem0Memory(EntryMemory):
    name = "mem0"
    Settings = Mem0Settings

    @classmethod
    def build(cls, settings: Mem0Settings, *, run_dir: Path, embedder: Any) -> "Mem0Memory":
        return cls(settings, store_dir=RunDir(run_dir).mem0, embedder=embedder)

    def __init__(self, settings: Mem0Settings, *, store_dir: str | Path, embedder: "Embedder"):
        self.s = settings
        self.needs_llm = settings.infer
        self.embedder = embedder
        self.dir = Path(store_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seed = 0
        self._client: "LLMClient | None" = None
        self._binding = _Binding(settings.llm_max_tokens, settings.fixed_date, settings.repair_json)
        disable_telemetry()
        configure_spacy(settings.spacy)
        config = MemoryConfig(
            vector_store={"provider": "chroma",
                          "config": {"collection_name": settings.collection,
                                     "path": str(self.dir / "chroma")}},
            # mem0's validators accept only its built-in provider names; ours are registered
            # in its factories when this module is imported, so these two entries skip that check.
            llm=LlmConfig.model_construct(provider=PROVIDER, config={
                "binding": self._binding, "model": "memrl", "max_tokens": settings.llm_max_tokens}),
            embedder=EmbedderConfig.model_construct(provider=PROVIDER, config={
                "model": embedder, "embedding_dims": int(embedder.dim)}),
            history_db_path=str(self.dir / "history.db"),
            custom_instructions=settings.custom_instructions,
        )
        self.mem = Memory(config)
        self.ledger_path = self.dir / "applied.jsonl"
        self._applied: dict[str, dict[str, Any]] = {r["key"]: r for r in iter_jsonl(self.ledger_path)}
        self._next_order_value = max((int(r.get("order", -1)) for r in self._applied.values()), default=-1) + 1

    # ----------------------------------------------------------------- wiring
    def attach_llm(self, llm: "LLMClient | None") -> None:
        """The run's LLM client: mem0's model calls during `apply` go through it."""
        self._client = llm

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        self.seed = int(seed)
        return {"k": self.s.k, "mem0ai": getattr(mem0, "__version__", "?"), "infer": self.s.infer,
                "vector_store": "chroma", "threshold": self.s.threshold}

    # ---------------------------------------------------------------- retrieve
    def _scope(self) -> dict[str, str]:
        return {"agent_id": self.s.agent_id}

    @staticmethod
    def _public_id(payload: dict[str, Any], fallback: str) -> str:
        key = payload.get("episode_key")
        h = payload.get("hash")
        return f"{key}#{h[:10]}" if key and h else fallback

    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        found = self.mem.search(query=task.intent, top_k=self.s.k, filters=self._scope(),
                                threshold=self.s.threshold)
        out = []
        for r in found.get("results", []):
            meta = dict(r.get("metadata") or {})
            meta["hash"] = r.get("hash")
            score = float(r.get("score") or 0.0)
            # mem0's Chroma score is 1/(1+d), d the squared L2 distance of unit vectors = 2-2cos
            cosine = 1.0 - (1.0 / score - 1.0) / 2.0 if score > 0 else -1.0
            success = meta.get("success")
            out.append(RetrievedMemory(
                memory_id=self._public_id(meta, str(r.get("id"))), intent=str(meta.get("intent", "")),
                experience=str(r.get("memory", "")), q=0.0, similarity=float(cosine), score=score,
                success=bool(success) if success is not None else None))
        return out

    def model_probes(self, task: Task) -> list[Any]:
        """A JSON extraction call at mem0's budget, like the ones mem0 makes in `apply`."""
        prompt = ("Extract the facts worth remembering from this exchange and return JSON "
                  '{"facts": [...]}.\nuser: ' + task.intent.strip() + "\nassistant: (attempt recorded)")
        return [ModelProbe(role="llm", purpose="mem0-add", prompt=prompt, answer_tokens=self.s.llm_max_tokens,
                           budget_key=BUDGET_KEY)]

    # ------------------------------------------------------------------- learn
    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        return {"messages": episode_messages(task.intent, result, self.s.max_trajectory_chars)}

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        """One pending add per learnable episode (mem0 embeds and extracts in `apply`)."""
        return BankUpdate(add=self.new_entries(items))

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        if it.digest is None or it.result.info.get("carried"):
            return None
        messages = it.digest["messages"]
        return NewMemory(raw_text(messages), kind="mem0-episode", extra={"messages": messages})

    def _entry_key(self, it: LearnItem) -> tuple[str, list[float]]:
        return it.task.intent, []  # mem0 embeds what it extracts itself

    def _next_order(self) -> int:
        return self._next_order_value

    def apply(self, update: BankUpdate) -> None:
        for entry in sorted(update.add, key=lambda e: e.order):
            self._apply_one(entry)

    def _stored_with_key(self, key: str) -> int:
        rows = self.mem.vector_store.list(filters={**self._scope(), "episode_key": key}, top_k=_LIST_LIMIT)
        rows = rows[0] if rows and isinstance(rows[0], list) else rows
        return len(rows or [])

    def _apply_one(self, entry: MemoryEntry) -> None:
        key = entry.memory_id
        if key in self._applied:
            return
        record: dict[str, Any] = {"key": key, "order": entry.order}
        present = self._stored_with_key(key)
        if present:  # stored before a crash that lost the ledger line
            record.update(mode="recovered", stored=present)
            self._record(record)
            return
        messages = entry.extra.get("messages") or [{"role": "user", "content": entry.experience}]
        meta = {"episode_key": key, "task_id": entry.task_id, "epoch": int(entry.epoch),
                "success": bool(entry.success), "intent": entry.intent,
                "created_at": (_BASE_TIME + timedelta(seconds=int(entry.order))).isoformat()}
        if not self.s.infer:
            stored = self._add_raw(messages, meta)
            record.update(mode="raw", stored=stored)
            self._record(record)
            return
        if self._client is None:
            raise RuntimeError("Mem0Memory.apply needs the run's LLM client (attach_llm) when infer is on")
        ep = self._client.episode(f"s{self.seed}/mem0/{key}", derive_seed(self.seed, "mem0", key))
        self._binding.current, self._binding.repaired = ep, False
        try:
            out = self.mem.add(messages, agent_id=self.s.agent_id, metadata=meta, infer=True)
            stored = len(out.get("results", []))
            record.update(mode="infer" if stored else "infer-empty", stored=stored,
                          repaired=self._binding.repaired)
        except Mem0LLMError as exc:
            cause = exc.__cause__
            reason = (f"unparsable model output ({cause})" if isinstance(cause, UnparsableOutput)
                      else f"model call failed ({type(cause).__name__ if cause else 'LLMError'}: {cause or exc})")
            log.warning("mem0 add of %s: %s; storing the episode as raw text", key, reason)
            stored = self._add_raw(messages, meta)
            record.update(mode="raw-fallback", stored=stored, error=reason[:500])
        finally:
            self._binding.current = None
        record.update(llm_calls=ep.meter.calls, tokens=ep.meter.tokens())
        self._record(record)

    def _add_raw(self, messages: list[dict[str, str]], meta: dict[str, Any]) -> int:
        text = raw_text(messages)
        out = self.mem.add([{"role": "user", "content": text}], agent_id=self.s.agent_id,
                           metadata=meta, infer=False)
        return len(out.get("results", []))

    def _record(self, record: dict[str, Any]) -> None:
        append_jsonl(self.ledger_path, [json.dumps(record, sort_keys=True)])
        self._applied[record["key"]] = record
        self._next_order_value = max(self._next_order_value, int(record["order"]) + 1)

    # ------------------------------------------------------------------- state
    def entry_count(self) -> int | None:
        """Episodes applied to mem0's store (its ledger's lines)."""
        return len(self._applied)

    @property
    def fallbacks(self) -> int:
        """Episodes stored as raw text because mem0's model step failed or was unparsable."""
        return sum(1 for r in self._applied.values() if r.get("mode") == "raw-fallback")

    def stats(self) -> dict[str, int]:
        modes: dict[str, int] = {}
        for r in self._applied.values():
            modes[r["mode"]] = modes.get(r["mode"], 0) + 1
        return modes

    def close(self) -> None:
        self.mem.close()
