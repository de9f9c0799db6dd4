"""Bank tools (`memrl bank`): export → import gives the same retrieval results,
merge keeps every entry under a unique id, sources are never modified, `top` ranks by Q, and
`hist` rebuilds the bank's Q distribution at the end of every epoch exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_env import INTENTS, TinyEnv, reply

from memrl.cli.bank import main as bank_main
from memrl.cli.bank import q_per_epoch, top_entries
from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.records import Task, iter_jsonl
from memrl.core.rundir import RunDir
from memrl.journal.banklog import BankHistory
from clients import make_client

from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.bank import BankSettings, ChromaBank
from memrl.memory.bankio import BankSourceError, merge_entries, read_entries, resolve
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memory_state import snapshot, tree_hash

EMB = HashingEmbedder(dim=32)


def train(run_dir: Path, *, epochs: int = 3, n_tasks: int = 6, model: str = "scripted-a",
          snapshots: list | None = None, **memory_kw) -> MemRLMemory:
    """A small real run (scripted model, hashing embedder) with a run card naming both."""
    settings = MemRLSettings(**{"delta": 0.0, "k1": 4, "k2": 2, **memory_kw})
    memory = MemRLMemory(settings, bank_dir=RunDir(run_dir).bank, embedder=EMB)
    llm = make_client(ScriptedBackend(reply, model_id=model), max_concurrency=2, max_retries=0)
    env = TinyEnv(n_tasks=n_tasks)
    on_end = (lambda ep: snapshots.append(snapshot(memory))) if snapshots is not None else None
    Runner(run_dir, env=env, memory=memory, llm=llm,
           settings=RunnerSettings(epochs=epochs, batch_size=2, progress=False), seed=3,
           embed_intents=EMB.embed, on_epoch_end=on_end).run(env.tasks())
    card = {"config": {"memory": {"name": "memrl", "bank": settings.bank.model_dump()}},
            "embedder": EMB.model_id, "model": model}
    RunDir(run_dir).card.write_text(json.dumps(card))
    return memory


def retrieval(bank_dir: Path, queries: list[Task]) -> list[list[tuple]]:
    """Phase A + B results of MemRL over the bank at `bank_dir`: (id, Q, sim, score)."""
    mem = MemRLMemory(MemRLSettings(delta=0.0, k1=5, k2=3), bank_dir=bank_dir, embedder=EMB)
    return [[(m.memory_id, m.q, m.similarity, m.score) for m in mem.retrieve(t)] for t in queries]


QUERIES = [Task(f"q{i}", text) for i, text in enumerate(
    INTENTS + ["stack a block on the table", "put the lamp in the box", "red green blue"])]


def test_export_import_round_trip_gives_the_same_retrieval(tmp_path, capsys):
    run = tmp_path / "run"
    train(run)
    before = tree_hash(run)
    out = tmp_path / "bank.jsonl"
    assert bank_main(["export", str(run), str(out)]) == 0
    assert tree_hash(run) == before  # the source is read from a copy
    rows = list(iter_jsonl(out))
    src_entries = read_entries(resolve(run))
    assert len(rows) == len(src_entries) == 18  # 6 tasks x 3 epochs, one memory each
    assert {"memory_id", "intent", "experience", "q", "visits", "embedding", "epoch",
            "injected_ids"} <= set(rows[0])
    assert json.loads(out.with_name("bank.jsonl.meta.json").read_text())["embedder"] == EMB.model_id

    imported = tmp_path / "imported"
    assert bank_main(["import", str(out), str(imported)]) == 0
    got, want = retrieval(imported, QUERIES), retrieval(RunDir(run).bank, QUERIES)
    assert any(len(r) == 3 for r in want)  # the queries do retrieve
    assert got == want  # same ids, same order, same Q, similarities and scores
    assert snapshot(ChromaBank(imported)) == snapshot(ChromaBank(RunDir(run).bank))
    assert [e.embedding for e in read_entries(resolve(imported))] == [e.embedding for e in src_entries]
    # provenance survives the round trip: a run seeded from the import checks the embedder
    assert resolve(imported).embedder == EMB.model_id

    # importing into a bank directory that holds data is refused, naming the directory
    assert bank_main(["import", str(out), str(imported)]) == 2
    assert "not empty" in capsys.readouterr().err


def entries(prefix: str, n: int, offset: int = 0) -> list[MemoryEntry]:
    vecs = EMB.embed([f"{prefix} task {i}" for i in range(n)])
    return [MemoryEntry(memory_id=f"e001:t{i}", intent=f"{prefix} task {i}", experience=f"{prefix} {i}",
                        embedding=v.tolist(), q=0.1 * i, order=i + offset,
                        injected_ids=[f"e001:t{i - 1}"] if i else [])
            for i, v in enumerate(vecs)]


def test_merge_keeps_every_entry_under_a_unique_id(tmp_path):
    a, b = tmp_path / "os", tmp_path / "db"
    ChromaBank(a).apply(BankUpdate(add=entries("os", 5)))
    ChromaBank(b).apply(BankUpdate(add=entries("db", 4)))  # ids e001:t0..t3 exist in both
    hashes = tree_hash(a), tree_hash(b)
    out = tmp_path / "merged"
    assert bank_main(["merge", str(a), str(b), str(out), "--labels", "os,db"]) == 0
    assert (tree_hash(a), tree_hash(b)) == hashes
    merged = read_entries(resolve(out))
    ids = [e.memory_id for e in merged]
    assert len(ids) == 9 and len(set(ids)) == 9
    assert ids == [f"os:e001:t{i}" for i in range(5)] + [f"db:e001:t{i}" for i in range(4)]
    by_id = {e.memory_id: e for e in merged}
    assert by_id["db:e001:t2"].experience == "db 2" and by_id["os:e001:t2"].experience == "os 2"
    assert by_id["db:e001:t2"].injected_ids == ["db:e001:t1"]  # references follow the rename
    assert by_id["db:e001:t0"].extra["merged_from"] == "db"
    meta = json.loads((out / "bank_meta.json").read_text())
    assert set(meta["merged_from"]) == {"os", "db"} and meta["entries"] == 9
    # the merged bank is an ordinary bank: a query finds entries of both sources
    hits = ChromaBank(out).query(EMB.embed(["db task 1"])[0], 2)
    assert hits[0][0].memory_id == "db:e001:t1"


def test_merge_rejects_equal_labels_and_mixed_embedders(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    ChromaBank(a).apply(BankUpdate(add=entries("x", 2)))
    ChromaBank(b).apply(BankUpdate(add=entries("y", 2)))
    assert bank_main(["merge", str(a), str(b), str(tmp_path / "m"), "--labels", "x,x"]) == 2
    (a / "bank_meta.json").write_text(json.dumps({"embedder": "hashing-32"}))
    (b / "bank_meta.json").write_text(json.dumps({"embedder": "minilm"}))
    assert bank_main(["merge", str(a), str(b), str(tmp_path / "m")]) == 2
    assert "embedded by" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_merge_entries_orders_second_bank_after_first():
    merged = merge_entries([("a", entries("a", 3, offset=10)), ("b", entries("b", 2))])
    assert [e.order for e in merged] == [10, 11, 12, 13, 14]


def test_top_ranks_by_q_then_visits(tmp_path, capsys):
    run = tmp_path / "run"
    train(run, epochs=2)
    all_entries = read_entries(resolve(run))
    best = top_entries(all_entries, 4)
    assert [e.q for e in best] == sorted((e.q for e in all_entries), reverse=True)[:4]
    assert bank_main(["top", str(run), "-n", "4", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [r["memory_id"] for r in shown] == [e.memory_id for e in best]
    assert "embedding" not in shown[0]
    assert bank_main(["top", str(tmp_path / "nothing")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_hist_gives_bank_q_at_the_end_of_every_epoch(tmp_path, capsys):
    """From the bank-update log when the run has one; rebuilt from the records and the final
    bank for a run from before the log (the same numbers for MemRL), and it says which."""
    run = tmp_path / "run"
    snaps: list = []
    train(run, epochs=4, snapshots=snaps)
    records = list(iter_jsonl(RunDir(run).episodes))
    logged = q_per_epoch(records, BankHistory.read(run))
    rebuilt = q_per_epoch(records, None, read_entries(resolve(run)))
    assert (logged["source"], rebuilt["source"]) == ("bank_updates", "rebuilt")
    for data in (logged, rebuilt):
        assert data["epochs"] == [1, 2, 3, 4]
        for ep, snap in enumerate(snaps, 1):  # what the bank really held after each epoch
            assert sorted(data["bank"][ep]) == pytest.approx(sorted(e["q"] for e in snap))
        assert len(set(map(tuple, (sorted(v) for v in data["bank"].values())))) > 1  # Q moved
        assert data["injected"][1] == [m["q"] for r in records if r["epoch"] == 1 for m in r["injected"]]
    assert bank_main(["hist", str(run), "--bins", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"] == "bank_updates"
    assert [r["n"] for r in out["bank"]] == [len(s) for s in snaps]
    assert all(sum(r["counts"]) == r["n"] for r in out["bank"] + out["injected"])
    RunDir(run).bank_updates.unlink()  # an old run
    assert bank_main(["hist", str(run), "--bins", "5"]) == 0
    text = capsys.readouterr().out
    assert "rebuilt from the episode records" in text and "bank_updates.jsonl" in text


def test_copy_for_another_model_records_provenance(tmp_path, capsys):
    run = tmp_path / "run"
    train(run, epochs=1)
    out = tmp_path / "for-b"
    assert bank_main(["copy", str(run), "--for-model", "gpt-4o", str(out)]) == 0
    assert "memory.bank.init_from=" in capsys.readouterr().out
    meta = json.loads((out / "bank_meta.json").read_text())
    assert (meta["for_model"], meta["model"], meta["embedder"]) == ("gpt-4o", "scripted-a", EMB.model_id)
    assert snapshot(ChromaBank(out)) == snapshot(ChromaBank(RunDir(run).bank))
    assert resolve(out).embedder == EMB.model_id


def test_bad_export_line_is_named(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"memory_id": "a", "intent": "i", "experience": "e", "embedding": [1.0]}\n{"oops": 1}\n')
    with pytest.raises(BankSourceError, match=r"x.jsonl:2"):
        read_entries(resolve(bad))


def test_bank_settings_reject_missing_init_from_source(tmp_path):
    with pytest.raises(ValueError, match="init_from"):
        BankSettings(init_from=str(tmp_path / "missing"))
