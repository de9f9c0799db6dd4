"""HLE on the project's own fixture (tests/fixtures/hle): loading and row checks, the
deterministic filters, solver prompts, grading by a scripted judge, judge errors, image
handling, and a two-epoch MemRL run through the runner. No network, no real model."""

from __future__ import annotations

import base64
import json
import sys
import types
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.records import RetrievedMemory, read_episodes
from memrl.core.rundir import RunDir
from memrl.llm.base import ImagePart, LLMRequest, TextPart, content_text, has_images
from clients import make_client

from memrl.llm.client import LLMClient
from memrl.llm.embed import HashingEmbedder
from memrl.llm.response_cache import ResponseCache
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl.metrics.compute import compute_metrics
from memrl_envs.hle import HLEEnv
from memrl_envs.hle.data import HLEQuestion, Selection, load, normalise_image, rank, select
from memrl_envs.hle.judge import JudgeError, build_prompt, parse_verdict
from memrl_envs.hle.prompts import (CHOICE_SYSTEM, EXACT_SYSTEM, MEMORY_OPEN, build_messages, parse_answer,
                                    parse_confidence)
from memrl_envs.hle.settings import HLESettings

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "hle" / "hle_fixture.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
BY_ID = {r["id"]: r for r in ROWS}
IMAGE_IDS = [r["id"] for r in ROWS if r["image"]]
TEXT_IDS = [r["id"] for r in ROWS if not r["image"]]


# -- scripted models -----------------------------------------------------------------------


def task_of(request: LLMRequest) -> str:
    """The task id inside a sample id 's0/e1/<task>/<purpose>/<n>' (or '.../judge/judge/0')."""
    return request.sample_id.split("/")[2]


def solver(answers: dict[str, str]):
    """A solver that answers each task with the given final answer ('unknown' otherwise)."""
    def fn(request: LLMRequest) -> str:
        ans = answers.get(task_of(request), "unknown")
        return f"Explanation: worked it out.\nExact Answer: {ans}\nConfidence: 80%"
    return fn


def split_case(request: LLMRequest) -> tuple[str, str]:
    """(response, reference) from a judge prompt."""
    case = content_text(request.messages[-1][1]).rsplit("Question:\n", 1)[1]
    response = case.split("\n\nResponse:\n", 1)[1].split("\n\nReference answer:\n", 1)[0]
    reference = case.split("\n\nReference answer:\n", 1)[1].rsplit("\n\nVerdict:", 1)[0]
    return response, reference


def fair_judge(request: LLMRequest) -> str:
    response, reference = split_case(request)
    got = parse_answer(response)
    return json.dumps({"extracted_final_answer": got, "reasoning": "compared to the reference",
                       "correct": (got or "").strip().lower() == reference.strip().lower()})


def fast_client(backend, cache=None, retries=2) -> LLMClient:
    return make_client(backend, cache=cache, max_retries=retries, backoff_base=0.001, backoff_max=0.002)


def make_env(judge_fn=fair_judge, cache=None, agent="react", **fields) -> tuple[HLEEnv, ScriptedBackend]:
    judge_backend = ScriptedBackend(judge_fn, model_id="judge")
    env = HLEEnv(HLESettings(data_path=str(FIXTURE), **fields), agent=agent,
                 judge=fast_client(judge_backend, cache))
    return env, judge_backend


def play(env: HLEEnv, task_id: str, llm_backend: ScriptedBackend | None, memories=(), epoch=1):
    task = next(t for t in env.tasks() if t.task_id == task_id)
    llm = fast_client(llm_backend).episode(f"s0/e{epoch}/{task_id}", seed=5) if llm_backend else None
    return env.solve(task, list(memories), llm, seed=5), llm


# -- loading -------------------------------------------------------------------------------


def test_fixture_loads_in_hle_schema() -> None:
    res = load(str(FIXTURE))
    assert [q.id for q in res.questions] == [r["id"] for r in ROWS] and not res.skipped
    assert len(res.questions) == 10 and sum(q.has_image for q in res.questions) == 2
    assert {q.answer_type for q in res.questions} == {"exactMatch", "multipleChoice"}
    assert len({q.category for q in res.questions}) == 8
    img = next(q for q in res.questions if q.has_image)
    assert img.image == BY_ID[img.id]["image"] and img.image.startswith("data:image/png;base64,")


