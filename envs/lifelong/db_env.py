"""The Lifelong-DB env: LifelongAgentBench's MySQL tasks on a real server, one private
database per episode; an LLM agent ("react") or the ground-truth oracle ("gold")."""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Iterable, Sequence

from memrl.records import EpisodeResult, RetrievedMemory, Task

from . import loader
from .db_data import LITERAL_FIELDS, DbTask, check_row
from .db_episode import ENV_ERROR, GoldPolicy, LLMPolicy, Policy, play
from .db_sandbox import EpisodeDatabase, SandboxError
from .db_server import MariaDBServer, ServerAddress, ServerError
from .db_settings import LifelongDbSettings

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

log = logging.getLogger(__name__)

AGENTS = ("react", "gold")
TASK_PREFIX = "db"


class LifelongDbEnv(loader.TaskListing):
    """LifelongAgentBench DB tasks behind the Env seam.

    Args (the `env=lifelong_db` settings, see ``LifelongDbSettings``):
        data_path: the benchmark's DB JSON (keyed by sample index) or ``hf://<repo>/<config>``.
        split: all | train | validation (train/validation from the split file).
        agent: "react" (an LLM) or "gold" (runs the ground-truth SQL; no LLM).
        max_steps: turns per episode (SQL statements, unreadable replies and the answer).
        server: "managed" (a private MariaDB in ``server_dir``, started on first use and
            stopped at close when no other process uses it) or "external" (host/port or
            socket, ``user``, password from the environment variable ``password_env``).
        statement_timeout_s, max_result_rows, observation_max_chars: per-statement limits.
        mysql8_compat: on MariaDB, rewrite statements to give MySQL 8's results (db_dialect).
        prompt_rows: table rows shown in the prompt (None: all, as the benchmark).
    """

    name = "lifelong_db"
    Settings = LifelongDbSettings  # the schema `memrl.config.validate` checks env=lifelong_db with
    TASK_PREFIX, LABEL, LITERAL_FIELDS = TASK_PREFIX, "Lifelong-DB", LITERAL_FIELDS
    check_row = staticmethod(check_row)
    make_task = staticmethod(DbTask.from_row)

    def __init__(
        self,
        data_path: str,
        agent: str = "react",
        hub_split: str = "train",
        split: str = "all",
        split_file: str | None = None,
        val_fraction: float = 0.3,
        split_seed: int = 0,
        max_steps: int = 15,
        max_tasks: int | None = None,
        task_ids: Iterable[str] | None = None,
        server: str = "managed",
        server_dir: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        socket: str | None = None,
        user: str = "root",
        password_env: str | None = None,
        episode_user_host: str = "%",
        mysql8_compat: bool = True,
        statement_timeout_s: float = 10.0,
        max_result_rows: int = 1000,
        observation_max_chars: int = 3000,
        prompt_rows: int | None = None,
        with_example: bool = True,
        max_tokens: int = 256,
        cache_dir: str | None = None,
    ) -> None:
        if agent not in AGENTS:
            raise ValueError(f"unknown Lifelong-DB agent {agent!r}; expected one of {AGENTS}")
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if server not in ("managed", "external"):
            raise ValueError(f"server must be 'managed' or 'external', not {server!r}")
        if server == "managed" and not server_dir:
            raise ValueError("a managed server needs server_dir")
        self.data_path = str(data_path)
        self.agent = agent
        self.hub_split = hub_split
        self.split = split
        self.split_file = split_file
        self.val_fraction = val_fraction
        self.split_seed = split_seed
        self.max_steps = int(max_steps)
        self.max_tasks = max_tasks
        self.task_ids = list(task_ids) if task_ids is not None else None
        self.server_kind = server
        self.server_dir = server_dir
        self.port = port
        self.host, self.socket, self.user, self.password_env = host, socket, user, password_env
        self.episode_user_host = episode_user_host
        self.mysql8_compat = mysql8_compat
        self.statement_timeout_s = statement_timeout_s
        self.max_result_rows = max_result_rows
        self.observation_max_chars = observation_max_chars
        self.prompt_rows = prompt_rows
        self.with_example = with_example
        self.max_tokens = max_tokens
        self.cache_dir = cache_dir
        self.skipped: list[loader.Skipped] = []
        self.fingerprint: str | None = None
        self._tasks: dict[str, DbTask] | None = None
        self._lock = threading.Lock()
        self._server: MariaDBServer | None = None
        self._address: ServerAddress | None = None

    # -- tasks -------------------------------------------------------------------------
    def tasks(self) -> list[Task]:
        out = []
        for key, t in self._load().items():
            payload = {"key": key, "answer_type": t.answer_type, "table": t.table, "skills": list(t.skills)}
            out.append(Task(task_id=loader.make_task_id(TASK_PREFIX, key), intent=t.instruction, payload=payload))
        return out

    # -- the server --------------------------------------------------------------------
    def address(self) -> ServerAddress:
        """The administrator address; a managed server is started (or joined) on first use."""
        with self._lock:
            if self._address is None:
                if self.server_kind == "managed":
                    self._server = MariaDBServer(self.server_dir, port=self.port)
                    self._address = self._server.acquire()
                else:
                    password = os.environ.get(self.password_env, "") if self.password_env else ""
                    self._address = ServerAddress(socket=self.socket, host=self.host, port=self.port,
                                                  user=self.user, password=password)
            return self._address

    def _forget_dead_server(self) -> None:
        """After a failed episode: if the managed server has gone, the next episode starts it again."""
        with self._lock:
            if self._server is not None and not self._server.is_running():
                self._server.release()
                self._server, self._address = None, None

    # -- episodes ----------------------------------------------------------------------
    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        db_task = self.task(task.task_id)
        policy: Policy
        if self.agent == "gold":
            policy = GoldPolicy()
        else:
            if llm is None:
                raise ValueError("the Lifelong-DB react agent needs an LLM")
            policy = LLMPolicy(llm, memories, self.max_tokens, self.prompt_rows, self.with_example)
        return self.run_episode(db_task, policy, injected=0 if self.agent == "gold" else len(memories))

    def run_episode(self, db_task: DbTask, policy: Policy, injected: int = 0) -> EpisodeResult:
        info = {"agent": self.agent, "answer_type": db_task.answer_type, "table": db_task.table,
                "skills": list(db_task.skills), "memories_injected": injected}
        errors: list[str] = []
        outcome = None
        try:
            with EpisodeDatabase(self.address(), db_task, self.statement_timeout_s, self.max_result_rows,
                                 self.episode_user_host, self.mysql8_compat) as db:
                info["database"] = db.name
                outcome = play(db, db_task, policy, self.max_steps, self.observation_max_chars)
        except (SandboxError, ServerError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            self._forget_dead_server()
        except Exception as exc:  # a failure of the env ends this episode, not the run
            log.exception("Lifelong-DB episode %s failed", db_task.key)
            errors.append(f"{type(exc).__name__}: {exc}")
        if outcome is None:
            info["outcome"] = ENV_ERROR
            return EpisodeResult(success=False, reward=0.0, steps=0, errors=errors, info=info)
        if errors:  # the episode ran but cleaning up failed: its verdict stands, the error is kept
            info["cleanup_error"] = True
        info.update(outcome=outcome.outcome, final_answer=outcome.final_answer, table_hash=outcome.table_hash,
                    sql_errors=outcome.sql_errors, timeouts=outcome.timeouts, seconds=round(outcome.seconds, 3),
                    truncated=outcome.final_answer is None and len(outcome.turns) >= self.max_steps)
        return EpisodeResult(success=outcome.success, reward=1.0 if outcome.success else 0.0,
                             steps=len(outcome.turns), transcript=outcome.steps(),
                             errors=outcome.errors + errors, info=info)

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                try:
                    self._server.release()
                except ServerError as exc:
                    log.warning("stopping the managed MariaDB server failed: %s", exc)
                self._server = None
                self._address = None
