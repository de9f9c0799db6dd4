"""A run never lies about its state (issue 13): each failure reproduced as a user meets it
(real `python -m memrl.cli run` processes, the fault server, a small tmpfs, a corrupted file,
two processes) and the behaviour after the fix.

The benchmark is tests/tiny_env.py (one model call per episode) so a whole run takes a few
seconds; the model is the scripted one or the fault server driven through litellm."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_env import INTENTS, TinyEnv, reply

from memrl.config.sections import RunnerSettings
from memrl.control.budget import Budget, BudgetMeter
from memrl.control.guards import Gate, error_rate_problem
from memrl.control.runner import Runner
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir
from tiny_runs import KEY, SLOW, card, environ, memrl_run, memrl_start, wait_for
from memrl.core.stops import RunRefused, RunStopped
from memrl.llm.bill import Spend
from clients import make_client

from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl.metrics.compute import write_metrics
from memrl.testing.fault_server import FaultPlan, FaultServer
from memory_state import snapshot
from data_paths import ALFWORLD

def committed(run_dir: Path) -> dict | None:
    path = RunDir(run_dir).checkpoint
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cells(run_dir: Path) -> list[tuple[int, str]]:
    return sorted((r.epoch, r.task_id) for r in read_episodes(RunDir(run_dir).episodes))


def fault_llm(server: FaultServer, *more: str) -> list[str]:
    return ["llm=openai_compatible", "llm.model=openai/fault", f"llm.api_base={server.api_base}",
            f"llm.api_key_env={KEY}", "llm.timeout=5", "llm.max_retries=0", "llm.max_concurrency=2", *more]


@pytest.fixture()
def tmpfs(tmp_path):
    """Mount a small tmpfs: `make(size)` -> its path; unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def make(size: str) -> Path:
        where = tmp_path / f"tmpfs{len(mounted)}"
        where.mkdir()
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        mounted.append(where)
        return where

    yield make
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the file system holding `folder` to the last byte."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (b"\0" * 65536, b"\0"):
            try:
                while fh.write(chunk):
                    pass
            except OSError:
                pass
    return filler


# ---------------------------------------------------------------------------------- 1. lock
@pytest.mark.slow
def test_a_second_launch_is_refused_naming_the_holder_and_a_dead_holder_frees_the_lock(tmp_path):
    """Before: two processes on one run directory both exited 0 with every cell twice.
    Now: the second is refused (exit 2, holder's pid and host), leaves the run's .hydra/
    alone, and adds no session; a SIGKILLed holder's lock is gone for the next launch."""
    run_dir = tmp_path / "run"
    args = [*SLOW, "runner.epochs=2", "runner.batch_size=1", f"hydra.run.dir={run_dir}"]
    first = memrl_start(args, tmp_path, TINY_REPLY_DELAY="0.4")
    try:
        lock = RunDir(run_dir).lock
        wait_for(lambda: lock.is_file() and lock.stat().st_size > 0 and RunDir(run_dir).card.is_file(),
                 what="the first run to take the lock")
        hydra = {p.name: p.read_text() for p in RunDir(run_dir).hydra.iterdir()}
        second = memrl_run(args, tmp_path)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"in use by another run (pid {first.pid} on host {socket.gethostname()}" in second.stderr
        assert "Traceback" not in second.stderr
        assert {p.name: p.read_text() for p in RunDir(run_dir).hydra.iterdir()} == hydra
        assert first.wait(timeout=120) == 0, first.stderr.read()[-2000:]
    finally:
        first.kill()
    assert cells(run_dir) == sorted((e, f"t{i}") for e in (1, 2) for i in range(4))
    assert len(card(run_dir)["sessions"]) == 1
    # the holder dies by SIGKILL mid-run: the lock goes with it
    third = memrl_start([*args, "runner.epochs=3"], tmp_path, TINY_REPLY_DELAY="0.4")
    wait_for(lambda: lock.stat().st_size > 0 and json.loads(lock.read_text() or "{}").get("pid") == third.pid,
             what="the third run to take the lock")
    third.send_signal(signal.SIGKILL)
    third.wait(timeout=30)
    fourth = memrl_run([*args, "runner.epochs=3"], tmp_path)
    assert fourth.returncode == 0, fourth.stderr[-2000:]
    assert len(cells(run_dir)) == 12 == len(set(cells(run_dir)))


