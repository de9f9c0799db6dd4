"""HLE's official-code switches (configs/official/hle.yaml): the official question order
(`env.order`), the official judge and its verdict rule (`env.judge.verdict_rule`), the official
memory display (`env.memory_format`) and the trajectory handed to the memory writer
(`EpisodeResult.memory_trajectory`). Every expectation is built by hand here; the defaults
(memrl's behaviour) are checked to be unchanged alongside."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from memrl.core.records import RetrievedMemory
from memrl.llm.base import ImagePart, LLMRequest, TextPart, content_text
from clients import make_client

from memrl.llm.scripted import ScriptedBackend
from memrl_envs.hle import HLEEnv
from memrl_envs.hle.data import HLEQuestion, Selection, official_order, select
from memrl_envs.hle.judge import (EXAMPLES, OFFICIAL_INSTRUCTIONS, Judge, JudgeError, build_prompt,
                                  parse_official_verdict, parse_verdict)
from memrl_envs.hle.prompts import CHOICE_SYSTEM, EXACT_SYSTEM, MEMORY_OPEN, build_messages
from memrl_envs.hle.settings import HLESettings, JudgeSettings

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "hle" / "hle_fixture.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
TEXT_IDS = [r["id"] for r in ROWS if not r["image"]]
IMAGE_IDS = [r["id"] for r in ROWS if r["image"]]
BY_ID = {r["id"]: r for r in ROWS}

SUCCESS_HEADING = "=== Memories of questions solved before ==="
FAILURE_HEADING = "=== Memories of failed attempts (do not repeat them) ==="


def q(qid: str, category: str, answer_type: str = "exactMatch", image: str = "") -> HLEQuestion:
    return HLEQuestion(id=qid, question=f"question {qid}?", answer="1", answer_type=answer_type,
                       category=category, image=image)


# -- the official order ----------------------------------------------------------------------

# three categories, interleaved: Math first seen at row 0, Physics at 1, Chemistry at 3
CATS = ["Math", "Physics", "Math", "Chemistry", "Physics", "Math", "Math", "Physics",
        "Chemistry", "Math", "Physics"]
QUESTIONS = [q(f"q{i:02d}", c) for i, c in enumerate(CATS)]


def expected_official(questions: list[HLEQuestion], seed: int = 42) -> list[str]:
    """By hand: group in first-appearance order, permute each group by a fresh RandomState."""
    order: list[str] = []
    for cat in ("Math", "Physics", "Chemistry"):
        group = [x.id for x in questions if x.category == cat]
        order += [group[i] for i in np.random.RandomState(seed).permutation(len(group))]
    return order


def test_official_order_shuffles_each_category_with_a_fresh_random_state_42() -> None:
    want = expected_official(QUESTIONS)
    # Math q00 q02 q05 q06 q09, permutation [1 4 2 0 3]; Physics q01 q04 q07 q10, [1 3 0 2];
    # Chemistry q03 q08, [1 0]
    assert want == ["q02", "q09", "q05", "q00", "q06", "q04", "q10", "q01", "q07", "q08", "q03"]
    assert [x.id for x in official_order(QUESTIONS)] == want
    assert [x.id for x in select(QUESTIONS, Selection(order="official"))] == want
    # the default keeps the source's order; another seed gives another order
    assert [x.id for x in select(QUESTIONS, Selection())] == [x.id for x in QUESTIONS] != want
    assert [x.id for x in official_order(QUESTIONS, seed=7)] == expected_official(QUESTIONS, 7) != want


def test_official_order_equals_pandas_group_sample() -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"id": [x.id for x in QUESTIONS], "category": CATS})
    parts = [g.sample(frac=1.0, random_state=42) for _, g in df.groupby("category", sort=False)]
    assert list(pd.concat(parts)["id"]) == [x.id for x in official_order(QUESTIONS)]


def test_official_order_comes_before_max_tasks_and_after_the_filters() -> None:
    want = expected_official(QUESTIONS)
    assert [x.id for x in select(QUESTIONS, Selection(order="official", max_tasks=4))] == want[:4]
    only = [x for x in QUESTIONS if x.category != "Math"]
    got = select(QUESTIONS, Selection(order="official", categories=["physics", "chemistry"]))
    assert [x.id for x in got] == [i for i in want if i in {x.id for x in only}]
    with pytest.raises(ValueError, match="order"):
        select(QUESTIONS, Selection(order="random"))


def test_the_env_lists_its_tasks_in_the_official_order() -> None:
    env = HLEEnv(HLESettings(data_path=str(FIXTURE), order="official"), agent="gold",
                 judge=make_client(ScriptedBackend(lambda r: "x")))
    cats: dict[str, list[str]] = {}
    for r in ROWS:
        cats.setdefault(r["category"], []).append(r["id"])
    want = [g[i] for g in cats.values() for i in np.random.RandomState(42).permutation(len(g))]
    assert [t.task_id for t in env.tasks()] == want != [r["id"] for r in ROWS]
    plain = HLEEnv(HLESettings(data_path=str(FIXTURE)), agent="gold", judge=make_client(ScriptedBackend(lambda r: "x")))
    assert [t.task_id for t in plain.tasks()] == [r["id"] for r in ROWS]


# -- the verdict rules ------------------------------------------------------------------------

LINES_YES = "extracted_final_answer: 24\nreasoning: It is the reference.\ncorrect: yes\nconfidence: 80"


@pytest.mark.parametrize("reply, correct, extracted, confidence, unread", [
    (LINES_YES, True, "24", 80, False),
    ("extracted_final_answer: 7\nreasoning: differs\ncorrect: no\nconfidence: 30", False, "7", 30, False),
    ("Correct: YES", True, None, 0, False),                      # case-insensitive, lowercased
    ("**correct:** yes", False, None, 0, True),                  # bolded name: not read, so incorrect
    ("correct: **yes**", False, None, 0, True),
    ("correct: yes\ncorrect: no", True, None, 0, False),         # the first field counts
    ("the answer is incorrect: no", False, None, 0, False),      # no word boundary, as the official
    ('{"extracted_final_answer": "24", "correct": "yes", "confidence": 85}', True, "24", 85, False),
    ('Verdict: {"correct": "Yes, it matches", "confidence": "85%"} done', True, None, 0, False),
    ('{"correct": true}', True, None, 0, False),
    ('{"correct": "no"} although correct: yes', False, None, 0, False),  # the JSON wins
    ('{"correct": false, "extracted_answer": "3"}', False, "3", 0, False),
    ('{"extracted_final_answer": "24"}', False, "24", 0, True),  # JSON without "correct"
    ("{not json} correct: yes", True, None, 0, False),           # broken JSON: the fields
    ("I think the response is right.", False, None, 0, True),
    ("", False, None, 0, True),
])
def test_official_rule_reads_replies_as_the_official_runner(reply, correct, extracted, confidence, unread) -> None:
    v = parse_verdict(reply, "official")
    assert (v.correct, v.extracted_final_answer, v.confidence, v.unread is not None) == \
        (correct, extracted, confidence, unread)
    assert parse_official_verdict(reply) == v and v.raw == reply


@pytest.mark.parametrize("reply, correct", [
    (LINES_YES, True),
    ('{"extracted_final_answer": "24", "correct": true}', True),
    ('{"correct": "no"}', False),
])
def test_memrl_rule_reads_json_and_bare_fields(reply, correct) -> None:
    assert parse_verdict(reply).correct is correct


@pytest.mark.parametrize("reply", ["**correct:** yes", "I think the response is right.", "",
                                   '{"correct": "Yes, it matches"}'])
def test_memrl_rule_raises_on_what_it_cannot_read(reply) -> None:
    with pytest.raises(JudgeError):
        parse_verdict(reply)


def test_official_prompt_asks_for_the_fields_the_official_parser_reads() -> None:
    prompt = build_prompt("What is 2+2?", "Exact Answer: 4", "4", rule="official")
    fields = [line.split(":", 1)[0] for line in OFFICIAL_INSTRUCTIONS.splitlines()[-4:]]
    assert fields == ["extracted_final_answer", "reasoning", "correct", "confidence"]
    assert "correct: <yes if" in prompt and "JSON object" not in prompt
    assert prompt.endswith("Question:\nWhat is 2+2?\n\nResponse:\nExact Answer: 4\n\nReference answer:\n4\n\nVerdict:")
    # its worked verdicts read back, under the official rule, as the verdicts they show
    shown = build_prompt("x", "y", "z", examples=2, rule="official").split("Verdict:\n")[1:]
    for block, (_, _, _, want) in zip(shown, EXAMPLES):
        v = parse_official_verdict(block.split("\n\n")[0])
        assert (v.correct, v.extracted_final_answer, v.unread) == \
            (want["correct"], want["extracted_final_answer"], None)
    with pytest.raises(ValueError, match="verdict_rule"):
        build_prompt("x", "y", "z", rule="strict")


# -- the verdict rules in an episode ---------------------------------------------------------

def make_env(judge_fn, judge: dict | None = None, **fields) -> tuple[HLEEnv, ScriptedBackend]:
    """The env with a scripted judge model, judged by the rule its settings name."""
    settings = HLESettings(data_path=str(FIXTURE), judge={"model": "openai/judge", **(judge or {})}, **fields)
    judge_backend = ScriptedBackend(judge_fn, model_id="judge")
    client = make_client(judge_backend, max_retries=0, backoff_base=0.001, backoff_max=0.002)
    env = HLEEnv(settings, agent="react", judge=Judge(client, verdict_rule=settings.judge.verdict_rule,
                                                       json_mode=settings.judge.json_mode))
    return env, judge_backend


def test_the_env_builds_its_judge_with_the_configured_rule() -> None:
    def judge_of(**section):
        return HLEEnv(HLESettings(data_path=str(FIXTURE), judge=section), agent="react").judge

    built = judge_of(backend="scripted", verdict_rule="official", json_mode=False)
    assert built.verdict_rule == "official" and built.official and not built.json_mode
    assert judge_of(backend="scripted").verdict_rule == "memrl"
    with pytest.raises(ValueError, match="verdict_rule"):
        JudgeSettings(backend="scripted", verdict_rule="lenient")


def play(env: HLEEnv, task_id: str, reply_fn, memories=(), supports_images=False):
    backend = ScriptedBackend(reply_fn, supports_images=supports_images)
    task = next(t for t in env.tasks() if t.task_id == task_id)
    llm = make_client(backend, max_retries=0).episode(f"s0/e1/{task_id}", seed=5)
    return env.solve(task, list(memories), llm, seed=5), backend


def answer(request: LLMRequest) -> str:
    return "  Explanation: it is.\nExact Answer: 24\nConfidence: 80%\n\n"


def down(request: LLMRequest) -> str:
    raise TimeoutError("judge timed out")


@pytest.mark.parametrize("judge_fn, detail, unread", [
    (lambda r: LINES_YES, "correct", None),
    (lambda r: "**correct:** yes", "incorrect", "no `correct: yes|no`"),
    (lambda r: "garbage", "incorrect", "no `correct: yes|no`"),
    (down, "incorrect", "judge call failed"),
])
def test_official_rule_grades_a_missing_verdict_incorrect_not_judge_error(judge_fn, detail, unread) -> None:
    env, judge_backend = make_env(judge_fn, judge={"verdict_rule": "official", "json_mode": False})
    res, _ = play(env, TEXT_IDS[0], answer)
    assert res.outcome_detail == detail and not res.errors  # a plain failure, learned from
    assert res.outcome == ("success" if detail == "correct" else "failure")
    if unread is None:
        assert "unread" not in res.info["judge"] and res.info["judge"]["confidence"] == 80
    else:
        assert unread in res.info["judge"]["unread"]
    (req,) = judge_backend.requests
    assert req.response_format is None and [role for role, _ in req.messages] == ["user"]
    assert content_text(req.messages[0][1]).startswith(OFFICIAL_INSTRUCTIONS)


@pytest.mark.parametrize("judge_fn, why", [(lambda r: "**correct:** yes", "unreadable verdict"),
                                           (down, "judge call failed")])
def test_memrl_rule_keeps_judge_errors(judge_fn, why) -> None:
    env, judge_backend = make_env(judge_fn)
    res, _ = play(env, TEXT_IDS[0], answer)
    assert res.outcome == res.outcome_detail == "judge_error" and why in res.errors[0]
    assert judge_backend.requests[0].response_format == "json"


# -- the official memory display -------------------------------------------------------------

LONG = "x" * 6000  # longer than memory_max_chars: the official display shows it whole
BANK = [
    RetrievedMemory("m1", "another task's key", "TASK REFLECTION:\nTask: q one\n\nWhat went wrong:\n"
                    "forgot a case\n\nFailed approach:\nQUESTION\nq one\n\nSOLUTION\nA\n", 0.2, 0.9, 0.5, False),
    RetrievedMemory("m2", "key two", "Task: q two\n\nSCRIPT:\n1. count\n\nTRAJECTORY:\nQUESTION\nq two"
                    "\n\nSOLUTION\n" + LONG + "\n", 0.9, 0.8, 0.8, True),
    RetrievedMemory("m3", "key three", "an old note without a layout", 0.1, 0.7, 0.4, None),
    RetrievedMemory("m4", "key four", "Task: q four\n\nSCRIPT:\n1. guess\n\nTRAJECTORY:\nQUESTION\nq four"
                    "\n\nSOLUTION\nB\n", 0.5, 0.6, 0.6, True),
]


def expected_memory_message() -> str:
    return (SUCCESS_HEADING + "\n" + BANK[1].experience + "\n\n" + BANK[3].experience + "\n\n"
            + FAILURE_HEADING + "\n" + BANK[0].experience + "\n\n" + BANK[2].experience)


def test_official_display_is_its_own_system_message_successes_first_uncut() -> None:
    x = q("t1", "Math")
    msgs = build_messages(x, BANK, memory_format="official")
    assert msgs == [("system", EXACT_SYSTEM), ("system", expected_memory_message()),
                    ("user", "Question:\nquestion t1?")]
    assert LONG in msgs[1][1] and "another task's key" not in msgs[1][1]  # own content, not the key
    # one group only: only its heading
    wins = build_messages(x, [BANK[3], BANK[1]], memory_format="official")[1][1]
    assert wins == SUCCESS_HEADING + "\n" + BANK[3].experience + "\n\n" + BANK[1].experience
    fails = build_messages(x, [BANK[2]], memory_format="official")[1][1]
    assert fails == FAILURE_HEADING + "\n" + BANK[2].experience
    # no memories: no memory message
    assert build_messages(x, [], memory_format="official") == [("system", EXACT_SYSTEM),
                                                                 ("user", "Question:\nquestion t1?")]
    # multiple choice, and an image question (the image stays in the user message)
    choice = q("t2", "Math", "multipleChoice", image="data:image/png;base64,AAAA")
    msgs = build_messages(choice, [BANK[0]], memory_format="official")
    assert msgs[:2] == [("system", CHOICE_SYSTEM), ("system", FAILURE_HEADING + "\n" + BANK[0].experience)]
    assert msgs[2] == ("user", (TextPart("Question:\nquestion t2?\n\n(The image the question refers to is attached.)"),
                                ImagePart("data:image/png;base64,AAAA")))


def test_memrl_display_is_unchanged() -> None:
    x = q("t1", "Math")
    (s, system), (u, user) = build_messages(x, BANK)
    assert (s, u, system) == ("system", "user", EXACT_SYSTEM)
    assert user.startswith(MEMORY_OPEN) and user.endswith("End of notes.\n\nQuestion:\nquestion t1?")
    assert LONG not in user and "[...]" in user  # clipped to memory_max_chars
    with pytest.raises(ValueError, match="memory_format"):
        build_messages(x, BANK, memory_format="inline")


def test_the_solver_receives_the_official_message_list() -> None:
    env, _ = make_env(lambda r: LINES_YES, memory_format="official")
    res, backend = play(env, TEXT_IDS[0], answer, memories=BANK)
    (req,) = backend.requests
    system = EXACT_SYSTEM if BY_ID[TEXT_IDS[0]]["answer_type"] == "exactMatch" else CHOICE_SYSTEM
    assert list(req.messages) == [("system", system), ("system", expected_memory_message()),
                                  ("user", f"Question:\n{BY_ID[TEXT_IDS[0]]['question'].strip()}")]
    assert res.info["memories_injected"] == 4


# -- the trajectory for the memory writer ----------------------------------------------------

def trajectory(qid: str, solution: str) -> str:
    return f"QUESTION\n{BY_ID[qid]['question'].strip()}\n\nSOLUTION\n{solution}\n"


def test_every_result_carries_the_official_memory_trajectory() -> None:
    qid = TEXT_IDS[0]
    solution = "Explanation: it is.\nExact Answer: 24\nConfidence: 80%"  # the reply, stripped
    for judge_fn in (lambda r: LINES_YES, lambda r: "correct: no", lambda r: "garbage"):
        env, _ = make_env(judge_fn)
        res, _ = play(env, qid, answer)
        assert res.memory_trajectory == trajectory(qid, solution), res.outcome_detail
    env, _ = make_env(lambda r: LINES_YES)
    empty, _ = play(env, qid, lambda r: "   ")
    assert empty.outcome_detail == "incorrect" and empty.memory_trajectory == trajectory(qid, "")

    def broken(request):
        raise ValueError("bad request")

    failed, _ = play(env, qid, broken)
    assert failed.outcome_detail == "solver_error" and failed.memory_trajectory == trajectory(qid, "")
    unsupported, _ = play(env, IMAGE_IDS[0], answer)
    assert unsupported.outcome_detail == "unsupported_input"
    assert unsupported.memory_trajectory == trajectory(IMAGE_IDS[0], "")


# -- the presets -----------------------------------------------------------------------------

def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def test_official_preset_sets_the_official_judge_order_and_display() -> None:
    from memrl.config.validate import validate

    official = validate(compose_cfg("experiment=hle_official", f"env.data_path={FIXTURE}")).env
    assert (official.order, official.order_seed, official.memory_format) == ("official", 42, "official")
    j = official.judge
    assert (j.model, j.temperature, j.max_tokens, j.json_mode, j.verdict_rule) == \
        ("openai/gpt-4o-2024-08-06", 0.0, 4096, False, "official")
    paper_cfg = compose_cfg("experiment=hle_paper", f"env.data_path={FIXTURE}")
    paper = validate(paper_cfg).env
    assert (paper.order, paper.memory_format, paper.judge.model, paper.judge.verdict_rule) == \
        ("dataset", "memrl", "openai/o3-mini", "memrl")
    # the solver's temperature is the official 0.6 in both (configs/llm/gemini-3-pro.yaml)
    assert paper_cfg.llm.temperature == 0.6
    assert compose_cfg("experiment=hle_official", f"env.data_path={FIXTURE}").llm.temperature == 0.6
