"""The text store (memories.jsonl and its index): a text found without reading the others,
an index that is checked and rebuilt when it does not fit, two stores on one file seeing each
other's lines, and a read-only store that writes nothing."""

from __future__ import annotations

import json

from memrl.core.records import text_hash
from memrl.memory.textstore import TextStore, index_path


def texts(*pairs: tuple[str, str]) -> dict[str, dict[str, str]]:
    return {text_hash(i, e): {"intent": i, "experience": e} for i, e in pairs}


def test_a_store_reopens_from_its_index_and_reads_one_text(tmp_path, monkeypatch):
    path = tmp_path / "memories.jsonl"
    a = texts(("i1", "x" * 500), ("i2", "y"), ("i3", "z"))
    assert TextStore(path).add(a) == 3
    assert index_path(path).stat().st_size == 3 * 32  # one fixed-size record per line
    reopened = TextStore(path)
    # the index names every line: opening reads no line of the text file
    read = []
    real = json.loads
    monkeypatch.setattr("memrl.memory.textstore.json.loads", lambda b: read.append(b) or real(b))
    h2 = text_hash("i2", "y")
    assert reopened.get(h2) == {"intent": "i2", "experience": "y"}
    assert len(read) == 2  # the index's last line checked, then the one text asked for


def test_an_index_that_does_not_fit_is_rebuilt_and_a_torn_line_cut(tmp_path):
    path = tmp_path / "memories.jsonl"
    TextStore(path).add(texts(("i1", "x"), ("i2", "y")))
    index_path(path).write_bytes(index_path(path).read_bytes()[:-32] + b"\0" * 32)  # a damaged record
    with open(path, "a") as fh:
        fh.write('{"hash": "torn", "intent": "i", "exp')  # a crash mid-append
    store = TextStore(path)
    assert store.hashes() == set(texts(("i1", "x"), ("i2", "y")))
    assert store.add(texts(("i3", "z"))) == 1
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["experience"] for r in rows[:2]) == ["x", "y"] and rows[2]["experience"] == "z"
    assert TextStore(path).get(text_hash("i3", "z"))["experience"] == "z"


def test_two_stores_on_one_file_never_write_a_text_twice(tmp_path):
    path = tmp_path / "memories.jsonl"
    journal, bank = TextStore(path), TextStore(path)
    assert journal.add(texts(("i1", "x"))) == 1
    assert bank.add(texts(("i1", "x"), ("i2", "y"))) == 1  # it sees the journal's line first
    assert journal.add(texts(("i2", "y"))) == 0
    assert len(path.read_text().splitlines()) == 2
    assert [h for h, _ in TextStore(path)] == list(texts(("i1", "x"), ("i2", "y")))


def test_a_read_only_store_writes_nothing(tmp_path):
    path = tmp_path / "memories.jsonl"
    path.write_text(json.dumps({"experience": "x", "hash": text_hash("i", "x"), "intent": "i"}) + "\n"
                    + '{"torn')
    before = path.read_bytes()
    store = TextStore(path, read_only=True)
    assert store.get(text_hash("i", "x")) == {"intent": "i", "experience": "x"}
    assert path.read_bytes() == before and not index_path(path).exists()