# ------------------------------------------------------------------- 2. bad key / model name
@pytest.mark.slow
def test_a_missing_or_bad_key_or_an_unknown_model_stops_before_epoch_1(tmp_path):
    """Before: every episode was recorded as failed, the run 'finished' at SR 0 and a rerun
    treated it as done. Now: the key variable is checked and each model called once before
    epoch 1; the run refuses (exit 2), records nothing, and the same command runs once the
    cause is fixed."""
    with FaultServer(FaultPlan(), api_key="the-right-key") as server:
        run_dir = tmp_path / "run"
        args = [*fault_llm(server), "runner.epochs=1", "runner.batch_size=2", f"hydra.run.dir={run_dir}"]
        unset = memrl_run(args, tmp_path)
        assert unset.returncode == 2
        assert f"environment variable {KEY} (the API key) is not set" in unset.stderr
        assert server.counts()["requests"] == 0  # no call without a key
        wrong = memrl_run(args, tmp_path, **{KEY: "a-wrong-key"})
        assert wrong.returncode == 2 and "AuthenticationError" in wrong.stderr and "preflight" in wrong.stderr
        assert not RunDir(run_dir).episodes.exists() or not read_episodes(RunDir(run_dir).episodes)
        assert card(run_dir)["status"] == "failed" and "AuthenticationError" in card(run_dir)["error"]
        fixed = memrl_run(args, tmp_path, **{KEY: "the-right-key"})
        assert fixed.returncode == 0, fixed.stderr[-2000:]
        assert cells(run_dir) == [(1, f"t{i}") for i in range(4)]
        assert not [r for r in read_episodes(RunDir(run_dir).episodes) if r.errors]
        assert card(run_dir)["status"] == "finished" and "error" not in card(run_dir)


def test_the_card_says_when_the_settings_guard_could_not_apply(tmp_path):
    """Issue 32, item 10. A model litellm cannot place (no provider prefix; the call reaches the
    server through `llm.extra.custom_llm_provider`): before, the guard turned itself off in
    silence; now the card names the model and why, and the stop sequences are cut by the client."""
    with FaultServer(FaultPlan()) as server:
        run_dir = tmp_path / "run"
        args = [*fault_llm(server, "llm.model=served-model", "+llm.extra.custom_llm_provider=openai"),
                "runner.epochs=1", "runner.batch_size=2", f"hydra.run.dir={run_dir}"]
        out = memrl_run(args, tmp_path, **{KEY: "k"})
        assert out.returncode == 0, out.stderr[-2000:]
    c = card(run_dir)
    assert c["status"] == "finished"
    why = c["settings_guard_off"]["llm"]
    assert why.startswith("settings guard off: litellm names no provider for 'served-model'")
    profile = c["sessions"][-1]["profiles"]["llm"]
    assert profile["settings_guard"] == why and profile["stop"] == "provider and client"
    assert "settings guard off" in out.stdout + out.stderr  # said at the start too


def test_the_preflight_calls_each_model_once_and_names_the_one_that_fails(monkeypatch):
    from memrl.control.preflight import PreflightError, preflight
    from memrl.llm.litellm_backend import LiteLLMBackend

    monkeypatch.setenv(KEY, "k")
    with FaultServer(FaultPlan()) as good, FaultServer(FaultPlan(rates={"model_not_found": 1.0})) as bad:
        def client(server):
            return make_client(LiteLLMBackend("openai/fault", api_base=server.api_base, api_key_env=KEY),
                             max_retries=2, backoff_base=0.001, backoff_max=0.01)
        ids = preflight({"llm": client(good)}).identities
        assert ids["llm"]["key"].startswith("openai/fault#") and ids["llm"]["api_base"] == good.api_base
        with pytest.raises(PreflightError, match=r"env.judge \(openai/fault\): the preflight's probe "
                                                 r"call: the call failed \(NotFoundError"):
            preflight({"llm": client(good), "env.judge": client(bad)})
        assert bad.counts()["requests"] == 1  # not retried
    with FaultServer(FaultPlan(rates={"empty_content": 1.0})) as mute:  # reached, answers nothing
        reached = client(mute)  # a run on it would record nothing but failures: refused
        with pytest.raises(PreflightError, match=r"llm \(openai/fault\): the preflight's probe call: "
                                                 r"the call failed .*empty content"):
            preflight({"llm": reached})
        assert reached.totals()["failures"] == 1 and mute.counts()["requests"] == 3
        assert reached.totals()["billed_replies"] == 3  # each empty reply was paid for


