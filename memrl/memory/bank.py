"""The memory bank: each key's vector in Chroma (embedded `PersistentClient` by default, a
Chroma server by config), each entry's fields in the bank's own SQLite file, each text once in
a text file.

- Chroma holds one record per key (an intent with its vector, `entrystore.key_id`): the
  memories of one task, and near-duplicate intents that join a key (`dedup_threshold`), share
  one stored vector. No document, no metadata: Chroma's full-text index stays empty. Chroma's
  own embedding function is never used (it would download a model): every add and query
  passes explicit vectors.
- `<bank>/entries.sqlite3` (memrl.memory.entrystore) holds every entry's scalar fields (Q,
  visits, provenance, insertion order), its intent, its key id and its text's hash.
- The texts are lines of a text file (memrl.memory.textstore): a run's bank reads and writes
  the run's `memories.jsonl` (which the commit log writes too: each text is stored once); a
  standalone bank (`memrl bank copy/merge/import`) has `<bank>/memories.jsonl`.

A bank written before this layout (every entry a Chroma record with its vector and text) is
converted the first time a run opens it (memrl.memory.legacy); the bank tools read it as it is.
"""

from __future__ import annotations

import gc
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from memrl.core.fields import no_effect
from memrl.core.records import text_hash
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.entrystore import FILE as ENTRIES_FILE
from memrl.memory.entrystore import LAYOUT, EntryStore, Row, key_id, row_of
from memrl.memory.retrieval import TIE_TOL, BankTies, key_similarities, phase_a, tie_precedence
from memrl.memory.textstore import TEXTS_FILE, TextStore

_ADD_BATCH = 5000  # Chroma's maximum batch is 5,461
_PAGE = 500  # entries read at a time (their texts and vectors with them)
_VECTOR_CACHE = 4096  # key vectors kept once read (a key's id names its vector: never stale)
KEYS_SUFFIX = "-keys"  # the Chroma collection of a bank's key vectors: <collection>-keys
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

    def open(self, path: str | Path, *, texts: str | Path | None = None) -> "ChromaBank":
        """The bank whose directory is `path` (`texts`: its text file, for a run's bank the
        run's memories.jsonl). With a server (`host`), the key vectors live in the server's
        collection and `path` keeps the entries and a claim file, so two runs never write into
        one collection by accident (see `_claim_server_collection`)."""
        bank = ChromaBank(path, collection=self.collection, host=self.host, port=self.port,
                          ef_search=self.ef_search, ef_construction=self.ef_construction,
                          max_neighbors=self.max_neighbors, texts=texts, ties=self.ties)
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
        if bank.count() > 0 or bank.index_count() > 0:
            raise ValueError(f"memory.bank.collection: {self.collection!r} on {self.host}:{self.port} "
                             f"already holds {bank.count()} entries of another run; give each run "
                             "its own collection (memory.bank.collection=<name>)")
        bank_dir.mkdir(parents=True, exist_ok=True)
        tmp = claim.with_suffix(".tmp")
        tmp.write_text(json.dumps(where))
        os.replace(tmp, claim)


class EntryCollection:
    """A bank's entries by id (`ChromaBank.col`): count and delete, outside any update."""

    def __init__(self, bank: "ChromaBank") -> None:
        self.bank = bank

    def count(self) -> int:
        return self.bank.count()

    def delete(self, ids: list[str]) -> None:
        self.bank.apply(BankUpdate(delete=list(ids)))


