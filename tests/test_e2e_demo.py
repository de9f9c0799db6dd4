"""The demo's effect, end to end on real ALFWorld games with the real embedded model at
temperature 0 (`python -m memrl.demo`, the flow behind `make demo`): ALFWorld's expert plays
the games once and becomes a teacher bank; the embedded model then plays them with MemRL and
RAG on that bank and with no memory.

The games (valid_seen) are chosen for a robust margin: three short games whose expert
trajectories (4-5 steps) the model copies step for step when given them, so with memory it
solves them and without memory it solves none; and two it cannot solve by copying within
the 8-step cap: one the expert itself failed (50 steps) and one the expert needed 41 steps for.
The assertions are the issue's: memory solves strictly more games than no memory, and the
MemRL bank's Q separates teacher memories that led to success from those that did not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.rundir import RunDir

ALFWORLD = Path(__file__).resolve().parents[2] / "shared" / "data" / "alfworld"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}"),
]

COPYABLE = [  # expert solves in 5, 5, 4 steps
    "look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
    "look_at_obj_in_light-Laptop-None-DeskLamp-328/trial_T20190908_201550_622420",
    "look_at_obj_in_light-Statue-None-DeskLamp-216/trial_T20190909_193045_208933",
]
NOT_COPYABLE = [  # expert fails (50 steps); expert needs 41 steps
    "look_at_obj_in_light-Bowl-None-DeskLamp-301/trial_T20190909_150719_492274",
    "look_at_obj_in_light-Vase-None-DeskLamp-303/trial_T20190907_150418_457594",
]
GAMES = COPYABLE + NOT_COPYABLE


def test_teacher_bank_makes_the_embedded_model_solve_more_and_memrl_learns_which_memories_help(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(tmp_path / "cache"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    cmd = [sys.executable, "-m", "memrl.demo", "--out", str(out), "--bench-prompts", "0",
           "env.max_tasks=null", f"env.task_ids=[{','.join(GAMES)}]", "env.max_steps=8",
           "runner.epochs=2", "runner.progress=false"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads((out / "demo.json").read_text())
    assert sorted(res["games"]) == sorted(GAMES) and res["teacher"]["solved"] == 4  # the expert fails Bowl-301
    teacher_rows = RunDir(out / "teacher").episodes.read_text().splitlines()
    assert len(teacher_rows) == len(GAMES)  # one pass, whatever the students' epochs
    assert len(res["teacher_memories"]) == len(GAMES)

    solved = {m: round(sr[-1] * len(GAMES)) for m, sr in res["sr"].items()}
    assert solved["none"] < solved["rag"] and solved["none"] < solved["memrl"], solved
    assert solved["rag"] >= 2 and solved["memrl"] >= 2, solved  # a margin of more than one game
    first = {m: round(sr[0] * len(GAMES)) for m, sr in res["sr"].items()}
    assert first["none"] == solved["none"]  # no memory, temperature 0: every epoch the same

    # Copying is what the memory does: given the game's teacher memory, most steps are the teacher's
    with_teacher = res["copy_accuracy"]["rag"]["1"]["with_teacher"]
    assert with_teacher["episodes"] == len(GAMES) and with_teacher["accuracy"] > 0.5
    assert with_teacher["replays"] >= 2

    # MemRL's Q separates the teacher memories that led to success from those that did not:
    # those only ever given in solved episodes end above 0, those only in failed ones below,
    # and the copyable games' own memories are among the first
    used = {q["task_id"]: q for q in res["teacher_memories"] if q["movement"] != "unused"}
    helped = {t for t, q in used.items() if q["used_solved"] and not q["used_failed"]}
    hurt = {t for t, q in used.items() if q["used_failed"] and not q["used_solved"]}
    assert helped and hurt, used
    assert min(used[t]["q"] for t in helped) > 0 > max(used[t]["q"] for t in hurt)
    assert len(helped & set(COPYABLE)) >= 2 and not hurt & set(COPYABLE[:2]), used
    assert set(NOT_COPYABLE) <= hurt | {t for t, q in used.items() if q["q"] < 0}, used

    # everything lands in the run folder and in the report
    for name in ("demo.md", "demo.png", "report/demo.md", "report/comparisons.md", "teacher/run_card.json"):
        assert (out / name).is_file(), name
    text = (out / "demo.md").read_text()
    assert "McNemar" in text and "Copy accuracy" in text and "Q after the run" in text
    assert "memrl vs none" in text