@pytest.mark.slow
def test_a_model_error_no_retry_cures_stops_the_run_without_committing_the_batch(tmp_path):
    """During the run: a 400 'context window' on one task of batch 1 aborts before batch 1
    is committed (status failed, the error in the card, exit 1); the same command continues
    once the cause is gone. Empty replies met on the way are retried, never recorded."""
    plan = FaultPlan(sticky=[((INTENTS[2],), "context_window")], rates={"empty_content": 0.3}, cure_after=1)
    with FaultServer(plan) as server:
        run_dir = tmp_path / "run"
        args = [*fault_llm(server, "llm.max_retries=2", "+llm.backoff_base=0.001", "+llm.backoff_max=0.01"),
                "runner.epochs=2", "runner.batch_size=2", f"hydra.run.dir={run_dir}"]
        out = memrl_run(args, tmp_path, **{KEY: "k"})
        assert out.returncode == 1, out.stderr[-2000:]
        assert "ContextWindowExceededError" in out.stderr and "before committing" in out.stderr
        assert cells(run_dir) == [(1, "t0"), (1, "t1")]  # batch 0 only: batch 1 was not committed
        c = card(run_dir)
        assert c["status"] == "failed" and "ContextWindowExceededError" in c["error"]
        assert c["fault_totals"]["ContextWindowExceededError"] >= 1
        server.plan = FaultPlan(rates={"empty_content": 0.3}, cure_after=1)  # the cause is fixed
        out = memrl_run(args, tmp_path, **{KEY: "k"})
        assert out.returncode == 0, out.stderr[-2000:]
        injected = server.counts()
    records = read_episodes(RunDir(run_dir).episodes)
    assert sorted((r.epoch, r.task_id) for r in records) == sorted((e, f"t{i}") for e in (1, 2) for i in range(4))
    assert not [r for r in records if r.errors]
    assert all(s["action"].strip() for r in records for s in r.transcript)  # no empty answer was kept
    c = card(run_dir)
    assert c["status"] == "finished" and c["fault_totals"].get("empty_reply", 0) >= injected["empty_content"] > 0


@pytest.mark.slow
def test_too_many_errored_episodes_stop_the_run_and_the_rate_is_no_resume_key(tmp_path):
    """runner.max_error_rate: a batch with more than half its episodes errored is not
    committed; the same command with a higher rate continues."""
    # t2 and t3 fail (not t0: the preflight asks the writer about the first task, and a model
    # it cannot reach refuses the run before anything is played)
    plan = FaultPlan(sticky=[((INTENTS[2],), "unavailable"), ((INTENTS[3],), "unavailable")])
    with FaultServer(plan) as server:
        run_dir = tmp_path / "run"
        args = [*fault_llm(server), "runner.epochs=1", "runner.batch_size=2", f"hydra.run.dir={run_dir}"]
        out = memrl_run(args, tmp_path, **{KEY: "k"})
        assert out.returncode == 1 and "runner.max_error_rate: 2 of the 2 episodes of batch 1" in out.stderr
        assert [r.task_id for r in read_episodes(RunDir(run_dir).episodes)] == ["t0", "t1"]
        out = memrl_run([*args, "runner.max_error_rate=1.0"], tmp_path, **{KEY: "k"})
        assert out.returncode == 0, out.stderr[-2000:]
    records = read_episodes(RunDir(run_dir).episodes)
    assert len(records) == 4 and {r.task_id for r in records if r.errors} == {"t2", "t3"}


def test_error_rate_rules():
    ok, bad = {"errors": []}, {"errors": ["LLMError: x"]}
    rule = dict(epoch=1, batch=0, epoch_size=10, max_rate=0.5)
    assert error_rate_problem([bad, bad, ok], errored_before=0, **rule).startswith("runner.max_error_rate: 2 of the 3")
    assert error_rate_problem([bad, ok], errored_before=0, **rule) is None  # 1 of 2 is not more than half
    assert error_rate_problem([bad], errored_before=4, **rule) is None  # 5 of 10 in the epoch: not more
    assert "6 of the 10 episodes of epoch 1" in error_rate_problem([bad], errored_before=5, **rule)
    assert error_rate_problem([bad, bad], errored_before=8, **{**rule, "max_rate": 1.0}) is None
    assert "or raise runner.max_error_rate" in error_rate_problem([bad, bad, ok], errored_before=0, **rule)
    # a model that cannot write summaries is told how to write memories without them
    unwritten = {"errors": [], "info": {"writer_error": "write-reflection: empty reply"}}
    why = error_rate_problem([unwritten, unwritten, ok], errored_before=0, **rule)
    assert "memory.write_mode=raw" in why and "memory=memrl_rag" in why and "empty reply" in why


