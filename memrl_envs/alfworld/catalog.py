"""Where ALFWorld games live on disk, which ones count, and their cached intents.

A split folder (``$ALFWORLD_DATA/json_2.1.1/<split>``) holds ``<task>/<trial>/`` folders
with ``game.tw-pddl`` and ``traj_data.json``. The games kept are the ones ALFWorld's
``AlfredTWEnv`` keeps: a known task type, not a "movable"/"Sliced" variant, and marked
solvable in the game file.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.core.cachedir import default_cache_dir
from memrl.core.records import write_json_atomic
from memrl_envs.alfworld.settings import SPLITS

# ALFWorld task family (folder prefix) -> the short name used by the ReAct prompt keys.
TASK_TYPES = {
    "pick_and_place_simple": "put",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "look_at_obj_in_light": "examine",
    "pick_two_obj_and_place": "puttwo",
}

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
DATA_HINT = "run `make data-alfworld` (or `alfworld-download`) and point ALFWORLD_DATA at it"


@dataclass(frozen=True)
class GameEntry:
    task_id: str  # trial folder relative to the split folder, posix
    game_file: Path
    family: str  # e.g. pick_two_obj_and_place
    problem: str | None = None  # why the folder cannot be played (a damaged download)

    @property
    def task_type(self) -> str:
        return TASK_TYPES[self.family]


def task_family(task_id: str) -> str:
    """The task family of a task id ("pick_two_obj_and_place-Newspaper-...-224/trial_...")."""
    prefix = task_id.split("/", 1)[0].split("-", 1)[0]
    if prefix not in TASK_TYPES:
        raise ValueError(f"unknown ALFWorld task type {prefix!r} in task id {task_id!r}")
    return prefix


def resolve_data_root(data_root: str | os.PathLike[str]) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(data_root)))).resolve()


def split_folder(data_root: Path, split: str) -> Path:
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {sorted(SPLITS)}")
    folder = data_root / "json_2.1.1" / split
    if not folder.is_dir():
        raise ValueError(f"ALFWorld split folder {folder} does not exist: {DATA_HINT}")
    return folder


def candidate_games(split_dir: Path) -> list[GameEntry]:
    """Trial folders of a known task type, sorted by task id (cheap: no parsing). A folder
    that lacks its game file is listed with its `problem` (it keeps its place in the order,
    so a damaged download never lets another game take its place in `max_tasks`)."""
    found = []
    for traj in split_dir.glob(f"*/*/{TRAJ_FILE}"):
        trial = traj.parent
        task_id = trial.relative_to(split_dir).as_posix()
        if "movable" in task_id or "Sliced" in task_id:
            continue
        game = trial / GAME_FILE
        prefix = task_id.split("-", 1)[0]
        if prefix not in TASK_TYPES:
            continue
        problem = None if game.is_file() else f"no {GAME_FILE} in {trial} (a damaged download?)"
        found.append(GameEntry(task_id=task_id, game_file=game, family=prefix, problem=problem))
    found.sort(key=lambda e: e.task_id)
    return found


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class GameInfoCache:
    """A JSON file mapping a game file's sha256 to facts computed from it (solvable, intent).

    Safe to share between processes: writes go through a unique temp file and a rename,
    merging what another process may have written meanwhile.
    """

    VERSION = 1

    def __init__(self, cache_dir: str | os.PathLike[str] | None) -> None:
        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.path = folder / f"alfworld_games_v{self.VERSION}.json"
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = self._read()
        self._dirty = False

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._data.get(key, {}))

    def update(self, key: str, **values: Any) -> None:
        with self._lock:
            self._data.setdefault(key, {}).update(values)
            self._dirty = True

    def save(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            merged = self._read()
            for key, values in self._data.items():
                merged.setdefault(key, {}).update(values)
            write_json_atomic(self.path, merged, indent=None)
            self._data = merged
            self._dirty = False


def is_solvable(game_file: Path, cache: GameInfoCache, digest: str) -> bool:
    known = cache.get(digest)
    if "solvable" in known:
        return bool(known["solvable"])
    with open(game_file, encoding="utf-8") as fh:
        solvable = bool(json.load(fh).get("solvable", False))
    cache.update(digest, solvable=solvable)
    return solvable
