"""Reading banks from elsewhere: run directories, bank directories and JSONL exports.

Used by the bank tools (`memrl bank`, memrl/cli/bank.py) and by `memory.bank.init_from` (a run seeded
from another run's bank, e.g. cross-model transfer: memrl.memory.init_from). A merged bank's index
may start from a copy of a source's (memrl.memory.index_copy). A source is never modified: its bank
directory (without its texts) is copied to a temporary directory and read from the copy
(opening a Chroma directory may write to it); its texts are read in place, read-only.

Entries are streamed (`BankReader.entries`), a page at a time, and carry only what the
caller asks for: `memrl bank top` reads neither vectors nor texts, export and merge read
them page by page, so no tool holds a whole bank in memory. A bank of the first layout
(memrl.memory.legacy) is read as it is.

Kinds of source:
- a run directory: `<run>/bank/` plus `<run>/run_card.json` (which says the embedder, the
  model, the memory module and the bank's collection name); for a run whose bank lives in a
  Chroma server, `<run>/bank/server.json` says where, and the entries are read over HTTP;
- a bank directory: a Chroma persistent directory (`chroma.sqlite3`) with its entries
  (`entries.sqlite3`) and texts (`memories.jsonl`), optionally with a `bank_meta.json`
  written by `memrl bank copy/merge/import`;
- a JSONL export (`memrl bank export`): one `MemoryEntry` per line, with an optional
  `<file>.meta.json` beside it.
"""

from __future__ import annotations

import gc
import hashlib
import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

from memrl.core.records import write_json_atomic
from memrl.core.rundir import RunDir
from memrl.memory.bank import KEYS_SUFFIX, SERVER_CLAIM, TEXTS_FILE, BankSettings, ChromaBank
from memrl.memory.entry import BankUpdate, MemoryEntry, decode_vector, vector_list
from memrl.memory.entrystore import FILE as ENTRIES_FILE
from memrl.memory.entrystore import EntryStore
from memrl.memory.index_copy import (CHROMA_FILE, KEYS_PAGE, IndexSource, collection_names, copy_index,
                                     empty_dir, reuse_index)
from memrl.memory.textstore import TextStore, index_path

META_FILE = "bank_meta.json"


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
    """The collection of a bank directory (a copy: opening it may write) that does not say it."""
    if (chroma_dir / ENTRIES_FILE).exists():
        store = EntryStore(chroma_dir / ENTRIES_FILE)
        try:
            name = store.facts().get("collection")
        finally:
            store.close()
        if name:
            return name
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(path=str(chroma_dir), settings=Settings(anonymized_telemetry=False))
    try:
        names = sorted({n[:-len(KEYS_SUFFIX)] if n.endswith(KEYS_SUFFIX) else n for n in collection_names(client)})
    finally:
        getattr(client, "close", lambda: None)()
    if len(names) == 1:
        return names[0]
    if "memories" in names:
        return "memories"
    raise BankSourceError(f"{chroma_dir}: holds collections {names or 'none'}; say which "
                          "(--collection)")


