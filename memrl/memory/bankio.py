"""Reading banks from elsewhere: run directories, bank directories and JSONL exports.

Used by the bank tools (`memrl bank`, memrl/cli/bank.py) and by `memory.bank.init_from` (a run seeded
from another run's bank, e.g. cross-model transfer). A source is never modified: a Chroma
directory is copied to a temporary directory and read from the copy (opening a Chroma
directory may write to it).

Kinds of source:
- a run directory: `<run>/bank/` plus `<run>/run_card.json` (which says the embedder, the
  model, the memory module and the bank's collection name); for a run whose bank lives in a
  Chroma server, `<run>/bank/server.json` says where, and the entries are read over HTTP;
- a bank directory: a Chroma persistent directory (`chroma.sqlite3`), optionally with a
  `bank_meta.json` written by `memrl bank copy/merge/import`;
- a JSONL export (`memrl bank export`): one `MemoryEntry` per line, with an optional
  `<file>.meta.json` beside it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memrl.core.records import write_json_atomic
from memrl.core.rundir import RunDir
from memrl.memory.bank import SERVER_CLAIM, BankSettings, ChromaBank
from memrl.memory.entry import BankUpdate, MemoryEntry

META_FILE = "bank_meta.json"
CHROMA_FILE = "chroma.sqlite3"
SEED_MARKER = "init_from.json"  # in a seeded run's bank dir: provenance + "seeding done"


class BankSourceError(ValueError):
    """A path that is not a readable bank, or a bank that does not fit where it goes."""


@dataclass
class BankSource:
    """Where entries come from, and what is known about how they were made."""

    path: Path
    kind: Literal["run", "bank", "jsonl"]
    collection: str | None = None  # None: the directory's only collection
    embedder: str | None = None  # embedder model id, when recorded
    model: str | None = None  # the LLM that produced the bank, when recorded
    memory: str | None = None  # the memory module's name, when recorded
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def chroma_dir(self) -> Path:
        return RunDir(self.path).bank if self.kind == "run" else self.path

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "kind": self.kind, "collection": self.collection,
                "embedder": self.embedder, "model": self.model, "memory": self.memory}


def resolve(path: str | Path) -> BankSource:
    """Classify `path` and read what its run card or meta file records."""
    p = Path(path).expanduser().resolve()
    if p.is_file() and p.suffix == ".jsonl":
        meta_path = p.with_name(p.name + ".meta.json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        return BankSource(p, "jsonl", embedder=meta.get("embedder"), model=meta.get("model"),
                          memory=meta.get("memory"), meta=meta)
    run = RunDir(p)
    server_claim = run.bank / SERVER_CLAIM
    if (run.bank / CHROMA_FILE).exists() or server_claim.exists():
        card_path = run.card
        card = json.loads(card_path.read_text()) if card_path.exists() else {}
        mem = (card.get("config") or {}).get("memory") or {}
        meta: dict[str, Any] = {"run_card": str(card_path)} if card else {}
        if server_claim.exists():  # the run's bank lives in a Chroma server
            meta["server"] = json.loads(server_claim.read_text())
        return BankSource(p, "run", collection=(mem.get("bank") or {}).get("collection"),
                          embedder=card.get("embedder"), model=card.get("model"),
                          memory=mem.get("name"), meta=meta)
    if (p / CHROMA_FILE).exists():
        meta_path = p / META_FILE
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        return BankSource(p, "bank", collection=meta.get("collection"), embedder=meta.get("embedder"),
                          model=meta.get("for_model") or meta.get("model"), memory=meta.get("memory"),
                          meta=meta)
    if not p.exists():
        raise BankSourceError(f"{p}: no such run directory, bank directory or .jsonl export")
    raise BankSourceError(f"{p}: not a bank (expected a run directory with {RunDir.BANK}/{CHROMA_FILE}, "
                          f"a bank directory with {CHROMA_FILE}, or a .jsonl export)")


def _only_collection(chroma_dir: Path) -> str:
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(path=str(chroma_dir),
                                       settings=Settings(anonymized_telemetry=False))
    try:
        names = sorted(c.name for c in client.list_collections())
    finally:
        getattr(client, "close", lambda: None)()
    if len(names) == 1:
        return names[0]
    if "memories" in names:
        return "memories"
    raise BankSourceError(f"{chroma_dir}: holds collections {names or 'none'}; say which "
                          "(--collection)")


def read_entries(src: BankSource, *, collection: str | None = None) -> list[MemoryEntry]:
    """Every entry with its embedding, in insertion order, without touching the source."""
    if src.kind == "jsonl":
        return read_jsonl(src.path)
    if "server" in src.meta:  # reads over HTTP change nothing on the server
        where = src.meta["server"]
        bank = ChromaBank(host=where["host"], port=where["port"],
                          collection=collection or where["collection"], create=False)
        return list(bank.iter_entries(with_embeddings=True))
    with tempfile.TemporaryDirectory(prefix="memrl-bank-read-") as tmp:
        copy = Path(tmp) / "bank"
        shutil.copytree(src.chroma_dir, copy)
        name = collection or src.collection or _only_collection(copy)
        bank = ChromaBank(copy, collection=name, create=False)
        try:
            return list(bank.iter_entries(with_embeddings=True))
        finally:
            bank.close()


def read_jsonl(path: str | Path) -> list[MemoryEntry]:
    """Entries from an export; a bad line is an error naming the line."""
    out: list[MemoryEntry] = []
    known = set(MemoryEntry.__dataclass_fields__)
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                unknown = set(row) - known
                if unknown:
                    raise ValueError(f"unknown fields {sorted(unknown)}")
                entry = MemoryEntry(**row)
            except (ValueError, TypeError) as exc:
                raise BankSourceError(f"{path}:{n}: not a memory entry ({exc})") from exc
            if not entry.embedding:
                raise BankSourceError(f"{path}:{n}: entry {entry.memory_id!r} has no embedding")
            out.append(entry)
    return out


def write_jsonl(entries: list[MemoryEntry], path: str | Path, meta: dict[str, Any] | None = None) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for e in entries:
            fh.write(json.dumps(e.to_dict(), ensure_ascii=False) + "\n")
    if meta is not None:
        write_json_atomic(path.with_name(path.name + ".meta.json"), meta)
    return len(entries)


def check_unique_ids(entries: list[MemoryEntry], where: str) -> None:
    seen: set[str] = set()
    for e in entries:
        if e.memory_id in seen:
            raise BankSourceError(f"{where}: memory id {e.memory_id!r} occurs twice")
        seen.add(e.memory_id)


def check_dims(entries: list[MemoryEntry], where: str) -> int | None:
    """The embedding dimension shared by every entry (None for no entries)."""
    dims = {len(e.embedding) for e in entries}
    if len(dims) > 1:
        raise BankSourceError(f"{where}: entries have embeddings of different sizes {sorted(dims)}")
    return dims.pop() if dims else None


def check_embedder(src: BankSource, entries: list[MemoryEntry], embedder: Any, where: str) -> None:
    """The entries' keys must come from the embedder that will query them."""
    target = getattr(embedder, "model_id", None)
    if src.embedder and target and src.embedder != target:
        raise BankSourceError(f"{where}: the bank was embedded with {src.embedder!r} but this run "
                              f"embeds with {target!r}; similarities would be meaningless")
    dim = check_dims(entries, where)
    if dim is not None and not src.embedder:  # unknown provenance: at least the size must fit
        probe = int(embedder.embed(["dimension probe"]).shape[1])
        if probe != dim:
            raise BankSourceError(f"{where}: the bank's embeddings have {dim} dimensions, this "
                                  f"run's embedder gives {probe}")


