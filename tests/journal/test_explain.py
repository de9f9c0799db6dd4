"""Records that explain themselves: injected memories' texts resolve through memories.jsonl,
`written` names the memory each episode wrote, every model call's key finds its prompt in the
response cache, and bank_updates.jsonl holds each commit's Q before -> after, exactly once even
when the run crashes between applying the bank update and appending its line."""

from __future__ import annotations

import json

import pytest
from coin_runner import finish, make_runner

from memrl.core.records import iter_jsonl, read_episodes, text_hash
from memrl.core.rundir import RunDir
from memrl.journal.banklog import BankHistory
from memrl.journal.memtexts import MemoryTexts, read_texts
from memrl.llm.response_cache import ResponseCache, payload_key


def test_records_name_texts_written_memories_and_prompts(tmp_path):
    cache = ResponseCache(tmp_path / "llm.sqlite")
    snap, _, _ = finish(tmp_path / "a", epochs=2, batch_size=2, cache=cache)
    rd = RunDir(tmp_path / "a")
    recs = read_episodes(rd.episodes)
    texts = read_texts(rd.memories)
    bank = {e["id"]: e for e in snap}
    injected = [m for r in recs for m in r.injected]
    assert injected
    for m in injected:  # every injected text resolves, to the memory's text as injected
        t = texts[m["text"]]
        assert text_hash(t["intent"], t["experience"]) == m["text"]
        assert t["experience"] == bank[m["id"]]["experience"]
    # each episode wrote one memory, named on its record
    assert [r.written for r in recs] == [f"e{r.epoch:03d}:{r.task_id}" for r in recs]
    assert {r.written for r in recs} == set(bank)
    # the model calls: act then write, each key finds the prompt that was sent
    for r in recs:
        assert [c["purpose"] for c in r.model_calls] == ["act", "write-script" if r.success else "write-reflection"]
        for c in r.model_calls:
            seen = cache.lookup(c["key"])
            assert seen["request"] is not None and seen["response"] is not None
            assert payload_key(seen["request"]) == c["key"]  # the stored prompt is the key's
    act = cache.get_request(recs[3].model_calls[0]["key"])
    prompt = act["messages"][-1][1]
    assert prompt.startswith(recs[3].intent) and all(m["id"] in prompt for m in recs[3].injected)


def test_bank_updates_log_q_before_and_after(tmp_path):
    snap, _, _ = finish(tmp_path / "a", epochs=3, batch_size=2)
    rd = RunDir(tmp_path / "a")
    lines = list(iter_jsonl(rd.bank_updates))
    recs = read_episodes(rd.episodes)
    assert [(x["epoch"], x["batch"]) for x in lines] == sorted({(r.epoch, r.batch) for r in recs})
    assert lines[0]["initial"] == [] and "initial" not in lines[1]
    # Q before of each update = Q recorded at retrieval by the batch's episodes
    for line in lines:
        batch = [r for r in recs if (r.epoch, r.batch) == (line["epoch"], line["batch"])]
        seen = {m["id"]: m["q"] for r in batch for m in r.injected}
        assert {u["id"] for u in line["updates"]} == set(seen)
        for u in line["updates"]:
            assert u["q_before"] == pytest.approx(seen[u["id"]])
            assert u["visits_after"] > u["visits_before"]
        assert [a["id"] for a in line["added"]] == [r.written for r in batch]
    hist = BankHistory.read(rd)
    assert hist.covers(iter_jsonl(rd.episodes))
    final = hist.q_at_epoch_end()[3]
    assert final == pytest.approx({e["id"]: e["q"] for e in snap})  # the replay ends at the bank
    # 5 tasks in batches of 2, 2, 1; one memory per episode
    assert [s for _, _, s in hist.sizes()] == [2, 4, 5, 7, 9, 10, 12, 14, 15] and len(snap) == 15


