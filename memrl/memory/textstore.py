"""Memory texts stored once, by content: a JSONL file of `{"experience", "hash", "intent"}` lines
(a run's `memories.jsonl`, memrl.journal.memtexts) with a binary index beside it.

The hash (`memrl.core.records.text_hash`) names a memory's intent and experience, so a text
shared by many entries or injected a hundred times is one line. A bank keeps in its own rows
only each entry's hash (memrl.memory.entrystore); its texts are read from here, one line at a
time (`get`), so nothing holds every text in memory.

The index (`<file>.idx`, the JSONL's name with `.idx`) holds one fixed-size record per line,
in file order: the 16-character hash, the line's byte offset and its length. It is derived
data: written after the lines it names (not fsynced), checked when opened (every record
must lie inside the file and the last must name the line it points at), rebuilt from the
JSONL when it does not fit, and extended by reading only the JSONL's tail past the last line
it names. Opening a store therefore reads the index and the tail, not the whole file.

Writes are idempotent: a hash already in the file is not written again, so a commit that is
replayed after a crash appends nothing twice; a torn last line (a crash mid-append) is cut
off before the next append. Lines are only ever appended. Two stores open on one file (the
run's commit log and its bank) see each other's lines: every lookup first reads what the
file gained since.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from memrl.core.records import HASH_CHARS

TEXTS_FILE = "memories.jsonl"  # a standalone bank's texts (a run's bank uses the run's file)

_REC = struct.Struct(f"<{HASH_CHARS}sQQ")  # hash, offset, length (the newline included)
_CHUNK = 1 << 20


def index_path(path: str | os.PathLike[str]) -> Path:
    """Where the index of the text file `path` lives."""
    return Path(path).with_suffix(".idx")


def text_line(h: str, intent: str, experience: str) -> bytes:
    """One line of the file, as it has always been written (sorted keys, UTF-8)."""
    row = {"hash": h, "intent": intent, "experience": experience}
    return (json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


def cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline (what a crash mid-append leaves), reading only
    the end of the file."""
    if not path.exists():
        return
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        end = size
        while end > 0:
            start = max(0, end - _CHUNK)
            fh.seek(start)
            block = fh.read(end - start)
            nl = block.rfind(b"\n")
            if nl >= 0:
                fh.truncate(start + nl + 1)
                break
            end = start
        else:
            fh.truncate(0)
        fh.flush()
        os.fsync(fh.fileno())


