"""Starting a new bank's key index from a copy of a source bank's (`memrl bank merge`): the
source's Chroma files copied as they are (a persistent directory's documented backup), only
when its index was built with the new bank's search settings and this Chroma stores the copied
vectors as it would store the ones the new bank is given; the new bank then adds only the keys
the copy lacks, and drops the copied keys it does not hold once the new ones are in.
`memrl.memory.bankio.create_bank` is the one caller."""

from __future__ import annotations

import gc
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from memrl.memory.bank import KEYS_SUFFIX, BankSettings, ChromaBank

CHROMA_FILE = "chroma.sqlite3"
KEYS_PAGE = 5000  # key ids listed or dropped at a time (Chroma's largest batch is 5,461)
PROBE = 64  # copied keys checked against what this Chroma stores (`stored_alike`)


def collection_names(client: Any) -> list[str]:
    return sorted(c.name for c in client.list_collections())


@dataclass
class IndexSource:
    """A source bank's key index (an embedded Chroma collection) that a new bank may start from
    instead of building its own (`create_bank`): where it is and which keys it holds."""

    chroma_dir: Path
    collection: str  # the bank's collection name; its keys are in <collection>-keys
    keys: set[str]  # the ids of the keys its index holds


def _segment_dir(path: Path) -> bool:
    """A Chroma segment's directory (named by the segment's UUID)."""
    try:
        return path.is_dir() and str(uuid.UUID(path.name)) == path.name
    except ValueError:
        return False


def _same_search(configuration: Any, settings: BankSettings) -> bool:
    hnsw = dict((configuration or {}).get("hnsw") or {})
    want = {"space": "cosine", "ef_construction": settings.ef_construction, "ef_search": settings.ef_search,
            "max_neighbors": settings.max_neighbors}
    return {k: hnsw.get(k) for k in want} == want


def empty_dir(out: Path) -> None:
    """Remove everything in `out` (a bank in the making that will not be taken)."""
    for p in out.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def copy_index(out: Path, src: IndexSource, settings: BankSettings) -> bool:
    """Start the empty bank directory `out` with a copy of `src`'s key index: Chroma's own files
    copied as they are (a persistent directory's documented backup), the collection renamed
    for `settings.collection`, every other collection dropped. Only an index built with the
    search settings `settings` asks for is taken (False: `out` is left empty). The source is
    read, never opened."""
    import chromadb
    from chromadb.config import Settings

    if settings.host or not (src.chroma_dir / CHROMA_FILE).is_file():
        return False
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src.chroma_dir / CHROMA_FILE, out / CHROMA_FILE)
    for d in sorted(src.chroma_dir.iterdir()):
        if _segment_dir(d):
            shutil.copytree(d, out / d.name)
    name, want = src.collection + KEYS_SUFFIX, settings.collection + KEYS_SUFFIX
    client = chromadb.PersistentClient(path=str(out), settings=Settings(anonymized_telemetry=False))
    try:
        names = collection_names(client)
        ok = name in names and _same_search(
            client.get_collection(name, embedding_function=None).configuration_json, settings)
        if ok:
            for other in names:
                if other != name:
                    client.delete_collection(other)
            if name != want:
                client.get_collection(name, embedding_function=None).modify(name=want)
    finally:
        getattr(client, "close", lambda: None)()
        del client
        gc.collect()
    if not ok:
        empty_dir(out)
    return ok


def stored_alike(bank: ChromaBank, given: dict[str, np.ndarray]) -> bool:
    """Whether the copied index holds each of these keys as this Chroma would store the vector
    it is given (`given`: key id -> that vector): Chroma normalises a cosine index's vectors
    as it stores them, so the copy is taken only if its normalisation is this one's."""
    import chromadb
    from chromadb.config import Settings

    stored = bank.vectors(given, arrays=True)
    with tempfile.TemporaryDirectory(prefix="memrl-probe-") as tmp:
        client = chromadb.PersistentClient(path=tmp, settings=Settings(anonymized_telemetry=False))
        try:
            probe = client.create_collection("probe", configuration={"hnsw": {"space": "cosine"}},
                                             embedding_function=None)
            ids = list(given)
            probe.add(ids=ids, embeddings=[np.asarray(given[k], dtype=np.float32) for k in ids])
            res = probe.get(ids=ids, include=["embeddings"])
            fresh = {k: np.asarray(v, dtype=np.float32) for k, v in zip(res["ids"], res["embeddings"])}
        finally:
            getattr(client, "close", lambda: None)()
            del client
            gc.collect()
    return all(k in stored and stored[k].tobytes() == fresh[k].tobytes() for k in ids)


def reuse_index(bank: ChromaBank, keys: set[str], key_vector: Callable[[str], Any]) -> list[str] | None:
    """A bank whose index was copied (`copy_index`) keeps the copied keys that are in `keys`
    (the key ids of the entries it will hold: a key id is its intent with the vector it was
    given, so such a record is the one the bank would add) and returns the others, to drop once
    the new keys are in (dropped before, their places would be taken by the new keys, which
    costs Chroma more than adding them). None: the copy stores vectors otherwise
    (`stored_alike`) and is not taken."""
    held: list[str] = []
    while True:
        page = bank.index.get(include=[], limit=KEYS_PAGE, offset=len(held))["ids"]
        held += page
        if len(page) < KEYS_PAGE:
            break
    keep = [k for k in held if k in keys]
    step = max(1, len(keep) // PROBE)
    if keep and not stored_alike(bank, {k: key_vector(k) for k in keep[::step][:PROBE]}):
        return None
    bank.entries.write(new_keys=keep)
    return [k for k in held if k not in keys]
