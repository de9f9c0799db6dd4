"""The ALFWorld adapter on real games: task listing, the expert oracle (reproducible, real
wins), the ReAct loop driven by scripted fake models, and clear errors for bad setups."""

from __future__ import annotations

import json
import threading
import zlib
from pathlib import Path

import pytest

from alfworld_helpers import ALFWORLD, FakeLLM, alfworld_module, make_env, needs_data

from memrl.core.records import RetrievedMemory, Task
from memrl.llm.base import LLMError

VALID_SEEN = ALFWORLD / "json_2.1.1" / "valid_seen"

# One game per task type (valid_seen), used by the expert and ReAct tests.
GAMES = [
    "look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
    "pick_and_place_simple-Book-None-SideTable-329/trial_T20190908_050633_745514",
    "pick_clean_then_place_in_recep-ButterKnife-None-CounterTop-8/trial_T20190909_105559_983897",
    "pick_cool_then_place_in_recep-Apple-None-CounterTop-14/trial_T20190909_044933_815840",
    "pick_heat_then_place_in_recep-Apple-None-DiningTable-26/trial_T20190907_060234_011675",
    "pick_two_obj_and_place-Newspaper-None-Drawer-224/trial_T20190911_101248_326533",
]


@pytest.fixture(scope="session")
def cache_dir(request) -> Path:
    """Intents survive between test sessions (listing 140 games cold takes minutes)."""
    return Path(request.config.cache.mkdir("memrl-alfworld"))


def game_task(task_id: str) -> Task:
    return Task(task_id=task_id, intent="")


def existing_games() -> list[str]:
    games = [g for g in GAMES if (VALID_SEEN / g / "game.tw-pddl").is_file()]
    assert len(games) == len(GAMES), "expected valid_seen games are missing from the data folder"
    return games


def seed_for(task_id: str, run_seed: int = 0) -> int:
    return zlib.crc32(f"{run_seed}:{task_id}".encode())


# -- errors -----------------------------------------------------------------------------


def test_unknown_split_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"split\n.*'valid_seen'.*input_value='valid_sen'"):
        make_env(tmp_path, split="valid_sen", data_root=tmp_path, agent="expert")


def test_missing_data_folder_names_path_and_fix(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError) as info:
        make_env(tmp_path, data_root=missing, agent="expert")
    assert str(missing) in str(info.value) and "make data-alfworld" in str(info.value)


def test_empty_split_is_a_clear_error(tmp_path):
    (tmp_path / "json_2.1.1" / "valid_unseen").mkdir(parents=True)
    env = make_env(tmp_path, split="valid_unseen", data_root=tmp_path, agent="expert")
    with pytest.raises(ValueError) as info:
        env.tasks()
    assert "valid_unseen" in str(info.value) and "make data-alfworld" in str(info.value)


@needs_data
def test_unknown_agent_and_unknown_task_ids(tmp_path):
    with pytest.raises(ValueError, match=r"env 'alfworld' has no agent 'oracle' \(its agents: expert, react\)"):
        make_env(tmp_path, agent="oracle")
    env = make_env(tmp_path, agent="expert", task_ids=["no-such-task/trial_x"])
    with pytest.raises(ValueError, match="no-such-task"):
        env.tasks()


