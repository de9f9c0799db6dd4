"""Lifelong-DB pieces that need no server: the shared loader (malformed rows, literal
strings, split files), the benchmark's answer rules, the MySQL 8 rewrites, the action parser
and the settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from memrl.core.records import RetrievedMemory
from memrl_envs.lifelong import data as lifelong_data
from memrl_envs.lifelong_db.data import LITERAL_FIELDS, DbTask, check_row
from memrl_envs.lifelong_db.dialect import delete_alias, keep_group_order, to_mariadb
from memrl_envs.lifelong_db.prompts import Turn, build_prompt, parse_action
from memrl_envs.lifelong_db.scoring import direct_answer_matches, table_hash_sql, tuple_spans
from memrl_envs.lifelong_db.settings import LifelongDbSettings
from data_paths import LIFELONG_DB

DB_DATA = LIFELONG_DB


def good_row(**over):
    row = {
        "instruction": "How many rows have a > 1?",
        "answer_info": {"direct": [[2]], "md5": None, "sql": "SELECT COUNT(*) FROM t WHERE a > 1;"},
        "table_info": {"name": "t", "column_info_list": [{"name": "a", "type": "INT"}, {"name": "b", "type": "TEXT"}],
                       "row_list": [[1, "x"], [2, "y"], [3, "z"]]},
        "skill_list": ["select"],
    }
    row.update(over)
    return row


# -- loader ------------------------------------------------------------------------------
def test_loader_skips_malformed_rows_and_names_their_keys(tmp_path, caplog):
    rows = {
        "10": good_row(),
        "2": good_row(answer_info=str({"direct": None, "md5": "0" * 32, "sql": "UPDATE t SET a = 1;"})),
        "3": good_row(answer_info={"direct": [[1]], "md5": "0" * 32, "sql": "SELECT 1"}),  # both answers
        "4": good_row(table_info={"name": "t", "column_info_list": [{"name": "a", "type": "INT"}],
                                  "row_list": [[1, 2]]}),  # row longer than the columns
        "5": "not an object",
        "6": good_row(answer_info="{'direct': [[1]], 'md5': None, 'sql': "),  # broken literal
        "7": {k: v for k, v in good_row().items() if k != "instruction"},
        "8": good_row(table_info={"name": "t", "column_info_list": [{"name": "a", "type": "INT; DROP TABLE x"}],
                                  "row_list": []}),
    }
    path = tmp_path / "db.json"
    path.write_text(json.dumps(rows))
    with caplog.at_level("WARNING"):
        loaded = lifelong_data.load_samples(path, literal_fields=LITERAL_FIELDS, validate=check_row)
    assert loaded.keys == ["2", "10"]  # numeric order, not text order
    assert loaded.rows["2"]["answer_info"]["md5"] == "0" * 32  # the literal string was parsed
    skipped = {s.key: s.reason for s in loaded.skipped}
    assert set(skipped) == {"3", "4", "5", "6", "7", "8"}
    assert "exactly one of direct / md5" in skipped["3"]
    assert "row_list[0]" in skipped["4"]
    assert "answer_info" in skipped["6"] and "instruction" in skipped["7"] and "unsupported type" in skipped["8"]
    assert all(f"skipped malformed sample {k}" in caplog.text for k in skipped)


def test_loader_reads_jsonl_rows_with_sample_index(tmp_path):
    path = tmp_path / "db.jsonl"
    lines = [json.dumps({"sample_index": 7, **good_row()}), "{broken", json.dumps({"sample_index": 1, **good_row()})]
    path.write_text("\n".join(lines) + "\n")
    loaded = lifelong_data.load_samples(path, literal_fields=LITERAL_FIELDS, validate=check_row)
    assert loaded.keys == ["1", "7"]
    assert [s.key for s in loaded.skipped] == ["line 2"]
    assert "sample_index" not in loaded.rows["1"]


def test_loader_errors_on_unreadable_files(tmp_path):
    with pytest.raises(lifelong_data.DataError, match="no task file"):
        lifelong_data.load_samples(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(lifelong_data.DataError, match="not valid JSON"):
        lifelong_data.load_samples(bad)
    with pytest.raises(lifelong_data.DataError, match="hf://"):
        lifelong_data.load_samples("hf://only-owner")


def test_split_file_is_written_once_and_read_back(tmp_path):
    keys = [str(i) for i in range(50)]
    split_file = tmp_path / "split.json"
    train = lifelong_data.resolve_split(keys, "train", split_file, val_fraction=0.3, seed=1)
    val = lifelong_data.resolve_split(keys, "validation", split_file, val_fraction=0.3, seed=1)
    assert len(val) == 15 and len(train) == 35 and not set(train) & set(val)
    assert set(train) | set(val) == set(keys)
    # the file, not the seed, decides from now on
    saved = json.loads(split_file.read_text())
    saved["validation"] = ["3", "4"]
    split_file.write_text(json.dumps(saved))
    assert lifelong_data.resolve_split(keys, "validation", split_file, val_fraction=0.3, seed=99) == ["3", "4"]
    assert lifelong_data.resolve_split(keys, "all", None) == keys
    with pytest.raises(lifelong_data.DataError, match="other data"):
        lifelong_data.resolve_split(keys[:3], "validation", split_file)
    # a default-located file depends on the seed
    a = lifelong_data.resolve_split(keys, "validation", None, 0.3, seed=1, source="x.json", cache_dir=tmp_path)
    b = lifelong_data.resolve_split(keys, "validation", None, 0.3, seed=2, source="x.json", cache_dir=tmp_path)
    assert a != b and len(list((tmp_path / "lifelong_splits").glob("*.json"))) == 2


def test_select_by_ids_then_count():
    keys = ["1", "2", "3", "4"]
    assert lifelong_data.select(keys, ["db-3", "db-1"], None, id_of=lambda k: f"db-{k}") == ["1", "3"]
    assert lifelong_data.select(keys, None, 2) == ["1", "2"]
    with pytest.raises(lifelong_data.DataError, match="db-9"):
        lifelong_data.select(keys, ["db-9"], None, id_of=lambda k: f"db-{k}")


# -- scoring -----------------------------------------------------------------------------
def test_direct_answers_compare_rows_in_order_with_float_tolerance():
    expected = [("unpaid", 6800.0), ("pending", 6100.0)]
    assert direct_answer_matches("[('unpaid', Decimal('6800')), ('pending', Decimal('6100'))]", expected)
    assert direct_answer_matches("[('unpaid', 6800.0000004), ('pending', 6100)]", expected)
    assert not direct_answer_matches("[('unpaid', 6800.01), ('pending', 6100)]", expected)
    assert not direct_answer_matches("[('pending', 6100), ('unpaid', 6800)]", expected)  # order counts
    assert not direct_answer_matches("[('unpaid', 6800)]", expected)  # a row missing
    assert not direct_answer_matches("[('unpaid', 6800), ('pending', 6100, 1)]", expected)
    assert direct_answer_matches('[("unpaid", 6800), (pending, 6100)]', expected)  # quotes are optional
    assert not direct_answer_matches("[('unpaid', '6800'), ('pending', 6100)]", expected)  # quoted number
    assert not direct_answer_matches("[('unpaid', 6800), ('pending', 6100)", expected[:1])


def test_direct_answer_edge_cases():
    assert direct_answer_matches("42", [(42,)])                # no parentheses: one row
    assert direct_answer_matches("Alice, 3", [("Alice", 3)])
    assert not direct_answer_matches("42", [(42,), (43,)])
    assert direct_answer_matches("", [])                       # empty answer for an empty result
    assert not direct_answer_matches("", [(1,)])
    text = "[(1, Decimal('2.5')), (3, 4)]"
    assert tuple_spans(text) == [(1, text.index("')") + 2), (text.index("(3"), len(text) - 2)]
    assert tuple_spans("(1, 2") is None and tuple_spans("1, 2)") is None
    assert direct_answer_matches("[(Decimal('34.3333'),)]", [(34.3333,)])
    assert not direct_answer_matches("[(34.3334,)]", [(34.3333,)])


def test_table_hash_query_is_the_benchmarks_formula():
    sql = table_hash_sql("my`tab", ["id", "name"])
    assert sql == ("SELECT MD5(GROUP_CONCAT(rowhash ORDER BY rowhash)) AS hash FROM "
                   "(SELECT SUBSTRING(MD5(CONCAT_WS(',', `id`,`name`)), 1, 5) AS rowhash FROM `my``tab`) AS sub")


# -- MySQL 8 rewrites --------------------------------------------------------------------
def test_group_order_is_kept_only_where_mysql8_would_differ():
    assert keep_group_order("SELECT a, COUNT(*) FROM t GROUP BY a;") == \
        "SELECT a, COUNT(*) FROM t GROUP BY a ORDER BY NULL"
    assert keep_group_order("SELECT a FROM t GROUP BY a HAVING COUNT(*) > 1 LIMIT 5 OFFSET 2") == \
        "SELECT a FROM t GROUP BY a HAVING COUNT(*) > 1 ORDER BY NULL LIMIT 5 OFFSET 2"
    for unchanged in ("SELECT a FROM t GROUP BY a ORDER BY a", "SELECT x FROM (SELECT a x FROM t GROUP BY a) s",
                      "SELECT a FROM t GROUP BY a WITH ROLLUP", "SELECT 'group by' FROM t",
                      "SELECT a FROM t GROUP BY a UNION SELECT b FROM u", "UPDATE t SET a = 1"):
        assert keep_group_order(unchanged) == unchanged


def test_delete_alias_becomes_multi_table_delete():
    assert delete_alias("DELETE FROM course_enrollment AS e WHERE e.grade < 50;") == \
        "DELETE e FROM course_enrollment AS e WHERE e.grade < 50;"
    assert delete_alias("DELETE FROM `t` x WHERE x.a = 1") == "DELETE x FROM `t` AS x WHERE x.a = 1"
    for unchanged in ("DELETE FROM t WHERE a = 1", "DELETE dc FROM d dc JOIN x ON 1 WHERE 1",
                      "DELETE FROM t ORDER BY a LIMIT 1"):
        assert to_mariadb(unchanged) == unchanged


# -- the action protocol -----------------------------------------------------------------
@pytest.mark.parametrize("reply,kind,text", [
    (" Operation\n```sql\nSELECT * FROM t\nWHERE a = 1;\n```", "sql", "SELECT * FROM t WHERE a = 1;"),
    ("Let me look.\nAction: Operation\n```sql\nUPDATE t SET a=1 WHERE b=2;\n```", "sql", "UPDATE t SET a=1 WHERE b=2;"),
    ("SQL: select a from t where x = 'a;b'; and more", "sql", "select a from t where x = 'a;b';"),
    ("```sql\nSELECT 1\n```", "sql", "SELECT 1"),
    (" Answer\nFinal Answer: [('a', 1)]\nmore text", "answer", "[('a', 1)]"),
    ("Action: Answer\nFinal Answer:\n```\n[(1,)]\n```", "answer", "[(1,)]"),
    ("Final Answer: 42", "answer", "42"),
    (" Operation\n```", "invalid", None),
    ("I am not sure what to do.", "invalid", None),
    ("", "invalid", None),
])
def test_parser_is_tolerant(reply, kind, text):
    action = parse_action(reply)
    assert action.kind == kind
    if text is not None:
        assert action.text == text


def test_prompt_is_plain_text_ending_where_the_model_acts():
    task = DbTask.from_row("1", good_row())
    mem = RetrievedMemory("m1", "an earlier question", "Task: an earlier question\nOutcome: solved",
                          0.5, 0.9, 0.9, True)
    history = [Turn(parse_action("Action: Operation\n```sql\nSELECT 1\n```"), "", "[(1,)]"),
               Turn(parse_action("blah"), "blah", "Error: no action found.")]
    prompt = build_prompt(task, [mem], history, max_rows=1)
    assert prompt.endswith("\nAction:")
    assert "Question: How many rows have a > 1?" in prompt
    assert '"row_list": [[1, "x"]]' in prompt and "(The table has 3 rows; the first 1 are shown.)" in prompt
    assert "Experience 1 (earlier task: an earlier question)" in prompt
    assert "```sql\nSELECT 1\n```\nOutput: [(1,)]" in prompt and "Action: blah\nOutput: Error" in prompt
    assert prompt.index("Past experiences") < prompt.index("Here is your task.")


# -- settings ----------------------------------------------------------------------------
def test_settings_name_the_offending_field(tmp_path, monkeypatch):
    data = tmp_path / "db.json"
    data.write_text("{}")
    ok = LifelongDbSettings(data_path=str(data), server_dir=str(tmp_path))
    assert ok.max_steps == 15 and ok.split == "all" and ok.mysql8_compat
    with pytest.raises(ValidationError, match="data_path: no DB task file"):
        LifelongDbSettings(data_path=str(tmp_path / "none.json"), server_dir=str(tmp_path))
    with pytest.raises(ValidationError, match="server_dir"):
        LifelongDbSettings(data_path=str(data))
    with pytest.raises(ValidationError, match="password_env: must be the NAME"):
        LifelongDbSettings(data_path=str(data), server="external", password_env="hunter2!")
    monkeypatch.delenv("MEMRL_TEST_DB_PW", raising=False)
    with pytest.raises(ValidationError, match="MEMRL_TEST_DB_PW is not set"):
        LifelongDbSettings(data_path=str(data), server="external", password_env="MEMRL_TEST_DB_PW")
    with pytest.raises(ValidationError, match="max_steps"):
        LifelongDbSettings(data_path=str(data), server_dir=str(tmp_path), max_steps=0)
    with pytest.raises(ValidationError):
        LifelongDbSettings(data_path=str(data), server_dir=str(tmp_path), no_such_key=1)


def test_env_rejects_unknown_agents(tmp_path):
    from memrl_envs.lifelong_db import LifelongDbEnv

    data = tmp_path / "x.json"
    data.write_text(json.dumps({"0": good_row()}))
    with pytest.raises(ValueError, match=r"env 'lifelong_db' has no agent 'expert' \(its agents: gold, react\)"):
        LifelongDbEnv(LifelongDbSettings(data_path=str(data), server_dir=str(tmp_path)), agent="expert")


@pytest.mark.skipif(not DB_DATA.is_file(), reason=f"Lifelong DB data not at {DB_DATA}")
def test_real_task_file_loads_completely():
    loaded = lifelong_data.load_samples(DB_DATA, literal_fields=LITERAL_FIELDS, validate=check_row)
    assert len(loaded.keys) == 361 and not loaded.skipped
    tasks = [DbTask.from_row(k, r) for k, r in loaded.rows.items()]
    assert {t.answer_type for t in tasks} == {"direct", "md5"}
    assert sum(t.answer_type == "md5" for t in tasks) == 102


def test_paper_preset_composes_and_validates(tmp_path):
    from hydra import compose, initialize_config_dir

    from memrl.config.validate import validate

    data = tmp_path / "db.json"
    data.write_text(json.dumps({"0": good_row()}))
    configs = str(Path(__file__).resolve().parents[3] / "configs")
    with initialize_config_dir(config_dir=configs, version_base=None):
        cfg = compose(config_name="config", overrides=["experiment=llb_db_paper", f"env.data_path={data}",
                                                       f"paths.cache_dir={tmp_path}"])
    assert cfg.env.name == "lifelong_db" and cfg.env.max_steps == 15 and cfg.runner.epochs == 10
    assert (cfg.env.retrieval.delta, cfg.env.retrieval.k1, cfg.env.retrieval.k2) == (0.37, 10, 5)
    assert cfg.llm.name == "gpt-4o-mini" and cfg.agent.name == "react"
    assert cfg.env.server_dir == os.environ.get("MEMRL_DB_DIR", f"{tmp_path}/mariadb")
    v = validate(cfg)
    assert v.env.max_steps == 15 and v.policy.needs_llm
    assert (v.memory.delta, v.memory.k1, v.memory.k2) == (0.37, 10, 5)
    with initialize_config_dir(config_dir=configs, version_base=None):
        gold = compose(config_name="config", overrides=["env=lifelong_db", "agent=gold", f"env.data_path={data}"])
    assert validate(gold).policy.needs_llm is False