def test_parquet_copy_loads_the_same_questions(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [dict(r, author_name="x", rationale="why") for r in ROWS]  # extra columns are ignored
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hle.parquet")
    assert load(str(tmp_path / "hle.parquet")).questions == load(str(FIXTURE)).questions
    assert load(str(tmp_path)).questions == load(str(FIXTURE)).questions  # a folder of files


def test_malformed_rows_are_reported_and_skipped(tmp_path, caplog) -> None:
    good = ROWS[0]
    bad = [
        dict(good, id="no-answer", answer=""),
        dict(good, id="bad-type", answer_type="trueFalse"),
        dict(good, id="bad-image", image="data:image/png;base64,@@not base64@@"),
        dict(good, id="no-category", category=None),
        {k: v for k, v in good.items() if k != "question"} | {"id": "no-question"},
        dict(good),  # duplicate id
    ]
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps(good)] + [json.dumps(r) for r in bad] + ["{not json", "[1, 2]",
                                                                  json.dumps(ROWS[1])]
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level("WARNING"):
        res = load(str(path))
    assert [q.id for q in res.questions] == [good["id"], ROWS[1]["id"]]
    reasons = {s.id: s.reason for s in res.skipped}
    assert "answer: missing or empty" in reasons["no-answer"]
    assert "trueFalse" in reasons["bad-type"]
    assert "base64" in reasons["bad-image"]
    assert "category" in reasons["no-category"]
    assert "question" in reasons["no-question"]
    assert "duplicate id" in reasons[good["id"]]
    assert any("not valid JSON" in s.reason for s in res.skipped)
    assert any("not a JSON object" in s.reason for s in res.skipped)
    assert len(res.skipped) == 8
    assert "skipped 8 malformed row(s)" in caplog.text
    env = HLEEnv(HLESettings(data_path=str(path)), agent="gold",  # the list the run card records
                 judge=fast_client(ScriptedBackend(fair_judge, model_id="judge")))
    assert len(env.tasks()) == 2
    listed = env.data_skipped()
    assert len(listed) == 8 and {"item": "row 1 (id no-answer)", "reason": reasons["no-answer"]} in listed


def test_image_values_are_normalised() -> None:
    url = BY_ID[IMAGE_IDS[0]]["image"]
    raw = base64.b64decode(url.split(",", 1)[1])
    assert normalise_image(url) == url
    assert normalise_image(url.split(",", 1)[1]) == url  # raw base64 of a PNG
    assert normalise_image({"bytes": raw, "path": None}) == url  # the hub's Image feature
    assert normalise_image("https://example.org/a.png") == "https://example.org/a.png"
    assert normalise_image(None) == "" and normalise_image("  ") == "" and normalise_image(float("nan")) == ""
    for junk in ("hello world", 42, {"bytes": b"plain text"}):
        with pytest.raises(ValueError):
            normalise_image(junk)


def test_hub_loading_uses_the_token_and_explains_failures(monkeypatch) -> None:
    seen: dict = {}

    class FakeDataset:
        column_names = ["id", "question", "image", "image_preview", "answer", "answer_type",
                        "author_name", "rationale", "raw_subject", "category", "canary"]

        def select_columns(self, cols):
            seen["columns"] = cols
            return [dict(r) for r in ROWS[:3]]

    def load_dataset(name, split, revision=None, token=None):
        seen.update(name=name, split=split, token=token)
        if token is None:
            raise PermissionError("Dataset 'cais/hle' is a gated dataset on the Hub.")
        return FakeDataset()

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setenv("MY_HF_TOKEN", "hf_abc")
    res = load(None, hf_token_env="MY_HF_TOKEN")
    assert [q.id for q in res.questions] == [r["id"] for r in ROWS[:3]]
    assert seen["token"] == "hf_abc" and seen["name"] == "cais/hle" and seen["split"] == "test"
    assert "image_preview" not in seen["columns"] and "image" in seen["columns"]
    monkeypatch.delenv("MY_HF_TOKEN")
    with pytest.raises(ValueError, match=r"gated.*\$MY_HF_TOKEN"):
        load(None, hf_token_env="MY_HF_TOKEN")


