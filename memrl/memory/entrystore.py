"""A bank's entries without their vectors or texts: one SQLite file, `<bank>/entries.sqlite3`.

A row per entry holds its scalar fields (Q, visits, provenance, insertion order), its intent,
the hash of its text (the text itself is in the bank's text file, memrl.memory.textstore)
and the id of its key (`key_id`: the intent with its vector; the vector is stored once per
key, in Chroma, memrl.memory.bank). A table of keys says which vectors the index holds, and
a table of facts says what the file is (its layout, the Chroma collection of its keys, where
its texts are).

Reading Q, visits or ids (what `memrl bank top` shows) touches neither vectors nor texts.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from memrl.memory.entry import MemoryEntry

FILE = "entries.sqlite3"
LAYOUT = "2"  # 1: every entry a Chroma record with its vector and document (memrl.memory.legacy)
_PAGE = 2000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS keys (key_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS entries (
  id TEXT PRIMARY KEY, ord INTEGER NOT NULL, key_id TEXT NOT NULL, intent TEXT NOT NULL,
  text TEXT NOT NULL, q REAL NOT NULL, visits INTEGER NOT NULL, success INTEGER NOT NULL,
  epoch INTEGER NOT NULL, task_id TEXT NOT NULL, kind TEXT NOT NULL, injected_ids TEXT NOT NULL,
  extra TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS entries_key ON entries(key_id);
CREATE INDEX IF NOT EXISTS entries_ord ON entries(ord);
"""
COLUMNS = ("id", "ord", "key_id", "intent", "text", "q", "visits", "success", "epoch", "task_id", "kind",
           "injected_ids", "extra")
SETTABLE = {"q", "visits", "success", "epoch", "task_id", "kind", "injected_ids", "extra"}


def key_id(intent: str, vector: Any) -> str:
    """The id of a key: its intent text and its vector as float32 (what the index stores), so
    entries share a stored vector exactly when they share both."""
    h = hashlib.sha256(intent.encode("utf-8") + b"\0")
    h.update(np.ascontiguousarray(vector, dtype=np.float32).tobytes())
    return h.hexdigest()[:24]


def as_stored(q: float) -> float:
    """Q as the first layout stored it, so a run's numbers do not depend on the layout.

    There Q was a Chroma metadata number, written as its shortest decimal digits and read
    back by serde_json's default float parser: the digits as an integer, then multiplied or
    divided by a power of ten, which leaves about one value in ten one unit in the last place
    away (0.20612999999999998 reads back as 0.20613). Every write of an entry stored its Q
    again, read back that way. The entry store applies the same rounding to every Q it
    writes, so Q, and every score and record that follows from it, are what they were.
    """
    q = float(q)
    text = repr(q)
    if text in ("inf", "-inf", "nan"):
        return q
    negative = text.startswith("-")
    mantissa, _, exp = text.lstrip("-").partition("e")
    whole, _, frac = mantissa.partition(".")
    e10 = (int(exp) if exp else 0) - len(frac)
    f = float(int(whole + frac))
    if e10 >= 0:
        f *= float(f"1e{e10}")
    else:
        k = -e10
        while k > 308:
            f /= 1e308
            k -= 308
        f /= float(f"1e{k}")
    return -f if negative else f


def row_of(e: MemoryEntry, kid: str, text: str, *, as_read: bool = False) -> tuple[Any, ...]:
    """The row of an entry (`as_read`: its Q as a bank read gave it, kept as it is)."""
    q = float(e.q) if as_read else as_stored(e.q)
    return (e.memory_id, int(e.order), kid, e.intent, text, q, int(e.visits), int(bool(e.success)),
            int(e.epoch), e.task_id, e.kind, json.dumps(e.injected_ids), json.dumps(e.extra, sort_keys=True))


def _value(column: str, value: Any) -> Any:
    if column in ("injected_ids",):
        return json.dumps(list(value))
    if column == "extra":
        return json.dumps(value, sort_keys=True)
    if column == "q":
        return as_stored(value)
    if column in ("visits", "epoch"):
        return int(value)
    if column == "success":
        return int(bool(value))
    return str(value)


class Row:
    """One stored entry (its text and vector not read)."""

    __slots__ = COLUMNS

    def __init__(self, values: Sequence[Any]) -> None:
        for name, v in zip(COLUMNS, values):
            setattr(self, name, v)

    def entry(self, experience: str = "", embedding: Any = None) -> MemoryEntry:
        return MemoryEntry(memory_id=self.id, intent=self.intent, experience=experience,
                           embedding=[] if embedding is None else embedding, q=float(self.q),
                           visits=int(self.visits), success=bool(self.success), epoch=int(self.epoch),
                           task_id=self.task_id, kind=self.kind, injected_ids=json.loads(self.injected_ids),
                           order=int(self.ord), extra=json.loads(self.extra))


