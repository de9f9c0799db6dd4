"""The Chroma bank: Phase A's top-k1 must be the true top-k1 (checked against brute force),
updates are idempotent, and the bank persists."""

import numpy as np

from memrl.memory.bank import ChromaBank
from memrl.memory.entry import BankUpdate, MemoryEntry
from memory_state import snapshot


def _clustered(n, dim, clusters, rng):
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, size=n)] + 0.35 * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _entries(vecs):
    return [MemoryEntry(memory_id=f"m{i}", intent=f"intent {i}", experience=f"exp {i}",
                        embedding=v.tolist(), order=i) for i, v in enumerate(vecs)]


def test_query_matches_brute_force_top_k(tmp_path):
    rng = np.random.default_rng(1)
    vecs = _clustered(3000, 64, 40, rng)
    bank = ChromaBank(tmp_path / "bank")
    bank.apply(BankUpdate(add=_entries(vecs)))
    assert bank.count() == 3000
    queries = _clustered(40, 64, 40, rng)
    k = 10
    found = total = 0
    for q in queries:
        truth = set(np.argsort(-(vecs @ q))[:k].tolist())
        hits = bank.query(q, k)
        got = {int(e.memory_id[1:]) for e, _ in hits}
        found += len(truth & got)
        total += k
        sims = [s for _, s in hits]
        assert sims == sorted(sims, reverse=True)
        # similarity reported = cosine
        best = hits[0]
        assert abs(best[1] - float(vecs[int(best[0].memory_id[1:])] @ q)) < 1e-4
    assert found / total >= 0.99


def test_apply_is_idempotent_and_persists(tmp_path):
    rng = np.random.default_rng(2)
    vecs = _clustered(5, 16, 2, rng)
    bank = ChromaBank(tmp_path / "b")
    upd = BankUpdate(add=_entries(vecs))
    bank.apply(upd)
    bank.apply(upd)
    assert bank.count() == 5
    set_q = BankUpdate(set_fields={"m1": {"q": 0.3, "visits": 1}})
    bank.apply(set_q)
    bank.apply(set_q)
    got = bank.get(["m1"])["m1"]
    assert (got.q, got.visits, got.experience) == (0.3, 1, "exp 1")
    bank.apply(BankUpdate(delete=["m0"], set_fields={"m0": {"q": 1.0}}))
    reopened = ChromaBank(tmp_path / "b")
    snap = snapshot(reopened)
    assert [e["id"] for e in snap] == ["m1", "m2", "m3", "m4"]
    assert snap[0]["q"] == 0.3


def test_export_jsonl_roundtrip(tmp_path):
    vecs = _clustered(3, 8, 1, np.random.default_rng(3))
    bank = ChromaBank(tmp_path / "b")
    bank.apply(BankUpdate(add=_entries(vecs)))
    n = bank.export_jsonl(tmp_path / "bank.jsonl")
    lines = (tmp_path / "bank.jsonl").read_text().splitlines()
    assert n == 3 and len(lines) == 3
    import json
    row = json.loads(lines[2])
    assert row["memory_id"] == "m2" and np.allclose(row["embedding"], vecs[2], atol=1e-6)
