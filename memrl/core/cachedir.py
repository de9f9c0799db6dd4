"""Where memrl keeps machine-wide files, and what is there.

One home: `default_cache_dir()` = `$MEMRL_CACHE_DIR`, else `~/.cache/memrl`. The config's
`paths.cache_dir` resolves to it (`${memrl.cache_dir:}`), every cache path in configs/ is
built from `paths.cache_dir`, and code that gets no path from the config falls back to the
same folder. Run directories never hold caches, so deleting `runs/` (`make clean-runs`) never
deletes paid model responses, embeddings or the database server's data.

What lives there (`memrl cache stats` lists it, `memrl cache clear TARGET --yes` deletes one):

| target          | path                         | what                                               |
|-----------------|------------------------------|----------------------------------------------------|
| llm             | llm.sqlite                   | model responses (API answers that were paid for)   |
| embeddings      | embeddings.sqlite            | text embeddings, per embedding model               |
| models          | models/                      | the embedded model's GGUF, assembled from PyPI     |
| alfworld        | alfworld_games_v1.json, alfworld_sas_v1/ | ALFWorld game facts, planner translations |
| bigcodebench    | bigcodebench/                | split files, the sandbox's matplotlib font cache   |
| lifelong-splits | lifelong_splits/             | Lifelong train/validation split files              |
| rootfs          | rootfs/                      | Lifelong-OS root file systems (`make rootfs`)      |
| mariadb         | mariadb/                     | the Lifelong-DB server's data (`$MEMRL_DB_DIR` overrides) |
| mem0            | mem0/                        | mem0's own settings file                           |
| bench-memory    | bench_memory/                | scripts/bench_memory.py's embedded corpora         |
| bench-throughput | bench_throughput/           | scripts/bench_throughput.py's recorded expert trajectories |

Moving an older checkout's `runs/.cache` here: stop its database server first
(`python -m memrl_envs.lifelong_db.server down --dir runs/.cache/mariadb`), then
`mkdir -p ~/.cache/memrl && mv runs/.cache/* ~/.cache/memrl/`. The cache keys do not depend
on the folder, so every cached response and embedding keeps hitting. (Or keep the old folder:
`export MEMRL_CACHE_DIR=$PWD/runs/.cache`.)
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ENV_VAR = "MEMRL_CACHE_DIR"
DB_ENV_VAR = "MEMRL_DB_DIR"
LLM_CACHE = "llm.sqlite"
EMBEDDING_CACHE = "embeddings.sqlite"
MODELS_DIR = "models"
DB_DIR = "mariadb"
# the managed server's pid file in its folder (memrl_envs.lifelong_db.server writes it): how
# `memrl cache clear mariadb` sees a server still running there
DB_PID_FILE = "mysqld.pid"
OLD_CACHE_DIR = Path("runs") / ".cache"  # where caches lived before (relative to the checkout)


def default_cache_dir() -> Path:
    """Where memrl keeps machine-wide files: `$MEMRL_CACHE_DIR`, else `~/.cache/memrl`."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "memrl"


