"""Memory bank on Chroma: embedded `PersistentClient` by default, a Chroma server by config.

Chroma stores the intent embedding (the key), the experience text (the document) and the
scalar fields (Q, visits, provenance) as metadata. Chroma's own embedding function is never
used (it would download a model): every add and query passes explicit embeddings.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from memrl.core.fields import no_effect
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.retrieval import TIE_TOL, BankTies, key_similarities, phase_a, tie_precedence

_GET_PAGE = 2000
_ADD_BATCH = 5000  # Chroma's maximum batch is 5,461
SERVER_CLAIM = "server.json"  # in a run's bank dir when its bank lives in a Chroma server


class BankSettings(BaseModel):
    """The `bank` block of a banked memory module's config (`memory.bank.<key>=...`); its
    defaults are these (no YAML repeats them)."""

    model_config = ConfigDict(extra="forbid")
    # where the bank lives; a run's bank dir claims its server collection, so a resume
    # cannot move to another one (`_claim_server_collection`)
    collection: str = no_effect("memories")
    host: str | None = no_effect(None)  # a Chroma server; None = embedded PersistentClient in the run dir
    port: int = no_effect(8000)  # the Chroma server's port (with host)
    ef_search: int = Field(256, ge=1)  # HNSW: candidates searched per query (recall of the nearest entries)
    ef_construction: int = Field(256, ge=1)  # HNSW: candidates considered when an entry is added
    max_neighbors: int = Field(32, ge=2, description="HNSW M: links per node")
    # Transfer (e.g. cross-model, paper App. C.1): seed this run's empty bank with a copy of
    # another bank (a run directory, a bank directory or a .jsonl export); the source is
    # never modified, and a resumed run does not seed again.
    init_from: str | None = None
    # The seeded entries' utilities: keep (Q and visits as the source has them) | reset (Q =
    # the memory module's q_init and visits = 0, as if new: the source's Q were learned by
    # another agent, or by none at all)
    init_q: Literal["keep", "reset"] = "keep"
    # Retrieve only: no utility updates, no new memories, no writer calls.
    frozen: bool = False
    ties: BankTies = Field("oldest", description=(
        "order among memories of equal similarity, in every similarity ranking (RAG's top-k, "
        "MemRL's Phase-A pool and Phase-B tie-break): oldest first (the official code's stable "
        "sort) | newest first | random (drawn per query from the run seed, the epoch and the task, "
        "so a rerun draws the same). In the paper's loop a task's memories share its intent, so "
        "every retrieval of a repeated task is a tie: this rule can decide what a method shows."))

    @field_validator("init_from")
    @classmethod
    def _source_exists(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if not Path(value).expanduser().exists():
            raise ValueError(f"no such run directory, bank directory or .jsonl export: {value}")
        return value

    def open(self, path: str | Path) -> "ChromaBank":
        """The bank of the run whose bank directory is `path`. With a server (`host`), the
        entries live in the server's collection and `path` only keeps a claim file, so two
        runs never write into one collection by accident (see `_claim_server_collection`)."""
        bank = ChromaBank(path, collection=self.collection, host=self.host, port=self.port,
                          ef_search=self.ef_search, ef_construction=self.ef_construction,
                          max_neighbors=self.max_neighbors, ties=self.ties)
        if self.host:
            self._claim_server_collection(bank, Path(path))
        return bank

    def _claim_server_collection(self, bank: "ChromaBank", bank_dir: Path) -> None:
        """A run owns its server collection: the first open of a run records the collection
        in `<bank_dir>/server.json`; a collection that already holds entries and is not this
        run's is refused (another run's memories would be mixed into this one)."""
        claim = bank_dir / SERVER_CLAIM
        where = {"host": self.host, "port": self.port, "collection": self.collection}
        if claim.exists():
            if json.loads(claim.read_text()) != where:
                raise ValueError(f"memory.bank: this run's bank is {json.loads(claim.read_text())}, "
                                 f"not {where}; a run cannot move to another collection")
            return
        if bank.count() > 0:
            raise ValueError(f"memory.bank.collection: {self.collection!r} on {self.host}:{self.port} "
                             f"already holds {bank.count()} entries of another run; give each run "
                             "its own collection (memory.bank.collection=<name>)")
        bank_dir.mkdir(parents=True, exist_ok=True)
        tmp = claim.with_suffix(".tmp")
        tmp.write_text(json.dumps(where))
        os.replace(tmp, claim)


class ChromaBank:
    def __init__(self, path: str | Path | None = None, *, collection: str = "memories",
                 host: str | None = None, port: int = 8000, ef_search: int = 256,
                 ef_construction: int = 256, max_neighbors: int = 32, create: bool = True,
                 ties: BankTies = "oldest"):
        """Open (and by default create) the collection. `create=False` opens an existing
        collection with the search settings it was created with (bank tools, transfer). `ties`:
        the order among entries of equal similarity in `neighbours` and `query`
        (`retrieval.tie_precedence`)."""
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False, allow_reset=False)
        self.ties: BankTies = ties
        if host:
            self.client = chromadb.HttpClient(host=host, port=port, settings=settings)
        else:
            if path is None:
                raise ValueError("ChromaBank needs a path (embedded) or a host (server)")
            Path(path).mkdir(parents=True, exist_ok=True)
            self.client = chromadb.PersistentClient(path=str(path), settings=settings)
        if not create:
            names = [c.name for c in self.client.list_collections()]
            if collection not in names:
                where = f"{host}:{port}" if host else str(path)
                raise ValueError(f"no collection {collection!r} in the bank at {where} "
                                 f"(it has: {', '.join(sorted(names)) or 'none'})")
            self.col = self.client.get_collection(name=collection, embedding_function=None)
            self.next_order = max((e.order for e in self.iter_entries()), default=-1) + 1
            return
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

    def precedence(self, entries: list[MemoryEntry], seed: int = 0) -> np.ndarray:
        """The entries' tie precedence under this bank's rule (lower first; `tie_precedence`)."""
        return tie_precedence(np.array([e.order for e in entries], dtype=np.int64),
                              [e.memory_id for e in entries], self.ties, seed)

    def neighbours(self, embedding: np.ndarray, k: int, *, by_key: bool = False,
                   seed: int = 0) -> list[tuple[MemoryEntry, float]]:
        """Entries by cosine similarity, most similar first (ties: by the bank's tie rule, drawn
        from `seed` when it is `random`), enough of them
        that the top-k entries -- or, with `by_key`, every entry of the top-k keys (see
        `retrieval.key_similarities`) -- and everything tied with the k-th are in hand.

        Banks are full of exact ties (the same task's memories from successive epochs share
        one key), and the index returns an arbitrary subset of tied entries. So the query
        widens until the last result is below the k-th similarity by more than the tie
        tolerance, or the whole bank is in hand. Nothing is cut: the caller's Phase A does.
        """
        if k <= 0:
            return []
        # No count() here: it costs a full table count (~4 ms at 100k entries), and Chroma
        # answers an n_results above the bank's size with the whole bank.
        vec = [np.asarray(embedding, dtype=np.float32).tolist()]
        want = k
        while True:
            res = self.col.query(query_embeddings=vec, n_results=want,
                                 include=["metadatas", "documents", "distances"])
            out = [(MemoryEntry.from_chroma(mid, doc, meta), 1.0 - float(dist))
                   for mid, doc, meta, dist in zip(res["ids"][0], res["documents"][0],
                                                   res["metadatas"][0], res["distances"][0])]
            sims = key_similarities(np.array([s for _, s in out]), [e.key for e, _ in out])
            prec = self.precedence([e for e, _ in out], seed)
            rank = sorted(range(len(out)), key=lambda i: (-sims[i], prec[i]))
            out = [out[i] for i in rank]
            sims = sims[rank]
            if len(out) < want:
                return out  # the whole bank is in hand
            if by_key:
                seen: set[str] = set()
                firsts = [i for i, (e, _) in enumerate(out) if not (e.key in seen or seen.add(e.key))]
                boundary = sims[firsts[k - 1]] if len(firsts) >= k else None
            else:
                boundary = sims[k - 1]
            if boundary is not None and sims[-1] < boundary - TIE_TOL:
                return out  # the last result is below the k-th: no tie is cut off
            want *= 2

    def query(self, embedding: np.ndarray, k: int, *, seed: int = 0) -> list[tuple[MemoryEntry, float]]:
        """Top-k entries by cosine similarity, most similar first; entries tied with the k-th
        (one key, or within `TIE_TOL`) are chosen by the bank's tie rule (oldest first by
        default; `random` draws from `seed`)."""
        hits = self.neighbours(embedding, k, seed=seed)
        if not hits:
            return []
        sims = np.array([s for _, s in hits])
        keep = phase_a(sims, delta=-1.0, k1=k, gate=False, ties="oldest", keys=[e.key for e, _ in hits],
                       orders=self.precedence([e for e, _ in hits], seed))
        return [hits[i] for i in keep]

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

    def close(self) -> None:
        """Release the client. Chroma's close() stops its system (the index files), but its
        SQLite connection goes only with the last reference to the client's objects, some of
        them in cycles: they are dropped and collected here, so an embedded bank's files are
        all closed when this returns. The bank is unusable after it."""
        client = self.__dict__.pop("client", None)
        close = getattr(client, "close", None)
        if callable(close):
            close()
        self.__dict__.pop("col", None)
        del client, close
        gc.collect()

    def export_jsonl(self, path: str | Path) -> int:
        n = 0
        with open(path, "w", encoding="utf-8") as fh:
            for entry in self.iter_entries(with_embeddings=True):
                fh.write(json.dumps(entry.to_dict(), ensure_ascii=False) + "\n")
                n += 1
        return n

