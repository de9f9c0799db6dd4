"""End to end on real Lifelong-DB tasks: a MemRL run with the embedded model (Gemma 3 270M)
and MiniLM through the real command line, against a MariaDB server that the test session
started; the run joins that server and leaves it running, with no episode database behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pymysql
import pytest

from memrl.core.rundir import RunDir
from memrl_envs.lifelong_db.server import MariaDBServer, find_binary
from data_paths import LIFELONG


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (LIFELONG / "db_train.json").is_file(), reason=f"Lifelong DB data not at {LIFELONG}"),
    pytest.mark.skipif(find_binary("mariadbd", "mysqld") is None,
                       reason="no MariaDB server binary (apt-get install -y mariadb-server)"),
]

# Lean on purpose: two tasks (a SELECT and an UPDATE), three turns, a short prompt.
ARGS = ["env=lifelong_db", "llm=local", "embedder=minilm", "memory.delta=auto", "env.max_tasks=2",
        "env.max_steps=3", "env.prompt_rows=2", "env.max_tokens=48", "env.observation_max_chars=300",
        "memory.writer.max_tokens=48", "memory.writer.max_trajectory_chars=600", "runner.epochs=2",
        "runner.progress=false"]


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    with MariaDBServer(tmp_path_factory.mktemp("mariadb")) as server:
        yield server


def test_memrl_on_lifelong_db_end_to_end(tmp_path, mariadb):
    env = dict(os.environ, LIFELONG_DATA=str(LIFELONG), MEMRL_CACHE_DIR=str(tmp_path / "cache"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *ARGS, f"env.server_dir={mariadb.base_dir}",
                          f"hydra.run.dir={run_dir}"], env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]

    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 2 and metrics["epochs"] == 2 and len(metrics["sr"]) == 2
    assert metrics["errored_episodes"] == 0
    recs = [json.loads(line) for line in RunDir(run_dir).episodes.read_text().splitlines()]
    assert len(recs) == 4 and {r["task_id"] for r in recs} == {"db-2", "db-3"}
    for r in recs:
        assert 1 <= r["steps"] <= 3 and r["transcript"] and r["llm_calls"] >= 2
        assert r["outcome_detail"] in {"correct", "wrong_answer", "no_answer", "table_mismatch"}
        assert r["info"]["database"].startswith("llb_") and r["info"]["answer_type"] in {"direct", "md5"}
    # epoch 2 sees epoch 1's memories (same intents, above the auto δ) and puts them in its prompts
    epoch2 = [r for r in recs if r["epoch"] == 2]
    assert all(r["injected"] for r in epoch2)
    assert all(r["info"]["memories_injected"] == len(r["injected"]) for r in recs)
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["status"] == "finished" and card["llm_totals"]["calls"] > 0

    # the run joined the session's server and left it running, with every episode's database gone
    assert mariadb.is_running()
    conn = pymysql.connect(**mariadb.address.connect_kwargs())
    with conn.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE 'llb\\_%'")
        assert cur.fetchall() == ()
        cur.execute("SELECT COUNT(*) FROM mysql.user WHERE User LIKE 'llb\\_%'")
        assert cur.fetchone()[0] == 0
    conn.close()