def db_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The managed MariaDB server's folder: `$MEMRL_DB_DIR`, else `<cache dir>/mariadb`."""
    if os.environ.get(DB_ENV_VAR):
        return Path(os.environ[DB_ENV_VAR]).expanduser()
    return (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / DB_DIR


def register_config_resolvers() -> None:
    """`${memrl.cache_dir:}` and `${memrl.db_dir:<cache dir>}` for configs/ (registered when
    the memrl package is imported, i.e. before any config of a run is resolved)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("memrl.cache_dir", lambda: str(default_cache_dir()), replace=True)
    OmegaConf.register_new_resolver("memrl.db_dir", lambda root=None: str(db_dir(root)), replace=True)


# ------------------------------------------------------------------------------ inventory
def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += (Path(root) / f).lstat().st_size
            except OSError:
                pass
    return total


def _sqlite_rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def _llm_entries(paths: list[Path]) -> str:
    db = next(p for p in paths if p.name == LLM_CACHE)
    return f"{_sqlite_rows(db, 'SELECT COUNT(*) FROM responses')[0][0]} responses"


def _embedding_entries(paths: list[Path]) -> str:
    db = next(p for p in paths if p.name == EMBEDDING_CACHE)
    rows = _sqlite_rows(db, "SELECT model, COUNT(*) FROM embeddings GROUP BY model ORDER BY model")
    return ", ".join(f"{n} x {model}" for model, n in rows) or "0 embeddings"


def _files_entries(paths: list[Path]) -> str:
    n = sum(1 if p.is_file() else sum(len(f) for _r, _d, f in os.walk(p)) for p in paths)
    return f"{n} files"


@dataclass(frozen=True)
class Cache:
    """One named cache: the entries of the cache folder it owns."""

    target: str
    names: tuple[str, ...]  # file or folder names in the cache folder (sqlite side files follow)
    what: str
    entries: Callable[[list[Path]], str] = _files_entries

    def paths(self, root: Path) -> list[Path]:
        out = []
        for name in self.names:
            p = root / name
            if p.exists() or p.is_symlink():
                out.append(p)
            if name.endswith(".sqlite"):  # WAL mode's side files
                out += [q for q in (root / f"{name}-wal", root / f"{name}-shm") if q.exists()]
        return out


CACHES: tuple[Cache, ...] = (
    Cache("llm", (LLM_CACHE,), "model responses (API answers that were paid for)", _llm_entries),
    Cache("embeddings", (EMBEDDING_CACHE,), "text embeddings, per embedding model", _embedding_entries),
    Cache("models", (MODELS_DIR,), "the embedded model's GGUF, assembled from its PyPI package"),
    Cache("alfworld", ("alfworld_games_v1.json", "alfworld_sas_v1"),
          "ALFWorld game facts and cached planner translations"),
    Cache("bigcodebench", ("bigcodebench",), "BigCodeBench split files and the sandbox font cache"),
    Cache("lifelong-splits", ("lifelong_splits",), "Lifelong train/validation split files"),
    Cache("rootfs", ("rootfs",), "Lifelong-OS root file systems (rebuilt by `make rootfs`, needs root)"),
    Cache(DB_DIR, (DB_DIR,), "the Lifelong-DB MariaDB server's data directory"),
    Cache("mem0", ("mem0",), "mem0's own settings file"),
    Cache("bench-memory", ("bench_memory",), "scripts/bench_memory.py's embedded corpora"),
    Cache("bench-throughput", ("bench_throughput",), "scripts/bench_throughput.py's recorded expert trajectories"),
)


def by_target() -> dict[str, Cache]:
    return {c.target: c for c in CACHES}


def inventory(root: Path | None = None) -> list[dict[str, Any]]:
    """What the cache folder holds: one row per named cache present, then one per entry no
    named cache owns (target = its file name)."""
    root = Path(root) if root is not None else default_cache_dir()
    rows: list[dict[str, Any]] = []
    owned: set[Path] = set()
    for c in CACHES:
        paths = c.paths(root)
        if not paths:
            continue
        owned |= set(paths)
        try:
            entries = c.entries(paths)
        except (sqlite3.Error, StopIteration, OSError) as exc:
            entries = f"unreadable ({type(exc).__name__}: {exc})"
        rows.append({"target": c.target, "what": c.what, "paths": [str(p) for p in paths],
                     "bytes": sum(_size(p) for p in paths), "entries": entries})
    if root.is_dir():
        for p in sorted(root.iterdir()):
            if p not in owned:
                rows.append({"target": p.name, "what": "not a memrl cache", "paths": [str(p)],
                             "bytes": _size(p), "entries": _files_entries([p])})
    return rows


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


class CacheError(ValueError):
    """A clear request that cannot be honoured (unknown target, a live server)."""


def db_server_live(path: Path) -> bool:
    """A server may be using the folder: its pid file names a live process."""
    try:
        text = (Path(path) / DB_PID_FILE).read_text().strip()
    except OSError:
        return False
    return text.isdigit() and Path(f"/proc/{text}").exists()


def clear(target: str, root: Path | None = None,
          is_live: Callable[[Path], bool] | None = None) -> list[Path]:
    """Delete one cache (or one unowned entry) of the cache folder; returns what was deleted.
    The database folder is refused while a server runs in it (`is_live`)."""
    root = Path(root) if root is not None else default_cache_dir()
    rows = {r["target"]: r for r in inventory(root)}
    if target not in rows:
        known = ", ".join(sorted(rows)) or "nothing"
        raise CacheError(f"{target!r}: not in {root} (it holds: {known})")
    paths = [Path(p) for p in rows[target]["paths"]]
    if target == DB_DIR and is_live is not None and any(is_live(p) for p in paths):
        raise CacheError(f"a MariaDB server is running in {paths[0]}; stop it first "
                         f"(python -m memrl_envs.lifelong_db.server down --dir {paths[0]})")
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    return paths
