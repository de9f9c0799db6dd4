"""Lifelong-DB against a real MariaDB server started by the test session: isolation between
episodes, clean-up, statement time limit, row cap, the env's turn loop, the gold oracle on
real tasks, and the server manager's command line and shared use."""

from __future__ import annotations

import json
import time

import pymysql
import pytest

from memrl.llm.base import LLMError
from memrl_envs.lifelong_db import LifelongDbEnv
from memrl_envs.lifelong_db.data import DbTask
from memrl_envs.lifelong_db.databases import EpisodeDatabase
from memrl_envs.lifelong_db.server import MariaDBServer, find_binary
from memrl_envs.lifelong_db.server import main as server_cli
from memrl_envs.lifelong_db.settings import LifelongDbSettings
from data_paths import LIFELONG_DB

DB_DATA = LIFELONG_DB
needs_data = pytest.mark.skipif(not DB_DATA.is_file(), reason=f"Lifelong DB data not at {DB_DATA}")

pytestmark = [pytest.mark.serial,  # times or samples the host: runs alone (Makefile, test)
              pytest.mark.skipif(find_binary("mariadbd", "mysqld") is None,
                                 reason="no MariaDB server binary (apt-get install -y mariadb-server)")]


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    """One private server for the whole test session, stopped at the end."""
    with MariaDBServer(tmp_path_factory.mktemp("mariadb")) as server:
        yield server


def make_task(name="scores", rows=None, md5=None, sql=None):
    rows = rows if rows is not None else [[i, f"p{i}", 10 * i] for i in range(1, 21)]
    answer = ({"direct": None, "md5": md5, "sql": sql or "UPDATE scores SET points = 0;"} if md5 else
              {"direct": [[len(rows)]], "md5": None, "sql": sql or f"SELECT COUNT(*) FROM {name};"})
    return DbTask.from_row("1", {
        "instruction": "How many players are there?",
        "answer_info": answer,
        "table_info": {"name": name, "row_list": rows,
                       "column_info_list": [{"name": "id", "type": "INT"}, {"name": "player", "type": "TEXT"},
                                            {"name": "points", "type": "INT"}]},
        "skill_list": ["select"],
    })


def admin(server):
    return pymysql.connect(**server.address.connect_kwargs(), autocommit=True)


def databases_and_users(server):
    conn = admin(server)
    with conn.cursor() as cur:
        cur.execute("SHOW DATABASES")
        dbs = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT User FROM mysql.user")
        users = {r[0] for r in cur.fetchall()}
    conn.close()
    return dbs, users


# -- isolation and clean-up ---------------------------------------------------------------
def test_an_episode_cannot_reach_another_episodes_database(mariadb):
    with EpisodeDatabase(mariadb.address, make_task()) as a, EpisodeDatabase(mariadb.address, make_task()) as b:
        assert a.name != b.name
        own = a.execute("SELECT COUNT(*) FROM scores")
        assert own.ok and own.rows == [(20,)]
        attempts = [f"SELECT * FROM `{b.name}`.scores", f"USE `{b.name}`", f"DELETE FROM `{b.name}`.scores",
                    f"DROP DATABASE `{b.name}`", "CREATE DATABASE llb_intruder", "SELECT * FROM mysql.user",
                    f"GRANT ALL ON `{b.name}`.* TO CURRENT_USER()", "SET GLOBAL max_connections = 1",
                    "SELECT LOAD_FILE('/etc/passwd')", "SELECT 1 INTO OUTFILE '/tmp/memrl_llb_outfile'",
                    "SHUTDOWN", "CREATE USER intruder IDENTIFIED BY 'x'"]
        for sql in attempts:
            res = a.execute(sql)
            denied = (not res.ok and ("denied" in res.text.lower() or res.error_code in (1044, 1045, 1142, 1227))) \
                or (res.ok and res.rows == [(None,)])  # LOAD_FILE without the FILE privilege reads nothing
            assert denied, f"{sql!r} was allowed: {res.text}"
        shown = a.execute("SHOW DATABASES")
        assert {r[0] for r in shown.rows} == {"information_schema", a.name}
        assert b.execute("SELECT COUNT(*) FROM scores").rows == [(20,)]  # B untouched


