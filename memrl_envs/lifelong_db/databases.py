"""One episode's private database on a shared MySQL-compatible server.

``EpisodeDatabase`` (a context manager) creates a uniquely named database and an account
that may use that database and nothing else, creates and fills the task's table, runs the
agent's SQL as that account with a statement time limit and a cap on rows read back, computes
the table hash for scoring, and on exit — always, errors included — drops the database and the
account. The administrator connection (``ServerAddress``) needs CREATE USER, GRANT OPTION and
CREATE/DROP on databases; on the managed MariaDB it is root over the private socket.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any

import pymysql
import pymysql.cursors

from memrl_envs.lifelong_db.data import DbTask
from memrl_envs.lifelong_db.dialect import ARIA_TEMP_TABLES, to_mariadb
from memrl_envs.lifelong_db.scoring import quote_ident, table_hash_sql
from memrl_envs.lifelong_db.server import DB_PREFIX, ServerAddress

_TIMEOUT_CODES = {1969, 3024, 1317}  # MariaDB max_statement_time, MySQL max_execution_time, interrupted
_AGENT_BROKE_TABLE = {1049, 1051, 1054, 1146}  # unknown database / table / column
_WATCHDOG_GRACE_S = 2.0  # the watchdog kills a statement this long after the server's own limit
_READ_TIMEOUT_S = 120.0  # last resort: a server that stops answering


class SandboxError(RuntimeError):
    """The episode database could not be set up, read or removed (an env failure)."""


@dataclass
class ExecResult:
    """What one statement did. ``text`` is the full rendering the agent sees (before the
    env shortens it): the rows as a Python list of tuples, 'OK, n rows affected.', or the
    server's error."""

    text: str
    ok: bool
    rows: list[tuple] | None = None
    rowcount: int = 0
    error_code: int | None = None
    timed_out: bool = False
    rows_capped: bool = False


