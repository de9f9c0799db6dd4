"""The Lifelong-DB env: LifelongAgentBench's MySQL tasks on a real server, one private
database per episode; an LLM agent ("react") or the ground-truth oracle ("gold")."""

from __future__ import annotations

import logging
import os
import threading

from memrl.core.records import EpisodeResult
from memrl.env.base import Env
from memrl_envs.lifelong import data as lifelong_data
from memrl_envs.lifelong_db.data import LITERAL_FIELDS, DbTask, check_row
from memrl_envs.lifelong_db.databases import EpisodeDatabase, SandboxError
from memrl_envs.lifelong_db.episode import LLM_ERROR, SHARED, Actor, GoldPolicy, LLMPolicy, play
from memrl_envs.lifelong_db.prompts import memory_trajectory
from memrl_envs.lifelong_db.server import MariaDBServer, ServerAddress, ServerError
from memrl_envs.lifelong_db.settings import LifelongDbSettings

log = logging.getLogger(__name__)


class LifelongDbEnv(lifelong_data.TaskListing, Env):
    """LifelongAgentBench DB tasks behind the Env seam.

    Settings (``LifelongDbSettings``, the `env=lifelong_db` group): data_path (the
    benchmark's DB JSON keyed by sample index, or ``hf://<repo>/<config>``), val_path (the
    validation tasks added to them: ``auto`` = db_val.json beside it, or the hub's validation
    split), task_order (numeric | string), split (all |
    train | validation, from the split file), max_steps (turns: SQL statements, unreadable
    replies and the answer), memory_format (memrl | official, memory_context),
    server ("managed": a private MariaDB in ``server_dir``, started
    on first use and stopped at close when no other process uses it; "external": host/port
    or socket, ``user``, password from the environment variable ``password_env``),
    statement_timeout_s / max_result_rows / observation_max_chars (per-statement limits),
    mysql8_compat (on MariaDB, rewrite statements to give MySQL 8's results, db_dialect),
    prompt_rows (table rows shown in the prompt; null: all, as the benchmark).
    Agents: "react" (an LLM) or "gold" (runs the ground-truth SQL; no LLM).
    """

    name = "lifelong_db"
    Settings = LifelongDbSettings
    POLICIES = {"react": LLMPolicy, "gold": GoldPolicy}
    TASK_PREFIX, LABEL, LITERAL_FIELDS = "db", "Lifelong-DB", LITERAL_FIELDS
    check_row = staticmethod(check_row)
    make_task = staticmethod(DbTask.from_row)

    def __init__(self, settings: LifelongDbSettings, *, agent: str) -> None:
        super().__init__(settings, agent=agent)
        self.skipped: list[lifelong_data.Skipped] = []
        self.fingerprint: str | None = None
        self._tasks: dict[str, DbTask] | None = None
        self._lock = threading.Lock()
        self._server: MariaDBServer | None = None
        self._address: ServerAddress | None = None

    # -- tasks -------------------------------------------------------------------------
    def _payload(self, task: DbTask) -> dict:
        return {"answer_type": task.answer_type, "table": task.table, "skills": list(task.skills)}

    # -- the server --------------------------------------------------------------------
    def address(self) -> ServerAddress:
        """The administrator address; a managed server is started (or joined) on first use."""
        with self._lock:
            if self._address is None:
                s = self.s
                if s.server == "managed":
                    self._server = MariaDBServer(s.server_dir, port=s.port)
                    self._address = self._server.acquire()
                else:
                    password = os.environ.get(s.password_env, "") if s.password_env else ""
                    self._address = ServerAddress(socket=s.socket, host=s.host, port=s.port,
                                                  user=s.user, password=password)
            return self._address

    def _forget_dead_server(self) -> None:
        """After a failed episode: if the managed server has gone, the next episode starts it again."""
        with self._lock:
            if self._server is not None and not self._server.is_running():
                self._server.release()
                self._server, self._address = None, None

    # -- episodes ----------------------------------------------------------------------
    def run_episode(self, db_task: DbTask, policy: Actor, injected: int = 0) -> EpisodeResult:
        s = self.s
        info = {"agent": self.agent, "answer_type": db_task.answer_type, "table": db_task.table,
                "skills": list(db_task.skills), "memories_injected": injected}
        self.note_task_file(info, db_task.key)
        errors: list[str] = []
        outcome = None
        try:
            with EpisodeDatabase(self.address(), db_task, s.statement_timeout_s, s.max_result_rows,
                                 s.episode_user_host, s.mysql8_compat) as db:
                info["database"] = db.name
                outcome = play(db, db_task, policy, s.max_steps, s.observation_max_chars)
        except (SandboxError, ServerError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            self._forget_dead_server()
        except Exception as exc:  # a failure of the env ends this episode, not the run
            log.exception("Lifelong-DB episode %s failed", db_task.key)
            errors.append(f"{type(exc).__name__}: {exc}")
        if outcome is None:
            return lifelong_data.env_error_result(errors, info)
        if errors:  # the episode ran but cleaning up failed: its verdict stands, the error is kept
            info["cleanup_error"] = True
        info.update(final_answer=outcome.final_answer, table_hash=outcome.table_hash,
                    sql_errors=outcome.sql_errors, timeouts=outcome.timeouts, seconds=round(outcome.seconds, 3),
                    truncated=outcome.final_answer is None and len(outcome.turns) >= s.max_steps)
        return EpisodeResult(success=outcome.success, reward=1.0 if outcome.success else 0.0,
                             steps=len(outcome.turns), transcript=outcome.steps(),
                             errors=outcome.errors + errors, info=info,
                             outcome=SHARED[outcome.outcome], outcome_detail=outcome.outcome,
                             memory_trajectory=memory_trajectory(db_task, outcome.turns, s.prompt_rows, s.with_example,
                                                                 agent_failed=outcome.outcome == LLM_ERROR))

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                try:
                    self._server.release()
                except ServerError as exc:
                    log.warning("stopping the managed MariaDB server failed: %s", exc)
                self._server = None
                self._address = None
