"""The cassette helper (tests/cassette.py): a test with no cassette gets an empty cache folder
that exists (a test may copy it before the first call), a recorded cassette loads its rows
into a fresh cache, and the calls it did not hold are counted."""

from __future__ import annotations

import sqlite3

import cassette as tape_module


def _put(cache_dir, rows):
    conn = tape_module._connect(cache_dir)
    conn.executemany("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", rows)
    conn.commit()
    conn.close()


def test_no_cassette_gives_an_existing_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tape_module, "HERE", tmp_path / "cassettes")
    monkeypatch.setattr(tape_module, "RECORD", False)
    tape = tape_module.Cassette("none_recorded", tmp_path / "cache")
    cache = tape.start()
    assert cache.is_dir() and tape.loaded == 0
    _put(cache, [("k1", "v1")])
    assert tape.finish() == 1 and tape_module.MISSES.pop("none_recorded") == 1


def test_a_recorded_cassette_loads_and_counts_only_new_calls(tmp_path, monkeypatch):
    monkeypatch.setattr(tape_module, "HERE", tmp_path / "cassettes")
    _put(tmp_path / "recorded", [("b", "2"), ("a", "1")])
    assert tape_module.save("t", tmp_path / "recorded") == 2
    monkeypatch.setattr(tape_module, "RECORD", False)
    tape = tape_module.Cassette("t", tmp_path / "fresh")
    tape.start()
    assert tape.loaded == 2
    conn = sqlite3.connect(str(tmp_path / "fresh" / "llm.sqlite"))
    assert dict(conn.execute("SELECT key, value FROM responses")) == {"a": "1", "b": "2"}
    conn.close()
    assert tape.finish() == 0  # nothing beyond the cassette
    _put(tape.cache_dir, [("c", "3")])
    assert tape.finish() == 1
    tape_module.MISSES.pop("t", None)