def split_statements(sql: str) -> list[str]:
    """Split on semicolons outside quotes, backticks and comments; empty pieces dropped."""
    out, buf, quote, i = [], [], None, 0
    while i < len(sql):
        ch = sql[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and quote != "`" and i + 1 < len(sql):
                buf.append(sql[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
            buf.append(ch)
        elif ch == "-" and sql.startswith("-- ", i) or ch == "#":
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
            continue
        elif ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = len(sql) if end < 0 else end + 2
            buf.append(" ")
            continue
        elif ch == ";":
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if s.strip()]


def _close_quietly(conn: Any) -> None:
    """Close a connection that may be gone already (its server side is dropped anyway)."""
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass


def format_error(exc: BaseException) -> tuple[str, int | None]:
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):
        return f"Error {args[0]}: {args[1]}", args[0]
    return f"Error: {exc}", None


class EpisodeDatabase:
    """A fresh database + account for one episode; see the module docstring.

    Args:
        admin: the administrator's address.
        task: the task whose table is created and filled.
        statement_timeout_s: per-statement limit (server side, plus a client-side backstop).
        max_result_rows: rows read back per statement; more are cut off (the query is killed).
        user_host: host part of the episode account ('%': any; the managed server only
            listens on its socket and loopback).
        mysql8_compat: on MariaDB, rewrite each statement so that it gives MySQL 8's result
            (see ``db_dialect``); ignored on MySQL.
    """

    def __init__(self, admin: ServerAddress, task: DbTask, statement_timeout_s: float = 10.0,
                 max_result_rows: int = 1000, user_host: str = "%", mysql8_compat: bool = True) -> None:
        self.admin_address = admin
        self.task = task
        self.statement_timeout_s = float(statement_timeout_s)
        self.max_result_rows = int(max_result_rows)
        self.user_host = user_host
        self.mysql8_compat = mysql8_compat
        token = secrets.token_hex(6)
        self.name = f"{DB_PREFIX}{token}"
        self.user = self.name
        self._password = secrets.token_urlsafe(18)
        self._admin: pymysql.connections.Connection | None = None
        self._agent: pymysql.connections.Connection | None = None
        self.flavor = "mariadb"
        self.statements = 0
        self.timeouts = 0

    # -- set-up / tear-down --------------------------------------------------------------
    def __enter__(self) -> "EpisodeDatabase":
        try:
            self._setup()
        except BaseException:
            try:
                self.close()
            except SandboxError:
                pass  # the set-up error is the one worth reporting
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _admin_conn(self) -> pymysql.connections.Connection:
        if self._admin is None or not self._admin.open:
            try:
                self._admin = pymysql.connect(**self.admin_address.connect_kwargs(), autocommit=True,
                                              charset="utf8mb4", connect_timeout=10,
                                              read_timeout=60, write_timeout=60)
            except pymysql.err.MySQLError as exc:
                raise SandboxError(f"cannot connect to the database server as administrator: "
                                   f"{format_error(exc)[0]}") from exc
        return self._admin

    def _setup(self) -> None:
        task = self.task
        try:
            conn = self._admin_conn()
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                version = str(cur.fetchone()[0])
                self.flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
                cur.execute(f"CREATE DATABASE {quote_ident(self.name)} CHARACTER SET utf8mb4")
                cur.execute("CREATE USER %s@%s IDENTIFIED BY %s", (self.user, self.user_host, self._password))
                cur.execute(f"GRANT ALL PRIVILEGES ON {quote_ident(self.name)}.* TO %s@%s", (self.user, self.user_host))
                cols = ", ".join(f"{quote_ident(c.name)} {c.type}" for c in task.columns)
                cur.execute(f"CREATE TABLE {quote_ident(self.name)}.{quote_ident(task.table)} ({cols})")
                if task.rows:
                    names = ", ".join(quote_ident(c.name) for c in task.columns)
                    one = "(" + ", ".join(["%s"] * len(task.columns)) + ")"
                    # every value goes in as a string literal, as the benchmark inserts them
                    values = [str(v) for row in task.rows for v in row]
                    cur.execute(f"INSERT INTO {quote_ident(self.name)}.{quote_ident(task.table)} ({names}) "
                                f"VALUES {', '.join([one] * len(task.rows))}", values)
        except pymysql.err.MySQLError as exc:
            raise SandboxError(f"setting up table {task.table!r} failed: {format_error(exc)[0]}") from exc
        self._agent = self._connect_agent()

    def _connect_agent(self) -> pymysql.connections.Connection:
        kw = self.admin_address.connect_kwargs()
        kw.update(user=self.user, password=self._password)
        try:
            conn = pymysql.connect(**kw, database=self.name, autocommit=True, charset="utf8mb4",
                                   connect_timeout=10, read_timeout=self.statement_timeout_s + _READ_TIMEOUT_S,
                                   write_timeout=self.statement_timeout_s + _READ_TIMEOUT_S)
        except pymysql.err.MySQLError as exc:
            raise SandboxError(f"cannot connect as the episode account: {format_error(exc)[0]}") from exc
        with conn.cursor() as cur:
            if self.flavor == "mariadb":
                cur.execute(f"SET SESSION max_statement_time = {self.statement_timeout_s:.3f}")
                if self.mysql8_compat:
                    cur.execute(f"SET SESSION {ARIA_TEMP_TABLES}")
            else:
                cur.execute(f"SET SESSION max_execution_time = {int(self.statement_timeout_s * 1000)}")
        return conn

    def close(self) -> None:
        """Close the agent's connection, drop the database and the account (idempotent)."""
        _close_quietly(self._agent)
        self._agent = None
        errors = []
        try:
            conn = self._admin_conn()
            with conn.cursor() as cur:
                for sql, args in ((f"DROP DATABASE IF EXISTS {quote_ident(self.name)}", None),
                                  ("DROP USER IF EXISTS %s@%s", (self.user, self.user_host))):
                    try:
                        cur.execute(sql, args)
                    except pymysql.err.MySQLError as exc:
                        errors.append(format_error(exc)[0])
        except (SandboxError, pymysql.err.MySQLError) as exc:
            errors.append(str(exc))
        finally:
            _close_quietly(self._admin)
            self._admin = None
        if errors:
            raise SandboxError(f"cleaning up {self.name} failed: {'; '.join(errors)}")

    # -- the agent's statements ----------------------------------------------------------
    def execute(self, sql: str) -> ExecResult:
        """Run the agent's SQL (several statements run in turn, as the benchmark does; the
        last one's result is shown, or the first error)."""
        statements = split_statements(sql)
        if not statements:
            return ExecResult(text="Error: empty SQL statement", ok=False)
        result = ExecResult(text="", ok=True)
        for stmt in statements:
            result = self._execute_one(stmt)
            if not result.ok:
                break
        return result

    def _execute_one(self, stmt: str) -> ExecResult:
        if self._agent is None or not self._agent.open:
            self._agent = self._connect_agent()
        conn = self._agent
        self.statements += 1
        if self.mysql8_compat and self.flavor == "mariadb":
            stmt = to_mariadb(stmt)
        thread_id = conn.thread_id()
        # the server's own limit can be lifted by the agent (SET SESSION ...): a watchdog
        # kills the statement from outside a little later
        killed = threading.Event()
        watchdog = threading.Timer(self.statement_timeout_s + _WATCHDOG_GRACE_S, self._kill_query,
                                   args=(thread_id, killed))
        watchdog.daemon = True
        watchdog.start()
        cur = conn.cursor(pymysql.cursors.SSCursor)
        try:
            cur.execute(stmt)
            if cur.description is None:
                n = max(cur.rowcount, 0)
                cur.close()
                conn.commit()
                return ExecResult(text=f"OK, {n} row{'s' if n != 1 else ''} affected.", ok=True, rowcount=n)
            rows = [tuple(r) for r in cur.fetchmany(self.max_result_rows + 1)]
            capped = len(rows) > self.max_result_rows
            if capped:
                rows = rows[: self.max_result_rows]
                self._kill_query(thread_id, killed)  # stop the server sending the rest
            try:
                cur.close()  # reads what is left in flight (ends at once after the kill)
            except pymysql.err.MySQLError:
                pass
            conn.commit()
            if killed.is_set() and not capped:  # e.g. SLEEP() returns normally when killed
                self.timeouts += 1
                return ExecResult(text=f"Error: the statement was stopped after {self.statement_timeout_s:g} s "
                                       "(time limit).", ok=False, timed_out=True)
            text = repr(rows)
            if capped:
                text += f" [only the first {self.max_result_rows} rows were read]"
            return ExecResult(text=text, ok=True, rows=rows, rowcount=len(rows), rows_capped=capped)
        except pymysql.err.MySQLError as exc:
            text, code = format_error(exc)
            timed_out = code in _TIMEOUT_CODES or killed.is_set()
            if timed_out:
                self.timeouts += 1
                text = (f"Error: the statement was stopped after {self.statement_timeout_s:g} s "
                        f"(time limit). ({text})")
            if not conn.open:
                self._agent = None  # lost: the next statement reconnects
            return ExecResult(text=text, ok=False, error_code=code, timed_out=timed_out)
        finally:
            watchdog.cancel()

    def _kill_query(self, thread_id: int, flag: threading.Event) -> None:
        """Stop the statement running on the agent's connection (its own admin connection:
        this runs on the watchdog's thread)."""
        flag.set()
        try:
            conn = pymysql.connect(**self.admin_address.connect_kwargs(), autocommit=True, connect_timeout=10)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"KILL QUERY {int(thread_id)}")
            finally:
                conn.close()
        except pymysql.err.MySQLError:
            pass  # the statement ended meanwhile, or the server is gone (the next call says so)

    # -- scoring -------------------------------------------------------------------------
    def table_hash(self) -> str | None:
        """The benchmark's hash of the task's table as it is now. Ends the agent's session
        first (its locks and any open transaction go with it). None when the table is empty,
        or was dropped or reshaped by the agent (so it cannot match)."""
        _close_quietly(self._agent)
        self._agent = None
        task = self.task
        sql = table_hash_sql(task.table, [c.name for c in task.columns])
        try:
            conn = self._admin_conn()
            with conn.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = 30")
                cur.execute("SET SESSION group_concat_max_len = 1024")  # MySQL's default
                try:
                    cur.execute(f"USE {quote_ident(self.name)}")
                    cur.execute(sql)
                except pymysql.err.MySQLError as exc:
                    if format_error(exc)[1] in _AGENT_BROKE_TABLE:
                        return None
                    raise
                row = cur.fetchone()
        except pymysql.err.MySQLError as exc:
            raise SandboxError(f"table hash failed: {format_error(exc)[0]}") from exc
        return None if row is None or row[0] is None else str(row[0])
