"""What the bank keeps on disk (memrl.memory.bank): one vector per key, each text once (in the
run's memories.jsonl, not in the bank), no full-text index, Q rounded as Chroma's metadata
rounds it, and the journal's vectors as float32 bytes."""

from __future__ import annotations

import json
import random
import sqlite3

import numpy as np
from coin_runner import finish

from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.memory.bank import ChromaBank
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.entrystore import as_stored


def _entry(i: int, intent: str, vec: np.ndarray, **kw) -> MemoryEntry:
    return MemoryEntry(memory_id=f"m{i}", intent=intent, experience=f"text {i}", embedding=vec.tolist(),
                       order=i, **kw)


def test_entries_of_one_key_share_one_stored_vector(tmp_path):
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    bank = ChromaBank(tmp_path / "b")
    bank.apply(BankUpdate(add=[_entry(i, f"task {i % 3}", vecs[i % 3]) for i in range(9)]))
    assert bank.count() == 9 and bank.index_count() == 3
    hits = bank.neighbours(vecs[1], 1)
    assert {e.memory_id for e, s in hits if s > 0.999} == {"m1", "m4", "m7"}  # the whole key, at once
    got = bank.get(["m4"], with_embeddings=True)["m4"]
    assert np.allclose(got.embedding, vecs[1]) and got.experience == "text 4"
    bank.apply(BankUpdate(delete=["m1", "m4", "m7"]))  # the key's last entry gone: its vector too
    assert bank.count() == 6 and bank.index_count() == 2
    bank.close()


def test_a_run_stores_each_text_once_and_no_full_text_index(tmp_path):
    finish(tmp_path / "run", epochs=2)
    rd = RunDir(tmp_path / "run")
    lines = list(iter_jsonl(rd.memories))
    assert len({r["hash"] for r in lines}) == len(lines)  # each text once in memories.jsonl
    bank = ChromaBank(rd.bank)
    entries = list(bank.iter_entries())
    assert entries and all(e.experience for e in entries)  # the bank reads them from there
    needle = entries[-1].experience.encode()
    for path in rd.bank.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), f"{path} holds a memory text"
    db = sqlite3.connect(rd.bank / "chroma.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM embedding_fulltext_search").fetchone() == (0,)
    assert db.execute("SELECT COUNT(*) FROM embedding_metadata").fetchone() == (0,)
    assert (rd.bank / "entries.sqlite3").exists()
    bank.close()


def test_q_is_stored_as_chroma_metadata_reads_it_back(tmp_path):
    """The first layout kept Q as Chroma metadata, which reads back one unit in the last place
    away for about one value in ten; `as_stored` gives what Chroma gives, value for value."""
    import chromadb
    from chromadb.config import Settings

    assert as_stored(0.20612999999999998) == 0.20613
    assert as_stored(0.45816534656999996) == 0.45816534657
    assert as_stored(-0.045899999999999996) == -0.0459
    rng = random.Random(1)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-9, 3) for _ in range(2000)] + [0.0, 1.0, -1.0, 1e-7]
    client = chromadb.PersistentClient(path=str(tmp_path / "c"), settings=Settings(anonymized_telemetry=False))
    col = client.get_or_create_collection("probe", embedding_function=None)
    col.add(ids=[str(i) for i in range(len(values))], embeddings=[[1.0, 0.0]] * len(values),
            metadatas=[{"q": v} for v in values])
    got = col.get(ids=[str(i) for i in range(len(values))], include=["metadatas"])
    read = {i: m["q"] for i, m in zip(got["ids"], got["metadatas"])}
    assert sum(read[str(i)] != v for i, v in enumerate(values)) > 50  # the rounding is real
    assert all(read[str(i)] == as_stored(v) for i, v in enumerate(values))


def test_the_journal_carries_vectors_as_float32_bytes():
    vec = np.random.default_rng(2).normal(size=3072).astype(np.float32)
    update = BankUpdate(add=[_entry(0, "task", vec)], set_fields={"m9": {"q": 0.5}})
    d = update.to_dict()
    text = json.dumps(d)
    assert len(text) < 3072 * 4 * 4 / 3 + 1000  # base64 of the float32 bytes, no JSON numbers
    assert d["add"][0]["injected_ids"] is update.add[0].injected_ids  # nothing deep-copied
    back = BankUpdate.from_dict(json.loads(text))
    assert np.array_equal(np.asarray(back.add[0].embedding, dtype=np.float32), vec)
    assert back.set_fields == {"m9": {"q": 0.5}}
    old = {"add": [{**update.add[0].to_dict()}], "set_fields": {}, "delete": []}  # a journal before bytes
    assert np.array_equal(np.asarray(BankUpdate.from_dict(json.loads(json.dumps(old))).add[0].embedding,
                                     dtype=np.float32), vec)
