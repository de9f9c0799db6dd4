"""`memories.jsonl`: the text of every memory a run injected or wrote, stored once by content.

An episode record names each injected memory's text by a content hash (`injected[].text`);
this file resolves it: one line per distinct text, `{"hash", "intent", "experience"}`. The
hash covers the memory's intent and experience as the memory module handed them to the
environment (`text_hash`), so a memory injected a hundred times is stored once, and a memory
whose experience was revised (MemP's adjustment) gets a second line under a new hash.

(The environment formats these texts into its prompt, and may shorten a long experience
there; the exact prompt of each model call is in the response cache under the call's key,
`model_calls[].key`, see memrl.llm.response_cache.)

Writes are idempotent: a hash already in the file is not written again, so a commit that is
replayed after a crash appends nothing twice; a torn last line (a crash mid-append) is cut
off before the next append. Lines are only ever appended.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from memrl.core.records import text_hash


def text_entry(intent: str, experience: str) -> tuple[str, dict[str, str]]:
    """(hash, line) of one memory text."""
    return text_hash(intent, experience), {"intent": intent, "experience": experience}


def read_texts(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    """hash -> {"intent", "experience"} (an absent file: nothing; a torn last line: skipped)."""
    from memrl.core.records import iter_jsonl

    out: dict[str, dict[str, str]] = {}
    for row in iter_jsonl(path):
        out.setdefault(str(row["hash"]), {"intent": str(row.get("intent", "")),
                                          "experience": str(row.get("experience", ""))})
    return out


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline (what a crash mid-append leaves)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        data = fh.read()
        fh.truncate(data.rfind(b"\n") + 1)
        fh.flush()
        os.fsync(fh.fileno())


class MemoryTexts:
    """The run's `memories.jsonl`, appended to at each commit."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._known: set[str] | None = None

    def known(self) -> set[str]:
        if self._known is None:
            _cut_torn_tail(self.path)
            self._known = set(read_texts(self.path))
        return self._known

    def add(self, texts: Mapping[str, Mapping[str, Any]]) -> int:
        """Append the texts whose hash the file lacks (fsync); returns how many."""
        from memrl.core.records import append_jsonl

        known = self.known()
        new = [(h, t) for h, t in sorted(texts.items()) if h not in known]
        if new:
            append_jsonl(self.path, [json.dumps({"hash": h, "intent": t["intent"],
                                                 "experience": t["experience"]},
                                                ensure_ascii=False, sort_keys=True)
                                     for h, t in new])
            known.update(h for h, _ in new)
        return len(new)


def merge(parts: Iterable[Mapping[str, Mapping[str, str]]]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for p in parts:
        for h, t in p.items():
            out.setdefault(h, {"intent": t["intent"], "experience": t["experience"]})
    return out