class ChromaBank:
    def __init__(self, path: str | Path | None = None, *, collection: str = "memories",
                 host: str | None = None, port: int = 8000, ef_search: int = 256,
                 ef_construction: int = 256, max_neighbors: int = 32, create: bool = True,
                 texts: str | Path | None = None, ties: BankTies = "oldest"):
        """Open (and by default create) the bank in the directory `path` (module doc). A bank
        of the earlier layout is converted first (memrl.memory.legacy). `create=False` opens an
        existing bank with the search settings it was created with (bank tools, transfer).
        `texts`: the text file (a run's memories.jsonl); by default the one the bank names, or
        for a new bank `<path>/memories.jsonl`. `ties`: the order among entries of equal
        similarity in `neighbours` and `query` (`retrieval.tie_precedence`)."""
        import chromadb
        from chromadb.config import Settings

        if path is None:
            raise ValueError("ChromaBank needs a directory (its entries live there, also with a server)")
        self.path = Path(path)
        self._vector_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.name = collection
        self.keys_name = collection + KEYS_SUFFIX
        settings = Settings(anonymized_telemetry=False, allow_reset=False)
        self.ties: BankTies = ties
        if host:
            self.client = chromadb.HttpClient(host=host, port=port, settings=settings)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self.client = chromadb.PersistentClient(path=str(self.path), settings=settings)
        self.hnsw = {"space": "cosine", "ef_search": ef_search, "ef_construction": ef_construction,
                     "max_neighbors": max_neighbors}
        names = {c.name for c in self.client.list_collections()}
        self.legacy_present = collection in names
        store = self.path / ENTRIES_FILE
        if not store.exists() and not self.legacy_present and not create:
            where = f"{host}:{port}" if host else str(self.path)
            shown = sorted({n[:-len(KEYS_SUFFIX)] if n.endswith(KEYS_SUFFIX) else n for n in names})
            raise ValueError(f"no collection {collection!r} in the bank at {where} "
                             f"(it has: {', '.join(shown) or 'none'})")
        may_convert = not host or (self.path / SERVER_CLAIM).exists()
        if not store.exists() and self.legacy_present and may_convert:
            from memrl.memory.legacy import convert

            convert(self, texts)  # writes entries.sqlite3 last, then drops the old collection
        elif store.exists() and self.legacy_present and may_convert:
            self.client.delete_collection(collection)  # a conversion cut before its last step
            self.legacy_present = False
        self.entries = EntryStore(store)
        facts = self.entries.facts()
        if facts.get("collection") not in (None, collection):
            raise ValueError(f"the bank at {self.path} keeps its vectors in collection "
                             f"{facts['collection']!r}, not {collection!r}")
        if not facts:
            rel = TEXTS_FILE if texts is None else os.path.relpath(Path(texts).resolve(), self.path.resolve())
            self.entries.set_facts(layout=LAYOUT, collection=collection, texts=rel)
            facts = self.entries.facts()
        self.texts = TextStore(Path(texts) if texts is not None else self.path / facts["texts"])
        if self.keys_name in names and not create:  # as it was created
            self.index = self.client.get_collection(name=self.keys_name, embedding_function=None)
        else:  # search breadth must be fixed at creation: changing it later has no effect
            self.index = self.client.get_or_create_collection(name=self.keys_name,
                                                              configuration={"hnsw": self.hnsw},
                                                              embedding_function=None)
        # insertion order of the next new entry (entries carry it for deterministic listing)
        self.next_order = self.entries.next_order()

    @property
    def col(self) -> "EntryCollection":
        """The entries as one collection, as the first layout's Chroma collection was: what a
        bank damaged outside the journal looks like (`col.delete(ids=...)`)."""
        return EntryCollection(self)

    # ------------------------------------------------------------------ reads
    def count(self) -> int:
        return self.entries.count() if hasattr(self, "entries") else 0

    def index_count(self) -> int:
        """Key vectors in the index (one per distinct key)."""
        return self.index.count() if hasattr(self, "index") else 0

    def _entries_of(self, rows: Iterable[Row], *, with_texts: bool = True,
                    vectors: dict[str, Any] | None = None) -> list[MemoryEntry]:
        rows = list(rows)
        texts = self.texts.get_many(r.text for r in rows) if with_texts else {}
        out = []
        for r in rows:
            t = texts.get(r.text)
            if with_texts and t is None:
                raise ValueError(f"the bank at {self.path} names a text its text file {self.texts.path} "
                                 f"lacks (entry {r.id}, text {r.text}): the file was cut or replaced")
            out.append(r.entry(t["experience"] if t else "", None if vectors is None else vectors.get(r.key_id)))
        return out

    def vectors(self, key_ids: Iterable[str], *, arrays: bool = False) -> dict[str, Any]:
        """key id -> its stored vector: float32 values as a list of Python floats, or
        (`arrays`) as a float32 array (a twelfth of the memory, for streamed reads)."""
        ids = list(dict.fromkeys(key_ids))
        cache = self._vector_cache
        out: dict[str, Any] = {k: cache[k] for k in ids if k in cache}
        todo = [k for k in ids if k not in cache]
        for i in range(0, len(todo), _ADD_BATCH):
            res = self.index.get(ids=todo[i:i + _ADD_BATCH], include=["embeddings"])
            for kid, vec in zip(res["ids"], res["embeddings"]):
                out[kid] = cache[kid] = np.asarray(vec, dtype=np.float32)
        for k in ids:
            if k in cache:
                cache.move_to_end(k)
        while len(cache) > _VECTOR_CACHE:
            cache.popitem(last=False)
        return out if arrays else {k: v.astype(np.float64).tolist() for k, v in out.items()}

    def _nearest(self, vec: list[list[float]], n: int) -> tuple[list[tuple[MemoryEntry, float]], int]:
        """The entries of the `n` keys most similar to `vec`, each with its key's similarity,
        and how many keys the index gave (fewer than `n`: every key)."""
        res = self.index.query(query_embeddings=vec, n_results=n, include=["distances"])
        sim = {kid: 1.0 - float(dist) for kid, dist in zip(res["ids"][0], res["distances"][0])}
        rows = self.entries.rows_of_keys(list(sim))
        return [(e, sim[r.key_id]) for r, e in zip(rows, self._entries_of(rows))], len(sim)

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
        one key). The index holds one vector per key, so every entry of a key comes with it;
        similarities of different keys within the tie tolerance still tie, so the query
        widens until the last result is below the k-th similarity by more than the tie
        tolerance, or the whole bank is in hand. Nothing is cut: the caller's Phase A does.
        """
        if k <= 0:
            return []
        vec = [np.asarray(embedding, dtype=np.float32).tolist()]
        want = k
        while True:
            out, keys = self._nearest(vec, want)
            sims = key_similarities(np.array([s for _, s in out]), [e.key for e, _ in out])
            prec = self.precedence([e for e, _ in out], seed)
            rank = sorted(range(len(out)), key=lambda i: (-sims[i], prec[i]))
            out = [out[i] for i in rank]
            sims = sims[rank]
            if keys < want:
                return out  # the whole bank is in hand
            if by_key:
                seen: set[str] = set()
                firsts = [i for i, (e, _) in enumerate(out) if not (e.key in seen or seen.add(e.key))]
                boundary = sims[firsts[k - 1]] if len(firsts) >= k else None
            else:
                boundary = sims[k - 1] if len(out) >= k else None
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
        rows = self.entries.rows(ids)
        vectors = self.vectors(r.key_id for r in rows.values()) if with_embeddings else None
        entries = self._entries_of(rows.values(), vectors=vectors)
        return {e.memory_id: e for e in entries}

    def iter_entries(self, *, with_embeddings: bool = False, with_texts: bool = True) -> Iterator[MemoryEntry]:
        """All entries in insertion order, read a page at a time (`with_texts=False`: without
        their experience texts, which stay empty; vectors as float32 arrays, shared by the
        entries of one key in a page)."""
        page: list[Row] = []
        for row in self.entries.iter_rows():
            page.append(row)
            if len(page) == _PAGE:
                yield from self._page(page, with_embeddings, with_texts)
                page = []
        if page:
            yield from self._page(page, with_embeddings, with_texts)

    def _page(self, rows: list[Row], with_embeddings: bool, with_texts: bool) -> list[MemoryEntry]:
        vectors = self.vectors((r.key_id for r in rows), arrays=True) if with_embeddings else None
        return self._entries_of(rows, with_texts=with_texts, vectors=vectors)

    # ----------------------------------------------------------------- writes
    def apply(self, update: BankUpdate, *, as_read: bool = False) -> None:
        """Apply a planned update. Idempotent: every value written is absolute. The texts go
        first (content-addressed), then the new keys' vectors, then the entries in one SQLite
        transaction; a key no entry is filed under any more leaves the index. Q is stored as
        the first layout stored it (`entrystore.as_stored`; `as_read`: the entries' Q as an
        old bank gave them, kept as they are)."""
        if update.add:
            self.next_order = max(self.next_order, max(e.order for e in update.add) + 1)
        texts: dict[str, dict[str, str]] = {}
        rows = []
        keys: dict[str, Any] = {}
        for e in update.add:
            h = text_hash(e.intent, e.experience)
            texts[h] = {"intent": e.intent, "experience": e.experience}
            kid = key_id(e.intent, e.embedding)
            keys.setdefault(kid, e.embedding)
            rows.append(row_of(e, kid, h, as_read=as_read))
        updates: list[tuple[str, dict[str, Any]]] = []
        # an entry set here exists after the deletes and adds (which go first, as they always have)
        intents = {mid: r.intent for mid, r in self.entries.rows(update.set_fields).items()
                   if mid not in update.delete} if update.set_fields else {}
        intents.update((e.memory_id, e.intent) for e in update.add)
        for mid, fields in update.set_fields.items():
            if mid not in intents:
                continue  # deleted (or in this same update)
            fields = dict(fields)
            if "experience" in fields:  # a revised memory: a new text under the same key
                h = text_hash(intents[mid], str(fields["experience"]))
                texts[h] = {"intent": intents[mid], "experience": str(fields.pop("experience"))}
                fields["text"] = h
            updates.append((mid, fields))
        if texts:
            self.texts.add(texts)
        new = sorted(set(keys) - self.entries.has_keys(keys))
        for start in range(0, len(new), _ADD_BATCH):
            chunk = new[start:start + _ADD_BATCH]
            self.index.upsert(ids=chunk, embeddings=[np.asarray(keys[k], dtype=np.float32) for k in chunk])
        gone = self.entries.rows(update.delete) if update.delete else {}
        replaced = self.entries.rows(e.memory_id for e in update.add) if update.add else {}
        self.entries.write(delete=list(update.delete), upsert=rows, updates=updates, new_keys=new)
        orphans = self.entries.orphan_keys([r.key_id for r in [*gone.values(), *replaced.values()]])
        if orphans:
            self.index.delete(ids=orphans)
            self.entries.write(drop_keys=orphans)

    def hold(self) -> None:
        """Updates applied until `flush` need not be durable one by one (memrl.memory.entrystore)."""
        self.entries.hold()

    def flush(self) -> None:
        """Make every applied update durable, and end a `hold`."""
        self.entries.flush()

    def close(self) -> None:
        """Release the client. Chroma's close() stops its system (the index files), but its
        SQLite connection goes only with the last reference to the client's objects, some of
        them in cycles: they are dropped and collected here, so an embedded bank's files are
        all closed when this returns. The bank is unusable after it."""
        store = self.__dict__.pop("entries", None)
        if store is not None:
            store.close()
        client = self.__dict__.pop("client", None)
        close = getattr(client, "close", None)
        if callable(close):
            close()
        self.__dict__.pop("index", None)
        del client, close
        gc.collect()

    def export_jsonl(self, path: str | Path) -> int:
        n = 0
        with open(path, "w", encoding="utf-8") as fh:
            for entry in self.iter_entries(with_embeddings=True):  # to_dict: the vector as a list
                fh.write(json.dumps(entry.to_dict(), ensure_ascii=False) + "\n")
                n += 1
        return n