class EntryStore:
    """The entries table of one bank directory. `read_only` opens an existing file without
    any write (the bank tools read a source this way)."""

    def __init__(self, path: str | Path, *, read_only: bool = False, create: bool = True) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if read_only or not create:
            if not self.path.exists():
                raise FileNotFoundError(f"{self.path}: no bank entries file")
        if read_only:
            self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=DELETE")  # a hold cut by a crash: its log folded in
            self.db.executescript(_SCHEMA)
        self.held = False  # transactions durable only at `flush` (`hold`)

    # ------------------------------------------------------------------ facts
    def facts(self) -> dict[str, str]:
        try:
            return dict(self.db.execute("SELECT name, value FROM facts"))
        except sqlite3.OperationalError:
            return {}

    def set_facts(self, **facts: str) -> None:
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO facts VALUES (?, ?)", list(facts.items()))

    # ------------------------------------------------------------------ reads
    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def next_order(self) -> int:
        top = self.db.execute("SELECT MAX(ord) FROM entries").fetchone()[0]
        return 0 if top is None else int(top) + 1

    def rows(self, ids: Iterable[str]) -> dict[str, Row]:
        ids = list(dict.fromkeys(ids))
        out: dict[str, Row] = {}
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            q = f"SELECT {', '.join(COLUMNS)} FROM entries WHERE id IN ({','.join('?' * len(part))})"
            out.update((r[0], Row(r)) for r in self.db.execute(q, part))
        return out

    def rows_of_keys(self, key_ids: Sequence[str]) -> list[Row]:
        out: list[Row] = []
        for i in range(0, len(key_ids), 500):
            part = list(key_ids[i:i + 500])
            q = f"SELECT {', '.join(COLUMNS)} FROM entries WHERE key_id IN ({','.join('?' * len(part))})"
            out += [Row(r) for r in self.db.execute(q, part)]
        return out

    def iter_rows(self) -> Iterator[Row]:
        """Every entry in insertion order, a page at a time."""
        last: tuple[int, str] | None = None
        cols = ", ".join(COLUMNS)
        while True:
            if last is None:
                page = self.db.execute(f"SELECT {cols} FROM entries ORDER BY ord, id LIMIT ?", (_PAGE,)).fetchall()
            else:
                page = self.db.execute(f"SELECT {cols} FROM entries WHERE (ord, id) > (?, ?) ORDER BY ord, id "
                                       "LIMIT ?", (*last, _PAGE)).fetchall()
            if not page:
                return
            for r in page:
                yield Row(r)
            last = (int(page[-1][1]), str(page[-1][0]))

    def has_keys(self, key_ids: Iterable[str]) -> set[str]:
        ids = list(dict.fromkeys(key_ids))
        out: set[str] = set()
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            out.update(r[0] for r in self.db.execute(
                f"SELECT key_id FROM keys WHERE key_id IN ({','.join('?' * len(part))})", part))
        return out

    def key_count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM keys").fetchone()[0])

    def key_ids(self) -> set[str]:
        """The id of every key the index holds."""
        return {r[0] for r in self.db.execute("SELECT key_id FROM keys")}

    def orphan_keys(self, key_ids: Iterable[str]) -> list[str]:
        """Those of `key_ids` no entry is filed under."""
        return [k for k in dict.fromkeys(key_ids)
                if self.db.execute("SELECT 1 FROM entries WHERE key_id = ? LIMIT 1", (k,)).fetchone() is None]

    # ------------------------------------------------------------------ writes
    def write(self, *, delete: Sequence[str] = (), upsert: Sequence[tuple[Any, ...]] = (),
              updates: Sequence[tuple[str, dict[str, Any]]] = (), new_keys: Sequence[str] = (),
              drop_keys: Sequence[str] = ()) -> None:
        """One transaction: delete rows, upsert rows (`row_of`), set columns of rows, record
        new keys and forget dropped ones."""
        with self.db:
            if delete:
                self.db.executemany("DELETE FROM entries WHERE id = ?", [(i,) for i in delete])
            if upsert:
                self.db.executemany(f"INSERT OR REPLACE INTO entries ({', '.join(COLUMNS)}) VALUES "
                                    f"({', '.join('?' * len(COLUMNS))})", upsert)
            for mid, fields in updates:
                if "q" not in fields:  # every write of an entry stores its Q again (`as_stored`)
                    now = self.db.execute("SELECT q FROM entries WHERE id = ?", (mid,)).fetchone()
                    if now is None:
                        continue
                    fields = {**fields, "q": now[0]}
                cols = sorted(fields)
                bad = set(cols) - SETTABLE - {"text"}
                if bad:
                    raise ValueError(f"a bank update cannot set {sorted(bad)} of an entry")
                self.db.execute(f"UPDATE entries SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                                [fields[c] if c == "text" else _value(c, fields[c]) for c in cols] + [mid])
            if new_keys:
                self.db.executemany("INSERT OR IGNORE INTO keys VALUES (?)", [(k,) for k in new_keys])
            if drop_keys:
                self.db.executemany("DELETE FROM keys WHERE key_id = ?", [(k,) for k in drop_keys])

    def hold(self) -> None:
        """Until `flush`, transactions go to a write-ahead log that is not synced at each one
        (a run's grouped commits: the run's own journal covers what a crash can lose). Every
        transaction is durable otherwise (SQLite's rollback journal, synced)."""
        if not self.held and not self.read_only:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.held = True

    def flush(self) -> None:
        """Make every transaction so far durable, and end a `hold` (the log synced, folded into
        the file and removed)."""
        if self.held:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.db.execute("PRAGMA journal_mode=DELETE")
            self.db.execute("PRAGMA synchronous=FULL")
            self.held = False

    def close(self) -> None:
        self.flush()
        self.db.close()