class TextStore:
    """The texts of one file, by hash (module doc). `read_only`: never writes the file or
    its index (a bank read by the bank tools, a source that must not change)."""

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.index = index_path(self.path)
        self.read_only = read_only
        self._at: dict[str, tuple[int, int]] = {}
        self._covered = 0  # the JSONL's bytes the index names
        self._index_bytes = 0  # the index file's bytes read so far
        self._opened = False

    # ------------------------------------------------------------------ reading
    def _open(self) -> None:
        if not self.read_only:
            cut_torn_tail(self.path)
            if self.index.exists() and self.index.stat().st_size % _REC.size:
                with open(self.index, "rb+") as fh:  # a record torn by a crash
                    fh.truncate(fh.seek(0, os.SEEK_END) // _REC.size * _REC.size)
        self._opened = True
        if not self._read_index():
            self._at, self._covered, self._index_bytes = {}, 0, 0
            if not self.read_only:
                self.index.unlink(missing_ok=True)
        self._scan_tail()

    def _read_index(self) -> bool:
        """Take the index's records past those read; False when they do not fit the file."""
        if not self.index.exists():
            return self._index_bytes == 0
        size = self.path.stat().st_size if self.path.exists() else 0
        with open(self.index, "rb") as fh:
            fh.seek(self._index_bytes)
            data = fh.read()
        whole = len(data) - len(data) % _REC.size
        last: tuple[str, int, int] | None = None
        for i in range(0, whole, _REC.size):
            raw, offset, length = _REC.unpack_from(data, i)
            h = raw.decode("ascii", errors="replace")
            if offset + length <= self._covered:
                continue  # a line this store has read from the file itself
            if offset != self._covered or offset + length > size:
                return False
            self._at.setdefault(h, (offset, length))
            self._covered = offset + length
            last = (h, offset, length)
        self._index_bytes += whole
        if last is not None:
            row = self._line(last[1], last[2])
            if row is None or str(row.get("hash")) != last[0]:
                return False
        return True

    def _scan_tail(self) -> None:
        """Index the complete lines past what the index names (and record them in it)."""
        if not self.path.exists():
            return
        new: list[bytes] = []
        with open(self.path, "rb") as fh:
            fh.seek(self._covered)
            offset = self._covered
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # a torn last line: not a text
                try:
                    h = str(json.loads(line)["hash"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{self.path}: bad line at byte {offset} ({exc})") from exc
                self._at.setdefault(h, (offset, len(line)))
                new.append(_REC.pack(h.encode("ascii")[:HASH_CHARS].ljust(HASH_CHARS, b"?"), offset, len(line)))
                offset += len(line)
            self._covered = offset
        if new and not self.read_only:
            with open(self.index, "ab") as fh:
                fh.write(b"".join(new))
            self._index_bytes += len(new) * _REC.size

    def refresh(self) -> None:
        """Catch up with lines another store (or process) appended since."""
        if not self._opened:
            self._open()
            return
        if not self._read_index():
            self._opened = False
            self._at, self._covered, self._index_bytes = {}, 0, 0
            self._open()
            return
        self._scan_tail()

    def _line(self, offset: int, length: int) -> dict[str, Any] | None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(offset)
                return json.loads(fh.read(length))
        except (OSError, ValueError):
            return None

    def __contains__(self, h: str) -> bool:
        if h not in self._at:
            self.refresh()
        return h in self._at

    def hashes(self) -> set[str]:
        self.refresh()
        return set(self._at)

    def get_many(self, hashes: Iterable[str]) -> dict[str, dict[str, str]]:
        """hash -> {"intent", "experience"} of those of `hashes` the file holds."""
        want = list(dict.fromkeys(hashes))
        if any(h not in self._at for h in want):
            self.refresh()
        spots = sorted((self._at[h], h) for h in want if h in self._at)
        out: dict[str, dict[str, str]] = {}
        if not spots:
            return out
        with open(self.path, "rb") as fh:
            for (offset, length), h in spots:
                fh.seek(offset)
                row = json.loads(fh.read(length))
                out[h] = {"intent": str(row.get("intent", "")), "experience": str(row.get("experience", ""))}
        return out

    def get(self, h: str) -> dict[str, str] | None:
        return self.get_many([h]).get(h)

    def __iter__(self) -> Iterator[tuple[str, dict[str, str]]]:
        """(hash, text) of every distinct text, in file order (streamed)."""
        if not self.path.exists():
            return
        seen: set[str] = set()
        with open(self.path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    return  # a torn last line
                row = json.loads(line)
                h = str(row["hash"])
                if h not in seen:
                    seen.add(h)
                    yield h, {"intent": str(row.get("intent", "")), "experience": str(row.get("experience", ""))}

    # ------------------------------------------------------------------ writing
    def add(self, texts: Mapping[str, Mapping[str, Any]], *, sync: bool = True) -> int:
        """Append the texts whose hash the file lacks, in hash order (fsync; `sync=False`:
        flushed only, the caller syncs the file later); how many."""
        if self.read_only:
            raise PermissionError(f"{self.path}: opened read-only")
        self.refresh()
        new = [(h, t) for h, t in sorted(texts.items()) if h not in self._at]
        if not new:
            return 0
        lines = [text_line(h, str(t["intent"]), str(t["experience"])) for h, t in new]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            fh.seek(0, os.SEEK_END)
            fh.write(b"".join(lines))
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        self._scan_tail()  # indexes the new lines (and any another store appended before them)
        return len(new)