def test_real_datasets_library_reads_a_local_hub_layout_and_download_saves_parquet(tmp_path) -> None:
    pytest.importorskip("datasets")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from memrl_envs.hle.download import main as download

    hub = tmp_path / "hub" / "data"
    hub.mkdir(parents=True)
    rows = [dict(r, rationale="why", image_preview=None) for r in ROWS]
    pq.write_table(pa.Table.from_pylist(rows), hub / "train-00000-of-00001.parquet")
    # `datasets.load_dataset` takes a local folder in the hub's layout like a hub name
    res = load(None, hf_dataset=str(tmp_path / "hub"), hf_split="train")
    assert res.questions == load(str(FIXTURE)).questions
    out = tmp_path / "saved" / "hle.parquet"
    assert download(["--dataset", str(tmp_path / "hub"), "--split", "train", "--out", str(out)]) == 0
    assert load(str(out)).questions == load(str(FIXTURE)).questions
    assert pq.ParquetFile(out).schema_arrow.names == ["id", "question", "answer", "answer_type",
                                                      "category", "raw_subject", "image"]


# -- filters -------------------------------------------------------------------------------


def questions() -> list[HLEQuestion]:
    return load(str(FIXTURE)).questions


def test_category_filter_is_exact_case_insensitive_and_checked() -> None:
    got = select(questions(), Selection(categories=["math", "Computer Science/AI"]))
    assert [q.id for q in got] == [r["id"] for r in ROWS if r["category"] in ("Math", "Computer Science/AI")]
    with pytest.raises(ValueError, match="no question has category 'Maths'.*'Math'"):
        select(questions(), Selection(categories=["Maths"]))


def test_modality_filter() -> None:
    assert [q.id for q in select(questions(), Selection(modality="text"))] == TEXT_IDS
    assert [q.id for q in select(questions(), Selection(modality="image"))] == IMAGE_IDS


def test_ratio_keeps_a_fixed_share_of_every_category() -> None:
    qs = questions()
    half = select(qs, Selection(ratio=0.5))
    assert {q.category for q in half} == {q.category for q in qs}  # at least one per category
    for cat in ("Math", "Computer Science/AI"):  # the two categories with two questions
        assert sum(q.category == cat for q in half) == 1
    assert select(qs, Selection(ratio=0.5)) == half  # deterministic
    kept_math = next(q for q in half if q.category == "Math")
    math = [q for q in qs if q.category == "Math"]
    assert kept_math == min(math, key=lambda q: rank(0, "ratio", q.id))


def test_subset_is_deterministic_and_stable_under_other_rows() -> None:
    qs = questions()
    a = select(qs, Selection(subset_size=4, seed=3))
    assert len(a) == 4 and a == select(qs, Selection(subset_size=4, seed=3))
    assert [q.id for q in a] == [q.id for q in qs if q in a]  # input order is kept
    assert {q.id for q in select(qs, Selection(subset_size=4, seed=4))} != {q.id for q in a}
    # membership depends on (seed, id) only: the chosen ones stay chosen among fewer rows
    fewer = [q for q in qs if q in a or qs.index(q) % 2 == 0]
    assert select(fewer, Selection(subset_size=4, seed=3)) == a


def test_split_partitions_and_task_ids_and_max_tasks() -> None:
    qs = questions()
    train = select(qs, Selection(split="train", valid_fraction=0.3))
    valid = select(qs, Selection(split="valid", valid_fraction=0.3))
    assert train and valid and not {q.id for q in train} & {q.id for q in valid}
    assert len(train) + len(valid) == len(qs)
    ids = [ROWS[4]["id"], ROWS[1]["id"]]
    assert [q.id for q in select(qs, Selection(task_ids=ids))] == [ROWS[1]["id"], ROWS[4]["id"]]
    with pytest.raises(ValueError, match="task_ids"):
        select(qs, Selection(task_ids=["nope"]))
    assert [q.id for q in select(qs, Selection(modality="text", max_tasks=3))] == TEXT_IDS[:3]


def test_env_tasks_carry_the_question() -> None:
    env, _ = make_env(categories=["Other"])
    (task,) = env.tasks()
    row = next(r for r in ROWS if r["category"] == "Other")
    assert task.task_id == row["id"] and task.intent == row["question"]
    assert task.payload["image"] == row["image"] and len(task.payload["content_hash"]) == 64
    env2, _ = make_env(categories=["Other"], modality="text")
    with pytest.raises(ValueError, match="no HLE questions left"):
        env2.tasks()


# -- prompts -------------------------------------------------------------------------------


