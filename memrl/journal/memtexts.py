"""`memories.jsonl`: the text of every memory a run injected or wrote, stored once by content.

An episode record names each injected memory's text by a content hash (`injected[].text`);
this file resolves it: one line per distinct text, `{"hash", "intent", "experience"}`. The
hash covers the memory's intent and experience as the memory module handed them to the
environment (`text_hash`), so a memory injected a hundred times is stored once, and a memory
whose experience was revised (MemP's adjustment) gets a second line under a new hash.

(The environment formats these texts into its prompt, and may shorten a long experience
there; the exact prompt of each model call is in the response cache under the call's key,
`model_calls[].key`, see memrl.llm.response_cache.)

The file is a text store (memrl.memory.textstore): indexed (`memories.idx`), so a reader
finds one text without reading the others, and shared with the run's bank, which keeps only
each entry's hash: each text is stored once. Writes are idempotent: a hash already in the
file is not written again, so a commit that is replayed after a crash appends nothing twice;
a torn last line (a crash mid-append) is cut off before the next append. Lines are only ever
appended.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

from memrl.core.records import text_hash
from memrl.memory.textstore import TextStore


def text_entry(intent: str, experience: str) -> tuple[str, dict[str, str]]:
    """(hash, line) of one memory text."""
    return text_hash(intent, experience), {"intent": intent, "experience": experience}


def read_texts(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    """hash -> {"intent", "experience"} of every text (an absent file: nothing; a torn last
    line: skipped). Holds them all: a reader of a few texts uses `TextStore.get_many`."""
    return dict(TextStore(path, read_only=True))


class MemoryTexts(TextStore):
    """The run's `memories.jsonl`, appended to at each commit."""

    def known(self) -> set[str]:
        return self.hashes()


def merge(parts: Iterable[Mapping[str, Mapping[str, str]]]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for p in parts:
        for h, t in p.items():
            out.setdefault(h, {"intent": t["intent"], "experience": t["experience"]})
    return out