@needs_data
def test_react_without_prompts_file_or_llm(tmp_path):
    with pytest.raises(ValueError, match="prompts_file: .*missing.json does not exist"):
        make_env(tmp_path, agent="react", prompts_file=tmp_path / "missing.json")
    no_default = tmp_path / "data"  # a data folder without the ReAct prompts file
    (no_default / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    with pytest.raises(ValueError, match="ReAct prompts file not found"):
        make_env(tmp_path, agent="react", data_root=no_default)
    assert make_env(tmp_path, agent="react", data_root=no_default, num_demos=0)._demos == {}
    env = make_env(tmp_path, agent="react")
    with pytest.raises(ValueError, match="needs an LLM"):
        env.solve(game_task(existing_games()[0]), [], None, seed=0)


# -- tasks ------------------------------------------------------------------------------


@needs_data
def test_small_listing_is_sorted_and_cached(tmp_path, monkeypatch):
    env = make_env(tmp_path, agent="expert", max_tasks=3)
    tasks = env.tasks()
    all_ids = sorted(p.parent.relative_to(VALID_SEEN).as_posix() for p in VALID_SEEN.glob("*/*/game.tw-pddl"))
    assert [t.task_id for t in tasks] == all_ids[:3]
    assert all(t.intent and t.intent.endswith(".") and "Your task" not in t.intent for t in tasks)
    cache_files = list(tmp_path.glob("alfworld_*.json"))
    assert len(cache_files) == 1 and len(json.loads(cache_files[0].read_text())) >= 3

    # A second env with the same cache lists the same tasks without resetting any game.
    import memrl_envs.alfworld.env as adapter

    def no_reset(*a, **k):
        raise AssertionError("a game was reset although its intent is cached")

    monkeypatch.setattr(adapter.AlfworldGame, "reset", no_reset)
    again = make_env(tmp_path, agent="expert", max_tasks=3, intent_with_observation=True)
    tasks2 = again.tasks()
    assert [t.task_id for t in tasks2] == [t.task_id for t in tasks]
    for plain, full in zip(tasks, tasks2):
        assert full.intent.startswith("You are in the middle of a room")
        assert full.intent.endswith("Your task is to: " + plain.intent)


@needs_data
@pytest.mark.slow
def test_valid_seen_has_140_playable_games():
    """The real split's size, from the folders (reading every intent cold takes minutes: the
    listing itself is checked on a copy of a few games below)."""
    games = sorted(p.parent.relative_to(VALID_SEEN).as_posix() for p in VALID_SEEN.glob("*/*/game.tw-pddl"))
    assert len(games) == 140 and len(set(games)) == 140


def test_a_listing_is_sorted_stable_and_cached(tmp_path):
    import shutil

    root = tmp_path / "alfworld"
    for game in reversed(GAMES):  # copied in reverse: the listing sorts
        shutil.copytree(VALID_SEEN / game, root / "json_2.1.1" / "valid_seen" / game)
    cache = tmp_path / "cache"
    env = make_env(cache, agent="expert", data_root=root)
    tasks = env.tasks()
    ids = [t.task_id for t in tasks]
    assert ids == sorted(GAMES) and len(set(ids)) == len(GAMES)
    assert all(t.intent.strip() and "\n" not in t.intent for t in tasks)
    assert ids == [t.task_id for t in env.tasks()]  # identical every epoch
    fresh = make_env(cache, agent="expert", data_root=root)
    assert [(t.task_id, t.intent) for t in fresh.tasks()] == [(t.task_id, t.intent) for t in tasks]
    subset = make_env(cache, agent="expert", data_root=root, task_ids=[ids[5], ids[2]], max_tasks=1)
    assert [t.task_id for t in subset.tasks()] == [ids[2]]


# -- expert -----------------------------------------------------------------------------


def replay_wins(task_id: str, actions: list[str]) -> bool:
    """Replay actions in a fresh game (no expert attached) and report the env's won flag."""
    from memrl_envs.alfworld.game import AlfworldGame

    with AlfworldGame(str(VALID_SEEN / task_id / "game.tw-pddl"), max_env_steps=len(actions) + 1) as game:
        game.reset()
        won = False
        for a in actions:
            _, won, done, _ = game.step(a)
            if done:
                break
    return won


@needs_data
@pytest.mark.slow
def test_expert_is_reproducible_and_its_wins_are_real(tmp_path):
    env = make_env(tmp_path, agent="expert", max_steps=50)
    games = existing_games()
    first = {g: env.solve(game_task(g), [], None, seed=seed_for(g)) for g in games}
    second = {g: env.solve(game_task(g), [], None, seed=seed_for(g)) for g in games}
    for g in games:
        assert first[g].errors == [] and second[g].errors == []
        assert [(s.action, s.observation) for s in first[g].transcript] == [
            (s.action, s.observation) for s in second[g].transcript
        ], g
        assert first[g].success == second[g].success
    wins = [g for g in games if first[g].success]
    assert wins, "the handcoded expert won none of the test games"
    for g in games:
        r = first[g]
        assert r.steps == len(r.transcript) and r.info["task_type"]
        assert r.info["memories_injected"] == 0
        if r.success:
            assert (r.outcome, r.outcome_detail) == ("success", "won")
            assert r.reward == 1.0 and not r.info["truncated"] and r.steps < 50
            # Independent check: the same actions win a fresh copy of the game.
            assert replay_wins(g, [s.action for s in r.transcript])
        else:
            assert (r.outcome, r.outcome_detail) == ("failure", "step_limit")
            assert r.reward == 0.0 and r.info["truncated"] and r.steps == 50
            assert not replay_wins(g, [s.action for s in r.transcript])

    # Concurrent episodes (threads) give the same results as sequential ones.
    threaded: dict[str, object] = {}

    def run(g):
        threaded[g] = env.solve(game_task(g), [], None, seed=seed_for(g))

    threads = [threading.Thread(target=run, args=(g,)) for g in games]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g in games:
        assert [s.action for s in threaded[g].transcript] == [s.action for s in first[g].transcript], g


# -- ReAct with fake models ---------------------------------------------------------------


@pytest.fixture(scope="module")
def expert_win(tmp_path_factory):
    """(task id, expert actions) of an expert win on a short game."""
    env = make_env(tmp_path_factory.mktemp("c"), agent="expert", max_steps=50)
    for g in existing_games():
        for seed in range(3):
            r = env.solve(game_task(g), [], None, seed=seed)
            if r.success and r.steps <= 20:
                return g, [s.action for s in r.transcript]
    pytest.fail("no short expert win found for the ReAct replay test")


@needs_data
def test_react_replaying_expert_plan_succeeds(tmp_path, expert_win):
    task_id, actions = expert_win
    script = ["think: I will follow the plan."] + actions

    # Replies look like a base model's continuation: leading space, extra lines after.
    llm = FakeLLM(lambda p, i: f" {script[i]}\nYou arrive somewhere.\n> look")
    env = make_env(tmp_path, agent="react", max_steps=len(script) + 5)
    r = env.solve(game_task(task_id), [], llm, seed=0)
    assert r.success and r.reward == 1.0 and r.errors == [] and r.outcome == "success"
    assert [s.action for s in r.transcript] == script
    assert all(k["max_tokens"] == 64 and k["stop"] == ("\n",) for k in llm.kwargs)  # the settings' 64
    assert r.transcript[0].observation == "OK."
    assert r.info["env_steps"] == len(actions) and not r.info["truncated"]
    first = llm.prompts[0]
    assert first.endswith("\n>") and "Your task is to: " in first
    assert "Here is your task." in first and first.count("Your task is to: ") == 2  # demo + task
    assert all(k["purpose"] == "act" for k in llm.kwargs)
    # Each later prompt carries the whole history so far.
    assert f"> {script[1]}\n" in llm.prompts[2] and llm.prompts[2].startswith(first[:-1])


@needs_data
def test_concurrent_react_episodes_do_not_interfere(tmp_path, expert_win):
    """Threads interleave their env steps (the fake model sleeps); each game stays intact."""
    import time

    task_id, actions = expert_win
    env = make_env(tmp_path, agent="react", max_steps=len(actions) + 2)

    def replayer(p, i):
        time.sleep(0.01)
        return actions[i]

    sequential = env.solve(game_task(task_id), [], FakeLLM(replayer), seed=0)
    results: dict[int, object] = {}

    def run(k):
        results[k] = env.solve(game_task(task_id), [], FakeLLM(replayer), seed=0)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sequential.success
    for k in range(3):
        assert results[k].errors == [] and results[k].success
        assert [(s.action, s.observation) for s in results[k].transcript] == [
            (s.action, s.observation) for s in sequential.transcript
        ]


@needs_data
def test_react_garbage_fails_at_max_steps_and_is_recorded(tmp_path, expert_win):
    task_id, _ = expert_win
    replies = ["\n\n>  blorp the zorp\nmore text", "", "think: hmm", "???"]
    llm = FakeLLM(lambda p, i: replies[i % len(replies)])
    env = make_env(tmp_path, agent="react", max_steps=6)
    r = env.solve(game_task(task_id), [], llm, seed=0)
    assert not r.success and r.reward == 0.0 and r.steps == 6 and len(llm.prompts) == 6
    assert r.info["truncated"] and r.errors == [] and r.outcome == "failure"
    assert [s.action for s in r.transcript] == ["blorp the zorp", "", "think: hmm", "???", "blorp the zorp", ""]
    assert [s.observation for s in r.transcript] == ["Nothing happens.", "Nothing happens.", "OK."] + [
        "Nothing happens."
    ] * 3
    assert r.info["env_steps"] == 5


@needs_data
def test_memories_appear_in_the_prompt(tmp_path, expert_win):
    task_id, _ = expert_win
    memories = [
        RetrievedMemory("m1", "put a mug in the sink.", "EXPERIENCE-ALPHA: check the countertop first.", 0.2, 0.8, 0.5),
        RetrievedMemory("m2", "cool an apple.", "EXPERIENCE-BETA: the fridge cools things.", -0.1, 0.7, 0.1),
    ]
    llm = FakeLLM(lambda p, i: "look")
    env = make_env(tmp_path, agent="react", max_steps=2)
    r = env.solve(game_task(task_id), memories, llm, seed=0)
    assert r.info["memories_injected"] == 2
    prompt = llm.prompts[0]
    opening, closing = "=== Past experiences", "=== End of past experiences ==="
    start, end = prompt.index(opening), prompt.index(closing)
    block = prompt[start:end]
    assert "EXPERIENCE-ALPHA" in block and "EXPERIENCE-BETA" in block and "put a mug in the sink." in block
    assert block.index("ALPHA") < block.index("BETA")
    assert end < prompt.index("Here is your task.")  # memories come before the current task
    bare = FakeLLM(lambda p, i: "look")
    env.solve(game_task(task_id), [], bare, seed=0)
    assert opening not in bare.prompts[0] and "EXPERIENCE" not in bare.prompts[0]


@needs_data
def test_llm_error_ends_episode_as_failed(tmp_path, expert_win):
    task_id, actions = expert_win

    def reply(prompt, i):
        if i == 1:
            raise LLMError("model unavailable after 6 retries")
        return actions[i]

    env = make_env(tmp_path, agent="react", max_steps=10)
    r = env.solve(game_task(task_id), [], FakeLLM(reply), seed=0)
    assert not r.success and r.steps == 1 and not r.info["truncated"]
    assert len(r.errors) == 1 and "LLMError" in r.errors[0] and "model unavailable" in r.errors[0]
    assert r.outcome == r.outcome_detail == "llm_error"


# -- prompt helpers (no game needed) ------------------------------------------------------


def test_prompt_helpers():
    from memrl_envs.alfworld import prompts

    assert prompts.parse_action("  \n> go to cabinet 1\nOn the cabinet...") == "go to cabinet 1"
    assert prompts.parse_action(">\n  take mug 1 from sinkbasin 1") == "take mug 1 from sinkbasin 1"
    assert prompts.parse_action("\n\n") == ""
    assert prompts.is_think("Think: first find a mug") and not prompts.is_think("go to think 1")
    demos = {f"react_put_{i}": f"demo {i}\n" for i in range(3)} | {"act_put_0": "x"}
    assert prompts.select_demonstrations(demos, "put", 2, 2) == ["demo 2", "demo 0"]
    with pytest.raises(ValueError, match="react_clean"):
        prompts.select_demonstrations(demos, "clean", 0, 1)
    text = prompts.build_prompt(["demo 0"], [], "room\nYour task is to: x.", [])
    assert text.endswith("Your task is to: x.\n>") and "demo 0" in text


def test_act_demonstrations_and_instruction_have_no_thinking():
    from memrl_envs.alfworld import prompts

    demos = json.loads((ALFWORLD / prompts.PROMPTS_FILENAME).read_text()) if ALFWORLD.is_dir() else \
        {f"{s}_put_{i}": f"{s} demo {i}\n> go to x\n> think: y" for s in ("react", "act") for i in range(3)}
    act = prompts.select_demonstrations(demos, "put", 0, 1, style="act")
    react = prompts.select_demonstrations(demos, "put", 0, 1, style="react")
    assert act != react
    if ALFWORLD.is_dir():  # ReAct's own file: the act variant has no think: line, ReAct has some
        assert "> think:" not in act[0] and "> think:" in react[0]
    assert "think:" not in prompts.INSTRUCTION_ACT and "think:" in prompts.INSTRUCTION
    with pytest.raises(ValueError, match="style"):
        prompts.select_demonstrations(demos, "put", 0, 1, style="cot")


def test_auto_style_is_act_for_embedded_models_only():
    from memrl_envs.alfworld.prompts import resolve_style

    class Embedded:
        embedded = True

    assert resolve_style("auto", Embedded()) == "act"
    assert resolve_style("auto", FakeLLM(lambda p, i: "")) == "react"  # an API model's handle
    assert resolve_style("react", Embedded()) == "react" and resolve_style("act", None) == "act"
    with pytest.raises(ValueError, match="demo_style"):
        resolve_style("thinky", None)


def test_a_same_game_memory_reads_as_a_continuation_of_the_episode():
    """A trajectory memory is shown in the episode's own format: its task line, then the
    '> action' / observation lines, so the current history is a prefix of it."""
    from memrl.core.records import EpisodeResult, Step
    from memrl.memory.writer import format_trajectory
    from memrl_baselines.rag import trajectory_memory
    from memrl_envs.alfworld import prompts

    steps = [Step("go to desk 1", "On the desk 1, you see a cd 1."),
             Step("take cd 1 from desk 1", "You pick up the cd 1.")]
    result = EpisodeResult(success=True, reward=1.0, steps=2, transcript=steps)
    stored = [trajectory_memory("examine the cd with the desklamp.", result, None),
              "Task: examine the cd with the desklamp.\nOutcome: solved\nPlan:\n1. find the cd\n"
              "Successful trajectory:\n" + format_trajectory(result, 10_000)]
    for text in stored:
        mem = RetrievedMemory("m", "examine the cd with the desklamp.", text, 0.0, 1.0, 1.0, success=True)
        prompt = prompts.build_prompt(["demo"], [mem], "You are in a room.\nYour task is to: examine the cd "
                                      "with the desklamp.", steps[:1], instruction=prompts.INSTRUCTION_ACT)
        block = prompt[prompt.index("=== Past experiences"):prompt.index("Here is your task.")]
        assert "--- Experience 1 (solved) ---" in block and "Outcome:" not in block and "Task:" not in block
        history = "Your task is to: examine the cd with the desklamp.\n> go to desk 1\nOn the desk 1, you see a cd 1."
        assert history + "\n> take cd 1 from desk 1\nYou pick up the cd 1." in block
        assert prompt.endswith(history + "\n>")  # the episode so far is a prefix of the memory
    # filed under another task's key ("x.", a joined near-duplicate): shown under its own task
    with_plan = prompts.build_prompt([], [RetrievedMemory("m", "x.", stored[1], 0.0, 1.0, 1.0, True)], "t", [])
    assert "Plan:\n1. find the cd\nYour task is to: examine the cd with the desklamp.\n> go to desk 1" in with_plan
    assert "x." not in with_plan.split("=== Past experiences")[1].split("Here is your task.")[0]


def test_memory_text_without_trajectory_is_shown_as_stored():
    from memrl.core.memory_parts import split_trajectory  # the reader of old text
    from memrl.env.memory_block import format_memories_as_episodes

    assert split_trajectory("Task: a\nOutcome: failed\nReflection: look first.") == \
        ("Task: a\nOutcome: failed\nReflection: look first.", "")
    assert split_trajectory("Task: a\nOutcome: failed\nReflection: r\nFailed attempt:\n> look\nNothing.") == \
        ("Reflection: r", "> look\nNothing.")
    block = format_memories_as_episodes([RetrievedMemory("m", "cool an apple.", "NOTE: the fridge.", 0.0, 0.5, 0.5)],
                                        lambda i: f"Your task is to: {i}")
    assert "(outcome not recorded)" in block and "Your task is to: cool an apple.\nNOTE: the fridge." in block


# -- damaged data (issue 13.7) ------------------------------------------------------------


@needs_data
def test_a_game_folder_without_its_game_file_is_reported_and_keeps_its_place(tmp_path, cache_dir):
    """Before: a trial folder without game.tw-pddl was dropped silently, the next game took
    its place in max_tasks, and naming it in task_ids said "unknown task ids". Now: it keeps
    its place (max_tasks=2 plays the second game only), the env reports it with the reason,
    and naming it says its game file is missing."""
    import shutil

    root = tmp_path / "alfworld"
    for game in GAMES[:3]:
        shutil.copytree(VALID_SEEN / game, root / "json_2.1.1" / "valid_seen" / game)
    damaged = root / "json_2.1.1" / "valid_seen" / GAMES[0]
    (damaged / "game.tw-pddl").unlink()
    env = make_env(cache_dir, agent="expert", data_root=root, max_tasks=2)
    assert [t.task_id for t in env.tasks()] == [GAMES[1]]
    assert env.data_skipped() == [{"item": GAMES[0], "reason": f"no game.tw-pddl in {damaged} (a damaged download?)"}]
    with pytest.raises(ValueError, match=r"task ids whose game cannot be played: .*game.tw-pddl") as info:
        make_env(cache_dir, agent="expert", data_root=root, task_ids=[GAMES[0]]).tasks()
    assert "unknown task ids" not in str(info.value)


def test_an_unset_alfworld_data_says_how_to_set_it(monkeypatch):
    mod = alfworld_module()
    with pytest.raises(ValueError) as info:
        mod.AlfworldSettings()
    assert "ALFWORLD_DATA" in str(info.value) and "???" not in str(info.value)
