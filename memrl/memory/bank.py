"""Memory bank on Chroma: embedded `PersistentClient` by default, a Chroma server by config.

Chroma stores the intent embedding (the key), the experience text (the document) and the
scalar fields (Q, visits, provenance) as metadata. Chroma's own embedding function is never
used (it would download a model): every add and query passes explicit embeddings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .entry import BankUpdate, MemoryEntry

_GET_PAGE = 2000
_ADD_BATCH = 5000  # Chroma's maximum batch is 5,461


class BankSettings(BaseModel):
    """The `bank` block of a memory module's config."""

    model_config = ConfigDict(extra="forbid")
    collection: str = "memories"
    host: str | None = None  # a Chroma server; None = embedded PersistentClient in the run dir
    port: int = 8000
    ef_search: int = Field(256, ge=1)
    ef_construction: int = Field(256, ge=1)

    def open(self, path: str | Path) -> "ChromaBank":
        return ChromaBank(path, collection=self.collection, host=self.host, port=self.port,
                          ef_search=self.ef_search, ef_construction=self.ef_construction)


class ChromaBank:
    def __init__(self, path: str | Path | None = None, *, collection: str = "memories",
                 host: str | None = None, port: int = 8000, ef_search: int = 256,
                 ef_construction: int = 256, max_neighbors: int = 32):
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False, allow_reset=False)
        if host:
            self.client = chromadb.HttpClient(host=host, port=port, settings=settings)
        else:
            if path is None:
                raise ValueError("ChromaBank needs a path (embedded) or a host (server)")
            Path(path).mkdir(parents=True, exist_ok=True)
            self.client = chromadb.PersistentClient(path=str(path), settings=settings)
        # Search breadth must be fixed at creation: changing it later has no effect.
        self.col = self.client.get_or_create_collection(
            name=collection,
            configuration={"hnsw": {"space": "cosine", "ef_search": ef_search,
                                    "ef_construction": ef_construction,
                                    "max_neighbors": max_neighbors}},
            embedding_function=None,
        )
        # insertion order of the next new entry (entries carry it for deterministic listing)
        self.next_order = max((e.order for e in self.iter_entries()), default=-1) + 1

    # ------------------------------------------------------------------ reads
    def count(self) -> int:
        return self.col.count()

    def query(self, embedding: np.ndarray, k: int) -> list[tuple[MemoryEntry, float]]:
        """Top-k entries by cosine similarity, most similar first; ties (within 1e-6) go to
        the older entry.

        Banks are full of exact ties (the same task's memories from successive epochs share
        one intent), and the index returns an arbitrary subset of tied entries. So the query
        widens until everything tied with the k-th result is in hand, then cuts at k.
        """
        n = self.count()
        if n == 0 or k <= 0:
            return []
        vec = [np.asarray(embedding, dtype=np.float32).tolist()]
        want = min(k, n)
        while True:
            res = self.col.query(query_embeddings=vec, n_results=want,
                                 include=["metadatas", "documents", "distances"])
            out = [(MemoryEntry.from_chroma(mid, doc, meta), 1.0 - float(dist))
                   for mid, doc, meta, dist in zip(res["ids"][0], res["documents"][0],
                                                   res["metadatas"][0], res["distances"][0])]
            out.sort(key=lambda p: (-round(p[1], 6), p[0].order))
            if want >= n or len(out) < want:
                return out[:k]  # the whole bank (or all the index has) is in hand
            if round(out[-1][1], 6) < round(out[k - 1][1], 6):
                return out[:k]  # the last result is below the k-th: no tie is cut off
            want = min(n, want * 2)

    def get(self, ids: list[str], *, with_embeddings: bool = False) -> dict[str, MemoryEntry]:
        if not ids:
            return {}
        include = ["metadatas", "documents"] + (["embeddings"] if with_embeddings else [])
        res = self.col.get(ids=list(ids), include=include)
        embs = res.get("embeddings") if with_embeddings else None
        return {
            mid: MemoryEntry.from_chroma(mid, doc, meta, None if embs is None else embs[i])
            for i, (mid, doc, meta) in enumerate(zip(res["ids"], res["documents"], res["metadatas"]))
        }

    def iter_entries(self, *, with_embeddings: bool = False) -> Iterator[MemoryEntry]:
        """All entries in insertion order."""
        include = ["metadatas", "documents"] + (["embeddings"] if with_embeddings else [])
        entries: list[MemoryEntry] = []
        offset = 0
        while True:
            res = self.col.get(include=include, limit=_GET_PAGE, offset=offset)
            if not res["ids"]:
                break
            embs = res.get("embeddings") if with_embeddings else None
            for i, (mid, doc, meta) in enumerate(zip(res["ids"], res["documents"], res["metadatas"])):
                entries.append(MemoryEntry.from_chroma(mid, doc, meta, None if embs is None else embs[i]))
            offset += len(res["ids"])
        entries.sort(key=lambda e: e.order)
        return iter(entries)

    # ----------------------------------------------------------------- writes
    def apply(self, update: BankUpdate) -> None:
        """Apply a planned update. Idempotent: every value written is absolute."""
        if update.add:
            self.next_order = max(self.next_order, max(e.order for e in update.add) + 1)
        if update.delete:
            self.col.delete(ids=list(update.delete))
        for start in range(0, len(update.add), _ADD_BATCH):
            chunk = update.add[start:start + _ADD_BATCH]
            self.col.upsert(ids=[e.memory_id for e in chunk],
                            embeddings=[list(map(float, e.embedding)) for e in chunk],
                            documents=[e.experience for e in chunk],
                            metadatas=[e.metadata() for e in chunk])
        if update.set_fields:
            # "experience" in set_fields replaces the document (a revised memory). Chroma
            # re-embeds a document sent without its vector, so the stored key goes with it.
            texts = any("experience" in fields for fields in update.set_fields.values())
            current = self.get(list(update.set_fields), with_embeddings=texts)
            ids, metas = [], []
            for mid, fields in update.set_fields.items():
                if mid not in current:
                    continue  # deleted in this same update
                entry = current[mid]
                for key, value in fields.items():
                    setattr(entry, key, value)
                ids.append(mid)
                metas.append(entry.metadata())
            if ids and texts:
                self.col.update(ids=ids, metadatas=metas,
                                documents=[current[m].experience for m in ids],
                                embeddings=[list(map(float, current[m].embedding)) for m in ids])
            elif ids:
                self.col.update(ids=ids, metadatas=metas)

    def export_jsonl(self, path: str | Path) -> int:
        n = 0
        with open(path, "w", encoding="utf-8") as fh:
            for entry in self.iter_entries(with_embeddings=True):
                fh.write(json.dumps(entry.to_dict(), ensure_ascii=False) + "\n")
                n += 1
        return n

    def snapshot(self) -> list[dict[str, Any]]:
        """A comparable dump (ids, texts, Q, visits) used by tests and run cards."""
        return [{"id": e.memory_id, "intent": e.intent, "experience": e.experience,
                 "q": round(e.q, 12), "visits": e.visits, "success": e.success}
                for e in self.iter_entries()]
