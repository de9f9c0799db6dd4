"""Seeding a new run's bank with a copy of another bank (`memory.bank.init_from`: transfer,
e.g. cross-model, paper App. C.1), once per run: the copies' ids prefixed, their Q kept or
reset, the provenance in a marker file that a resumed run finds and leaves alone."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

from memrl.core.records import write_json_atomic
from memrl.memory.bank import ChromaBank
from memrl.memory.bankio import (BankReader, BankSourceError, Checked, check_embedder, renamed_stream, resolve,
                                 write_entries)
from memrl.memory.entry import MemoryEntry

SEED_MARKER = "init_from.json"  # in a seeded run's bank dir: provenance + "seeding done"
SEED_PREFIX = "init:"


def seed_once(bank: ChromaBank, bank_dir: str | Path, source: str | Path, embedder: Any, *,
              init_q: str = "keep", q_init: float = 0.0) -> dict[str, Any]:
    """Fill an empty run bank with a copy of `source`'s entries, once per run.

    `init_q="reset"` gives every copy Q = `q_init` and visits = 0 (`keep`: as in the source).

    The marker file `<bank_dir>/init_from.json` makes this safe to call on every start: a
    resumed run finds the marker with status "done" and does nothing (its bank has moved on
    since). A start that died while copying finds status "copying" and copies again (adds
    are upserts of the same ids). Ids get the prefix "init:" so memories the new run writes
    (e.g. `e001:<task>`) never replace a copied one. Returns the provenance facts.
    """
    marker = Path(bank_dir) / SEED_MARKER
    if marker.exists():
        facts = json.loads(marker.read_text())
        if facts.get("status") == "done":
            return {k: v for k, v in facts.items() if k != "status"}
    elif bank.count() > 0:
        raise BankSourceError(f"memory.bank.init_from: the run bank at {bank_dir} already holds "
                              f"{bank.count()} entries; init_from only seeds a new run")
    src = resolve(source)
    write_json_atomic(marker, {"status": "copying", "source": src.describe()})
    where = f"memory.bank.init_from ({src.path})"
    if init_q not in ("keep", "reset"):
        raise BankSourceError(f"memory.bank.init_q: keep | reset (got {init_q!r})")
    with BankReader(src) as reader:
        first = Checked(where)  # each id once, one vector size: checked before anything is written
        for _ in first(reader.entries(with_embeddings=True, with_texts=False)):
            pass
        check_embedder(src, first.dim, embedder, where)

        source = Checked(where, dims=False)  # the source's fingerprint, as its entries pass

        def seeded() -> Iterator[MemoryEntry]:
            for e in renamed_stream(source(reader.entries(with_embeddings=True)), SEED_PREFIX, first.ids,
                                    extra={"init_from": str(src.path)}):
                if init_q == "reset":
                    e.q, e.visits = float(q_init), 0
                e.extra["seeded_q"] = float(e.q)  # where its utility started in this run
                yield e

        n = write_entries(bank, seeded())
        bank.flush()  # durable before the marker says the seeding is done
    facts = {"source": src.describe(), "entries": n, "fingerprint": source.fingerprint,
             "id_prefix": SEED_PREFIX, "init_q": init_q,
             "seeded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if init_q == "reset":
        facts["q_init"] = float(q_init)
    write_json_atomic(marker, {**facts, "status": "done"})
    return facts
