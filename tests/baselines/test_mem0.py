"""The Mem0 baseline: the `mem0ai` package driven by the project's LLM layer and embedder.

Unit tests use a scripted model that answers mem0's extraction prompt with valid JSON (or
with garbage) and the hashing embedder; one slow test runs `memory=mem0` end to end on real
ALFWorld games with the embedded model."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mem0", reason="the mem0 extra is not installed (pip install -e '.[mem0]')")

from memrl.core.records import EpisodeResult, RetrievedMemory, Step, Task
from memrl.core.rundir import RunDir
from memrl.llm.base import LLMRequest
from clients import make_client
from memrl.llm.embed import HashingEmbedder
from memrl.llm.response_cache import ResponseCache
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.base import LearnItem
from memrl.memory.entry import BankUpdate
from memrl_baselines.mem0 import Mem0Memory, Mem0Settings
from memrl_baselines.mem0_bridge import parse_extraction
from memory_state import snapshot
from data_paths import ALFWORLD

ROOT = Path(__file__).resolve().parents[2]


MUG = Task("a/1", "put a clean mug in coffeemachine.")
MUG2 = Task("b/2", "put a clean mug in the coffeemachine.")
LAMP = Task("c/3", "examine the alarmclock with the desklamp.")


def new_task_of(request: LLMRequest) -> str:
    """The task line of the episode mem0 is asking about (from its 'New Messages')."""
    user = request.messages[-1][1]
    new = user.split("## New Messages", 1)[1]
    line = next(ln for ln in new.splitlines() if ln.startswith("user: Task: "))
    return line.removeprefix("user: Task: ").strip()


def is_extraction(request: LLMRequest) -> bool:
    return request.messages[0][0] == "system" and "Memory Extractor" in request.messages[0][1]


def good_model(request: LLMRequest) -> str:
    assert is_extraction(request), "mem0 asked something other than its extraction prompt"
    task = new_task_of(request)
    return json.dumps({"memory": [{"id": "0", "text": f"Agent learned how to {task}",
                                   "attributed_to": "assistant"}]})


def make(tmp_path, fn=good_model, *, cache=None, sub="run", **kw):
    backend = ScriptedBackend(fn, model_id="scripted-mem0")
    client = make_client(backend, cache=cache, max_retries=0)
    mem = Mem0Memory(Mem0Settings(**{"k": 3, **kw}), store_dir=tmp_path / sub / "mem0",
                     embedder=HashingEmbedder(dim=64))
    mem.attach_llm(client)
    mem.setup([MUG, MUG2, LAMP], seed=0)
    return mem, backend, client


def item(mem, task, success=True, epoch=1, errored=False):
    res = EpisodeResult(success=success, reward=float(success), steps=2,
                        transcript=[Step("go to sinkbasin 1", "You arrive at sinkbasin 1."),
                                    Step("clean mug 1 with sinkbasin 1", "You clean the mug 1.")],
                        errors=["LLMError"] if errored else [])
    digest = mem.digest(task, res, epoch=epoch, llm=None)
    return LearnItem(task=task, result=res, injected=[], epoch=epoch, digest=digest, errored=errored)


def test_add_then_search_returns_the_memory_through_the_project_llm(tmp_path):
    mem, backend, client = make(tmp_path)
    update = mem.plan_update([item(mem, MUG), item(mem, LAMP, success=False)])
    assert [e.memory_id for e in update.add] == ["e001:a/1", "e001:c/3"]
    assert backend.calls == 0  # planning calls no model; mem0 runs when the batch is applied
    mem.apply(update)
    # one extraction call per episode, through the project's client (counted there too)
    assert backend.calls == 2 and all(is_extraction(r) for r in backend.requests)
    assert client.totals()["calls"] == 2 and client.totals()["prompt_tokens"] > 0
    assert [r.sample_id for r in backend.requests] == ["s0/mem0/e001:a/1/mem0-add/0",
                                                       "s0/mem0/e001:c/3/mem0-add/0"]
    # mem0's prompt dates are pinned (a replay on another day asks the same question)
    assert "## Current Date\n2025-01-01" in backend.requests[0].messages[-1][1]

    texts = {r["memory"] for r in snapshot(mem)}
    assert texts == {"Agent learned how to put a clean mug in coffeemachine.",
                     "Agent learned how to examine the alarmclock with the desklamp."}

    got = mem.retrieve(MUG2)
    assert got and all(isinstance(m, RetrievedMemory) for m in got)
    top = got[0]
    assert top.experience == "Agent learned how to put a clean mug in coffeemachine."
    assert top.memory_id.startswith("e001:a/1#") and top.intent == MUG.intent
    assert top.success is True and top.q == 0.0 and -1.0 <= top.similarity <= 1.0
    assert top.score == max(m.score for m in got)
    assert len(mem.retrieve(MUG2)) <= 3


def test_retrieval_respects_k(tmp_path):
    mem, _, _ = make(tmp_path, k=1)
    mem.apply(mem.plan_update([item(mem, MUG), item(mem, LAMP)]))
    got = mem.retrieve(MUG2)
    assert len(got) == 1 and got[0].memory_id.startswith("e001:a/1#")


def test_applying_the_same_update_twice_does_not_duplicate(tmp_path):
    mem, backend, _ = make(tmp_path)
    update = mem.plan_update([item(mem, MUG), item(mem, LAMP)])
    mem.apply(update)
    first = snapshot(mem)
    mem.apply(update)  # the runner re-applies a journaled batch after a crash
    assert snapshot(mem) == first and backend.calls == 2
    # a journal replayed by a new process (the update read back from JSON)
    mem.close()
    again, backend2, _ = make(tmp_path)
    again.apply(BankUpdate.from_dict(json.loads(json.dumps(update.to_dict()))))
    assert snapshot(again) == first and backend2.calls == 0
    # a crash that lost the ledger after the memories were stored: the store itself says so
    again.close()
    (tmp_path / "run" / "mem0" / "applied.jsonl").unlink()
    third, backend3, _ = make(tmp_path)
    third.apply(update)
    assert snapshot(third) == first and backend3.calls == 0
    assert third.stats() == {"recovered": 2}


def test_a_replay_hits_the_response_cache_and_ends_in_the_same_store(tmp_path):
    cache = ResponseCache(tmp_path / "llm.sqlite")
    snaps = []
    for sub in ("a", "b"):
        mem, backend, client = make(tmp_path, cache=cache, sub=sub)
        mem.apply(mem.plan_update([item(mem, MUG), item(mem, LAMP)]))
        mem.apply(mem.plan_update([item(mem, MUG2, epoch=2)]))
        snaps.append(snapshot(mem))
        calls, hits = backend.calls, client.totals()["cache_hits"]
        mem.close()
    assert snaps[0] == snaps[1] and len(snaps[0]) == 3
    assert (calls, hits) == (0, 3)  # the second run asked nothing new
    assert [r["created_at"] for r in snaps[0]] == sorted(r["created_at"] for r in snaps[0])


def test_garbage_model_output_falls_back_to_raw_text(tmp_path):
    mem, backend, _ = make(tmp_path, fn=lambda req: "The mug is clean. {not json")
    mem.apply(mem.plan_update([item(mem, MUG)]))
    assert backend.calls == 1 and mem.fallbacks == 1
    snap = snapshot(mem)
    assert len(snap) == 1 and snap[0]["memory"].startswith("Task: put a clean mug in coffeemachine.")
    assert "Outcome: The task was solved in 2 steps." in snap[0]["memory"]
    ledger = [json.loads(x) for x in (tmp_path / "run" / "mem0" / "applied.jsonl").read_text().splitlines()]
    assert ledger[0]["mode"] == "raw-fallback" and "unparsable" in ledger[0]["error"]
    got = mem.retrieve(MUG2)
    assert got and got[0].experience == snap[0]["memory"]


RAMBLING = ('\n{"memory": [\n  {"id": "0", "text": "Agent cleans a mug at the sinkbasin first"}\n]}'
            '\n\n## Last k Messages\n[{"id": "0", "text": "User is a product manager."}]')


def test_an_answer_with_trailing_text_is_cut_to_its_json_object(tmp_path):
    mem, backend, _ = make(tmp_path, fn=lambda req: RAMBLING)
    mem.apply(mem.plan_update([item(mem, MUG)]))
    assert [r["memory"] for r in snapshot(mem)] == ["Agent cleans a mug at the sinkbasin first"]
    assert mem.fallbacks == 0
    ledger = json.loads((tmp_path / "run" / "mem0" / "applied.jsonl").read_text())
    assert ledger["mode"] == "infer" and ledger["repaired"] is True


def test_without_repair_such_an_answer_falls_back(tmp_path):
    mem, backend, _ = make(tmp_path, fn=lambda req: RAMBLING, repair_json=False)
    mem.apply(mem.plan_update([item(mem, MUG)]))
    assert mem.fallbacks == 1 and snapshot(mem)[0]["memory"].startswith("Task: ")


def test_a_failing_model_call_falls_back_too(tmp_path):
    def broken(req):
        raise ValueError("backend down")

    mem, backend, _ = make(tmp_path, fn=broken)
    mem.apply(mem.plan_update([item(mem, MUG), item(mem, LAMP)]))
    assert mem.fallbacks == 2 and len(snapshot(mem)) == 2


def test_valid_but_empty_extraction_stores_nothing(tmp_path):
    mem, backend, _ = make(tmp_path, fn=lambda req: '{"memory": []}')
    mem.apply(mem.plan_update([item(mem, MUG)]))
    assert snapshot(mem) == [] and mem.stats() == {"infer-empty": 1} and mem.fallbacks == 0
    mem.apply(mem.plan_update([item(mem, MUG)]))  # same key: already applied
    assert backend.calls == 1


def test_infer_off_stores_raw_text_without_model_calls(tmp_path):
    mem, backend, _ = make(tmp_path, infer=False)
    assert mem.needs_llm is False
    mem.apply(mem.plan_update([item(mem, MUG)]))
    assert backend.calls == 0 and mem.stats() == {"raw": 1}
    assert snapshot(mem)[0]["memory"].startswith("Task: put a clean mug")


def test_errored_episodes_are_not_stored(tmp_path):
    mem, _, _ = make(tmp_path)
    assert mem.plan_update([item(mem, MUG, errored=True)]).add == []


def test_parse_extraction_reads_like_mem0():
    assert parse_extraction('```json\n{"memory": [{"id": "0", "text": "x"}]}\n```')[0]["text"] == "x"
    assert parse_extraction('Sure: {"memory": []} done') == []
    for bad in ("", "no json here", '{"memory": "x"}', '{"memory": [3]}', "[1, 2]"):
        with pytest.raises(ValueError):
            parse_extraction(bad)


def test_telemetry_is_off_and_nothing_reaches_the_network(tmp_path, monkeypatch):
    import mem0.memory.main as mem0_main
    import mem0.memory.telemetry as telemetry

    assert os.environ["MEM0_TELEMETRY"] == "False"
    assert telemetry.MEM0_TELEMETRY is False and mem0_main.MEM0_TELEMETRY is False
    attempts = []

    def no_connect(self, address, *a, **kw):
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", no_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", no_connect)
    mem, backend, _ = make(tmp_path)
    mem.apply(mem.plan_update([item(mem, MUG)]))
    assert mem.retrieve(MUG2)
    assert attempts == [] and backend.calls == 1
    assert telemetry.client_telemetry.posthog is None
    assert telemetry._oss_telemetry_instance is None  # the PostHog singleton was never made


def test_telemetry_is_off_even_if_the_environment_asks_for_it(tmp_path):
    env = dict(os.environ, MEM0_TELEMETRY="True", MEM0_DIR=str(tmp_path / "mem0dir"))
    code = ("import memrl_baselines.mem0 as m; import mem0.memory.telemetry as t; "
            "print(t.MEM0_TELEMETRY, t.client_telemetry.posthog)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "None"]


def test_mem0_config_composes_and_validates():
    from hydra import compose, initialize_config_dir

    from memrl.config.validate import validate

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"env.data_root={ALFWORLD}", "memory=mem0",
                                                       "env.retrieval.k2=5"])
    if not ALFWORLD.is_dir():
        pytest.skip(f"ALFWorld data not at {ALFWORLD}")
    v = validate(cfg)
    assert v.memory_cls is Mem0Memory and v.memory.name == "mem0"
    assert v.memory.k == 5 and v.memory.infer is True  # top-k follows the preset's k2


class TinyEnv:
    """Success depends on the model's reply to a prompt holding the injected memories."""

    name = "tiny"

    def tasks(self):
        return [MUG, MUG2, LAMP, Task("d/4", "heat some egg and put it in the fridge.")]

    def solve(self, task, memories, llm, seed):
        reply = llm.complete(task.intent + "\n" + "\n".join(m.experience for m in memories), purpose="act")
        win = reply[0] in "01234567"
        return EpisodeResult(success=win, reward=float(win), steps=1,
                             transcript=[Step(action=reply, observation="won" if win else "lost")])

    def close(self):
        pass


