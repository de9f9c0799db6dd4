"""runner.schedule=async (issue 16): a free pool of episodes, each retrieving against the bank
as it is when it starts and committed when it finishes. Honest (every retrieval logged before
its episode starts, with the bank version; staleness recorded), recoverable (SIGKILL, then the
same command: committed episodes stay, in-flight ones replay with their logged memories) and
replayable (runner.replay_from reproduces a finished run exactly from its log and cache).

The env is tests/tiny_env.py (one model call per episode, the prompt lists the injected
memory ids); the scripted model sleeps a prompt-dependent time, so episodes finish out of
launch order and retrievals go stale."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import time
from pathlib import Path

import pytest
from tiny_runs import card, memrl_run, memrl_start, wait_for
from tiny_env import INTENTS, TinyEnv, reply

from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.records import iter_jsonl, read_episodes
from memrl.core.rundir import RunDir
from memrl.core.stops import RunStopped
from memrl.journal.launches import Launch, LaunchLog
from clients import make_client

from memrl.llm.embed import HashingEmbedder
from memrl.llm.response_cache import ResponseCache
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl.metrics.compute import write_metrics
from memory_state import snapshot


def jittery(seed: int | None = None):
    """`reply` after a pause: prompt-dependent, or random when `seed` is given (a run whose
    timing, and so whose retrievals, no one can predict)."""
    rng = random.Random(seed)

    def fn(request):
        if seed is None:
            pause = int(hashlib.sha256(request.messages[-1][1].encode()).hexdigest()[:2], 16) / 255 * 0.04
        else:
            pause = rng.random() * 0.04
        time.sleep(pause)
        return reply(request)

    return fn


def make_runner(run_dir: Path, *, epochs: int = 2, n_tasks: int = 6, width: int = 3, fn=None,
                cache: ResponseCache | None = None, replay_from: Path | None = None,
                epoch_overlap: bool = True):
    emb = HashingEmbedder(dim=32)
    memory = MemRLMemory(MemRLSettings(delta=-1.0, k1=4, k2=2), bank_dir=RunDir(run_dir).bank, embedder=emb)
    backend = ScriptedBackend(fn or jittery(), model_id="scripted")
    llm = make_client(backend, cache=cache, max_concurrency=width, max_retries=0)
    env = TinyEnv(n_tasks=n_tasks)
    settings = RunnerSettings(epochs=epochs, progress=False, schedule="async", max_in_flight=width,
                              replay_from=str(replay_from) if replay_from else None,
                              epoch_overlap=epoch_overlap)
    runner = Runner(run_dir, env=env, memory=memory, llm=llm, settings=settings, seed=5,
                    embed_intents=emb.embed)
    return runner, env, memory, backend


def play(run_dir: Path, **kw):
    runner, env, memory, backend = make_runner(run_dir, **kw)
    try:
        runner.run(env.tasks())
        return snapshot(memory), backend
    finally:
        memory.close()


def outcome(run_dir: Path) -> list[tuple]:
    """What a run computed, in commit order (not how long it took or what the cache served)."""
    return [(r.epoch, r.batch, r.task_id, r.success, [m["id"] for m in r.injected],
             [m["q"] for m in r.injected], r.bank_version, r.staleness, r.transcript)
            for r in read_episodes(RunDir(run_dir).episodes)]


def test_async_logs_each_retrieval_before_its_episode_and_records_its_staleness(tmp_path):
    snap, _ = play(tmp_path)
    rd = RunDir(tmp_path)
    recs = read_episodes(rd.episodes)
    launches = LaunchLog(rd.launches).read()
    assert len(recs) == 12 and sorted((r.epoch, r.task_id) for r in recs) == \
        sorted((e, f"t{i}") for e in (1, 2) for i in range(6))
    assert sorted((ln.epoch, ln.task_id) for ln in launches) == sorted((r.epoch, r.task_id) for r in recs)
    assert [r.batch for r in recs] == list(range(6)) * 2  # commit positions, in completion order
    by_cell = {(ln.epoch, ln.task_id): ln for ln in launches}
    writer_at = {}  # memory id -> the global commit index of the episode that wrote it
    for k, r in enumerate(recs):
        launch = by_cell[(r.epoch, r.task_id)]
        assert r.bank_version == launch.bank_version
        assert r.staleness == k - launch.bank_version >= 0  # commits between retrieval and its own
        assert [m["id"] for m in r.injected] == [m["memory_id"] for m in launch.memories]
        # it retrieved only what the bank held at its version: memories committed before it
        assert all(writer_at[m["id"]] < launch.bank_version for m in r.injected)
        writer_at[f"e{r.epoch:03d}:{r.task_id}"] = k
    assert max(r.staleness for r in recs) >= 1 and len(snap) == 12
    # launch order = task order in a fresh run's first epoch; the launch numbers count each
    # epoch's launches in log order
    mine = sorted((ln for ln in launches if ln.epoch == 1), key=lambda ln: ln.launch)
    assert [ln.task_id for ln in mine] == [f"t{i}" for i in range(6)]
    for e in (1, 2):
        assert [ln.launch for ln in launches if ln.epoch == e] == list(range(6))
    metrics = write_metrics(tmp_path)
    st = metrics["staleness"]
    values = sorted(r.staleness for r in recs)
    assert st["max"] == values[-1] and st["mean"] == pytest.approx(sum(values) / 12)
    assert sum(st["counts"].values()) == 12


def straggler(slow: str = INTENTS[0], pause: float = 0.3):
    """`reply`, after a long pause for one task's prompts and a short one for the others'."""
    def fn(request):
        time.sleep(pause if slow in request.messages[-1][1] else 0.01)
        return reply(request)
    return fn


def schedule_facts(run_dir: Path, n_tasks: int, width: int) -> list[Launch]:
    """Checks every async run obeys, from its log and records; returns its launches."""
    rd = RunDir(run_dir)
    recs = read_episodes(rd.episodes)
    launches = LaunchLog(rd.launches).read()
    assert [r.epoch for r in recs] == sorted(r.epoch for r in recs)  # commits never interleave epochs
    commit_at = {(r.epoch, r.task_id): k for k, r in enumerate(recs)}
    for k, ln in enumerate(launches):
        if ln.epoch == 1:  # at most `width` in flight: the launches before it less the commits it
            assert k - ln.bank_version < width  # saw (in epoch 1 whatever finished is committed)
        else:  # a task's next episode starts once its previous one is committed
            assert commit_at[(ln.epoch - 1, ln.task_id)] < ln.bank_version
    return launches


def test_the_next_epoch_starts_in_this_ones_drain_and_commits_after_it(tmp_path):
    """One slow task (a straggler) per epoch: the other tasks' next episodes start while it
    runs, its own next episode only once it is committed; with epoch_overlap=false every
    epoch waits for the last of the one before."""
    n, width = 6, 3
    play(tmp_path / "overlap", fn=straggler(), epochs=3, n_tasks=n, width=width)
    launches = schedule_facts(tmp_path / "overlap", n, width)
    early = [ln for ln in launches if ln.epoch > 1 and ln.bank_version < (ln.epoch - 1) * n]
    assert early, "no episode started in an epoch's drain"
    recs = read_episodes(RunDir(tmp_path / "overlap").episodes)
    assert sorted((r.epoch, r.task_id) for r in recs) == sorted((e, f"t{i}") for e in (1, 2, 3) for i in range(n))
    for ln in early:  # it retrieved before the epoch it follows was complete: that is its staleness
        r = next(r for r in recs if (r.epoch, r.task_id) == (ln.epoch, ln.task_id))
        assert r.bank_version == ln.bank_version and r.staleness >= (ln.epoch - 1) * n - ln.bank_version
    play(tmp_path / "barrier", fn=straggler(), epochs=3, n_tasks=n, width=width, epoch_overlap=False)
    launches = schedule_facts(tmp_path / "barrier", n, width)
    assert all(ln.bank_version >= (ln.epoch - 1) * n for ln in launches)
    assert all(k - ln.bank_version < width for k, ln in enumerate(launches))  # nothing waits to commit


def test_a_replay_of_a_finished_async_run_reproduces_it_exactly(tmp_path):
    cache = tmp_path / "llm.sqlite"
    snap, first = play(tmp_path / "a", fn=jittery(seed=1), cache=ResponseCache(cache), epochs=3)
    assert first.calls > 0
    source = schedule_facts(tmp_path / "a", 6, 3)
    assert any(ln.bank_version < (ln.epoch - 1) * 6 for ln in source)  # epochs overlapped there
    # the replay: its own directory, the source's launch log and commit order, the same cache
    replayed, backend = play(tmp_path / "b", fn=jittery(seed=2), cache=ResponseCache(cache), epochs=3,
                             replay_from=tmp_path / "a")
    assert backend.calls == 0  # every call served by the cache
    assert replayed == snap
    assert outcome(tmp_path / "b") == outcome(tmp_path / "a")
    assert write_metrics(tmp_path / "b") == write_metrics(tmp_path / "a")
    a, b = LaunchLog(RunDir(tmp_path / "a").launches).read(), LaunchLog(RunDir(tmp_path / "b").launches).read()
    assert sorted(map(str, a)) == sorted(map(str, b))
    # a fresh async run with other timing is another run (what the replay is for)
    other, _ = play(tmp_path / "c", fn=jittery(seed=3), epochs=3)
    assert outcome(tmp_path / "c") != outcome(tmp_path / "a")
    # a replay whose bank is not the source's diverges, and says so
    with pytest.raises(RunStopped, match="replay diverged"):
        runner, env, memory, _ = make_runner(tmp_path / "d", fn=jittery(), cache=ResponseCache(cache),
                                             epochs=3, replay_from=tmp_path / "a")
        memory.s = memory.s.model_copy(update={"k2": 1})
        memory._phase_b = type(memory._phase_b)(**{**memory._phase_b.__dict__, "k2": 1})
        runner.run(env.tasks())


def test_replay_from_must_name_an_async_run():
    with pytest.raises(ValueError, match="schedule=async"):
        RunnerSettings(replay_from="/tmp")
    with pytest.raises(ValueError, match="no launch log"):
        RunnerSettings(schedule="async", replay_from="/tmp")


def test_a_fatal_model_error_stops_an_async_run_and_its_episodes_replay_on_resume(tmp_path):
    import litellm

    def fn(request):
        if INTENTS[3] in request.messages[-1][1]:
            raise litellm.AuthenticationError("invalid key", llm_provider="openai", model="m")
        return jittery()(request)

    with pytest.raises(RunStopped) as info:
        play(tmp_path, fn=fn, n_tasks=4, width=2)
    assert info.value.status == "failed" and "AuthenticationError" in info.value.message
    rd = RunDir(tmp_path)
    done = [r.task_id for r in read_episodes(rd.episodes)]
    assert "t3" not in done and len(done) < 4  # nothing failed was committed
    logged = {ln.task_id: ln for ln in LaunchLog(rd.launches).read()}
    assert "t3" in logged  # launched (its retrieval logged), never committed
    snap, _ = play(tmp_path, n_tasks=4, width=2)
    recs = read_episodes(rd.episodes)
    assert sorted((r.epoch, r.task_id) for r in recs) == sorted((e, f"t{i}") for e in (1, 2) for i in range(4))
    assert [r.task_id for r in recs][:len(done)] == done  # what was committed stays
    t3 = next(r for r in recs if r.epoch == 1 and r.task_id == "t3")
    assert t3.bank_version == logged["t3"].bank_version  # replayed with its logged retrieval
    assert [m["id"] for m in t3.injected] == [m["memory_id"] for m in logged["t3"].memories]
    assert len(LaunchLog(rd.launches).read()) == 8  # one launch per episode, none twice


def test_a_stop_in_an_epochs_drain_resumes_with_the_next_epochs_launches_replayed(tmp_path):
    """The straggler of epoch 1 fails for good (a revoked key) while epoch 2's episodes of the
    other tasks have started: nothing of epoch 2 is committed before epoch 1's end, and the
    same command then plays every launched episode once, with its logged retrieval."""
    import litellm

    launches = RunDir(tmp_path).launches

    def epoch_2_started() -> bool:
        return launches.is_file() and any(ln.epoch == 2 for ln in LaunchLog(launches).read())

    def failing(request):
        if INTENTS[0] in request.messages[-1][1]:
            # the straggler fails once an episode of epoch 2 has launched in epoch 1's drain: an
            # order, not a race against the machine's speed (the wait is bounded only as a guard)
            deadline = time.monotonic() + 120
            while not epoch_2_started() and time.monotonic() < deadline:
                time.sleep(0.01)
            raise litellm.AuthenticationError("invalid key", llm_provider="openai", model="m")
        time.sleep(0.01)
        return reply(request)

    with pytest.raises(RunStopped) as info:
        play(tmp_path, fn=failing, epochs=2, n_tasks=6, width=3)
    assert info.value.status == "failed"
    rd = RunDir(tmp_path)
    before = read_episodes(rd.episodes)
    assert {r.epoch for r in before} == {1} and "t0" not in {r.task_id for r in before}
    logged = {(ln.epoch, ln.task_id): ln for ln in LaunchLog(rd.launches).read()}
    assert any(e == 2 for e, _ in logged), "no episode of epoch 2 started in epoch 1's drain"
    play(tmp_path, fn=straggler(), epochs=2, n_tasks=6, width=3)
    recs = read_episodes(rd.episodes)
    assert recs[:len(before)] == before  # what was committed stays
    assert sorted((r.epoch, r.task_id) for r in recs) == sorted((e, f"t{i}") for e in (1, 2) for i in range(6))
    for r in recs:
        if (r.epoch, r.task_id) in logged:  # launched before the stop: replayed as logged
            ln = logged[(r.epoch, r.task_id)]
            assert r.bank_version == ln.bank_version
            assert [m["id"] for m in r.injected] == [m["memory_id"] for m in ln.memories]
    assert len(LaunchLog(rd.launches).read()) == 12  # one launch per episode, none twice
    schedule_facts(tmp_path, 6, 3)


ASYNC = ["runner.schedule=async", "runner.max_in_flight=2"]


def test_a_budget_stops_an_async_run_after_committing_what_is_in_flight(tmp_path):
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "runner.epochs=2", *ASYNC, f"hydra.run.dir={run_dir}"]
    out = memrl_run([*args, "llm.budget_tokens=300"], tmp_path)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "would pass llm.budget_tokens=300" in out.stderr
    c = card(run_dir)
    assert c["status"] == "budget"
    rd = RunDir(run_dir)
    recs = read_episodes(rd.episodes)
    assert 0 < len(recs) < 8
    # nothing started was dropped: every launched episode was committed before the stop
    assert len(LaunchLog(rd.launches).read()) == len(recs)
    out = memrl_run([*args, "llm.budget_tokens=50000"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert card(run_dir)["status"] == "finished" and len(read_episodes(rd.episodes)) == 8
    # the report shows the run's schedule and staleness distribution
    from memrl.report.write import write_report

    files = write_report([run_dir], tmp_path / "report", n_boot=50, warn=lambda m: None)
    table = files["staleness.md"].read_text()
    stale = write_metrics(run_dir)["staleness"]
    assert "| tiny | memrl | async | 2 |" in table and f"| {stale['max']} |" in table


@pytest.mark.slow
def test_sigkill_mid_async_run_then_the_same_command_continues_it(tmp_path):
    """SIGKILL with episodes in flight: the same command keeps the committed episodes as they
    were, replays the in-flight ones with their logged memories and plays the rest."""
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "llm.script=tiny_env:slow_reply", "runner.epochs=2", *ASYNC,
            f"hydra.run.dir={run_dir}"]
    rd = RunDir(run_dir)
    proc = memrl_start(args, tmp_path, TINY_REPLY_DELAY="0.4")
    try:
        def in_flight() -> bool:
            lines = rd.episodes.read_text().splitlines() if rd.episodes.exists() else []
            return len(lines) >= 2 and len(LaunchLog(rd.launches).read()) > len(lines)
        wait_for(in_flight, timeout=120, what="commits with episodes in flight")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = [json.loads(line) for line in rd.episodes.read_text().splitlines() if line.strip()]
    before = [r for r in before if (r["epoch"], r["batch"]) <= tuple(json.loads(rd.checkpoint.read_text())[k]
                                                                   for k in ("epoch", "batch"))]
    launched = {(ln.epoch, ln.task_id): ln for ln in LaunchLog(rd.launches).read()}
    pending = set(launched) - {(r["epoch"], r["task_id"]) for r in before}
    assert pending  # the kill left episodes in flight
    out = memrl_run(args, tmp_path, TINY_REPLY_DELAY="0")
    assert out.returncode == 0, out.stderr[-3000:]
    after = list(iter_jsonl(rd.episodes))
    assert after[:len(before)] == before  # committed episodes stay as they were
    assert sorted((r["epoch"], r["task_id"]) for r in after) == \
        sorted((e, f"t{i}") for e in (1, 2) for i in range(4))
    for r in after:
        if (r["epoch"], r["task_id"]) in pending:  # replayed with the logged retrieval
            logged = launched[(r["epoch"], r["task_id"])]
            assert r["bank_version"] == logged.bank_version
            assert [m["id"] for m in r["injected"]] == [m["memory_id"] for m in logged.memories]
    assert len(LaunchLog(rd.launches).read()) == 8
    assert card(run_dir)["status"] == "finished"
    assert write_metrics(run_dir)["staleness"]["max"] >= 0
