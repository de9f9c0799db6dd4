"""The TextWorld speed-ups (memrl_envs/alfworld/speedups.py) change nothing a game shows: the same
games played with and without them (and with a warm on-disk translation cache, in a new
process) give identical observations, admissible commands, expert plans and outcomes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_paths import ALFWORLD


pytestmark = [pytest.mark.serial,  # times or samples the host: runs alone (Makefile, test)
              pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")]

# Plays the first N valid_seen games twice each (the second time from the translation cache),
# mixing expert actions, admissible commands and a command TextWorld does not know.
PLAYER = r"""
import glob, hashlib, json, random, sys, time
from memrl_envs.alfworld import speedups
from memrl_envs.alfworld.game import AlfworldGame
n_games, n_steps, sas_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if sas_dir != "-":
    speedups.set_disk_dir(sas_dir)
files = sorted(glob.glob(sys.argv[4] + "/json_2.1.1/valid_seen/*/*/game.tw-pddl"))[:n_games]
rows, step_s, steps = [], 0.0, 0
for f in files:
    for rep in range(2):
        random.seed(rep)  # the handcoded expert draws from the global generator
        game = AlfworldGame(f, max_env_steps=n_steps + 5, with_expert=True)
        obs, infos = game.reset()
        rows.append([obs, sorted(infos["admissible_commands"]), infos["extra.expert_plan"]])
        for k in range(n_steps):
            cmds = sorted(infos["admissible_commands"])
            act = infos["extra.expert_plan"][0] if k % 3 else (cmds[(7 * k) % len(cmds)] if k % 2 else "jump around")
            t = time.perf_counter()
            obs, won, done, infos = game.step(act)
            step_s += time.perf_counter() - t
            steps += 1
            rows.append([act, obs, won, done, sorted(infos["admissible_commands"]), infos["extra.expert_plan"]])
            if done:
                break
        game.close()
cache = speedups.sas_cache()
print(json.dumps({"digest": hashlib.sha256(json.dumps(rows).encode()).hexdigest(), "rows": len(rows),
                  "speedups": speedups.installed(), "step_ms": 1000 * step_s / max(steps, 1),
                  "sas": None if cache is None else [cache.memory_hits, cache.disk_hits, cache.misses]}))
"""


def _play(tmp_path: Path, speedups: bool, sas_dir: Path | None, n_games: int = 2, n_steps: int = 12) -> dict:
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_ALFWORLD_SPEEDUPS="1" if speedups else "0")
    out = subprocess.run([sys.executable, "-c", PLAYER, str(n_games), str(n_steps),
                          str(sas_dir) if sas_dir else "-", str(ALFWORLD)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_speedups_change_no_observation(tmp_path):
    sas_dir = tmp_path / "sas"
    plain = _play(tmp_path, speedups=False, sas_dir=None)
    cold = _play(tmp_path, speedups=True, sas_dir=sas_dir)
    warm = _play(tmp_path, speedups=True, sas_dir=sas_dir)  # a new process: translations from disk
    assert plain["speedups"] is False and cold["speedups"] is True
    assert plain["rows"] > 20
    assert cold["digest"] == plain["digest"] and warm["digest"] == plain["digest"]
    # cold: each game translated once (plain + optimised: 2 misses) when first loaded; its
    # reset reuses the loaded state; the replay's load hits memory (2 hits). warm: from disk.
    assert cold["sas"] == [4, 0, 4] and warm["sas"] == [4, 4, 0]
    assert len(list(sas_dir.rglob("*.sas.z"))) == 4
    assert warm["step_ms"] < plain["step_ms"] / 2  # the point of it (typically ~10x)


def test_disk_cache_survives_damage_and_rebuilds_the_task(tmp_path):
    """A damaged cache file is translated again; a disk hit equals a translation."""
    pytest.importorskip("fast_downward")
    import pickle  # only to compare the parsed tasks

    from memrl_envs.alfworld import speedups

    game = next((ALFWORLD / "json_2.1.1" / "valid_seen").glob("*/*/game.tw-pddl"))
    data = json.loads(game.read_text())
    calls: list[bool] = []

    def translate(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        import fast_downward

        calls.append(optimize)
        saved = list(sys.argv)
        try:
            return fast_downward.interface.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
        finally:
            sys.argv[:] = saved

    first = speedups.SasCache(translate, max_entries=4, disk_dir=tmp_path)
    task, sas = first(data["pddl_domain"], data["pddl_problem"])
    again = speedups.SasCache(translate, max_entries=4, disk_dir=tmp_path)  # a new process
    task2, sas2 = again(data["pddl_domain"], data["pddl_problem"])
    assert calls == [False] and (again.disk_hits, again.misses) == (1, 0)
    assert sas2 == sas and pickle.dumps(task2) == pickle.dumps(task)
    for path in tmp_path.rglob("*.sas.z"):
        path.write_bytes(b"not zlib")
    third = speedups.SasCache(translate, max_entries=4, disk_dir=tmp_path)
    assert third(data["pddl_domain"], data["pddl_problem"])[1] == sas
    assert calls == [False, False] and third.misses == 1
