"""`memrl bank merge` holds one bank open at a time: each source is read into a spool (its
entries pickled a page at a time, each distinct vector once in a flat file) and closed before
the next opens, and the merged bank is written once both are closed. What it writes is what
merging two open sources wrote: same ids, order, Q, texts, vectors and fingerprint."""

from __future__ import annotations

import json

import numpy as np

from memrl.cli.bank import Spool
from memrl.cli.bank import main as bank_main
from memrl.llm.embed import HashingEmbedder
from memrl.memory import bankio
from memrl.memory.bank import ChromaBank
from memrl.memory.bankio import merge_entries, read_entries, resolve, write_jsonl
from memrl.memory.entry import BankUpdate, MemoryEntry

EMB = HashingEmbedder(dim=32)


def entries(prefix: str, n: int, *, per_key: int = 1) -> list[MemoryEntry]:
    """`n` entries; each run of `per_key` entries shares one intent and one vector (one key)."""
    intents = [f"{prefix} task {i // per_key}" for i in range(n)]
    vecs = EMB.embed(intents)
    return [MemoryEntry(memory_id=f"e{i % per_key:03d}:t{i // per_key}", intent=intents[i],
                        experience=f"{prefix} {i}", embedding=vecs[i], q=0.1 * i, visits=i % 3, order=i,
                        injected_ids=[f"e000:t{i // per_key - 1}"] if i >= per_key else [],
                        extra={"n": i})
            for i in range(n)]


def as_tuple(e: MemoryEntry) -> tuple:
    return (e.memory_id, e.intent, e.experience, e.q, e.visits, e.success, e.epoch, e.task_id, e.kind,
            e.injected_ids, e.order, e.extra, np.asarray(e.embedding, dtype=np.float32).tobytes())


def test_a_spool_gives_back_its_entries_in_order_with_each_vector_stored_once():
    es = entries("x", 7, per_key=3)  # keys of 3, 3 and 1 entries
    with Spool() as spool:
        spool.PAGE = 2  # several pages, a key's entries across pages
        spool.add(es[:4])
        spool.add(es[4:])
        assert spool._vectors.seek(0, 2) == 3 * 32 * 4  # three distinct vectors, float32
        back = list(spool.entries())
        assert [as_tuple(e) for e in back] == [as_tuple(e) for e in es]
        assert all(isinstance(e.embedding, np.ndarray) and e.embedding.dtype == np.float32 for e in back)
        bare = list(spool.entries(with_embeddings=False))
        assert [e.memory_id for e in bare] == [e.memory_id for e in es] and all(e.embedding == [] for e in bare)
        assert [as_tuple(e) for e in spool.entries()] == [as_tuple(e) for e in es]  # read again
    assert spool._pages.closed and spool._vectors.closed  # the files went with the context


def test_merge_opens_one_source_at_a_time_and_writes_with_none_open(tmp_path, monkeypatch):
    a, b = tmp_path / "os", tmp_path / "db"
    ChromaBank(a).apply(BankUpdate(add=entries("os", 9, per_key=3)))
    ChromaBank(b).apply(BankUpdate(add=entries("db", 5, per_key=2)))
    open_now, most = [0], [0]
    real_enter, real_exit, real_apply = bankio.BankReader.__enter__, bankio.BankReader.__exit__, ChromaBank.apply

    def enter(self):
        open_now[0] += 1
        most[0] = max(most[0], open_now[0])
        return real_enter(self)

    def exit_(self, *exc):
        open_now[0] -= 1
        return real_exit(self, *exc)

    def apply(self, update, **kw):
        assert open_now[0] == 0, "the merged bank is written while a source is open"
        return real_apply(self, update, **kw)

    monkeypatch.setattr(bankio.BankReader, "__enter__", enter)
    monkeypatch.setattr(bankio.BankReader, "__exit__", exit_)
    monkeypatch.setattr(ChromaBank, "apply", apply)
    out = tmp_path / "merged"
    assert bank_main(["merge", str(a), str(b), str(out), "--labels", "os,db"]) == 0
    monkeypatch.undo()
    assert most[0] == 1

    # what the merge wrote: both sources' entries renamed, A's first, B's orders after A's
    want = merge_entries([("os", read_entries(resolve(a))), ("db", read_entries(resolve(b)))])
    got = read_entries(resolve(out))
    assert [as_tuple(e) for e in got] == [as_tuple(e) for e in want]
    meta = json.loads((out / "bank_meta.json").read_text())
    assert meta["entries"] == 14 and meta["fingerprint"] == bankio.fingerprint(want)
    assert ChromaBank(out).index_count() == 3 + 3  # one vector per key, as in the sources


def test_merge_of_an_export_and_a_bank_names_a_duplicate_id_by_its_label(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b"
    es = entries("x", 3)
    write_jsonl(es + es[:1], a, json_vectors=False)  # e000:t0 twice
    ChromaBank(b).apply(BankUpdate(add=entries("y", 2)))
    out = tmp_path / "m"
    assert bank_main(["merge", str(a), str(b), str(out), "--labels", "x,y"]) == 2
    assert "x: memory id 'e000:t0' occurs twice" in capsys.readouterr().err
    assert not out.exists()  # found while reading the sources, before anything is written


def test_merge_refuses_a_filled_output_before_reading_any_source(tmp_path, monkeypatch, capsys):
    a = tmp_path / "a"
    ChromaBank(a).apply(BankUpdate(add=entries("x", 2)))
    out = tmp_path / "m"
    out.mkdir()
    (out / "something").write_text("x")

    def refuse(self):
        raise AssertionError("a source was read for an output that is refused")

    monkeypatch.setattr(bankio.BankReader, "__enter__", refuse)
    assert bank_main(["merge", str(a), str(a), str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
