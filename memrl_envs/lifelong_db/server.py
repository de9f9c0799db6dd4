"""A private MariaDB server for the Lifelong-DB env: its own data directory, a unix socket
(and optionally a loopback TCP port), started and stopped by the project, never the system
service.

Three ways to use it:

* context manager: ``with MariaDBServer(dir) as server: connect(server.address)`` — holds a
  lease while inside, and stops the server on exit unless another holder remains;
* pytest: a session fixture does the same (see ``tests/test_lifelong_db*.py``);
* command line, for ``make db-up`` / ``make db-down``::

      python -m memrl_envs.lifelong_db.server up     [--dir DIR] [--port 3307]
      python -m memrl_envs.lifelong_db.server status [--dir DIR]
      python -m memrl_envs.lifelong_db.server down   [--dir DIR]

  (DIR: $MEMRL_DB_DIR, else <cache folder>/mariadb, as `env.server_dir`; memrl/core/cachedir.py)

``up`` on a directory whose server is already running reuses it (it prints the same address),
so any number of runs can share one server; every episode works in its own database under its
own account (see ``db_sandbox``). Users hold leases (files under ``leases/``; a lease whose
process has died does not count): ``release`` stops the server only when the last lease goes,
``up`` holds one until ``down``, and ``down`` stops the server whoever holds it.
The server's settings follow MySQL 8's defaults where they
change results (``sql_mode``, ``group_concat_max_len``, utf8mb4), and trade durability for
speed (the data is disposable).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

from memrl.core.cachedir import DB_PID_FILE
from memrl.core.lock import pid_alive

# MySQL 8.0's default sql_mode; MariaDB accepts every one of these flags.
MYSQL8_SQL_MODE = ("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                   "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION")

DB_PREFIX = "llb_"  # episode databases and accounts are named DB_PREFIX + 12 hex digits
_EPISODE_NAME = re.compile(DB_PREFIX + r"[0-9a-f]{12}")
SOCKET_NAME = "mysqld.sock"
PID_NAME = DB_PID_FILE  # memrl.core.cachedir: `memrl cache clear` reads it too
LOG_NAME = "error.log"
DATA_NAME = "data"
INFO_NAME = "server.json"  # what `up` started: port, socket, binary (read by `status`)
_MAX_SOCKET_PATH = 100      # sun_path is 108 bytes; keep a margin

# Options for both the bootstrap and the server. Small InnoDB files; nothing is fsynced.
_COMMON_OPTIONS = (
    "--innodb-log-file-size=8M",
    "--innodb-data-file-path=ibdata1:12M:autoextend",
)
_SERVER_OPTIONS = (
    "--innodb-buffer-pool-size=64M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    "--performance-schema=OFF",
    "--skip-name-resolve",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_unicode_520_ci",
    f"--sql-mode={MYSQL8_SQL_MODE}",
    "--group-concat-max-len=1024",  # MySQL's default (MariaDB's is 1M): the table hash uses it
    "--max-connections=200",
    "--local-infile=0",
    "--secure-file-priv=",  # replaced below by a folder inside the server dir
)


class ServerError(RuntimeError):
    """The server could not be installed, started, reached or stopped."""


@dataclass(frozen=True)
class ServerAddress:
    """How to reach a server as its administrator (root over the socket, or host:port)."""

    socket: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    user: str = "root"
    password: str = ""

    def connect_kwargs(self) -> dict:
        """Keyword arguments for ``pymysql.connect``."""
        kw: dict = {"user": self.user, "password": self.password}
        if self.socket:
            kw["unix_socket"] = self.socket
        else:
            kw["host"] = self.host
            kw["port"] = int(self.port or 3306)
        return kw


def find_binary(*names: str) -> str | None:
    """The first of ``names`` on PATH or in /usr/sbin (Debian puts mariadbd there)."""
    for name in names:
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
        if found:
            return found
    return None


_pid_alive = pid_alive  # one home: memrl.core.lock


def _is_server_process(pid: int) -> bool:
    """True when ``pid`` is alive and is a mariadbd/mysqld (guards against reused pids)."""
    if not _pid_alive(pid):
        return False
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return True  # no /proc: trust the pid file
    return comm in ("mariadbd", "mysqld")


class MariaDBServer:
    """One MariaDB server living in ``base_dir`` (data, socket, pid file, log).

    Args:
        base_dir: folder for everything the server owns; created if missing.
        port: also listen on 127.0.0.1:port (None: socket only, no networking).
        startup_timeout: seconds to wait for the server to accept connections.
        extra_args: more ``mariadbd`` options (appended last, so they win).
    """

    def __init__(self, base_dir: str | os.PathLike[str], port: int | None = None,
                 startup_timeout: float = 60.0, extra_args: Sequence[str] = ()) -> None:
        self.base_dir = Path(base_dir).expanduser().resolve()
        self.port = port
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)

    # -- paths -------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.base_dir / DATA_NAME

    @property
    def pid_file(self) -> Path:
        return self.base_dir / PID_NAME

    @property
    def log_file(self) -> Path:
        return self.base_dir / LOG_NAME

    @property
    def socket_path(self) -> str:
        """The socket inside ``base_dir``, or a short path in the temp folder when that is too
        long for a unix socket (derived from ``base_dir``, so every user of the dir agrees)."""
        inside = str(self.base_dir / SOCKET_NAME)
        if len(inside) <= _MAX_SOCKET_PATH:
            return inside
        digest = hashlib.sha256(str(self.base_dir).encode()).hexdigest()[:16]
        return str(Path(tempfile.gettempdir()) / f"memrl-mariadb-{digest}.sock")

    @property
    def address(self) -> ServerAddress:
        return ServerAddress(socket=self.socket_path)

    # -- state -------------------------------------------------------------------------
    def pid(self) -> int | None:
        try:
            text = self.pid_file.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def is_running(self) -> bool:
        """A live server process owns this directory and answers on its socket."""
        pid = self.pid()
        return pid is not None and _is_server_process(pid) and self._ping()

    def _ping(self) -> bool:
        import pymysql

        try:
            conn = pymysql.connect(**self.address.connect_kwargs(), connect_timeout=2)
        except pymysql.err.MySQLError:
            return False
        conn.close()
        return True

    def status(self) -> dict:
        info = {}
        try:
            info = json.loads((self.base_dir / INFO_NAME).read_text())
        except (OSError, ValueError):
            pass
        return {"dir": str(self.base_dir), "running": self.is_running(), "pid": self.pid(),
                "socket": self.socket_path, "port": info.get("port"), "log": str(self.log_file),
                "leases": self.live_leases() if self.base_dir.is_dir() else []}

    # -- lifecycle ---------------------------------------------------------------------
    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialises start/stop of this directory across processes."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with open(self.base_dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def install(self) -> None:
        """Create the data directory (system tables; root with an empty password, reachable
        only through this directory's socket and, if asked, loopback)."""
        if (self.data_dir / "mysql").is_dir():
            return
        tool = find_binary("mariadb-install-db", "mysql_install_db")
        if tool is None:
            raise ServerError("mariadb-install-db not found: install MariaDB "
                              "(apt-get install -y mariadb-server) or use env.server=external")
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)  # a half-made data dir from an interrupted install
        cmd = [tool, "--no-defaults", f"--datadir={self.data_dir}", "--auth-root-authentication-method=normal",
               "--skip-test-db", "--skip-name-resolve", *_COMMON_OPTIONS]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not (self.data_dir / "mysql").is_dir():
            raise ServerError(f"{tool} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")

    def command(self) -> list[str]:
        """The ``mariadbd`` command line for this directory."""
        binary = find_binary("mariadbd", "mysqld")
        if binary is None:
            raise ServerError("mariadbd not found: install MariaDB (apt-get install -y mariadb-server) "
                              "or use env.server=external")
        files = self.base_dir / "files"
        files.mkdir(exist_ok=True)
        opts = [o if o != "--secure-file-priv=" else f"--secure-file-priv={files}" for o in _SERVER_OPTIONS]
        cmd = [binary, "--no-defaults", f"--datadir={self.data_dir}", f"--socket={self.socket_path}",
               f"--pid-file={self.pid_file}", f"--log-error={self.log_file}", f"--tmpdir={self.base_dir}",
               *_COMMON_OPTIONS, *opts]
        if self.port is None:
            cmd.append("--skip-networking")
        else:
            cmd += [f"--port={int(self.port)}", "--bind-address=127.0.0.1"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        return cmd + list(self.extra_args)

    def start(self) -> ServerAddress:
        """Start the server unless one already runs in this directory; return its address."""
        with self._lock():
            return self._start_locked()

    def _start_locked(self) -> ServerAddress:
        if self.is_running():
            return self.address
        self._clear_stale()
        self.install()
        cmd = self.command()
        with open(self.base_dir / "stdout.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        self._wait_ready(proc)
        drop_episode_leftovers(self.address)  # a fresh server has no live episodes
        for old in self._lease_dir.glob("*.lease"):
            old.unlink(missing_ok=True)  # leases of a server that is gone
        (self.base_dir / INFO_NAME).write_text(json.dumps(
            {"port": self.port, "socket": self.socket_path, "pid": proc.pid, "command": cmd}, indent=1))
        return self.address

    # -- shared use: a server stays up while any process holds a lease on it -------------
    @property
    def _lease_dir(self) -> Path:
        path = self.base_dir / "leases"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _lease_path(self, owner: str | None) -> Path:
        return self._lease_dir / f"{owner or f'pid-{os.getpid()}-{id(self):x}'}.lease"

    def acquire(self, owner: str | None = None) -> ServerAddress:
        """Start or reuse the server and hold a lease on it (``owner`` None: this object in this
        process; "cli": the ``up`` command, released by ``down``)."""
        with self._lock():
            address = self._start_locked()
            self._lease_path(owner).write_text(str(os.getpid()))
            return address

    def live_leases(self) -> list[str]:
        """Leases whose holder is still alive (the cli lease always counts)."""
        alive = []
        for lease in self._lease_dir.glob("*.lease"):
            if lease.stem == "cli":
                alive.append(lease.stem)
                continue
            try:
                pid = int(lease.read_text().strip())
            except (OSError, ValueError):
                continue
            if _pid_alive(pid):
                alive.append(lease.stem)
            else:
                lease.unlink(missing_ok=True)
        return alive

    def release(self, owner: str | None = None) -> bool:
        """Drop this holder's lease; stop the server when no live lease is left. True when
        the server was stopped."""
        with self._lock():
            self._lease_path(owner).unlink(missing_ok=True)
            if self.live_leases():
                return False
            pid = self.pid()
            if pid is None or not _is_server_process(pid):
                return False
            self._terminate(pid)
            return True

    def _clear_stale(self) -> None:
        pid = self.pid()
        if pid is not None and _is_server_process(pid):
            # alive but not answering: give it a moment (it may be starting), then stop it
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self._ping():
                    return
                time.sleep(0.2)
            self._terminate(pid)
        for stale in (self.pid_file, Path(self.socket_path)):
            try:
                stale.unlink()
            except FileNotFoundError:
                pass

    def _wait_ready(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerError(f"mariadbd exited with {proc.returncode}; log tail:\n{self._log_tail()}")
            if Path(self.socket_path).exists() and self._ping():
                return
            time.sleep(0.1)
        proc.terminate()
        raise ServerError(f"mariadbd not ready after {self.startup_timeout:.0f} s; log tail:\n{self._log_tail()}")

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server of this directory whoever uses it (leases are cleared); False when
        none was running."""
        with self._lock():
            for lease in self._lease_dir.glob("*.lease"):
                lease.unlink(missing_ok=True)
            pid = self.pid()
            if pid is None or not _is_server_process(pid):
                return False
            self._terminate(pid, timeout)
            return True

    def _terminate(self, pid: int, timeout: float = 30.0) -> None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _pid_alive(pid):
            _reap(pid)
            time.sleep(0.1)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            _reap(pid)

    def __enter__(self) -> "MariaDBServer":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def drop_episode_leftovers(address: ServerAddress) -> int:
    """Drop the databases and accounts that episodes left behind (a killed run). Only safe
    when no episode is live on that server; returns how many databases were dropped."""
    import pymysql

    conn = pymysql.connect(**address.connect_kwargs(), autocommit=True, connect_timeout=10)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES")
            names = [r[0] for r in cur.fetchall() if _EPISODE_NAME.fullmatch(r[0])]
            cur.execute("SELECT User, Host FROM mysql.user")
            users = [(u, h) for u, h in cur.fetchall() if _EPISODE_NAME.fullmatch(u)]
            for name in names:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            for user, host in users:
                cur.execute("DROP USER IF EXISTS %s@%s", (user, host))
    finally:
        conn.close()
    return len(names)


def _reap(pid: int) -> None:
    """Collect our own child's exit status (no-op for a server another process started)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memrl_envs.lifelong_db.server",
                                     description="Start, stop or inspect the project's private MariaDB server.")
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--dir", default=None, help="the server's folder (data, socket, log); default "
                        "$MEMRL_DB_DIR, else <cache folder>/mariadb")
    parser.add_argument("--port", type=int, default=None, help="also listen on 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    from memrl.core.cachedir import db_dir
    from memrl.core.errors import cli_exit

    server = MariaDBServer(args.dir or db_dir(), port=args.port)

    def act() -> int:
        if args.action == "up":
            address = server.acquire("cli")
            print(json.dumps({"running": True, **asdict(address), "port": server.status()["port"]}))
        elif args.action == "down":
            print("stopped" if server.stop() else "not running")
        else:
            status = server.status()
            print(json.dumps(status))
            return 0 if status["running"] else 1
        return 0

    return cli_exit(act, ServerError, 2)


if __name__ == "__main__":
    sys.exit(main())
