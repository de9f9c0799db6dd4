"""Bank tools: `memrl bank <command> ...` (also `python -m memrl.cli bank ...`).

    top    RUN_OR_BANK [-n 10]          entries with the highest Q
    hist   RUN [--bins 10]              Q histograms per epoch: the bank's, from its
                                        bank_updates.jsonl, and the injected memories'
    export RUN_OR_BANK OUT.jsonl        every entry with id, intent, experience, Q, metadata,
                                        embedding as float32 bytes in base64 ({"f32": ...};
                                        --json-vectors: a list of numbers, four times larger)
                                        (+ OUT.jsonl.meta.json: embedder, model, ...)
    import IN.jsonl BANK_DIR            a new bank directory from an export
    merge  BANK_A BANK_B OUT [--labels os,db]
                                        one bank with every entry of both; ids become
                                        "<label>:<id>" so none collides (A's entries first)
    copy   RUN --for-model NAME OUT     a standalone copy of a run's bank meant for another
                                        model (cross-model transfer), with its provenance

RUN_OR_BANK is a run directory, a bank directory (what import/merge/copy write) or a .jsonl
export. Sources are read from a temporary copy and never modified.

The bank itself (the Chroma store) is memrl/memory/bank.py; reading banks from elsewhere is
memrl/memory/bankio.py; this module is the command line around them (and the spool
`merge` reads its sources into, one at a time).

A copied or merged bank is used by a run through the bank options every banked memory has:
    python -m memrl.cli run ... memory.bank.init_from=OUT memory.bank.frozen=true
`init_from` seeds the new run's bank with a copy of OUT (ids prefixed "init:"); `frozen`
makes the run retrieve only (no utility updates, no new memories).

Memory merging across Lifelong OS and DB (paper App. C.2):
    memrl bank merge runs/<os run> runs/<db run> merged_os_db --labels os,db
    python -m memrl.cli run <OS preset> memory.bank.init_from=merged_os_db memory.bank.frozen=true
    python -m memrl.cli run <DB preset> memory.bank.init_from=merged_os_db memory.bank.frozen=true
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import pickle
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator, KeysView, Sequence

import numpy as np

from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.journal.banklog import BankHistory
from memrl.memory.bank import BankSettings
from memrl.memory.bankio import (BankReader, BankSource, BankSourceError, Checked, create_bank, hnsw_meta,
                                 merge_stream, refuse_filled, resolve, write_jsonl)
from memrl.memory.entry import MemoryEntry
from memrl.memory.entrystore import key_id
from memrl.memory.index_copy import IndexSource


# ------------------------------------------------------------------------------ helpers
def _hnsw(src: BankSource | None, args: argparse.Namespace) -> BankSettings:
    """Search settings for a bank this tool creates: the flags, else the source's recorded
    ones, else the defaults."""
    recorded: dict[str, Any] = {}
    if src is not None:
        recorded = dict(src.meta.get("hnsw") or {})
        if src.kind == "run" and src.meta.get("run_card"):
            card = json.loads(Path(src.meta["run_card"]).read_text())
            bank_cfg = ((card.get("config") or {}).get("memory") or {}).get("bank") or {}
            recorded = {k: bank_cfg[k] for k in ("ef_search", "ef_construction", "max_neighbors")
                        if k in bank_cfg}
    chosen = {k: getattr(args, k) for k in ("ef_search", "ef_construction", "max_neighbors")
              if getattr(args, k, None) is not None}
    return BankSettings(collection=getattr(args, "collection_out", None) or "memories",
                        **{**recorded, **chosen})


def _reader(path: str, collection: str | None = None) -> BankReader:
    return BankReader(resolve(path), collection=collection)


# ------------------------------------------------------------------------------ top
def _rank(e: MemoryEntry) -> tuple[float, int, int]:
    return (-e.q, -e.visits, e.order)


def top_entries(entries: Any, n: int) -> list[MemoryEntry]:
    """Highest Q first; ties by more visits, then older (entries streamed: n kept at a time)."""
    return heapq.nsmallest(n, entries, key=_rank)


def cmd_top(args: argparse.Namespace) -> int:
    with _reader(args.source, args.collection) as reader:
        counted = Checked(str(reader.src.path), dims=False)
        best = top_entries(counted(reader.entries(with_texts=False)), args.n)
        if args.json or args.full:  # the texts of the entries shown, only
            best = reader.with_texts(best)
    src, total = reader.src, counted.n
    if args.json:
        print(json.dumps([{k: v for k, v in e.to_dict().items() if k != "embedding"} for e in best],
                         indent=2, ensure_ascii=False))
        return 0
    print(f"{src.path} ({src.kind}): {total} entries; top {len(best)} by Q")
    print(f"{'#':>3} {'Q':>8} {'visits':>6} {'ok':>3} {'epoch':>5}  {'id':<28} intent")
    for i, e in enumerate(best, 1):
        intent = e.intent if len(e.intent) <= 70 else e.intent[:67] + "..."
        print(f"{i:>3} {e.q:>8.4f} {e.visits:>6} {'y' if e.success else 'n':>3} {e.epoch:>5}  "
              f"{e.memory_id:<28} {intent}")
        if args.full:
            for line in e.experience.splitlines():
                print(f"{'':>10}| {line}")
    return 0


# ------------------------------------------------------------------------------ hist
def q_per_epoch(records: list[dict[str, Any]], history: BankHistory | None = None,
                entries: list[MemoryEntry] | None = None) -> dict[str, Any]:
    """Q distributions per epoch: `bank[e]`, the Q of every memory in the bank at the end of
    epoch e, and `injected[e]`, the Q of every memory injected in epoch e as recorded at
    retrieval (one value per injection). `source` says where `bank` came from:

    - "bank_updates": replayed from the run's bank-update log (memrl.journal.banklog), exact, when
      the log covers every committed batch (every run since the log exists);
    - "rebuilt": a run from before the log (or resumed into it) keeps only its final bank,
      so `bank` is rebuilt from the episode records and the final bank `entries`
      (`rebuild_bank_q`).
    """
    epochs = sorted({int(r["epoch"]) for r in records})
    injected: dict[int, list[float]] = defaultdict(list)
    for r in records:
        for m in r.get("injected") or []:
            injected[int(r["epoch"])].append(float(m["q"]))
    if history is not None and history.covers(records):
        at_end = history.q_at_epoch_end()
        bank = {ep: sorted(at_end.get(ep, {}).values()) for ep in epochs}
        source = "bank_updates"
    else:
        bank = rebuild_bank_q(records, entries or [])
        source = "rebuilt"
    return {"epochs": epochs, "bank": bank, "source": source,
            "injected": {ep: injected.get(ep, []) for ep in epochs}}


def rebuild_bank_q(records: list[dict[str, Any]], entries: list[MemoryEntry]) -> dict[int, list[float]]:
    """The bank's Q per epoch of a run without a bank-update log, from its episode records
    and its final bank. A bank stores only each memory's current Q, so it is rebuilt:
    - `injected[e]`: the Q of every memory injected in epoch e, as recorded at retrieval
      (before that batch's update; one value per injection);
    - `bank[e]`: the Q of every memory in the bank at the end of epoch e. A memory's Q changes
      only when it is injected, and each injection records its Q as of batch start, so its
      Q at the end of epoch e is the q recorded at its first injection after epoch e, or its
      final Q if it was never injected again. Exact for every module that changes Q only
      through injected memories (MemRL; the baselines never change Q); memories deleted
      during the run are not in the final bank and are not counted. A memory written in
      epoch e counts from epoch e on; memories seeded by `init_from` from epoch 0.
    """
    epochs = sorted({int(r["epoch"]) for r in records})
    later: dict[str, list[tuple[int, float]]] = defaultdict(list)  # id -> [(epoch, q)] in order
    for r in records:
        for m in r.get("injected") or []:
            later[str(m["id"])].append((int(r["epoch"]), float(m["q"])))
    bank: dict[int, list[float]] = {}
    for ep in epochs:
        values = []
        for e in entries:
            born = 0 if "init_from" in e.extra else e.epoch
            if born > ep:
                continue
            nxt = next((q for (ie, q) in later.get(e.memory_id, []) if ie > ep), None)
            values.append(e.q if nxt is None else nxt)
        bank[ep] = values
    return bank


def _hist_rows(per_epoch: dict[int, list[float]], edges: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for ep, values in per_epoch.items():
        counts = np.histogram(values, bins=edges)[0].tolist() if values else [0] * (len(edges) - 1)
        rows.append({"epoch": ep, "n": len(values),
                     "mean": float(np.mean(values)) if values else None, "counts": counts})
    return rows


def _print_hist(title: str, rows: list[dict[str, Any]], edges: np.ndarray) -> None:
    print(title)
    heads = [f"{edges[i]:+.2f}" for i in range(len(edges) - 1)]
    print(f"{'epoch':>5} {'n':>6} {'mean':>7}  " + " ".join(f"{h:>6}" for h in heads)
          + f"   (bin = [left edge, next edge); last bin closed at {edges[-1]:+.2f})")
    for r in rows:
        mean = f"{r['mean']:+.3f}" if r["mean"] is not None else "    -"
        print(f"{r['epoch']:>5} {r['n']:>6} {mean:>7}  " + " ".join(f"{c:>6}" for c in r["counts"]))


def cmd_hist(args: argparse.Namespace) -> int:
    run = Path(args.run)
    episodes = RunDir(run).episodes
    if not episodes.exists():
        raise BankSourceError(f"{run}: no {episodes.name} (hist needs a run directory)")
    records = list(iter_jsonl(episodes))
    history = BankHistory.read(run)
    entries: list[MemoryEntry] = []
    if not history.covers(records):
        with _reader(str(run), args.collection) as reader:
            entries = list(reader.entries(with_texts=False))
    data = q_per_epoch(records, history, entries)
    values = [q for vs in list(data["bank"].values()) + list(data["injected"].values()) for q in vs]
    lo, hi = (min(values), max(values)) if values else (-1.0, 1.0)
    if args.range:
        lo, hi = args.range
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, args.bins + 1)
    bank_rows = _hist_rows(data["bank"], edges)
    inj_rows = _hist_rows(data["injected"], edges)
    if args.json:
        print(json.dumps({"edges": edges.tolist(), "source": data["source"], "bank": bank_rows,
                          "injected": inj_rows}, indent=2))
        return 0
    final = bank_rows[-1]["n"] if bank_rows else 0
    print(f"{run}: {len(records)} episodes, {final} memories in the bank at the end")
    if data["source"] == "bank_updates":
        how = f"from {RunDir.BANK_UPDATES}, the log of every commit"
    else:
        how = (f"rebuilt from the episode records and the final bank: this run has no complete "
               f"{RunDir.BANK_UPDATES} (it started before the log existed); memories deleted "
               "during the run are missing")
    _print_hist(f"Q of the memories in the bank at the end of each epoch ({how}):", bank_rows, edges)
    _print_hist("Q of injected memories at retrieval time (one value per injection):",
                inj_rows, edges)
    return 0


# ------------------------------------------------------------------------------ export/import
def cmd_export(args: argparse.Namespace) -> int:
    with _reader(args.source, args.collection) as reader:
        src = reader.src
        checked = Checked(str(src.path))
        n = write_jsonl(checked(reader.entries(with_embeddings=True)), args.out, json_vectors=args.json_vectors,
                        meta=lambda: {**src.describe(), "entries": checked.n, "fingerprint": checked.fingerprint,
                                      "hnsw": hnsw_meta(_hnsw(src, argparse.Namespace()))})
    print(f"exported {n} entries from {src.path} to {args.out}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    with _reader(args.source) as reader:
        src = reader.src
        if src.kind != "jsonl":
            raise BankSourceError(f"{args.source}: import reads a .jsonl export")
        n = create_bank(Path(args.out), reader.entries(with_embeddings=True), _hnsw(src, args),
                        {"imported_from": str(src.path), "embedder": src.embedder, "model": src.model,
                         "memory": src.memory})
    print(f"imported {n} entries into {args.out}")
    return 0


# ------------------------------------------------------------------------------ merge/copy
_FIELDS = tuple(MemoryEntry.__dataclass_fields__)
_VECTOR = _FIELDS.index("embedding")


class Spool:
    """Entries parked in a temporary directory and read back in order, a page at a time: their
    fields pickled a page at a time, their vectors float32 in one flat file, each distinct vector
    once (the entries of one key share it). `merge` reads each source into a spool and closes it
    before it opens the next, and writes the merged bank once both are closed: an open bank holds
    its vector index in memory, a spool only where each distinct vector lies. `keys`: the key
    ids (`entrystore.key_id`: intent and vector) of the entries parked, `vector(key)` a key's
    vector. A context manager."""

    PAGE = 500  # entries pickled (and read back) at a time

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="memrl-spool-")
        self._pages = open(Path(self._tmp.name) / "entries.pickle", "w+b")
        self._vectors = open(Path(self._tmp.name) / "vectors.f32", "w+b")
        self._at: dict[bytes, tuple[int, int]] = {}  # a vector's digest -> (byte offset, values)
        self._keys: dict[tuple[str, bytes], str] = {}  # (intent, its vector's digest) -> key id
        self._key_at: dict[str, tuple[int, int]] = {}  # key id -> where its vector lies

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pages.close()
        self._vectors.close()
        self._tmp.cleanup()

    def add(self, entries: Iterable[MemoryEntry]) -> None:
        """Park `entries` after those already here."""
        page: list[list[Any]] = []
        for e in entries:
            row = [getattr(e, f) for f in _FIELDS]
            row[_VECTOR] = self._park(e.intent, e.embedding)
            page.append(row)
            if len(page) == self.PAGE:
                pickle.dump(page, self._pages, protocol=pickle.HIGHEST_PROTOCOL)
                page = []
        if page:
            pickle.dump(page, self._pages, protocol=pickle.HIGHEST_PROTOCOL)

    def _park(self, intent: str, vector: Any) -> tuple[int, int]:
        raw = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
        digest = hashlib.sha256(raw).digest()
        if digest not in self._at:
            self._at[digest] = (self._vectors.seek(0, os.SEEK_END), len(raw) // 4)
            self._vectors.write(raw)
        if (intent, digest) not in self._keys:
            kid = self._keys[intent, digest] = key_id(intent, vector)
            self._key_at[kid] = self._at[digest]
        return self._at[digest]

    @property
    def keys(self) -> KeysView[str]:
        return self._key_at.keys()

    def vector(self, key: str) -> np.ndarray:
        """The vector of a key parked here (`keys`)."""
        self._vectors.flush()
        where, size = self._key_at[key]
        return np.frombuffer(os.pread(self._vectors.fileno(), 4 * size, where), dtype=np.float32).copy()

    def entries(self, with_embeddings: bool = True) -> Iterator[MemoryEntry]:
        """The parked entries in order (`with_embeddings=False`: without their vectors)."""
        self._vectors.flush()
        end, at = self._pages.seek(0, os.SEEK_END), 0
        while at < end:
            self._pages.seek(at)
            page = pickle.load(self._pages)
            at = self._pages.tell()
            read: dict[tuple[int, int], np.ndarray] = {}  # each distinct vector of a page read once
            for row in page:
                where, size = row[_VECTOR]
                if with_embeddings and size and (where, size) not in read:
                    raw = os.pread(self._vectors.fileno(), 4 * size, where)
                    read[where, size] = np.frombuffer(raw, dtype=np.float32).copy()
                row[_VECTOR] = read[where, size] if with_embeddings and size else []
                yield MemoryEntry(*row)


def reusable_index(indexes: list[IndexSource], keys: set[str]) -> IndexSource | None:
    """The source index the merged bank starts from (`bankio.create_bank`): the one holding most
    of the merged bank's `keys`, when it holds at least as many of them as it holds others (a copy
    mostly dropped again would save little); None: the merged bank builds its own."""
    best = max(indexes, key=lambda i: len(i.keys & keys), default=None)
    if best is None:
        return None
    kept = len(best.keys & keys)
    return best if kept and 2 * kept >= len(best.keys) else None


def cmd_merge(args: argparse.Namespace) -> int:
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else ["a", "b"]
    if len(labels) != 2 or len(set(labels)) != 2 or not all(labels):
        raise BankSourceError(f"--labels: two different non-empty labels expected (got {args.labels!r})")
    src_a, src_b = resolve(args.a), resolve(args.b)
    if src_a.embedder and src_b.embedder and src_a.embedder != src_b.embedder:
        raise BankSourceError(f"cannot merge banks embedded by {src_a.embedder!r} and {src_b.embedder!r}")
    out = Path(args.out)
    refuse_filled(out)
    counts = {label: Checked(label, dims=False, hashed=False) for label in labels}
    indexes: list[IndexSource] = []
    with Spool() as spool_a, Spool() as spool_b:
        for label, src, spool in ((labels[0], src_a, spool_a), (labels[1], src_b, spool_b)):
            with BankReader(src) as reader:  # one source open at a time, closed before the next
                spool.add(counts[label](reader.entries(with_embeddings=True)))
                index = reader.index_source()
            if index is not None:
                indexes.append(index)
        keys = set(spool_a.keys | spool_b.keys)

        def key_vector(key: str) -> np.ndarray:
            return spool_a.vector(key) if key in spool_a.keys else spool_b.vector(key)

        merged = merge_stream([(labels[0], spool_a.entries), (labels[1], spool_b.entries)])
        n = create_bank(out, merged, _hnsw(src_a, args),
                        {"merged_from": {labels[0]: src_a.describe(), labels[1]: src_b.describe()},
                         "embedder": src_a.embedder or src_b.embedder,
                         "memory": src_a.memory if src_a.memory == src_b.memory else None},
                        index_from=reusable_index(indexes, keys), keys=keys, key_vector=key_vector)
    print(f"merged {counts[labels[0]].n} ({labels[0]}) + {counts[labels[1]].n} ({labels[1]}) entries "
          f"into {args.out}: {n}")
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    with _reader(args.source, args.collection) as reader:
        src = reader.src
        n = create_bank(Path(args.out), reader.entries(with_embeddings=True), _hnsw(src, args),
                        {"copied_from": src.describe(), "model": src.model, "for_model": args.for_model,
                         "embedder": src.embedder, "memory": src.memory})
    print(f"copied {n} entries from {src.path} (model {src.model}) for {args.for_model} to {args.out}\n"
          f"use: python -m memrl.cli run ... llm={args.for_model} memory={src.memory or '<same memory>'} "
          f"memory.bank.init_from={args.out} memory.bank.frozen=true")
    return 0


# ------------------------------------------------------------------------------ CLI
def parser(prog: str = "memrl bank") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="cmd", required=True)

    def hnsw_flags(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--ef-search", dest="ef_search", type=int, default=None)
        sp.add_argument("--ef-construction", dest="ef_construction", type=int, default=None)
        sp.add_argument("--max-neighbors", dest="max_neighbors", type=int, default=None)
        sp.add_argument("--collection-out", default=None, help="collection name (memories)")

    sp = sub.add_parser("top", help="entries with the highest Q")
    sp.add_argument("source")
    sp.add_argument("-n", type=int, default=10)
    sp.add_argument("--full", action="store_true", help="print the experiences too")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--collection", default=None)
    sp.set_defaults(fn=cmd_top)

    sp = sub.add_parser("hist", help="Q histograms per epoch of a run")
    sp.add_argument("run")
    sp.add_argument("--bins", type=int, default=10)
    sp.add_argument("--range", type=float, nargs=2, metavar=("LO", "HI"), default=None)
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--collection", default=None)
    sp.set_defaults(fn=cmd_hist)

    sp = sub.add_parser("export", help="a bank as JSONL")
    sp.add_argument("source")
    sp.add_argument("out")
    sp.add_argument("--json-vectors", action="store_true", help="embeddings as lists of numbers")
    sp.add_argument("--collection", default=None)
    sp.set_defaults(fn=cmd_export)

    sp = sub.add_parser("import", help="a new bank directory from a JSONL export")
    sp.add_argument("source")
    sp.add_argument("out")
    hnsw_flags(sp)
    sp.set_defaults(fn=cmd_import)

    sp = sub.add_parser("merge", help="two banks into a new one")
    sp.add_argument("a")
    sp.add_argument("b")
    sp.add_argument("out")
    sp.add_argument("--labels", default=None, help="id prefixes for A and B, e.g. os,db (default a,b)")
    hnsw_flags(sp)
    sp.set_defaults(fn=cmd_merge)

    sp = sub.add_parser("copy", help="a run's bank as a standalone bank for another model")
    sp.add_argument("source")
    sp.add_argument("--for-model", required=True, help="the llm preset the copy is meant for")
    sp.add_argument("out")
    sp.add_argument("--collection", default=None)
    hnsw_flags(sp)
    sp.set_defaults(fn=cmd_copy)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "memrl bank") -> int:
    args = parser(prog).parse_args(argv)
    if getattr(args, "n", 1) < 1 or getattr(args, "bins", 1) < 1:
        print("memrl bank: -n and --bins must be at least 1", file=sys.stderr)
        return 2
    try:
        return int(args.fn(args))
    except (BankSourceError, ValueError) as exc:  # a bad source, or a bank that does not hold together
        print(f"memrl bank: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
