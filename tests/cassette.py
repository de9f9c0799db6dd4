"""Recorded model answers for end-to-end tests that are about something other than the model
(resume after a kill, the official retrieval path, a method's wiring, what the tools read).

A cassette is the embedded model's answers to one test's prompts, recorded from a real run
(`tests/cassettes/<name>.jsonl.gz`: the response cache's rows, key and value). The test loads it
into its own empty response cache before it runs, so every call whose prompt is unchanged is a
cache hit with the answer the real model gave; a prompt the cassette does not hold (the code
changed what it sends) goes to the real model as before, and the test still checks what it
checks, only slower. Such misses are counted and named in the run's last line
(`cassettes: ...`); re-record with

    MEMRL_RECORD_CASSETTES=1 .venv/bin/python -m pytest <the tests>

The model's own end-to-end tests (one per benchmark, e.g. the demo's, BigCodeBench's, HLE's,
Lifelong's) use no cassette: they drive the real embedded model. A run's preflight calls the
model past the cache whatever the cassette holds (memrl.control.preflight).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3
from pathlib import Path

HERE = Path(__file__).resolve().parent / "cassettes"
RECORD = os.environ.get("MEMRL_RECORD_CASSETTES", "").strip() not in ("", "0")
MISSES: dict[str, int] = {}  # cassette name -> calls it did not hold, this session


def name_of(nodeid: str) -> str:
    """A file name for a test: its path and name, path separators and brackets made safe."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.removeprefix("tests/")).strip("_")[:150]


def path_of(name: str) -> Path:
    return HERE / f"{name}.jsonl.gz"


def _db(cache_dir: Path) -> Path:
    return Path(cache_dir) / "llm.sqlite"


def _connect(cache_dir: Path) -> sqlite3.Connection:
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(_db(cache_dir)), timeout=60.0)
    conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    return conn


def rows(cache_dir: Path) -> dict[str, str]:
    """The responses a cache folder's response cache holds (key -> value)."""
    if not _db(cache_dir).is_file():
        return {}
    conn = _connect(cache_dir)
    try:
        return dict(conn.execute("SELECT key, value FROM responses").fetchall())
    finally:
        conn.close()


def load(name: str, cache_dir: Path) -> int:
    """Put the cassette's answers into the response cache under `cache_dir`; how many."""
    path = path_of(name)
    if RECORD or not path.is_file():
        return 0
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        entries = [json.loads(line) for line in fh if line.strip()]
    conn = _connect(cache_dir)
    try:
        conn.executemany("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)",
                         [(e["key"], e["value"]) for e in entries])
        conn.commit()
    finally:
        conn.close()
    return len(entries)


def save(name: str, cache_dir: Path) -> int:
    """Write the cache's answers as the cassette `name` (sorted by key: a stable file)."""
    got = rows(cache_dir)
    HERE.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path_of(name), "wb", mtime=0) as raw:
        for key in sorted(got):
            raw.write((json.dumps({"key": key, "value": got[key]}, ensure_ascii=False) + "\n").encode())
    return len(got)


class Cassette:
    """One test's cassette around its cache folder: `start` before the run, `finish` after."""

    def __init__(self, name: str, cache_dir: Path) -> None:
        self.name, self.cache_dir = name, Path(cache_dir)
        self.loaded = 0

    def start(self) -> Path:
        self.cache_dir.mkdir(parents=True, exist_ok=True)  # the test's cache, cassette or none
        self.loaded = load(self.name, self.cache_dir)
        return self.cache_dir

    def finish(self) -> int:
        """Record the cassette (recording) or count the calls it did not hold; returns that count."""
        if RECORD:
            save(self.name, self.cache_dir)
            return 0
        new = max(len(rows(self.cache_dir)) - self.loaded, 0)
        if new:
            MISSES[self.name] = MISSES.get(self.name, 0) + new
        return new
