"""The bank tools read only what they show: `top` touches neither vectors nor texts (and names
what is missing when asked for texts that are gone), export reads the bank a page at a time."""

from __future__ import annotations

import json

from coin_runner import finish

from memrl.cli.bank import main as bank_main
from memrl.core.rundir import RunDir
from memrl.memory.bank import ChromaBank
from memrl.memory.textstore import TextStore


def a_run(tmp_path):
    finish(tmp_path / "run", epochs=3)
    rd = RunDir(tmp_path / "run")
    rd.card.write_text(json.dumps({"config": {"memory": {"name": "memrl", "bank": {}}}, "embedder": "hashing-32"}))
    return rd


def test_top_reads_no_vector_and_no_text(tmp_path, monkeypatch, capsys):
    rd = a_run(tmp_path)

    def refuse(*a, **kw):
        raise AssertionError("read what top does not show")

    with monkeypatch.context() as m:
        m.setattr(ChromaBank, "vectors", refuse)
        m.setattr(TextStore, "get_many", refuse)
        assert bank_main(["top", str(rd.root), "-n", "3"]) == 0
    out = capsys.readouterr().out
    assert "15 entries; top 3 by Q" in out
    with monkeypatch.context() as m:
        m.setattr(ChromaBank, "vectors", refuse)
        assert bank_main(["top", str(rd.root), "-n", "2", "--full"]) == 0  # the two entries' texts only
    rd.memories.rename(tmp_path / "elsewhere.jsonl")
    assert bank_main(["top", str(rd.root), "-n", "2"]) == 0
    assert bank_main(["top", str(rd.root), "-n", "2", "--full"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memrl bank: ") and "memories.jsonl lacks" in err


def test_export_reads_the_bank_a_page_at_a_time(tmp_path, monkeypatch):
    rd = a_run(tmp_path)
    pages = []
    real = ChromaBank._page

    def page(self, rows, *a):
        pages.append(len(rows))
        return real(self, rows, *a)

    monkeypatch.setattr("memrl.memory.bank._PAGE", 4)
    monkeypatch.setattr(ChromaBank, "_page", page)
    out = tmp_path / "bank.jsonl"
    assert bank_main(["export", str(rd.root), str(out)]) == 0
    assert pages == [4, 4, 4, 3] and len(out.read_text().splitlines()) == 15


def test_export_writes_vectors_as_float32_bytes_unless_asked_for_numbers(tmp_path):
    import numpy as np

    from memrl.memory.bankio import read_jsonl

    rd = a_run(tmp_path)
    packed, plain = tmp_path / "packed.jsonl", tmp_path / "plain.jsonl"
    assert bank_main(["export", str(rd.root), str(packed)]) == 0
    assert bank_main(["export", str(rd.root), str(plain), "--json-vectors"]) == 0
    row = json.loads(packed.read_text().splitlines()[0])
    assert set(row["embedding"]) == {"f32"} and isinstance(json.loads(plain.read_text().splitlines()[0])
                                                           ["embedding"], list)
    assert packed.stat().st_size < plain.stat().st_size
    a, b = read_jsonl(packed), read_jsonl(plain)
    assert [e.memory_id for e in a] == [e.memory_id for e in b]
    assert all(np.array_equal(np.asarray(x.embedding, dtype=np.float32), np.asarray(y.embedding, dtype=np.float32))
               for x, y in zip(a, b))