class BankReader:
    """The entries of a source, read from a copy of its bank directory (its texts read in
    place, read-only); a context manager that removes the copy."""

    def __init__(self, src: BankSource, *, collection: str | None = None) -> None:
        self.src = src
        self.collection = collection
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._bank: ChromaBank | None = None
        self._legacy: Any = None

    def __enter__(self) -> "BankReader":
        if self.src.kind == "jsonl":
            return self
        self._tmp = tempfile.TemporaryDirectory(prefix="memrl-bank-read-")
        copy = Path(self._tmp.name) / "bank"
        source = self.src.chroma_dir
        own_texts = {TEXTS_FILE, index_path(Path(TEXTS_FILE)).name}  # a bank's own texts: read in place
        shutil.copytree(source, copy, ignore=lambda d, names: [n for n in names if Path(d) == source
                                                                and n in own_texts])
        server = self.src.meta.get("server")
        name = self.collection or (server or {}).get("collection") or self.src.collection \
            or _only_collection(copy)
        if not (copy / ENTRIES_FILE).exists():  # the first layout: read as it is
            self._legacy = self._legacy_collection(copy, name, server)
            return self
        kw = {"host": server["host"], "port": server["port"]} if server else {}
        (copy / SERVER_CLAIM).unlink(missing_ok=True)  # never a conversion on a server
        self._bank = ChromaBank(copy, collection=name, create=False, **kw)
        texts = (source / self._bank.entries.facts().get("texts", TEXTS_FILE)).resolve()
        self._bank.texts = TextStore(texts, read_only=True)
        return self

    def _legacy_collection(self, copy: Path, name: str, server: dict[str, Any] | None) -> Any:
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        client = chromadb.HttpClient(host=server["host"], port=server["port"], settings=settings) if server \
            else chromadb.PersistentClient(path=str(copy), settings=settings)
        self._client = client
        if name not in collection_names(client):
            raise BankSourceError(f"{self.src.path}: no collection {name!r} (it has: "
                                  f"{', '.join(collection_names(client)) or 'none'})")
        return client.get_collection(name, embedding_function=None)

    def __exit__(self, *exc: Any) -> None:
        if self._bank is not None:  # closed (its files with it) and dropped (its vector cache with it)
            self._bank.close()
            self._bank = None
        client = self.__dict__.pop("_client", None)
        self._legacy = None
        if client is not None:  # the first layout's client: its files close with its last reference
            getattr(client, "close", lambda: None)()
            del client
            gc.collect()
        if self._tmp is not None:
            self._tmp.cleanup()

    def entries(self, *, with_embeddings: bool = False, with_texts: bool = True) -> Iterator[MemoryEntry]:
        """Every entry in insertion order, streamed, with what is asked for."""
        if self.src.kind == "jsonl":
            yield from iter_jsonl_entries(self.src.path)
        elif self._legacy is not None:
            from memrl.memory.legacy import iter_legacy

            yield from iter_legacy(self._legacy, with_embeddings=with_embeddings, with_texts=with_texts)
        else:
            assert self._bank is not None
            yield from self._bank.iter_entries(with_embeddings=with_embeddings, with_texts=with_texts)


    def index_source(self) -> IndexSource | None:
        """The source's key index, when a new bank can start from a copy of it: a bank of the
        current layout in a local Chroma directory (None: an export, the first layout, a bank in
        a Chroma server)."""
        if self._bank is None or self.src.meta.get("server"):
            return None
        return IndexSource(self.src.chroma_dir, self._bank.name, self._bank.entries.key_ids())

    def with_texts(self, entries: list[MemoryEntry]) -> list[MemoryEntry]:
        """`entries` (read without texts) with their experience texts."""
        if self.src.kind == "jsonl":
            return entries
        if self._legacy is not None:
            res = self._legacy.get(ids=[e.memory_id for e in entries], include=["documents"])
            docs = dict(zip(res["ids"], res["documents"]))
            texts = {e.memory_id: docs.get(e.memory_id) or "" for e in entries}
        else:
            assert self._bank is not None
            got = self._bank.get([e.memory_id for e in entries])
            texts = {mid: e.experience for mid, e in got.items()}
        for e in entries:
            e.experience = texts.get(e.memory_id, e.experience)
        return entries


def read_entries(src: BankSource, *, collection: str | None = None) -> list[MemoryEntry]:
    """Every entry with its embedding, in insertion order, without touching the source (a
    list: for small banks; tools stream with `BankReader`)."""
    with BankReader(src, collection=collection) as reader:
        out = list(reader.entries(with_embeddings=True))
    for e in out:
        e.embedding = vector_list(e.embedding)
    return out


def iter_jsonl_entries(path: str | Path) -> Iterator[MemoryEntry]:
    """Entries from an export, streamed; a bad line is an error naming the line."""
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
                entry = MemoryEntry(**{**row, "embedding": decode_vector(row.get("embedding"))})
            except (ValueError, TypeError) as exc:
                raise BankSourceError(f"{path}:{n}: not a memory entry ({exc})") from exc
            if not len(entry.embedding):
                raise BankSourceError(f"{path}:{n}: entry {entry.memory_id!r} has no embedding")
            yield entry


def read_jsonl(path: str | Path) -> list[MemoryEntry]:
    """Entries from an export; a bad line is an error naming the line."""
    return list(iter_jsonl_entries(path))


