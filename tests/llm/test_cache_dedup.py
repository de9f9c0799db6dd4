"""In-flight deduplication of model calls on a shared response cache (memrl.llm.response_cache claims,
memrl.llm.client): threads of one process and separate processes asking for the same
request while it is in flight pay for it once."""

from __future__ import annotations

import json
from pathlib import Path
import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from memrl.llm.base import LLMError, LLMRequest
from clients import make_client

from memrl.llm.response_cache import ResponseCache, request_key
from memrl.llm.scripted import ScriptedBackend

pytestmark = pytest.mark.serial  # times or samples the host: runs alone (Makefile, test)


def _req(text: str) -> LLMRequest:
    return LLMRequest(messages=(("user", text),), max_tokens=8)


def slow(delay: float):
    def fn(request: LLMRequest) -> str:
        time.sleep(delay)
        return "answer to " + request.messages[-1][1]
    return fn


def test_threads_asking_for_the_same_request_share_one_call(tmp_path) -> None:
    backend = ScriptedBackend(slow(0.2))
    client = make_client(backend, cache=ResponseCache(tmp_path / "c.sqlite"), max_concurrency=16)
    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda _: client.complete(_req("same")).text, range(8)))
    assert texts == ["answer to same"] * 8
    assert backend.calls == 1
    t = client.totals()
    assert t["calls"] == 1 and t["cache_hits"] == 7 and t["requests"] == 8
    # distinct requests are not held back by each other: four of them meet inside the model at
    # once (a barrier of four that a one-at-a-time client could never pass), whatever the load
    meet = threading.Barrier(4, timeout=60)

    def together(request: LLMRequest) -> str:
        meet.wait()
        return "answer to " + request.messages[-1][1]

    backend.fn = together
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: client.complete(_req(f"other {i}")), range(4)))
    assert backend.calls == 5 and not meet.broken
    assert ResponseCache(tmp_path / "c.sqlite")._conn.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_a_failed_leader_lets_the_next_caller_try(tmp_path) -> None:
    state = {"n": 0}
    gate = threading.Event()

    def fn(request: LLMRequest) -> str:
        state["n"] += 1
        if state["n"] == 1:
            gate.wait(2)
            raise ValueError("not transient: fails at once")
        return "second try"

    client = make_client(ScriptedBackend(fn), cache=ResponseCache(tmp_path / "c.sqlite"))
    results: list[str] = []

    def call() -> None:
        try:
            results.append(client.complete(_req("x")).text)
        except LLMError as exc:
            results.append(f"error: {exc}")

    first = threading.Thread(target=call)
    first.start()
    time.sleep(0.1)
    second = threading.Thread(target=call)
    second.start()
    time.sleep(0.1)
    gate.set()
    first.join(5)
    second.join(5)
    assert sorted(results) == ["error: scripted: ValueError: not transient: fails at once", "second try"]
    assert state["n"] == 2


def test_a_dead_processes_claim_is_taken_over(tmp_path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cache = ResponseCache(tmp_path / "c.sqlite")
    backend = ScriptedBackend(slow(0.0))
    key = request_key(backend.model_id, _req("orphan"))
    cache._conn.execute("INSERT INTO claims VALUES (?, 'someone', ?, ?, ?)",
                        (key, dead.pid, cache._host, time.time()))
    cache._conn.commit()
    client = make_client(backend, cache=cache)
    t0 = time.monotonic()
    assert client.complete(_req("orphan")).text == "answer to orphan"
    # taken over at once, not after the claim's lease (CLAIM_LEASE_S, 900 s): any load passes 60 s
    assert time.monotonic() - t0 < 60 and backend.calls == 1
    # a live process's claim is waited for: the answer it puts is served, no call made
    other = ResponseCache(tmp_path / "c.sqlite")
    key2 = request_key(backend.model_id, _req("held"))
    assert other.claim(key2) and not cache.claim(key2)

    def answer_later() -> None:
        time.sleep(0.3)
        from memrl.llm.base import LLMResponse
        other.put(key2, LLMResponse(text="from the other process", prompt_tokens=3))
        other.release(key2)

    threading.Thread(target=answer_later).start()
    assert client.complete(_req("held")).text == "from the other process"
    assert backend.calls == 1 and client.totals()["claim_waits"] >= 1


CHILD = textwrap.dedent("""
    import json, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from memrl.llm.base import LLMRequest
    from memrl.llm.response_cache import ResponseCache
    from memrl.llm.scripted import ScriptedBackend

    cache_path, log_path, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
    sys.path.insert(0, sys.argv[4])  # tests/: the test client (clients.make_client)
    from clients import make_client

    def fn(request):
        with open(log_path, "a") as fh:  # one line per paid call, from either process
            fh.write(request.messages[-1][1] + "\\n")
        time.sleep(0.5)
        return "answer to " + request.messages[-1][1]

    client = make_client(ScriptedBackend(fn), cache=ResponseCache(cache_path), max_concurrency=8)
    reqs = [LLMRequest(messages=(("user", f"shared {i}"),), max_tokens=8) for i in range(6)]
    time.sleep(max(0.0, start_at - time.time()))
    with ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(lambda r: client.complete(r).text, reqs))
    print(json.dumps({"texts": texts, "totals": client.totals()}))
""")


def test_two_processes_on_one_cache_pay_for_a_request_once(tmp_path) -> None:
    cache_path, log_path = tmp_path / "shared.sqlite", tmp_path / "paid.log"
    ResponseCache(cache_path).close()  # the schema exists before both start
    start_at = time.time() + 2.0  # both begin together, after their imports
    tests_dir = str(Path(__file__).resolve().parents[1])
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(cache_path), str(log_path), str(start_at), tests_dir],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
             for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    expected = [f"answer to shared {i}" for i in range(6)]
    assert all(o["texts"] == expected for o in outs)
    paid = log_path.read_text().split("\n")[:-1]
    assert sorted(paid) == sorted(f"shared {i}" for i in range(6))  # each paid once, not twice
    assert sum(o["totals"]["calls"] for o in outs) == 6
    assert sum(o["totals"]["cache_hits"] for o in outs) == 6