def runner_model(request: LLMRequest) -> str:
    if is_extraction(request):  # one memory per episode, naming what the agent answered
        new = request.messages[-1][1].split("## New Messages", 1)[1].split("## Observation Date")[0]
        tag = hashlib.sha256(new.encode()).hexdigest()[:8]
        return json.dumps({"memory": [{"id": "0", "text": f"On {new_task_of(request)} the agent said {tag}"}]})
    return hashlib.sha256(request.messages[-1][1].encode()).hexdigest()


def run_with_runner(run_dir, cache, crash_at=None):
    """A Runner over TinyEnv with mem0 (B = 2, 2 epochs); `crash_at` = index of the mem0 add
    (counted over the run) that is interrupted right after it completed."""
    from memrl.config.sections import RunnerSettings
    from memrl.control.runner import Runner

    emb = HashingEmbedder(dim=64)
    backend = ScriptedBackend(runner_model, model_id="scripted-mem0")
    client = make_client(backend, cache=cache, max_retries=0)
    mem = Mem0Memory(Mem0Settings(k=2), store_dir=run_dir / "mem0", embedder=emb)
    mem.attach_llm(client)
    mem.setup(TinyEnv().tasks(), seed=3)
    if crash_at is not None:
        real, count = mem._apply_one, {"n": 0}

        def apply_one(entry):
            real(entry)
            count["n"] += 1
            if count["n"] == crash_at:
                raise KeyboardInterrupt  # mid-batch: the batch's other add is not done

        mem._apply_one = apply_one
    runner = Runner(run_dir, env=TinyEnv(), memory=mem, llm=client,
                    settings=RunnerSettings(epochs=2, batch_size=2, progress=False), seed=3,
                    embed_intents=emb.embed)
    try:
        runner.run(TinyEnv().tasks())
    finally:
        snap = snapshot(mem)
        mem.close()
    return snap


