"""Faster TextWorld PDDL games, same observations: caches for pure work TextWorld repeats.

Profiling an ALFWorld episode (see scripts/bench_throughput.py) showed where TextWorld spends
its time, all of it under the global TextWorld lock:

- every step re-derives the text of every admissible command; each derivation re-parses its
  template and conditions with TatSu (~60% of a step) and deep-copies the derivation context
  (entity infos, mappings) for every symbol (~35%);
- loading a game parses ALFWorld's grammar file with TatSu and translates its PDDL problem
  to SAS twice (plain and optimised); `reset` translates the same problem twice again
  (together ~95% of a reset).

`install()` (idempotent; called before the first game is built) removes the repetition:

1. TatSu parses (grammar file, command templates, conditions) are memoised by their input
   text; the cached parse tree is walked afresh on every call, so callers still get new
   objects they may mutate.
2. The derivation context is copied shallowly: the variables and mapping dicts are new (the
   derivation updates them), their values (entity infos, variables) are shared. ALFWorld's
   grammar only reads attributes of them (`{o.name}`, `{r.indefinite}`, ...).
3. PDDL → SAS translations are memoised by (domain, problem, optimise), as compressed SAS
   text: in a bounded in-memory LRU (a game's reset reuses its load's translation, a later
   epoch the first one's) and, once `set_disk_dir` names a folder, on disk (~20-50 KB per
   translation, two per game), so a new process skips the translation too. A hit rebuilds
   the parsed PDDL task (~5 ms; fresh objects, as a translation returns).
4. `reset` right after `load` reuses the game state `load` just built (an identical one,
   untouched since) instead of building it again.

Observations, admissible commands and outcomes are unchanged (tests/envs/alfworld/test_alfworld_speedups.py
plays games both ways and compares every step). Set MEMRL_ALFWORLD_SPEEDUPS=0 to play without.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import tempfile
import threading
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

ENV_SWITCH = "MEMRL_ALFWORLD_SPEEDUPS"
SAS_CACHE_ENTRIES = 1024  # ~20-50 KB each compressed: ~35 MB for ~512 games

SAS_DIR_NAME = "alfworld_sas_v1"

_installed = False
_install_lock = threading.Lock()
_sas_cache: "SasCache | None" = None
_disk_dir: Path | None = None


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def installed() -> bool:
    return _installed


def set_disk_dir(cache_dir: str | os.PathLike[str] | None) -> None:
    """Keep translations under `<cache_dir>/alfworld_sas_v1/` (None: memory only)."""
    global _disk_dir
    _disk_dir = Path(cache_dir) / SAS_DIR_NAME if cache_dir is not None else None
    if _sas_cache is not None:
        _sas_cache.disk_dir = _disk_dir


def sas_cache() -> "SasCache | None":
    """The installed translation cache (its hit/miss counters), if any."""
    return _sas_cache


def install() -> bool:
    """Patch TextWorld once per process; returns whether the speed-ups are active."""
    global _installed, _sas_cache
    if not enabled():
        return False
    with _install_lock:
        if _installed:
            return True
        import fast_downward
        import textworld.envs.pddl.logic as pddl_logic
        import textworld.envs.pddl.textgen as textgen
        import textworld.logic as logic

        logic._parse_and_convert = _memoised_parse(logic._PARSER, logic._ModelConverter)
        pddl_logic._parse_and_convert = _memoised_parse(pddl_logic._PARSER, pddl_logic._ModelConverter)
        textgen._parse_and_convert = _memoised_parse(textgen._PARSER, textgen._Converter)
        textgen.copy_context = _shallow_copy_context
        _sas_cache = SasCache(fast_downward.pddl2sas, SAS_CACHE_ENTRIES, _disk_dir)
        fast_downward.pddl2sas = _sas_cache
        _reuse_state_after_load()
        _installed = True
        return True


def _reuse_state_after_load() -> None:
    """PddlEnv.load builds the game's state (for the entity names) and reset builds an
    identical one from the same problem. Remember the one load built; a reset that finds it
    still in place (nothing stepped it) hands it to its own construction instead.

    The swap of `PddlState` in the module lasts only for that reset's call, which the
    TextWorld lock serialises (TextWorld is only ever called under it)."""
    import textworld.envs.pddl.logic as pddl_logic
    from textworld.envs.pddl.pddl import PddlEnv

    load, reset = PddlEnv.load, PddlEnv.reset
    state_cls = pddl_logic.PddlState

    def load_keeping_state(self: Any, filename_or_data: Any) -> None:
        load(self, filename_or_data)
        self._memrl_loaded_state = self._pddl_state

    def reset_reusing_state(self: Any) -> Any:
        fresh = self.__dict__.pop("_memrl_loaded_state", None)
        if fresh is None or fresh is not self._pddl_state:
            return reset(self)

        def state(downward_lib: Any, pddl_problem: str, logic: Any) -> Any:
            if downward_lib is fresh.downward_lib and pddl_problem == fresh.pddl_problem \
                    and logic is fresh._logic:
                return fresh
            return state_cls(downward_lib, pddl_problem, logic)

        pddl_logic.PddlState = state
        try:
            return reset(self)
        finally:
            pddl_logic.PddlState = state_cls

    PddlEnv.load = load_keeping_state
    PddlEnv.reset = reset_reusing_state


def _memoised_parse(parser: Any, converter: Callable[[], Any]) -> Callable[..., Any]:
    """`parser.parse(...)` remembered by its arguments; converted to objects on every call."""
    trees: dict[tuple[Any, ...], Any] = {}

    def parse_and_convert(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        tree = trees.get(key)
        if tree is None:
            tree = parser.parse(*args, **kwargs)
            trees[key] = tree  # a race only parses twice; the trees are equal
        return converter().walk(tree)

    return parse_and_convert


def _shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


class SasCache:
    """`pddl2sas(domain, problem, verbose=False, optimize=False)` with its SAS text remembered,
    compressed: in memory (bounded LRU) and in `disk_dir`. A hit rebuilds the parsed PDDL task
    (`parse_task`, a few ms: fresh objects, as a translation returns) and skips the
    translation. Counters: memory_hits, disk_hits, misses."""

    def __init__(self, translate: Callable[..., tuple[Any, str]], max_entries: int,
                 disk_dir: Path | None = None):
        self.translate = translate
        self.max_entries = max_entries
        self.disk_dir = disk_dir
        self._lru: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.memory_hits = 0
        self.disk_hits = 0
        self.misses = 0
        # PddlState asks for the plain and then the optimised translation of one problem and
        # keeps only the first's task: the second may get the same (unused) task object once.
        self._spare_task: tuple[str, Any] | None = None

    def _task(self, domain: str, problem: str, optimize: bool) -> Any:
        key = hashlib.sha256(f"{domain}\0{problem}".encode()).hexdigest()
        with self._lock:
            spare, self._spare_task = self._spare_task, None
        if optimize and spare is not None and spare[0] == key:
            return spare[1]
        task = parse_task(domain, problem)
        if not optimize:
            with self._lock:
                self._spare_task = (key, task)
        return task

    def __call__(self, domain: str, problem: str, verbose: bool = False,
                 optimize: bool = False) -> tuple[Any, str]:
        if verbose:  # the caller wants the translator's log: translate
            return self.translate(domain, problem, verbose=verbose, optimize=optimize)
        key = hashlib.sha256(f"{bool(optimize)}\0{domain}\0{problem}".encode()).hexdigest()
        with self._lock:
            blob = self._lru.get(key)
            if blob is not None:
                self._lru.move_to_end(key)
                self.memory_hits += 1
        if blob is None:
            blob = self._read(key)
            if blob is not None:
                with self._lock:
                    self.disk_hits += 1
        if blob is not None:
            try:
                sas = zlib.decompress(blob).decode("utf-8")
            except (zlib.error, UnicodeDecodeError):  # a damaged file: translate again
                sas = None
            if sas is not None:
                self._remember(key, blob)
                return self._task(domain, problem, bool(optimize)), sas
        result = self.translate(domain, problem, verbose=verbose, optimize=optimize)
        blob = zlib.compress(result[1].encode("utf-8"), 6)
        with self._lock:
            self.misses += 1
        self._remember(key, blob)
        self._write(key, blob)
        return result

    def clear_memory(self) -> None:
        """Forget the in-memory translations (benchmarks of a cold start)."""
        with self._lock:
            self._lru.clear()

    def _remember(self, key: str, blob: bytes) -> None:
        with self._lock:
            self._lru[key] = blob
            self._lru.move_to_end(key)
            while len(self._lru) > self.max_entries:
                self._lru.popitem(last=False)

    def _path(self, key: str) -> Path | None:
        return self.disk_dir / key[:2] / f"{key}.sas.z" if self.disk_dir is not None else None

    def _read(self, key: str) -> bytes | None:
        path = self._path(key)
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError:
            return None

    def _write(self, key: str, blob: bytes) -> None:
        path = self._path(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only or full cache folder only costs speed


def parse_task(domain: str, problem: str) -> Any:
    """The parsed, normalised PDDL task exactly as `fast_downward.pddl2sas` returns it (the
    translation to SAS reads the task without changing it)."""
    saved_argv = list(sys.argv)
    # fast_downward's `options` module parses sys.argv when first imported (as pddl2sas does)
    sys.argv[:] = ["translate.py", "domain", "task"]
    try:
        from fast_downward.translate import normalize
        from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions

        with contextlib.redirect_stdout(io.StringIO()):  # its warnings, silenced as pddl2sas does
            task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                                lisp_parser.parse_nested_list(problem.split("\n")))
            normalize.normalize(task)
    finally:
        sys.argv[:] = saved_argv
    return task