def write_jsonl(entries: Iterable[MemoryEntry], path: str | Path, meta: Any = None, *,
                json_vectors: bool = True) -> int:
    """Write an export line by line; `meta` (a dict, or a function giving it once every entry
    is written) goes to `<path>.meta.json`. Vectors as lists of numbers, or (`json_vectors=False`)
    as float32 bytes in base64 (`{"f32": ...}`: exact, a quarter of the size, and what the
    bank stores; `read_jsonl` takes both)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for e in entries:
            d = e.to_dict() if json_vectors else e.to_journal()
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")
            n += 1
    if meta is not None:
        write_json_atomic(path.with_name(path.name + ".meta.json"), meta() if callable(meta) else meta)
    return n


class Checked:
    """Entries as they stream past, checked (each id once, one vector size) and counted, with
    the fingerprint of what passed (`fingerprint`; `hashed=False`: none, to only check and count)."""

    def __init__(self, where: str, *, dims: bool = True, hashed: bool = True) -> None:
        self.where, self.check_dims = where, dims
        self.n = 0
        self.ids: set[str] = set()
        self.dims: set[int] = set()
        self._hash = hashlib.sha256() if hashed else None

    def __call__(self, entries: Iterable[MemoryEntry]) -> Iterator[MemoryEntry]:
        for e in entries:
            if e.memory_id in self.ids:
                raise BankSourceError(f"{self.where}: memory id {e.memory_id!r} occurs twice")
            self.ids.add(e.memory_id)
            if self.check_dims:
                self.dims.add(len(e.embedding))
                if len(self.dims) > 1:
                    raise BankSourceError(f"{self.where}: entries have embeddings of different sizes "
                                          f"{sorted(self.dims)}")
            if self._hash is not None:
                self._hash.update(_fingerprint_item(e))
            self.n += 1
            yield e

    @property
    def dim(self) -> int | None:
        return next(iter(self.dims)) if self.dims else None

    @property
    def fingerprint(self) -> str:
        return self._hash.hexdigest()[:16]


def check_unique_ids(entries: Iterable[MemoryEntry], where: str) -> None:
    for _ in Checked(where, dims=False)(entries):
        pass


def check_dims(entries: Iterable[MemoryEntry], where: str) -> int | None:
    """The embedding dimension shared by every entry (None for no entries)."""
    dims = {len(e.embedding) for e in entries}
    if len(dims) > 1:
        raise BankSourceError(f"{where}: entries have embeddings of different sizes {sorted(dims)}")
    return dims.pop() if dims else None


def check_embedder(src: BankSource, dim: int | None, embedder: Any, where: str) -> None:
    """The entries' keys (of `dim` dimensions) must come from the embedder that will query them."""
    target = getattr(embedder, "model_id", None)
    if src.embedder and target and src.embedder != target:
        raise BankSourceError(f"{where}: the bank was embedded with {src.embedder!r} but this run "
                              f"embeds with {target!r}; similarities would be meaningless")
    if dim is not None and not src.embedder:  # unknown provenance: at least the size must fit
        probe = int(embedder.embed(["dimension probe"]).shape[1])
        if probe != dim:
            raise BankSourceError(f"{where}: the bank's embeddings have {dim} dimensions, this "
                                  f"run's embedder gives {probe}")


def renamed_stream(entries: Iterable[MemoryEntry], prefix: str, ids: set[str], *, order_offset: int = 0,
                   extra: dict[str, Any] | None = None) -> Iterator[MemoryEntry]:
    """Copies with ids (and references to `ids`, the ids of the same set) prefixed, orders shifted."""
    for e in entries:
        d = {f: getattr(e, f) for f in MemoryEntry.__dataclass_fields__}  # the vector as it is
        d["memory_id"] = prefix + e.memory_id
        d["injected_ids"] = [prefix + i if i in ids else i for i in e.injected_ids]
        d["order"] = e.order + order_offset
        d["extra"] = {**e.extra, **(extra or {})}
        yield MemoryEntry(**d)


def renamed(entries: list[MemoryEntry], prefix: str, *, order_offset: int = 0,
            extra: dict[str, Any] | None = None) -> list[MemoryEntry]:
    """`renamed_stream` of a list."""
    return list(renamed_stream(entries, prefix, {e.memory_id for e in entries}, order_offset=order_offset,
                               extra=extra))


_WRITE_PAGE = 500


