"""`memrl bank merge` starts the merged bank's key index from a copy of a source's index (the one
holding most of the merged keys) and adds only the keys it lacks: building an index of
3,072-dimension keys is what a merge spends its time on. The merged bank is the one a new
index gives: the same entries, vectors, fingerprint, key records and retrieval. A copy that
does not fit (other search settings, another way of storing vectors) is not taken."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from chromadb.api.models.Collection import Collection

from memrl.cli import bank as bank_cli
from memrl.cli.bank import Spool
from memrl.cli.bank import main as bank_main
from memrl.llm.embed import HashingEmbedder
from memrl.memory import index_copy
from memrl.memory.bank import BankSettings, ChromaBank
from memrl.memory.bankio import read_entries, resolve
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.entrystore import key_id

EMB = HashingEmbedder(dim=32)


def entries(prefix: str, n: int, *, per_key: int = 2, raw: bool = False) -> list[MemoryEntry]:
    """`n` entries, `per_key` to a key; `raw`: vectors of random values, which the index gives
    back a rounding away from what it was given (it keeps them normalised), so the key ids of
    the vectors read back are not those the source filed them under."""
    intents = [f"{prefix} task {i // per_key}" for i in range(n)]
    vecs = EMB.embed(intents)
    if raw:
        keys = np.random.default_rng(7).standard_normal((n // per_key + 1, EMB.dim)).astype(np.float32)
        vecs = np.stack([keys[i // per_key] for i in range(n)])
    return [MemoryEntry(memory_id=f"e{i % per_key}:{prefix}{i // per_key}", intent=intents[i],
                        experience=f"{prefix} {i}", embedding=vecs[i], q=0.1 * i, visits=i % 3, order=i,
                        extra={"n": i})
            for i in range(n)]


def as_tuple(e: MemoryEntry) -> tuple:
    return (e.memory_id, e.intent, e.experience, e.q, e.visits, e.order, e.extra, e.injected_ids,
            np.asarray(e.embedding, dtype=np.float32).tobytes())


def make(path: Path, es: list[MemoryEntry], **settings) -> Path:
    bank = BankSettings(**settings).open(path)
    bank.apply(BankUpdate(add=es))
    bank.close()
    return path


@pytest.fixture
def upserted(monkeypatch):
    """The key ids every index upsert is given, in order."""
    seen: list[str] = []
    real = Collection.upsert

    def upsert(self, ids, *a, **kw):
        seen.extend(ids)
        return real(self, ids, *a, **kw)

    monkeypatch.setattr(Collection, "upsert", upsert)
    return seen


def merge(a: Path, b: Path, out: Path, *extra: str) -> None:
    assert bank_main(["merge", str(a), str(b), str(out), "--labels", "x,y", *extra]) == 0


def index_state(path: Path, queries: list[np.ndarray]) -> tuple:
    """What a merged bank holds: its entries, its key records (ids and vectors, bitwise) and
    what a query finds."""
    got = [as_tuple(e) for e in read_entries(resolve(path))]
    bank = ChromaBank(path, create=False)
    try:
        keys = bank.entries.key_ids()
        held = bank.index.get(include=[])["ids"]
        vectors = {k: v.tobytes() for k, v in bank.vectors(sorted(keys), arrays=True).items()}
        found = [[(e.memory_id, round(s, 6)) for e, s in bank.query(q, 3)] for q in queries]
    finally:
        bank.close()
    assert sorted(held) == sorted(keys)  # every key record the entries name, and no other
    meta = json.loads((path / "bank_meta.json").read_text())
    return got, sorted(keys), vectors, found, meta["entries"], meta["fingerprint"]


def test_merge_starts_from_the_larger_sources_index_and_gives_the_bank_a_new_index_gives(
        tmp_path, upserted, monkeypatch):
    small = make(tmp_path / "small", entries("os", 6))
    large = make(tmp_path / "large", entries("db", 20))
    upserted.clear()
    queries = [EMB.embed([f"{p} task {i}"])[0] for p in ("os", "db") for i in range(0, 10, 3)]

    merge(small, large, tmp_path / "reused")
    reused_adds = list(upserted)
    upserted.clear()
    monkeypatch.setattr(bank_cli, "reusable_index", lambda indexes, keys: None)  # a new index, as before
    merge(small, large, tmp_path / "new")
    new_adds = list(upserted)

    state = index_state(tmp_path / "reused", queries)
    assert state == index_state(tmp_path / "new", queries)
    keys = state[1]
    assert sorted(new_adds) == keys  # a new index: every key added
    large_keys = {key_id(e.intent, e.embedding) for e in read_entries(resolve(large))}
    assert sorted(reused_adds) == sorted(set(keys) - large_keys)  # a copy of the large one's: the rest only
    assert len(reused_adds) == 3 and len(keys) == 13


def test_keys_the_copy_holds_under_other_ids_are_added_anew_and_the_copies_dropped(tmp_path, upserted):
    """A vector the index gives back a rounding away from what it was given has, read back,
    another key id than the source filed it under: that record is not one of the merged
    bank's; the key is added under its new id and the copied record leaves the index."""
    a = make(tmp_path / "a", entries("os", 16) + entries("odd", 4, raw=True))
    b = make(tmp_path / "b", entries("db", 2))
    source_keys = ChromaBank(tmp_path / "a", create=False).entries.key_ids()
    upserted.clear()
    merge(a, b, tmp_path / "m")
    queries = [EMB.embed([f"os task {i}"])[0] for i in range(4)]
    got, keys, *rest = index_state(tmp_path / "m", queries)
    kept = source_keys & set(keys)
    odd = {key_id(e.intent, e.embedding) for e in entries("odd", 4, raw=True)}
    assert len(source_keys) == 10 and 5 <= len(kept) < 10 and not odd & kept  # the odd keys are not kept ...
    assert sorted(upserted) == sorted(set(keys) - kept)  # ... but added anew
    bank = ChromaBank(tmp_path / "m", create=False)
    assert bank.index.get(ids=sorted(source_keys - kept))["ids"] == [] and bank.index_count() == 11
    bank.close()
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(bank_cli, "reusable_index", lambda indexes, keys: None)
    try:
        merge(a, b, tmp_path / "new")
    finally:
        monkeypatch.undo()
    assert index_state(tmp_path / "new", queries) == (got, keys, *rest)