def test_solver_prompt_per_answer_type_with_memories() -> None:
    qs = {q.id: q for q in questions()}
    mc, exact = qs[ROWS[1]["id"]], qs[ROWS[0]["id"]]
    mem = RetrievedMemory("e001:x", "an earlier question", "Task: x\nOutcome: solved\nUse the divisor formula.",
                          q=0.0, similarity=0.9, score=0.1)
    msgs = build_messages(mc, [mem])
    assert msgs[0] == ("system", CHOICE_SYSTEM) and build_messages(exact, [])[0] == ("system", EXACT_SYSTEM)
    for word in ("Explanation:", "Confidence:"):
        assert word in CHOICE_SYSTEM and word in EXACT_SYSTEM
    assert "Exact Answer:" in EXACT_SYSTEM and "Answer:" in CHOICE_SYSTEM
    user = msgs[1][1]
    assert isinstance(user, str) and user.index(MEMORY_OPEN) < user.index("Use the divisor formula.") \
        < user.index(mc.question)
    assert build_messages(exact, [])[1][1] == f"Question:\n{exact.question}"


def test_answer_and_confidence_are_read_from_the_response() -> None:
    assert parse_answer("Explanation: x\nExact Answer: 42 \nConfidence: 85%") == "42"
    assert parse_answer("**Answer:** B\n") == "B"
    assert parse_answer("I think it is 42.") is None
    assert parse_confidence("Confidence: 85%") == 85.0
    assert parse_confidence("confidence: 250%") is None and parse_confidence("none") is None


# -- grading -------------------------------------------------------------------------------


def test_grading_correct_and_incorrect() -> None:
    right, wrong = ROWS[0]["id"], ROWS[1]["id"]
    env, judge_backend = make_env()
    backend = ScriptedBackend(solver({right: "24", wrong: "D"}))
    r1, llm = play(env, right, backend)
    assert r1.success and r1.reward == 1.0 and r1.outcome_detail == "correct" and not r1.errors
    assert r1.outcome == "success"
    assert r1.info["parsed_answer"] == "24" and r1.info["confidence"] == 80.0
    assert r1.transcript[0].action.endswith("Confidence: 80%") and "correct" in r1.transcript[0].observation
    assert r1.info["judge"]["calls"] == 1 and r1.info["judge"]["extracted_final_answer"] == "24"
    assert r1.info["judge"]["model"] == "judge" and r1.info["judge"]["prompt_tokens"] > 0
    assert llm.meter.calls == 1  # the judge's use is kept apart from the solver's
    r2, _ = play(env, wrong, backend)
    assert not r2.success and r2.reward == 0.0 and r2.outcome_detail == "incorrect" and not r2.errors
    assert r2.outcome == "failure"
    # the judge saw the response and the reference answer, and no image
    response, reference = split_case(judge_backend.requests[-1])
    assert "Exact Answer: D" in response and reference == "B"
    assert judge_backend.requests[-1].response_format == "json"


def test_gold_agent_is_graded_correct_on_every_question() -> None:
    env, judge_backend = make_env(agent="gold")
    memory = RetrievedMemory("m", "x", "a hint", 0.0, 1.0, 1.0)
    results = [env.solve(t, [memory], None, seed=0) for t in env.tasks()]
    assert all(r.success and r.outcome_detail == "correct" for r in results)
    assert all(r.info["memories_injected"] == 0 for r in results)  # an oracle reads no memories
    assert judge_backend.calls == len(ROWS)


@pytest.mark.parametrize("reply, why", [
    ("I think the response is right.", "unreadable verdict"),
    ('{"extracted_final_answer": "24", "correct": "maybe"}', "not true/false"),
    ("", "empty verdict"),
])
def test_unreadable_verdict_is_a_judge_error_not_a_wrong_answer(reply, why) -> None:
    env, _ = make_env(judge_fn=lambda r: reply)
    res, _ = play(env, ROWS[0]["id"], ScriptedBackend(solver({ROWS[0]["id"]: "24"})))
    assert res.outcome == res.outcome_detail == "judge_error" and not res.success
    assert res.errors and res.errors[0].startswith("judge_error:") and why in res.errors[0]
    assert res.info["judge"]["raw"] == reply[:500]
    assert res.transcript and "could not be graded" in res.transcript[0].observation


