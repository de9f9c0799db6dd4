"""Banks of the first layout: every entry one Chroma record, with its vector (the key), its
experience as the document and its fields as metadata (memrl.memory.bank's module doc says
what replaced it).

- `iter_legacy`: the entries of such a collection in insertion order, a page at a time (the
  bank tools read an old bank this way, from a copy);
- `convert`: the first time a run opens its old bank, the bank is rewritten in the current
  layout in the same directory: the key vectors into `<collection>-keys`, the entries into
  `entries.sqlite3` (written under a temporary name and renamed when complete, so a
  conversion cut short starts again), the texts into the bank's text file; then the old
  collection is dropped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.entrystore import FILE, LAYOUT, EntryStore
from memrl.memory.textstore import TEXTS_FILE, TextStore

_PAGE = 1000


def iter_legacy(col: Any, *, with_embeddings: bool = False, with_texts: bool = True) -> Iterator[MemoryEntry]:
    """Every entry of an old-layout collection, in insertion order, read a page at a time
    (the ids and orders first, then the pages in that order)."""
    ids: list[tuple[int, str]] = []
    offset = 0
    while True:
        res = col.get(include=["metadatas"], limit=5 * _PAGE, offset=offset)
        if not res["ids"]:
            break
        ids += [(int((m or {}).get("order", 0)), mid) for mid, m in zip(res["ids"], res["metadatas"])]
        offset += len(res["ids"])
    ids.sort()
    include = ["metadatas"] + (["documents"] if with_texts else []) + (["embeddings"] if with_embeddings else [])
    for start in range(0, len(ids), _PAGE):
        want = [mid for _, mid in ids[start:start + _PAGE]]
        res = col.get(ids=want, include=include)
        docs = res.get("documents") if with_texts else None
        embs = res.get("embeddings") if with_embeddings else None
        got = {mid: MemoryEntry.from_chroma(mid, docs[i] if docs is not None else "", meta,
                                            None if embs is None else embs[i])
               for i, (mid, meta) in enumerate(zip(res["ids"], res["metadatas"]))}
        for mid in want:
            if mid in got:
                yield got[mid]


def hnsw_of(col: Any) -> dict[str, Any]:
    conf = (getattr(col, "configuration", None) or {}).get("hnsw") or {}
    return {k: conf[k] for k in ("space", "ef_search", "ef_construction", "max_neighbors") if k in conf}


def convert(bank: Any, texts: str | Path | None) -> None:
    """Rewrite `bank`'s old collection in the current layout (module doc). Uses the bank's own
    `apply`, so entries, keys and texts are written exactly as a run writes them. `bank` is the
    memrl.memory.bank.ChromaBank that calls this (typed loosely: the modules import one way)."""
    old = bank.client.get_collection(bank.name, embedding_function=None)
    bank.hnsw = {**bank.hnsw, **hnsw_of(old)}
    if bank.keys_name in {c.name for c in bank.client.list_collections()}:
        bank.client.delete_collection(bank.keys_name)  # a conversion that was cut short
    tmp = bank.path / (FILE + ".tmp")
    tmp.unlink(missing_ok=True)
    store = EntryStore(tmp)
    rel = TEXTS_FILE if texts is None else os.path.relpath(Path(texts).resolve(), bank.path.resolve())
    store.set_facts(layout=LAYOUT, collection=bank.name, texts=rel, converted_from="chroma-records")
    bank.entries = store
    bank.texts = TextStore(Path(texts) if texts is not None else bank.path / TEXTS_FILE)
    bank.index = bank.client.get_or_create_collection(name=bank.keys_name, configuration={"hnsw": bank.hnsw},
                                                      embedding_function=None)
    bank.next_order = 0
    page: list[MemoryEntry] = []
    for entry in iter_legacy(old, with_embeddings=True):
        page.append(entry)
        if len(page) == _PAGE:
            bank.apply(BankUpdate(add=page), as_read=True)
            page = []
    if page:
        bank.apply(BankUpdate(add=page), as_read=True)
    store.close()
    os.replace(tmp, bank.path / FILE)
    bank.client.delete_collection(bank.name)
    bank.legacy_present = False