def test_runner_resume_after_a_crash_inside_apply_matches_an_uninterrupted_run(tmp_path):
    from memrl.metrics.compute import write_metrics

    cache = ResponseCache(tmp_path / "llm.sqlite")
    ref = run_with_runner(tmp_path / "ref", cache)
    assert len(ref) == 8  # 4 tasks x 2 epochs, one extracted memory each
    with pytest.raises(KeyboardInterrupt):
        run_with_runner(tmp_path / "crash", cache, crash_at=5)  # first add of epoch 2, batch 0
    assert RunDir(tmp_path / "crash").journal.exists()
    resumed = run_with_runner(tmp_path / "crash", cache)
    assert resumed == ref
    assert write_metrics(tmp_path / "crash") == write_metrics(tmp_path / "ref")
    ledger = (tmp_path / "crash" / "mem0" / "applied.jsonl").read_text().splitlines()
    assert len(ledger) == 8


@pytest.mark.slow
@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_mem0_end_to_end_on_alfworld(tmp_path, cassette):
    """mem0 on real ALFWorld games with the embedded model's answers from the test's cassette
    (tests/cassette.py)."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(cassette),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    args = ["env=alfworld", "env.split=valid_seen", "memory=mem0", "llm=local", "embedder=minilm",
            "runner.epochs=2", "env.max_tasks=2", "env.max_steps=3",
            # mem0's extraction prompt is ~8k tokens; a 4k window (the prompt cut from the
            # left) halves the embedded model's time per call on CPU
            "llm.n_ctx=4096", "memory.llm_max_tokens=64",
            "runner.progress=false", f"hydra.run.dir={run_dir}"]
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=env, capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = [json.loads(x) for x in RunDir(run_dir).episodes.read_text().splitlines()]
    assert len(recs) == 4 and {r["epoch"] for r in recs} == {1, 2}
    # every episode of epoch 1 reached mem0 (extracted, or stored raw when the small model's
    # answer was not mem0's JSON), and epoch 2 retrieves from it
    ledger = [json.loads(x) for x in (run_dir / "mem0" / "applied.jsonl").read_text().splitlines()]
    assert len(ledger) == 4 and {r["mode"] for r in ledger} <= {"infer", "infer-empty", "raw-fallback"}
    # B = 1 (online): an episode sees memories of episodes committed before it, and only
    # those; mem0's Chroma score is >= 0.2 for any unit vectors, above the 0.1 threshold, so
    # anything stored earlier is retrieved
    order = {r["key"]: r["order"] for r in ledger}
    for r in recs:
        own = order[f"e{r['epoch']:03d}:{r['task_id']}"]
        stored_before = sum(x["stored"] for x in ledger if x["order"] < own)
        assert len(r["injected"]) == min(3, stored_before)
        for m in r["injected"]:
            assert order[m["id"].split("#")[0]] < own
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["config"]["memory"]["name"] == "mem0" and card["status"] == "finished"
    assert card["memory_setup"]["mem0ai"] == "2.2.1"
    # the mem0 calls went through the project's client: more calls than the agent's own
    agent_calls = sum(r["llm_calls"] for r in recs)
    assert card["llm_totals"]["calls"] + card["llm_totals"]["cache_hits"] >= agent_calls + 4
    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 2 and metrics["epochs"] == 2