def test_judge_timeouts_are_retried_and_failures_are_judge_errors() -> None:
    fails = [TimeoutError("judge timed out"), TimeoutError("judge timed out")]

    def flaky(request):
        if fails:
            raise fails.pop(0)
        return fair_judge(request)

    env, backend = make_env(judge_fn=flaky)
    res, _ = play(env, ROWS[0]["id"], ScriptedBackend(solver({ROWS[0]["id"]: "24"})))
    assert res.outcome_detail == "correct" and backend.calls == 3 and env.judge.client.totals()["retries"] == 2

    def down(request):
        raise TimeoutError("judge timed out")

    env, backend = make_env(judge_fn=down)
    res, _ = play(env, ROWS[0]["id"], ScriptedBackend(solver({ROWS[0]["id"]: "24"})))
    assert res.outcome_detail == "judge_error" and "judge call failed" in res.errors[0]
    assert backend.calls == 3  # one try plus the client's two retries


def test_judge_calls_are_cached(tmp_path) -> None:
    cache = ResponseCache(tmp_path / "llm.sqlite")
    env, judge_backend = make_env(cache=cache)
    backend = ScriptedBackend(solver({ROWS[0]["id"]: "24"}))
    first, _ = play(env, ROWS[0]["id"], backend, epoch=1)
    again, _ = play(env, ROWS[0]["id"], backend, epoch=2)
    assert judge_backend.calls == 1 and again.info["judge"]["cache_hits"] == 1
    assert again.outcome_detail == first.outcome_detail == "correct"


def test_solver_failure_and_empty_answer() -> None:
    def broken(request):
        raise ValueError("bad request")

    env, judge_backend = make_env()
    res, _ = play(env, ROWS[0]["id"], ScriptedBackend(broken))
    assert (res.outcome, res.outcome_detail) == ("llm_error", "solver_error")
    assert res.errors[0].startswith("solver_error:")
    assert not res.transcript and judge_backend.calls == 0
    res, _ = play(env, ROWS[0]["id"], ScriptedBackend(lambda r: "   "))
    assert res.outcome_detail == "incorrect" and not res.errors and judge_backend.calls == 0


# -- images --------------------------------------------------------------------------------


def test_image_question_sends_the_data_url_to_a_vision_model() -> None:
    qid = IMAGE_IDS[0]
    env, judge_backend = make_env()
    backend = ScriptedBackend(solver({qid: "red"}), supports_images=True)
    res, _ = play(env, qid, backend)
    assert res.outcome_detail == "correct" and res.info["has_image"]
    (req,) = backend.requests
    user = req.messages[-1][1]
    assert isinstance(user, tuple) and ImagePart(BY_ID[qid]["image"]) in user
    assert isinstance(user[0], TextPart) and BY_ID[qid]["question"] in user[0].text
    assert not has_images(judge_backend.requests[0].messages)


def test_image_question_with_a_text_only_model_fails_before_any_call() -> None:
    qid = IMAGE_IDS[1]
    env, judge_backend = make_env()
    backend = ScriptedBackend(solver({qid: "A"}), supports_images=False)
    res, llm = play(env, qid, backend)
    assert (res.outcome, res.outcome_detail) == ("env_error", "unsupported_input") and not res.success
    assert "takes text only" in res.errors[0] and qid in res.errors[0]
    assert backend.calls == 0 and judge_backend.calls == 0 and llm.meter.calls == 0
    text_res, _ = play(env, TEXT_IDS[0], backend)  # text questions are unaffected
    assert text_res.outcome_detail in ("correct", "incorrect")


# -- settings and config ------------------------------------------------------------------


def test_settings_validation_names_the_field(tmp_path) -> None:
    with pytest.raises(ValueError, match="data_path: .* does not exist"):
        HLESettings(data_path=str(tmp_path / "missing.parquet"))
    with pytest.raises(ValueError, match="ratio"):
        HLESettings(data_path=str(FIXTURE), ratio=1.5)
    with pytest.raises(ValueError, match="judge.*model"):
        HLESettings(data_path=str(FIXTURE), judge={"backend": "litellm", "model": None})
    s = HLESettings(data_path=str(FIXTURE), judge={"backend": "local"})
    assert s.judge.n_examples() == 2 and HLESettings(data_path=str(FIXTURE)).judge.n_examples() == 0
    with pytest.raises(ValueError, match=r"env 'hle' has no agent 'expert' \(its agents: gold, react\)"):
        make_env(agent="expert")