@pytest.mark.parametrize("crash_point", ["after_apply", "after_bank_line", "after_texts"])
def test_crash_in_commit_appends_each_bank_line_once(tmp_path, crash_point):
    """A crash between applying a batch's bank update and appending its bank-update line (or
    after the line, before the checkpoint), then recovery: the log is the uninterrupted run's."""
    finish(tmp_path / "ref")
    ref = list(iter_jsonl(RunDir(tmp_path / "ref").bank_updates))

    run_dir = tmp_path / "crash"
    runner, env, memory, _ = make_runner(run_dir)

    class Boom(BaseException):
        pass

    state = {"commits": 0}
    target = 4
    real_apply = memory.apply
    log = runner.commit_log
    real_line, real_texts = log.write_bank_update, log.write_texts

    def apply(update):
        real_apply(update)
        if crash_point == "after_apply" and state["commits"] == target:
            raise Boom()

    def texts(extras):
        real_texts(extras)
        if crash_point == "after_texts" and state["commits"] == target:
            raise Boom()

    def line(extras):
        real_line(extras)
        if crash_point == "after_bank_line" and state["commits"] == target:
            raise Boom()
        state["commits"] += 1

    memory.apply, log.write_bank_update, log.write_texts = apply, line, texts
    with pytest.raises(Boom):
        runner.run(env.tasks())
    rd = RunDir(run_dir)
    assert rd.journal.exists()
    before = list(iter_jsonl(rd.bank_updates))
    assert len(before) == target + (1 if crash_point == "after_bank_line" else 0)
    finish(run_dir)  # a fresh process on the same directory
    assert list(iter_jsonl(rd.bank_updates)) == ref
    texts_ref, texts_got = read_texts(RunDir(tmp_path / "ref").memories), read_texts(rd.memories)
    assert texts_got == texts_ref
    assert len(rd.memories.read_text().splitlines()) == len(texts_ref)  # no text twice


def test_memory_texts_cut_a_torn_line_and_never_duplicate(tmp_path):
    path = tmp_path / "memories.jsonl"
    store = MemoryTexts(path)
    a = {text_hash("i", "x"): {"intent": "i", "experience": "x"}}
    assert store.add(a) == 1 and store.add(a) == 0
    with open(path, "a") as fh:
        fh.write('{"hash": "torn", "intent": "i", "exp')  # a crash mid-append
    again = MemoryTexts(path)
    b = {text_hash("i", "y"): {"intent": "i", "experience": "y"}}
    assert again.add({**a, **b}) == 1
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["experience"] for r in rows] == ["x", "y"]


def test_old_run_without_bank_log_is_not_covered(tmp_path):
    finish(tmp_path / "a", epochs=2)
    rd = RunDir(tmp_path / "a")
    rd.bank_updates.unlink()
    assert not BankHistory.read(rd).covers(iter_jsonl(rd.episodes))
    # a log that starts after the run's first batch (resumed by newer code) does not either
    finish(tmp_path / "b", epochs=2)
    rdb = RunDir(tmp_path / "b")
    lines = rdb.bank_updates.read_text().splitlines()
    rdb.bank_updates.write_text("\n".join(lines[2:]) + "\n")
    assert not BankHistory.read(rdb).covers(iter_jsonl(rdb.episodes))


def test_cache_prompt_shows_a_records_model_call(tmp_path, capsys):
    from memrl.cli.cache import main as cache_main
    from memrl.core.cachedir import LLM_CACHE

    finish(tmp_path / "a", epochs=1, cache=ResponseCache(tmp_path / "c" / LLM_CACHE))
    rec = read_episodes(RunDir(tmp_path / "a").episodes)[2]
    key = rec.model_calls[0]["key"]
    assert cache_main(["--dir", str(tmp_path / "c"), "prompt", key]) == 0
    out = capsys.readouterr().out
    assert rec.intent in out and "--- answer" in out and rec.transcript[0]["action"] in out
    assert cache_main(["--dir", str(tmp_path / "c"), "prompt", key, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["request"]["model"] == "hash"
    assert cache_main(["--dir", str(tmp_path / "c"), "prompt", "0" * 64]) == 2
    assert "not in" in capsys.readouterr().err