def write_entries(bank: ChromaBank, entries: Iterable[MemoryEntry]) -> int:
    """Add entries to a bank, a page at a time (upsert by id: writing the same entries twice
    is harmless)."""
    n = 0
    page: list[MemoryEntry] = []
    for e in entries:
        page.append(e)
        if len(page) == _WRITE_PAGE:
            bank.apply(BankUpdate(add=page))
            n, page = n + len(page), []
    if page:
        bank.apply(BankUpdate(add=page))
        n += len(page)
    return n


def write_meta(bank_dir: str | Path, meta: dict[str, Any]) -> None:
    write_json_atomic(Path(bank_dir) / META_FILE, {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                                   **meta})


def _fingerprint_item(e: MemoryEntry) -> bytes:
    return json.dumps([e.memory_id, round(e.q, 12), e.visits, e.experience]).encode()


def fingerprint(entries: Iterable[MemoryEntry]) -> str:
    """A short hash of ids, Q and experiences: says whether two banks hold the same memories."""
    h = hashlib.sha256()
    for e in entries:
        h.update(_fingerprint_item(e))
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- new banks
def hnsw_meta(s: BankSettings) -> dict[str, int]:
    return {"ef_search": s.ef_search, "ef_construction": s.ef_construction,
            "max_neighbors": s.max_neighbors}


def refuse_filled(out: Path) -> None:
    """A new bank goes into a new (or empty) directory only."""
    if out.exists() and any(out.iterdir()):
        raise BankSourceError(f"{out}: exists and is not empty; choose a new directory")


def create_bank(out: Path, entries: Iterable[MemoryEntry], settings: BankSettings, meta: dict[str, Any], *,
                index_from: IndexSource | None = None, keys: set[str] | None = None,
                key_vector: Callable[[str], Any] | None = None) -> int:
    """A new bank directory holding `entries` (streamed, each id once, one vector size), with
    its `bank_meta.json`; refuses a directory that is not empty.

    `index_from`, with `keys` (the key ids of `entries`) and `key_vector` (a key id's vector
    as the entries give it): start from a copy of that source's key index (`copy_index`) and
    add only the keys it lacks. The bank holds the same key records either way (the same ids
    with the same vectors), and the same entries and texts; only the graph that links the keys
    was built in another order, and holds the copied keys the bank does not (marked deleted)."""
    refuse_filled(out)
    checked = Checked(str(out))
    copied = (index_from is not None and keys is not None and key_vector is not None
              and copy_index(out, index_from, settings))
    bank = settings.open(out)
    try:
        drop: list[str] = []
        if copied:
            kept = reuse_index(bank, keys or set(), key_vector or (lambda k: None))
            if kept is None:  # not taken: a new index after all
                bank.close()
                empty_dir(out)
                bank = settings.open(out)
            drop = kept or []
        bank.hold()  # a bank in the making: durable once, when written, not at every page
        write_entries(bank, checked(entries))
        for i in range(0, len(drop), KEYS_PAGE):
            bank.index.delete(ids=drop[i:i + KEYS_PAGE])
        bank.flush()
        n = bank.count()
    finally:
        bank.close()
    write_meta(out, {**meta, "collection": settings.collection, "entries": n,
                     "fingerprint": checked.fingerprint, "hnsw": hnsw_meta(settings)})
    return n


def merge_stream(parts: list[tuple[str, Any]]) -> Iterator[MemoryEntry]:
    """Every entry of every part, ids prefixed by the part's label, parts in order (the first
    part's entries are the oldest). A part is a function giving its entries (called twice:
    once for its ids, once for the entries), so nothing holds a whole bank."""
    offset = 0
    for label, entries in parts:
        ids = {e.memory_id for e in entries(False)}
        top = -1
        for e in renamed_stream(entries(True), f"{label}:", ids, order_offset=offset,
                                extra={"merged_from": label}):
            top = max(top, e.order)
            yield e
        offset = max(offset, top + 1)


def merge_entries(parts: list[tuple[str, list[MemoryEntry]]]) -> list[MemoryEntry]:
    """`merge_stream` of lists, checked."""
    out = list(merge_stream([(label, lambda _full, es=entries: iter(es)) for label, entries in parts]))
    check_unique_ids(out, "merge")
    return out