def test_database_and_account_are_dropped_even_after_an_error(mariadb):
    db = EpisodeDatabase(mariadb.address, make_task())
    with pytest.raises(RuntimeError, match="boom"):
        with db:
            assert db.name in databases_and_users(mariadb)[0]
            raise RuntimeError("boom")
    dbs, users = databases_and_users(mariadb)
    assert db.name not in dbs and db.user not in users


def db_env(*, agent="react", **fields) -> LifelongDbEnv:
    # episodes played with `run_episode` read no task file: a hub address passes the check
    fields.setdefault("data_path", "hf://unused/unused")
    return LifelongDbEnv(LifelongDbSettings(**fields), agent=agent)


def test_a_bad_table_is_an_env_error_and_leaves_nothing(mariadb):
    task = make_task(rows=[[1, "a", "not a number"]])  # strict mode refuses it
    before = databases_and_users(mariadb)
    env = db_env(agent="gold", server="external", socket=mariadb.address.socket)
    result = env.run_episode(task, policy=None)
    assert not result.success and result.outcome == result.outcome_detail == "env_error"
    assert "setting up table" in result.errors[0]
    assert databases_and_users(mariadb) == before


# -- limits ------------------------------------------------------------------------------
def test_statement_time_limit_stops_a_long_query(mariadb):
    with EpisodeDatabase(mariadb.address, make_task(), statement_timeout_s=1.0) as db:
        t0 = time.monotonic()
        res = db.execute("SELECT SLEEP(20)")
        assert time.monotonic() - t0 < 5
        assert not res.ok or res.rows == [(1,)]  # MariaDB: error 1969, or SLEEP interrupted -> 1
        assert db.execute("SELECT 1").rows == [(1,)]
        # the agent lifts its own server-side limit: the client-side limit still stops it
        assert db.execute("SET SESSION max_statement_time = 0").ok
        t0 = time.monotonic()
        res = db.execute("SELECT SLEEP(30)")
        assert res.timed_out and "time limit" in res.text and time.monotonic() - t0 < 8
        conn = admin(mariadb)
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s AND INFO LIKE %s",
                        (db.user, "%SLEEP(30)%"))
            assert cur.fetchone()[0] == 0  # the query was killed on the server
        conn.close()
        assert db.execute("SELECT COUNT(*) FROM scores").rows == [(20,)]  # reconnected


def test_large_results_are_cut_at_max_result_rows(mariadb):
    with EpisodeDatabase(mariadb.address, make_task(), max_result_rows=100) as db:
        res = db.execute("SELECT a.id, b.id, c.id FROM scores a, scores b, scores c")
        assert res.ok and res.rows_capped and len(res.rows) == 100 and "only the first 100 rows" in res.text
        assert db.execute("SELECT COUNT(*) FROM scores").rows == [(20,)]


# -- the turn loop -----------------------------------------------------------------------
class Scripted:
    """A stand-in LLM policy replying from a list."""

    def __init__(self, replies):
        self.replies = list(replies)

    def reply(self, task, history, last):
        item = self.replies[len(history)]
        if isinstance(item, Exception):
            raise item
        return item


def external_env(mariadb, **kw):
    return db_env(server="external", socket=mariadb.address.socket, **kw)


