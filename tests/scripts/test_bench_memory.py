"""The memory benchmark's measuring parts: tie-aware recall, the intent generator, the
embedding cache, and a small end-to-end pass (hashing embedder) whose figures must agree
with what the bank holds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import bench_memory as bm
from bench_intents import make_experience, make_intents


def test_tie_aware_recall():
    sims = np.array([0.9, 0.8, 0.8, 0.8, 0.5, 0.1])
    # exact top-2 = {0, one of 1/2/3}: any tied entry is a correct second answer
    assert bm.tie_aware_recall([0, 3], sims, k=2, delta=None) == (1.0, 2)
    assert bm.tie_aware_recall([0, 4], sims, k=2, delta=None) == (0.5, 2)
    # the gate: only 0.9 is above δ = 0.85, so one entry is the whole answer
    assert bm.tie_aware_recall([0], sims, k=3, delta=0.85) == (1.0, 1)
    assert bm.tie_aware_recall([1], sims, k=3, delta=0.85) == (0.0, 1)
    # nothing above δ: right only when nothing is returned
    assert bm.tie_aware_recall([], sims, k=3, delta=0.95) == (1.0, 0)
    assert bm.tie_aware_recall([0], sims, k=3, delta=0.95) == (0.0, 0)


def test_intents_are_distinct_deterministic_and_prefix_stable():
    a = make_intents(3000, seed=1)
    assert len(set(a)) == 3000 and a == make_intents(3000, seed=1)
    assert make_intents(1000, seed=1) == a[:1000]
    assert make_intents(100, seed=2) != a[:100]
    families = {"put": 0, "Write": 0, "SQL": 0, "shell": 0}
    for t in a:
        if t.split()[0] in {"put", "place", "clean", "rinse", "heat", "cool", "find", "look",
                            "examine", "pick"}:
            families["put"] += 1
        elif any(w in t for w in ("function", "helper", "code", "Given a")):
            families["Write"] += 1
        elif any(w in t for w in (" of ", "List all", "How many", "Update", "Delete", "Insert")) and "files" not in t:
            families["SQL"] += 1
        else:
            families["shell"] += 1
    assert min(families.values()) > 400  # each family is well represented
    assert 1100 <= len(make_experience(a[0], 0, 1200)) <= 1200


class CountingEmbedder:
    model_id = "counting"

    def __init__(self):
        self.calls = 0

    def embed(self, texts):
        self.calls += len(texts)
        return bm.HashingEmbedder(dim=16).embed(texts)


def test_embedding_cache_reuses_files_and_prefixes(tmp_path):
    texts = make_intents(1000)
    emb = CountingEmbedder()
    first = bm.cached_embeddings(texts, emb, tmp_path, "s0")
    assert emb.calls == 1000
    again = bm.cached_embeddings(texts, emb, tmp_path, "s0")
    prefix = bm.cached_embeddings(texts[:500], emb, tmp_path, "s0")  # read from the 1,000 file
    assert emb.calls == 1000
    assert np.array_equal(first, again) and np.array_equal(prefix, first[:500])


def test_small_bench_figures_agree_with_the_bank(tmp_path, capsys):
    (res,) = bm.main(["--sizes", "400", "--embedder", "hashing", "--queries", "30", "--single-adds", "7",
                      "--cache-dir", str(tmp_path / "cache"), "--work-dir", str(tmp_path / "work"),
                      "--delta", "0.2", "--json", str(tmp_path / "out.json")])
    assert res.n == 400 and res.extra["entries_at_end"] == 407
    assert res.recall_at_k1 == 1.0 and res.recall_ungated == 1.0  # 400 < ef_search: exact search
    assert res.recall_queries + res.empty_agree <= 30
    assert res.extra["update_samples"] > 0 and res.update_ms_p50 > 0
    assert res.disk_bytes_per_entry > res.experience_chars / 2  # the experiences are on disk
    assert 0 < res.phase_a_ms_p50 <= res.phase_a_ms_p95
    out = capsys.readouterr().out
    assert "Phase A recall@k1" in out and "400 entries" in out
    assert not (tmp_path / "work").exists()  # banks removed unless --keep