def test_an_index_of_other_search_settings_or_another_collection_is_not_copied(tmp_path, upserted):
    a = make(tmp_path / "a", entries("os", 10), ef_construction=64)
    b = make(tmp_path / "b", entries("db", 2))
    upserted.clear()
    merge(b, a, tmp_path / "m")  # the merged bank takes B's settings: A's index (the larger) is not copied
    assert len(upserted) == 6
    assert json.loads((tmp_path / "m" / "bank_meta.json").read_text())["hnsw"]["ef_construction"] == 256

    upserted.clear()
    merge(a, b, tmp_path / "m2", "--ef-construction", "128")  # settings A's index was not built with
    assert len(upserted) == 6

    upserted.clear()
    merge(a, b, tmp_path / "m3", "--ef-construction", "64")  # the settings A's index was built with: copied
    assert len(upserted) == 1

    c = make(tmp_path / "c", entries("db", 10), collection="other")
    upserted.clear()
    merge(b, c, tmp_path / "m4")  # C's index, renamed: the merged bank's collection is "memories"
    assert upserted == []  # B's one key is C's first
    bank = ChromaBank(tmp_path / "m4", create=False)
    assert sorted(col.name for col in bank.client.list_collections()) == ["memories-keys"]
    assert bank.index_count() == 5
    bank.close()


def test_a_copy_that_stores_vectors_otherwise_is_not_taken(tmp_path, upserted, monkeypatch):
    a = make(tmp_path / "a", entries("os", 10))
    b = make(tmp_path / "b", entries("db", 2))
    upserted.clear()
    probed: list[int] = []

    def otherwise(bank, given):
        probed.append(len(given))
        return False

    monkeypatch.setattr(index_copy, "stored_alike", otherwise)
    merge(a, b, tmp_path / "m")
    assert probed == [5] and len(upserted) == 6  # probed, refused, and a new index built
    got, keys, *_ = index_state(tmp_path / "m", [])
    assert len(got) == 12 and len(keys) == 6
    assert len([d for d in (tmp_path / "m").iterdir() if d.is_dir()]) == 1  # one index, nothing of the copy


def test_the_probe_compares_what_this_chroma_stores(tmp_path):
    es = entries("os", 4) + entries("odd", 4, raw=True)
    held = ChromaBank(make(tmp_path / "a", es), create=False)
    try:
        given = {key_id(e.intent, e.embedding): np.asarray(e.embedding) for e in es}
        assert index_copy.stored_alike(held, given)  # what the bank was given, stored as this Chroma stores it
        assert not index_copy.stored_alike(held, {k: np.roll(v, 1) for k, v in given.items()})
        odd = {k: v for k, v in given.items() if held.vectors([k], arrays=True)[k].tobytes() != v.tobytes()}
        assert odd  # given back a rounding away from what it was given, and still alike
    finally:
        held.close()


def test_a_spool_knows_its_keys_and_their_vectors():
    es = entries("x", 5, per_key=2)
    with Spool() as spool:
        spool.add(es)
        assert set(spool.keys) == {key_id(e.intent, e.embedding) for e in es}
        for e in es:
            assert spool.vector(key_id(e.intent, e.embedding)).tobytes() == np.asarray(e.embedding).tobytes()
