"""Memory-bank benchmark: is memory negligible next to model calls at 10k and 100k entries?

    python scripts/bench_memory.py                       # banks of 10k and 100k, MiniLM
    python scripts/bench_memory.py --sizes 2000 --embedder hashing   # a quick check

For each bank size it builds a fresh Chroma bank (the harness's `ChromaBank`, through the
same `BankUpdate` path a run uses) of realistic intents (scripts/bench_intents.py) with real
embeddings, then measures on held-out intents:

- Phase A latency: `ChromaBank.query` (top-k1) + the similarity gate;
- Phase A + B latency: `MemRLMemory.retrieve` end to end (query embedding excluded: the
  embedder is a lookup of precomputed vectors; MiniLM's own time per intent is printed apart);
- Phase A recall@k1 against exact brute-force cosine in numpy, tie-aware (a returned entry
  whose exact similarity equals the k1-th best counts as correct);
- utility-update latency: `MemRLMemory.plan_update` + `apply` for one episode that injected k2
  memories (Q and visit updates, no new memory);
- time to add an entry: batched (bank build, batches of 5,000) and single (one `apply`);
- bytes on disk per entry (the bank directory over the number of entries).

Embeddings are cached as .npy files under `<cache>/bench_memory/` (cache = --cache-dir, else
$MEMRL_CACHE_DIR, else ~/.cache/memrl), so a rerun skips the embedding. The machine's load
average is printed with the figures: latency on a loaded 2-core machine is not latency on an
idle one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_intents import make_experience, make_intents

from memrl.core.cachedir import default_cache_dir
from memrl.core.records import EpisodeResult, Task
from memrl.llm.embed import HashingEmbedder, MiniLMEmbedder
from memrl.memory.bank import BankSettings
from memrl.memory.base import LearnItem
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl.memory.retrieval import phase_a

QUERY_SEED_OFFSET = 7919  # held-out intents come from another stream of the generator


# ----------------------------------------------------------------------------- embeddings
def _text_hash(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def cached_embeddings(texts: list[str], embedder: Any, cache_dir: Path, tag: str) -> np.ndarray:
    """Embeddings of `texts`, from `<cache_dir>/<model>-<tag>-<hash>.npy` when present.

    A file made for a longer list of which `texts` is a prefix is reused (the intent
    generator is prefix-stable), so embedding 100k once also serves 10k.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = embedder.model_id.replace("/", "_")
    exact = cache_dir / f"{model}-{tag}-{len(texts)}-{_text_hash(texts)}.npy"
    if exact.exists():
        return np.load(exact)
    for path in sorted(cache_dir.glob(f"{model}-{tag}-*.npy")):
        meta = path.with_suffix(".json")
        if not meta.exists():
            continue
        cached_texts = json.loads(meta.read_text()).get("texts", [])
        if len(cached_texts) >= len(texts) and cached_texts[: len(texts)] == texts:
            return np.load(path, mmap_mode="r")[: len(texts)].copy()
    t0 = time.monotonic()
    print(f"embedding {len(texts)} texts with {embedder.model_id} (cached afterwards)...",
          file=sys.stderr, flush=True)
    parts = []
    for i in range(0, len(texts), 4096):
        parts.append(embedder.embed(texts[i:i + 4096]))
        print(f"  {min(i + 4096, len(texts))}/{len(texts)}  {time.monotonic() - t0:.0f}s",
              file=sys.stderr, flush=True)
    vecs = np.concatenate(parts).astype(np.float32)
    np.save(exact, vecs)
    exact.with_suffix(".json").write_text(json.dumps({"texts": list(texts)}))  # for prefix reuse
    return vecs