def renamed(entries: list[MemoryEntry], prefix: str, *, order_offset: int = 0,
            extra: dict[str, Any] | None = None) -> list[MemoryEntry]:
    """Copies with ids (and references to ids of the same set) prefixed, orders shifted."""
    ids = {e.memory_id for e in entries}
    out = []
    for e in entries:
        d = e.to_dict()
        d["memory_id"] = prefix + e.memory_id
        d["injected_ids"] = [prefix + i if i in ids else i for i in e.injected_ids]
        d["order"] = e.order + order_offset
        d["extra"] = {**e.extra, **(extra or {})}
        out.append(MemoryEntry(**d))
    return out


def write_entries(bank: ChromaBank, entries: list[MemoryEntry]) -> int:
    """Add entries to a bank (upsert by id: writing the same entries twice is harmless)."""
    bank.apply(BankUpdate(add=list(entries)))
    return len(entries)


def write_meta(bank_dir: str | Path, meta: dict[str, Any]) -> None:
    write_json_atomic(Path(bank_dir) / META_FILE, {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                                   **meta})


def fingerprint(entries: list[MemoryEntry]) -> str:
    """A short hash of ids, Q and experiences: says whether two banks hold the same memories."""
    import hashlib

    h = hashlib.sha256()
    for e in entries:
        h.update(json.dumps([e.memory_id, round(e.q, 12), e.visits, e.experience]).encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- new banks
def hnsw_meta(s: BankSettings) -> dict[str, int]:
    return {"ef_search": s.ef_search, "ef_construction": s.ef_construction,
            "max_neighbors": s.max_neighbors}


def create_bank(out: Path, entries: list[MemoryEntry], settings: BankSettings, meta: dict[str, Any]) -> int:
    """A new bank directory holding `entries`, with its `bank_meta.json`; refuses a directory
    that is not empty."""
    if out.exists() and any(out.iterdir()):
        raise BankSourceError(f"{out}: exists and is not empty; choose a new directory")
    bank = settings.open(out)
    try:
        write_entries(bank, entries)
        n = bank.count()
    finally:
        bank.close()
    write_meta(out, {**meta, "collection": settings.collection, "entries": n,
                     "fingerprint": fingerprint(entries), "hnsw": hnsw_meta(settings)})
    return n


def merge_entries(parts: list[tuple[str, list[MemoryEntry]]]) -> list[MemoryEntry]:
    """Every entry of every part, ids prefixed by the part's label, parts in order (the first
    part's entries are the oldest)."""
    out: list[MemoryEntry] = []
    offset = 0
    for label, entries in parts:
        out += renamed(entries, f"{label}:", order_offset=offset, extra={"merged_from": label})
        offset = max((e.order for e in out), default=-1) + 1
    check_unique_ids(out, "merge")
    return out


# --------------------------------------------------------------------------- seeding
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
    entries = read_entries(src)
    where = f"memory.bank.init_from ({src.path})"
    check_unique_ids(entries, where)
    check_embedder(src, entries, embedder, where)
    if init_q not in ("keep", "reset"):
        raise BankSourceError(f"memory.bank.init_q: keep | reset (got {init_q!r})")
    seeded = renamed(entries, SEED_PREFIX, extra={"init_from": str(src.path)})
    for e in seeded:
        if init_q == "reset":
            e.q, e.visits = float(q_init), 0
        e.extra["seeded_q"] = float(e.q)  # where its utility started in this run
    write_entries(bank, seeded)
    facts = {"source": src.describe(), "entries": len(seeded), "fingerprint": fingerprint(entries),
             "id_prefix": SEED_PREFIX, "init_q": init_q,
             "seeded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if init_q == "reset":
        facts["q_init"] = float(q_init)
    write_json_atomic(marker, {**facts, "status": "done"})
    return facts