# ---------------------------------------------------------------- 3. cache / record writes
def test_a_response_cache_on_a_full_disk_stops_the_run_and_counts_what_was_paid(tmp_path, tmpfs):
    """Before: with the response cache on a full disk, 10 of 18 episodes were committed as
    errored, rc 0, 'finished', and the paid responses were not counted. Now: the run stops
    before the commit naming the cache and the cause; the responses paid for are in the card;
    with space again the same command continues and nothing errored is recorded."""
    disk = tmpfs("128k")
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "llm.cache=true", f"llm.cache_path={disk / 'llm.sqlite'}", "runner.epochs=2",
            "runner.batch_size=2", f"hydra.run.dir={run_dir}"]
    out = memrl_run(args, tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"cannot write the LLM response cache ({disk / 'llm.sqlite'}): the disk is full" in out.stderr
    assert not [r for r in read_episodes(RunDir(run_dir).episodes) if r.errors]
    c = card(run_dir)
    assert c["status"] == "failed" and "the disk is full" in c["error"]
    # every paid response is counted: the committed episodes' two calls each and the
    # preflight; the write that found the disk full was either a request's prompt (before
    # its call: nothing paid) or an answer (paid and counted; both cases pinned in
    # test_a_cache_write_that_fails_counts_exactly_what_was_paid)
    assert c["llm_totals"]["calls"] >= 2 * len(read_episodes(RunDir(run_dir).episodes)) + 1
    for name in ("llm.sqlite", "llm.sqlite-wal"):
        if (disk / name).exists():
            shutil.copy(disk / name, tmp_path / name)
    subprocess.run(["umount", "-l", str(disk)], check=True)
    out = memrl_run([*args[:2], f"llm.cache_path={tmp_path / 'llm.sqlite'}", *args[3:]], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert cells(run_dir) == sorted((e, f"t{i}") for e in (1, 2) for i in range(4))
    assert not [r for r in read_episodes(RunDir(run_dir).episodes) if r.errors]


def test_a_full_run_directory_reports_the_records_write_not_the_card_write(tmp_path, tmpfs):
    """ENOSPC on the run directory itself: the message names the file that could not be
    written and the cause (not the run card's failed write, nor a logging traceback); with
    space again the same command continues from the last commit."""
    disk = tmpfs("16m")
    run_dir = disk / "run"
    args = [*SLOW, "runner.epochs=1", "runner.batch_size=1", f"hydra.run.dir={run_dir}"]
    proc = memrl_start(args, tmp_path, TINY_REPLY_DELAY="0.4")
    try:
        wait_for(lambda: (committed(run_dir) or {}).get("batch", -1) >= 0, what="the first commit")
        filler = fill(disk)
        assert proc.wait(timeout=60) == 1
        err = proc.stderr.read()
    finally:
        proc.kill()
    head = [line for line in err.splitlines() if line.startswith("memrl: cannot write")]
    assert len(head) == 1 and "the disk is full" in head[0] and "run card" not in head[0], err[-2000:]
    assert str(run_dir) in head[0]  # names the file (the journal or the records)
    assert "Logging error" not in err and "Traceback" not in err
    filler.unlink()
    out = memrl_run(args, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert cells(run_dir) == [(1, f"t{i}") for i in range(4)]


def test_chroma_on_a_full_disk_says_the_disk_is_full(tmpfs):
    """Chroma reports a full disk as 'Error in compaction: ...'; the bank write says which
    folder and that the disk is full."""
    import numpy as np

    from memrl.core.storage import StorageError, writing
    from memrl.memory.bank import ChromaBank
    from memrl.memory.entry import BankUpdate, MemoryEntry

    disk = tmpfs("2m")
    bank = ChromaBank(disk / "bank")
    rng = np.random.default_rng(0)
    with pytest.raises(StorageError) as info:
        for i in range(200):
            entries = [MemoryEntry(memory_id=f"m{i}-{j}", intent="x" * 100, experience="y" * 5000,
                                   embedding=list(rng.random(16)), q=0.0, visits=0, success=True,
                                   epoch=1, task_id="t", order=i * 10 + j) for j in range(10)]
            with writing(disk / "bank", "the memory bank", any_error=True):
                bank.apply(BankUpdate(add=entries))
    assert str(disk / "bank") in str(info.value) and "the disk is full" in str(info.value)


@pytest.mark.parametrize("fails", ["put_request", "put"])
def test_a_cache_write_that_fails_counts_exactly_what_was_paid(tmp_path, fails):
    """The prompt store is written before the model is asked, the answer after: a storage
    failure on the first costs nothing (the model is not called), on the second the paid
    answer is counted; either way the run's tripwire names the cache and later calls fail
    without reaching the model."""
    from memrl.core.stops import STORAGE, Tripwire
    from memrl.core.storage import StorageError
    from memrl.llm.base import LLMError, LLMRequest
    from memrl.llm.response_cache import ResponseCache

    class FullCache(ResponseCache):
        def _full(self, *a, **kw):
            raise StorageError(self.path, "the disk is full", "the LLM response cache")

    cache = FullCache(tmp_path / "llm.sqlite")
    setattr(cache, fails, cache._full)
    backend = ScriptedBackend(lambda r: "ok", model_id="scripted")
    client = make_client(backend, cache=cache, max_retries=0, tripwire=Tripwire())
    request = LLMRequest(messages=(("user", "hello"),), max_tokens=8)
    with pytest.raises(LLMError, match="the disk is full"):
        client.complete(request)
    paid = 1 if fails == "put" else 0
    assert backend.calls == paid and client.totals()["calls"] == paid
    assert client.tripwire.tripped.kind == STORAGE
    with pytest.raises(LLMError, match="not called"):
        client.complete(request)
    assert backend.calls == paid
    cache.close()


# ------------------------------------------------------------------------------ runner level
def make_runner(run_dir: Path, *, epochs: int = 2, batch_size: int = 2, fn=reply, gate: Gate | None = None):
    emb = HashingEmbedder(dim=32)
    memory = MemRLMemory(MemRLSettings(delta=-1.0, k1=4, k2=2), bank_dir=RunDir(run_dir).bank, embedder=emb)
    backend = ScriptedBackend(fn, model_id="scripted")
    llm = make_client(backend, max_concurrency=2, max_retries=0)
    env = TinyEnv(n_tasks=4)
    runner = Runner(run_dir, env=env, memory=memory, llm=llm, gate=gate,
                    settings=RunnerSettings(epochs=epochs, batch_size=batch_size, progress=False),
                    seed=3, embed_intents=emb.embed)
    return runner, env, memory


def play(run_dir: Path, **kw) -> list:
    runner, env, memory = make_runner(run_dir, **kw)
    try:
        runner.run(env.tasks())
        return snapshot(memory)
    finally:
        memory.close()


def test_a_fatal_model_error_raised_in_an_episode_stops_the_runner(tmp_path):
    import litellm

    def fn(request):
        if INTENTS[3] in request.messages[-1][1]:
            raise litellm.AuthenticationError("invalid key", llm_provider="openai", model="m")
        return reply(request)

    with pytest.raises(RunStopped) as info:
        play(tmp_path, fn=fn)
    assert info.value.status == "failed" and "AuthenticationError" in info.value.message
    assert sorted(r.task_id for r in read_episodes(RunDir(tmp_path).episodes)) == ["t0", "t1"]
    assert play(tmp_path) and len(read_episodes(RunDir(tmp_path).episodes)) == 8


# ------------------------------------------------------------------------------ 4. bank
def test_a_bank_with_fewer_entries_than_committed_is_refused_naming_both_counts(tmp_path):
    play(tmp_path, epochs=1)
    runner, env, memory = make_runner(tmp_path, epochs=2)
    memory.bank.col.delete(ids=["e001:t0", "e001:t3"])  # the bank lost two memories
    with pytest.raises(RunRefused, match=r"holds 2 entries, but the committed batches \(through epoch 1, "
                                         r"batch 1\) left 4"):
        runner.run(env.tasks())
    memory.close()
    assert len(read_episodes(RunDir(tmp_path).episodes)) == 4  # nothing was changed


def test_a_missing_bank_is_refused_mid_run_and_when_finished(tmp_path):
    """Before: a deleted bank was recreated empty (finished run and mid-run alike) and the
    run went on from nothing. Now: refused (exit 2) with the bank's count and the checkpoint's."""
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "runner.batch_size=2", f"hydra.run.dir={run_dir}"]
    assert memrl_run([*args, "runner.epochs=1"], tmp_path).returncode == 0
    shutil.rmtree(RunDir(run_dir).bank)
    for epochs in (2, 1):  # epoch 2 still to do; the run as it finished
        out = memrl_run([*args, f"runner.epochs={epochs}"], tmp_path)
        assert out.returncode == 2, out.stderr[-2000:]
        assert ("holds 0 entries, but the committed batches (through epoch 1, batch 1) left 4"
                in out.stderr) and "Traceback" not in out.stderr
    assert len(read_episodes(RunDir(run_dir).episodes)) == 4


# ---------------------------------------------------------------------------- 5. torn line
def test_a_torn_last_line_of_a_committed_batch_is_restored_from_its_journal(tmp_path):
    """Before: the cut line was dropped and every later command failed with 'missing (task,
    epoch) cells'. Now: the last committed batch is restored from its copy of the journal."""
    ref = play(tmp_path / "ref", epochs=2)
    ref_records = [(r.epoch, r.task_id, r.success) for r in read_episodes(RunDir(tmp_path / "ref").episodes)]
    run_dir = tmp_path / "run"
    play(run_dir, epochs=1)
    episodes = RunDir(run_dir).episodes
    text = episodes.read_text()
    episodes.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # cut mid-record
    assert play(run_dir, epochs=2) == ref
    assert [(r.epoch, r.task_id, r.success) for r in read_episodes(episodes)] == ref_records
    assert write_metrics(run_dir)["n_episodes"] == 8
    # a torn last line of a finished run, the same
    text = episodes.read_text()
    episodes.write_text(text[:-40])
    play(run_dir, epochs=2)
    assert len(read_episodes(episodes)) == 8


def test_records_missing_beyond_the_last_batch_are_refused_with_what_to_do(tmp_path):
    play(tmp_path, epochs=1)
    episodes = RunDir(tmp_path).episodes
    lines = episodes.read_text().splitlines(keepends=True)
    episodes.write_text("".join(lines[:1]))  # batch 0 lost a record: no copy of it is kept
    with pytest.raises(RunRefused, match=r"lacks the records of 3 committed episode\(s\) .*t1@epoch1/batch0"):
        play(tmp_path, epochs=2)
    episodes.write_text("".join(lines + lines[-1:]))  # a record twice: two writers
    with pytest.raises(RunRefused, match="recorded twice"):
        play(tmp_path, epochs=2)


# --------------------------------------------------------------- 8. corrupted state files
@pytest.mark.parametrize("name", ["checkpoint", "journal", "last_commit"])
def test_a_corrupted_state_file_names_the_file_and_what_to_do(tmp_path, name):
    play(tmp_path, epochs=1)
    path = getattr(RunDir(tmp_path), name)
    path.write_text('{"epoch": 1, "ba')
    with pytest.raises(RunRefused) as info:
        play(tmp_path, epochs=2)
    assert str(path) in str(info.value) and "is corrupt" in str(info.value)
    assert {"checkpoint": "restore it from a backup", "journal": "delete it to replay that batch",
            "last_commit": "delete it if episodes.jsonl is intact"}[name] in str(info.value)


@pytest.mark.slow
def test_corrupted_files_and_env_errors_are_memrl_messages_not_tracebacks(tmp_path):
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "runner.epochs=1", f"hydra.run.dir={run_dir}"]
    assert memrl_run(args, tmp_path).returncode == 0
    RunDir(run_dir).checkpoint.write_text("{not json")
    out = memrl_run(args, tmp_path)
    assert out.returncode == 2 and "checkpoint" in out.stderr and "is corrupt" in out.stderr
    assert "Traceback" not in out.stderr
    cache = tmp_path / "garbage.sqlite"
    cache.write_bytes(b"this is not an sqlite database" * 100)
    out = memrl_run(["llm=scripted", "llm.cache=true", f"llm.cache_path={cache}",
                     f"hydra.run.dir={tmp_path / 'other'}"], tmp_path)
    assert out.returncode == 1 and f"the LLM response cache ({cache}): the file is corrupt" in out.stderr
    assert "move a corrupt file aside" in out.stderr and "Traceback" not in out.stderr
    out = memrl_run(["llm=scripted", "env.broken=[t0,t1,t2,t3]", f"hydra.run.dir={tmp_path / 'none'}"], tmp_path)
    assert out.returncode == 2 and "memrl: env: the selection holds no task" in out.stderr


# --------------------------------------------------------------------------- 7. skipped data
def test_skipped_task_data_is_listed_in_the_run_card(tmp_path):
    run_dir = tmp_path / "run"
    out = memrl_run(["llm=scripted", "runner.epochs=1", "env.broken=[t1]", f"hydra.run.dir={run_dir}"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert card(run_dir)["data_skipped"] == [{"item": "t1", "reason": "damaged test data"}]


# ------------------------------------------------------------------------------ 9. signals
@pytest.mark.slow
def test_sigterm_and_sigint_stop_cleanly_and_the_run_resumes_to_the_same_end(tmp_path):
    """Before: SIGTERM left the card 'running'. Now: nothing half-done is committed, the card
    says 'interrupted', exit 143 (SIGTERM) / 130 (SIGINT), and the same command continues to
    the same records and bank as a run never interrupted."""
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    common = [*SLOW, "runner.epochs=3", "runner.batch_size=2"]
    assert memrl_run([*common, f"hydra.run.dir={ref_dir}"], tmp_path).returncode == 0
    def position() -> tuple[int, int]:
        ckpt = committed(run_dir) or {}
        return ckpt.get("epoch", 0), ckpt.get("batch", -1)

    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        before = position()
        proc = memrl_start([*common, f"hydra.run.dir={run_dir}"], tmp_path, TINY_REPLY_DELAY="0.3")
        try:
            wait_for(lambda: position() > before, what="a commit")
            proc.send_signal(sig)
            assert proc.wait(timeout=60) == code
            err = proc.stderr.read()
        finally:
            proc.kill()
        assert f"interrupted by {sig.name}" in err and "Traceback" not in err
        c = card(run_dir)
        assert c["status"] == "interrupted" and c["sessions"][-1]["status"] == "interrupted"
        recs = read_episodes(RunDir(run_dir).episodes)
        assert len(recs) % 2 == 0 and len(set((r.epoch, r.task_id) for r in recs)) == len(recs)  # whole batches
        assert not RunDir(run_dir).journal.exists()
    assert memrl_run([*common, f"hydra.run.dir={run_dir}"], tmp_path).returncode == 0

    def strip(path: Path) -> list:
        return [(r.epoch, r.batch, r.task_id, r.success, r.injected) for r in read_episodes(RunDir(path).episodes)]

    assert strip(run_dir) == strip(ref_dir)
    assert card(run_dir)["status"] == "finished"


def test_a_launch_with_another_config_leaves_the_runs_hydra_record_alone(tmp_path):
    run_dir = tmp_path / "run"
    assert memrl_run(["llm=scripted", "runner.epochs=1", f"hydra.run.dir={run_dir}"], tmp_path).returncode == 0
    before = {p.name: p.read_text() for p in RunDir(run_dir).hydra.iterdir()}
    out = memrl_run(["llm=scripted", "runner.epochs=1", "memory.alpha=0.9", f"hydra.run.dir={run_dir}"], tmp_path)
    assert out.returncode == 2 and "different config" in out.stderr
    assert {p.name: p.read_text() for p in RunDir(run_dir).hydra.iterdir()} == before


def test_a_read_only_run_directory_is_reported_as_such(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    run_dir, ro = tmp_path / "run", tmp_path / "ro"
    assert memrl_run(["llm=scripted", "runner.epochs=1", f"hydra.run.dir={run_dir}"], tmp_path).returncode == 0
    ro.mkdir()
    if subprocess.run(["mount", "--bind", str(run_dir), str(ro)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True, capture_output=True)
        out = memrl_run(["llm=scripted", "runner.epochs=1", f"hydra.run.dir={ro}"], tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"the run directory {ro} cannot be written: the file system is read-only" in out.stderr
    assert "Traceback" not in out.stderr and "Logging error" not in out.stderr


# ----------------------------------------------------------------------------- 11. budgets
def test_a_budget_stops_at_a_commit_boundary_and_a_higher_one_continues(tmp_path):
    """llm.budget_tokens: the run stops before a batch would pass it (status budget, exit 3,
    the spend in the card); the same command with a higher budget continues; spend and
    budget show in the progress bar."""
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "runner.epochs=2", "runner.batch_size=2", f"hydra.run.dir={run_dir}"]
    out = memrl_run([*args, "llm.budget_tokens=200"], tmp_path)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "would pass llm.budget_tokens=200" in out.stderr
    c = card(run_dir)
    assert c["status"] == "budget" and c["budget"] == {"usd": None, "tokens": 200}
    assert 0 < c["spend"]["tokens"] <= 200
    assert len(read_episodes(RunDir(run_dir).episodes)) == 2
    out = memrl_run([*args, "llm.budget_tokens=5000", "runner.progress=true"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tokens=" in out.stderr and "/5,000" in out.stderr
    c = card(run_dir)
    assert c["status"] == "finished" and len(read_episodes(RunDir(run_dir).episodes)) == 8
    assert c["spend"]["tokens"] == sum(s["spend"]["tokens"] for s in c["sessions"]) <= 5000


class _Totals:
    def __init__(self):
        self.usd, self.tokens = 0.0, 0

    def totals(self):
        return {"cost_usd": self.usd, "prompt_tokens": self.tokens, "completion_tokens": 0}


def test_budget_meter_estimates_the_next_batch_from_the_dearest_so_far():
    client = _Totals()
    meter = BudgetMeter(Budget(usd=1.0), clients=lambda: [client], prior=Spend(usd=0.25))
    assert meter.problem(4) is None  # nothing to estimate from: the first batch runs
    client.usd += 0.20  # a batch of 4 cost $0.20: $0.05 an episode
    meter.note_batch(4)
    client.usd += 0.0  # a cached batch costs nothing and does not lower the estimate
    meter.note_batch(4)
    assert meter.problem(4) is None  # 0.45 + 0.20 = 0.65
    client.usd += 0.30
    meter.note_batch(4)  # $0.075 an episode now
    assert "would pass llm.budget_usd=1" in meter.problem(4)  # 0.75 + 0.30 > 1
    assert meter.problem(3) is None  # 0.75 + 0.225
    assert meter.postfix() == {"spend": "$0.7500/$1"}
    client.usd += 0.25
    assert meter.problem(1).startswith("budget reached: $1.0000 of $1")


def test_budget_and_error_rate_keys_do_not_block_a_resume():
    from memrl.config import keys as K

    exempt = K.resume_exempt()
    assert {"llm.budget_usd", "llm.budget_tokens", "runner.max_error_rate", "llm.api_base",
            "env.judge.api_base"} <= exempt
    assert "llm.model_fingerprint" not in exempt and "env.judge.budget_usd" not in K.marks()


# --------------------------------------------------------------------- 10. model identity
def test_hosted_model_cache_keys_are_the_same_as_before():
    """Hosted APIs (no api_base) key on the model name, exactly as before: existing caches
    keep hitting. (The digest was computed with the code before this change.)"""
    from memrl.llm.base import LLMRequest
    from memrl.llm.litellm_backend import LiteLLMBackend
    from memrl.llm.response_cache import request_key

    client = make_client(LiteLLMBackend("openai/gpt-4o-mini"))
    request = LLMRequest(messages=(("user", "Here is your task."),), max_tokens=64, stop=("\n",))
    assert client.cache_identity == "openai/gpt-4o-mini"
    assert request_key(client.cache_identity, request) == \
        "5c749349f22b809c054aa0997ac1aa917ed9c2faff947af103f929110cacf8c3"
    fixed = LiteLLMBackend("openai/gpt-4o-mini", model_fingerprint="2024-07-18")
    assert fixed.cache_identity == "openai/gpt-4o-mini#2024-07-18"


def test_the_cache_keys_on_what_a_server_serves_not_where(monkeypatch, tmp_path):
    """Before: the key held the base URL, so a server restarted on another port started
    from a cold cache, while another model served under the same name and URL got the old
    model's answers. Now: the key is the name plus what the server reports at /v1/models."""
    from memrl.llm.base import LLMRequest
    from memrl.llm.litellm_backend import LiteLLMBackend
    from memrl.llm.response_cache import ResponseCache

    monkeypatch.setenv(KEY, "k")
    cache = ResponseCache(tmp_path / "llm.sqlite")
    request = LLMRequest(messages=(("user", "Hello"),))
    gguf_a = [{"id": "fault", "object": "model", "created": 1, "meta": {"size": 1000, "n_params": 7}}]
    gguf_b = [{"id": "fault", "object": "model", "created": 2, "meta": {"size": 2000, "n_params": 13}}]

    def ask(server) -> tuple[str, int]:
        client = make_client(LiteLLMBackend("openai/fault", api_base=server.api_base, api_key_env=KEY),
                           cache=cache, max_retries=0)
        client.complete(request)
        return client.cache_identity, server.counts()["requests"]

    with FaultServer(FaultPlan(), models=gguf_a) as first:
        key_a, calls = ask(first)
        assert calls == 1
    with FaultServer(FaultPlan(), models=[{**gguf_a[0], "created": 99}]) as moved:  # restarted elsewhere
        assert ask(moved) == (key_a, 0)  # the same model: a cache hit
    with FaultServer(FaultPlan(), models=gguf_b) as other:  # another file under the same name
        key_b, calls = ask(other)
    assert key_b != key_a and calls == 1


@pytest.mark.slow
def test_a_resume_follows_the_model_to_another_port_and_refuses_another_model(tmp_path):
    run_dir = tmp_path / "run"
    common = ["runner.batch_size=2", f"hydra.run.dir={run_dir}"]
    with FaultServer(FaultPlan()) as first:
        assert memrl_run([*fault_llm(first), "runner.epochs=1", *common], tmp_path, **{KEY: "k"}).returncode == 0
    with FaultServer(FaultPlan()) as moved:  # the same model on another port
        out = memrl_run([*fault_llm(moved), "runner.epochs=2", *common], tmp_path, **{KEY: "k"})
        assert out.returncode == 0, out.stderr[-2000:]
    ident = card(run_dir)["model_identity"]["llm"]
    assert ident["api_bases"] == sorted([first.api_base, moved.api_base]) and ident["source"] == "server /models"
    with FaultServer(FaultPlan(), models=[{"id": "fault", "root": "/models/another-7b"}]) as other:
        out = memrl_run([*fault_llm(other), "runner.epochs=3", *common], tmp_path, **{KEY: "k"})
    assert out.returncode == 2 and "was run with another model" in out.stderr
    assert len(read_episodes(RunDir(run_dir).episodes)) == 8


# ------------------------------------------------------------------- 8. env-level messages


@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_env_level_errors_are_memrl_messages_with_exit_2(tmp_path):
    """Before: unknown task ids were a ValueError traceback (exit 1) and an unset
    ALFWORLD_DATA printed a path starting with '???'."""
    alfworld = ["env=alfworld", "agent=expert", "memory=none", "embedder=hashing", "runner.epochs=1",
                "runner.progress=false", f"env.cache_dir={tmp_path / 'cache'}"]
    env = {k: v for k, v in environ(tmp_path).items() if k != "ALFWORLD_DATA"}
    run = [sys.executable, "-m", "memrl.cli", "run", *alfworld]
    out = subprocess.run([*run, "env.task_ids=[no-such-game]", f"hydra.run.dir={tmp_path / 'a'}"],
                         env={**env, "ALFWORLD_DATA": str(ALFWORLD)}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "memrl: unknown task ids for split 'valid_train'" in out.stderr
    assert "Traceback" not in out.stderr
    out = subprocess.run([*run, f"hydra.run.dir={tmp_path / 'b'}"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "env.data_root: not set: set ALFWORLD_DATA" in out.stderr
    assert "???" not in out.stderr
