"""Banks of the first layout (every entry a Chroma record with its vector, its text as the
document and its fields as metadata, memrl.memory.legacy): the bank tools read them as they
are without changing them, and a run whose bank is one goes on from it as if it had always
had the current layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from coin_runner import finish

from memrl.cli.bank import main as bank_main
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir
from memrl.memory.bank import ChromaBank
from memrl.memory.bankio import read_entries, resolve
from memrl.memory.entry import MemoryEntry
from memrl.memory.entrystore import as_stored
from memory_state import tree_hash


def write_old_layout(bank_dir: Path, entries: list[MemoryEntry], collection: str = "memories") -> None:
    """A bank as the first layout wrote it (what ChromaBank.apply did then)."""
    import chromadb
    from chromadb.config import Settings

    bank_dir.mkdir(parents=True, exist_ok=True)
    client = chromadb.PersistentClient(path=str(bank_dir), settings=Settings(anonymized_telemetry=False))
    col = client.get_or_create_collection(collection, embedding_function=None, configuration={
        "hnsw": {"space": "cosine", "ef_search": 256, "ef_construction": 256, "max_neighbors": 32}})
    col.upsert(ids=[e.memory_id for e in entries], embeddings=[list(map(float, e.embedding)) for e in entries],
               documents=[e.experience for e in entries], metadatas=[e.metadata() for e in entries])
    getattr(client, "close", lambda: None)()


def to_old_layout(run_dir: Path) -> list[MemoryEntry]:
    """Rewrite a run's bank in the first layout; returns its entries."""
    import gc

    from chromadb.api.shared_system_client import SharedSystemClient

    rd = RunDir(run_dir)
    entries = read_entries(resolve(run_dir))
    gc.collect()  # the run's bank, released: Chroma keeps one system per directory
    SharedSystemClient.clear_system_cache()
    shutil.rmtree(rd.bank)
    write_old_layout(rd.bank, entries)
    SharedSystemClient.clear_system_cache()
    return entries


def test_the_tools_read_an_old_bank_as_it_is(tmp_path, capsys):
    finish(tmp_path / "run", epochs=2)
    entries = to_old_layout(tmp_path / "run")
    before = tree_hash(tmp_path / "run")
    out = tmp_path / "old.jsonl"
    assert bank_main(["export", str(tmp_path / "run"), str(out)]) == 0
    assert bank_main(["top", str(tmp_path / "run"), "-n", "3", "--json"]) == 0
    assert tree_hash(tmp_path / "run") == before  # read from a copy, never converted in place
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["memory_id"] for r in rows] == [e.memory_id for e in entries]
    assert [r["experience"] for r in rows] == [e.experience for e in entries]
    assert [r["q"] for r in rows] == [as_stored(e.q) for e in entries]  # as the old bank reads Q
    top = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert [t["memory_id"] for t in top] == [e.memory_id for e in sorted(
        entries, key=lambda e: (-as_stored(e.q), -e.visits, e.order))[:3]]
    assert all(t["experience"] for t in top)


def test_a_run_with_an_old_bank_goes_on_as_if_it_never_had_one(tmp_path):
    ref_snap, ref_metrics, _ = finish(tmp_path / "ref", epochs=3)
    finish(tmp_path / "old", epochs=1)
    to_old_layout(tmp_path / "old")
    rd = RunDir(tmp_path / "old")
    assert not (rd.bank / "entries.sqlite3").exists()
    snap, metrics, _ = finish(tmp_path / "old", epochs=3)  # converts the bank, then resumes
    assert snap == ref_snap and metrics == ref_metrics
    assert [(r.epoch, r.task_id, r.success, [m["id"] for m in r.injected])
            for r in read_episodes(rd.episodes)] == \
        [(r.epoch, r.task_id, r.success, [m["id"] for m in r.injected])
         for r in read_episodes(RunDir(tmp_path / "ref").episodes)]
    bank = ChromaBank(rd.bank)
    assert not bank.legacy_present and bank.index_count() < bank.count()  # one vector per key now
    bank.close()


def test_a_conversion_cut_short_is_done_again(tmp_path, monkeypatch):
    finish(tmp_path / "run", epochs=2)
    entries = to_old_layout(tmp_path / "run")
    import memrl.memory.legacy as legacy

    def crash(*a):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(legacy.os, "replace", crash)
        with pytest.raises(KeyboardInterrupt):
            ChromaBank(RunDir(tmp_path / "run").bank)
    bank = ChromaBank(RunDir(tmp_path / "run").bank)
    got = list(bank.iter_entries(with_embeddings=True))
    assert [e.memory_id for e in got] == [e.memory_id for e in entries]
    assert [e.experience for e in got] == [e.experience for e in entries]
    assert [e.q for e in got] == [as_stored(e.q) for e in entries]
    bank.close()