class LookupEmbedder:
    """Precomputed vectors by text: retrieval latency without the embedding model's time."""

    def __init__(self, texts: Sequence[str], vecs: np.ndarray, model_id: str):
        self._index = {t: i for i, t in enumerate(texts)}
        self._vecs = vecs
        self.model_id = model_id
        self.dim = int(vecs.shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._vecs[[self._index[t] for t in texts]]


# ----------------------------------------------------------------------------- figures
def pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else float("nan")


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass
class SizeResult:
    """Every figure measured for one bank size."""

    n: int
    queries: int
    phase_a_ms_p50: float
    phase_a_ms_p95: float
    retrieve_ms_p50: float
    retrieve_ms_p95: float
    update_ms_p50: float
    update_ms_p95: float
    recall_at_k1: float
    recall_queries: int  # queries with at least one entry above δ (the others: both empty)
    empty_agree: int  # queries where brute force and Phase A both found nothing above δ
    recall_ungated: float  # top-k1 recall with the gate off (the index alone)
    brute_force_ms_p50: float
    add_batched_ms_per_entry: float
    add_single_ms_p50: float
    add_single_ms_p95: float
    disk_bytes_per_entry: float
    experience_chars: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    extra: dict[str, Any] = field(default_factory=dict)


def tie_aware_recall(returned: list[int], sims: np.ndarray, *, k: int,
                     delta: float | None) -> tuple[float, int]:
    """(recall, size of the exact answer). The exact answer is the top-k of `sims` (above δ
    when given); a returned index counts if its exact similarity reaches the k-th best."""
    cand = np.flatnonzero(sims > delta) if delta is not None else np.arange(sims.size)
    if cand.size == 0:
        return (1.0 if not returned else 0.0), 0
    top = cand[np.argsort(-sims[cand], kind="stable")[:k]]
    threshold = float(sims[top[-1]]) - 1e-6
    ok = sum(1 for i in returned if sims[i] >= threshold and (delta is None or sims[i] > delta))
    return min(ok, top.size) / top.size, int(top.size)


def bench_size(n: int, vecs: np.ndarray, texts: list[str], q_texts: list[str], q_vecs: np.ndarray,
               args: argparse.Namespace, work: Path, model_id: str) -> SizeResult:
    load_before = os.getloadavg()
    bank_dir = work / f"bank_{n}"
    shutil.rmtree(bank_dir, ignore_errors=True)
    bank_settings = BankSettings(ef_search=args.ef_search, ef_construction=args.ef_construction,
                                 max_neighbors=args.max_neighbors)
    embedder = LookupEmbedder(list(texts[:n]) + list(q_texts),
                              np.concatenate([vecs[:n], q_vecs]), model_id)
    settings = MemRLSettings(delta=args.delta, k1=args.k1, k2=args.k2, write_memories=False,
                             bank=bank_settings)
    memory = MemRLMemory(settings, bank_dir=bank_dir, embedder=embedder)
    bank = memory.bank

    # ---- build (batched adds) -------------------------------------------------------------
    rng = np.random.default_rng(args.seed)
    exp_chars = args.experience_chars
    t0 = time.perf_counter()
    for start in range(0, n, 5000):
        stop = min(n, start + 5000)
        chunk = [MemoryEntry(memory_id=f"b{i}", intent=texts[i],
                             experience=make_experience(texts[i], i, exp_chars),
                             embedding=vecs[i].tolist(), q=float(rng.uniform(-1, 1)),
                             visits=int(rng.integers(0, 5)), success=bool(rng.random() < 0.5),
                             epoch=1 + i % 10, task_id=f"t{i}", kind="bench", order=i)
                 for i in range(start, stop)]
        bank.apply(BankUpdate(add=chunk))
        print(f"  n={n}: added {stop}  {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    add_batched = (time.perf_counter() - t0) / n * 1000
    if bank.count() != n:
        raise RuntimeError(f"bank holds {bank.count()} entries, expected {n}")

    # ---- Phase A: latency and recall -----------------------------------------------------
    base = vecs[:n]
    phase_a_ms, brute_ms, recalls, recalls_ungated = [], [], [], []
    empty_agree = 0
    for _ in range(args.warmup):
        bank.query(q_vecs[0], args.k1)
    for qv in q_vecs:
        t = time.perf_counter()
        hits = bank.query(qv, args.k1)
        sims = np.array([s for _, s in hits])
        pool = phase_a(sims, delta=args.delta, k1=args.k1, gate=True)
        phase_a_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        exact = base @ qv
        brute_ms.append((time.perf_counter() - t) * 1000)
        got = [int(hits[i][0].memory_id[1:]) for i in pool]
        r, size = tie_aware_recall(got, exact, k=args.k1, delta=args.delta)
        if size == 0:
            empty_agree += int(r == 1.0)
        else:
            recalls.append(r)
        recalls_ungated.append(tie_aware_recall([int(e.memory_id[1:]) for e, _ in hits], exact,
                                                k=args.k1, delta=None)[0])

    # ---- Phase A + B through the module ---------------------------------------------------
    tasks = [Task(f"q{i}", t) for i, t in enumerate(q_texts)]
    retrieve_ms, retrieved = [], []
    for task in tasks:
        t = time.perf_counter()
        got_mem = memory.retrieve(task)
        retrieve_ms.append((time.perf_counter() - t) * 1000)
        retrieved.append(got_mem)

    # ---- utility update: plan + apply for one episode ---------------------------------------
    update_ms = []
    for i, (task, mems) in enumerate(zip(tasks, retrieved)):
        if not mems:
            continue
        item = LearnItem(task=task, result=EpisodeResult(success=bool(i % 2), reward=float(i % 2),
                                                         steps=1), injected=mems, epoch=2)
        t = time.perf_counter()
        memory.apply(memory.plan_update([item]))
        update_ms.append((time.perf_counter() - t) * 1000)

    # ---- single add ---------------------------------------------------------------------------
    single_ms = []
    for j in range(args.single_adds):
        i = j % len(q_texts)
        entry = MemoryEntry(memory_id=f"s{j}", intent=q_texts[i],
                            experience=make_experience(q_texts[i], n + j, exp_chars),
                            embedding=q_vecs[i].tolist(), order=n + j, kind="bench")
        t = time.perf_counter()
        bank.apply(BankUpdate(add=[entry]))
        single_ms.append((time.perf_counter() - t) * 1000)

    total = bank.count()
    disk = dir_bytes(bank_dir)
    sqlite = (bank_dir / "chroma.sqlite3").stat().st_size if (bank_dir / "chroma.sqlite3").exists() else 0
    bank.close()
    return SizeResult(
        n=n, queries=len(q_vecs),
        phase_a_ms_p50=pct(phase_a_ms, 50), phase_a_ms_p95=pct(phase_a_ms, 95),
        retrieve_ms_p50=pct(retrieve_ms, 50), retrieve_ms_p95=pct(retrieve_ms, 95),
        update_ms_p50=pct(update_ms, 50), update_ms_p95=pct(update_ms, 95),
        recall_at_k1=float(np.mean(recalls)) if recalls else float("nan"),
        recall_queries=len(recalls), empty_agree=empty_agree,
        recall_ungated=float(np.mean(recalls_ungated)),
        brute_force_ms_p50=pct(brute_ms, 50),
        add_batched_ms_per_entry=add_batched,
        add_single_ms_p50=pct(single_ms, 50), add_single_ms_p95=pct(single_ms, 95),
        disk_bytes_per_entry=disk / total, experience_chars=exp_chars,
        load_before=tuple(round(x, 2) for x in load_before),  # type: ignore[arg-type]
        load_after=tuple(round(x, 2) for x in os.getloadavg()),  # type: ignore[arg-type]
        extra={"update_samples": len(update_ms), "entries_at_end": total,
               "disk_sqlite_per_entry": sqlite / total, "disk_index_per_entry": (disk - sqlite) / total,
               "injected_mean": float(np.mean([len(m) for m in retrieved]))})


# ----------------------------------------------------------------------------- table
ROWS = [
    ("Phase A p50 / p95 (ms)", lambda r: f"{r.phase_a_ms_p50:.2f} / {r.phase_a_ms_p95:.2f}"),
    ("Phase A+B retrieve p50 / p95 (ms)", lambda r: f"{r.retrieve_ms_p50:.2f} / {r.retrieve_ms_p95:.2f}"),
    ("utility update p50 / p95 (ms)", lambda r: f"{r.update_ms_p50:.2f} / {r.update_ms_p95:.2f}"),
    ("Phase A recall@k1 (gated; queries)", lambda r: f"{r.recall_at_k1:.4f} ({r.recall_queries}, "
                                                     f"+{r.empty_agree} both empty)"),
    ("top-k1 recall, no gate", lambda r: f"{r.recall_ungated:.4f}"),
    ("numpy brute force p50 (ms)", lambda r: f"{r.brute_force_ms_p50:.2f}"),
    ("add, batched (ms/entry)", lambda r: f"{r.add_batched_ms_per_entry:.3f}"),
    ("add, single p50 / p95 (ms)", lambda r: f"{r.add_single_ms_p50:.2f} / {r.add_single_ms_p95:.2f}"),
    ("disk per entry (bytes)", lambda r: f"{r.disk_bytes_per_entry:,.0f}"),
    ("  of which SQLite / HNSW index", lambda r: f"{r.extra['disk_sqlite_per_entry']:,.0f} / "
                                               f"{r.extra['disk_index_per_entry']:,.0f}"),
    ("load avg before -> after", lambda r: f"{r.load_before[0]:.2f} -> {r.load_after[0]:.2f}"),
]


def table(results: list[SizeResult]) -> str:
    width = max(len(name) for name, _ in ROWS)
    cols = [max(20, *(len(f(r)) for _, f in ROWS)) for r in results]
    head = "".ljust(width) + "  " + "  ".join(f"{r.n:,} entries".rjust(c) for r, c in zip(results, cols))
    lines = [head, "-" * len(head)]
    for name, f in ROWS:
        lines.append(name.ljust(width) + "  " + "  ".join(f(r).rjust(c) for r, c in zip(results, cols)))
    return "\n".join(lines)


def embed_latency(embedder: Any, texts: Sequence[str], n: int = 50) -> tuple[float, float]:
    """p50/p95 ms to embed one intent (uncached): what a retrieval adds before Phase A."""
    embedder.embed([texts[0]])  # load the model
    ms = []
    for t in texts[1:n + 1]:
        s = time.perf_counter()
        embedder.embed([t])
        ms.append((time.perf_counter() - s) * 1000)
    return pct(ms, 50), pct(ms, 95)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000", help="bank sizes, comma-separated")
    p.add_argument("--queries", type=int, default=300, help="held-out query intents")
    p.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
    p.add_argument("--delta", type=float, default=0.62, help="similarity gate δ (ALFWorld: 0.62)")
    p.add_argument("--k1", type=int, default=5)
    p.add_argument("--k2", type=int, default=3)
    p.add_argument("--ef-search", type=int, default=BankSettings().ef_search)
    p.add_argument("--ef-construction", type=int, default=BankSettings().ef_construction)
    p.add_argument("--max-neighbors", type=int, default=BankSettings().max_neighbors)
    p.add_argument("--experience-chars", type=int, default=1200)
    p.add_argument("--single-adds", type=int, default=50)
    p.add_argument("--warmup", type=int, default=20, help="queries before timing starts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None, help="where banks are built (temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the banks after the run")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    try:
        args.sizes = sorted({int(s) for s in str(args.sizes).split(",") if s.strip()})
    except ValueError:
        p.error(f"--sizes: comma-separated integers expected (got {args.sizes!r})")
    if not args.sizes or min(args.sizes) < max(args.k1, 1):
        p.error("--sizes: every size must be at least k1")
    if args.k2 > args.k1:
        p.error("--k2 must not exceed --k1")
    if args.queries < 1:
        p.error("--queries must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> list[SizeResult]:
    args = parse_args(argv)
    embedder = MiniLMEmbedder() if args.embedder == "minilm" else HashingEmbedder(dim=384)
    cache = (args.cache_dir or default_cache_dir()) / "bench_memory"
    texts = make_intents(max(args.sizes), seed=args.seed)
    bank_set = set(texts)
    q_texts = [t for t in make_intents(args.queries * 3, seed=args.seed + QUERY_SEED_OFFSET)
               if t not in bank_set][: args.queries]
    vecs = cached_embeddings(texts, embedder, cache, f"s{args.seed}")
    q_vecs = cached_embeddings(q_texts, embedder, cache, f"q{args.seed}")
    emb_p50, emb_p95 = embed_latency(embedder, q_texts)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_memory_"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for n in args.sizes:
            results.append(bench_size(n, vecs, texts, q_texts, q_vecs, args, work, embedder.model_id))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"memory bench: {args.embedder} embeddings ({embedder.model_id}), {len(q_texts)} held-out "
          f"queries, δ={args.delta} k1={args.k1} k2={args.k2}, HNSW ef_search={args.ef_search} "
          f"ef_construction={args.ef_construction} M={args.max_neighbors}, "
          f"experience {args.experience_chars} chars, {os.cpu_count()} CPUs")
    print(table(results))
    print(f"embedding one intent ({args.embedder}, uncached): p50 {emb_p50:.1f} ms, p95 {emb_p95:.1f} ms"
          " — not included above (a run embeds each intent once and caches it)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v)
                                                  for k, v in vars(args).items()},
                                         "embed_ms": [emb_p50, emb_p95],
                                         "results": [asdict(r) for r in results]}, indent=2))
    return results


if __name__ == "__main__":
    main()