def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def test_env_config_builds_the_env_and_its_judge(tmp_path, monkeypatch) -> None:
    from memrl.config.validate import validate

    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path))
    v = validate(compose_cfg("env=hle", f"env.data_path={FIXTURE}", "env.judge.backend=scripted",
                             "env.modality=text", "env.max_tasks=2", "debug=fast"))
    env = v.env_cls(v.env, agent="react")
    assert [t.task_id for t in env.tasks()] == TEXT_IDS[:2]
    # the default scripted judge echoes its prompt: no verdict in it, so a judge error
    res, _ = play(env, TEXT_IDS[0], ScriptedBackend(solver({})))
    assert res.outcome_detail == "judge_error"
    assert env.judge.client.cache is not None and str(env.judge.client.cache.path).startswith(str(tmp_path))
    env.close()


def test_paper_preset() -> None:
    cfg = compose_cfg("experiment=hle_paper", f"env.data_path={FIXTURE}")
    assert cfg.env.name == "hle" and cfg.runner.epochs == 10
    assert cfg.llm.name == "gemini-3-pro" and cfg.llm.temperature == 0.6
    assert cfg.embedder.name == "text-embedding-3-large"
    assert (cfg.env.retrieval.delta, cfg.env.retrieval.k1, cfg.env.retrieval.k2) == (0.25, 5, 3)
    assert (cfg.memory.delta, cfg.memory.k1, cfg.memory.k2) == (0.25, 5, 3)


# -- verdict parsing -----------------------------------------------------------------------


def test_verdict_parsing() -> None:
    v = parse_verdict('```json\n{"extracted_final_answer": "12", "reasoning": "same", "correct": true}\n```')
    assert v.correct and v.extracted_final_answer == "12" and v.reasoning == "same"
    assert parse_verdict('{"correct": "no", "extracted_final_answer": null}').correct is False
    assert parse_verdict('{"correct": "yes"}').correct is True
    assert parse_verdict("extracted_final_answer: 12\ncorrect: yes").correct is True  # bare fields
    with pytest.raises(JudgeError):
        parse_verdict("correct: yes ... on second thought correct: no")
    with pytest.raises(JudgeError):
        parse_verdict('{"extracted_final_answer": "12"}')
    assert "Examples:" in build_prompt("q", "r", "a", examples=2) and \
        "Examples:" not in build_prompt("q", "r", "a")


# -- a run: two epochs of MemRL over HLE questions ---------------------------------------


def test_two_epochs_of_memrl_with_a_judge_error_task(tmp_path) -> None:
    ids = TEXT_IDS[:4]
    flaky_id = ids[3]

    def judge(request):
        return "no idea" if task_of(request) == flaky_id else fair_judge(request)

    env, _ = make_env(judge_fn=judge, modality="text", max_tasks=4)
    answers = {ids[0]: BY_ID[ids[0]]["answer"], ids[1]: "wrong", ids[2]: BY_ID[ids[2]]["answer"]}
    backend = ScriptedBackend(solver(answers))
    emb = HashingEmbedder(dim=64)
    memory = MemRLMemory(MemRLSettings(delta=0.5, k1=5, k2=3, write_mode="raw"),
                         bank_dir=RunDir(tmp_path / "run").bank, embedder=emb)
    runner = Runner(tmp_path / "run", env=env, memory=memory, llm=fast_client(backend),
                    settings=RunnerSettings(epochs=2, progress=False), seed=0, embed_intents=emb.embed)
    runner.run(env.tasks())
    recs = {(r.epoch, r.task_id): r for r in read_episodes(RunDir(tmp_path / "run").episodes)}
    assert len(recs) == 8
    outcome = {k: r.outcome_detail for k, r in recs.items()}
    for e in (1, 2):
        assert [outcome[(e, t)] for t in ids] == ["correct", "incorrect", "correct", "judge_error"]
    # epoch 2: each graded question gets its own epoch-1 memory (same intent); the question
    # whose grading failed left no memory to find
    for t in ids[:3]:
        assert f"e001:{t}" in [m["id"] for m in recs[(2, t)].injected]
        assert MEMORY_OPEN in content_text(backend.requests[4 + ids.index(t)].messages[-1][1])
    assert not any(m["id"] == f"e001:{flaky_id}" for r in recs.values() for m in r.injected)
    assert recs[(2, flaky_id)].errors and recs[(2, flaky_id)].errors[0].startswith("judge_error")
    metrics = compute_metrics(list(recs.values()))
    assert metrics["sr"] == [0.5, 0.5]  # a judge error counts as unsolved ...
    assert metrics["errored_episodes"] == 2  # ... and is counted apart