def test_turn_loop_feeds_errors_back_and_judges_the_answer(mariadb):
    env = external_env(mariadb, max_steps=5, observation_max_chars=100)
    replies = ["I will look at the table first.",
               "Action: Operation\n```sql\nSELECT * FROM no_such_table\n```",
               "Action: Operation\n```sql\nSELECT * FROM scores\n```",
               " Operation\n```sql\nSELECT COUNT(*) FROM scores;\n```",
               "Action: Answer\nFinal Answer: [(20,)]"]
    result = env.run_episode(make_task(), Scripted(replies))
    assert result.success and result.outcome_detail == "correct" and result.steps == 5
    steps = result.transcript
    assert steps[0].observation.startswith("Error: no action found")
    assert "1146" in steps[1].observation and result.info["sql_errors"] == 1
    assert "output cut" in steps[2].observation  # 20 rows > 100 characters
    assert steps[3].observation == "[(20,)]" and steps[4].action == "Final Answer: [(20,)]"

    wrong = env.run_episode(make_task(), Scripted(["Final Answer: [(19,)]"]))
    assert not wrong.success and wrong.outcome_detail == "wrong_answer"
    silent = external_env(mariadb, max_steps=2).run_episode(make_task(), Scripted(["SELECT 1", "SELECT 2"]))
    assert silent.outcome_detail == "no_answer" and silent.info["truncated"] and silent.steps == 2
    failed = env.run_episode(make_task(), Scripted(["SELECT 1", LLMError("rate limited")]))
    assert failed.outcome_detail == "llm_error" and "rate limited" in failed.errors[0]


def test_change_tasks_are_judged_on_the_table_whatever_the_answer(mariadb):
    # the expected hash is taken from a server that ran the ground truth
    probe = make_task(md5="0" * 32)
    with EpisodeDatabase(mariadb.address, probe) as db:
        assert db.execute("UPDATE scores SET points = 0 WHERE id > 10").ok
        expected = db.table_hash()
    task = make_task(md5=expected, sql="UPDATE scores SET points = 0 WHERE id > 10;")
    env = external_env(mariadb)
    done = env.run_episode(task, Scripted(["UPDATE scores SET points = 0 WHERE id > 10;", "Final Answer: nonsense"]))
    assert done.success and done.info["table_hash"] == expected
    idle = env.run_episode(task, Scripted(["Final Answer: done"]))
    assert not idle.success and idle.outcome_detail == "table_mismatch"
    # dropping or reshaping the table, or leaving it locked, is the agent's failure, not the env's
    for sabotage in ("DROP TABLE scores",
                     "SET @s = CONCAT('DROP DATABASE ', DATABASE()); PREPARE st FROM @s; EXECUTE st",
                     "ALTER TABLE scores DROP COLUMN points", "LOCK TABLES scores WRITE"):
        class Saboteur(Scripted):
            def reply(self, task, history, last, _s=sabotage):
                return f"Action: Operation\n```sql\n{_s}\n```" if not history else "Final Answer: done"
        res = external_env(mariadb).run_episode(task, Saboteur([]))
        assert res.outcome_detail == "table_mismatch" and not res.errors, (sabotage, res.errors)
        assert res.transcript[0].observation.startswith("OK"), res.transcript[0].observation
        assert (res.info["table_hash"] is None) == (not sabotage.startswith("LOCK"))
    no_answer = external_env(mariadb, max_steps=1).run_episode(
        task, Scripted(["UPDATE scores SET points = 0 WHERE id > 10;"]))
    assert no_answer.success  # as in the benchmark, the table counts even without an answer


# -- the oracle on real tasks -------------------------------------------------------------
GOLD_SAMPLE = ["db-2", "db-495", "db-5", "db-150", "db-71", "db-210", "db-388", "db-392", "db-351"]


@needs_data
def test_gold_solves_real_tasks_through_the_env(mariadb):
    env = db_env(data_path=str(DB_DATA), agent="gold", server="external", socket=mariadb.address.socket,
           task_ids=GOLD_SAMPLE)
    tasks = env.tasks()
    assert sorted(t.task_id for t in tasks) == sorted(GOLD_SAMPLE)
    results = {t.task_id: env.solve(t, [], None, seed=0) for t in tasks}
    failed = {k: (r.outcome_detail, r.errors, r.transcript[:1]) for k, r in results.items() if not r.success}
    assert not failed
    kinds = {env.task(k).answer_type for k in results}
    assert kinds == {"direct", "md5"}
    assert all(r.steps == 2 and r.info["memories_injected"] == 0 for r in results.values())
    assert not any(name.startswith("llb_") for name in databases_and_users(mariadb)[0])


