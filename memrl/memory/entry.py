"""The memory-bank entry and the batch update that a memory module plans and a bank applies.

An update goes into the run's commit journal (memrl.journal.commit) before the bank is
touched. There each new entry's vector is float32 bytes in base64 (`{"f32": ...}`): what
the bank stores, exactly, at a sixth of the size of the same vector as JSON numbers.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from memrl.core.records import RetrievedMemory


@dataclass
class MemoryEntry:
    """(intent z, experience e, utility Q) plus counters and provenance."""

    memory_id: str
    intent: str
    experience: str
    embedding: Any  # the key's vector: a list of floats or a float32 array ([]: not read)
    q: float = 0.0
    visits: int = 0
    success: bool = False
    epoch: int = 0
    task_id: str = ""
    kind: str = ""  # script | reflection | trajectory | ...
    injected_ids: list[str] = field(default_factory=list)  # memories used in the episode that wrote it
    order: int = 0  # insertion order, for deterministic listing
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The key this memory is filed under: its stored intent text. Memories of one task
        share it; a near-duplicate intent that joins an existing key copies that key's text
        and embedding (`dedup_threshold`), so one key means one stored vector."""
        return self.intent

    def retrieved(self, similarity: float, score: float, *, success: Any = "own") -> RetrievedMemory:
        """The entry as a memory chosen for an episode, with its record (memrl.core.memory_record)
        and the scores that chose it; `success` overrides the entry's own outcome."""
        return RetrievedMemory(memory_id=self.memory_id, intent=self.intent, experience=self.experience,
                               q=self.q, similarity=float(similarity), score=float(score),
                               success=self.success if success == "own" else success,
                               record=self.extra.get("record"))

    def metadata(self) -> dict[str, Any]:
        """Chroma metadata (scalars only)."""
        return {
            "intent": self.intent,
            "q": float(self.q),
            "visits": int(self.visits),
            "success": bool(self.success),
            "epoch": int(self.epoch),
            "task_id": self.task_id,
            "kind": self.kind,
            "injected_ids": json.dumps(self.injected_ids),
            "order": int(self.order),
            "extra": json.dumps(self.extra, sort_keys=True),
        }

    @classmethod
    def from_chroma(cls, memory_id: str, document: str, meta: dict[str, Any],
                    embedding: Any = None) -> "MemoryEntry":
        return cls(
            memory_id=memory_id,
            intent=str(meta.get("intent", "")),
            experience=document or "",
            embedding=[] if embedding is None else [float(v) for v in embedding],
            q=float(meta.get("q", 0.0)),
            visits=int(meta.get("visits", 0)),
            success=bool(meta.get("success", False)),
            epoch=int(meta.get("epoch", 0)),
            task_id=str(meta.get("task_id", "")),
            kind=str(meta.get("kind", "")),
            injected_ids=json.loads(meta.get("injected_ids", "[]")),
            order=int(meta.get("order", 0)),
            extra=json.loads(meta.get("extra", "{}")),
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field, the vector as a list of floats (an export line); lists and dicts are
        the entry's own, not copies."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["embedding"] = vector_list(self.embedding)
        return d

    def to_journal(self) -> dict[str, Any]:
        """`to_dict` with the vector as float32 bytes in base64 (module doc)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["embedding"] = encode_vector(self.embedding)
        return d

    @classmethod
    def from_journal(cls, d: dict[str, Any]) -> "MemoryEntry":
        """An entry from `to_journal` or `to_dict` (a journal written before vectors were bytes)."""
        return cls(**{**d, "embedding": decode_vector(d.get("embedding"))})


def vector_list(vector: Any) -> list[float]:
    if vector is None:
        return []
    if isinstance(vector, np.ndarray):
        return vector.astype(np.float64).tolist()
    return [float(v) for v in vector]


def encode_vector(vector: Any) -> dict[str, str] | list[float]:
    if vector is None or len(vector) == 0:
        return []
    raw = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
    return {"f32": base64.b64encode(raw).decode("ascii")}


def decode_vector(value: Any) -> Any:
    if isinstance(value, dict) and "f32" in value:
        return np.frombuffer(base64.b64decode(value["f32"]), dtype=np.float32).copy()
    return list(value or [])


@dataclass
class BankUpdate:
    """Everything one batch changes in a bank, with absolute values so applying it twice is
    the same as applying it once (a crashed run re-applies its journal safely)."""

    set_fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> {q, visits, ...}
    add: list[MemoryEntry] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The journal's form (vectors as bytes, module doc); nothing is deep-copied."""
        return {"set_fields": self.set_fields, "add": [e.to_journal() for e in self.add],
                "delete": self.delete}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BankUpdate":
        return cls(set_fields=d.get("set_fields", {}),
                   add=[MemoryEntry.from_journal(e) for e in d.get("add", [])],
                   delete=list(d.get("delete", [])))

    def is_empty(self) -> bool:
        return not (self.set_fields or self.add or self.delete)