@needs_data
def test_tie_order_is_repeatable_across_episodes(mariadb):
    # db-18 orders groups by an average on which two groups tie; with in-memory temporary
    # tables MariaDB's order of the tied rows changed between episodes
    env = db_env(data_path=str(DB_DATA), agent="gold", server="external", socket=mariadb.address.socket,
           task_ids=["db-18"])
    task = env.tasks()[0]
    outputs = {env.solve(task, [], None, seed=0).transcript[0].observation for _ in range(8)}
    assert len(outputs) == 1
    assert env.solve(task, [], None, seed=0).success


@needs_data
def test_mariadb_differs_from_mysql8_without_the_rewrites(mariadb):
    # GROUP BY order (db-495) and DELETE ... AS alias (db-388): these pass above only because
    # of the MySQL 8 rewrites; without them MariaDB's own answers are judged wrong
    env = db_env(data_path=str(DB_DATA), agent="gold", server="external", socket=mariadb.address.socket,
           task_ids=["db-495", "db-388"], mysql8_compat=False)
    results = {t.task_id: env.solve(t, [], None, seed=0) for t in env.tasks()}
    assert results["db-495"].outcome_detail == "wrong_answer"
    assert results["db-388"].outcome_detail == "table_mismatch"
    assert "1064" in results["db-388"].transcript[0].observation


# -- the server manager ------------------------------------------------------------------
def test_server_cli_up_status_down_and_shared_use(tmp_path, capsys):
    d = str(tmp_path / "srv")
    assert server_cli(["up", "--dir", d]) == 0
    up = json.loads(capsys.readouterr().out)
    assert up["running"] and up["socket"].endswith("mysqld.sock")
    assert server_cli(["status", "--dir", d]) == 0
    assert json.loads(capsys.readouterr().out)["leases"] == ["cli"]
    # a run joins the server and leaves it running for the `up` that started it
    user = MariaDBServer(d)
    assert user.acquire().socket == up["socket"]
    conn = pymysql.connect(unix_socket=up["socket"], user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE llb_0123456789ab")  # as if a killed run had left it
    conn.close()
    assert user.release() is False and user.is_running()
    assert server_cli(["down", "--dir", d]) == 0 and "stopped" in capsys.readouterr().out
    assert server_cli(["status", "--dir", d]) == 1
    capsys.readouterr()
    # a fresh start drops what earlier episodes left; the last user to leave stops it
    user.acquire()
    assert "llb_0123456789ab" not in databases_and_users(user)[0]
    other = MariaDBServer(d)
    other.acquire()
    assert user.release() is False and other.is_running()
    assert other.release() is True and not other.is_running()


@needs_data
def test_concurrent_episodes_share_a_managed_server(tmp_path):
    # batch_size > 1: the runner plays episodes on threads; one managed server, started once
    from concurrent.futures import ThreadPoolExecutor

    env = db_env(data_path=str(DB_DATA), agent="gold", server_dir=str(tmp_path / "srv"), max_tasks=12)
    tasks = env.tasks()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda t: env.solve(t, [], None, seed=0), tasks))
    assert all(r.success for r in results), [(r.outcome_detail, r.errors) for r in results if not r.success]
    assert len({r.info["database"] for r in results}) == 12
    server = MariaDBServer(tmp_path / "srv")
    assert server.is_running() and not any(n.startswith("llb_") for n in databases_and_users(server)[0])
    env.close()
    assert not server.is_running()  # the env started it and was its only user
